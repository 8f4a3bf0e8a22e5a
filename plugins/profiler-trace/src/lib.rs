//! `libnccl-profiler-trace.so`: a profiler plugin (`ncclProfiler_v6`, for NCCL
//! and ferroccl) that writes a timeline every rank's collectives, proxy ops,
//! proxy steps and network transfers in the Chrome trace event format (JSON),
//! which Perfetto (<https://ui.perfetto.dev>) and `chrome://tracing` open.
//!
//! # Options (environment, read at the first `init` of the process)
//! * `NCCL_PROFILER_TRACE_FILE`: output path; `%h` is replaced by the host name,
//!   `%p` by the process id (default `ferroccl-trace-%h-%p.json`). One file per
//!   process, rewritten at every communicator's `finalize` with everything so
//!   far. Processes of one job share the wall clock (`CLOCK_REALTIME`, µs), so
//!   their files can be loaded together.
//! * `NCCL_PROFILE_EVENT_MASK`: the activation mask (NCCL's example profiler's
//!   variable and meaning: `ncclProfile*` bits); default: every event type
//!   except ProxyCtrl (`0x7fdf`).
//!
//! # What the trace shows
//! * one trace process per rank (`pid` = rank, named `rank R`);
//! * track `API`: GroupApi, CollApi, P2pApi (the user's calls);
//! * track `ops`: Group, Coll and P2p events; a Coll/P2p span is stretched to
//!   the last stop of its descendants (NCCL stops them as soon as the proxy
//!   ops are posted), so each collective covers its proxy ops and steps; its
//!   args carry seqNumber, count, datatype, algorithm, protocol, channels;
//! * one track per (channel, peer, direction) — `ch C send→P` / `ch C recv←P`
//!   — with the ProxyOp spans, and per FIFO slot (`… slot S`) the ProxyStep
//!   spans cut into their states (`SendGPUWait`, `SendPeerWait`, `SendWait`,
//!   `RecvWait`, `RecvFlushWait`, `RecvGPUWait`) with the transfer size;
//! * net-plugin events on the track of their step; ProxyCtrl on `proxy`.
//!
//! # Cost on the hot path
//! `startEvent`, `recordEventState` and `stopEvent` append one [`Entry`],
//! encoded as a variable-length record of 13 to 44 bytes (no heap string, no
//! JSON, no allocation but one chunk of [`CHUNK_BYTES`] now and then), to the
//! calling thread's own log, which
//! takes no lock: its thread is the only writer and publishes each record
//! with one release store, which `finalize` reads with acquire; each thread
//! registers its log once in a process-wide list. Event ids are (thread,
//! sequence) pairs, so no counter is shared either; times are raw TSC reads
//! ([`Clock`]). An event's id is its handle (the SDK's `UNBOXED` mode): no
//! box, no retained copy and no lock per event. `finalize` merges the logs into
//! [`Rec`]s and serialises them with `serde_json`. `examples/microbench.rs`
//! measures the cost per call.
//!
//! Memory: every event is kept until the process ends (a trace tool).

use std::cell::{Cell, OnceCell};
use std::collections::HashMap;
use std::ffi::{CStr, c_char};
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use ferroccl_plugin_api::abi;
use ferroccl_plugin_api::sdk::{NetResult, Profiler, ProfilerInit};
use serde_json::{Value, json};

/// The default activation mask: every type but ProxyCtrl.
pub const DEFAULT_MASK: i32 = 0x7fff & !(abi::ncclProfileProxyCtrl as i32);

/// Bytes per chunk of a thread's log (a full chunk is kept, a new one is
/// reserved: nothing is ever moved or copied on the hot path). Chunks are
/// advised as transparent huge pages where the kernel allows it, so that
/// filling them takes a page fault per 2 MiB rather than per 4 KiB.
pub const CHUNK_BYTES: usize = 4 << 20;

/// A short name copied out of a descriptor's C string (NCCL's function,
/// datatype, algorithm and protocol names are at most 15 bytes; longer ones are
/// cut), so a record holds no pointer and no heap string.
#[derive(Clone, Copy, Default)]
pub struct Name {
    len: u8,
    bytes: [u8; 15],
}

impl Name {
    /// Copies up to 15 bytes of `p` (NULL → empty).
    fn of(p: *const c_char) -> Name {
        let mut n = Name::default();
        if p.is_null() {
            return n;
        }
        // SAFETY: NCCL's descriptors hold NUL-terminated strings valid for the call;
        // reading stops at the NUL or after 15 bytes.
        unsafe {
            while (n.len as usize) < n.bytes.len() {
                let b = *p.add(n.len as usize) as u8;
                if b == 0 {
                    break;
                }
                n.bytes[n.len as usize] = b;
                n.len += 1;
            }
        }
        n
    }

    /// The name (lossy UTF-8).
    pub fn as_string(&self) -> String {
        String::from_utf8_lossy(&self.bytes[..self.len as usize]).into_owned()
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_string())
    }
}

/// The descriptor fields of the larger, rarer events (API calls, Coll, P2p),
/// kept in a thread's side table so that every [`Entry`] stays small.
#[derive(Debug, Clone, Copy)]
pub enum Detail {
    /// CollApi / P2pApi (`root` 0 for P2pApi).
    Api {
        /// `func`.
        func: Name,
        /// `count`.
        count: usize,
        /// `datatype`.
        dtype: Name,
        /// `root` (CollApi).
        root: i32,
        /// P2pApi rather than CollApi.
        p2p: bool,
    },
    /// Coll.
    Coll {
        /// `seqNumber`.
        seq: u64,
        /// `func`.
        func: Name,
        /// `count`.
        count: usize,
        /// `datatype`.
        dtype: Name,
        /// `root`.
        root: i32,
        /// `algo`.
        algo: Name,
        /// `proto`.
        proto: Name,
        /// `nChannels`.
        nchannels: u8,
        /// `parentGroup`'s event id (v5+), 0 when none.
        group: u64,
    },
    /// P2p.
    P2p {
        /// `func`.
        func: Name,
        /// `count`.
        count: usize,
        /// `datatype`.
        dtype: Name,
        /// `peer`.
        peer: i32,
        /// `parentGroup`'s event id (v5+), 0 when none.
        group: u64,
    },
}

/// The descriptor fields one event type keeps (copied at `startEvent`; 16 bytes).
#[derive(Debug, Clone, Copy)]
pub enum Payload {
    /// No fields (Group, ProxyCtrl, unknown types).
    None,
    /// GroupApi: `groupDepth`.
    GroupApi {
        /// `groupDepth`.
        depth: i32,
    },
    /// CollApi, P2pApi, Coll, P2p: index of the [`Detail`] in the thread's side table.
    Detail {
        /// Index in the recording thread's details.
        index: u32,
    },
    /// ProxyOp.
    ProxyOp {
        /// `channelId`.
        channel: u8,
        /// `isSend`.
        send: bool,
        /// `peer`.
        peer: i32,
        /// `nSteps`.
        nsteps: i32,
        /// `chunkSize`.
        chunk: i32,
    },
    /// ProxyStep: `step`.
    ProxyStep {
        /// `step`.
        step: i32,
    },
    /// NetPlugin: the plugin's `id`.
    NetPlugin {
        /// `id`.
        id: i64,
    },
    /// KernelCh: `channelId`.
    KernelCh {
        /// `channelId`.
        channel: u8,
    },
}

/// One record of a thread's log as `finalize` sees it (`Copy`, at most 48
/// bytes; stored as a variable-length record in the thread's log). Ids
/// are [`TraceProfiler::Event`] values; 0 = none. Times are [`Clock`] ticks in
/// a thread's log, realtime ns once collected.
#[derive(Debug, Clone, Copy)]
pub enum Entry {
    /// `startEvent`.
    Start {
        /// The new event.
        id: u64,
        /// Its parent (`parentObj`), 0 when none or not ours.
        parent: u64,
        /// Start time.
        t: u64,
        /// `ncclProfile*` bit.
        ty: u32,
        /// Rank (trace pid).
        rank: i32,
        /// Descriptor fields.
        p: Payload,
    },
    /// `recordEventState`.
    State {
        /// The event.
        id: u64,
        /// Time.
        t: u64,
        /// Transfer size (ProxyStep) or appended ops (ProxyCtrlAppendEnd); `u64::MAX` = none.
        size: u64,
        /// The state.
        state: i32,
    },
    /// `stopEvent`.
    Stop {
        /// The event.
        id: u64,
        /// Stop time.
        t: u64,
    },
}

/// Most chunks of [`CHUNK_BYTES`] one thread's log holds (16 GiB of
/// entries); what a thread records beyond that is dropped.
pub const MAX_CHUNKS: usize = 4096;

/// An append-only vector with one writer (the thread that owns it) and any
/// number of readers, growing by whole chunks of [`CHUNK_BYTES`] (nothing is
/// moved when it grows). The writer takes no lock: it writes the next slot,
/// which no reader looks at yet, then publishes it by storing `len` (release);
/// a reader loads `len` (acquire) and reads that prefix.
struct AppendLog<T> {
    /// Chunk pointers (NULL: not allocated yet); [`MAX_CHUNKS`] of them.
    chunks: Box<[AtomicPtr<T>]>,
    /// Published elements.
    len: AtomicUsize,
}

// SAFETY: the elements are `Copy` values written by one thread before `len`
// publishes them (release) and only read below the published `len` (acquire).
unsafe impl<T: Copy + Send> Sync for AppendLog<T> {}
// SAFETY: as above; the chunks are owned by the log.
unsafe impl<T: Copy + Send> Send for AppendLog<T> {}

impl<T> std::fmt::Debug for AppendLog<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppendLog")
            .field("len", &self.len.load(Ordering::Relaxed))
            .finish()
    }
}

impl<T: Copy> AppendLog<T> {
    /// Elements per chunk.
    const PER_CHUNK: usize = CHUNK_BYTES / std::mem::size_of::<T>();

    fn new() -> Self {
        AppendLog {
            chunks: (0..MAX_CHUNKS).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            len: AtomicUsize::new(0),
        }
    }

    /// Appends `e`; its index, or `None` when the log is full.
    ///
    /// # Safety
    /// Only one thread (the log's owner) may ever call `push` on this log.
    #[inline]
    unsafe fn push(&self, e: T) -> Option<usize> {
        let n = self.len.load(Ordering::Relaxed);
        let chunk = self.chunks.get(n / Self::PER_CHUNK)?;
        let mut p = chunk.load(Ordering::Relaxed);
        if p.is_null() {
            p = Self::new_chunk();
            chunk.store(p, Ordering::Release);
        }
        // SAFETY: `p` holds PER_CHUNK elements; slot `n % PER_CHUNK` is not yet
        // published, so no reader touches it, and only this thread writes.
        unsafe { p.add(n % Self::PER_CHUNK).write(e) };
        self.len.store(n + 1, Ordering::Release);
        Some(n)
    }

    #[cold]
    fn new_chunk() -> *mut T {
        let mut c: Vec<T> = Vec::with_capacity(Self::PER_CHUNK);
        advise_huge(c.as_mut_ptr().cast(), c.capacity() * std::mem::size_of::<T>());
        std::mem::ManuallyDrop::new(c).as_mut_ptr()
    }

    /// A copy of the published elements.
    fn to_vec(&self) -> Vec<T> {
        let n = self.len.load(Ordering::Acquire);
        let mut v = Vec::with_capacity(n);
        let mut left = n;
        for c in self.chunks.iter() {
            if left == 0 {
                break;
            }
            let k = left.min(Self::PER_CHUNK);
            // SAFETY: the first `n` elements were written (and their chunk
            // pointers stored) before `len` was published with release.
            unsafe { v.extend_from_slice(std::slice::from_raw_parts(c.load(Ordering::Relaxed), k)) };
            left -= k;
        }
        v
    }
}

impl<T> Drop for AppendLog<T> {
    fn drop(&mut self) {
        for c in self.chunks.iter() {
            let p = c.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: allocated by `new_chunk` as a `Vec<T>` of this capacity;
                // `T: Copy` elements need no drop.
                drop(unsafe { Vec::from_raw_parts(p, 0, CHUNK_BYTES / std::mem::size_of::<T>()) });
            }
        }
    }
}

/// `madvise(MADV_HUGEPAGE)` on the 2 MiB-aligned part of `[p, p + len)` (a hint:
/// failure changes nothing).
fn advise_huge(p: *mut u8, len: usize) {
    const HUGE: usize = 2 << 20;
    let start = (p as usize).next_multiple_of(HUGE);
    let end = (p as usize + len) / HUGE * HUGE;
    if end > start {
        // SAFETY: the range lies inside an allocation this thread owns; MADV_HUGEPAGE
        // only changes how the kernel backs it, never its contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

/// A thread's entries as variable-length records (see [`encode`]) in chunks
/// of [`CHUNK_BYTES`]: one writer (the owning thread), any number of readers,
/// published as [`AppendLog`] does. A record never straddles two chunks: when
/// the next one does not fit, the rest of the chunk starts with [`TAG_PAD`].
struct ByteLog {
    /// Chunk pointers (NULL: not allocated yet); [`MAX_CHUNKS`] of them.
    chunks: Box<[AtomicPtr<u8>]>,
    /// Published bytes, counting the padded ends of chunks.
    len: AtomicUsize,
}

impl std::fmt::Debug for ByteLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteLog")
            .field("len", &self.len.load(Ordering::Relaxed))
            .finish()
    }
}

impl ByteLog {
    fn new() -> Self {
        ByteLog {
            chunks: (0..MAX_CHUNKS).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            len: AtomicUsize::new(0),
        }
    }

    /// Appends the record of `e` ([`encode`], written in place: no staging
    /// buffer, no `memmove` call); `false` when the log is full. Room for
    /// [`MAX_RECORD`] bytes is kept before each record.
    ///
    /// # Safety
    /// Only one thread (the log's owner) may ever call `push` on this log.
    #[inline]
    unsafe fn push(&self, e: &Entry, prev_t: &mut u64) -> bool {
        let mut len = self.len.load(Ordering::Relaxed);
        let off = len % CHUNK_BYTES;
        if off + MAX_RECORD > CHUNK_BYTES {
            // `off > 0`, so this chunk exists; nobody reads past `len` yet.
            let p = self.chunks[len / CHUNK_BYTES].load(Ordering::Relaxed);
            // SAFETY: `off < CHUNK_BYTES` lies inside the chunk; unpublished, ours alone.
            unsafe { p.add(off).write(TAG_PAD) };
            len += CHUNK_BYTES - off;
        }
        let Some(chunk) = self.chunks.get(len / CHUNK_BYTES) else {
            return false;
        };
        let mut p = chunk.load(Ordering::Relaxed);
        if p.is_null() {
            p = AppendLog::<u8>::new_chunk();
            chunk.store(p, Ordering::Release);
        }
        // SAFETY: MAX_RECORD bytes fit in the chunk from `len % CHUNK_BYTES` on;
        // they are not yet published, so no reader touches them, and only this
        // thread writes.
        let n = unsafe { encode(e, p.add(len % CHUNK_BYTES), prev_t) };
        self.len.store(len + n, Ordering::Release);
        true
    }

    /// The published records, decoded; Start ids are rebuilt from the thread
    /// index `idx` and their order (the `n`-th start of a thread has sequence `n`).
    fn entries(&self, idx: u64) -> Vec<Entry> {
        let n = self.len.load(Ordering::Acquire);
        let mut out = Vec::with_capacity(n / 24);
        let mut seq = 0u64;
        let mut prev_t = 0u64;
        let mut pos = 0;
        while pos < n {
            let end = n.min((pos / CHUNK_BYTES + 1) * CHUNK_BYTES);
            let p = self.chunks[pos / CHUNK_BYTES].load(Ordering::Relaxed);
            // SAFETY: bytes `[pos, end)` were written (as whole records or a pad
            // tag) before `len` was published with release, all in this chunk.
            let bytes = unsafe { std::slice::from_raw_parts(p.add(pos % CHUNK_BYTES), end - pos) };
            let mut r = Reader(bytes);
            while !r.0.is_empty() {
                match decode(&mut r, idx, &mut seq, &mut prev_t) {
                    Some(e) => out.push(e),
                    None => break, // TAG_PAD (or a damaged tail): next chunk
                }
            }
            pos = end.next_multiple_of(CHUNK_BYTES);
        }
        out
    }
}

impl Drop for ByteLog {
    fn drop(&mut self) {
        for c in self.chunks.iter() {
            let p = c.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: allocated by `AppendLog::<u8>::new_chunk` as a `Vec<u8>` of this capacity.
                drop(unsafe { Vec::from_raw_parts(p, 0, CHUNK_BYTES) });
            }
        }
    }
}

/// Record tags of a [`ByteLog`].
const TAG_PAD: u8 = 0;
const TAG_START: u8 = 1;
const TAG_STATE: u8 = 2;
const TAG_STATE_NO_SIZE: u8 = 3;
const TAG_STOP: u8 = 4;
/// Room kept for a record (the longest, a Start with a ProxyOp payload and a
/// full time, is 44 bytes).
const MAX_RECORD: usize = 48;

/// A record being written straight into its place in the log (no staging
/// buffer: fields are stored once, unaligned, little-endian).
struct Writer {
    p: *mut u8,
    len: usize,
}

impl Writer {
    /// Starts a record with `tag` at `p`.
    ///
    /// # Safety
    /// `p` must be writable for [`MAX_RECORD`] bytes.
    #[inline]
    unsafe fn at(p: *mut u8, tag: u8) -> Self {
        let mut w = Writer { p, len: 0 };
        w.put([tag]);
        w
    }

    #[inline]
    fn put<const N: usize>(&mut self, b: [u8; N]) {
        assert!(self.len + N <= MAX_RECORD, "record longer than MAX_RECORD");
        // SAFETY: `p` is writable for MAX_RECORD bytes (`Writer::at`), checked above.
        unsafe { self.p.add(self.len).cast::<[u8; N]>().write_unaligned(b) };
        self.len += N;
    }

    /// A time as its difference from the previous record's (`prev`, updated):
    /// 4 bytes, or [`TIME_FULL`] and the 8 bytes of the time when the
    /// difference does not fit (long idle gaps, a clock stepping back).
    #[inline]
    fn time(&mut self, t: u64, prev: &mut u64) {
        let d = t.wrapping_sub(*prev);
        if d < u64::from(TIME_FULL) {
            self.put((d as u32).to_le_bytes());
        } else {
            self.put(TIME_FULL.to_le_bytes());
            self.put(t.to_le_bytes());
        }
        *prev = t;
    }
}

/// The 4-byte time difference that announces a full 8-byte time.
const TIME_FULL: u32 = u32::MAX;

/// Reads little-endian fields off the front of a record slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (h, t) = self.0.split_first_chunk::<N>()?;
        self.0 = t;
        Some(*h)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    /// A time written by [`Writer::time`] after `prev` (updated).
    fn time(&mut self, prev: &mut u64) -> Option<u64> {
        let t = match self.u32()? {
            TIME_FULL => self.u64()?,
            d => prev.wrapping_add(u64::from(d)),
        };
        *prev = t;
        Some(t)
    }
}

/// The record of `e` in a [`ByteLog`]: a tag, then the fields little-endian;
/// a Start without its id (rebuilt from the order of starts) and with only
/// its payload's own fields; a state without the size when it has none.
/// Times are differences from the thread's previous record ([`Writer::time`]).
/// 13 to 44 bytes (mostly 13 to 36) instead of the 48 of an [`Entry`]: what the log writes per
/// event is most of what keeping every event costs (page faults on fresh memory).
///
/// # Safety
/// `dst` must be writable for [`MAX_RECORD`] bytes.
#[inline]
unsafe fn encode(e: &Entry, dst: *mut u8, prev_t: &mut u64) -> usize {
    match *e {
        Entry::Start {
            parent, t, ty, rank, p, ..
        } => {
            // SAFETY: per the caller.
            let mut w = unsafe { Writer::at(dst, TAG_START) };
            w.put(ty.to_le_bytes());
            w.put(rank.to_le_bytes());
            w.time(t, prev_t);
            w.put(parent.to_le_bytes());
            match p {
                Payload::None => w.put([0]),
                Payload::GroupApi { depth } => {
                    w.put([1]);
                    w.put(depth.to_le_bytes());
                }
                Payload::Detail { index } => {
                    w.put([2]);
                    w.put(index.to_le_bytes());
                }
                Payload::ProxyOp {
                    channel,
                    send,
                    peer,
                    nsteps,
                    chunk,
                } => {
                    w.put([3, channel, send as u8]);
                    w.put(peer.to_le_bytes());
                    w.put(nsteps.to_le_bytes());
                    w.put(chunk.to_le_bytes());
                }
                Payload::ProxyStep { step } => {
                    w.put([4]);
                    w.put(step.to_le_bytes());
                }
                Payload::NetPlugin { id } => {
                    w.put([5]);
                    w.put(id.to_le_bytes());
                }
                Payload::KernelCh { channel } => w.put([6, channel]),
            }
            w.len
        }
        Entry::State { id, t, size, state } => {
            // SAFETY: per the caller.
            let mut w = unsafe { Writer::at(dst, if size == u64::MAX { TAG_STATE_NO_SIZE } else { TAG_STATE }) };
            w.put(id.to_le_bytes());
            w.time(t, prev_t);
            w.put(state.to_le_bytes());
            if size != u64::MAX {
                w.put(size.to_le_bytes());
            }
            w.len
        }
        Entry::Stop { id, t } => {
            // SAFETY: per the caller.
            let mut w = unsafe { Writer::at(dst, TAG_STOP) };
            w.put(id.to_le_bytes());
            w.time(t, prev_t);
            w.len
        }
    }
}

/// The next record of `r` ([`encode`]'s inverse); `None` at [`TAG_PAD`] or a
/// truncated record. `seq` counts the thread's starts so far.
fn decode(r: &mut Reader<'_>, idx: u64, seq: &mut u64, prev_t: &mut u64) -> Option<Entry> {
    match r.u8()? {
        TAG_START => {
            let (ty, rank, t, parent) = (r.u32()?, r.i32()?, r.time(prev_t)?, r.u64()?);
            let p = match r.u8()? {
                0 => Payload::None,
                1 => Payload::GroupApi { depth: r.i32()? },
                2 => Payload::Detail { index: r.u32()? },
                3 => Payload::ProxyOp {
                    channel: r.u8()?,
                    send: r.u8()? != 0,
                    peer: r.i32()?,
                    nsteps: r.i32()?,
                    chunk: r.i32()?,
                },
                4 => Payload::ProxyStep { step: r.i32()? },
                5 => Payload::NetPlugin {
                    id: i64::from_le_bytes(r.take()?),
                },
                6 => Payload::KernelCh { channel: r.u8()? },
                _ => return None,
            };
            *seq += 1;
            Some(Entry::Start {
                id: (idx << 40) | *seq,
                parent,
                t,
                ty,
                rank,
                p,
            })
        }
        tag @ (TAG_STATE | TAG_STATE_NO_SIZE) => {
            let (id, t, state) = (r.u64()?, r.time(prev_t)?, r.i32()?);
            let size = if tag == TAG_STATE { r.u64()? } else { u64::MAX };
            Some(Entry::State { id, t, size, state })
        }
        TAG_STOP => Some(Entry::Stop {
            id: r.u64()?,
            t: r.time(prev_t)?,
        }),
        _ => None,
    }
}

/// One thread's log: its entries and details, and the thread's index
/// (the high half of its event ids).
#[derive(Debug)]
struct ThreadLog {
    idx: u64,
    entries: ByteLog,
    details: AppendLog<Detail>,
}

#[derive(Debug, Default)]
struct Store {
    /// Every thread's log that ever recorded (kept after the thread exits).
    logs: Vec<Arc<ThreadLog>>,
    /// Live contexts in this process.
    contexts: usize,
}

fn store() -> &'static Mutex<Store> {
    static S: OnceLock<Mutex<Store>> = OnceLock::new();
    S.get_or_init(Default::default)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a thread holds of its own log: the log (it is the only writer) and
/// the sequence number of its last event.
struct Local {
    log: Arc<ThreadLog>,
    next: Cell<u64>,
    /// The log is full: this thread records nothing more.
    full: Cell<bool>,
    /// The time of the last record (records hold the difference).
    prev_t: Cell<u64>,
}

impl Local {
    /// Appends `e` to this thread's entries.
    #[inline]
    fn push(&self, e: Entry) {
        if self.full.get() {
            return;
        }
        let mut prev_t = self.prev_t.get();
        // SAFETY: as above.
        // SAFETY: `Local` lives in this thread's TLS: its thread is the log's only writer.
        let ok = unsafe { self.log.entries.push(&e, &mut prev_t) };
        self.prev_t.set(prev_t);
        if !ok {
            // Nothing more, not even a shorter record that would still fit: the
            // ids of starts are their order in the log.
            self.full.set(true);
        }
    }

    /// Appends `d` to this thread's details; its index (`None`: full).
    #[inline]
    fn push_detail(&self, d: Detail) -> Option<usize> {
        // SAFETY: as in `push`.
        unsafe { self.log.details.push(d) }
    }

    /// A new event id: the thread index (high 24 bits) and the next sequence number.
    #[inline]
    fn next_id(&self) -> u64 {
        let n = self.next.get() + 1;
        self.next.set(n);
        (self.log.idx << 40) | n
    }
}

thread_local! {
    /// This thread's log, registered in [`store`] at its first event.
    static LOG: OnceCell<Local> = const { OnceCell::new() };
}

/// Runs `f` on this thread's log (registering it first); `None` while the
/// thread is being torn down.
#[inline]
fn with_log<R>(f: impl FnOnce(&Local) -> R) -> Option<R> {
    LOG.try_with(|cell| f(cell.get_or_init(register))).ok()
}

/// Creates this thread's log and registers it in [`store`].
#[cold]
fn register() -> Local {
    let mut st = lock(store());
    let log = Arc::new(ThreadLog {
        idx: st.logs.len() as u64 + 1,
        entries: ByteLog::new(),
        details: AppendLog::new(),
    });
    st.logs.push(log.clone());
    Local {
        log,
        next: Cell::new(0),
        full: Cell::new(false),
        prev_t: Cell::new(0),
    }
}

/// Appends `e` to this thread's log.
#[inline]
fn append(e: Entry) {
    with_log(|l| l.push(e));
}

/// `CLOCK_REALTIME` in ns.
fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-parameter; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The hot path's clock: the CPU's time-stamp counter where it is invariant
/// (x86-64 with `constant_tsc` and `nonstop_tsc`: one rate, every core, every
/// power state), read in a few ns; `CLOCK_REALTIME` otherwise. Ticks become
/// wall-clock ns at `finalize` by the line through two (counter, realtime)
/// anchors: the first event of the process and the write.
#[derive(Debug, Clone, Copy)]
struct Clock {
    tsc: bool,
    /// (ticks, realtime ns) at the first use.
    anchor: (u64, u64),
}

fn clock() -> &'static Clock {
    static C: OnceLock<Clock> = OnceLock::new();
    C.get_or_init(|| {
        let tsc = cfg!(target_arch = "x86_64")
            && std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
                c.lines().find(|l| l.starts_with("flags")).is_some_and(|l| {
                    l.split_whitespace().any(|f| f == "constant_tsc")
                        && l.split_whitespace().any(|f| f == "nonstop_tsc")
                })
            });
        let mut c = Clock { tsc, anchor: (0, 0) };
        c.anchor = c.pair();
        c
    })
}

impl Clock {
    #[inline]
    fn ticks(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.tsc {
            // SAFETY: RDTSC exists on every x86-64 CPU and has no side effect.
            return unsafe { core::arch::x86_64::_rdtsc() };
        }
        realtime_ns()
    }

    /// A (ticks, realtime ns) pair read back to back (the closest of a few tries).
    fn pair(&self) -> (u64, u64) {
        let mut best = (u64::MAX, 0, 0);
        for _ in 0..5 {
            let a = self.ticks();
            let ns = realtime_ns();
            let b = self.ticks();
            if b.wrapping_sub(a) < best.0 {
                best = (b.wrapping_sub(a), a / 2 + b / 2, ns);
            }
        }
        (best.1, best.2)
    }

    /// The map from ticks to realtime ns: `ns = a.1 + (ticks - a.0) * scale`.
    /// The second anchor is taken now, at least 20 ms after the first.
    fn ns_map(&self) -> impl Fn(u64) -> u64 + use<> {
        let a = self.anchor;
        if !self.tsc {
            return Box::new(|t: u64| t) as Box<dyn Fn(u64) -> u64>;
        }
        let elapsed = realtime_ns().saturating_sub(a.1);
        if elapsed < 20_000_000 {
            std::thread::sleep(std::time::Duration::from_nanos(20_000_000 - elapsed));
        }
        let b = self.pair();
        let scale = (b.1 - a.1) as f64 / b.0.saturating_sub(a.0).max(1) as f64;
        Box::new(move |t: u64| (a.1 as i64 + ((t as i64 - a.0 as i64) as f64 * scale) as i64) as u64)
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// The time of an event, in [`Clock`] ticks.
#[inline]
fn now_ns() -> u64 {
    clock().ticks()
}

/// `NCCL_PROFILER_TRACE_FILE` with `%h`/`%p` expanded.
pub fn trace_path() -> PathBuf {
    let pat = std::env::var("NCCL_PROFILER_TRACE_FILE").unwrap_or_else(|_| "ferroccl-trace-%h-%p.json".into());
    let mut host = [0u8; 256];
    // SAFETY: `host` is writable for its length; gethostname NUL-terminates on success.
    let host = if unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) } == 0 {
        let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
        String::from_utf8_lossy(&host[..end]).into_owned()
    } else {
        "host".into()
    };
    PathBuf::from(pat.replace("%h", &host).replace("%p", &std::process::id().to_string()))
}

fn state_name(s: i32) -> &'static str {
    match s {
        8 => "SendGPUWait",
        9 => "SendWait",
        10 => "RecvWait",
        11 => "RecvFlushWait",
        12 => "RecvGPUWait",
        13 => "Idle",
        14 => "Active",
        15 => "Sleep",
        16 => "Wakeup",
        17 => "Append",
        18 => "AppendEnd",
        19 => "InProgress",
        20 => "SendPeerWait",
        21 => "NetPluginUpdate",
        22 => "KernelChStop",
        23 => "GroupStartApiStop",
        24 => "GroupEndApiStart",
        _ => "State",
    }
}

/// One event as the trace shows it (built at `finalize` from the logs).
#[derive(Debug, Clone)]
pub struct Rec {
    /// `ncclProfile*` bit.
    pub ty: u64,
    /// Display name.
    pub name: String,
    /// Rank (trace pid).
    pub rank: i32,
    /// Track name.
    pub track: String,
    /// Start, µs since the epoch.
    pub start: f64,
    /// Stop, µs (None while running).
    pub stop: Option<f64>,
    /// Parent record.
    pub parent: Option<usize>,
    /// The Group record of a Coll/P2p (`parentGroup`, v5+).
    pub group: Option<usize>,
    /// Arguments.
    pub args: serde_json::Map<String, Value>,
    /// State records: (state, µs, transfer size).
    pub states: Vec<(i32, f64, Option<u64>)>,
}

/// The records of every thread's log so far, parents before children (an event
/// starts after its parent on the one clock; equal times keep log order).
pub fn collect() -> Vec<Rec> {
    let logs: Vec<Arc<ThreadLog>> = lock(store()).logs.clone();
    let to_ns = clock().ns_map();
    let threads: Vec<(Vec<Entry>, Vec<Detail>)> = logs
        .iter()
        .map(|l| {
            let mut entries = l.entries.entries(l.idx);
            for e in &mut entries {
                match e {
                    Entry::Start { t, .. } | Entry::State { t, .. } | Entry::Stop { t, .. } => *t = to_ns(*t),
                }
            }
            (entries, l.details.to_vec())
        })
        .collect();
    recs_of(&threads)
}

/// [`Rec`]s of the logs of some threads: each thread's entries (times in
/// realtime ns) with its side table of details.
pub fn recs_of(threads: &[(Vec<Entry>, Vec<Detail>)]) -> Vec<Rec> {
    let mut starts: Vec<(u64, &Entry, &[Detail])> = Vec::new();
    for (entries, details) in threads {
        for e in entries {
            if let Entry::Start { t, .. } = e {
                starts.push((*t, e, details));
            }
        }
    }
    starts.sort_by_key(|s| s.0);
    let mut index: HashMap<u64, usize> = HashMap::with_capacity(starts.len());
    let mut recs: Vec<Rec> = Vec::with_capacity(starts.len());
    for (_, e, details) in starts {
        let Entry::Start {
            id,
            parent,
            ty,
            rank,
            t,
            p,
        } = *e
        else {
            continue;
        };
        let ty = u64::from(ty);
        let parent = index.get(&parent).copied();
        let prec = parent.map(|i| &recs[i]);
        let detail = match p {
            Payload::Detail { index } => details.get(index as usize).copied(),
            _ => None,
        };
        let group = match detail {
            Some(Detail::Coll { group, .. } | Detail::P2p { group, .. }) => index.get(&group).copied(),
            _ => None,
        };
        let mut args = serde_json::Map::new();
        let (name, track) = match (p, detail) {
            (Payload::GroupApi { depth }, _) => {
                args.insert("groupDepth".into(), json!(depth));
                ("GroupApi".to_string(), "API".to_string())
            }
            (
                _,
                Some(Detail::Api {
                    func,
                    count,
                    dtype,
                    root,
                    p2p,
                }),
            ) => {
                args.insert("count".into(), json!(count));
                args.insert("datatype".into(), json!(dtype.as_string()));
                if !p2p {
                    args.insert("root".into(), json!(root));
                }
                (format!("{} (API)", func.as_string()), "API".to_string())
            }
            (
                _,
                Some(Detail::Coll {
                    seq,
                    func,
                    count,
                    dtype,
                    root,
                    algo,
                    proto,
                    nchannels,
                    ..
                }),
            ) => {
                args.insert("seqNumber".into(), json!(seq));
                args.insert("count".into(), json!(count));
                args.insert("datatype".into(), json!(dtype.as_string()));
                args.insert("root".into(), json!(root));
                args.insert("algorithm".into(), json!(algo.as_string()));
                args.insert("protocol".into(), json!(proto.as_string()));
                args.insert("nChannels".into(), json!(nchannels));
                (func.as_string(), "ops".to_string())
            }
            (
                _,
                Some(Detail::P2p {
                    func,
                    count,
                    dtype,
                    peer,
                    ..
                }),
            ) => {
                args.insert("count".into(), json!(count));
                args.insert("datatype".into(), json!(dtype.as_string()));
                args.insert("peer".into(), json!(peer));
                (format!("{} peer {}", func.as_string(), peer), "ops".to_string())
            }
            (
                Payload::ProxyOp {
                    channel,
                    peer,
                    nsteps,
                    chunk,
                    send,
                },
                _,
            ) => {
                args.insert("channel".into(), json!(channel));
                args.insert("peer".into(), json!(peer));
                args.insert("nSteps".into(), json!(nsteps));
                args.insert("chunkSize".into(), json!(chunk));
                if let Some(p) = prec {
                    args.insert("of".into(), json!(p.name));
                    if let Some(s) = p.args.get("seqNumber") {
                        args.insert("seqNumber".into(), s.clone());
                    }
                }
                if send {
                    ("ProxyOp send".to_string(), format!("ch {channel} send→{peer}"))
                } else {
                    ("ProxyOp recv".to_string(), format!("ch {channel} recv←{peer}"))
                }
            }
            (Payload::ProxyStep { step }, _) => {
                args.insert("step".into(), json!(step));
                let base = prec.map_or("steps", |p| p.track.as_str());
                (format!("step {step}"), format!("{base} slot {}", step.rem_euclid(8)))
            }
            (Payload::NetPlugin { id }, _) => {
                args.insert("pluginId".into(), json!(format!("0x{id:x}")));
                let track = prec.map_or_else(|| "net".to_string(), |p| format!("{} net", p.track));
                ("net".to_string(), track)
            }
            (Payload::KernelCh { channel }, _) => ("KernelCh".to_string(), format!("kernel ch {channel}")),
            _ => match ty {
                abi::ncclProfileGroup => ("Group".to_string(), "ops".to_string()),
                abi::ncclProfileProxyCtrl => ("ProxyCtrl".to_string(), "proxy".to_string()),
                t => (format!("event 0x{t:x}"), "other".to_string()),
            },
        };
        index.insert(id, recs.len());
        recs.push(Rec {
            ty,
            name,
            rank,
            track,
            start: us(t),
            stop: None,
            parent,
            group,
            args,
            states: Vec::new(),
        });
    }
    for e in threads.iter().flat_map(|t| t.0.iter()) {
        match *e {
            Entry::State { id, t, size, state } => {
                if let Some(&i) = index.get(&id) {
                    recs[i].states.push((state, us(t), (size != u64::MAX).then_some(size)));
                }
            }
            Entry::Stop { id, t } => {
                if let Some(&i) = index.get(&id) {
                    recs[i].stop = Some(us(t));
                }
            }
            Entry::Start { .. } => {}
        }
    }
    for r in &mut recs {
        r.states.sort_by(|a, b| a.1.total_cmp(&b.1));
    }
    recs
}

/// The trace profiler of one communicator.
#[derive(Debug)]
pub struct TraceProfiler {
    rank: i32,
}

impl TraceProfiler {
    /// The fixed-size fields of `d`'s event, and its [`Detail`] for the larger ones.
    #[inline]
    fn payload(d: &abi::ncclProfilerEventDescr_v6_t) -> (Payload, Option<Detail>) {
        match d.r#type {
            abi::ncclProfileGroupApi => {
                // SAFETY: the type selects the union member.
                let g = unsafe { d.u.groupApi };
                (Payload::GroupApi { depth: g.groupDepth }, None)
            }
            abi::ncclProfileCollApi => {
                // SAFETY: as above.
                let c = unsafe { d.u.collApi };
                let det = Detail::Api {
                    func: Name::of(c.func),
                    count: c.count,
                    dtype: Name::of(c.datatype),
                    root: c.root,
                    p2p: false,
                };
                (Payload::None, Some(det))
            }
            abi::ncclProfileP2pApi => {
                // SAFETY: as above.
                let c = unsafe { d.u.p2pApi };
                let det = Detail::Api {
                    func: Name::of(c.func),
                    count: c.count,
                    dtype: Name::of(c.datatype),
                    root: 0,
                    p2p: true,
                };
                (Payload::None, Some(det))
            }
            abi::ncclProfileColl => {
                // SAFETY: as above.
                let c = unsafe { d.u.coll };
                let group = TraceProfiler::event_of_handle(c.parentGroup as usize).unwrap_or(0);
                let det = Detail::Coll {
                    seq: c.seqNumber,
                    func: Name::of(c.func),
                    count: c.count,
                    dtype: Name::of(c.datatype),
                    root: c.root,
                    algo: Name::of(c.algo),
                    proto: Name::of(c.proto),
                    nchannels: c.nChannels,
                    group,
                };
                (Payload::None, Some(det))
            }
            abi::ncclProfileP2p => {
                // SAFETY: as above.
                let c = unsafe { d.u.p2p };
                let group = TraceProfiler::event_of_handle(c.parentGroup as usize).unwrap_or(0);
                let det = Detail::P2p {
                    func: Name::of(c.func),
                    count: c.count,
                    dtype: Name::of(c.datatype),
                    peer: c.peer,
                    group,
                };
                (Payload::None, Some(det))
            }
            abi::ncclProfileProxyOp => {
                // SAFETY: as above.
                let o = unsafe { d.u.proxyOp };
                let p = Payload::ProxyOp {
                    channel: o.channelId,
                    send: o.isSend != 0,
                    peer: o.peer,
                    nsteps: o.nSteps,
                    chunk: o.chunkSize,
                };
                (p, None)
            }
            abi::ncclProfileProxyStep => {
                // SAFETY: as above.
                let step = unsafe { d.u.proxyStep }.step;
                (Payload::ProxyStep { step }, None)
            }
            abi::ncclProfileNetPlugin => {
                // SAFETY: as above.
                let id = unsafe { d.u.netPlugin }.id;
                (Payload::NetPlugin { id }, None)
            }
            abi::ncclProfileKernelCh => {
                // SAFETY: as above.
                let channel = unsafe { d.u.kernelCh }.channelId;
                (Payload::KernelCh { channel }, None)
            }
            _ => (Payload::None, None),
        }
    }
}

impl Profiler for TraceProfiler {
    const NAME: &'static CStr = c"FerrocclTrace";
    /// The event's id: the recording thread's index (high 24 bits) and its
    /// sequence number there (never 0). It is also the event's handle
    /// ([`Profiler::UNBOXED`]): no box, no retained copy, no lock in the SDK, and
    /// a stopped parent's id stays valid for its later children.
    type Event = u64;
    const UNBOXED: bool = true;

    fn init(info: ProfilerInit<'_>, activation_mask: &mut i32) -> NetResult<Self> {
        *activation_mask = std::env::var("NCCL_PROFILE_EVENT_MASK")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_MASK);
        lock(store()).contexts += 1;
        clock();
        Ok(TraceProfiler { rank: info.rank })
    }

    fn start_event(&self, descr: &abi::ncclProfilerEventDescr_v6_t) -> NetResult<Option<u64>> {
        self.start_child(descr, None)
    }

    fn start_child(&self, descr: &abi::ncclProfilerEventDescr_v6_t, parent: Option<&u64>) -> NetResult<Option<u64>> {
        let (p, detail) = Self::payload(descr);
        let rank = if descr.rank != 0 { descr.rank } else { self.rank };
        let t = now_ns();
        let parent = parent.copied().unwrap_or(0);
        let ty = descr.r#type as u32;
        Ok(with_log(|l| {
            let id = l.next_id();
            let p = match detail.and_then(|d| l.push_detail(d)) {
                Some(index) => Payload::Detail { index: index as u32 },
                None => p,
            };
            l.push(Entry::Start {
                id,
                parent,
                t,
                ty,
                rank,
                p,
            });
            id
        }))
    }

    fn handle_of(event: &u64) -> usize {
        *event as usize
    }

    fn event_of_handle(h: usize) -> Option<u64> {
        (h != 0).then_some(h as u64)
    }

    fn record_event_state(
        &self,
        event: &mut u64,
        state: abi::ncclProfilerEventState_t,
        args: Option<&abi::ncclProfilerEventStateArgs_v6_t>,
    ) -> NetResult<()> {
        Self::record_unboxed(event, state, args)
    }

    fn stop_event(&self, event: u64) -> NetResult<()> {
        Self::stop_unboxed(event)
    }

    fn record_unboxed(
        event: &mut u64,
        state: abi::ncclProfilerEventState_t,
        args: Option<&abi::ncclProfilerEventStateArgs_v6_t>,
    ) -> NetResult<()> {
        let t = now_ns();
        let size = match args {
            // SAFETY: ProxyStep states (8..=12, 20) carry `proxyStep.transSize`.
            Some(a) if matches!(state, 8..=12 | 20) => (unsafe { a.proxyStep.transSize }) as u64,
            // SAFETY: `ProxyCtrlAppendEnd` carries `proxyCtrl.appendedProxyOps`.
            Some(a) if state == 18 => unsafe { a.proxyCtrl.appendedProxyOps }.max(0) as u64,
            _ => u64::MAX,
        };
        append(Entry::State {
            id: *event,
            t,
            size,
            state,
        });
        Ok(())
    }

    fn stop_unboxed(event: u64) -> NetResult<()> {
        append(Entry::Stop { id: event, t: now_ns() });
        Ok(())
    }

    fn finalize(self) -> NetResult<()> {
        let path = trace_path();
        {
            let mut st = lock(store());
            st.contexts = st.contexts.saturating_sub(1);
        }
        let json = to_chrome(&collect());
        let text = serde_json::to_string(&json).unwrap_or_default();
        if let Err(e) = std::fs::write(&path, text) {
            ferroccl_plugin_api::net_warn!("PROFILER/Trace: cannot write {}: {e}", path.display());
        } else {
            ferroccl_plugin_api::net_info!(0x1, "PROFILER/Trace: wrote {}", path.display());
        }
        Ok(())
    }
}

/// The Chrome trace (`{"traceEvents": [...]}`) of `recs`: complete (`X`) events
/// with parents stretched over their descendants, state intervals of
/// ProxySteps as nested events, and track/process names as metadata.
pub fn to_chrome(recs: &[Rec]) -> Value {
    // End of each event = max(own stop, descendants' ends); children come after
    // their parents, so one reverse pass suffices.
    let mut end: Vec<f64> = recs.iter().map(|r| r.stop.unwrap_or(r.start)).collect();
    for i in (0..recs.len()).rev() {
        if let Some(p) = recs[i].parent
            && p < i
            && matches!(
                recs[p].ty,
                abi::ncclProfileColl | abi::ncclProfileP2p | abi::ncclProfileGroup
            )
        {
            end[p] = end[p].max(end[i]);
        }
        if let Some(g) = recs[i].group
            && g < i
        {
            end[g] = end[g].max(end[i]);
        }
    }
    let mut tids: Vec<(i32, String)> = Vec::new();
    let mut tid_of = |rank: i32, track: &str| -> usize {
        match tids.iter().position(|(r, t)| *r == rank && t == track) {
            Some(i) => i,
            None => {
                tids.push((rank, track.to_string()));
                tids.len() - 1
            }
        }
    };
    let mut out = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        let tid = tid_of(r.rank, &r.track);
        let mut args = r.args.clone();
        args.insert("id".into(), json!(i));
        if let Some(p) = r.parent {
            args.insert("parent".into(), json!(p));
        }
        if let Some(g) = r.group {
            args.insert("group".into(), json!(g));
        }
        if r.stop.is_none() {
            args.insert("notStopped".into(), json!(true));
        }
        if let Some((_, _, Some(n))) = r.states.iter().find(|s| s.2.is_some()) {
            args.insert("transSize".into(), json!(n));
        }
        out.push(json!({
            "name": r.name, "cat": cat(r.ty), "ph": "X", "pid": r.rank, "tid": tid,
            "ts": r.start, "dur": (end[i] - r.start).max(0.0), "args": args,
        }));
        if r.ty == abi::ncclProfileProxyStep {
            for (k, s) in r.states.iter().enumerate() {
                let until = r.states.get(k + 1).map_or(end[i], |n| n.1);
                out.push(json!({
                    "name": state_name(s.0), "cat": "state", "ph": "X", "pid": r.rank, "tid": tid,
                    "ts": s.1, "dur": (until - s.1).max(0.0),
                    "args": {"state": s.0, "transSize": s.2, "of": i},
                }));
            }
        }
    }
    let mut ranks: Vec<i32> = tids.iter().map(|t| t.0).collect();
    ranks.sort();
    ranks.dedup();
    for r in ranks {
        out.push(json!({"name": "process_name", "ph": "M", "pid": r, "args": {"name": format!("rank {r}")}}));
    }
    for (tid, (rank, name)) in tids.iter().enumerate() {
        out.push(json!({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": name}}));
        out.push(json!({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid, "args": {"sort_index": tid}}));
    }
    json!({"traceEvents": out, "displayTimeUnit": "ns"})
}

fn cat(ty: u64) -> &'static str {
    match ty {
        abi::ncclProfileGroupApi | abi::ncclProfileCollApi | abi::ncclProfileP2pApi => "api",
        abi::ncclProfileGroup => "group",
        abi::ncclProfileColl => "coll",
        abi::ncclProfileP2p => "p2p",
        abi::ncclProfileProxyOp => "proxyOp",
        abi::ncclProfileProxyStep => "proxyStep",
        abi::ncclProfileNetPlugin => "net",
        abi::ncclProfileProxyCtrl => "proxyCtrl",
        _ => "other",
    }
}

ferroccl_plugin_api::export_profiler_plugin!(TraceProfiler);

#[cfg(test)]
mod tests {
    use super::*;

    fn descr(ty: u64) -> abi::ncclProfilerEventDescr_v6_t {
        let mut d = abi::ncclProfilerEventDescr_v6_t::zeroed();
        d.r#type = ty;
        d
    }

    /// Events of one collective recorded from two threads (API and Coll on one,
    /// the proxy's op and step on another, stopped in a third) come back as
    /// records with their parents, names, fields and states, and the Chrome
    /// trace nests the step inside the stretched collective.
    #[test]
    fn records_from_several_threads_keep_their_tree() {
        let p = TraceProfiler { rank: 3 };
        let mut d = descr(abi::ncclProfileColl);
        d.u.coll.seqNumber = 7;
        d.u.coll.func = c"AllReduce".as_ptr();
        d.u.coll.count = 1 << 20;
        d.u.coll.datatype = c"ncclFloat32".as_ptr();
        d.u.coll.algo = c"RING".as_ptr();
        d.u.coll.proto = c"SIMPLE".as_ptr();
        d.u.coll.nChannels = 2;
        let coll = p.start_event(&d).unwrap().expect("coll id");
        p.stop_event(coll).unwrap();
        let (op, step) = std::thread::scope(|s| {
            s.spawn(|| {
                let mut d = descr(abi::ncclProfileProxyOp);
                d.u.proxyOp.channelId = 1;
                d.u.proxyOp.peer = 2;
                d.u.proxyOp.nSteps = 4;
                d.u.proxyOp.isSend = 1;
                let op = p.start_child(&d, Some(&coll)).unwrap().expect("op id");
                let mut d = descr(abi::ncclProfileProxyStep);
                d.u.proxyStep.step = 9;
                let mut step = p.start_child(&d, Some(&op)).unwrap().expect("step id");
                let mut a = abi::ncclProfilerEventStateArgs_v6_t::zeroed();
                a.proxyStep.transSize = 4096;
                p.record_event_state(&mut step, 9, Some(&a)).unwrap();
                (op, step)
            })
            .join()
            .unwrap()
        });
        assert_ne!(coll >> 40, op >> 40, "ids of two threads differ in their thread index");
        std::thread::scope(|s| {
            s.spawn(|| {
                p.stop_event(step).unwrap();
                p.stop_event(op).unwrap();
            });
        });
        let recs: Vec<Rec> = collect().into_iter().filter(|r| r.rank == 3).collect();
        let by = |n: &str| {
            recs.iter()
                .position(|r| r.name == n)
                .unwrap_or_else(|| panic!("{n} in {recs:?}"))
        };
        let (c, o, s) = (by("AllReduce"), by("ProxyOp send"), by("step 9"));
        assert_eq!(recs[o].parent, Some(c));
        assert_eq!(recs[s].parent, Some(o));
        assert_eq!(recs[c].args["algorithm"], "RING");
        assert_eq!(recs[c].args["datatype"], "ncclFloat32");
        assert_eq!(recs[c].args["seqNumber"], 7);
        assert_eq!(recs[o].track, "ch 1 send→2");
        assert_eq!(recs[o].args["seqNumber"], 7);
        assert_eq!(recs[s].track, "ch 1 send→2 slot 1");
        assert_eq!(recs[s].states.len(), 1);
        assert_eq!(recs[s].states[0].0, 9);
        assert_eq!(recs[s].states[0].2, Some(4096));
        for r in &recs {
            assert!(r.stop.is_some_and(|t| r.start <= t), "{r:?}");
        }
        let v = to_chrome(&recs);
        let ev = v["traceEvents"].as_array().unwrap();
        let span = |name: &str| {
            let e = ev.iter().find(|e| e["name"] == name).unwrap();
            let ts = e["ts"].as_f64().unwrap();
            (ts, ts + e["dur"].as_f64().unwrap())
        };
        let (ca, cb) = span("AllReduce");
        let (sa, sb) = span("step 9");
        assert!(
            ca <= sa && sb <= cb,
            "step [{sa}, {sb}] outside its collective [{ca}, {cb}]"
        );
    }

    /// A hot-path record stays small (the larger fields go to the side table).
    #[test]
    fn entries_are_small() {
        assert!(std::mem::size_of::<Entry>() <= 48, "{}", std::mem::size_of::<Entry>());
        assert!(
            std::mem::size_of::<Payload>() <= 16,
            "{}",
            std::mem::size_of::<Payload>()
        );
    }

    /// Every kind of record comes back from a thread's byte log as it went in
    /// (Start ids rebuilt from their order), across chunk boundaries, which
    /// records never straddle.
    #[test]
    fn byte_log_round_trips_across_chunks() {
        let idx = 5;
        let payloads = [
            Payload::None,
            Payload::GroupApi { depth: -2 },
            Payload::Detail { index: 77 },
            Payload::ProxyOp {
                channel: 3,
                send: true,
                peer: 1,
                nsteps: 9,
                chunk: 1 << 20,
            },
            Payload::ProxyStep { step: 12 },
            Payload::NetPlugin { id: 0x1_0001 },
            Payload::KernelCh { channel: 7 },
        ];
        let mut want = Vec::new();
        let mut seq = 0;
        // Enough records to fill more than two chunks.
        for i in 0..(2 * CHUNK_BYTES / 16) as u64 {
            let e = match i % 4 {
                0 | 1 => {
                    seq += 1;
                    Entry::Start {
                        id: (idx << 40) | seq,
                        parent: i.wrapping_mul(0x9e37_79b9),
                        // Forward steps, a jump past 32 bits, and a step back.
                        t: match i % 1000 {
                            4 => i << 40,
                            8 => i / 2,
                            _ => i,
                        },
                        ty: 1 << (i % 15),
                        rank: i as i32 % 3,
                        p: payloads[(i / 4) as usize % payloads.len()],
                    }
                }
                2 => Entry::State {
                    id: i,
                    t: i + 1,
                    size: if i % 8 == 2 { u64::MAX } else { i * 3 },
                    state: (i % 25) as i32,
                },
                _ => Entry::Stop { id: i, t: i + 2 },
            };
            want.push(e);
        }
        let log = ByteLog::new();
        let mut prev_t = 0;
        for e in &want {
            // SAFETY: this thread is the log's only writer.
            assert!(unsafe { log.push(e, &mut prev_t) });
        }
        assert!(
            log.len.load(Ordering::Relaxed) > 2 * CHUNK_BYTES,
            "crossed two chunk ends"
        );
        let got = log.entries(idx);
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
    }

    /// Names longer than 15 bytes are cut, NULL is empty.
    #[test]
    fn names_are_copied_and_bounded() {
        assert_eq!(Name::of(c"ncclFloat8e4m3".as_ptr()).as_string(), "ncclFloat8e4m3");
        assert_eq!(Name::of(c"0123456789abcdefXYZ".as_ptr()).as_string(), "0123456789abcde");
        assert_eq!(Name::of(std::ptr::null()).as_string(), "");
    }
}
