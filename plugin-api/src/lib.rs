//! `ferroccl-plugin-api`: NCCL 2.30.7's plugin C ABI in Rust, and an SDK for
//! writing plugins in safe Rust.
//!
//! * [`abi`] — `#[repr(C)]` definitions of every supported vtable version
//!   (`ncclNet_v6` … `ncclNet_v12`, `ncclCollNet_v6` … `_v12`, `ncclTuner_v2` … `_v6`,
//!   `ncclProfiler_v1` … `_v6`, `ncclEnv_v1`/`_v2`), their structs and constants,
//!   each size and offset pinned by `const` assertions against the tables in
//!   `docs/reference/nccl-plugin-abi.md`.
//! * [`sdk`] — the safe [`sdk::Net`] trait with the newest (v12) semantics, and
//!   [`export_net_plugin!`] which emits every versioned `ncclNetPlugin_vN` symbol
//!   from one implementation.
//! * [`log`] — calling NCCL's C-variadic logger from Rust.
//! * [`params`](mod@params) — `NCCL_*` parameters declared one line each
//!   ([`params!`]), and their export to a host ([`export_params!`]).

pub mod abi;
pub mod export;
pub mod log;
pub mod params;
pub mod sdk;

pub use sdk::{NetError, NetResult};
