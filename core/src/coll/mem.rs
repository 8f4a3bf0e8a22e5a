//! Memory spaces of an operation's user buffers, and host staging of device
//! memory for the executor.
//!
//! Every collective's send and receive buffers are classified once, at enqueue
//! ([`OpMem::classify`]), with `ferroccl_kernels::memory_space` (the driver's
//! `cuPointerGetAttributes` when CUDA is present; "pageable host memory" when
//! the driver is absent or the `cuda` feature is off, so a process without CUDA
//! never loads anything and behaves exactly as before). NCCL makes the same
//! per-buffer query (`cudaPointerGetAttributes`, `src/register/register.cc`).
//!
//! A buffer the host cannot dereference (device memory that is not managed)
//! carries its GPU's kernels ([`Kernels`]): the executor (`coll::exec`) runs a
//! step touching it on them when every FIFO the step touches is reachable from
//! that GPU; [`prepare_kernels`] makes that so at enqueue (the connectors'
//! announced host FIFOs page-locked with `cuMemHostRegister`, the datatype's
//! kernels loaded), on the enqueuing thread, never the proxy. Otherwise the
//! buffer is *staged*: for each step, the user bytes the step touches are copied into a
//! pinned host bounce buffer by the buffer's own backend
//! ([`ferroccl_kernels::Backend::copy_raw`]: the CUDA backend of its device,
//! which reaches both its memory and pinned host memory), the step runs on the
//! bounce buffer, and what the step wrote is copied back the same way before
//! anything is sent from it. The executor therefore never dereferences a device
//! address on the CPU. This is the path NCCL takes when the network cannot read
//! or write GPU memory (no `NCCL_PTR_CUDA`, or GPUDirect RDMA disabled by
//! `NCCL_NET_GDR_LEVEL`/`NCCL_NET_GDR_READ`): its kernel copies between GPU
//! memory and host-pinned FIFOs (`src/transport/net.cc`, `sendSetup`/`recvSetup`
//! with `useGdr = 0` put the buffers in `cudaHostAlloc`ed memory); here the copy
//! is one step at a time into a bounce buffer, and the FIFO copy the host path
//! does anyway follows.

use std::cell::RefCell;

use ferroccl_kernels::{Backend, MemorySpace, backend_for_space, memory_space};

use crate::error::Error;

/// How the executor reaches one user buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Access {
    /// The host may read and write it (pageable, pinned or managed memory):
    /// the executor works on it in place.
    Host,
    /// The host must not touch it: each step stages it through a bounce buffer,
    /// copying with `backend`'s `copy_raw`.
    Staged {
        /// The backend that reaches this buffer and the bounce buffer.
        backend: &'static dyn Backend,
        /// Device whose context the bounce buffer is pinned for (`cuMemAllocHost`);
        /// `None`: plain host memory (only when `backend` is a host backend,
        /// which the unit tests use to drive the staging logic without a GPU).
        pinned_for: Option<usize>,
        /// The GPU whose kernels reach this buffer, when steps may run there
        /// instead of staging (`coll::exec`); `None`: always staged.
        kernels: Option<Kernels>,
    },
}

/// A GPU that runs steps as kernels: its backend (every `*_raw` operation, on
/// its memory and on host memory registered through
/// `ferroccl_kernels::hostreg`, without a memory-space query per launch) and
/// its ordinal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kernels {
    /// The backend launching the kernels.
    pub backend: &'static dyn Backend,
    /// The GPU.
    pub ordinal: usize,
    /// A real CUDA device (its kernels are compiled at enqueue), not a test's mock.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub real: bool,
}

/// One user buffer: where it is, how long, how it is reached.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BufMem {
    /// Start address (`0` when the operation has no such buffer).
    pub addr: usize,
    /// Bytes the operation reads or writes there.
    pub len: usize,
    /// Its memory space (as the driver reports it; decides how the plugin may
    /// register it, see `transport::gdr`).
    pub space: MemorySpace,
    /// How the executor reaches it.
    pub access: Access,
}

impl BufMem {
    /// No buffer (or host memory of unknown extent): host access.
    pub const HOST: BufMem = BufMem {
        addr: 0,
        len: 0,
        space: MemorySpace::Host { pinned: false },
        access: Access::Host,
    };

    /// Whether `[p, p + n)` lies inside this buffer.
    fn contains(&self, p: usize, n: usize) -> bool {
        self.len > 0 && self.addr <= p && p.saturating_add(n) <= self.addr + self.len
    }

    /// Whether the executor must stage this buffer.
    pub fn staged(&self) -> bool {
        matches!(self.access, Access::Staged { .. })
    }

    /// The GPU whose kernels may run steps on this buffer.
    pub fn kernels(&self) -> Option<Kernels> {
        match self.access {
            Access::Staged { kernels, .. } => kernels,
            Access::Host => None,
        }
    }
}

/// The memory of one enqueued operation's user buffers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpMem {
    /// The send buffer.
    pub send: BufMem,
    /// The receive buffer.
    pub recv: BufMem,
}

impl OpMem {
    /// Both buffers host memory (the operations built without classification).
    pub const HOST: OpMem = OpMem {
        send: BufMem::HOST,
        recv: BufMem::HOST,
    };

    /// Classifies a send buffer of `bytes.0` and a receive buffer of
    /// `bytes.1` bytes (an operation's [`CollArgs::bytes`]). NULL or empty
    /// buffers are host memory.
    ///
    /// Errors: [`Error::Kernel`] when the driver query fails, or when a device
    /// buffer's backend cannot be created (`NoNvrtc` when the kernels cannot be
    /// compiled, ...): the operation is refused at enqueue, before any rank
    /// waits on it.
    ///
    /// [`CollArgs::bytes`]: super::CollArgs::bytes
    pub fn classify(send: *const u8, recv: *const u8, bytes: (usize, usize)) -> Result<OpMem, Error> {
        let send_mem = classify_buf(send, bytes.0)?;
        // In place with equal lengths (AllReduce) on memory the host reaches:
        // the receive buffer is the send buffer, whose classification (a
        // function of address and length) is taken as it is, so an operation
        // makes one driver query instead of two. (Staged memory is classified
        // again, as before: its classification logs a line per buffer.)
        let recv_mem = if send == recv && bytes.0 == bytes.1 && !send_mem.staged() {
            send_mem
        } else {
            classify_buf(recv, bytes.1)?
        };
        Ok(OpMem {
            send: send_mem,
            recv: recv_mem,
        })
    }

    /// Whether any buffer needs staging.
    pub fn any_staged(&self) -> bool {
        self.send.staged() || self.recv.staged()
    }

    /// Whether any buffer of `mems` needs staging (the executor's fast path
    /// skips [`Stage`] entirely otherwise).
    pub fn any_staged_in(mems: &[OpMem]) -> bool {
        mems.iter().any(OpMem::any_staged)
    }

    /// The GPU whose kernels may run this operation's steps (its first
    /// buffer that has one).
    pub fn kernels(&self) -> Option<Kernels> {
        self.send.kernels().or_else(|| self.recv.kernels())
    }

    /// Stops running this operation's steps as kernels (they are staged).
    pub fn drop_kernels(&mut self) {
        for b in [&mut self.send, &mut self.recv] {
            if let Access::Staged { kernels, .. } = &mut b.access {
                *kernels = None;
            }
        }
    }

    /// The buffer of this operation holding `[p, p + n)`, if any.
    pub fn buffer_of(&self, p: *const u8, n: usize) -> Option<&BufMem> {
        let p = p as usize;
        [&self.send, &self.recv].into_iter().find(|b| b.contains(p, n))
    }

    /// The staged buffer holding `[p, p + n)`, if any.
    fn staged_of(&self, p: *const u8, n: usize) -> Option<&BufMem> {
        let p = p as usize;
        [&self.send, &self.recv]
            .into_iter()
            .find(|b| b.staged() && b.contains(p, n))
    }
}

/// The [`BufMem`] of `len` bytes at `p`. Inlined: returned through memory, the
/// result was reloaded wider than it was stored (a failed store forward per
/// buffer per operation).
#[inline(always)]
fn classify_buf(p: *const u8, len: usize) -> Result<BufMem, Error> {
    if p.is_null() || len == 0 {
        return Ok(BufMem::HOST);
    }
    #[cfg(test)]
    if let Some(backend) = test_device::lookup(p, len) {
        return Ok(BufMem {
            addr: p as usize,
            len,
            space: MemorySpace::Device {
                ordinal: 0,
                managed: false,
            },
            access: Access::Staged {
                backend,
                pinned_for: None,
                kernels: None,
            },
        });
    }
    if let Some((_, backend, gpu, kernels)) = crate::mockdev::lookup_full(p, len) {
        return Ok(BufMem {
            addr: p as usize,
            len,
            space: MemorySpace::Device {
                ordinal: gpu.ordinal,
                managed: false,
            },
            access: Access::Staged {
                backend,
                pinned_for: None,
                kernels: kernels.then_some(Kernels {
                    backend,
                    ordinal: gpu.ordinal,
                    real: false,
                }),
            },
        });
    }
    let space = memory_space(p)?;
    let access = match space {
        s if s.host_accessible() => Access::Host,
        MemorySpace::Device { ordinal, .. } => Access::Staged {
            backend: backend_for_space(space)?,
            pinned_for: Some(ordinal),
            kernels: real_kernels(ordinal),
        },
        MemorySpace::Host { .. } => Access::Host,
    };
    if matches!(access, Access::Staged { .. }) {
        note_staged(p, len, space);
    }
    Ok(BufMem {
        addr: p as usize,
        len,
        space,
        access,
    })
}

/// The debug line of a buffer classified as staged.
#[cold]
fn note_staged(p: *const u8, len: usize, space: MemorySpace) {
    tracing::debug!(target: "ferroccl::coll", "{len} bytes at {p:?} are {space}: staged through host memory");
}

/// The kernels of CUDA device `ordinal` (its backend exists: `classify_buf`
/// just made it).
#[cfg(feature = "cuda")]
fn real_kernels(ordinal: usize) -> Option<Kernels> {
    let b = ferroccl_kernels::cuda::CudaBackend::for_device(ordinal).ok()?;
    Some(Kernels {
        backend: b.vouched(),
        ordinal,
        real: true,
    })
}

#[cfg(not(feature = "cuda"))]
fn real_kernels(_ordinal: usize) -> Option<Kernels> {
    None
}

/// Makes operation `m`'s buffers ready for steps on their GPU's kernels, on
/// the enqueuing thread (whose CUDA calls may wait; the proxy's must not, see
/// [`reserve`]): the connectors' announced FIFOs are page-locked for that GPU
/// (`ferroccl_kernels::hostreg`), and the kernels of `dtype` compiled and
/// loaded. A FIFO that cannot be registered keeps its steps staged (logged
/// once); kernels that cannot be loaded stage the whole operation.
pub(crate) fn prepare_kernels(m: &mut OpMem, dtype: ferroccl_kernels::DataType) {
    let Some(k) = m.kernels() else { return };
    if !device_steps_enabled() {
        m.drop_kernels();
        return;
    }
    for (base, len, why) in ferroccl_kernels::hostreg::register_announced(k.ordinal) {
        tracing::info!(
            target: "ferroccl::coll",
            "device buffers: FIFO of {len} bytes at {base:#x} cannot be registered for GPU {} ({why}): its steps stage through host memory",
            k.ordinal
        );
    }
    #[cfg(feature = "cuda")]
    if k.real {
        let r = ferroccl_kernels::cuda::CudaBackend::for_device(k.ordinal)
            .and_then(|b| b.prepare(ferroccl_kernels::cuda::source::Unit::Type(dtype)));
        if let Err(e) = r {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                tracing::info!(
                    target: "ferroccl::coll",
                    "device buffers: {dtype} kernels of GPU {} unavailable ({e}): steps stage through host memory",
                    k.ordinal
                )
            });
            m.drop_kernels();
        }
    }
    #[cfg(not(feature = "cuda"))]
    let _ = dtype;
}

/// `FERROCCL_DEVICE_STEPS` (default 1), read once per process: 0 keeps every
/// step on device buffers on the staging path (the CPU reduces), to compare
/// the two paths on one machine.
fn device_steps_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        !matches!(
            crate::config::IntParamExt::get(&crate::config::params::DEVICE_STEPS, crate::config::Config::global()),
            Ok(0)
        )
    })
}

/// A host bounce buffer: pinned for a device, or plain.
enum Bounce {
    Plain(Vec<u8>),
    #[cfg(feature = "cuda")]
    Pinned(ferroccl_kernels::cuda::PinnedBuffer, usize),
}

impl Bounce {
    fn alloc(len: usize, pinned_for: Option<usize>) -> Result<Bounce, Error> {
        match pinned_for {
            None => Ok(Bounce::Plain(vec![0; len])),
            #[cfg(feature = "cuda")]
            Some(ordinal) => Ok(Bounce::Pinned(
                ferroccl_kernels::cuda::PinnedBuffer::alloc(ordinal, len)?,
                ordinal,
            )),
            #[cfg(not(feature = "cuda"))]
            Some(ordinal) => Err(Error::Kernel(ferroccl_kernels::KernelError::NoCuda(format!(
                "staging device memory of GPU {ordinal} needs the `cuda` feature"
            )))),
        }
    }

    fn fits(&self, len: usize, pinned_for: Option<usize>) -> bool {
        match self {
            Bounce::Plain(v) => pinned_for.is_none() && v.len() >= len,
            #[cfg(feature = "cuda")]
            Bounce::Pinned(b, o) => pinned_for == Some(*o) && b.as_slice().len() >= len,
        }
    }

    fn ptr(&mut self) -> *mut u8 {
        match self {
            Bounce::Plain(v) => v.as_mut_ptr(),
            #[cfg(feature = "cuda")]
            Bounce::Pinned(b, _) => b.as_mut_slice().as_mut_ptr(),
        }
    }
}

thread_local! {
    /// Bounce buffers of this (proxy) thread, reused across steps.
    static POOL: RefCell<Vec<Bounce>> = const { RefCell::new(Vec::new()) };
}

/// Bounce buffers allocated ahead by enqueuing threads ([`reserve`]), taken
/// by proxy threads whose own pool has none that fits.
static RESERVED: std::sync::Mutex<Vec<Bounce>> = std::sync::Mutex::new(Vec::new());

fn take_bounce(len: usize, pinned_for: Option<usize>) -> Result<Bounce, Error> {
    let found = POOL
        .with(|p| {
            let mut p = p.borrow_mut();
            p.iter().position(|b| b.fits(len, pinned_for)).map(|i| p.swap_remove(i))
        })
        .or_else(|| {
            let mut r = RESERVED.lock().unwrap_or_else(|e| e.into_inner());
            r.iter().position(|b| b.fits(len, pinned_for)).map(|i| r.swap_remove(i))
        });
    match found {
        Some(b) => Ok(b),
        None => Bounce::alloc(len.next_power_of_two(), pinned_for),
    }
}

/// Allocates, on the calling (enqueuing) thread, the pinned bounce buffers the
/// proxy will need to stage `m`'s buffers, unless enough are reserved already:
/// one per staged buffer, as long as the buffer (a step's staged range lies in
/// one buffer, or in two that overlap).
///
/// Called for operations ordered with a caller's device stream: page-locked
/// allocation (`cuMemAllocHost`) is among the calls CUDA may serialize with
/// other streams' work, and the caller's stream waits for this very operation,
/// so the proxy thread must not make it (the hang of issue 28; NCCL allocates
/// its host FIFOs at connect time, never during an operation).
///
/// Errors: [`Error::Kernel`] when the allocation fails.
pub(crate) fn reserve(m: &OpMem) -> Result<(), Error> {
    let mut want: Vec<(usize, Option<usize>)> = Vec::new();
    for b in [&m.send, &m.recv] {
        if let Access::Staged { pinned_for, .. } = b.access
            && b.len > 0
        {
            want.push((b.len, pinned_for));
        }
    }
    let mut r = RESERVED.lock().unwrap_or_else(|e| e.into_inner());
    let mut used = vec![false; r.len()];
    for (len, pinned_for) in want {
        if let Some(i) = (0..r.len()).find(|&i| !used[i] && r[i].fits(len, pinned_for)) {
            used[i] = true;
            continue;
        }
        r.push(Bounce::alloc(len.next_power_of_two(), pinned_for)?);
        used.push(true);
    }
    Ok(())
}

/// Steps that staged device memory through bounce buffers, for the process.
static STAGED_STEPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Steps that staged device memory so far (see `coll::exec::device_step_counts`).
pub(crate) fn staged_steps() -> u64 {
    STAGED_STEPS.load(std::sync::atomic::Ordering::Relaxed)
}

/// One staged range: user bytes `[user, user + len)` mirrored at `host`.
struct Part {
    user: usize,
    len: usize,
    bounce: Bounce,
    host: *mut u8,
    backend: &'static dyn Backend,
    write_back: bool,
}

/// The staging of one step (see the module docs). Without staged buffers it
/// holds nothing and [`Stage::map`] is the identity.
pub(crate) struct Stage {
    parts: Vec<Part>,
}

/// The range of a step's operand: address, bytes, whether the step writes it,
/// whether it reads what is there before writing.
pub(crate) struct Operand {
    pub ptr: *const u8,
    pub len: usize,
    pub writes: bool,
    pub reads: bool,
}

impl Stage {
    /// No staging.
    pub fn none() -> Stage {
        Stage { parts: Vec::new() }
    }

    /// Stages the operands of a step that lie in staged user buffers of `mems`
    /// (the operations of the work the step belongs to):
    /// overlapping operands share one range (so in-place aliasing is kept), a
    /// range is copied in when the step reads it, and marked for copying back
    /// when it writes it.
    ///
    /// # Safety
    /// Each operand in a staged buffer must be valid for its length there (the
    /// enqueue contract), and nothing else may access it until [`Stage::finish`].
    pub unsafe fn begin(mems: &[OpMem], operands: &[Operand]) -> Result<Stage, Error> {
        /// A staged range being built: overlapping operands merge into one.
        struct Range {
            start: usize,
            end: usize,
            backend: &'static dyn Backend,
            pinned_for: Option<usize>,
            reads: bool,
            writes: bool,
        }
        let mut ranges: Vec<Range> = Vec::new();
        for o in operands {
            if o.len == 0 || o.ptr.is_null() || !(o.reads || o.writes) {
                continue;
            }
            // Any operation of the work: a step may read one operation's buffer and
            // write another's (a send to self feeding a receive from self).
            let Some(buf) = mems.iter().find_map(|m| m.staged_of(o.ptr, o.len)) else {
                continue;
            };
            let Access::Staged {
                backend, pinned_for, ..
            } = buf.access
            else {
                continue;
            };
            let (s, e) = (o.ptr as usize, o.ptr as usize + o.len);
            if let Some(r) = ranges.iter_mut().find(|r| s < r.end && r.start < e) {
                r.start = r.start.min(s);
                r.end = r.end.max(e);
                r.reads |= o.reads;
                r.writes |= o.writes;
            } else {
                ranges.push(Range {
                    start: s,
                    end: e,
                    backend,
                    pinned_for,
                    reads: o.reads,
                    writes: o.writes,
                });
            }
        }
        if !ranges.is_empty() {
            STAGED_STEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let mut parts: Vec<Part> = Vec::with_capacity(ranges.len());
        for r in ranges {
            let len = r.end - r.start;
            let mut bounce = take_bounce(len, r.pinned_for)?;
            let host = bounce.ptr();
            if r.reads {
                // SAFETY: the user range is valid (caller); the bounce buffer holds
                // at least `len` bytes and is ours; they are disjoint.
                unsafe { r.backend.copy_raw(host, r.start as *const u8, len) }?;
            }
            parts.push(Part {
                user: r.start,
                len,
                bounce,
                host,
                backend: r.backend,
                write_back: r.writes,
            });
        }
        Ok(Stage { parts })
    }

    /// Adds a range outside the user buffers to stage, reached only through
    /// `backend` (a FIFO slot in GPU memory, `coll::exec`): copied into a
    /// bounce buffer now when `reads`, copied back by [`Stage::finish`] when
    /// `writes`. `pinned_for`: as `Access::Staged`. The range must not
    /// overlap another of this stage.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` valid for `backend`'s `copy_raw`, untouched by
    /// others until [`Stage::finish`].
    pub unsafe fn add_range(
        &mut self,
        ptr: *const u8,
        len: usize,
        backend: &'static dyn Backend,
        pinned_for: Option<usize>,
        reads: bool,
        writes: bool,
    ) -> Result<(), Error> {
        if len == 0 || !(reads || writes) {
            return Ok(());
        }
        debug_assert!(
            self.parts
                .iter()
                .all(|p| ptr as usize + len <= p.user || p.user + p.len <= ptr as usize)
        );
        let mut bounce = take_bounce(len, pinned_for)?;
        let host = bounce.ptr();
        if reads {
            // SAFETY: the range is valid (caller); the bounce buffer holds at
            // least `len` bytes, is ours, and is disjoint from it.
            if let Err(e) = unsafe { backend.copy_raw(host, ptr, len) } {
                POOL.with(|p| p.borrow_mut().push(bounce));
                return Err(e.into());
            }
        }
        self.parts.push(Part {
            user: ptr as usize,
            len,
            bounce,
            host,
            backend,
            write_back: writes,
        });
        Ok(())
    }

    /// Where the step must access `p`: its mirror in a bounce buffer when it lies
    /// in a staged range, else `p` itself.
    pub fn map(&self, p: *const u8) -> *mut u8 {
        let a = p as usize;
        for part in &self.parts {
            if part.user <= a && a < part.user + part.len {
                return part.host.wrapping_add(a - part.user);
            }
        }
        p as *mut u8
    }

    /// Copies what the step wrote back to user memory. Call once the step has
    /// run, before anything is sent from user memory.
    ///
    /// # Safety
    /// As [`Stage::begin`].
    pub unsafe fn finish(&mut self) -> Result<(), Error> {
        for part in &mut self.parts {
            if part.write_back {
                // SAFETY: as in `begin`.
                unsafe { part.backend.copy_raw(part.user as *mut u8, part.host, part.len) }?;
                part.write_back = false;
            }
        }
        Ok(())
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if self.parts.is_empty() {
            // Nothing staged (every step on host memory): no pool to touch.
            return;
        }
        let parts = std::mem::take(&mut self.parts);
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            for part in parts {
                p.push(part.bounce);
            }
        });
    }
}

/// Test hook: host ranges the calling thread declares "device memory" (the
/// mock device of `coll::tests`: pages the CPU cannot touch, reached only by
/// its backend), classified as staged memory served by that backend.
#[cfg(test)]
pub(crate) mod test_device {
    use std::cell::RefCell;

    use ferroccl_kernels::Backend;

    type Ranges = Vec<(usize, usize, &'static dyn Backend)>;

    thread_local! {
        static RANGES: RefCell<Ranges> = const { RefCell::new(Vec::new()) };
    }

    /// Declares `[p, p + len)` device memory served by `backend` (this thread's enqueues).
    pub(crate) fn declare(p: *const u8, len: usize, backend: &'static dyn Backend) {
        RANGES.with(|r| r.borrow_mut().push((p as usize, len, backend)));
    }

    /// Forgets every declared range of this thread.
    pub(crate) fn clear() {
        RANGES.with(|r| r.borrow_mut().clear());
    }

    pub(super) fn lookup(p: *const u8, len: usize) -> Option<&'static dyn Backend> {
        let a = p as usize;
        RANGES.with(|r| {
            r.borrow()
                .iter()
                .find(|&&(s, n, _)| s <= a && a + len <= s + n)
                .map(|&(_, _, b)| b)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::CollKind;
    use ferroccl_kernels::DataType;

    /// Host memory is host memory whatever the driver's state (no driver here:
    /// `memory_space` answers without loading anything), and NULL or empty
    /// buffers are never classified.
    #[test]
    fn host_buffers_classify_as_host() {
        let send = vec![1u8; 4096];
        let mut recv = vec![0u8; 4096];
        let m = OpMem::classify(
            send.as_ptr(),
            recv.as_mut_ptr(),
            CollKind::AllReduce.buffer_bytes(1024, DataType::Float32, 2),
        )
        .expect("classify");
        assert!(!m.any_staged(), "{m:?}");
        assert!(matches!(m.send.space, MemorySpace::Host { .. }), "{m:?}");
        assert_eq!((m.send.addr, m.send.len), (send.as_ptr() as usize, 4096));
        let m = OpMem::classify(
            std::ptr::null(),
            recv.as_mut_ptr(),
            CollKind::Recv { peer: 0 }.buffer_bytes(0, DataType::Int8, 2),
        )
        .expect("classify");
        assert_eq!((m.send.len, m.recv.len), (0, 0));
        assert!(!m.any_staged());
    }

    /// Overlapping operands share one staged range (in-place aliasing is kept),
    /// reads are copied in, writes copied back, and addresses outside staged
    /// buffers map to themselves.
    #[test]
    fn stage_merges_overlaps_and_writes_back() {
        static CPU: ferroccl_kernels::CpuBackend = ferroccl_kernels::CpuBackend;
        let mut user = vec![0u8; 64];
        for (i, b) in user.iter_mut().enumerate() {
            *b = i as u8;
        }
        let p = user.as_mut_ptr();
        let staged = BufMem {
            addr: p as usize,
            len: 64,
            space: MemorySpace::Device {
                ordinal: 0,
                managed: false,
            },
            access: Access::Staged {
                backend: &CPU,
                pinned_for: None,
                kernels: None,
            },
        };
        let mems = [OpMem {
            send: staged,
            recv: BufMem::HOST,
        }];
        let other = [7u8; 4];
        // SAFETY: `user` is valid for 64 bytes and untouched until `finish`.
        let mut st = unsafe {
            Stage::begin(
                &mems,
                &[
                    Operand {
                        ptr: p.wrapping_add(8),
                        len: 16,
                        writes: false,
                        reads: true,
                    },
                    Operand {
                        ptr: p.wrapping_add(16),
                        len: 16,
                        writes: true,
                        reads: false,
                    },
                ],
            )
        }
        .expect("stage");
        assert_eq!(st.parts.len(), 1, "overlapping operands share a range");
        let (a, b) = (st.map(p.wrapping_add(8)), st.map(p.wrapping_add(16)));
        assert_eq!(b as usize - a as usize, 8, "aliasing kept");
        assert_ne!(a as usize, p as usize + 8, "mapped to a mirror");
        assert_eq!(
            st.map(other.as_ptr()),
            other.as_ptr() as *mut u8,
            "host memory maps to itself"
        );
        // SAFETY: the mirror holds the 24 staged bytes.
        unsafe {
            assert_eq!(std::slice::from_raw_parts(a, 24), &user[8..32], "copied in");
            std::ptr::write_bytes(b, 0xAB, 16);
        }
        // SAFETY: as `begin`.
        unsafe { st.finish() }.expect("finish");
        drop(st);
        assert!(user[16..32].iter().all(|&x| x == 0xAB), "written back");
        assert_eq!(user[8..16], [8, 9, 10, 11, 12, 13, 14, 15], "read-only bytes unchanged");
        assert_eq!(user[32], 32, "outside the range unchanged");
    }
}
