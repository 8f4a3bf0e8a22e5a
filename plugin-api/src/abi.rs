//! NCCL 2.30.7 plugin C ABI: `#[repr(C)]` vtables, structs and constants for
//! the net, collnet, tuner, profiler and env plugin APIs, exactly as laid out in
//! `docs/reference/nccl-plugin-abi.md` §1–§4 (x86-64 / aarch64 Linux, LP64).
//!
//! Every struct's size and every field's offset (vtable slots included) is pinned
//! by a `const` assertion next to its definition, so a layout mistake is a
//! compile error. C enums whose values can come from C (`ncclResult_t`,
//! `ncclDataType_t`, `ncclRedOp_t`, `ncclFunc_t`, …) are `#[repr(transparent)]`
//! wrappers of `i32` with associated constants, never Rust enums, so an unknown
//! value is not undefined behaviour. Vtable slots are
//! `Option<unsafe extern "C" fn(..) -> ncclResult_t>` (`None` ⇔ NULL).
//!
//! Everything is re-exported flat from this module; the submodules only group
//! the definitions by plugin API.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

mod collnet;
mod common;
mod env;
mod gin;
mod net;
mod profiler;
mod rma;
mod tuner;

pub use collnet::*;
pub use common::*;
pub use env::*;
pub use gin::*;
pub use net::*;
pub use profiler::*;
pub use rma::*;
pub use tuner::*;
