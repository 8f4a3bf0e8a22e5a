//! Conformance zoo plugin: the correct control plugin (no fault).
//! Built from conformance/zoo/zoo_net.c with `ZOO_FAULT_NONE`.
include!("../../../conformance/zoo/zoo_export.rs");
