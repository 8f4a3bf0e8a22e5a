//! Conformance zoo plugin: the vtable name is NULL.
//! Built from conformance/zoo/zoo_net.c with `ZOO_FAULT_NULL_NAME`.
include!("../../../conformance/zoo/zoo_export.rs");
