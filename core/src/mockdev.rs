//! A **mock** GPU for tests on machines without one: address ranges a test
//! declares "device memory of GPU `ordinal`", served by a [`Backend`] the test
//! supplies (the staging tests use pages mapped `PROT_NONE` and reached only
//! through `/proc/self/mem`, standing in for a DMA engine), with the facts the
//! GPUDirect decision needs about that GPU ([`MockGpu`]: compute capability,
//! GPUDirect RDMA and DMA-BUF support, PCI path) and a stand-in DMA-BUF file
//! descriptor (a `memfd`) where NCCL would call `cuMemGetHandleForAddressRange`.
//!
//! Nothing here is used unless a test calls [`declare`]: the lookups in the
//! enqueue path cost one relaxed atomic load otherwise. Real devices are
//! classified by the CUDA driver (`ferroccl_kernels::memory_space`), and the
//! mock is consulted first only for the ranges it was given.

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use ferroccl_kernels::Backend;

/// What the GPUDirect decision knows about a (mock) GPU; the real driver's
/// answers come from `cuDeviceGetAttribute` / `cuDeviceGetPCIBusId`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockGpu {
    /// Device ordinal (as `MemorySpace::Device { ordinal }`).
    pub ordinal: usize,
    /// Compute capability, `major * 10 + minor` (decides `NCCL_NET_GDR_READ`'s
    /// default and the receive flush, as NCCL's `ncclTopoNeedFlush`).
    pub cuda_cc: i32,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`.
    pub gdr: bool,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
    pub dmabuf: bool,
    /// sysfs PCI path of the GPU (`/sys/devices/pci0000:00/…/0000:3b:00.0`);
    /// compared with the NIC's `pciPath` for `NCCL_NET_GDR_LEVEL`. `None`: the
    /// GPU hangs off the CPU (as a NIC without a PCI path does in NCCL).
    pub pci_path: Option<String>,
}

struct Range {
    start: usize,
    len: usize,
    backend: &'static dyn Backend,
    gpu: MockGpu,
    /// `backend` runs every `*_raw` operation (not only copies) on this memory
    /// and on host memory page-locked through `ferroccl_kernels::hostreg`.
    kernels: bool,
}

static ANY: AtomicBool = AtomicBool::new(false);
static RANGES: RwLock<Vec<Range>> = RwLock::new(Vec::new());

/// Declares `[ptr, ptr + len)` device memory of the mock GPU `gpu` for the whole
/// process, reached only through `backend` (`Backend::copy_raw`). Later
/// enqueues classify buffers inside it as `MemorySpace::Device`.
/// The executor stages such memory through host bounce buffers.
pub fn declare(ptr: *const u8, len: usize, backend: &'static dyn Backend, gpu: MockGpu) {
    push(ptr, len, backend, gpu, false);
}

/// [`declare`] for a `backend` that runs every `*_raw` operation (reduce,
/// pre-op, post-op, copy) on this memory and on host memory registered through
/// `ferroccl_kernels::hostreg`, as a GPU's kernels do: the executor then runs
/// steps touching it on `backend` (reading and writing registered FIFOs
/// directly) instead of staging them.
pub fn declare_kernels(ptr: *const u8, len: usize, backend: &'static dyn Backend, gpu: MockGpu) {
    push(ptr, len, backend, gpu, true);
}

fn push(ptr: *const u8, len: usize, backend: &'static dyn Backend, gpu: MockGpu, kernels: bool) {
    let mut r = RANGES.write().unwrap_or_else(|e| e.into_inner());
    r.push(Range {
        start: ptr as usize,
        len,
        backend,
        gpu,
        kernels,
    });
    ANY.store(true, Ordering::Release);
}

/// Whether `[ptr, ptr + len)` lies inside a declared range.
pub fn contains(ptr: *const u8, len: usize) -> bool {
    lookup(ptr, len).is_some()
}

/// Forgets the range that starts at `ptr` (call before unmapping it).
pub fn forget(ptr: *const u8) {
    let mut r = RANGES.write().unwrap_or_else(|e| e.into_inner());
    r.retain(|x| x.start != ptr as usize);
    ANY.store(!r.is_empty(), Ordering::Release);
}

/// The declared range holding `[ptr, ptr + len)`: `(range start, backend, gpu)`.
pub(crate) fn lookup(ptr: *const u8, len: usize) -> Option<(usize, &'static dyn Backend, MockGpu)> {
    lookup_full(ptr, len).map(|(s, b, g, _)| (s, b, g))
}

/// [`lookup`], with whether the range's backend runs kernels ([`declare_kernels`]).
pub(crate) fn lookup_full(ptr: *const u8, len: usize) -> Option<(usize, &'static dyn Backend, MockGpu, bool)> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let a = ptr as usize;
    let r = RANGES.read().unwrap_or_else(|e| e.into_inner());
    r.iter()
        .find(|x| x.start <= a && a.saturating_add(len) <= x.start + x.len)
        .map(|x| (x.start, x.backend, x.gpu.clone(), x.kernels))
}

/// The facts of mock GPU `ordinal`, when some declared range belongs to it.
pub(crate) fn gpu(ordinal: usize) -> Option<MockGpu> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let r = RANGES.read().unwrap_or_else(|e| e.into_inner());
    r.iter().find(|x| x.gpu.ordinal == ordinal).map(|x| x.gpu.clone())
}

/// A stand-in DMA-BUF descriptor for `[ptr, ptr + len)` of a declared range:
/// a fresh `memfd` and the offset of `ptr` from the range's start (where the
/// driver gives a DMA-BUF of the allocation and the offset into it). `None`
/// when `ptr` is not mock memory.
pub(crate) fn dmabuf_fd(ptr: *const u8, len: usize) -> Option<std::io::Result<(OwnedFd, u64)>> {
    let (start, ..) = lookup(ptr, len)?;
    // SAFETY: memfd_create with a NUL-terminated name and no flags we do not own.
    let fd = unsafe { libc::memfd_create(c"ferroccl-mock-dmabuf".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Some(Err(std::io::Error::last_os_error()));
    }
    // SAFETY: a descriptor just created for us to own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    Some(Ok((fd, (ptr as usize - start) as u64)))
}
