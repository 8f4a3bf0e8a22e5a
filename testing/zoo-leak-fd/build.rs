//! Builds conformance/zoo/zoo_net.c with ZOO_FAULT_LEAK_FD.
include!("../../conformance/zoo/build_zoo.rs");

fn main() {
    build_zoo("LEAK_FD");
}
