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
//! encoded as a variable-length record (varints: 3 to 20 bytes for the usual
//! records, see [`encode`]; no heap string, no JSON, no allocation), to the
//! calling thread's own log, which takes no lock: its thread is the only
//! writer and publishes each record with one release store, which `finalize`
//! reads with acquire. The log grows by chunks (from [`CHUNK_MIN`], doubling
//! up to [`CHUNK_BYTES`]), faulted in a [`WINDOW`] at a time ahead of the
//! writer by a helper thread (`trace-prefault`, one `madvise` per window,
//! [`ByteLog::ahead`]), so the page faults and the zeroing of the fresh
//! memory that keeping every event needs happen off the recording threads;
//! on a kernel without `MADV_POPULATE_WRITE` the writer faults in its own
//! windows, so only the call that crosses a window meets page faults. Records are kept this short
//! because every byte kept is a byte of fresh memory the kernel must zero:
//! fixed-size records of raw fields (24 to 72 bytes) were tried and cost
//! more in zeroed pages than the encoding they saved (BENCHMARKS.md §8.10). A
//! thread finds its log by its thread pointer in a lock-free table (no
//! `__tls_get_addr` call, which a `dlopen`ed library pays per TLS access) and
//! registers it once in a process-wide list. Event ids are (thread, sequence)
//! pairs, so no counter is shared either; a record names its own thread's
//! events by their distance in starts (one byte, mostly). Names (function,
//! datatype, algorithm, protocol) are interned per thread, so a Coll record
//! holds four small indexes; a name's address seen before is not read
//! again ([`ThreadLog::intern`]). Times are raw TSC reads ([`Clock`]), one per
//! call, chosen once per process (one relaxed load per call): on a virtual
//! machine that read is a large part of what a call costs. The event bodies
//! are inlined into the SDK's exported shims, whose success path runs with
//! no call to the SDK's out-of-line guard.
//! An event's id is its handle (the SDK's `UNBOXED` mode): no box, no
//! retained copy and no lock per event. `finalize` merges the logs into
//! [`Rec`]s and serialises them with `serde_json`. `examples/microbench.rs`
//! measures the cost per call, `examples/dlbench.rs` the cost per operation
//! through the `dlopen`ed library.
//!
//! Memory: every event is kept until the process ends (a trace tool).

use std::cell::{OnceCell, UnsafeCell};
use std::collections::HashMap;
use std::ffi::{CStr, c_char};
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use ferroccl_plugin_api::abi;
use ferroccl_plugin_api::sdk::{NetResult, Profiler, ProfilerInit};
use serde_json::{Value, json};

/// The default activation mask: every type but ProxyCtrl.
pub const DEFAULT_MASK: i32 = 0x7fff & !(abi::ncclProfileProxyCtrl as i32);

ferroccl_plugin_api::params! {
    /// The plugin's parameters, exported as `ferrocclParams_v1`.
    pub static PARAMS = [
        TRACE_FILE: str "NCCL_PROFILER_TRACE_FILE" = Some("ferroccl-trace-%h-%p.json"), "trace profiler: Chrome trace JSON output path (%h host name, %p process id)";
        /// NCCL's example profiler's variable (`plugins/profiler/example`).
        EVENT_MASK: int "NCCL_PROFILE_EVENT_MASK" = DEFAULT_MASK as i64, 0..=0x7fff, "trace profiler: ncclProfile* event bits to record (default all but ProxyCtrl)";
    ];
}
ferroccl_plugin_api::export_params!(PARAMS);

/// Bytes per chunk of an [`AppendLog`], and of a thread's record log once
/// its chunks have grown from [`CHUNK_MIN`] (a full chunk is kept, a new one
/// is taken: nothing is ever moved or copied on the hot path). Chunks this
/// large are advised as transparent huge pages where the kernel allows it.
pub const CHUNK_BYTES: usize = 4 << 20;

/// A short name copied out of a descriptor's C string (NCCL's function,
/// datatype, algorithm and protocol names are at most 15 bytes; longer ones are
/// cut), so a record holds no pointer and no heap string.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
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
        // `strnlen` reads up to the NUL or 15 bytes, and only those are copied.
        unsafe {
            let len = libc::strnlen(p, n.bytes.len());
            std::ptr::copy_nonoverlapping(p.cast::<u8>(), n.bytes.as_mut_ptr(), len);
            n.len = len as u8;
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

/// The descriptor fields of the larger, rarer events (API calls, Coll, P2p):
/// in a thread's log the names are indexes of the thread's interned names
/// (`N = u32`); decoded, they are the names (`N =` [`Name`]) and the details
/// sit in a side table so that every [`Entry`] stays small.
#[derive(Debug, Clone, Copy)]
pub enum Detail<N = Name> {
    /// CollApi / P2pApi (`root` 0 for P2pApi).
    Api {
        /// `func`.
        func: N,
        /// `count`.
        count: usize,
        /// `datatype`.
        dtype: N,
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
        func: N,
        /// `count`.
        count: usize,
        /// `datatype`.
        dtype: N,
        /// `root`.
        root: i32,
        /// `algo`.
        algo: N,
        /// `proto`.
        proto: N,
        /// `nChannels`.
        nchannels: u8,
        /// `parentGroup`'s event id (v5+), 0 when none.
        group: u64,
    },
    /// P2p.
    P2p {
        /// `func`.
        func: N,
        /// `count`.
        count: usize,
        /// `datatype`.
        dtype: N,
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

/// Most chunks one thread's log holds (about 16 GiB of records with
/// [`CHUNK_BYTES`] chunks); what a thread records beyond that is dropped.
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

/// A thread's records (see [`encode`]) in chunks that double from
/// [`CHUNK_MIN`] up to [`CHUNK_BYTES`] ([`chunk_size`]): one writer (the
/// owning thread, through its [`Cursor`]), any number of readers, published
/// as [`AppendLog`] does. A record never straddles two chunks: when the next
/// one may not fit, the rest of the chunk starts with [`TAG_PAD`]. A chunk is
/// faulted in a [`WINDOW`] at a time ahead of the writer
/// ([`ByteLog::next_window`]), so the event calls that fill a window meet no
/// page fault; a thread with few events takes a small chunk only.
struct ByteLog {
    /// Chunk pointers (NULL: not mapped yet); at most [`MAX_CHUNKS`].
    chunks: Box<[AtomicPtr<u8>]>,
    /// Published bytes, counting the padded ends of chunks.
    len: AtomicUsize,
    /// Windows are faulted in by the [`Prefaulter`] thread, one window ahead
    /// of the writer, rather than by the writer ([`ByteLog::next_window`]).
    /// Only for logs that are never dropped (the helper may still work on a
    /// chunk after its writer has moved on).
    ahead: bool,
}

impl std::fmt::Debug for ByteLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteLog")
            .field("len", &self.len.load(Ordering::Relaxed))
            .finish()
    }
}

/// Bytes of a thread's first chunk; each next one is twice as large, up to
/// [`CHUNK_BYTES`].
pub const CHUNK_MIN: usize = 64 << 10;

/// Bytes of chunk `k` of a [`ByteLog`].
fn chunk_size(k: usize) -> usize {
    (CHUNK_MIN << k.min(CHUNK_BYTES.trailing_zeros() as usize - CHUNK_MIN.trailing_zeros() as usize)).min(CHUNK_BYTES)
}

/// The writer's side of a [`ByteLog`] (owned by the one thread that writes
/// it): where the next record goes, and what records are encoded against
/// (the previous record's time, the number of starts so far).
#[derive(Debug)]
struct Cursor {
    /// Where the next record goes (NULL before the first chunk).
    cur: *mut u8,
    /// End of the part of the current chunk faulted in so far (the writer
    /// goes to the cold path there: [`ByteLog::next_window`]).
    end: *mut u8,
    /// End of the current chunk.
    chunk_end: *mut u8,
    /// Bytes written (and published) so far, padded chunk ends included.
    len: usize,
    /// Chunks taken so far (the current one is `chunks - 1`).
    chunks: usize,
    /// Time of the previous record (records hold the difference).
    prev_t: u64,
    /// Start records so far (the sequence number of the last one).
    seq: u64,
    /// Ids made so far (the sequence number of the last one; equal to `seq`
    /// until the log is full).
    next: u64,
    /// The log's thread index (ids of this thread are encoded by their distance).
    idx: u64,
}

impl Cursor {
    fn new(idx: u64) -> Self {
        Cursor {
            cur: std::ptr::null_mut(),
            end: std::ptr::null_mut(),
            chunk_end: std::ptr::null_mut(),
            len: 0,
            chunks: 0,
            prev_t: 0,
            seq: 0,
            next: 0,
            idx,
        }
    }
}

impl ByteLog {
    #[cfg(test)]
    fn new() -> Self {
        Self::with_chunks(MAX_CHUNKS)
    }

    /// A log of at most `n` chunks (0: one that records nothing), whose
    /// writer faults in its own windows.
    fn with_chunks(n: usize) -> Self {
        ByteLog {
            chunks: (0..n).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            len: AtomicUsize::new(0),
            ahead: false,
        }
    }

    /// A log of at most `n` chunks whose windows the [`Prefaulter`] thread
    /// faults in ahead of the writer, where it runs (else as
    /// [`ByteLog::with_chunks`]). For logs that are never dropped (a
    /// [`ThreadLog`] is leaked): the helper may still fault in a range of a
    /// chunk after its writer has moved on.
    fn with_chunks_ahead(n: usize) -> Self {
        let mut log = Self::with_chunks(n);
        log.ahead = prefaulter().is_some();
        log
    }

    /// Appends the record of `e` (with `d`, the fields of a Start's larger
    /// payload, names interned) at `c` ([`encode`], written in place) and
    /// publishes it; `false` when the log is full. Room for [`MAX_RECORD`]
    /// bytes is kept before each record.
    ///
    /// # Safety
    /// Only one thread (the log's owner) may ever call `push` on this log, always
    /// with the same cursor.
    #[inline(always)]
    unsafe fn push(&self, c: &mut Cursor, e: &Entry, d: Option<&Detail<u32>>) -> bool {
        // SAFETY: (both) per the caller: this thread is the only writer.
        if (c.cur as usize).wrapping_add(MAX_RECORD) > c.end as usize && !unsafe { self.next_window(c) } {
            return false;
        }
        // SAFETY: MAX_RECORD bytes fit in the chunk from `c.cur` on; they are
        // not yet published, so no reader touches them, and only this thread writes.
        let n = unsafe { encode(e, d, c) };
        // SAFETY: `n <= MAX_RECORD`, inside the chunk.
        c.cur = unsafe { c.cur.add(n) };
        c.len += n;
        self.len.store(c.len, Ordering::Release);
        true
    }

    /// Makes room for [`MAX_RECORD`] bytes at `c`: faults in the next
    /// [`WINDOW`] bytes of the current chunk, or moves to the next chunk
    /// ([`ByteLog::next_chunk`]) at its end; `false` when the log is full.
    /// Pages are faulted in a window at a time, ahead of the writer, so no
    /// event call but the one that crosses a window meets a page fault, and
    /// no more than a window is zeroed that nothing will fill.
    ///
    /// # Safety
    /// As [`ByteLog::push`].
    #[cold]
    #[inline(never)]
    unsafe fn next_window(&self, c: &mut Cursor) -> bool {
        if !c.cur.is_null() && (c.cur as usize) + MAX_RECORD <= c.chunk_end as usize {
            let n = WINDOW.min(c.chunk_end as usize - c.end as usize);
            if !self.ahead {
                populate(c.end, n);
            }
            // SAFETY: `n` bytes past `end` lie inside the chunk.
            c.end = unsafe { c.end.add(n) };
            if self.ahead {
                self.request_next(c);
            }
            return true;
        }
        // SAFETY: per the caller.
        unsafe { self.next_chunk(c) }
    }

    /// In [`ByteLog::ahead`] mode, once the writer has entered a window: has
    /// the helper fault in the next one, or, when the writer has entered its
    /// chunk's last window, maps the next chunk now (nothing faulted in) and
    /// has the helper fault in that chunk's first window. So the windows the
    /// writer enters were faulted in while it filled the previous one (the
    /// writer faults in what the helper has not reached yet, as it would
    /// without it).
    #[cold]
    #[inline(never)]
    fn request_next(&self, c: &Cursor) {
        if c.end < c.chunk_end {
            let n = WINDOW.min(c.chunk_end as usize - c.end as usize);
            prefault(c.end, n);
            return;
        }
        let Some(next) = self.chunks.get(c.chunks) else {
            return;
        };
        if next.load(Ordering::Relaxed).is_null() {
            let size = chunk_size(c.chunks);
            let p = map_chunk(size, false);
            if !p.is_null() {
                next.store(p, Ordering::Release);
                prefault(p, WINDOW.min(size));
            }
        }
    }

    /// Moves `c` to the start of the next chunk (padding the rest of the
    /// current one), mapping it first; `false` when the log is full, or when
    /// no memory could be mapped (a later call tries again).
    ///
    /// # Safety
    /// As [`ByteLog::push`].
    #[cold]
    #[inline(never)]
    unsafe fn next_chunk(&self, c: &mut Cursor) -> bool {
        let Some(chunk) = self.chunks.get(c.chunks) else {
            return false;
        };
        let mut p = chunk.load(Ordering::Relaxed);
        if p.is_null() {
            // The first chunk (or one the ahead mode could not map early):
            // its first window faulted in here, by the writer.
            p = map_chunk(chunk_size(c.chunks), true);
            if p.is_null() {
                return false;
            }
            chunk.store(p, Ordering::Release);
        }
        if !c.cur.is_null() {
            // The rest of the current chunk: padded, counted, never read.
            if c.cur < c.chunk_end {
                // SAFETY: inside the current chunk, unpublished, ours alone.
                unsafe { c.cur.write(TAG_PAD) };
            }
            c.len += c.chunk_end as usize - c.cur as usize;
        }
        let size = chunk_size(c.chunks);
        c.cur = p;
        // SAFETY: the chunk holds `size` bytes, and its first window (or all
        // of it, when smaller) is faulted in by `map_chunk`.
        unsafe {
            c.chunk_end = p.add(size);
            c.end = p.add(WINDOW.min(size));
        }
        c.chunks += 1;
        if self.ahead {
            self.request_next(c);
        }
        true
    }

    /// The first `n` published bytes (`len` loaded with acquire) of records,
    /// decoded, with the details of their Starts (names looked up in `names`,
    /// the thread's interned names, read after `len`); Start ids are rebuilt
    /// from the thread index `idx` and their order (the `n`-th start of a
    /// thread has sequence `n`).
    fn entries(&self, n: usize, idx: u64, names: &[Name]) -> (Vec<Entry>, Vec<Detail>) {
        let mut out = Vec::with_capacity(n / 6);
        let mut details = Vec::new();
        let mut st = Decoder {
            idx,
            seq: 0,
            prev_t: 0,
            names,
        };
        let (mut pos, mut k) = (0, 0);
        while pos < n {
            let size = chunk_size(k);
            let p = self.chunks[k].load(Ordering::Relaxed);
            // SAFETY: bytes `[pos, min(n, pos + size))` of the log, all in chunk
            // `k`, were written (as whole records or a pad tag) before `len` was
            // published with release.
            let bytes = unsafe { std::slice::from_raw_parts(p, size.min(n - pos)) };
            let mut r = Reader(bytes);
            while !r.0.is_empty() {
                match decode(&mut r, &mut st, &mut details) {
                    Some(e) => out.push(e),
                    None => break, // TAG_PAD (or a damaged tail): next chunk
                }
            }
            pos += size;
            k += 1;
        }
        (out, details)
    }
}

impl Drop for ByteLog {
    fn drop(&mut self) {
        for (k, c) in self.chunks.iter().enumerate() {
            let p = c.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: mapped by `map_chunk` with this length; nothing refers to it past the log.
                unsafe { libc::munmap(p.cast(), chunk_size(k)) };
            }
        }
    }
}

/// Bytes of a chunk faulted in at a time, ahead of the writer
/// ([`ByteLog::next_window`]).
pub const WINDOW: usize = 64 << 10;

/// Faults in `[p, p + len)` of a chunk (`MADV_POPULATE_WRITE`, one call for
/// the range; else a write per page), as the stamp floor's ring in
/// `benchmarks/profiler_noop.c` is faulted in before use.
#[cold]
#[inline(never)]
fn populate(p: *mut u8, len: usize) {
    // SAFETY: the range lies in a chunk of the calling writer's, not yet
    // published (nobody reads it); populating or writing zeros to fresh,
    // never-written memory leaves its contents as they are (zero).
    unsafe {
        if libc::madvise(p.cast(), len, POPULATE_WRITE) != 0 {
            for off in (0..len).step_by(4096) {
                std::ptr::write_volatile(p.add(off), 0);
            }
        }
    }
}

/// `MADV_POPULATE_WRITE` (Linux 5.14): faults a range in as writes would,
/// without writing to it.
const POPULATE_WRITE: libc::c_int = 23;

/// The thread that faults in thread logs' next windows ahead of their writers
/// ([`ByteLog::ahead`]), so that the page faults and the zeroing of fresh
/// memory a full trace needs (every event is kept) happen off the threads
/// that record events: on a host with idle cores, off the collective's
/// critical path. Writers hand it ranges ([`prefault`]) at most once per
/// [`WINDOW`] of records.
struct Prefaulter {
    /// Ranges (address, bytes) to fault in.
    todo: Mutex<Vec<(usize, usize)>>,
    /// Signalled when `todo` gets a range.
    wake: Condvar,
}

/// The [`Prefaulter`], its thread started at the first call (a profiler's
/// `init`); `None` where `MADV_POPULATE_WRITE` does not work (a kernel
/// before 5.14: a helper's writes could not leave the writer's records
/// alone) or no thread could be started: writers then fault in their own
/// windows.
fn prefaulter() -> Option<&'static Prefaulter> {
    static P: OnceLock<Option<&'static Prefaulter>> = OnceLock::new();
    *P.get_or_init(|| {
        // Probe on a page of our own.
        let probe = map_chunk(4096, false);
        if probe.is_null() {
            return None;
        }
        // SAFETY: the page just mapped, ours alone.
        let ok = unsafe { libc::madvise(probe.cast(), 4096, POPULATE_WRITE) } == 0;
        // SAFETY: as above; nothing refers to it.
        unsafe { libc::munmap(probe.cast(), 4096) };
        if !ok {
            return None;
        }
        let p: &'static Prefaulter = Box::leak(Box::new(Prefaulter {
            todo: Mutex::new(Vec::with_capacity(64)),
            wake: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("trace-prefault".into())
            .spawn(move || p.run())
            .ok()?;
        Some(p)
    })
}

impl Prefaulter {
    /// Faults in the ranges handed over, forever (a detached thread that
    /// sleeps while there is nothing to do).
    fn run(&self) {
        let mut jobs = Vec::with_capacity(64);
        loop {
            {
                let mut q = lock(&self.todo);
                while q.is_empty() {
                    q = self.wake.wait(q).unwrap_or_else(|e| e.into_inner());
                }
                std::mem::swap(&mut *q, &mut jobs);
            }
            for (p, len) in jobs.drain(..) {
                // SAFETY: a range of a leaked log's chunk (never unmapped);
                // MADV_POPULATE_WRITE maps pages in without writing to them,
                // so records its writer stores meanwhile are left as they are.
                if unsafe { libc::madvise(p as *mut libc::c_void, len, POPULATE_WRITE) } == 0 {
                    PREFAULTED.fetch_add(len, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Bytes the [`Prefaulter`] has faulted in (written by its thread only).
static PREFAULTED: AtomicUsize = AtomicUsize::new(0);

/// Has the [`Prefaulter`] fault in `[p, p + len)` of a leaked log's chunk.
#[cold]
#[inline(never)]
fn prefault(p: *mut u8, len: usize) {
    if let Some(f) = prefaulter() {
        lock(&f.todo).push((p as usize, len));
        f.wake.notify_one();
    }
}

/// A new chunk of `len` bytes for a [`ByteLog`]: fresh anonymous memory,
/// with its first [`WINDOW`] faulted in ([`populate`]) when `first` is set;
/// 2 MiB-aligned and advised as transparent huge pages when it is that
/// large. NULL when no memory can be mapped.
#[cold]
#[inline(never)]
fn map_chunk(len: usize, first: bool) -> *mut u8 {
    const HUGE: usize = 2 << 20;
    let slack = if len >= HUGE { HUGE } else { 0 };
    // SAFETY: a new private anonymous mapping; no existing memory is touched.
    let m = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + slack,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if m == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let base = m as usize;
    let start = if slack > 0 { base.next_multiple_of(HUGE) } else { base };
    // SAFETY: the head `[base, start)` and the tail past `start + len` lie in
    // the mapping just made and are never used; the advice and the writes
    // concern `[start, start + len)`, ours alone.
    unsafe {
        if start > base {
            libc::munmap(m, start - base);
        }
        let tail = base + len + slack - (start + len);
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
        let p = start as *mut u8;
        if slack > 0 {
            libc::madvise(p.cast(), len, libc::MADV_HUGEPAGE);
        }
        if first {
            populate(p, WINDOW.min(len));
        }
        p
    }
}

/// Record kinds of a [`ByteLog`] (the low 3 bits of a record's first byte).
const TAG_PAD: u8 = 0;
const TAG_START: u8 = 1;
const TAG_STATE: u8 = 2;
const TAG_STATE_NO_SIZE: u8 = 3;
const TAG_STOP: u8 = 4;
/// The high 5 bits of a first byte that announce a value too large for them
/// (written after the first byte).
const HIGH_ESCAPE: u8 = 31;
/// Room kept for a record (the longest, a Coll Start with every field at its
/// widest, is 88 bytes; typical records are 3 to 20).
const MAX_RECORD: usize = 128;

/// Payload kinds of a Start record (its second byte).
mod pk {
    pub const NONE: u8 = 0;
    pub const GROUP_API: u8 = 1;
    pub const PROXY_OP: u8 = 2;
    pub const PROXY_STEP: u8 = 3;
    pub const NET_PLUGIN: u8 = 4;
    pub const KERNEL_CH: u8 = 5;
    pub const COLL_API: u8 = 6;
    pub const P2P_API: u8 = 7;
    pub const COLL: u8 = 8;
    pub const P2P: u8 = 9;
    pub const DETAIL_INDEX: u8 = 10;
}

/// A record being written straight into its place in the log (no staging
/// buffer: fields are stored once, little-endian varints).
struct Writer {
    p: *mut u8,
    len: usize,
}

impl Writer {
    #[inline]
    fn put<const N: usize>(&mut self, b: [u8; N]) {
        assert!(self.len + N <= MAX_RECORD, "record longer than MAX_RECORD");
        // SAFETY: `p` is writable for MAX_RECORD bytes (`encode`'s contract), checked above.
        unsafe { self.p.add(self.len).cast::<[u8; N]>().write_unaligned(b) };
        self.len += N;
    }

    /// `v` as an unsigned LEB128 varint (1 byte below 128, at most 10).
    #[inline(always)]
    fn var(&mut self, mut v: u64) {
        if v < 0x80 {
            self.put([v as u8]);
            return;
        }
        while v >= 0x80 {
            self.put([v as u8 | 0x80]);
            v >>= 7;
        }
        self.put([v as u8]);
    }

    /// `v` zigzag-encoded as a varint (small magnitudes of either sign are short).
    #[inline]
    fn zz(&mut self, v: i64) {
        self.var(((v << 1) ^ (v >> 63)) as u64);
    }

    /// A time as its difference from the previous record's (`prev`, updated),
    /// zigzag (a clock that steps back costs a few bytes more, nothing else).
    #[inline]
    fn time(&mut self, t: u64, prev: &mut u64) {
        self.zz(t.wrapping_sub(*prev) as i64);
        *prev = t;
    }

    /// An event id as [`id_ref`] encodes it against cursor `c`.
    #[inline]
    fn id(&mut self, id: u64, c: &Cursor) {
        self.var(id_ref(id, c.idx, c.seq));
    }
}

/// Sequence bits of an event id (the thread index is above them).
const SEQ_BITS: u32 = 40;

/// How a record names an event, relative to the writing thread (index `idx`,
/// `seq` starts so far): 0 = none; `2d + 1` = this thread's event started `d`
/// starts ago (the usual case: 1 byte); `2 id` = any other id (ids stay below
/// 2^63: thread indexes are below 2^23). An id that cannot be ours (≥ 2^63)
/// is recorded as none.
#[inline]
fn id_ref(id: u64, idx: u64, seq: u64) -> u64 {
    let s = id & ((1 << SEQ_BITS) - 1);
    if id >> SEQ_BITS == idx && s <= seq {
        ((seq - s) << 1) | 1
    } else if id >> 63 == 0 {
        id << 1
    } else {
        0
    }
}

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
    fn var(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    fn zz(&mut self) -> Option<i64> {
        let v = self.var()?;
        Some((v >> 1) as i64 ^ -((v & 1) as i64))
    }
    fn i32(&mut self) -> Option<i32> {
        self.zz().map(|v| v as i32)
    }
}

/// What decoding a thread's records keeps between them.
struct Decoder<'a> {
    idx: u64,
    seq: u64,
    prev_t: u64,
    names: &'a [Name],
}

impl Decoder<'_> {
    fn time(&mut self, r: &mut Reader<'_>) -> Option<u64> {
        self.prev_t = self.prev_t.wrapping_add(r.zz()? as u64);
        Some(self.prev_t)
    }
    /// [`id_ref`]'s inverse.
    fn id(&self, r: &mut Reader<'_>) -> Option<u64> {
        let v = r.var()?;
        Some(if v & 1 == 1 {
            (self.idx << SEQ_BITS) | self.seq.wrapping_sub(v >> 1)
        } else {
            v >> 1
        })
    }
    fn name(&self, r: &mut Reader<'_>) -> Option<Name> {
        let i = r.var()?;
        Some(
            usize::try_from(i)
                .ok()
                .and_then(|i| self.names.get(i))
                .copied()
                .unwrap_or_default(),
        )
    }
}

/// Writes the record of `e` at `c.cur` and returns its length; a Start's
/// larger payload is `d` (its names as indexes in the thread's interned
/// names), else its [`Payload`]. The first byte holds the record kind (low 3
/// bits) and a small value (the Start's type bit index, the state); then
/// varints: a Start's payload kind, rank, time, parent and payload; a state's
/// or stop's event and time, a state's size. Times are differences from the
/// thread's previous record, event ids distances to this thread's starts
/// ([`id_ref`]); a Start carries no id (rebuilt from the order of starts).
/// 3 to 20 bytes for the usual records, at most [`MAX_RECORD`]: what the log
/// writes per event is most of what keeping every event costs (page faults
/// on fresh memory).
///
/// # Safety
/// `c.cur` must be writable for [`MAX_RECORD`] bytes.
#[inline(always)]
unsafe fn encode(e: &Entry, d: Option<&Detail<u32>>, c: &mut Cursor) -> usize {
    let mut w = Writer { p: c.cur, len: 0 };
    match *e {
        Entry::Start {
            parent, t, ty, rank, p, ..
        } => {
            let k = ty.trailing_zeros();
            let small = ty.is_power_of_two() && k < u32::from(HIGH_ESCAPE);
            let kind = match (d, p) {
                (Some(Detail::Api { p2p: false, .. }), _) => pk::COLL_API,
                (Some(Detail::Api { p2p: true, .. }), _) => pk::P2P_API,
                (Some(Detail::Coll { .. }), _) => pk::COLL,
                (Some(Detail::P2p { .. }), _) => pk::P2P,
                (None, Payload::None) => pk::NONE,
                (None, Payload::GroupApi { .. }) => pk::GROUP_API,
                (None, Payload::ProxyOp { .. }) => pk::PROXY_OP,
                (None, Payload::ProxyStep { .. }) => pk::PROXY_STEP,
                (None, Payload::NetPlugin { .. }) => pk::NET_PLUGIN,
                (None, Payload::KernelCh { .. }) => pk::KERNEL_CH,
                (None, Payload::Detail { .. }) => pk::DETAIL_INDEX,
            };
            let high = if small { k as u8 } else { HIGH_ESCAPE };
            w.put([TAG_START | high << 3, kind]);
            if !small {
                w.var(u64::from(ty));
            }
            w.zz(i64::from(rank));
            w.time(t, &mut c.prev_t);
            w.id(parent, c);
            match (d, p) {
                (
                    Some(&Detail::Api {
                        func,
                        count,
                        dtype,
                        root,
                        p2p,
                    }),
                    _,
                ) => {
                    w.var(u64::from(func));
                    w.var(count as u64);
                    w.var(u64::from(dtype));
                    if !p2p {
                        w.zz(i64::from(root));
                    }
                }
                (
                    Some(&Detail::Coll {
                        seq,
                        func,
                        count,
                        dtype,
                        root,
                        algo,
                        proto,
                        nchannels,
                        group,
                    }),
                    _,
                ) => {
                    w.var(seq);
                    w.var(u64::from(func));
                    w.var(count as u64);
                    w.var(u64::from(dtype));
                    w.zz(i64::from(root));
                    w.var(u64::from(algo));
                    w.var(u64::from(proto));
                    w.put([nchannels]);
                    w.id(group, c);
                }
                (
                    Some(&Detail::P2p {
                        func,
                        count,
                        dtype,
                        peer,
                        group,
                    }),
                    _,
                ) => {
                    w.var(u64::from(func));
                    w.var(count as u64);
                    w.var(u64::from(dtype));
                    w.zz(i64::from(peer));
                    w.id(group, c);
                }
                (None, Payload::None) => {}
                (None, Payload::GroupApi { depth }) => w.zz(i64::from(depth)),
                (
                    None,
                    Payload::ProxyOp {
                        channel,
                        send,
                        peer,
                        nsteps,
                        chunk,
                    },
                ) => {
                    w.put([channel, send as u8]);
                    w.zz(i64::from(peer));
                    w.zz(i64::from(nsteps));
                    w.zz(i64::from(chunk));
                }
                (None, Payload::ProxyStep { step }) => w.zz(i64::from(step)),
                (None, Payload::NetPlugin { id }) => w.zz(id),
                (None, Payload::KernelCh { channel }) => w.put([channel]),
                (None, Payload::Detail { index }) => w.var(u64::from(index)),
            }
            c.seq += 1;
        }
        Entry::State { id, t, size, state } => {
            let small = (0..i32::from(HIGH_ESCAPE)).contains(&state);
            let tag = if size == u64::MAX { TAG_STATE_NO_SIZE } else { TAG_STATE };
            w.put([tag | if small { state as u8 } else { HIGH_ESCAPE } << 3]);
            if !small {
                w.zz(i64::from(state));
            }
            w.id(id, c);
            w.time(t, &mut c.prev_t);
            if size != u64::MAX {
                w.var(size);
            }
        }
        Entry::Stop { id, t } => {
            w.put([TAG_STOP]);
            w.id(id, c);
            w.time(t, &mut c.prev_t);
        }
    }
    w.len
}

/// The next record of `r` ([`encode`]'s inverse); `None` at [`TAG_PAD`] or a
/// truncated record. A Start's detail is appended to `details` (its payload
/// is then `Payload::Detail` with that index).
fn decode(r: &mut Reader<'_>, st: &mut Decoder<'_>, details: &mut Vec<Detail>) -> Option<Entry> {
    let b = r.u8()?;
    let high = b >> 3;
    match b & 7 {
        TAG_START => {
            let kind = r.u8()?;
            let ty = if high == HIGH_ESCAPE {
                u32::try_from(r.var()?).ok()?
            } else {
                1 << high
            };
            let rank = r.i32()?;
            let t = st.time(r)?;
            let parent = st.id(r)?;
            let mut detail = |d: Detail| {
                details.push(d);
                Payload::Detail {
                    index: (details.len() - 1) as u32,
                }
            };
            let p = match kind {
                pk::NONE => Payload::None,
                pk::GROUP_API => Payload::GroupApi { depth: r.i32()? },
                pk::PROXY_OP => Payload::ProxyOp {
                    channel: r.u8()?,
                    send: r.u8()? != 0,
                    peer: r.i32()?,
                    nsteps: r.i32()?,
                    chunk: r.i32()?,
                },
                pk::PROXY_STEP => Payload::ProxyStep { step: r.i32()? },
                pk::NET_PLUGIN => Payload::NetPlugin { id: r.zz()? },
                pk::KERNEL_CH => Payload::KernelCh { channel: r.u8()? },
                pk::COLL_API | pk::P2P_API => {
                    let p2p = kind == pk::P2P_API;
                    let (func, count, dtype) = (st.name(r)?, r.var()? as usize, st.name(r)?);
                    let root = if p2p { 0 } else { r.i32()? };
                    detail(Detail::Api {
                        func,
                        count,
                        dtype,
                        root,
                        p2p,
                    })
                }
                pk::COLL => {
                    let (seq, func, count, dtype) = (r.var()?, st.name(r)?, r.var()? as usize, st.name(r)?);
                    let (root, algo, proto, nchannels) = (r.i32()?, st.name(r)?, st.name(r)?, r.u8()?);
                    let group = st.id(r)?;
                    detail(Detail::Coll {
                        seq,
                        func,
                        count,
                        dtype,
                        root,
                        algo,
                        proto,
                        nchannels,
                        group,
                    })
                }
                pk::P2P => {
                    let (func, count, dtype, peer) = (st.name(r)?, r.var()? as usize, st.name(r)?, r.i32()?);
                    let group = st.id(r)?;
                    detail(Detail::P2p {
                        func,
                        count,
                        dtype,
                        peer,
                        group,
                    })
                }
                pk::DETAIL_INDEX => Payload::Detail { index: r.var()? as u32 },
                _ => return None,
            };
            st.seq += 1;
            Some(Entry::Start {
                id: (st.idx << SEQ_BITS) | st.seq,
                parent,
                t,
                ty,
                rank,
                p,
            })
        }
        tag @ (TAG_STATE | TAG_STATE_NO_SIZE) => {
            let state = if high == HIGH_ESCAPE { r.i32()? } else { i32::from(high) };
            let (id, t) = (st.id(r)?, st.time(r)?);
            let size = if tag == TAG_STATE { r.var()? } else { u64::MAX };
            Some(Entry::State { id, t, size, state })
        }
        TAG_STOP => {
            let (id, t) = (st.id(r)?, st.time(r)?);
            Some(Entry::Stop { id, t })
        }
        _ => None,
    }
}

/// One thread's log: its records, the names its records refer to by index
/// ([`ThreadLog::intern`]), the thread's index (the high bits of its event
/// ids), and its writer's state, first (what every event touches, together:
/// the thread's one writer works on two adjacent cache lines).
#[repr(C, align(128))]
struct ThreadLog {
    /// The write position and encoding state (written by the owning thread only).
    cursor: UnsafeCell<Cursor>,
    /// The records.
    entries: ByteLog,
    idx: u64,
    /// Interned names, in order.
    names: AppendLog<Name>,
    /// The first [`NAME_CACHE`] interned names (their index is their
    /// position), for the owning thread's lookups.
    name_cache: UnsafeCell<NameCache>,
}

impl std::fmt::Debug for ThreadLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadLog")
            .field("idx", &self.idx)
            .field("entries", &self.entries)
            .finish()
    }
}

// SAFETY: `cursor` and `name_cache` are touched by the owning thread only (the
// one that [`local`] maps to this log; a thread that takes over a dead
// thread's control block takes over its log after that thread ended); other
// threads read `entries` and `names`, which publish with release/acquire.
unsafe impl Sync for ThreadLog {}

#[derive(Debug, Default)]
struct Store {
    /// Every thread's log that ever recorded (kept until the process ends,
    /// after the thread exits too).
    logs: Vec<&'static ThreadLog>,
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

/// Names a thread interns with their index, looked up before adding one.
const NAME_CACHE: usize = 32;

/// A thread's first interned names, with the address each was last seen at.
struct NameCache {
    n: usize,
    names: [Name; NAME_CACHE],
    /// Where `names[i]` was last read from (the same address gives the
    /// same name: [`ThreadLog::intern`]).
    seen_at: [*const c_char; NAME_CACHE],
}

impl ThreadLog {
    /// Appends `e` (a Start's larger payload `d`) to this thread's log (inlined
    /// into each caller, so that each encodes its one kind of record). When the
    /// log is full nothing more is recorded, not even a shorter record that
    /// would still fit (the ids of starts are their order in the log): every
    /// later push finds the same chunk end and the same full chunk table.
    ///
    /// # Safety
    /// The calling thread must own this log (it came from [`local`]); `push`
    /// is not re-entered (nothing it calls records).
    #[inline(always)]
    unsafe fn push(&self, e: &Entry, d: Option<&Detail<u32>>) {
        // SAFETY: per the caller: the only reference to the cursor, and this
        // thread is the log's only writer.
        unsafe { self.entries.push(&mut *self.cursor.get(), e, d) };
    }

    /// The index of the name `p` points to in this thread's names (added
    /// when new; `u32::MAX`, read back as an empty name, when the table is full).
    ///
    /// An address seen before gives the name read there then, without
    /// reading the text again: descriptor names are static strings (NCCL's
    /// `ncclFuncToString`/`ncclDatatypeToString` tables and algorithm and
    /// protocol names; ferroccl's `&'static CStr`s), and NCCL's example
    /// profiler (`plugins/profiler/example/plugin.cc`,
    /// `exampleProfilerStartEvent`) even keeps the pointers to print them at
    /// `finalize`. Here nothing is read after the call: a string whose text
    /// changed at the same address keeps its first name; a new address is
    /// read and looked up by its text.
    ///
    /// # Safety
    /// As [`ThreadLog::push`].
    #[inline]
    unsafe fn intern(&self, p: *const c_char) -> u32 {
        // SAFETY: per the caller: this thread's own cache, not re-entered.
        let c = unsafe { &mut *self.name_cache.get() };
        // The usual case: the same (static) string as before.
        if !p.is_null()
            && let Some(i) = c.seen_at[..c.n].iter().position(|&q| q == p)
        {
            return i as u32;
        }
        let name = Name::of(p);
        if let Some(i) = c.names[..c.n].iter().position(|x| *x == name) {
            c.seen_at[i] = p;
            return i as u32;
        }
        // SAFETY: this thread is the names log's only writer.
        let Some(i) = (unsafe { self.names.push(name) }) else {
            return u32::MAX;
        };
        // Cached names are the first ones pushed, so position = index.
        if c.n < NAME_CACHE && i == c.n {
            c.names[i] = name;
            c.seen_at[i] = p;
            c.n += 1;
        }
        i as u32
    }

    /// A new event id: the thread index (high 24 bits) and the next sequence number.
    ///
    /// # Safety
    /// As [`ThreadLog::push`].
    #[inline(always)]
    unsafe fn next_id(&self) -> u64 {
        // SAFETY: per the caller.
        let c = unsafe { &mut *self.cursor.get() };
        c.next += 1;
        (c.idx << SEQ_BITS) | c.next
    }
}

thread_local! {
    /// This thread's log, registered in [`store`] at its first event (kept
    /// until the process ends: the [`THREADS`] table may point to it).
    static LOG: OnceCell<&'static ThreadLog> = const { OnceCell::new() };
}

/// Runs `f` on this thread's log (registering it first); `None` while the
/// thread is being torn down. `f` may use the log as its owner ([`ThreadLog::push`]).
#[inline(always)]
fn with_log<R>(f: impl FnOnce(&ThreadLog) -> R) -> Option<R> {
    let l = local()?;
    Some(f(l))
}

/// Slots of [`THREADS`] (a thread that finds none free uses its TLS slot).
const THREAD_SLOTS: usize = 1024;
/// Slots a lookup in [`THREADS`] probes.
const THREAD_PROBES: usize = 16;

/// One entry of [`THREADS`]: a thread pointer (0: free) and its log.
struct ThreadSlot {
    key: AtomicUsize,
    log: AtomicPtr<ThreadLog>,
}

/// Thread pointer → [`ThreadLog`] (open addressing, entries never removed): a
/// cheaper way to this thread's log than its TLS slot, which in a `dlopen`ed
/// library costs a `__tls_get_addr` call per event. The thread pointer
/// (`%fs:0` on x86-64 Linux, the thread's control block pointing to itself)
/// is unique among live threads; a thread that reuses a dead one's control
/// block carries on with the dead thread's log, whose only writer it then is.
static THREADS: [ThreadSlot; THREAD_SLOTS] = [const {
    ThreadSlot {
        key: AtomicUsize::new(0),
        log: AtomicPtr::new(std::ptr::null_mut()),
    }
}; THREAD_SLOTS];

/// This thread's pointer (see [`THREADS`]); never 0.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: on x86-64 Linux (glibc, musl) `%fs:0` holds the address of the
    // thread's control block, readable by the thread at any time; a pure load.
    unsafe {
        std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags, pure))
    };
    tp
}

/// The [`THREADS`] slot a lookup of thread pointer `tp` starts at.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
fn thread_slot(tp: usize) -> usize {
    ((tp as u64 >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - THREAD_SLOTS.trailing_zeros())) as usize
}

/// This thread's log: by its thread pointer in its first [`THREADS`] slot
/// (inlined: a few instructions), else [`local_slow`].
#[inline(always)]
fn local() -> Option<&'static ThreadLog> {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let tp = thread_pointer();
        let s = &THREADS[thread_slot(tp)];
        if s.key.load(Ordering::Relaxed) == tp {
            // SAFETY: see `thread_log_at`.
            return Some(unsafe { thread_log_at(s) });
        }
    }
    local_slow()
}

/// The log of slot `s`, whose key is the calling thread's pointer.
///
/// # Safety
/// `s.key` was loaded equal to this thread's pointer. Only the thread whose
/// pointer it is stored the slot's log (after claiming the key, so before this
/// load in its program order) or, for a reused control block, a dead thread
/// whose stores happened before this thread was created; it is a leaked log.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
unsafe fn thread_log_at(s: &ThreadSlot) -> &'static ThreadLog {
    // SAFETY: per the caller: a non-NULL pointer to a leaked log.
    unsafe { &*s.log.load(Ordering::Relaxed) }
}

/// [`local`] past the first slot: the next [`THREADS`] slots, else through
/// the TLS slot (registering the thread's log first), the thread then entered
/// in [`THREADS`] where a probed slot is free.
#[cold]
fn local_slow() -> Option<&'static ThreadLog> {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let tp = thread_pointer();
        let mut h = thread_slot(tp);
        for _ in 0..THREAD_PROBES {
            let s = &THREADS[h];
            let k = s.key.load(Ordering::Relaxed);
            if k == tp {
                // SAFETY: the key is this thread's pointer.
                return Some(unsafe { thread_log_at(s) });
            }
            if k == 0 {
                break;
            }
            h = (h + 1) % THREAD_SLOTS;
        }
    }
    let l: &'static ThreadLog = LOG.try_with(|cell| *cell.get_or_init(register)).ok()?;
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let tp = thread_pointer();
        let mut h = thread_slot(tp);
        for _ in 0..THREAD_PROBES {
            let s = &THREADS[h];
            match s.key.compare_exchange(0, tp, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    s.log.store(l as *const ThreadLog as *mut ThreadLog, Ordering::Relaxed);
                    break;
                }
                // Not found by `local` (it stops at the first free slot), so not ours.
                Err(_) => h = (h + 1) % THREAD_SLOTS,
            }
        }
    }
    Some(l)
}

/// Most thread logs in a process (event ids keep below 2^63); a thread past
/// them records nothing.
const MAX_THREADS: usize = 1 << 23;

/// Creates this thread's log and registers it in [`store`] (kept until the
/// process ends).
#[cold]
fn register() -> &'static ThreadLog {
    let mut st = lock(store());
    let idx = st.logs.len() as u64 + 1;
    // Past MAX_THREADS, a log with no chunk: full from the start.
    let chunks = if st.logs.len() >= MAX_THREADS { 0 } else { MAX_CHUNKS };
    let log: &'static ThreadLog = Box::leak(Box::new(ThreadLog {
        cursor: UnsafeCell::new(Cursor::new(idx)),
        entries: ByteLog::with_chunks_ahead(chunks),
        idx,
        names: AppendLog::new(),
        name_cache: UnsafeCell::new(NameCache {
            n: 0,
            names: [Name::default(); NAME_CACHE],
            seen_at: [std::ptr::null(); NAME_CACHE],
        }),
    }));
    st.logs.push(log);
    log
}

/// Appends `e` to this thread's log (inlined, so that each caller encodes
/// its one kind of record).
#[inline(always)]
fn append(e: Entry) {
    if let Some(l) = local() {
        // SAFETY: the log `local` gives is this thread's own; not re-entered.
        unsafe { l.push(&e, None) };
    }
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

/// How the hot path reads the time ([`now_ns`]): [`CLOCK_UNSET`] until
/// [`clock`] has chosen, then [`CLOCK_TSC`] or [`CLOCK_REALTIME`] (one
/// relaxed load per event, no `OnceLock` check).
static CLOCK_KIND: AtomicU8 = AtomicU8::new(CLOCK_UNSET);
const CLOCK_UNSET: u8 = 0;
const CLOCK_TSC: u8 = 1;
const CLOCK_REALTIME: u8 = 2;

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
        CLOCK_KIND.store(if tsc { CLOCK_TSC } else { CLOCK_REALTIME }, Ordering::Relaxed);
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

/// The time of an event, in [`Clock`] ticks: `rdtsc` where the TSC is
/// invariant, else `CLOCK_REALTIME` ns (the first call of a process that
/// recorded nothing yet chooses, see [`clock`]).
#[inline(always)]
fn now_ns() -> u64 {
    match CLOCK_KIND.load(Ordering::Relaxed) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: RDTSC exists on every x86-64 CPU and has no side effect.
        CLOCK_TSC => unsafe { core::arch::x86_64::_rdtsc() },
        CLOCK_REALTIME => realtime_ns(),
        _ => now_slow(),
    }
}

#[cold]
#[inline(never)]
fn now_slow() -> u64 {
    clock().ticks()
}

/// `NCCL_PROFILER_TRACE_FILE` with `%h`/`%p` expanded.
pub fn trace_path() -> PathBuf {
    let pat = std::env::var(TRACE_FILE.name).unwrap_or_else(|_| TRACE_FILE.default.unwrap_or_default().into());
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
    let logs: Vec<&'static ThreadLog> = lock(store()).logs.clone();
    let to_ns = clock().ns_map();
    let threads: Vec<(Vec<Entry>, Vec<Detail>)> = logs
        .iter()
        .map(|l| {
            // Entries first: every name they refer to was published before them.
            let n = l.entries.len.load(Ordering::Acquire);
            let names = l.names.to_vec();
            let (mut entries, details) = l.entries.entries(n, l.idx, &names);
            for e in &mut entries {
                match e {
                    Entry::Start { t, .. } | Entry::State { t, .. } | Entry::Stop { t, .. } => *t = to_ns(*t),
                }
            }
            (entries, details)
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
    /// The fixed-size fields of `d`'s event, and its [`Detail`] for the larger
    /// ones (names interned in `l`, the calling thread's log).
    #[inline]
    ///
    /// # Safety
    /// `l` is the calling thread's own log ([`ThreadLog::push`]).
    unsafe fn payload(d: &abi::ncclProfilerEventDescr_v6_t, l: &ThreadLog) -> (Payload, Option<Detail<u32>>) {
        // SAFETY: per the caller.
        let name = |p: *const c_char| unsafe { l.intern(p) };
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
                    func: name(c.func),
                    count: c.count,
                    dtype: name(c.datatype),
                    root: c.root,
                    p2p: false,
                };
                (Payload::None, Some(det))
            }
            abi::ncclProfileP2pApi => {
                // SAFETY: as above.
                let c = unsafe { d.u.p2pApi };
                let det = Detail::Api {
                    func: name(c.func),
                    count: c.count,
                    dtype: name(c.datatype),
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
                    func: name(c.func),
                    count: c.count,
                    dtype: name(c.datatype),
                    root: c.root,
                    algo: name(c.algo),
                    proto: name(c.proto),
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
                    func: name(c.func),
                    count: c.count,
                    dtype: name(c.datatype),
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
        *activation_mask = std::env::var(EVENT_MASK.name)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(EVENT_MASK.default as i32);
        lock(store()).contexts += 1;
        clock();
        // Started here, not at a thread's first event.
        prefaulter();
        Ok(TraceProfiler { rank: info.rank })
    }

    fn start_event(&self, descr: &abi::ncclProfilerEventDescr_v6_t) -> NetResult<Option<u64>> {
        self.start_child(descr, None)
    }

    #[inline(always)]
    fn start_child(&self, descr: &abi::ncclProfilerEventDescr_v6_t, parent: Option<&u64>) -> NetResult<Option<u64>> {
        let rank = if descr.rank != 0 { descr.rank } else { self.rank };
        let t = now_ns();
        let parent = parent.copied().unwrap_or(0);
        let ty = descr.r#type as u32;
        Ok(with_log(|l| {
            // SAFETY: `with_log` gives this thread's own log; nothing here re-enters it.
            unsafe {
                let id = l.next_id();
                let (p, detail) = Self::payload(descr, l);
                l.push(
                    &Entry::Start {
                        id,
                        parent,
                        t,
                        ty,
                        rank,
                        p,
                    },
                    detail.as_ref(),
                );
                id
            }
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

    #[inline(always)]
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

    #[inline(always)]
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

    /// A decoded record stays small (the larger fields go to the side table).
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
        for i in 0..(2 * CHUNK_BYTES / 5) as u64 {
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
        let mut c = Cursor::new(idx);
        for e in &want {
            // SAFETY: this thread is the log's only writer.
            assert!(unsafe { log.push(&mut c, e, None) });
        }
        let n = log.len.load(Ordering::Acquire);
        assert!(n > 2 * CHUNK_BYTES, "crossed two chunk ends");
        let (got, details) = log.entries(n, idx, &[]);
        assert!(details.is_empty());
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
    }

    /// The larger payloads (API calls, Coll, P2p) come back with their names
    /// and fields, and ids of the writing thread's own events (recorded as
    /// distances) and of other threads' come back as they were.
    #[test]
    fn byte_log_round_trips_details_and_ids() {
        let idx = 3;
        let names = [Name::of(c"AllReduce".as_ptr()), Name::of(c"ncclFloat32".as_ptr())];
        let own = |s: u64| (idx << SEQ_BITS) | s;
        let other = (9 << SEQ_BITS) | 12345;
        let start = |parent: u64, t: u64| Entry::Start {
            id: 0,
            parent,
            t,
            ty: abi::ncclProfileColl as u32,
            rank: 1,
            p: Payload::None,
        };
        let details: [Detail<u32>; 4] = [
            Detail::Api {
                func: 0,
                count: 1 << 40,
                dtype: 1,
                root: -1,
                p2p: false,
            },
            Detail::Api {
                func: 1,
                count: 3,
                dtype: 0,
                root: 0,
                p2p: true,
            },
            Detail::Coll {
                seq: u64::MAX,
                func: 0,
                count: 8,
                dtype: 1,
                root: i32::MIN,
                algo: 7,
                proto: u32::MAX,
                nchannels: 255,
                group: own(1),
            },
            Detail::P2p {
                func: 1,
                count: 0,
                dtype: 0,
                peer: i32::MAX,
                group: other,
            },
        ];
        let log = ByteLog::new();
        let mut c = Cursor::new(idx);
        let parents = [0, own(1), other, own(2)];
        for (i, d) in details.iter().enumerate() {
            // SAFETY: this thread is the log's only writer.
            assert!(unsafe { log.push(&mut c, &start(parents[i], 10 * i as u64), Some(d)) });
        }
        for e in [
            Entry::State {
                id: own(4),
                t: 5,
                size: 0,
                state: 99,
            },
            Entry::Stop { id: other, t: u64::MAX },
            Entry::Stop { id: own(1), t: 0 },
            Entry::Stop { id: u64::MAX, t: 1 },
        ] {
            // SAFETY: as above.
            assert!(unsafe { log.push(&mut c, &e, None) });
        }
        let (got, ds) = log.entries(log.len.load(Ordering::Acquire), idx, &names);
        let name = |i: u32| names.get(i as usize).copied().unwrap_or_default();
        let want: Vec<Detail> = details
            .iter()
            .map(|d| match *d {
                Detail::Api {
                    func,
                    count,
                    dtype,
                    root,
                    p2p,
                } => Detail::Api {
                    func: name(func),
                    count,
                    dtype: name(dtype),
                    root,
                    p2p,
                },
                Detail::Coll {
                    seq,
                    func,
                    count,
                    dtype,
                    root,
                    algo,
                    proto,
                    nchannels,
                    group,
                } => Detail::Coll {
                    seq,
                    func: name(func),
                    count,
                    dtype: name(dtype),
                    root,
                    algo: name(algo),
                    proto: name(proto),
                    nchannels,
                    group,
                },
                Detail::P2p {
                    func,
                    count,
                    dtype,
                    peer,
                    group,
                } => Detail::P2p {
                    func: name(func),
                    count,
                    dtype: name(dtype),
                    peer,
                    group,
                },
            })
            .collect();
        assert_eq!(format!("{ds:?}"), format!("{want:?}"));
        for (i, e) in got.iter().take(4).enumerate() {
            let Entry::Start { id, parent, t, p, .. } = *e else {
                panic!("{e:?}")
            };
            assert_eq!((id, parent, t), (own(i as u64 + 1), parents[i], 10 * i as u64));
            assert!(matches!(p, Payload::Detail { index } if index as usize == i), "{p:?}");
        }
        assert_eq!(
            format!("{:?}", &got[4..]),
            format!(
                "{:?}",
                [
                    Entry::State {
                        id: own(4),
                        t: 5,
                        size: 0,
                        state: 99,
                    },
                    Entry::Stop { id: other, t: u64::MAX },
                    Entry::Stop { id: own(1), t: 0 },
                    // Not an id this profiler can have made: recorded as none.
                    Entry::Stop { id: 0, t: 1 },
                ]
            )
        );
    }

    /// A thread interns each distinct name once; the same text from another
    /// address gets the same index.
    #[test]
    fn names_are_interned_per_thread() {
        std::thread::spawn(|| {
            with_log(|l| {
                // SAFETY: this thread's own log, as `with_log` gives it.
                let intern = |p: *const c_char| unsafe { l.intern(p) };
                let a = intern(c"AllReduce".as_ptr());
                let b = intern(c"ncclFloat32".as_ptr());
                let copy = std::ffi::CString::new("AllReduce").unwrap();
                assert_eq!(intern(copy.as_ptr()), a);
                assert_ne!(a, b);
                assert_eq!(intern(c"ncclFloat32".as_ptr()), b);
                // A new address is read and looked up by its text; an address
                // seen before gives the name read there first, not read again.
                let mut buf = *b"AllGather\0\0\0\0";
                let at = buf.as_ptr().cast::<c_char>();
                let g = intern(at);
                assert_ne!(g, a);
                assert_ne!(g, b);
                buf[..10].copy_from_slice(b"AllReduce\0");
                assert_eq!(intern(buf.as_ptr().cast()), g);
                let other = *b"AllGather\0";
                assert_eq!(intern(other.as_ptr().cast()), g);
                let x = std::ffi::CString::new("AllReduceX12").unwrap();
                let xi = intern(x.as_ptr());
                assert_ne!(xi, a);
                assert_ne!(xi, g);
                let names = l.names.to_vec();
                assert_eq!(names[a as usize].as_string(), "AllReduce");
                assert_eq!(names[b as usize].as_string(), "ncclFloat32");
                assert_eq!(names[g as usize].as_string(), "AllGather");
                assert_eq!(names[xi as usize].as_string(), "AllReduceX12");
            })
            .unwrap();
        })
        .join()
        .unwrap();
    }

    /// Names longer than 15 bytes are cut, NULL is empty.
    #[test]
    fn names_are_copied_and_bounded() {
        assert_eq!(Name::of(c"ncclFloat8e4m3".as_ptr()).as_string(), "ncclFloat8e4m3");
        assert_eq!(Name::of(c"0123456789abcdefXYZ".as_ptr()).as_string(), "0123456789abcde");
        assert_eq!(Name::of(std::ptr::null()).as_string(), "");
    }

    /// How many of the pages of `[p, p + len)` (`p` page-aligned) are
    /// resident, and how many there are.
    fn resident(p: *mut u8, len: usize) -> (usize, usize) {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap();
        let mut v = vec![0u8; len.div_ceil(page)];
        // SAFETY: `[p, p + len)` is a mapping of the caller's; `v` holds a byte per page.
        assert_eq!(unsafe { libc::mincore(p.cast(), len, v.as_mut_ptr()) }, 0);
        (v.iter().filter(|b| *b & 1 == 1).count(), v.len())
    }

    /// Chunks double from CHUNK_MIN to CHUNK_BYTES, the large ones
    /// 2 MiB-aligned; the next chunk is taken only when needed. The writer
    /// always has room for the longest record in memory already faulted
    /// in, a window ahead at most: a chunk below huge-page size has nothing
    /// resident past its first window when it is taken.
    #[test]
    fn chunks_grow_and_are_faulted_in_ahead_of_the_writer() {
        let sizes: Vec<usize> = (0..9).map(chunk_size).collect();
        let want: Vec<usize> = [64, 128, 256, 512, 1024, 2048, 4096, 4096, 4096]
            .map(|k| k << 10)
            .to_vec();
        assert_eq!(sizes, want);
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap();
        let log = ByteLog::with_chunks(8);
        let mut c = Cursor::new(1);
        let mut k = 0;
        for i in 0u64.. {
            // SAFETY: this thread is the log's only writer.
            assert!(unsafe { log.push(&mut c, &Entry::Stop { id: 1, t: i }, None) });
            let taken = c.chunks > k;
            if taken || i % 4099 == 0 {
                let from = (c.cur as usize) / page * page;
                let (r, n) = resident(from as *mut u8, c.end as usize - from);
                assert_eq!(r, n, "record {i}: room ahead of the writer not faulted in");
                assert!(c.end as usize - c.cur as usize >= MAX_RECORD || c.end == c.chunk_end);
            }
            if taken {
                let p = log.chunks[k].load(Ordering::Acquire);
                let size = chunk_size(k);
                if size >= 2 << 20 {
                    assert_eq!(p as usize % (2 << 20), 0, "chunk {k} at {p:p}");
                } else if size > WINDOW {
                    // SAFETY: inside chunk `k`.
                    let (r, _) = resident(unsafe { p.add(WINDOW) }, size - WINDOW);
                    assert_eq!(r, 0, "chunk {k}: pages past the first window faulted in when taken");
                }
                assert!(
                    log.chunks[k + 1].load(Ordering::Acquire).is_null(),
                    "chunk {} taken early",
                    k + 1
                );
                k += 1;
                if k == 7 {
                    break;
                }
            }
        }
    }

    /// In ahead mode the writer faults in nothing past its first window:
    /// each time it enters a window, the helper thread faults in the next
    /// one (the next chunk's first window, that chunk mapped early, when it
    /// enters its chunk's last window); records come back as without it.
    #[test]
    fn the_helper_faults_in_the_next_window_ahead_of_the_writer() {
        assert!(
            prefaulter().is_some(),
            "MADV_POPULATE_WRITE (Linux 5.14) unavailable or no thread"
        );
        let log: &'static ByteLog = Box::leak(Box::new(ByteLog::with_chunks_ahead(4)));
        assert!(log.ahead);
        let mut c = Cursor::new(1);
        let mut checked = 0;
        let mut pushed = 0u64;
        for i in 0u64.. {
            let (end, chunks) = (c.end, c.chunks);
            // SAFETY: this thread is the log's only writer.
            assert!(unsafe { log.push(&mut c, &Entry::Stop { id: 1, t: i }, None) });
            pushed += 1;
            if c.chunks == 4 {
                break;
            }
            if c.end == end && c.chunks == chunks {
                continue;
            }
            // Entered a window: the range the helper was handed.
            let (p, n) = if c.end < c.chunk_end {
                (c.end, WINDOW.min(c.chunk_end as usize - c.end as usize))
            } else {
                let next = log.chunks[c.chunks].load(Ordering::Acquire);
                assert!(!next.is_null(), "record {i}: next chunk not mapped in the last window");
                (next, WINDOW.min(chunk_size(c.chunks)))
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while resident(p, n).0 < resident(p, n).1 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "record {i}: {n} bytes at {p:p} not faulted in"
                );
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            checked += 1;
        }
        assert!(checked >= 6, "{checked} windows checked");
        assert!(PREFAULTED.load(Ordering::Relaxed) >= checked * WINDOW);
        let (got, _) = log.entries(log.len.load(Ordering::Acquire), 1, &[]);
        assert_eq!(got.len() as u64, pushed);
        for (i, e) in got.iter().enumerate() {
            assert!(
                matches!(*e, Entry::Stop { id: 1, t } if t == i as u64),
                "record {i}: {e:?}"
            );
        }
    }

    /// A log fills its chunks up to the last one; records never straddle a
    /// chunk end (the rest is padded); once the longest record may no longer
    /// fit, nothing more is recorded, not even a short record, and what was
    /// recorded comes back whole, Start ids and names included.
    #[test]
    fn a_full_log_keeps_what_it_recorded_and_records_nothing_more() {
        let idx = 7;
        let names = [Name::of(c"AllReduce".as_ptr()), Name::of(c"ncclFloat32".as_ptr())];
        let coll = Detail::Coll {
            seq: 3,
            func: 0,
            count: 1 << 20,
            dtype: 1,
            root: -1,
            algo: 1,
            proto: 0,
            nchannels: 4,
            group: (idx << SEQ_BITS) | 1,
        };
        let log = ByteLog::with_chunks(2);
        let cap = chunk_size(0) + chunk_size(1);
        let mut c = Cursor::new(idx);
        let mut pushed = Vec::new();
        let mut starts = 0u64;
        for i in 0u64.. {
            let (e, d) = if i % 3 == 2 {
                (
                    Entry::Start {
                        id: 0,
                        parent: 0,
                        t: i << 20,
                        ty: abi::ncclProfileColl as u32,
                        rank: 5,
                        p: Payload::None,
                    },
                    Some(&coll),
                )
            } else {
                (Entry::Stop { id: i, t: i << 20 }, None)
            };
            // SAFETY: this thread is the log's only writer.
            if !unsafe { log.push(&mut c, &e, d) } {
                break;
            }
            if d.is_some() {
                starts += 1;
            }
            pushed.push(e);
        }
        let n = log.len.load(Ordering::Acquire);
        assert!(n <= cap && n > cap - MAX_RECORD, "{n} of {cap}");
        assert!(n > chunk_size(0) && c.chunks == 2, "both chunks used");
        // Full: a short record fits in the rest, but is not taken.
        // SAFETY: as above.
        assert!(!unsafe { log.push(&mut c, &Entry::Stop { id: 1, t: 1 }, None) });
        assert_eq!(log.len.load(Ordering::Acquire), n);
        let (got, details) = log.entries(n, idx, &names);
        assert_eq!(got.len(), pushed.len());
        assert_eq!(details.len() as u64, starts);
        let mut seq = 0;
        for (g, w) in got.iter().zip(&pushed) {
            match (g, w) {
                (Entry::Stop { id, t }, Entry::Stop { id: i, t: u }) => assert_eq!((id, t), (i, u)),
                (
                    Entry::Start { id, t, ty, rank, p, .. },
                    Entry::Start {
                        t: u, ty: v, rank: r, ..
                    },
                ) => {
                    seq += 1;
                    assert_eq!((*id, t, ty, rank), ((idx << SEQ_BITS) | seq, u, v, r));
                    let Payload::Detail { index } = *p else { panic!("{p:?}") };
                    let Detail::Coll {
                        func,
                        dtype,
                        nchannels,
                        group,
                        ..
                    } = details[index as usize]
                    else {
                        panic!("{:?}", details[index as usize])
                    };
                    assert_eq!(
                        (func.as_string().as_str(), dtype.as_string().as_str()),
                        ("AllReduce", "ncclFloat32")
                    );
                    assert_eq!((nchannels, group), (4, (idx << SEQ_BITS) | 1));
                }
                _ => panic!("{g:?} for {w:?}"),
            }
        }
    }

    /// A log of no chunk (a thread past MAX_THREADS) records nothing.
    #[test]
    fn a_log_without_chunks_records_nothing() {
        let log = ByteLog::with_chunks(0);
        let mut c = Cursor::new(1);
        // SAFETY: this thread is the log's only writer.
        assert!(!unsafe { log.push(&mut c, &Entry::Stop { id: 1, t: 1 }, None) });
        assert_eq!(log.entries(log.len.load(Ordering::Acquire), 1, &[]).0.len(), 0);
    }
}
