//! Builds conformance/zoo/zoo_net.c with ZOO_FAULT_NULL_NAME.
include!("../../conformance/zoo/build_zoo.rs");

fn main() {
    build_zoo("NULL_NAME");
}
