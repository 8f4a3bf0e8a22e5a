//! Conformance zoo plugin: flips one byte past 1 MiB of received messages.
//! Built from conformance/zoo/zoo_net.c with `ZOO_FAULT_CORRUPT`.
include!("../../../conformance/zoo/zoo_export.rs");
