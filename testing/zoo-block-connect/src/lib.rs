//! Conformance zoo plugin: connect blocks waiting for a reply only accept sends.
//! Built from conformance/zoo/zoo_net.c with `ZOO_FAULT_BLOCK_CONNECT`.
include!("../../../conformance/zoo/zoo_export.rs");
