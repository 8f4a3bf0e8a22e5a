//! Builds conformance/zoo/zoo_net.c with ZOO_FAULT_REORDER.
include!("../../conformance/zoo/build_zoo.rs");

fn main() {
    build_zoo("REORDER");
}
