//! Conformance zoo plugin: incoming messages land in the newest posted receive.
//! Built from conformance/zoo/zoo_net.c with `ZOO_FAULT_REORDER`.
include!("../../../conformance/zoo/zoo_export.rs");
