//! Conformance zoo plugin: test reports the posted receive size instead of the true size.
//! Built from conformance/zoo/zoo_net.c with `ZOO_FAULT_WRONG_SIZES`.
include!("../../../conformance/zoo/zoo_export.rs");
