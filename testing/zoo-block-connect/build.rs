//! Builds conformance/zoo/zoo_net.c with ZOO_FAULT_BLOCK_CONNECT.
include!("../../conformance/zoo/build_zoo.rs");

fn main() {
    build_zoo("BLOCK_CONNECT");
}
