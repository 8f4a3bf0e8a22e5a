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
/// Inlined: without mock memory (every real run) this is one load where the
/// enqueue classifies each operation's buffers.
#[inline]
pub(crate) fn lookup_full(ptr: *const u8, len: usize) -> Option<(usize, &'static dyn Backend, MockGpu, bool)> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    lookup_declared(ptr, len)
}

/// [`lookup_full`] once some range is declared.
#[inline(never)]
fn lookup_declared(ptr: *const u8, len: usize) -> Option<(usize, &'static dyn Backend, MockGpu, bool)> {
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

/// GPUs a test binds communicators to (`CommConfig::cuda_dev`) without any
/// declared memory: the P2P transport then allocates its FIFOs as
/// [`P2pAlloc`]s (host memory standing in for device memory).
static P2P_GPUS: RwLock<Vec<MockGpu>> = RwLock::new(Vec::new());

/// Declares mock GPU `gpu` for the whole process: a communicator whose
/// `CommConfig::cuda_dev` is `gpu.ordinal` binds it (its bus id is the last
/// component of `gpu.pci_path`, else `0000:00:00.0` plus the ordinal), and the
/// P2P transport between ranks bound to mock GPUs allocates, exports and
/// imports its FIFOs through [`P2pAlloc`] instead of the CUDA driver.
pub fn declare_gpu(gpu: MockGpu) {
    let mut g = P2P_GPUS.write().unwrap_or_else(|e| e.into_inner());
    g.retain(|x| x.ordinal != gpu.ordinal);
    g.push(gpu);
}

/// The mock GPU `ordinal` declared with [`declare_gpu`].
pub(crate) fn bound_gpu(ordinal: usize) -> Option<MockGpu> {
    let g = P2P_GPUS.read().unwrap_or_else(|e| e.into_inner());
    g.iter().find(|x| x.ordinal == ordinal).cloned()
}

/// A mock "device allocation" of the P2P transport: a `memfd` mapped shared.
/// Its export (the 64 bytes a legacy `cuIpcGetMemHandle` gives) names the
/// owner's pid and descriptor; another process imports it by opening
/// `/proc/<pid>/fd/<fd>` (as the shared-memory transport reaches segments) and
/// maps the same pages, so bytes written through one mapping are read through
/// the other, as through a CUDA IPC mapping of one allocation.
#[derive(Debug)]
pub(crate) struct P2pAlloc {
    ptr: *mut u8,
    len: usize,
    /// The owner keeps its descriptor for importers; an import closes its own.
    _fd: Option<OwnedFd>,
}

// SAFETY: a shared mapping owned by this value; the address may move between threads.
unsafe impl Send for P2pAlloc {}
// SAFETY: as above; `&P2pAlloc` only hands out the address.
unsafe impl Sync for P2pAlloc {}

static EXIT_ON_IMPORT: AtomicBool = AtomicBool::new(false);

/// The mappings of every live [`P2pAlloc`] of this process (made or imported):
/// `(start, len)`.
/// `(start, len, alias)`: `alias` is where the mock GPU reaches the pages
/// (`start` itself unless [`protect_p2p_fifos`] made them inaccessible there).
static P2P_MAPS: RwLock<Vec<(usize, usize, usize)>> = RwLock::new(Vec::new());

/// Mock P2P FIFOs mapped from now on are inaccessible (`PROT_NONE`) at the
/// addresses the connectors and the executor see ([`protect_p2p_fifos`]).
static PROTECT: AtomicBool = AtomicBool::new(false);

/// Maps every mock P2P FIFO made or imported from now on `PROT_NONE` at the
/// address the transport hands out, as device memory is to the CPU: a CPU
/// access to a slot faults (the process dies), and only the mock GPU's copy
/// engine ([`fifo_engine`]) reaches the pages, through a second mapping.
/// For processes whose steps never run on mock kernels (those read FIFOs at
/// their own addresses).
pub fn protect_p2p_fifos() {
    PROTECT.store(true, Ordering::Release);
}

/// Where the mock GPU reaches `[ptr, ptr + len)` of a mock P2P FIFO: `ptr`
/// itself, or its address in the second mapping of a protected FIFO.
fn p2p_alias(ptr: *const u8, len: usize) -> Option<usize> {
    let a = ptr as usize;
    let m = P2P_MAPS.read().unwrap_or_else(|e| e.into_inner());
    m.iter()
        .find(|&&(s, l, _)| s <= a && a.saturating_add(len) <= s + l)
        .map(|&(s, _, alias)| alias + (a - s))
}

/// Whether `[ptr, ptr + len)` lies inside a mock P2P FIFO mapped in this
/// process (a [`declare_gpu`] GPU's allocation, made here or imported from a
/// peer): memory a mock GPU's kernels reach as their own, as a GPU reaches its
/// own and its peers' IPC-mapped memory.
pub fn p2p_contains(ptr: *const u8, len: usize) -> bool {
    let a = ptr as usize;
    let m = P2P_MAPS.read().unwrap_or_else(|e| e.into_inner());
    m.iter().any(|&(s, l, _)| s <= a && a.saturating_add(len) <= s + l)
}

/// Copies the mock GPUs' copy engine made between a mock P2P FIFO and host
/// memory ([`fifo_copy_count`]).
static FIFO_COPIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many copies between a mock P2P FIFO and host memory this process made
/// through [`fifo_engine`] (the executor's steps on host buffers over a P2P
/// connection: host to FIFO slot on the send side, FIFO slot to host on the
/// receive side).
pub fn fifo_copy_count() -> u64 {
    FIFO_COPIES.load(Ordering::Relaxed)
}

/// The mock GPUs' copy engine for their P2P FIFOs (what a CUDA device's copy
/// does between its memory, or a peer's it mapped, and page-locked host
/// memory): `copy_raw` only, between a mock P2P FIFO mapped in this process
/// ([`p2p_contains`]) and host memory outside every FIFO; anything else is
/// refused, so a step that handed it two host ranges or two FIFO ranges fails.
#[derive(Debug)]
pub(crate) struct FifoEngine;

static FIFO_ENGINE: FifoEngine = FifoEngine;

/// The copy engine of every mock GPU ([`FifoEngine`]).
pub(crate) fn fifo_engine() -> &'static dyn Backend {
    &FIFO_ENGINE
}

fn engine_only() -> ferroccl_kernels::KernelError {
    ferroccl_kernels::KernelError::NoCuda("mock GPU copy engine: raw copies only".into())
}

impl Backend for FifoEngine {
    fn name(&self) -> &'static str {
        "mock-gpu-copy-engine"
    }
    fn copy(&self, _: &mut [u8], _: &[u8]) -> Result<(), ferroccl_kernels::KernelError> {
        Err(engine_only())
    }
    fn reduce(
        &self,
        _: &mut [u8],
        _: &[u8],
        _: &[u8],
        _: &ferroccl_kernels::DevRedOp,
        _: ferroccl_kernels::Pre,
    ) -> Result<(), ferroccl_kernels::KernelError> {
        Err(engine_only())
    }
    fn reduce_inplace(
        &self,
        _: &mut [u8],
        _: &[u8],
        _: &ferroccl_kernels::DevRedOp,
        _: ferroccl_kernels::Pre,
    ) -> Result<(), ferroccl_kernels::KernelError> {
        Err(engine_only())
    }
    fn pre_op(
        &self,
        _: &mut [u8],
        _: &[u8],
        _: &ferroccl_kernels::DevRedOp,
    ) -> Result<(), ferroccl_kernels::KernelError> {
        Err(engine_only())
    }
    fn pre_op_inplace(
        &self,
        _: &mut [u8],
        _: &ferroccl_kernels::DevRedOp,
    ) -> Result<(), ferroccl_kernels::KernelError> {
        Err(engine_only())
    }
    fn post_op(&self, _: &mut [u8], _: &ferroccl_kernels::DevRedOp) -> Result<(), ferroccl_kernels::KernelError> {
        Err(engine_only())
    }
    unsafe fn copy_raw(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<(), ferroccl_kernels::KernelError> {
        if bytes == 0 {
            return Ok(());
        }
        let (d, s) = (p2p_contains(dst, bytes), p2p_contains(src, bytes));
        if d == s {
            return Err(ferroccl_kernels::KernelError::MemorySpaceMismatch {
                what: "copy",
                found: format!(
                    "{} to {}",
                    if s { "a P2P FIFO" } else { "host memory" },
                    if d { "a P2P FIFO" } else { "host memory" }
                ),
                first: "the mock GPU copy engine",
                expected: "a copy between a mock P2P FIFO and host memory".into(),
            });
        }
        FIFO_COPIES.fetch_add(1, Ordering::Relaxed);
        // The FIFO side through the pages' accessible mapping.
        let (dst, src) = if d {
            (p2p_alias(dst, bytes).map_or(dst, |a| a as *mut u8), src)
        } else {
            (dst, p2p_alias(src, bytes).map_or(src, |a| a as *const u8))
        };
        // SAFETY: the caller's contract: both ranges valid for `bytes` bytes
        // and disjoint (one is a FIFO mapping, the other is not); the FIFO is
        // host memory in the mock, reached through its accessible mapping.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, bytes) };
        Ok(())
    }
}

/// Makes this process exit at once (status 3, no cleanup, as if killed) when
/// the P2P transport next imports a peer's mock FIFO: a rank that dies in the
/// middle of connection setup, for failure tests.
pub fn exit_on_p2p_import() {
    EXIT_ON_IMPORT.store(true, Ordering::Release);
}

/// Mock cuMem support (NCCL's `ncclIsCuMemSupported`): 0 unsupported (the
/// default: mock GPUs use legacy IPC unless a test says otherwise), 1
/// supported, 2 supported but every "`cuMemCreate`" fails.
static CUMEM: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Declares whether the mock GPUs of this process support cuMem with POSIX
/// file descriptor handles (`CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED`
/// and virtual memory management): the P2P transport then allocates its
/// FIFOs as [`P2pAlloc::cumem_alloc`] (a `memfd` whose export is the
/// descriptor itself, passed to the peer over a Unix socket) when
/// `NCCL_CUMEM_ENABLE` allows it. Off by default.
pub fn declare_cumem(supported: bool) {
    CUMEM.store(u8::from(supported), Ordering::Release);
}

/// Makes every mock "`cuMemCreate`" of this process fail (cuMem still
/// reported supported), for the P2P transport's fallback to legacy IPC.
pub fn fail_cumem_create() {
    CUMEM.store(2, Ordering::Release);
}

/// Descriptors this process has imported with [`P2pAlloc::cumem_import`].
static CUMEM_IMPORTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many cuMem FIFO descriptors received from other processes this
/// process has mapped (mock "`cuMemImportFromShareableHandle`" calls).
pub fn cumem_import_count() -> usize {
    CUMEM_IMPORTS.load(Ordering::Relaxed)
}

/// Whether the mock GPUs support cuMem ([`declare_cumem`], [`fail_cumem_create`]).
pub(crate) fn cumem_supported() -> bool {
    CUMEM.load(Ordering::Acquire) != 0
}

/// Magic of a mock export ("MOCKIPC1").
const P2P_MAGIC: u64 = u64::from_le_bytes(*b"MOCKIPC1");

impl P2pAlloc {
    /// `len` zeroed bytes and their export.
    ///
    /// Errors: `memfd_create`, `ftruncate` or `mmap` failing.
    pub(crate) fn alloc(len: usize) -> std::io::Result<(P2pAlloc, [u8; 64])> {
        use std::os::fd::AsRawFd;
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"ferroccl-mock-p2p".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor just created for us to own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain syscall on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = Self::map(&fd, len)?;
        let mut h = [0u8; 64];
        h[..8].copy_from_slice(&P2P_MAGIC.to_le_bytes());
        h[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        h[12..16].copy_from_slice(&fd.as_raw_fd().to_le_bytes());
        h[16..24].copy_from_slice(&(len as u64).to_le_bytes());
        Ok((
            P2pAlloc {
                ptr,
                len,
                _fd: Some(fd),
            },
            h,
        ))
    }

    /// Maps the allocation another process exported as `handle`, which must be
    /// `len` bytes.
    ///
    /// Errors: a handle that is not a mock export or of another length; the
    /// owner's descriptor cannot be opened (it exited) or mapped.
    pub(crate) fn import(handle: &[u8; 64], len: usize) -> std::io::Result<P2pAlloc> {
        if EXIT_ON_IMPORT.load(Ordering::Acquire) {
            // SAFETY: ends the process without running anything else (the test's intent).
            unsafe { libc::_exit(3) };
        }
        let u64_at = |o: usize| u64::from_le_bytes(handle[o..o + 8].try_into().expect("8 bytes"));
        let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
        if u64_at(0) != P2P_MAGIC {
            return Err(bad("not a mock device export".into()));
        }
        let pid = u32::from_le_bytes(handle[8..12].try_into().expect("4 bytes"));
        let fd = i32::from_le_bytes(handle[12..16].try_into().expect("4 bytes"));
        if u64_at(16) != len as u64 {
            return Err(bad(format!("mock export of {} bytes, expected {len}", u64_at(16))));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/fd/{fd}"))?;
        if file.metadata()?.len() != len as u64 {
            return Err(bad(format!("/proc/{pid}/fd/{fd} is not {len} bytes long")));
        }
        let fd = OwnedFd::from(file);
        let ptr = Self::map(&fd, len)?;
        Ok(P2pAlloc { ptr, len, _fd: None })
    }

    /// The mock "`cuMemCreate` + `cuMemExportToShareableHandle`
    /// (`CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`)": `len` zeroed bytes in a
    /// `memfd` mapped here, and a descriptor of it for another process.
    ///
    /// Errors: [`fail_cumem_create`] was called (`Unsupported`); `memfd_create`,
    /// `ftruncate`, `mmap` or `dup` failing.
    pub(crate) fn cumem_alloc(len: usize) -> std::io::Result<(P2pAlloc, OwnedFd)> {
        if CUMEM.load(Ordering::Acquire) == 2 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "mock cuMemCreate failed (mockdev::fail_cumem_create)",
            ));
        }
        let (a, _) = Self::alloc(len)?;
        let export = a
            ._fd
            .as_ref()
            .expect("a fresh allocation holds its descriptor")
            .try_clone()?;
        Ok((a, export))
    }

    /// The mock "`cuMemImportFromShareableHandle` + `cuMemMap`": maps the
    /// descriptor another process exported with [`P2pAlloc::cumem_alloc`] and
    /// sent here, which must be `len` bytes long; the descriptor is closed
    /// once mapped (as NCCL closes it after the import).
    ///
    /// Errors: a descriptor of another length; `fstat` or `mmap` failing.
    pub(crate) fn cumem_import(fd: OwnedFd, len: usize) -> std::io::Result<P2pAlloc> {
        if EXIT_ON_IMPORT.load(Ordering::Acquire) {
            // SAFETY: ends the process without running anything else (the test's intent).
            unsafe { libc::_exit(3) };
        }
        let file = std::fs::File::from(fd);
        let have = file.metadata()?.len();
        if have != len as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("the received descriptor is {have} bytes long, expected {len}"),
            ));
        }
        let fd = OwnedFd::from(file);
        let ptr = Self::map(&fd, len)?;
        CUMEM_IMPORTS.fetch_add(1, Ordering::Relaxed);
        Ok(P2pAlloc { ptr, len, _fd: None })
    }

    fn map(fd: &OwnedFd, len: usize) -> std::io::Result<*mut u8> {
        use std::os::fd::AsRawFd;
        let map_one = |prot: libc::c_int| -> std::io::Result<*mut u8> {
            // SAFETY: a fresh shared mapping of a descriptor we hold; the kernel checks the arguments.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
            if p == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            Ok(p.cast())
        };
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let (p, alias) = if PROTECT.load(Ordering::Acquire) {
            let alias = map_one(rw)?;
            match map_one(libc::PROT_NONE) {
                Ok(p) => (p, alias),
                Err(e) => {
                    // SAFETY: the mapping just made, unmapped once.
                    unsafe { libc::munmap(alias.cast(), len) };
                    return Err(e);
                }
            }
        } else {
            let p = map_one(rw)?;
            (p, p)
        };
        let mut m = P2P_MAPS.write().unwrap_or_else(|e| e.into_inner());
        m.push((p as usize, len, alias as usize));
        Ok(p)
    }

    /// The mapped address.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for P2pAlloc {
    fn drop(&mut self) {
        let mut m = P2P_MAPS.write().unwrap_or_else(|e| e.into_inner());
        let alias = m.iter().find(|&&(s, ..)| s == self.ptr as usize).map(|&(.., a)| a);
        m.retain(|&(s, ..)| s != self.ptr as usize);
        drop(m);
        if let Some(a) = alias.filter(|&a| a != self.ptr as usize) {
            // SAFETY: the second mapping made by `map`, unmapped once.
            unsafe { libc::munmap(a as *mut libc::c_void, self.len) };
        }
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
