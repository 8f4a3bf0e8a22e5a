//! Device and pinned host allocations (for tests, the conformance suite's GPU
//! checks, and the executor's staging FIFOs).

use std::ffi::c_void;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUmemRangeHandleType};
use cudarc::driver::{CudaContext, result};

use super::{driver, guard};
use crate::KernelError;

/// `cuMemAlloc`ed device memory of one device, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer {
    ctx: Arc<CudaContext>,
    ordinal: usize,
    ptr: sys::CUdeviceptr,
    len: usize,
}

// SAFETY: a device address and a shared context handle; the driver API is
// thread-safe and every call binds the context first.
unsafe impl Send for DeviceBuffer {}
// SAFETY: as above; `&self` methods only read device memory or query it.
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    /// `len` bytes (at least 1 is allocated) of device memory on `ordinal`,
    /// uninitialised. Errors: [`KernelError::NoCuda`], [`KernelError::Cuda`].
    pub fn alloc(ordinal: usize, len: usize) -> Result<DeviceBuffer, KernelError> {
        let ctx = driver::context(ordinal)?;
        // SAFETY: the context is current; the size is non-zero.
        let ptr = guard::call("cuMemAlloc", || unsafe { result::malloc_sync(len.max(1)) })?;
        Ok(DeviceBuffer { ctx, ordinal, ptr, len })
    }

    /// The device address (unified addressing: a pointer value the host must
    /// never dereference).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    fn range(&self, offset: usize, n: usize) -> Result<sys::CUdeviceptr, KernelError> {
        if offset.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(KernelError::LengthMismatch {
                what: "device range end",
                expected: self.len,
                found: offset.saturating_add(n),
            });
        }
        Ok(self.ptr + offset as u64)
    }

    /// Copies `src` to the device at `offset`; the bytes are in device memory
    /// when this returns, so work on any stream (the kernels' non-blocking
    /// stream included) that starts afterwards reads them.
    ///
    /// `cuMemcpyHtoD` alone does not promise that: from pageable host memory
    /// it "will return once the pageable buffer has been copied to the staging
    /// memory for DMA transfer to device memory, but the DMA to final
    /// destination may not have completed" (CUDA Driver API, "API
    /// synchronization behavior"), and that DMA runs on the legacy default
    /// stream, which a `CU_STREAM_NON_BLOCKING` stream does not wait for. A
    /// kernel launched right after could read the buffer before the DMA landed
    /// (or have its result overwritten by it): on an H200 an in-place reduction
    /// of a buffer uploaded just before gave wrong results at 1 and 2 MiB
    /// (issue 28). So the legacy stream is synchronized after the copy.
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<(), KernelError> {
        let at = self.range(offset, src.len())?;
        guard::call("cuCtxSetCurrent", || self.ctx.bind_to_thread())?;
        // SAFETY: the range was checked to lie inside this allocation.
        guard::call("cuMemcpyHtoD", || unsafe { result::memcpy_htod_sync(at, src) })?;
        guard::call("cuStreamSynchronize(legacy default stream)", || {
            // SAFETY: the NULL stream is the legacy default stream of the
            // current context (bound above); it is never destroyed.
            unsafe { result::stream::synchronize(std::ptr::null_mut()) }
        })
    }

    /// Copies device bytes at `offset` into `dst` (synchronous `cuMemcpyDtoH`
    /// on the legacy default stream). Not ordered after work on non-blocking
    /// streams: synchronize the stream that wrote the bytes first (the
    /// [`Backend`](crate::Backend) methods return only after their kernels ran).
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), KernelError> {
        let at = self.range(offset, dst.len())?;
        guard::call("cuCtxSetCurrent", || self.ctx.bind_to_thread())?;
        // SAFETY: the range was checked to lie inside this allocation.
        guard::call("cuMemcpyDtoH", || unsafe { result::memcpy_dtoh_sync(dst, at) })
    }

    /// A DMA-BUF file descriptor for the first `len` bytes (rounded up to the
    /// host page size, as the driver requires), as NCCL gets one for
    /// `regMrDmaBuf` (`cuMemGetHandleForAddressRange(...,
    /// CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0)` in `src/transport/net.cc`
    /// `sendProxyConnect`/`recvProxyConnect`). Errors: [`KernelError::Cuda`]
    /// (`CUDA_ERROR_NOT_SUPPORTED` where the kernel or driver lacks DMA-BUF).
    pub fn dmabuf_fd(&self, len: usize) -> Result<OwnedFd, KernelError> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .unwrap_or(4096)
            .max(1);
        let size = len.div_ceil(page) * page;
        self.range(0, size.min(self.len))?;
        guard::call("cuCtxSetCurrent", || self.ctx.bind_to_thread())?;
        let mut fd: i32 = -1;
        guard::call("cuMemGetHandleForAddressRange", || {
            // SAFETY: `fd` receives an int; the range starts at an allocation's
            // base (page aligned) and is page-sized.
            unsafe {
                sys::cuMemGetHandleForAddressRange(
                    (&mut fd as *mut i32).cast::<c_void>(),
                    self.ptr,
                    size,
                    CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                    0,
                )
            }
            .result()
        })?;
        if fd < 0 {
            return Err(KernelError::Cuda {
                call: "cuMemGetHandleForAddressRange",
                message: format!("returned success with fd {fd}"),
            });
        }
        // SAFETY: the driver just created this descriptor for us to own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let _ = guard::call("cuCtxSetCurrent", || self.ctx.bind_to_thread());
        // SAFETY: allocated by `alloc` with this context, freed once.
        let _ = guard::call("cuMemFree", || unsafe { result::free_sync(self.ptr) });
    }
}

/// Page-locked host memory (`cuMemAllocHost`): host-accessible, and reachable
/// from every device through unified addressing. Zeroed; freed on drop.
#[derive(Debug)]
pub struct PinnedBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: owned host memory; access goes through `&self`/`&mut self`.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared access only reads.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// `len` zeroed bytes of pinned memory, mapped for device `ordinal`'s
    /// context. Errors: [`KernelError::NoCuda`], [`KernelError::Cuda`].
    pub fn alloc(ordinal: usize, len: usize) -> Result<PinnedBuffer, KernelError> {
        let _ctx = driver::context(ordinal)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        guard::call("cuMemAllocHost", || {
            // SAFETY: one out-pointer; the context is current; size non-zero.
            unsafe { sys::cuMemAllocHost_v2(&mut p, len.max(1)) }.result()
        })?;
        // SAFETY: the allocation has at least `len` bytes.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, len) };
        Ok(PinnedBuffer { ptr: p.cast(), len })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes owned by this buffer.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        let _ = guard::call("cuMemFreeHost", || {
            // SAFETY: allocated by cuMemAllocHost, freed once.
            unsafe { sys::cuMemFreeHost(self.ptr.cast()) }.result()
        });
    }
}
