//! The host functions of NCCL 2.30.7's device API (`nccl_device.h` and its
//! `nccl_device/*.h`, implemented in `src/dev_runtime.cc`): device
//! communicators, their properties and the window pointers device kernels use.
//! ferroccl has no device-initiated communication, so each returns
//! `ncclInvalidUsage` with a WARN line naming it, never a crash.
//!
//! They are exported because frameworks link them: PyTorch 2.11's
//! `libtorch_cuda.so` needs `ncclDevCommCreate` and `ncclDevCommDestroy` to
//! load at all (found with `nm -D --undefined-only` on the GPU machine,
//! BENCHMARKS §11). They are not in `nccl.h` (cbindgen reads only
//! `exports.rs`), as in NCCL, whose `nccl.h` leaves them to the device headers.
//! The structs they take (`ncclDevCommRequirements`, `ncclDevComm`,
//! `ncclCommProperties`) are never read here, so they are opaque pointers.
#![allow(non_snake_case, unused_variables, clippy::missing_safety_doc)]

use std::ffi::{c_int, c_void};

use crate::abi::{ncclComm_t, ncclResult_t, ncclWindow_t};
use crate::unimplemented::missing;

/// Declares `name` and its `pnccl` alias as not implemented.
macro_rules! device_api {
    ($($name:ident / $pname:ident ($($arg:ident: $ty:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($name), "` of NCCL's device API: not implemented by ferroccl, `ncclInvalidUsage` with a WARN line.")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> ncclResult_t {
            missing(stringify!($name))
        }
        #[doc = concat!("`", stringify!($pname), "`: the profiling name of `", stringify!($name), "`.")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $pname($($arg: $ty),*) -> ncclResult_t {
            missing(stringify!($name))
        }
    )*};
}

device_api! {
    ncclCommQueryProperties / pncclCommQueryProperties(comm: ncclComm_t, props: *mut c_void);
    ncclDevCommCreate / pncclDevCommCreate(comm: ncclComm_t, reqs: *const c_void, outDevComm: *mut c_void);
    ncclDevCommDestroy / pncclDevCommDestroy(comm: ncclComm_t, devComm: *const c_void);
    ncclGetLsaMultimemDevicePointer / pncclGetLsaMultimemDevicePointer(window: ncclWindow_t, offset: usize, outPtr: *mut *mut c_void);
    ncclGetLsaDevicePointer / pncclGetLsaDevicePointer(window: ncclWindow_t, offset: usize, lsaRank: c_int, outPtr: *mut *mut c_void);
}
