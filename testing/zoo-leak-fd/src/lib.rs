//! Conformance zoo plugin: closeSend/closeRecv never close their socket.
//! Built from conformance/zoo/zoo_net.c with `ZOO_FAULT_LEAK_FD`.
include!("../../../conformance/zoo/zoo_export.rs");
