//! Builds conformance/zoo/zoo_net.c with ZOO_FAULT_WRONG_SIZES.
include!("../../conformance/zoo/build_zoo.rs");

fn main() {
    build_zoo("WRONG_SIZES");
}
