//! `libnccl.so.2`: NCCL's C API (NCCL 2.30.7 `src/nccl.h.in`) over the ferroccl
//! runtime, so programs built against `nccl.h` run on ferroccl unchanged.
//!
//! * [`abi`]: the header's types with their C layout; [`enums`]: its enums;
//!   [`exports`]: every function under its `nccl` and `pnccl` names. `build.rs`
//!   generates `nccl.h` from these with cbindgen and gives the library the soname
//!   `libnccl.so.2`; `cargo xtask dist` installs both.
//! * Communicators are handles looked up in a registry (`handles`): a
//!   `ncclComm_t` that was destroyed, aborted or never made is an
//!   `ncclInvalidArgument` naming it, never a dangling pointer.
//! * Every call runs under `api::guard`: a panic becomes `ncclInternalError`,
//!   every error is logged (`NCCL_DEBUG=WARN`) and kept for `ncclGetLastError`.
//! * Streams: with CUDA present, a `cudaStream_t` orders the operation on that
//!   stream through the runtime's device-stream seam (`ferroccl::stream`,
//!   `cuLaunchHostFunc`), as NCCL's kernel launch does. The NULL stream with
//!   host memory is a ferroccl extension for machines without a GPU: a call on
//!   a blocking communicator returns once the operation has completed (a group:
//!   at `ncclGroupEnd`); on a non-blocking communicator it returns
//!   `ncclInProgress`, and `ncclCommGetAsyncError` reports `ncclInProgress`
//!   until the operations have completed.
#![allow(non_camel_case_types)]

pub mod abi;
mod api;
mod colls;
mod comm;
mod config;
pub mod device_api;
pub mod enums;
pub mod exports;
mod group;
mod handles;
mod job;
mod mem;
mod rma;
mod unimplemented;

/// For the overhead benchmark (`examples/capi_overhead.rs`): the runtime's
/// communicator behind a `ncclComm_t` made by this library, so the Rust API and
/// the C API can be timed on the same communicator. `None` for a handle that is
/// not a live, initialized communicator.
#[doc(hidden)]
pub fn comm_of(comm: abi::ncclComm_t) -> Option<std::sync::Arc<ferroccl::Comm>> {
    handles::lookup(comm).and_then(|e| e.ready_comm())
}
