//! Builds conformance/zoo/zoo_net.c with ZOO_FAULT_HANG_PEER_DEATH.
include!("../../conformance/zoo/build_zoo.rs");

fn main() {
    build_zoo("HANG_PEER_DEATH");
}
