//! Host-written flags a CUDA stream waits on: how a stream ordered with
//! ferroccl's proxy thread waits for an operation without blocking a host
//! function (see `ferroccl::stream`).
//!
//! A flag word lives in page-locked host memory mapped into the device's
//! address space (`cuMemHostAlloc` with `CU_MEMHOSTALLOC_DEVICEMAP |
//! CU_MEMHOSTALLOC_PORTABLE`); the stream waits on it with
//! `cuStreamWaitValue32(..., CU_STREAM_WAIT_VALUE_EQ)` and the host releases the
//! stream with a plain store: no CUDA call, no thread blocked. NCCL never
//! blocks in a host function either: its host-side work on a caller's stream
//! is a `cudaLaunchHostFunc` callback that only hands the plan to the proxy
//! (`src/enqueue.cc`, `hostStreamPlanTask` / `hostStreamPlanCallback`), and
//! its kernels wait for the proxy on the device through host-mapped flags; CUDA
//! forbids CUDA calls in a host function and warns against blocking in one
//! (`cuLaunchHostFunc`'s documentation).

use std::ffi::c_void;

use cudarc::driver::sys;

use super::{driver, guard};
use crate::KernelError;

/// `n` 32-bit words (zeroed) of page-locked host memory mapped for every
/// context (`PORTABLE`) and device (`DEVICEMAP`): the host address and the
/// device address of the first word. The memory is never freed (flag pages are
/// pooled for the process by their user).
///
/// Errors: [`KernelError::NoCuda`]; [`KernelError::Cuda`] when the driver
/// refuses the allocation or the mapping.
pub fn alloc_host_flags(ordinal: usize, n: usize) -> Result<(*mut u32, u64), KernelError> {
    driver::context(ordinal)?;
    let bytes = n.max(1) * 4;
    let mut p: *mut c_void = std::ptr::null_mut();
    guard::call("cuMemHostAlloc", || {
        // SAFETY: one out-pointer; a current context; a non-zero size.
        unsafe {
            sys::cuMemHostAlloc(
                &mut p,
                bytes,
                sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
            )
        }
        .result()
    })?;
    // SAFETY: `bytes` bytes were just allocated at `p`.
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
    let mut dev: sys::CUdeviceptr = 0;
    guard::call("cuMemHostGetDevicePointer", || {
        // SAFETY: `p` is mapped host memory allocated above; flags must be 0.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, p, 0) }.result()
    })?;
    Ok((p.cast(), dev))
}

/// Makes `stream`'s later work wait until the 32-bit word at device address
/// `addr` (from [`alloc_host_flags`]) equals `value`
/// (`cuStreamWaitValue32(stream, addr, value, CU_STREAM_WAIT_VALUE_EQ)`).
/// Returns at once; nothing on the host blocks.
///
/// Errors: [`KernelError::NoCuda`]; [`KernelError::Cuda`] (`CUDA_ERROR_NOT_SUPPORTED`
/// where the device lacks stream memory operations).
///
/// # Safety
/// `stream` must be a live `CUstream` of device `ordinal` (or NULL), and
/// `addr` a mapped flag word that stays allocated.
pub unsafe fn stream_wait_value32(
    ordinal: usize,
    stream: *mut c_void,
    addr: u64,
    value: u32,
) -> Result<(), KernelError> {
    driver::context(ordinal)?;
    guard::call("cuStreamWaitValue32", || {
        // SAFETY: a live stream and a mapped word (caller).
        unsafe {
            sys::cuStreamWaitValue32_v2(
                stream as sys::CUstream,
                addr,
                value,
                sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ as std::ffi::c_uint,
            )
        }
        .result()
    })
}
