//! Conformance zoo plugin: a dead peer is treated as 'no data yet' forever.
//! Built from conformance/zoo/zoo_net.c with `ZOO_FAULT_HANG_PEER_DEATH`.
include!("../../../conformance/zoo/zoo_export.rs");
