//! The shared-memory transport (NCCL's `shmTransport`, `src/transport/shm.cc`)
//! for ranks on one host: the sender writes each step straight into a FIFO in
//! memory the receiver owns, the receiver reads it from there. One copy per
//! byte per hop: the executor's copy or reduction into the slot is the only
//! write; the receiver's next step reads the slot as its input.
//!
//! # Segments
//!
//! Each connection has one segment, created by the receiving rank (as NCCL
//! places the buffers in the receiver's `ncclRecvMem`, `NCCL_SHM_LOCALITY=2`):
//! an anonymous `memfd_create` file, never a name in `/dev/shm`. Its connect
//! information carries the receiver's pid and the memfd's descriptor number;
//! the sender opens `/proc/<pid>/fd/<fd>` (the kernel allows it to a process of
//! the same user in the same PID namespace), checks the file's size and the
//! header against what it expects, maps it and sets an `attached` flag; the
//! receiver then closes its descriptor. Once both processes have unmapped it
//! (at destroy, or when they die however they die) the kernel frees the memory:
//! a crashed job leaves nothing behind, in `/dev/shm` or elsewhere. A random
//! nonce in the header and the connect information guards against a reused
//! descriptor number.
//!
//! Layout (offsets in bytes; every counter on its own 128-byte line as NCCL's
//! `ncclSendMem`/`ncclRecvMem`, `src/include/comm.h`):
//!
//! | offset | field | written by |
//! |---:|---|---|
//! | 0 | magic, version, protocol, nonce, length, step size, channel, connection index, ranks | receiver, at creation |
//! | 128 | `tail`: steps published (Simple) | sender |
//! | 136 | `fifo[8]`: slot and size of each step in flight (Simple; NCCL's `connFifo`) | sender |
//! | 256 | `head`: steps consumed (credits) | receiver |
//! | 384 | sender state: attached, closed or aborted (and why) | sender |
//! | 512 | receiver state: closed or aborted (and why) | receiver |
//! | 1024 | operation headers of device slots (P2P) | sender |
//! | 2048 | 8 inline lines of 128 bytes (Simple steps of at most 56 bytes) | sender |
//! | 4096 | 8 slots of `stride` bytes | sender (data), receiver (reads) |
//!
//! # Protocols (NCCL §4.4)
//!
//! **Simple** (`prims_simple.h`): a step's data goes into a free slot (the most
//! recently freed one, [`SlotStack`], so a few cache-hot slots serve a stream of
//! steps), the sender records slot and size in `fifo[step % 8]` and publishes
//! with a release store of `tail = step + 1`; the receiver acquire-loads `tail`,
//! reads the entry and the slot, and returns the credit with a release store of
//! `head = step + 1`, which the sender acquire-loads before reusing the slot. No
//! system call on this path.
//!
//! A step of at most [`INLINE_MAX`] bytes (a small operation's header and data;
//! slots in the segment, not P2P's device slots) goes *inline*: the sender
//! copies it into the step's inline line, writes the flag word `(step + 1) << 8
//! | size` of that line with a release store, then the FIFO entry (slot 0xff:
//! none) and `tail` as for any step. The receiver polls the inline line of the
//! step it expects before `tail`: one cache line brings flag and bytes together,
//! where a slot step costs two dependent transfers (`tail`, then the slot). Like
//! Open MPI's shared-memory "fast boxes" and the flag-in-data idea of NCCL's LL
//! protocols, for the steps of 8-byte AllReduces. A receiver that sees `tail`
//! first reads the line again (the acquire on `tail` makes the line visible).
//!
//! **LL** (`prims_ll.h`): the slot of step `s` is `s % 8`, cut in 16-byte lines
//! `{u32 data, u32 flag, u32 data, u32 flag}`, each 8-byte half one atomic
//! store, every flag `s + 1` (32-bit). Line 0 carries the step's size, lines
//! 1.. its bytes. The receiver polls the lines' flags (memory, not a counter),
//! copies the payload out of the lines, and returns credits with `head` as for
//! Simple. When `s & 0x7ffffff8 == 0x7ffffff8` (NCCL's `NCCL_LL_CLEAN_MASK`) the
//! sender rewrites every line of the slot, so a 32-bit flag that wraps never
//! matches a stale line.
//!
//! Which protocol a connection uses is decided by its receiver from
//! `NCCL_PROTO` (`tune::enable::shm_protocol`) and sent with the segment.
//!
//! # Failures
//!
//! A shared segment gives no end-of-file, so a connector that waits on its
//! peer (for data, or for credits) checks the peer: dead (a `pidfd`, or
//! `/proc/<pid>/stat` where `pidfd_open` is missing) after a few
//! milliseconds of waiting, at most every 10 ms; stopped (state `T`/`t`) once
//! it has waited for half the communicator's timeout. A connector that closes
//! (communicator destroyed, aborted or failed) says so in its state word,
//! naming the rank whose death or stop caused it, so every rank waiting on it
//! fails promptly with an error naming that rank. Everything a peer writes is
//! checked before use: a step's slot and size, counters that run ahead, the
//! header and the segment's size.

use std::cell::Cell;
use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::fifo::{AlignedBuf, SlotStack, StepBytes, Steps};
use super::proto::Protocol;
use super::{
    ConnRequest, Connected, Dir, FifoMem, NCCL_STEPS, PendingConn, RecvConnector, SendConnector, Transport,
    TransportPeer, UserReg,
};
use crate::error::Error;

/// Header magic, "FRCLSHM1".
const MAGIC: u64 = u64::from_le_bytes(*b"FRCLSHM1");
/// Segment format version (header and connect information).
const VERSION: u32 = 2;
/// Bytes before the first slot.
const HEADER_BYTES: usize = 4096;
/// Slots are page-aligned.
const PAGE: usize = 4096;
/// NCCL's `NCCL_LL_CLEAN_MASK`.
const LL_CLEAN_MASK: u64 = 0x7fff_fff8;
/// Largest step accepted (bytes); `NCCL_BUFFSIZE` is at most 1 GiB, so 128 MiB.
const MAX_STEP: usize = 1 << 27;

/// The segment header, mapped at offset 0 (layout in the module docs). Every
/// field is an atomic: the peer may write the segment at any time.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    proto: AtomicU32,
    nonce: AtomicU64,
    len: AtomicU64,
    step_size: AtomicU64,
    channel: AtomicU32,
    conn: AtomicU32,
    send_rank: AtomicU32,
    recv_rank: AtomicU32,
    _pad0: [u64; 9],
    tail: AtomicU64,
    /// `size | slot << 56` of each step in flight, at `step % NCCL_STEPS`.
    fifo: [AtomicU64; NCCL_STEPS],
    _pad1: [u64; 7],
    head: AtomicU64,
    _pad2: [u64; 15],
    send_state: AtomicU64,
    _pad3: [u64; 15],
    recv_state: AtomicU64,
    _pad4: [u64; 63],
    /// Operation headers of the steps in flight, by slot, when the slots are
    /// device memory ([`ExtSlots`], the P2P transport): the executor writes and
    /// reads them with the CPU, which must never touch a device slot.
    _op_hdr: [[AtomicU64; OP_HDR_WORDS]; NCCL_STEPS],
    _pad5: [u64; 96],
    /// Inline steps (Simple, slots in the segment): the line of step `s` is
    /// `inline[s % NCCL_STEPS]`, word 0 `(s + 1) << 8 | size`, words 1.. the
    /// step's bytes (at most [`INLINE_MAX`]): one cache line carries a small
    /// step's flag, operation header and data (see the module docs).
    inline: [[AtomicU64; INLINE_WORDS]; NCCL_STEPS],
}

/// 64-bit words between inline lines (128 bytes, one line pair, so that the
/// adjacent-line prefetch of one step's line never pulls a neighbour's).
const INLINE_WORDS: usize = 16;
/// Largest step sent inline (bytes): the first 64-byte line of an inline
/// line pair, less its flag word (an operation header of
/// `coll::desc::OP_HDR_BYTES` and up to 24 bytes of data).
pub(crate) const INLINE_MAX: usize = 56;
/// Offset of `Header::inline`.
const INLINE_OFF: usize = 2048;
/// The FIFO entry's slot of a step sent inline (no slot).
const INLINE_SLOT: usize = 0xff;

/// 64-bit words of an operation header (`coll::desc::OP_HDR_BYTES`).
const OP_HDR_WORDS: usize = crate::coll::desc::OP_HDR_BYTES / 8;
/// Offset of `Header::_op_hdr`.
const OP_HDR_OFF: usize = 1024;

const _: () = {
    assert!(std::mem::offset_of!(Header, tail) == 128);
    assert!(std::mem::offset_of!(Header, fifo) == 136);
    assert!(std::mem::offset_of!(Header, head) == 256);
    assert!(std::mem::offset_of!(Header, send_state) == 384);
    assert!(std::mem::offset_of!(Header, recv_state) == 512);
    assert!(std::mem::offset_of!(Header, _op_hdr) == OP_HDR_OFF);
    assert!(OP_HDR_WORDS * 8 == crate::coll::desc::OP_HDR_BYTES);
    assert!(std::mem::offset_of!(Header, inline) == INLINE_OFF);
    assert!(INLINE_MAX + 8 == 64);
    assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);
};

/// State word: the sender has mapped the segment.
const ST_ATTACHED: u64 = 1;
/// State word code (bits 8..16): the side closed (communicator destroyed or aborted).
const ST_CLOSED: u64 = 1;
/// State word code: the side failed because of another rank (the culprit).
const ST_ABORTED: u64 = 2;

/// Why a rank failed, as carried in state words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    Unknown = 0,
    Exited = 1,
    Stopped = 2,
}

/// The rank whose failure made this communicator fail, carried to peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Culprit {
    rank: usize,
    reason: Reason,
}

fn state_code(w: u64) -> u64 {
    (w >> 8) & 0xff
}

fn state_word(code: u64, culprit: Option<Culprit>) -> u64 {
    let (reason, who) = culprit.map_or((0, 0), |c| (c.reason as u64, c.rank as u64 + 1));
    (code << 8) | (reason << 16) | (who << 32)
}

fn state_culprit(w: u64) -> Option<Culprit> {
    let who = w >> 32;
    let reason = match (w >> 16) & 0xff {
        1 => Reason::Exited,
        2 => Reason::Stopped,
        _ => Reason::Unknown,
    };
    (who > 0).then(|| Culprit {
        rank: who as usize - 1,
        reason,
    })
}

/// Where things are in a segment of a given protocol and step size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    proto: Protocol,
    /// Payload bytes per step.
    step_size: usize,
    /// Bytes between slots.
    stride: usize,
    /// Segment length.
    len: usize,
    /// The slots are not in the segment ([`ExtSlots`]): the segment is the
    /// header alone.
    external: bool,
}

impl Layout {
    /// Errors: [`Error::InvalidUsage`] for a protocol the transport lacks or a
    /// step of 0 or more than [`MAX_STEP`] bytes.
    fn new(proto: Protocol, step_size: usize) -> Result<Layout, Error> {
        if step_size == 0 || step_size > MAX_STEP {
            return Err(Error::InvalidUsage(format!(
                "shared-memory FIFO step of {step_size} bytes (expected 1..={MAX_STEP})"
            )));
        }
        let bytes = match proto {
            Protocol::Simple => step_size,
            Protocol::Ll => 16 * (1 + step_size.div_ceil(8)),
            Protocol::Ll128 => {
                return Err(Error::InvalidUsage(
                    "the LL128 protocol is not implemented by the shared-memory transport".into(),
                ));
            }
        };
        let stride = bytes.div_ceil(PAGE) * PAGE;
        Ok(Layout {
            proto,
            step_size,
            stride,
            len: HEADER_BYTES + NCCL_STEPS * stride,
            external: false,
        })
    }

    /// The layout of a connection whose slots live elsewhere ([`ExtSlots`]:
    /// `NCCL_STEPS * stride` bytes of device memory); Simple protocol only.
    ///
    /// Errors: as [`Layout::new`].
    pub(crate) fn external(step_size: usize) -> Result<Layout, Error> {
        let l = Layout::new(Protocol::Simple, step_size)?;
        Ok(Layout {
            len: HEADER_BYTES,
            external: true,
            ..l
        })
    }

    /// Bytes of the slots of an external layout.
    pub(crate) fn slots_len(&self) -> usize {
        NCCL_STEPS * self.stride
    }

    fn slot_offset(&self, slot: usize) -> usize {
        HEADER_BYTES + slot * self.stride
    }
}

fn proto_code(p: Protocol) -> u32 {
    match p {
        Protocol::Ll => 0,
        Protocol::Ll128 => 1,
        Protocol::Simple => 2,
    }
}

fn sys_err(what: impl Into<String>) -> Error {
    Error::System {
        what: what.into(),
        source: Arc::new(std::io::Error::last_os_error()),
    }
}

/// A shared mapping of a segment.
struct Segment {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is shared memory whose header is only accessed through
// atomics and whose slots follow the FIFO protocol (one writer, then one reader,
// ordered by the counters); the pointer itself may move between threads.
unsafe impl Send for Segment {}
// SAFETY: as above; `&Segment` only hands out the header (atomics) and raw addresses.
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates a zeroed anonymous segment of `len` bytes named `name` (as shown in
    /// `/proc/<pid>/fd`) and maps it; returns the mapping and the memfd.
    fn create(name: &str, len: usize) -> Result<(Segment, OwnedFd), Error> {
        let cname = std::ffi::CString::new(name).expect("segment name has no NUL");
        // SAFETY: `cname` is a valid NUL-terminated string.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(sys_err(format!("memfd_create of shared-memory segment {name}")));
        }
        // SAFETY: `fd` is a descriptor we just created and own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain syscall on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(sys_err(format!("sizing shared-memory segment {name} to {len} bytes")));
        }
        let seg = Segment::map(&fd, len, name)?;
        Ok((seg, fd))
    }

    /// Maps `len` bytes of `fd` shared, read-write.
    fn map(fd: &OwnedFd, len: usize, what: &str) -> Result<Segment, Error> {
        // SAFETY: a fresh mapping of a file we hold open; the kernel checks the arguments.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(sys_err(format!("mapping {len} bytes of shared-memory segment {what}")));
        }
        Ok(Segment { ptr: ptr.cast(), len })
    }

    /// Opens and maps the peer's segment `/proc/<pid>/fd/<fd>`, which must be a
    /// regular file of exactly `len` bytes.
    fn open_peer(pid: u32, fd: i32, len: usize, peer: usize) -> Result<Segment, Error> {
        let path = format!("/proc/{pid}/fd/{fd}");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| Error::System {
                what: format!(
                    "opening rank {peer}'s shared-memory segment {path} (set NCCL_SHM_DISABLE=1 to use the network \
                     between local ranks)"
                ),
                source: Arc::new(e),
            })?;
        let meta = file.metadata().map_err(|e| Error::System {
            what: format!("stat of rank {peer}'s shared-memory segment {path}"),
            source: Arc::new(e),
        })?;
        if !meta.is_file() || meta.size() != len as u64 {
            return Err(Error::Remote(format!(
                "rank {peer}'s shared-memory segment {path} is {} of {} bytes, expected a file of {len} bytes",
                if meta.is_file() {
                    "a file"
                } else {
                    "not a regular file but"
                },
                meta.size()
            )));
        }
        Segment::map(&OwnedFd::from(file), len, &path)
    }

    /// The mapping as FIFO memory (whole pages: mappings are page-aligned and
    /// every layout's length is a multiple of the page).
    fn fifo_mem(&self) -> FifoMem {
        FifoMem::Host {
            base: self.ptr as usize,
            len: self.len.next_multiple_of(PAGE),
        }
    }

    /// Offers the mapping to be page-locked for a GPU (undone on drop), as NCCL
    /// registers its shared segments (`src/transport/shm.cc`, `ncclShmOpen`
    /// with `cudaHostRegister`).
    fn announce(&self) {
        ferroccl_kernels::hostreg::announce(self.ptr as usize, self.len.next_multiple_of(PAGE));
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is page-aligned and at least HEADER_BYTES long
        // (every layout is); all-zero and any other bytes are valid atomics.
        unsafe { &*(self.ptr as *const Header) }
    }

    /// Address `off` bytes into the mapping.
    fn at(&self, off: usize) -> *mut u8 {
        debug_assert!(off < self.len);
        // SAFETY: `off` is inside the mapping (callers use layout offsets).
        unsafe { self.ptr.add(off) }
    }

    /// The `i`-th 64-bit word of the slot at `off` (LL lines are two words).
    fn word(&self, off: usize, i: usize) -> &AtomicU64 {
        debug_assert!(off + (i + 1) * 8 <= self.len);
        // SAFETY: inside the mapping, 8-byte aligned (slots are page-aligned).
        unsafe { &*(self.ptr.add(off + i * 8) as *const AtomicU64) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // Unregistered (when it was page-locked for a GPU) before it is unmapped.
        ferroccl_kernels::hostreg::forget(self.ptr as usize);
        // SAFETY: unmapping our own mapping; nothing refers to it any more.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Connect information of the receiving side (it created the segment).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RecvInfo {
    version: u32,
    pid: u32,
    fd: i32,
    len: u64,
    nonce: u64,
    proto: Protocol,
    step_size: u64,
    /// The slots are not in the segment ([`ExtSlots`]).
    #[serde(default)]
    external: bool,
}

/// The slots of a connection that live outside its segment: `NCCL_STEPS *
/// stride` bytes at `base` (the P2P transport's FIFO in the receiver's GPU
/// memory, mapped into the sender's process). The connector never reads or
/// writes them with the CPU: the executor's kernels do.
pub(crate) struct ExtSlots {
    /// Address of slot 0.
    pub base: *mut u8,
    /// The device holding them (`FifoMem::Device`).
    pub ordinal: usize,
    /// Keeps the allocation or mapping alive as long as the connector.
    pub _keep: Arc<dyn Send + Sync>,
}

// SAFETY: `base` is an address the connector hands to the executor, never
// dereferenced by the connector; `keep` is Send + Sync.
unsafe impl Send for ExtSlots {}

/// Connect information of the sending side.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SendInfo {
    version: u32,
    pid: u32,
}

pub(crate) fn random_u64() -> u64 {
    if let Ok(v) = getrandom::u64() {
        return v;
    }
    // No getrandom: the clock and the pid still make a reused descriptor unlikely to match.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let h = blake3::hash(&[t.to_ne_bytes(), u64::from(std::process::id()).to_ne_bytes()].concat());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// What every shared-memory connector of a communicator shares: the first
/// failure seen (to tell peers which rank caused it) and every rank's pid.
#[derive(Debug)]
struct ShmShared {
    rank: usize,
    pids: Vec<u32>,
    culprit: Mutex<Option<Culprit>>,
}

impl ShmShared {
    fn culprit(&self) -> Option<Culprit> {
        *self.culprit.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn blame(&self, c: Culprit) {
        let mut g = self.culprit.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(c);
        }
    }

    fn describe(&self, c: Culprit) -> String {
        let pid = self.pids.get(c.rank).copied().unwrap_or(0);
        match c.reason {
            Reason::Exited => format!("rank {} (pid {pid}) exited", c.rank),
            Reason::Stopped => format!("rank {} (pid {pid}) is stopped", c.rank),
            Reason::Unknown => format!("rank {} (pid {pid}) failed", c.rank),
        }
    }
}

/// The shared-memory transport.
pub(crate) struct ShmTransport {
    proto: Protocol,
    timeout: Duration,
    shared: Arc<ShmShared>,
}

impl ShmTransport {
    /// The transport for `rank` of a communicator whose ranks have `pids`;
    /// receive connections use `proto`; `timeout` is the communicator's.
    pub(crate) fn new(rank: usize, pids: Vec<u32>, proto: Protocol, timeout: Duration) -> ShmTransport {
        ShmTransport {
            proto,
            timeout,
            shared: Arc::new(ShmShared {
                rank,
                pids,
                culprit: Mutex::new(None),
            }),
        }
    }
}

impl ShmTransport {
    /// The same transport with receive connections of `proto`, sharing this
    /// one's failure record (the P2P transport's Simple connectors).
    pub(crate) fn with_proto(&self, proto: Protocol) -> ShmTransport {
        ShmTransport {
            proto,
            timeout: self.timeout,
            shared: self.shared.clone(),
        }
    }
}

impl Transport for ShmTransport {
    fn name(&self) -> &'static str {
        "SHM"
    }

    fn describe(&self) -> String {
        format!("SHM/{}", self.proto)
    }

    /// NCCL's `shmCanConnect`: not when `NCCL_SHM_DISABLE=1` (on either rank),
    /// only on the same host (`hostHash`) and, where NCCL compares the `/dev/shm`
    /// device, in the same PID namespace (the segment is reached through
    /// `/proc/<pid>`).
    fn can_connect(&self, me: &TransportPeer, peer: &TransportPeer) -> bool {
        !me.params.shm_disable && !peer.params.shm_disable && me.host_hash == peer.host_hash && me.pid_ns == peer.pid_ns
    }

    fn setup(
        &self,
        req: &ConnRequest,
        me: &TransportPeer,
        peer: &TransportPeer,
    ) -> Result<(Box<dyn PendingConn>, Vec<u8>), Error> {
        match req.dir {
            Dir::Recv => {
                let layout = Layout::new(self.proto, req.step_size)?;
                let (p, info) = self.setup_recv(req, me, peer, layout, None)?;
                Ok((Box::new(p), info))
            }
            Dir::Send => {
                let (p, info) = self.setup_send(req, me, peer, "SHM/direct/direct");
                Ok((Box::new(p), info))
            }
        }
    }
}

impl ShmTransport {
    /// NCCL's `shmRecvSetup`: creates and initialises the connection's segment
    /// of `layout`; an external layout's slots are `ext`.
    pub(crate) fn setup_recv(
        &self,
        req: &ConnRequest,
        me: &TransportPeer,
        peer: &TransportPeer,
        layout: Layout,
        ext: Option<ExtSlots>,
    ) -> Result<(PendingRecv, Vec<u8>), Error> {
        debug_assert_eq!(layout.external, ext.is_some());
        let key = req.key;
        let name = format!("ferroccl-shm-ch{}-{}-{}-{}", key.channel, key.conn, peer.rank, me.rank);
        let (seg, fd) = Segment::create(&name, layout.len)?;
        let nonce = random_u64();
        let h = seg.header();
        h.version.store(VERSION, Ordering::Relaxed);
        h.proto.store(proto_code(layout.proto), Ordering::Relaxed);
        h.nonce.store(nonce, Ordering::Relaxed);
        h.len.store(layout.len as u64, Ordering::Relaxed);
        h.step_size.store(layout.step_size as u64, Ordering::Relaxed);
        h.channel.store(key.channel as u32, Ordering::Relaxed);
        h.conn.store(key.conn as u32, Ordering::Relaxed);
        h.send_rank.store(peer.rank as u32, Ordering::Relaxed);
        h.recv_rank.store(me.rank as u32, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        let info = RecvInfo {
            version: VERSION,
            pid: me.pid,
            fd: fd.as_raw_fd(),
            len: layout.len as u64,
            nonce,
            proto: layout.proto,
            step_size: layout.step_size as u64,
            external: layout.external,
        };
        let p = PendingRecv {
            seg: Some(seg),
            fd: Some(fd),
            ext,
            watch: None,
            layout,
            req: *req,
            peer_pid: peer.pid,
            shared: self.shared.clone(),
            timeout: self.timeout,
        };
        Ok((p, serde_json::to_vec(&info).expect("connect info serializes")))
    }

    /// NCCL's `shmSendSetup`: nothing to allocate (the receiver owns the
    /// segment); logs the connection `via` (e.g. `SHM/direct/direct`; empty: the
    /// caller logs it later).
    pub(crate) fn setup_send(
        &self,
        req: &ConnRequest,
        me: &TransportPeer,
        peer: &TransportPeer,
        via: &str,
    ) -> (PendingSend, Vec<u8>) {
        let key = req.key;
        // The device in brackets: NCCL prints the GPU (`nvmlDev`); a host
        // process prints its index among the host's ranks.
        let dev = |p: &TransportPeer| p.gpu.as_ref().map_or(p.local_rank, |g| g.dev);
        if !via.is_empty() {
            crate::log::nccl_info!(
                INIT,
                "Channel {:02}/{} : {}[{}] -> {}[{}] via {via}",
                key.channel,
                key.conn,
                me.rank,
                dev(me),
                peer.rank,
                dev(peer)
            );
        }
        let info = SendInfo {
            version: VERSION,
            pid: me.pid,
        };
        let p = PendingSend {
            req: *req,
            rank: me.rank,
            peer_pid: peer.pid,
            shared: self.shared.clone(),
            timeout: self.timeout,
        };
        (p, serde_json::to_vec(&info).expect("connect info serializes"))
    }
}

/// The receiving side between setup and connect: the segment exists, the
/// sender has not mapped it yet.
pub(crate) struct PendingRecv {
    seg: Option<Segment>,
    fd: Option<OwnedFd>,
    ext: Option<ExtSlots>,
    /// Watches the sender while waiting for it to attach ([`Self::watch_peer`]).
    watch: Option<PeerWatch>,
    layout: Layout,
    req: ConnRequest,
    peer_pid: u32,
    shared: Arc<ShmShared>,
    timeout: Duration,
}

impl PendingConn for PendingRecv {
    fn connect(&mut self, peer_info: &[u8]) -> Result<Option<Connected>, Error> {
        Ok(self.finish(peer_info)?.map(|c| Connected::Recv(Box::new(c))))
    }

    fn waiting_for(&self) -> String {
        format!(
            "rank {} to map the shared-memory segment of channel {}",
            self.req.key.peer, self.req.key.channel
        )
    }
}

impl PendingRecv {
    /// Checks the sending process while waiting for it to attach: its death
    /// fails the connect at once (naming it) instead of at the setup timeout.
    pub(crate) fn watch_peer(&mut self) {
        self.watch = Some(PeerWatch::new(self.req.key.peer, self.peer_pid, self.timeout));
    }

    /// NCCL's `shmRecvConnect`: done once the sender has mapped the segment.
    pub(crate) fn finish(&mut self, peer_info: &[u8]) -> Result<Option<ShmRecv>, Error> {
        let peer = self.req.key.peer;
        let info: SendInfo = serde_json::from_slice(peer_info).map_err(|e| {
            Error::Remote(format!(
                "rank {peer} sent malformed shared-memory connect information: {e}"
            ))
        })?;
        if info.version != VERSION || info.pid != self.peer_pid {
            return Err(Error::Remote(format!(
                "rank {peer} sent shared-memory connect information of version {} from pid {}, expected version \
                 {VERSION} from pid {}",
                info.version, info.pid, self.peer_pid
            )));
        }
        let seg = self.seg.as_ref().expect("segment until connected");
        if seg.header().send_state.load(Ordering::Acquire) & ST_ATTACHED == 0 {
            if let Some(w) = &mut self.watch
                && let Some(ev) = w.check(true)
            {
                let what = format!("rank {peer} to map its FIFO of channel {}", self.req.key.channel);
                return Err(peer_event_error(&self.shared, w, ev, &what));
            }
            return Ok(None);
        }
        // The sender has its own mapping: our descriptor is no longer needed.
        self.fd = None;
        let seg = self.seg.take().expect("segment until connected");
        Ok(Some(ShmRecv::new(
            seg,
            self.layout,
            self.ext.take(),
            peer,
            self.peer_pid,
            self.shared.clone(),
            self.timeout,
        )))
    }
}

/// The sending side between setup and connect.
pub(crate) struct PendingSend {
    req: ConnRequest,
    rank: usize,
    peer_pid: u32,
    shared: Arc<ShmShared>,
    timeout: Duration,
}

impl PendingSend {
    /// Checks the receiver's header against its connect information and this
    /// connection. Errors: [`Error::Remote`] naming the first field that differs.
    fn check_header(&self, seg: &Segment, info: &RecvInfo, layout: &Layout) -> Result<(), Error> {
        let h = seg.header();
        let (peer, key) = (self.req.key.peer, self.req.key);
        let fields: [(&str, u64, u64); 10] = [
            ("magic", h.magic.load(Ordering::Acquire), MAGIC),
            ("version", h.version.load(Ordering::Relaxed).into(), VERSION.into()),
            (
                "protocol",
                h.proto.load(Ordering::Relaxed).into(),
                proto_code(layout.proto).into(),
            ),
            ("nonce", h.nonce.load(Ordering::Relaxed), info.nonce),
            ("length", h.len.load(Ordering::Relaxed), layout.len as u64),
            (
                "step size",
                h.step_size.load(Ordering::Relaxed),
                layout.step_size as u64,
            ),
            ("channel", h.channel.load(Ordering::Relaxed).into(), key.channel as u64),
            (
                "connection index",
                h.conn.load(Ordering::Relaxed).into(),
                key.conn as u64,
            ),
            (
                "sending rank",
                h.send_rank.load(Ordering::Relaxed).into(),
                self.rank as u64,
            ),
            (
                "receiving rank",
                h.recv_rank.load(Ordering::Relaxed).into(),
                peer as u64,
            ),
        ];
        for (name, found, want) in fields {
            if found != want {
                return Err(Error::Remote(format!(
                    "rank {peer}'s shared-memory segment for channel {} has a corrupt header: {name} is {found:#x}, \
                     expected {want:#x}",
                    key.channel
                )));
            }
        }
        Ok(())
    }
}

impl PendingConn for PendingSend {
    fn connect(&mut self, peer_info: &[u8]) -> Result<Option<Connected>, Error> {
        Ok(Some(Connected::Send(Box::new(self.attach(peer_info, None)?))))
    }

    fn waiting_for(&self) -> String {
        format!("rank {}'s shared-memory segment", self.req.key.peer)
    }
}

impl PendingSend {
    /// NCCL's `shmSendConnect`: maps the receiver's segment after checking it;
    /// the slots are `ext` when the receiver announced external slots.
    pub(crate) fn attach(&mut self, peer_info: &[u8], ext: Option<ExtSlots>) -> Result<ShmSend, Error> {
        let peer = self.req.key.peer;
        let info: RecvInfo = serde_json::from_slice(peer_info).map_err(|e| {
            Error::Remote(format!(
                "rank {peer} sent malformed shared-memory connect information: {e}"
            ))
        })?;
        if info.version != VERSION || info.pid != self.peer_pid {
            return Err(Error::Remote(format!(
                "rank {peer} sent shared-memory connect information of version {} from pid {}, expected version \
                 {VERSION} from pid {}",
                info.version, info.pid, self.peer_pid
            )));
        }
        if info.step_size != self.req.step_size as u64 {
            return Err(Error::Remote(format!(
                "rank {peer}'s shared-memory FIFO has steps of {} bytes where this rank expects {} \
                 (NCCL_BUFFSIZE / NCCL_P2P_NET_CHUNKSIZE must agree)",
                info.step_size, self.req.step_size
            )));
        }
        if info.external != ext.is_some() {
            return Err(Error::Remote(format!(
                "rank {peer} announced a FIFO {} where this rank expects one {}",
                if info.external {
                    "outside its segment"
                } else {
                    "in its segment"
                },
                if ext.is_some() {
                    "in device memory"
                } else {
                    "in shared memory"
                }
            )));
        }
        let layout = if info.external {
            Layout::external(self.req.step_size)?
        } else {
            Layout::new(info.proto, self.req.step_size)?
        };
        if info.len != layout.len as u64 {
            return Err(Error::Remote(format!(
                "rank {peer} announced a shared-memory segment of {} bytes, expected {} for {} steps of {} bytes",
                info.len, layout.len, info.proto, layout.step_size
            )));
        }
        let seg = Segment::open_peer(info.pid, info.fd, layout.len, peer)?;
        self.check_header(&seg, &info, &layout)?;
        seg.header().send_state.fetch_or(ST_ATTACHED, Ordering::Release);
        Ok(ShmSend::new(
            seg,
            layout,
            ext,
            peer,
            self.peer_pid,
            self.shared.clone(),
            self.timeout,
        ))
    }
}

/// What a waiting connector found out about its peer.
enum PeerEvent {
    Exited,
    Stopped(char),
}

/// Watches the peer of one connector while the connector waits on it.
struct PeerWatch {
    rank: usize,
    pid: u32,
    pidfd: Option<OwnedFd>,
    timeout: Duration,
    polls: u32,
    waiting_since: Option<Instant>,
    last_check: Option<Instant>,
}

impl PeerWatch {
    /// How often (in `progress` calls) a waiting connector looks at the clock.
    const CLOCK_EVERY: u32 = 64;
    /// Waiting shorter than this is normal.
    const GRACE: Duration = Duration::from_millis(2);
    /// Liveness checks while waiting, at most this often.
    const CHECK_EVERY: Duration = Duration::from_millis(10);

    fn new(rank: usize, pid: u32, timeout: Duration) -> PeerWatch {
        // SAFETY: pidfd_open(pid, 0) takes no pointers; returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_long, 0 as libc::c_long) };
        // SAFETY: a descriptor the syscall just created for us.
        let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) });
        PeerWatch {
            rank,
            pid,
            pidfd,
            timeout,
            polls: 0,
            waiting_since: None,
            last_check: None,
        }
    }

    /// The state letter of the peer in `/proc/<pid>/stat` (`None`: no such process).
    fn proc_state(&self) -> Option<char> {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        s.rsplit_once(')')?.1.trim_start().chars().next()
    }

    fn exited(&self) -> bool {
        if let Some(fd) = &self.pidfd {
            let mut p = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            return n > 0 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0;
        }
        matches!(self.proc_state(), None | Some('Z' | 'X'))
    }

    /// Called on every `progress`: whether the connector is `waiting` on its
    /// peer; checks the peer now and then while it is. Off the data path: the
    /// clock is read every [`Self::CLOCK_EVERY`] calls, the process at most every
    /// [`Self::CHECK_EVERY`].
    fn check(&mut self, waiting: bool) -> Option<PeerEvent> {
        if !waiting {
            self.waiting_since = None;
            return None;
        }
        self.polls = self.polls.wrapping_add(1);
        if !self.polls.is_multiple_of(Self::CLOCK_EVERY) {
            return None;
        }
        let now = Instant::now();
        let since = *self.waiting_since.get_or_insert(now);
        let waited = now - since;
        if waited < Self::GRACE || self.last_check.is_some_and(|t| now - t < Self::CHECK_EVERY) {
            return None;
        }
        self.last_check = Some(now);
        if self.exited() {
            return Some(PeerEvent::Exited);
        }
        if waited >= self.timeout / 2
            && let Some(c @ ('T' | 't')) = self.proc_state()
        {
            return Some(PeerEvent::Stopped(c));
        }
        None
    }

    /// How long the connector has been waiting (as of the last clock reading).
    fn waited(&self) -> Duration {
        self.waiting_since.map(|t| t.elapsed()).unwrap_or_default()
    }
}

/// The error for `event` seen by a connector of `shared`'s rank on `channel`,
/// recording the culprit so that closing connectors pass it on.
fn peer_event_error(shared: &ShmShared, watch: &PeerWatch, event: PeerEvent, what: &str) -> Error {
    match event {
        PeerEvent::Exited => {
            shared.blame(Culprit {
                rank: watch.rank,
                reason: Reason::Exited,
            });
            Error::Remote(format!(
                "rank {} (pid {}) on this host exited while rank {} was waiting for {what}",
                watch.rank, watch.pid, shared.rank
            ))
        }
        PeerEvent::Stopped(state) => {
            shared.blame(Culprit {
                rank: watch.rank,
                reason: Reason::Stopped,
            });
            Error::Timeout(format!(
                "rank {} (pid {}) on this host is stopped (process state {state}); rank {} waited {:.1?} for {what}",
                watch.rank,
                watch.pid,
                shared.rank,
                watch.waited()
            ))
        }
    }
}

/// The error for a peer whose state word says it closed or failed.
fn peer_closed_error(shared: &ShmShared, peer: usize, word: u64, what: &str) -> Error {
    match state_culprit(word) {
        Some(c) if state_code(word) == ST_ABORTED => {
            shared.blame(c);
            Error::Remote(format!(
                "rank {peer} gave up on its shared-memory connection with rank {} because {}; rank {} was waiting \
                 for {what}",
                shared.rank,
                shared.describe(c),
                shared.rank
            ))
        }
        _ => Error::Remote(format!(
            "rank {peer} closed its shared-memory connection with rank {} (its communicator was destroyed, aborted \
             or failed) while rank {} was waiting for {what}",
            shared.rank, shared.rank
        )),
    }
}

/// The word a closing connector leaves in its state.
fn closing_word(shared: &ShmShared) -> u64 {
    match shared.culprit() {
        Some(c) => state_word(ST_ABORTED, Some(c)),
        None => state_word(ST_CLOSED, None),
    }
}

/// Polls `ready` up to [`SPIN_POLLS`] times (no system call); whether it
/// turned true. A waiting connector polls its peer's counter or lines this way
/// inside `progress` so that a step that lands a moment later is taken at once
/// rather than after the proxy's next yield (a `sched_yield` costs about a
/// microsecond on the benchmark VM, more than the step).
fn spin_until(ready: impl Fn() -> bool) -> bool {
    for _ in 0..SPIN_POLLS {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
    }
    false
}

/// Starts moving the cache line at `p` to this core. A step is first seen
/// where the consumer polls `tail` (`progress`), and read only once the
/// executor reaches it: the slot's first line, which holds all of a small
/// operation's step (header and data), then travels while that code runs
/// instead of after it.
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults and changes no memory,
    // whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Steps sent inline by this process (tests check that small steps take the
/// one-line path).
#[cfg(test)]
pub(crate) static INLINE_PUSHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Polls of [`spin_until`] (a few microseconds).
const SPIN_POLLS: u32 = 256;

/// Address of slot `slot`: in the segment, or in the external slots.
fn slot_ptr(seg: &Segment, layout: &Layout, ext: Option<&ExtSlots>, slot: usize) -> *mut u8 {
    match ext {
        Some(e) => e.base.wrapping_add(slot * layout.stride),
        None => seg.at(layout.slot_offset(slot)),
    }
}

/// `(slot, size)` of a packed FIFO entry.
fn fifo_entry(w: u64) -> (usize, usize) {
    ((w >> 56) as usize, (w & ((1 << 56) - 1)) as usize)
}

/// Send side of a shared-memory connection.
pub(crate) struct ShmSend {
    seg: Segment,
    layout: Layout,
    /// The slots when they are not in the segment (P2P).
    ext: Option<ExtSlots>,
    /// `head`: next step to push; `tail`: oldest step whose credit has not come
    /// back (its slot is not free yet).
    steps: Cell<Steps>,
    /// Free slots (Simple).
    free: Cell<SlotStack>,
    /// The slot of each step in flight (Simple), by [`Steps::index`].
    slot_of: Cell<StepBytes>,
    /// How many free slots below the top [`SendConnector::slot_at`] named
    /// for steps held ahead and not pushed yet (at most; less by one with
    /// each push): an inline push puts its slot below them.
    ahead: Cell<usize>,
    /// LL: the step is written here first, then packed into lines.
    staging: Option<AlignedBuf>,
    /// The producer found no room (waiting on the peer's credits).
    waiting: Cell<bool>,
    /// Bytes of the last step pushed (how eagerly credits are taken back,
    /// see `can_push`).
    last_size: Cell<usize>,
    /// A protocol violation seen where no error can be returned.
    corrupt: Cell<Option<String>>,
    watch: PeerWatch,
    shared: Arc<ShmShared>,
    closed: bool,
    peer: usize,
}

/// Steps of fewer than this many bytes take back credits lazily
/// ([`ShmSend::can_push`]).
const SMALL_STEP: usize = 4096;

impl ShmSend {
    fn new(
        seg: Segment,
        layout: Layout,
        ext: Option<ExtSlots>,
        peer: usize,
        pid: u32,
        shared: Arc<ShmShared>,
        timeout: Duration,
    ) -> ShmSend {
        let staging = (layout.proto == Protocol::Ll).then(|| AlignedBuf::new(layout.step_size.div_ceil(8) * 8));
        // Device steps read and write the slots the executor sees: the LL
        // staging buffer, or the segment's Simple slots.
        match &staging {
            Some(b) => b.announce(),
            None => seg.announce(),
        }
        ShmSend {
            seg,
            layout,
            ext,
            steps: Cell::new(Steps::default()),
            free: Cell::new(SlotStack::full()),
            slot_of: Cell::new(StepBytes::default()),
            ahead: Cell::new(0),
            staging,
            waiting: Cell::new(false),
            last_size: Cell::new(0),
            corrupt: Cell::new(None),
            watch: PeerWatch::new(peer, pid, timeout),
            shared,
            closed: false,
            peer,
        }
    }

    /// Takes back the credits the receiver returned (`head`), freeing their slots.
    fn reclaim(&self) {
        let mut st = self.steps.get();
        let head = self.seg.header().head.load(Ordering::Acquire);
        if head > st.head || head < st.tail {
            self.corrupt.set(Some(format!(
                "rank {} returned credits up to step {head} on a shared-memory connection where steps {}..{} are \
                 in flight",
                self.peer, st.tail, st.head
            )));
            return;
        }
        if head == st.tail {
            return;
        }
        if self.layout.proto == Protocol::Simple {
            let mut free = self.free.get();
            let slot_of = self.slot_of.get();
            for s in st.tail..head {
                let slot = slot_of.get(Steps::index(s)) as usize;
                if slot != INLINE_SLOT {
                    free.give(slot);
                }
            }
            self.free.set(free);
        }
        st.tail = head;
        self.steps.set(st);
    }

    fn room(&self) -> bool {
        let st = self.steps.get();
        st.has_room() && (self.layout.proto != Protocol::Simple || self.free.get().top().is_some())
    }

    /// Packs the staged step `step` of `size` bytes into LL lines of its slot.
    fn ll_pack(&self, step: u64, size: usize) {
        let staging = self.staging.as_ref().expect("LL staging");
        let off = self.layout.slot_offset(Steps::index(step));
        let flag = u64::from((step + 1) as u32) << 32;
        let clean = step & LL_CLEAN_MASK == LL_CLEAN_MASK;
        let lines = if clean {
            (self.layout.stride / 16).saturating_sub(1)
        } else {
            size.div_ceil(8)
        };
        let payload = self.layout.step_size.div_ceil(8);
        // Header line first: the receiver learns the size and unpacks as lines land.
        let seg = &self.seg;
        seg.word(off, 0).store(size as u32 as u64 | flag, Ordering::Relaxed);
        seg.word(off, 1).store((size as u64 >> 32) | flag, Ordering::Relaxed);
        for i in 0..lines {
            let v = if i < payload {
                // SAFETY: staging holds `payload * 8` bytes; `i < payload`.
                let b = unsafe { std::slice::from_raw_parts(staging.ptr().add(i * 8), 8) };
                u64::from_le_bytes(b.try_into().expect("8 bytes"))
            } else {
                0
            };
            seg.word(off, 2 + 2 * i)
                .store(v & 0xffff_ffff | flag, Ordering::Relaxed);
            seg.word(off, 3 + 2 * i).store(v >> 32 | flag, Ordering::Relaxed);
        }
    }

    #[cfg(test)]
    fn start_at(&mut self, step: u64) {
        self.steps.set(Steps::at(step));
        self.seg.header().tail.store(step, Ordering::Relaxed);
        self.seg.header().head.store(step, Ordering::Relaxed);
    }
}

impl SendConnector for ShmSend {
    fn step_size(&self) -> usize {
        self.layout.step_size
    }

    /// After a large step, takes back returned credits first, so that the
    /// most recently freed slot is reused while it is still in cache. After a
    /// small one (fewer than [`SMALL_STEP`] bytes), only once half the FIFO is in
    /// flight or there is no room: the receiver's `head` is a cache line it
    /// writes on every step, so reading it is a cross-core transfer, and
    /// reading it before every step would put one on the critical path of
    /// every small operation (the step's slot and `tail` stores wait behind
    /// the load), while the few lines of a small step are as cheap to reach in
    /// one slot as in another.
    fn can_push(&self) -> bool {
        if self.last_size.get() >= SMALL_STEP || self.steps.get().in_flight() >= (NCCL_STEPS / 2) as u64 || !self.room()
        {
            self.reclaim();
        }
        let ok = self.room();
        self.waiting.set(!ok);
        ok
    }

    /// Room for the step `k` after the next one (Simple only: LL packs every
    /// step through one staging buffer). Credits are not taken back while
    /// steps are held: that would put freed slots above the held ones.
    fn can_push_at(&self, k: usize) -> bool {
        if k == 0 {
            return self.can_push();
        }
        let st = self.steps.get();
        self.layout.proto == Protocol::Simple
            && st.in_flight() + (k as u64) < NCCL_STEPS as u64
            && self.free.get().nth(k).is_some()
    }

    /// The slot `k` places down the free stack (Simple), the staging buffer
    /// (LL, `k == 0` only).
    fn slot_at(&self, k: usize) -> *mut u8 {
        match &self.staging {
            Some(b) => {
                debug_assert_eq!(k, 0, "LL steps are not held ahead");
                b.ptr()
            }
            None => {
                let slot = self.free.get().nth(k).expect("slot_at without can_push_at");
                self.ahead.set(self.ahead.get().max(k));
                slot_ptr(&self.seg, &self.layout, self.ext.as_ref(), slot)
            }
        }
    }

    /// Beside a device slot: the header area of the slot `k` places down the
    /// free stack.
    fn hdr_slot_at(&self, k: usize) -> *mut u8 {
        if self.ext.is_none() {
            return self.slot_at(k);
        }
        let slot = self.free.get().nth(k).expect("hdr_slot_at without can_push_at");
        self.ahead.set(self.ahead.get().max(k));
        self.seg.at(OP_HDR_OFF + slot * crate::coll::desc::OP_HDR_BYTES)
    }

    fn fifo_mem(&self) -> Option<FifoMem> {
        if let Some(e) = &self.ext {
            return Some(FifoMem::Device { ordinal: e.ordinal });
        }
        Some(match &self.staging {
            Some(b) => b.fifo_mem(),
            None => self.seg.fifo_mem(),
        })
    }

    fn next_slot(&self) -> *mut u8 {
        match &self.staging {
            Some(b) => b.ptr(),
            None => {
                let slot = self.free.get().top().expect("next_slot without can_push");
                slot_ptr(&self.seg, &self.layout, self.ext.as_ref(), slot)
            }
        }
    }

    /// Beside a device slot: the header area of the slot in the segment.
    fn hdr_slot(&self) -> *mut u8 {
        if self.ext.is_none() {
            return self.next_slot();
        }
        let slot = self.free.get().top().expect("hdr_slot without can_push");
        self.seg.at(OP_HDR_OFF + slot * crate::coll::desc::OP_HDR_BYTES)
    }

    fn push(&mut self, size: usize) {
        debug_assert!(self.room() && size <= self.layout.step_size);
        self.last_size.set(size);
        let mut st = self.steps.get();
        let i = Steps::index(st.head);
        match self.layout.proto {
            Protocol::Simple if size <= INLINE_MAX && self.ext.is_none() => {
                // The executor wrote the step into the free slot on top
                // (`next_slot`): copy it into the step's inline line, which
                // the receiver polls; the slot stays free. With steps held
                // ahead (`slot_at`), it goes below their slots, so that each
                // still gets the slot it was named.
                let mut free = self.free.get();
                let slot = free.top().expect("push without can_push");
                let ahead = self.ahead.get();
                if ahead > 0 {
                    free.take();
                    free.put_at(slot, ahead);
                    self.free.set(free);
                }
                let src = slot_ptr(&self.seg, &self.layout, None, slot);
                let h = self.seg.header();
                let line = &h.inline[i];
                for (w, word) in line[1..].iter().enumerate().take(size.div_ceil(8)) {
                    // SAFETY: the slot is `stride` (a multiple of a page)
                    // bytes of the mapped segment, so the 8 bytes at `w * 8 <
                    // INLINE_MAX` lie inside it.
                    let v = unsafe { std::ptr::read_unaligned(src.add(w * 8).cast::<u64>()) };
                    word.store(v, Ordering::Relaxed);
                }
                line[0].store(((st.head + 1) << 8) | size as u64, Ordering::Release);
                self.slot_of.set(self.slot_of.get().with(i, INLINE_SLOT as u8));
                h.fifo[i].store(((INLINE_SLOT as u64) << 56) | size as u64, Ordering::Relaxed);
                st.head += 1;
                h.tail.store(st.head, Ordering::Release);
                #[cfg(test)]
                INLINE_PUSHES.fetch_add(1, Ordering::Relaxed);
            }
            Protocol::Simple => {
                let mut free = self.free.get();
                let slot = free.take().expect("push without can_push");
                self.free.set(free);
                self.slot_of.set(self.slot_of.get().with(i, slot as u8));
                let h = self.seg.header();
                h.fifo[i].store(((slot as u64) << 56) | size as u64, Ordering::Relaxed);
                st.head += 1;
                h.tail.store(st.head, Ordering::Release);
            }
            _ => {
                self.ll_pack(st.head, size);
                st.head += 1;
            }
        }
        self.steps.set(st);
        self.ahead.set(self.ahead.get().saturating_sub(1));
    }

    fn user_reg(&self, _ptr: *const u8, _len: usize) -> Option<UserReg> {
        None
    }

    fn can_push_user(&self) -> bool {
        false
    }

    fn push_user(&mut self, _ptr: *const u8, _size: usize, _reg: UserReg) {
        debug_assert!(false, "the shared-memory transport has no user registrations");
    }

    fn user_busy(&self, _ptr: *const u8, _len: usize) -> bool {
        false
    }

    /// A pushed step is in the receiver's memory already.
    fn idle(&self) -> bool {
        true
    }

    fn passive(&self) -> bool {
        true
    }

    /// No network to drive: checks the receiver's state and, while the
    /// producer waits for credits, the receiving process.
    fn progress(&mut self) -> Result<bool, Error> {
        if self.closed {
            return Err(Error::Internal(format!(
                "send connection to rank {} is closed",
                self.peer
            )));
        }
        if let Some(m) = self.corrupt.take() {
            return Err(Error::Remote(m));
        }
        let was_waiting = self.waiting.get();
        let waiting = was_waiting && !self.can_push() && !spin_until(|| self.can_push());
        if let Some(m) = self.corrupt.take() {
            return Err(Error::Remote(m));
        }
        if was_waiting && !waiting {
            // The credits the producer waits for have come back.
            return Ok(true);
        }
        if waiting {
            let word = self.seg.header().recv_state.load(Ordering::Acquire);
            if state_code(word) != 0 && !self.can_push() {
                return Err(peer_closed_error(&self.shared, self.peer, word, "FIFO credits"));
            }
        }
        if let Some(ev) = self.watch.check(waiting)
            && !self.can_push()
        {
            return Err(peer_event_error(&self.shared, &self.watch, ev, "FIFO credits"));
        }
        Ok(false)
    }

    fn register_user(&mut self, _ptr: *const u8, _len: usize, _space: ferroccl_kernels::MemorySpace) {}

    fn release_user(&mut self) {}

    /// Tells the receiver this side is gone (and why, when another rank's
    /// failure caused it).
    fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            self.seg
                .header()
                .send_state
                .store(ST_ATTACHED | closing_word(&self.shared), Ordering::Release);
        }
    }
}

impl Drop for ShmSend {
    fn drop(&mut self) {
        self.close();
    }
}

/// Receive side of a shared-memory connection.
pub(crate) struct ShmRecv {
    seg: Segment,
    layout: Layout,
    /// The slots when they are not in the segment (P2P).
    ext: Option<ExtSlots>,
    /// Next step to consume.
    step: u64,
    /// LL: lines are unpacked here.
    staging: Option<AlignedBuf>,
    /// LL: size of the step being unpacked, once its header line arrived.
    ll_size: Cell<Option<usize>>,
    /// LL: payload lines unpacked so far.
    ll_done: Cell<usize>,
    waiting: Cell<bool>,
    corrupt: Cell<Option<String>>,
    watch: PeerWatch,
    shared: Arc<ShmShared>,
    closed: bool,
    peer: usize,
}

impl ShmRecv {
    fn new(
        seg: Segment,
        layout: Layout,
        ext: Option<ExtSlots>,
        peer: usize,
        pid: u32,
        shared: Arc<ShmShared>,
        timeout: Duration,
    ) -> ShmRecv {
        let staging = (layout.proto == Protocol::Ll).then(|| AlignedBuf::new(layout.step_size.div_ceil(8) * 8));
        // Device steps read and write the slots the executor sees: the LL
        // staging buffer, or the segment's Simple slots.
        match &staging {
            Some(b) => b.announce(),
            None => seg.announce(),
        }
        ShmRecv {
            seg,
            layout,
            ext,
            step: 0,
            staging,
            ll_size: Cell::new(None),
            ll_done: Cell::new(0),
            waiting: Cell::new(false),
            corrupt: Cell::new(None),
            watch: PeerWatch::new(peer, pid, timeout),
            shared,
            closed: false,
            peer,
        }
    }

    /// The inline line of `step` if its flag says the step is there.
    fn inline_step(&self, step: u64) -> Option<(*mut u8, usize)> {
        let line = &self.seg.header().inline[Steps::index(step)];
        let w = line[0].load(Ordering::Acquire);
        if w >> 8 != (step + 1) & (u64::MAX >> 8) {
            return None;
        }
        let size = (w & 0xff) as usize;
        if size > INLINE_MAX || size > self.layout.step_size {
            self.corrupt.set(Some(format!(
                "rank {} sent an inline step of {size} bytes on a shared-memory FIFO (at most {INLINE_MAX})",
                self.peer
            )));
            return None;
        }
        Some((line[1].as_ptr().cast::<u8>(), size))
    }

    /// Step `step` (`self.step` or one of the `NCCL_STEPS - 1` after it) if
    /// it has arrived.
    fn simple_peek(&self, step: u64) -> Option<(*mut u8, usize)> {
        if self.ext.is_none()
            && let Some(r) = self.inline_step(step)
        {
            return Some(r);
        }
        let h = self.seg.header();
        let tail = h.tail.load(Ordering::Acquire);
        if tail <= step {
            return None;
        }
        if tail > self.step + NCCL_STEPS as u64 {
            self.corrupt.set(Some(format!(
                "rank {} published step {tail} on a shared-memory connection where at most {} steps may be ahead of \
                 step {}",
                self.peer, NCCL_STEPS, self.step
            )));
            return None;
        }
        let (slot, size) = fifo_entry(h.fifo[Steps::index(step)].load(Ordering::Relaxed));
        if slot == INLINE_SLOT && self.ext.is_none() {
            // Published after its line: the acquire on `tail` makes the line visible.
            let r = self.inline_step(step);
            if r.is_none() {
                let first = self.corrupt.take();
                self.corrupt.set(Some(first.unwrap_or_else(|| {
                    format!(
                        "rank {} published inline step {} without its line on a shared-memory FIFO",
                        self.peer, step
                    )
                })));
            }
            return r;
        }
        if slot >= NCCL_STEPS || size > self.layout.step_size {
            self.corrupt.set(Some(format!(
                "rank {} wrote a step of {size} bytes into slot {slot} of a shared-memory FIFO of {} slots of {} bytes",
                self.peer, NCCL_STEPS, self.layout.step_size
            )));
            return None;
        }
        let ptr = slot_ptr(&self.seg, &self.layout, self.ext.as_ref(), slot);
        if self.ext.is_none() {
            prefetch(ptr);
        }
        Some((ptr, size))
    }

    fn ll_peek(&self) -> Option<(*mut u8, usize)> {
        let staging = self.staging.as_ref().expect("LL staging");
        let off = self.layout.slot_offset(Steps::index(self.step));
        let flag = (self.step + 1) as u32;
        let seg = &self.seg;
        let ready = |i: usize| {
            let (a, b) = (
                seg.word(off, 2 * i).load(Ordering::Relaxed),
                seg.word(off, 2 * i + 1).load(Ordering::Relaxed),
            );
            ((a >> 32) as u32 == flag && (b >> 32) as u32 == flag).then_some((a & 0xffff_ffff) | (b << 32))
        };
        let size = match self.ll_size.get() {
            Some(s) => s,
            None => {
                let s = ready(0)? as usize;
                if s > self.layout.step_size {
                    self.corrupt.set(Some(format!(
                        "rank {} sent an LL step of {s} bytes on a shared-memory FIFO of {}-byte steps",
                        self.peer, self.layout.step_size
                    )));
                    return None;
                }
                self.ll_size.set(Some(s));
                s
            }
        };
        let lines = size.div_ceil(8);
        let mut done = self.ll_done.get();
        while done < lines {
            let Some(v) = ready(1 + done) else { break };
            // SAFETY: staging holds `step_size` rounded up to 8 bytes; `done < lines`.
            unsafe { std::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), staging.ptr().add(done * 8), 8) };
            done += 1;
        }
        self.ll_done.set(done);
        (done == lines).then_some((staging.ptr(), size))
    }

    #[cfg(test)]
    fn start_at(&mut self, step: u64) {
        self.step = step;
    }
}

impl RecvConnector for ShmRecv {
    /// The next step if it has arrived: its slot (Simple) or the unpacked lines (LL).
    fn peek(&self) -> Option<(*mut u8, usize)> {
        let r = match self.layout.proto {
            Protocol::Simple => self.simple_peek(self.step),
            _ => self.ll_peek(),
        };
        self.waiting.set(r.is_none());
        r
    }

    /// Step `k` after the next one if it has arrived (Simple: its slot or
    /// inline line stays the consumer's until popped; LL: `k == 0` only,
    /// every step is unpacked into one staging buffer).
    fn peek_at(&self, k: usize) -> Option<(*mut u8, usize)> {
        if k == 0 {
            return self.peek();
        }
        if self.layout.proto != Protocol::Simple || k >= NCCL_STEPS {
            return None;
        }
        self.simple_peek(self.step + k as u64)
    }

    /// Beside a device slot: the header the sender wrote into the segment's
    /// header area for the slot of the step being consumed.
    fn hdr_of(&self, data: *mut u8) -> *const u8 {
        if self.ext.is_none() {
            return data;
        }
        // The slot `data` is in (`peek` or `peek_at` returned its start and
        // checked it: a corrupt one never reaches here), so a step held ahead
        // finds its own header.
        let base = self.ext.as_ref().map_or(0, |e| e.base as usize);
        let slot = (data as usize).wrapping_sub(base) / self.layout.stride;
        self.seg
            .at(OP_HDR_OFF + slot.min(NCCL_STEPS - 1) * crate::coll::desc::OP_HDR_BYTES)
    }

    fn fifo_mem(&self) -> Option<FifoMem> {
        if let Some(e) = &self.ext {
            return Some(FifoMem::Device { ordinal: e.ordinal });
        }
        Some(match &self.staging {
            Some(b) => b.fifo_mem(),
            None => self.seg.fifo_mem(),
        })
    }

    /// Returns the step's credit to the sender.
    fn pop(&mut self) {
        self.step += 1;
        self.ll_size.set(None);
        self.ll_done.set(0);
        self.seg.header().head.store(self.step, Ordering::Release);
    }

    /// Steps always land in the FIFO.
    fn expect(&mut self, _target: Option<(*mut u8, usize)>) {}

    fn wants_expect(&self) -> bool {
        false
    }

    fn passive(&self) -> bool {
        true
    }

    /// No network to drive: checks the sender's state and, while the consumer
    /// waits for data, the sending process.
    fn progress(&mut self) -> Result<bool, Error> {
        if self.closed {
            return Err(Error::Internal(format!(
                "receive connection from rank {} is closed",
                self.peer
            )));
        }
        if let Some(m) = self.corrupt.take() {
            return Err(Error::Remote(m));
        }
        let was_waiting = self.waiting.get();
        let mut waiting = was_waiting && self.peek().is_none();
        if waiting && spin_until(|| self.peek().is_some()) {
            waiting = false;
        }
        if let Some(m) = self.corrupt.take() {
            return Err(Error::Remote(m));
        }
        if was_waiting && !waiting {
            // The step the consumer waits for has arrived.
            return Ok(true);
        }
        if waiting {
            let word = self.seg.header().send_state.load(Ordering::Acquire);
            if state_code(word) != 0 && self.peek().is_none() {
                return Err(peer_closed_error(&self.shared, self.peer, word, "data"));
            }
        }
        if let Some(ev) = self.watch.check(waiting)
            && self.peek().is_none()
        {
            return Err(peer_event_error(&self.shared, &self.watch, ev, "data"));
        }
        Ok(false)
    }

    fn register_user(&mut self, _ptr: *const u8, _len: usize, _space: ferroccl_kernels::MemorySpace) {}

    fn release_user(&mut self) {}

    fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            self.seg
                .header()
                .recv_state
                .store(closing_word(&self.shared), Ordering::Release);
        }
    }
}

impl Drop for ShmRecv {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{ConnKey, pid_namespace};

    const STEP: usize = 4096;

    fn tpeer(rank: usize) -> TransportPeer {
        TransportPeer {
            rank,
            host_hash: 7,
            pid: std::process::id(),
            pid_ns: pid_namespace(),
            params: Default::default(),
            local_rank: rank,
            gpu: None,
        }
    }

    fn transport(rank: usize, proto: Protocol) -> ShmTransport {
        let pid = std::process::id();
        ShmTransport::new(rank, vec![pid, pid], proto, Duration::from_secs(10))
    }

    fn req(peer: usize, dir: Dir, step: usize) -> ConnRequest {
        ConnRequest {
            key: ConnKey {
                channel: 1,
                peer,
                conn: 0,
            },
            dir,
            step_size: step,
            net_dev: 0,
        }
    }

    /// Rank 0's send setup and rank 1's receive setup, with their connect information.
    fn setups(proto: Protocol, step: usize) -> ((PendingSend, Vec<u8>), (PendingRecv, Vec<u8>)) {
        let s = transport(0, proto).setup_send(&req(1, Dir::Send, step), &tpeer(0), &tpeer(1), "SHM/direct/direct");
        let r = transport(1, proto)
            .setup_recv(
                &req(0, Dir::Recv, step),
                &tpeer(1),
                &tpeer(0),
                Layout::new(proto, step).expect("layout"),
                None,
            )
            .expect("recv setup");
        (s, r)
    }

    /// A connected pair: rank 0 sends to rank 1, both in this process.
    fn pair(proto: Protocol, step: usize) -> (ShmSend, ShmRecv) {
        let ((mut ps, si), (mut pr, ri)) = setups(proto, step);
        assert!(
            pr.finish(&si).unwrap().is_none(),
            "receiver must wait for the sender to attach"
        );
        let s = ps.attach(&ri, None).expect("attach");
        let r = pr.finish(&si).unwrap().expect("receiver connected");
        (s, r)
    }

    fn fill(buf: *mut u8, n: usize, seed: u64) {
        for i in 0..n {
            // SAFETY: the slot holds at least `n` bytes.
            unsafe { *buf.add(i) = (seed as usize * 131 + i * 7) as u8 };
        }
    }

    fn check(buf: *const u8, n: usize, seed: u64) {
        for i in 0..n {
            // SAFETY: the step holds `n` bytes.
            let b = unsafe { *buf.add(i) };
            assert_eq!(b, (seed as usize * 131 + i * 7) as u8, "step {seed} byte {i}");
        }
    }

    /// Pushes `count` steps of varied sizes from `s` to `r`, keeping up to
    /// `NCCL_STEPS` in flight, and checks every byte and the flow control.
    fn stream(s: &mut ShmSend, r: &mut ShmRecv, first: u64, count: u64) {
        let step = s.step_size();
        let size = |k: u64| [1, 8, 13, step - 1, step, 64, 4000][k as usize % 7].min(step);
        let (mut sent, mut got) = (first, first);
        while got < first + count {
            while sent < first + count && s.can_push() {
                fill(s.next_slot(), size(sent), sent);
                s.push(size(sent));
                sent += 1;
            }
            assert!(sent - got <= NCCL_STEPS as u64);
            if sent - got == NCCL_STEPS as u64 {
                assert!(!s.can_push(), "a ninth step in flight");
            }
            let (p, n) = r.peek().expect("a pushed step is visible");
            assert_eq!(n, size(got));
            check(p, n, got);
            r.pop();
            got += 1;
            s.progress().unwrap();
            r.progress().unwrap();
        }
        assert!(r.peek().is_none());
    }

    #[test]
    fn simple_steps_round_trip_with_credits_and_hot_slots() {
        let (mut s, mut r) = pair(Protocol::Simple, STEP);
        stream(&mut s, &mut r, 0, 300);
        // One large step at a time cycles through a single (cache-hot) slot
        // (two: the first follows the steps before it); small steps take
        // credits back only once half the FIFO is in flight, so they cycle
        // through at most half the slots plus one.
        for (size, most) in [(STEP, 2), (100, NCCL_STEPS / 2 + 1), (STEP, 2)] {
            let mut slots = std::collections::BTreeSet::new();
            for k in 0..20 {
                assert!(s.can_push());
                slots.insert(s.next_slot() as usize);
                fill(s.next_slot(), size, k);
                s.push(size);
                let (p, n) = r.peek().unwrap();
                check(p, n, k);
                r.pop();
            }
            assert!(slots.len() <= most, "{size}-byte steps used slots {slots:?}");
        }
    }

    /// Steps filled ahead (`slot_at(k)`, as the executor's pending device
    /// steps do) and pushed later in order, inline ones among them, arrive
    /// intact, and the receiver sees them ahead too (`peek_at(k)`).
    #[test]
    fn steps_held_ahead_keep_their_slots() {
        let (mut s, mut r) = pair(Protocol::Simple, STEP);
        let mut seed = 0u64;
        for sizes in [[4000usize, 8, 4000], [8, 8, 4000], [4000, 4000, 8]] {
            for (k, &n) in sizes.iter().enumerate() {
                assert!(s.can_push_at(k));
                fill(s.slot_at(k), n, seed + k as u64);
            }
            for &n in &sizes {
                s.push(n);
            }
            for (k, &n) in sizes.iter().enumerate() {
                let (p, got) = r.peek_at(k).expect("pushed step visible ahead");
                assert_eq!(got, n);
                check(p, n, seed + k as u64);
            }
            assert!(r.peek_at(sizes.len()).is_none());
            for _ in &sizes {
                r.pop();
            }
            seed += 10;
        }
        assert!(!s.can_push_at(NCCL_STEPS));
    }

    fn free_slots(s: &ShmSend) -> usize {
        let mut free = s.free.get();
        std::iter::from_fn(|| free.take()).count()
    }

    #[test]
    fn small_simple_steps_arrive_inline_in_one_line() {
        let (mut s, mut r) = pair(Protocol::Simple, STEP);
        let inline = r.seg.at(INLINE_OFF) as usize..r.seg.at(INLINE_OFF + NCCL_STEPS * INLINE_WORDS * 8) as usize;
        for (k, size) in [1usize, 8, 40, INLINE_MAX, INLINE_MAX + 1, 4000, 8]
            .into_iter()
            .enumerate()
        {
            let k = k as u64;
            assert!(s.can_push());
            fill(s.next_slot(), size, k);
            s.push(size);
            let (p, n) = r.peek().expect("a pushed step is visible");
            assert_eq!(n, size);
            check(p, n, k);
            assert_eq!(
                inline.contains(&(p as usize)),
                size <= INLINE_MAX,
                "{size}-byte step read at {p:?}, inline lines at {inline:x?}"
            );
            r.pop();
        }
        // Inline steps take no slot: a full FIFO of them leaves every slot free.
        for k in 0..NCCL_STEPS as u64 {
            assert!(s.can_push());
            fill(s.next_slot(), 8, k);
            s.push(8);
        }
        assert!(!s.can_push(), "a ninth step in flight");
        assert_eq!(free_slots(&s), NCCL_STEPS);
        for k in 0..NCCL_STEPS as u64 {
            let (p, n) = r.peek().expect("step");
            check(p, n, k);
            r.pop();
        }
        s.progress().unwrap();
        assert!(s.can_push());
        assert_eq!(free_slots(&s), NCCL_STEPS);
    }

    #[test]
    fn ll_steps_round_trip_across_the_flag_wrap() {
        let (mut s, mut r) = pair(Protocol::Ll, STEP);
        stream(&mut s, &mut r, 0, 100);
        // Across 2^32 steps: the 32-bit flag wraps.
        let start = (1u64 << 32) - 20;
        s.start_at(start);
        r.start_at(start);
        stream(&mut s, &mut r, start, 40);
    }

    #[test]
    fn ll_clean_steps_rewrite_every_line_of_their_slot() {
        let (mut s, mut r) = pair(Protocol::Ll, STEP);
        let start = LL_CLEAN_MASK - 2;
        s.start_at(start);
        r.start_at(start);
        stream(&mut s, &mut r, start, 16);
        let lines = s.layout.stride / 16;
        for step in LL_CLEAN_MASK..LL_CLEAN_MASK + NCCL_STEPS as u64 {
            let off = s.layout.slot_offset(Steps::index(step));
            let want = (step + 1) as u32;
            for w in 0..2 * lines {
                // The slot was written again by a later step only if one ran in it.
                let later = step + NCCL_STEPS as u64 <= start + 15;
                let flag = (s.seg.word(off, w).load(Ordering::Relaxed) >> 32) as u32;
                if !later {
                    assert_eq!(flag, want, "step {step:#x} word {w}");
                }
            }
        }
    }

    #[test]
    fn segment_of_wrong_size_or_corrupt_header_is_rejected() {
        // Announced length differs from the layout.
        let ((mut ps, _), (_pr, ri)) = setups(Protocol::Simple, STEP);
        let mut info: RecvInfo = serde_json::from_slice(&ri).unwrap();
        info.len += 4096;
        let e = ps
            .attach(&serde_json::to_vec(&info).unwrap(), None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("announced a shared-memory segment of"), "{e}");
        // The file is shorter than announced.
        let ((mut ps, _), (pr, ri)) = setups(Protocol::Simple, STEP);
        // SAFETY: shrinking our own memfd; nothing is mapped beyond the new size by the sender yet.
        unsafe { libc::ftruncate(pr.fd.as_ref().unwrap().as_raw_fd(), 8192) };
        let e = ps.attach(&ri, None).err().unwrap().to_string();
        assert!(e.contains("is a file of 8192 bytes, expected"), "{e}");
        // Corrupt magic.
        let ((mut ps, _), (pr, ri)) = setups(Protocol::Simple, STEP);
        pr.seg.as_ref().unwrap().header().magic.store(0xdead, Ordering::Relaxed);
        let e = ps.attach(&ri, None).err().unwrap().to_string();
        assert!(e.contains("corrupt header: magic is 0xdead"), "{e}");
        // A descriptor that names another segment (nonce differs).
        let ((mut ps, _), (_pr, ri)) = setups(Protocol::Simple, STEP);
        let mut info: RecvInfo = serde_json::from_slice(&ri).unwrap();
        info.nonce ^= 1;
        let e = ps
            .attach(&serde_json::to_vec(&info).unwrap(), None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("corrupt header: nonce"), "{e}");
        // Steps of another size (NCCL_BUFFSIZE differs).
        let ((mut ps, _), _) = setups(Protocol::Simple, STEP);
        let (_, (_pr, ri)) = setups(Protocol::Simple, 2 * STEP);
        let e = ps.attach(&ri, None).err().unwrap().to_string();
        assert!(e.contains("steps of 8192 bytes where this rank expects 4096"), "{e}");
        // Garbage.
        let ((mut ps, _), _) = setups(Protocol::Simple, STEP);
        let e = ps.attach(b"\x00garbage", None).err().unwrap().to_string();
        assert!(e.contains("malformed"), "{e}");
    }

    #[test]
    fn corrupt_steps_and_counters_are_errors_not_reads() {
        let (s, mut r) = pair(Protocol::Simple, STEP);
        let h = s.seg.header();
        h.fifo[0].store((3u64 << 56) | (STEP as u64 + 1), Ordering::Relaxed);
        h.tail.store(1, Ordering::Release);
        assert!(r.peek().is_none());
        let e = r.progress().unwrap_err().to_string();
        assert!(e.contains("wrote a step of 4097 bytes into slot 3"), "{e}");
        h.fifo[0].store(9u64 << 56, Ordering::Relaxed);
        assert!(r.peek().is_none());
        assert!(r.progress().is_err());
        h.tail.store(100, Ordering::Release);
        assert!(r.peek().is_none());
        let e = r.progress().unwrap_err().to_string();
        assert!(e.contains("published step 100"), "{e}");
        // Credits for steps never sent.
        let (mut s, r) = pair(Protocol::Simple, STEP);
        for _ in 0..NCCL_STEPS {
            assert!(s.can_push());
            s.push(1);
        }
        r.seg.header().head.store(50, Ordering::Release);
        assert!(!s.can_push());
        let e = s.progress().unwrap_err().to_string();
        assert!(e.contains("returned credits up to step 50"), "{e}");
        // LL size beyond the step.
        let (s, mut r) = pair(Protocol::Ll, STEP);
        let off = s.layout.slot_offset(0);
        s.seg.word(off, 0).store((1 << 32) | 5000, Ordering::Relaxed);
        s.seg.word(off, 1).store(1 << 32, Ordering::Relaxed);
        assert!(r.peek().is_none());
        let e = r.progress().unwrap_err().to_string();
        assert!(e.contains("LL step of 5000 bytes"), "{e}");
    }

    #[test]
    fn a_closed_or_failed_peer_ends_the_wait_with_its_reason() {
        for proto in [Protocol::Simple, Protocol::Ll] {
            // The receiver goes away while the sender waits for credits.
            let (mut s, mut r) = pair(proto, STEP);
            for _ in 0..NCCL_STEPS {
                s.push(8);
            }
            assert!(!s.can_push());
            s.progress().unwrap();
            r.close();
            let e = s.progress().unwrap_err().to_string();
            assert!(e.contains("rank 1 closed its shared-memory connection"), "{e}");
            // The sender fails because rank 5 died; the waiting receiver learns why.
            let (mut s, mut r) = pair(proto, STEP);
            assert!(r.peek().is_none());
            r.progress().unwrap();
            s.shared.blame(Culprit {
                rank: 1,
                reason: Reason::Exited,
            });
            s.close();
            let e = r.progress().unwrap_err().to_string();
            assert!(e.contains("because rank 1 (pid") && e.contains("exited"), "{e}");
            // Data published before the close is still delivered.
            let (mut s, mut r) = pair(proto, STEP);
            fill(s.next_slot(), 10, 3);
            s.push(10);
            s.close();
            let (p, n) = r.peek().unwrap();
            check(p, n, 3);
            r.progress().unwrap();
        }
    }

    /// A child process to watch (`sleep`), killed and reaped on drop.
    struct Child(std::process::Child);

    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn peer_watch_sees_exited_and_stopped_processes() {
        let deadline = Instant::now() + Duration::from_secs(20);
        let wait_for = |w: &mut PeerWatch, want: fn(&PeerEvent) -> bool| loop {
            if let Some(ev) = w.check(true)
                && want(&ev)
            {
                return;
            }
            assert!(Instant::now() < deadline, "no event");
            std::thread::sleep(Duration::from_micros(200));
        };
        let mut c = Child(std::process::Command::new("sleep").arg("60").spawn().unwrap());
        let mut w = PeerWatch::new(3, c.0.id(), Duration::from_millis(40));
        assert!(!w.exited() && w.check(false).is_none());
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.0.id() as i32, libc::SIGSTOP) };
        wait_for(&mut w, |e| matches!(e, PeerEvent::Stopped('T' | 't')));
        // SAFETY: as above.
        unsafe { libc::kill(c.0.id() as i32, libc::SIGCONT) };
        c.0.kill().unwrap();
        c.0.wait().unwrap();
        assert!(w.exited());
        wait_for(&mut w, |e| matches!(e, PeerEvent::Exited));
        // Without a pidfd, /proc tells.
        w.pidfd = None;
        assert!(w.exited());
    }
}
