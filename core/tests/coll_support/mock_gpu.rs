//! A mock GPU's "kernels" for the tests of device steps without a GPU
//! (`coll_device_steps.rs`, `p2p_transport.rs`): buffers in **mock** device
//! memory (`ferroccl::mockdev::declare_kernels`, pages mapped `PROT_NONE`)
//! served by [`MockKernels`], which computes with the CPU reference on bytes
//! reached through `/proc/self/mem`, and refuses any memory a GPU could not
//! reach: host memory that was neither page-locked through
//! `ferroccl_kernels::hostreg` nor a mock P2P FIFO (`mockdev::p2p_contains`).
//! Included as `#[path = "coll_support/mock_gpu.rs"] mod mock_gpu;` beside
//! `mod coll_support` (its memory is `coll_support::mock_mem`'s).
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ferroccl::check::{self, TestOp};
use ferroccl::mockdev::{self, MockGpu};
use ferroccl::stream::Stream;
use ferroccl::{DataType, RedOp};
use ferroccl_kernels::hostreg;
use ferroccl_kernels::{Backend, CpuBackend, DevRedOp, KernelError, Pre};

pub use crate::coll_support::mock_mem::ProcMem;
use crate::coll_support::mock_mem::{ProtNone, refuse_slices};

/// The mock GPU's kernels: every raw operation, on memory a GPU reaches only
/// ([`reach`]; slices are refused). [`MOCK_KERNELS`] runs each operation at
/// once; its enqueuer ([`Backend::enqueuer`], the same type with `queued`)
/// checks each operation's reach at once (as a launch's operands would fault
/// later on a GPU, here earlier) and runs it at the next `wait_enqueued`, as
/// `ferroccl_kernels::VouchedCuda` has a waiting and an enqueuing twin. A step
/// that pushed or read its slots before waiting would see stale bytes and fail
/// the tests' result checks.
#[derive(Debug)]
pub struct MockKernels {
    /// Whether raw operations wait in the calling thread's queue for the
    /// next `wait_enqueued` (the enqueuer) instead of running at once.
    queued: bool,
}

/// The one mock kernel backend ([`MockBuf`] declares its memory with it).
pub static MOCK_KERNELS: MockKernels = MockKernels { queued: false };
/// Its enqueuer.
static MOCK_QUEUE: MockKernels = MockKernels { queued: true };
/// Raw operations the mock GPU ran (staging copies not counted).
pub static CALLS: AtomicU64 = AtomicU64::new(0);
/// Staging copies are expected: copies between mock device memory and
/// unregistered host memory (a bounce buffer) are then served.
pub static STAGING_OK: AtomicBool = AtomicBool::new(false);
/// Raw operations the mock GPU received through its enqueuer, run only at
/// the next `wait_enqueued`, as a GPU runs a stream's launches after the host
/// has moved on.
pub static QUEUED: AtomicU64 = AtomicU64::new(0);
/// `wait_enqueued` calls that ran at least one queued operation.
pub static WAITS: AtomicU64 = AtomicU64::new(0);
static CPU: CpuBackend = CpuBackend;

/// An operation enqueued on the mock GPU's "stream".
type Queued = Box<dyn FnOnce() -> Result<(), KernelError>>;

thread_local! {
    /// The calling thread's enqueued operations, in order (each proxy thread
    /// waits for its own, as each waits on its backend's stream).
    static QUEUE: std::cell::RefCell<Vec<Queued>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether the mock GPU reaches `[p, p + n)`: mock device memory, a mock P2P
/// FIFO (its own or a peer's, IPC-mapped), or registered host memory.
fn reach(what: &'static str, p: *const u8, n: usize) -> Result<(), KernelError> {
    if n == 0 || mockdev::contains(p, n) || mockdev::p2p_contains(p, n) || hostreg::registered(p as usize, n) {
        return Ok(());
    }
    if std::env::var_os("DEVICE_STEPS_DEBUG").is_some() {
        eprintln!(
            "refused {what} {p:?}+{n}: {}",
            std::backtrace::Backtrace::force_capture()
        );
    }
    Err(KernelError::MemorySpaceMismatch {
        what,
        found: format!("host memory at {p:?} not registered"),
        first: "the mock GPU",
        expected: "mock device memory, a P2P FIFO or registered host memory".into(),
    })
}

fn slices_refused() -> KernelError {
    KernelError::NoCuda("mock GPU: raw addresses only".into())
}

impl MockKernels {
    /// Runs `op` (one raw operation on `bytes` bytes of each of `operands`,
    /// named as in the error) once every operand is in [`reach`]: at once, or
    /// on the enqueuer at the next `wait_enqueued`, where [`MOCK_KERNELS`]
    /// checks and runs it as it runs its own.
    fn launch<const N: usize>(
        &self,
        operands: [(&'static str, *const u8); N],
        bytes: usize,
        op: impl FnOnce() -> Result<(), KernelError> + 'static,
    ) -> Result<(), KernelError> {
        for (what, p) in operands {
            reach(what, p, bytes)?;
        }
        if self.queued {
            QUEUED.fetch_add(1, Ordering::Relaxed);
            let run: Queued = Box::new(move || MOCK_KERNELS.launch(operands, bytes, op));
            QUEUE.with(|q| q.borrow_mut().push(run));
            return Ok(());
        }
        let call = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        if panic_at() == Some(call) {
            panic!("mock GPU: fault injected at raw operation {call} ({PANIC_AT_ENV})");
        }
        op()
    }
}

/// Environment variable: the mock GPU panics at this raw operation (1-based,
/// counted as [`CALLS`]), standing in for a bug in the data path of the
/// thread that runs it.
pub const PANIC_AT_ENV: &str = "MOCK_GPU_PANIC_AT";

fn panic_at() -> Option<u64> {
    static AT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *AT.get_or_init(|| std::env::var(PANIC_AT_ENV).ok()?.parse().ok())
}

impl Backend for MockKernels {
    fn name(&self) -> &'static str {
        if self.queued { "mock-gpu-queue" } else { "mock-gpu" }
    }
    fn enqueuer(&self) -> Option<&dyn Backend> {
        (!self.queued).then_some(&MOCK_QUEUE)
    }
    fn wait_enqueued(&self) -> Result<(), KernelError> {
        if self.queued {
            return Ok(());
        }
        let ops = QUEUE.with(|q| std::mem::take(&mut *q.borrow_mut()));
        if !ops.is_empty() {
            WAITS.fetch_add(1, Ordering::Relaxed);
        }
        // Every queued operation runs; the first error is returned.
        let mut first = Ok(());
        for f in ops {
            let r = f();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
    refuse_slices!(slices_refused());
    // The raw methods: the caller's contract holds until the operation has
    // run (at once, or at the wait that runs a queued one).
    unsafe fn copy_raw(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<(), KernelError> {
        let copy = move || {
            ProcMem::write(dst, &ProcMem::read(src, bytes));
            Ok(())
        };
        if !self.queued
            && STAGING_OK.load(Ordering::Relaxed)
            && (mockdev::contains(dst, bytes) || mockdev::contains(src, bytes))
        {
            // Staging: a copy between device memory and a bounce buffer
            // (`cuMemAllocHost`ed on a GPU; plain host memory here).
            return copy();
        }
        self.launch([("dst", dst.cast_const()), ("src", src)], bytes, copy)
    }
    unsafe fn reduce_raw(
        &self,
        dst: *mut u8,
        a: *const u8,
        b: *const u8,
        bytes: usize,
        op: &DevRedOp,
        pre: Pre,
    ) -> Result<(), KernelError> {
        let op = *op;
        self.launch([("dst", dst.cast_const()), ("a", a), ("b", b)], bytes, move || {
            let (av, bv) = (ProcMem::read(a, bytes), ProcMem::read(b, bytes));
            let mut out = vec![0u8; bytes];
            CPU.reduce(&mut out, &av, &bv, &op, pre)?;
            ProcMem::write(dst, &out);
            Ok(())
        })
    }
    unsafe fn pre_op_raw(&self, dst: *mut u8, src: *const u8, bytes: usize, op: &DevRedOp) -> Result<(), KernelError> {
        let op = *op;
        self.launch([("dst", dst.cast_const()), ("src", src)], bytes, move || {
            let mut out = vec![0u8; bytes];
            CPU.pre_op(&mut out, &ProcMem::read(src, bytes), &op)?;
            ProcMem::write(dst, &out);
            Ok(())
        })
    }
    unsafe fn post_op_raw(&self, buf: *mut u8, bytes: usize, op: &DevRedOp) -> Result<(), KernelError> {
        let op = *op;
        self.launch([("buf", buf.cast_const())], bytes, move || {
            let mut v = ProcMem::read(buf, bytes);
            CPU.post_op(&mut v, &op)?;
            ProcMem::write(buf, &v);
            Ok(())
        })
    }
}

/// Mock GPU 0 hanging off the CPU (no PCI path), compute capability 9.0.
pub fn gpu0() -> MockGpu {
    MockGpu {
        ordinal: 0,
        cuda_cc: 90,
        gdr: false,
        dmabuf: false,
        pci_path: None,
    }
}

/// `len` bytes of mock device memory of `gpu`, whose kernels are [`MockKernels`].
pub struct MockBuf {
    pub ptr: *mut u8,
    _map: ProtNone,
}

impl MockBuf {
    /// Maps and declares the buffer (panics when `mmap` fails).
    pub fn new(len: usize, gpu: MockGpu) -> MockBuf {
        let map = ProtNone::new(len);
        mockdev::declare_kernels(map.ptr, map.len, &MOCK_KERNELS, gpu);
        MockBuf {
            ptr: map.ptr,
            _map: map,
        }
    }
}

impl Drop for MockBuf {
    fn drop(&mut self) {
        // Forgotten before `_map` is unmapped.
        mockdev::forget(self.ptr);
    }
}

/// Runs `top` (any [`TestOp`], through `TestOp::launch`) on mock device
/// buffers of `gpu` (in or out of place where the operation has an in-place
/// form), with `check::fill` inputs of `seed`; returns the wrong elements.
/// Panics when the operation fails.
#[allow(clippy::too_many_arguments)]
pub fn run_device(
    comm: &ferroccl::Comm,
    gpu: &MockGpu,
    top: TestOp,
    dtype: DataType,
    op: RedOp,
    count: usize,
    in_place: bool,
    seed: u64,
) -> usize {
    let (n, r) = (comm.nranks(), comm.rank());
    let es = dtype.size();
    let in_place = in_place && top.has_in_place();
    let (se, re) = top.buffer_elems(count, n);
    let mut input = vec![0u8; se * es];
    check::fill(&mut input, dtype, &op, r, seed);
    let sendbuf = MockBuf::new(se * es, gpu.clone());
    let rlen = if in_place { se.max(re) } else { re } * es;
    let recvbuf = MockBuf::new(rlen, gpu.clone());
    ProcMem::write(recvbuf.ptr, &vec![0xEE; rlen]);
    let (soff, roff) = top.in_place_offsets(count, r);
    let (sp, rp): (*const u8, *mut u8) = if in_place {
        ProcMem::write(recvbuf.ptr.wrapping_add(soff * es), &input);
        (recvbuf.ptr.wrapping_add(soff * es), recvbuf.ptr.wrapping_add(roff * es))
    } else {
        ProcMem::write(sendbuf.ptr, &input);
        (sendbuf.ptr, recvbuf.ptr)
    };
    let s = Stream::new();
    // SAFETY: the mappings, sized by `buffer_elems`, outlive the synchronize below.
    unsafe { top.launch(comm, sp, rp, count, dtype, op, &s) }
        .unwrap_or_else(|e| panic!("rank {r}: {top:?} {dtype} {op} count {count}: enqueue: {e}"));
    s.synchronize()
        .unwrap_or_else(|e| panic!("rank {r}: {top:?} {dtype} {op} count {count}: {e}"));
    let got = ProcMem::read(rp, re * es);
    match check::expected(top, dtype, &op, n, r, count, seed) {
        Some(want) => check::count_wrong(dtype, &got, &want),
        None => 0,
    }
}
