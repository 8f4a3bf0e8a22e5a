//! The socket plugin's wire protocol as a pure state machine (no sockets, no threads).
//!
//! # Connection
//! A connection is one **control stream** plus `nstreams` **data streams** (TCP
//! connections from the connecting side to the listen socket). Every stream starts
//! with a [`Hello`] of [`HELLO_LEN`] bytes: the magic (`NCCL_SOCKET_MAGIC`, default
//! [`DEFAULT_MAGIC`]), the socket type ([`SOCKET_TYPE_NET`], as in NCCL's
//! `ncclSocketTypeNetSocket`), our [`PROTO_VERSION`], a random per-connection id
//! (so concurrent connects on one listen socket each get their own streams), the
//! stream index (`nstreams` = control) and `nstreams`. The listener decides
//! `nstreams`, the helper thread count and the task size and ships them in the
//! [`HandleInfo`], so both ends cut messages identically.
//!
//! # Messages (sender-driven, receiver-side tag matching)
//! Each `isend` writes a [`MsgHeader`] of [`HDR_LEN`] bytes on the control stream:
//! size (`u64`), tag (`i32`), flags. With [`FLAG_CTRL_PAYLOAD`] the payload follows
//! the header on the control stream (messages ≤ `NCCL_SOCKET_INLINE` bytes, messages
//! smaller than one task, and all messages when there are no data streams). Otherwise the payload is cut into
//! tasks of `max(NCCL_SOCKET_MIN_TASKSIZE, ceil(size / nstreams))` bytes
//! ([`split`]); task *k* of the connection's life goes on data stream
//! `k mod nstreams`. Both ends advance that counter in message order, so every data
//! stream carries the tasks in the same order on both sides.
//!
//! The receiver reads a header only while some posted receive has an unfilled
//! buffer (TCP flow control holds the sender back otherwise) and matches it to the
//! **earliest posted receive with an unfilled buffer whose tag equals the
//! message's tag**; a single-buffer receive takes any tag (NCCL's socket plugin
//! ignores tags, and NCCL always passes matching ones). So receives match sends
//! in posting order, a grouped receive of `n` buffers takes the next `n` sends in
//! any tag order, and a sender that runs ahead into the next group's tags still
//! lands in the right receive. A header that fits no posted receive waits (like
//! NCCL's IB plugin, which returns a NULL request until the receiver's CTS names
//! the tag). We chose this over IB's receiver-driven clear-to-send because a
//! small message then costs one write and one read, not a round trip.
//!
//! A message larger than the buffer it matched is [`ProtoError::Truncated`]
//! (NCCL: `ncclInvalidUsage`, "message truncated"); the comm is unusable after it.
//! A buffer larger than the message receives the message and reports its true size.
//!
//! All integers on the wire are little-endian.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Default handshake magic, NCCL's `NCCL_SOCKET_MAGIC` default (`0x564ab9f2fc4b9d6c`).
pub const DEFAULT_MAGIC: u64 = 0x564a_b9f2_fc4b_9d6c;
/// Socket type sent in the handshake: NCCL's `ncclSocketTypeNetSocket` (3).
pub const SOCKET_TYPE_NET: u32 = 3;
/// Version of this wire protocol; a peer with another version is rejected.
pub const PROTO_VERSION: u32 = 1;
/// Size of a [`Hello`] on the wire, bytes.
pub const HELLO_LEN: usize = 32;
/// Size of a [`MsgHeader`] on the wire, bytes.
pub const HDR_LEN: usize = 16;
/// Most data streams per connection (NCCL's `MAX_SOCKETS` = 64).
pub const MAX_STREAMS: usize = 64;
/// Header flag: the payload follows the header on the control stream.
pub const FLAG_CTRL_PAYLOAD: u32 = 1;

/// Size of NCCL's opaque connection handle (`NCCL_NET_HANDLE_MAXSIZE`).
pub const HANDLE_LEN: usize = 128;
/// Offset of the connector's scratch area in the handle (marker u64 + token u64).
pub const HANDLE_SCRATCH_OFF: usize = 64;
/// Marker written at [`HANDLE_SCRATCH_OFF`] while a `connect` on this handle is in progress.
pub const SCRATCH_MARKER: u64 = 0x6665_7272_6f63_6f6e; // "ferrocon"

/// A protocol violation or misuse detected by the state machines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// The peer sent more bytes than the receive buffer it matched can hold.
    #[error(
        "message truncated: the peer sent {size} bytes with tag {tag}, the matching receive buffer holds {cap} bytes"
    )]
    Truncated {
        /// Bytes the sender sent.
        size: u64,
        /// Bytes the receive buffer holds.
        cap: usize,
        /// Tag of the message.
        tag: i32,
    },
    /// A header with unknown flags arrived (garbage or a foreign peer).
    #[error("bad message header from peer: flags {flags:#x} (expected 0 or {FLAG_CTRL_PAYLOAD})")]
    BadHeader {
        /// The flags found.
        flags: u32,
    },
    /// A handle that was not written by this plugin's `listen`.
    #[error("bad connection handle: {0}")]
    BadHandle(String),
    /// A handshake that does not come from a peer of this plugin.
    #[error("bad handshake: {0}")]
    BadHello(String),
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}
fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}
fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(b[off..off + 2].try_into().expect("2 bytes"))
}

/// What a listener puts in NCCL's 128-byte handle.
///
/// Layout: `[0]` address family (4/6), `[1]` [`PROTO_VERSION`], `[2..4]` port,
/// `[4..20]` IP (IPv4 in the first 4 bytes), `[20..24]` IPv6 scope id, `[32..40]`
/// magic, `[40..44]` data streams, `[44..48]` helper threads, `[48..56]` minimum
/// task size; `[64..80]` is the connector's scratch (see [`HANDLE_SCRATCH_OFF`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandleInfo {
    /// Address of the listen socket.
    pub addr: SocketAddr,
    /// Handshake magic the listener expects.
    pub magic: u64,
    /// Number of data streams per connection (0 ..= [`MAX_STREAMS`]).
    pub nstreams: u32,
    /// Helper threads per connection (≥ 1 when `nstreams > 0`).
    pub nthreads: u32,
    /// Minimum task size in bytes (`NCCL_SOCKET_MIN_TASKSIZE`, ≥ 1).
    pub min_task: u64,
}

impl HandleInfo {
    /// Writes the listener part of the handle (bytes 0..64) and clears the scratch.
    pub fn encode(&self, h: &mut [u8; HANDLE_LEN]) {
        h.fill(0);
        let (fam, ip, scope) = match self.addr {
            SocketAddr::V4(a) => {
                let mut ip = [0u8; 16];
                ip[..4].copy_from_slice(&a.ip().octets());
                (4u8, ip, 0u32)
            }
            SocketAddr::V6(a) => (6u8, a.ip().octets(), a.scope_id()),
        };
        h[0] = fam;
        h[1] = PROTO_VERSION as u8;
        h[2..4].copy_from_slice(&self.addr.port().to_le_bytes());
        h[4..20].copy_from_slice(&ip);
        h[20..24].copy_from_slice(&scope.to_le_bytes());
        h[32..40].copy_from_slice(&self.magic.to_le_bytes());
        h[40..44].copy_from_slice(&self.nstreams.to_le_bytes());
        h[44..48].copy_from_slice(&self.nthreads.to_le_bytes());
        h[48..56].copy_from_slice(&self.min_task.to_le_bytes());
    }

    /// Reads a handle written by [`HandleInfo::encode`].
    ///
    /// # Errors
    /// [`ProtoError::BadHandle`] for an unknown family or version, or out-of-range counts.
    pub fn decode(h: &[u8; HANDLE_LEN]) -> Result<Self, ProtoError> {
        if h[1] as u32 != PROTO_VERSION {
            return Err(ProtoError::BadHandle(format!(
                "protocol version {} (expected {PROTO_VERSION}); was it written by another plugin's listen?",
                h[1]
            )));
        }
        let port = u16_at(h, 2);
        let addr = match h[0] {
            4 => SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(h[4], h[5], h[6], h[7]), port)),
            6 => {
                let ip: [u8; 16] = h[4..20].try_into().expect("16 bytes");
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, u32_at(h, 20)))
            }
            f => {
                return Err(ProtoError::BadHandle(format!(
                    "address family byte {f} (expected 4 or 6)"
                )));
            }
        };
        let info = HandleInfo {
            addr,
            magic: u64_at(h, 32),
            nstreams: u32_at(h, 40),
            nthreads: u32_at(h, 44),
            min_task: u64_at(h, 48),
        };
        if info.nstreams as usize > MAX_STREAMS
            || (info.nstreams > 0 && (info.nthreads == 0 || info.nthreads > info.nstreams))
            || info.min_task == 0
        {
            return Err(ProtoError::BadHandle(format!(
                "{} data streams, {} threads, task size {} (expected ≤ {MAX_STREAMS} streams, 1 ..= streams threads, task ≥ 1)",
                info.nstreams, info.nthreads, info.min_task
            )));
        }
        Ok(info)
    }

    /// IP address of the listener (for logs).
    pub fn ip(&self) -> IpAddr {
        self.addr.ip()
    }
}

/// Reads the connector's scratch token from a handle, if `connect` left one.
pub fn scratch_token(h: &[u8; HANDLE_LEN]) -> Option<u64> {
    (u64_at(h, HANDLE_SCRATCH_OFF) == SCRATCH_MARKER).then(|| u64_at(h, HANDLE_SCRATCH_OFF + 8))
}

/// Stores (`Some`) or clears (`None`) the connector's scratch token in a handle.
pub fn set_scratch_token(h: &mut [u8; HANDLE_LEN], token: Option<u64>) {
    let (m, t) = token.map_or((0, 0), |t| (SCRATCH_MARKER, t));
    h[HANDLE_SCRATCH_OFF..HANDLE_SCRATCH_OFF + 8].copy_from_slice(&m.to_le_bytes());
    h[HANDLE_SCRATCH_OFF + 8..HANDLE_SCRATCH_OFF + 16].copy_from_slice(&t.to_le_bytes());
}

/// The first [`HELLO_LEN`] bytes on every stream of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Handshake magic.
    pub magic: u64,
    /// Socket type ([`SOCKET_TYPE_NET`]).
    pub sock_type: u32,
    /// Protocol version ([`PROTO_VERSION`]).
    pub version: u32,
    /// Random id shared by all streams of one connection.
    pub conn_id: u64,
    /// Stream index: `0 .. nstreams` data, `nstreams` control.
    pub index: u16,
    /// Data streams of this connection.
    pub nstreams: u16,
}

impl Hello {
    /// Wire form.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..8].copy_from_slice(&self.magic.to_le_bytes());
        b[8..12].copy_from_slice(&self.sock_type.to_le_bytes());
        b[12..16].copy_from_slice(&self.version.to_le_bytes());
        b[16..24].copy_from_slice(&self.conn_id.to_le_bytes());
        b[24..26].copy_from_slice(&self.index.to_le_bytes());
        b[26..28].copy_from_slice(&self.nstreams.to_le_bytes());
        b
    }

    /// Parses and validates a hello against the listener's `magic` and `nstreams`.
    ///
    /// # Errors
    /// [`ProtoError::BadHello`] naming the field that differs.
    pub fn decode(b: &[u8; HELLO_LEN], magic: u64, nstreams: u32) -> Result<Self, ProtoError> {
        let h = Hello {
            magic: u64_at(b, 0),
            sock_type: u32_at(b, 8),
            version: u32_at(b, 12),
            conn_id: u64_at(b, 16),
            index: u16_at(b, 24),
            nstreams: u16_at(b, 26),
        };
        if h.magic != magic {
            return Err(ProtoError::BadHello(format!(
                "magic {:#018x}, expected {magic:#018x} (a foreign connection, or NCCL_SOCKET_MAGIC differs)",
                h.magic
            )));
        }
        if h.sock_type != SOCKET_TYPE_NET {
            return Err(ProtoError::BadHello(format!(
                "socket type {}, expected {SOCKET_TYPE_NET} (NetSocket)",
                h.sock_type
            )));
        }
        if h.version != PROTO_VERSION {
            return Err(ProtoError::BadHello(format!(
                "protocol version {}, expected {PROTO_VERSION}",
                h.version
            )));
        }
        if h.nstreams as u32 != nstreams || h.index as u32 > nstreams {
            return Err(ProtoError::BadHello(format!(
                "stream {} of {} data streams, expected {nstreams} data streams",
                h.index, h.nstreams
            )));
        }
        Ok(h)
    }
}

/// The per-message header on the control stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgHeader {
    /// Message size in bytes.
    pub size: u64,
    /// Tag passed to `isend`.
    pub tag: i32,
    /// [`FLAG_CTRL_PAYLOAD`] or 0.
    pub flags: u32,
}

impl MsgHeader {
    /// Wire form.
    pub fn encode(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0..8].copy_from_slice(&self.size.to_le_bytes());
        b[8..12].copy_from_slice(&self.tag.to_le_bytes());
        b[12..16].copy_from_slice(&self.flags.to_le_bytes());
        b
    }

    /// Parses a header.
    ///
    /// # Errors
    /// [`ProtoError::BadHeader`] for unknown flags.
    pub fn decode(b: &[u8; HDR_LEN]) -> Result<Self, ProtoError> {
        let h = MsgHeader {
            size: u64_at(b, 0),
            tag: u32_at(b, 8) as i32,
            flags: u32_at(b, 12),
        };
        if h.flags & !FLAG_CTRL_PAYLOAD != 0 {
            return Err(ProtoError::BadHeader { flags: h.flags });
        }
        Ok(h)
    }
}

/// One piece of a message on a data stream: bytes `offset .. offset + len` of the
/// message go on data stream `stream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Data stream index.
    pub stream: usize,
    /// Offset in the message, bytes.
    pub offset: usize,
    /// Length, bytes (> 0).
    pub len: usize,
}

/// Task size for a message of `size` bytes over `nstreams` data streams:
/// `max(min_task, ceil(size / nstreams))` (NCCL's rule; `nstreams ≥ 1`).
pub fn task_size(size: usize, nstreams: usize, min_task: usize) -> usize {
    min_task.max(size.div_ceil(nstreams.max(1))).max(1)
}

/// Cuts a message of `size` bytes into chunks, assigning streams round-robin
/// starting at `*next_stream` (advanced past the last chunk). Both ends call this
/// in the same message order, so they agree on every chunk.
pub fn split(size: usize, nstreams: usize, min_task: usize, next_stream: &mut usize) -> Vec<Chunk> {
    let task = task_size(size, nstreams, min_task);
    let mut out = Vec::with_capacity(size.div_ceil(task));
    let mut offset = 0;
    while offset < size {
        let len = task.min(size - offset);
        out.push(Chunk {
            stream: *next_stream,
            offset,
            len,
        });
        *next_stream = (*next_stream + 1) % nstreams;
        offset += len;
    }
    out
}

/// Sending half of the protocol: turns each `isend` into a header and its chunks.
#[derive(Debug, Clone)]
pub struct Sender {
    nstreams: usize,
    min_task: usize,
    inline: usize,
    next_stream: usize,
}

/// What the I/O layer must do for one `isend`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendPlan {
    /// Header to write on the control stream.
    pub header: [u8; HDR_LEN],
    /// The payload follows the header on the control stream.
    pub payload_on_ctrl: bool,
    /// Otherwise: the chunks to write on the data streams (in this order per stream).
    pub chunks: Vec<Chunk>,
}

impl Sender {
    /// A sender over `nstreams` data streams with the listener's task size and
    /// this side's inline threshold (`NCCL_SOCKET_INLINE`, bytes).
    pub fn new(nstreams: usize, min_task: usize, inline: usize) -> Self {
        Sender {
            nstreams,
            min_task: min_task.max(1),
            inline,
            next_stream: 0,
        }
    }

    /// Plans the next message of `size` bytes with `tag`.
    pub fn plan(&mut self, size: usize, tag: i32) -> SendPlan {
        // One task would go on one data stream anyway: the control stream is as
        // good and needs no helper-thread hand-off.
        let on_ctrl = size <= self.inline || self.nstreams == 0 || size < self.min_task;
        let header = MsgHeader {
            size: size as u64,
            tag,
            flags: if on_ctrl { FLAG_CTRL_PAYLOAD } else { 0 },
        }
        .encode();
        let chunks = if on_ctrl {
            Vec::new()
        } else {
            split(size, self.nstreams, self.min_task, &mut self.next_stream)
        };
        SendPlan {
            header,
            payload_on_ctrl: on_ctrl,
            chunks,
        }
    }
}

/// Identifier of a posted receive in a [`Receiver`].
pub type RecvId = u64;

#[derive(Debug, Clone)]
struct Slot {
    cap: usize,
    tag: i32,
    size: Option<usize>,
}

#[derive(Debug, Clone)]
struct Group {
    id: RecvId,
    slots: Vec<Slot>,
    unmatched: usize,
    data_bytes: usize,
}

/// What the receiver wants from the control stream next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The next [`HDR_LEN`] header bytes.
    Header,
    /// `len` payload bytes, to be stored at `offset` of buffer `idx` of receive `req`.
    Payload {
        /// The receive.
        req: RecvId,
        /// Buffer index within the (grouped) receive.
        idx: usize,
        /// Offset in that buffer, bytes.
        offset: usize,
        /// Bytes still to come.
        len: usize,
    },
    /// Nothing until another receive is posted.
    Idle,
}

/// A header matched to a receive buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    /// The receive.
    pub req: RecvId,
    /// Buffer index within the receive.
    pub idx: usize,
    /// Message size, bytes.
    pub size: usize,
    /// Chunks to read from the data streams into that buffer (empty when the
    /// payload is on the control stream; then [`Receiver::need`] asks for it).
    pub chunks: Vec<Chunk>,
}

/// Receiving half of the protocol: posted receives, header matching, and what to
/// read next from the control stream.
#[derive(Debug, Clone)]
pub struct Receiver {
    nstreams: usize,
    min_task: usize,
    next_stream: usize,
    next_id: RecvId,
    groups: VecDeque<Group>,
    stashed: Option<MsgHeader>,
    payload: Option<(RecvId, usize, usize, usize)>,
}

impl Receiver {
    /// A receiver over `nstreams` data streams with the listener's task size.
    pub fn new(nstreams: usize, min_task: usize) -> Self {
        Receiver {
            nstreams,
            min_task: min_task.max(1),
            next_stream: 0,
            next_id: 0,
            groups: VecDeque::new(),
            stashed: None,
            payload: None,
        }
    }

    /// Posts a receive of `bufs.len()` buffers given as `(capacity bytes, tag)`.
    pub fn post(&mut self, bufs: &[(usize, i32)]) -> RecvId {
        let id = self.next_id;
        self.next_id += 1;
        let slots: Vec<Slot> = bufs.iter().map(|&(cap, tag)| Slot { cap, tag, size: None }).collect();
        self.groups.push_back(Group {
            id,
            unmatched: slots.len(),
            slots,
            data_bytes: 0,
        });
        id
    }

    /// Number of receives posted and not yet [`removed`](Receiver::remove).
    pub fn outstanding(&self) -> usize {
        self.groups.len()
    }

    /// What to read next from the control stream. Call [`Receiver::match_stashed`]
    /// first after posting: a header that fit no receive is kept until one does.
    pub fn need(&self) -> Need {
        if let Some((req, idx, offset, len)) = self.payload {
            return Need::Payload { req, idx, offset, len };
        }
        if self.stashed.is_some() || !self.groups.iter().any(|g| g.unmatched > 0) {
            return Need::Idle;
        }
        Need::Header
    }

    /// Consumes a header read from the control stream (only when [`Receiver::need`]
    /// said [`Need::Header`]). `Ok(None)` if no posted receive can take it yet.
    ///
    /// # Errors
    /// [`ProtoError::BadHeader`], [`ProtoError::Truncated`].
    pub fn on_header(&mut self, b: &[u8; HDR_LEN]) -> Result<Option<Matched>, ProtoError> {
        debug_assert!(self.stashed.is_none() && self.payload.is_none());
        self.stashed = Some(MsgHeader::decode(b)?);
        self.match_stashed()
    }

    /// Retries matching a header that fit no receive when it arrived.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`].
    pub fn match_stashed(&mut self) -> Result<Option<Matched>, ProtoError> {
        let Some(h) = self.stashed else { return Ok(None) };
        let found = self.groups.iter().enumerate().find_map(|(gi, g)| {
            if g.unmatched == 0 {
                return None;
            }
            let single = g.slots.len() == 1;
            g.slots
                .iter()
                .position(|s| s.size.is_none() && (single || s.tag == h.tag))
                .map(|si| (gi, si))
        });
        let Some((gi, si)) = found else { return Ok(None) };
        self.stashed = None;
        let g = &mut self.groups[gi];
        let slot = &mut g.slots[si];
        if h.size > slot.cap as u64 {
            return Err(ProtoError::Truncated {
                size: h.size,
                cap: slot.cap,
                tag: h.tag,
            });
        }
        let size = h.size as usize;
        slot.size = Some(size);
        g.unmatched -= 1;
        let chunks = if h.flags & FLAG_CTRL_PAYLOAD != 0 || self.nstreams == 0 {
            if size > 0 {
                self.payload = Some((g.id, si, 0, size));
            }
            Vec::new()
        } else {
            g.data_bytes += size;
            split(size, self.nstreams, self.min_task, &mut self.next_stream)
        };
        Ok(Some(Matched {
            req: g.id,
            idx: si,
            size,
            chunks,
        }))
    }

    /// Records `n` payload bytes stored as asked by [`Need::Payload`].
    pub fn on_payload(&mut self, n: usize) {
        if let Some((req, idx, offset, len)) = self.payload {
            debug_assert!(n <= len);
            self.payload = if n >= len {
                None
            } else {
                Some((req, idx, offset + n, len - n))
            };
        }
    }

    /// For a receive whose headers all arrived and whose control-stream payloads
    /// are all stored: the sizes received per buffer and the total bytes still
    /// carried by data streams (the I/O layer counts those). `None` otherwise.
    pub fn ctrl_complete(&self, req: RecvId) -> Option<(Vec<usize>, usize)> {
        let g = self.groups.iter().find(|g| g.id == req)?;
        if g.unmatched > 0 || self.payload.is_some_and(|p| p.0 == req) {
            return None;
        }
        Some((g.slots.iter().map(|s| s.size.unwrap_or(0)).collect(), g.data_bytes))
    }

    /// Forgets a completed receive.
    pub fn remove(&mut self, req: RecvId) {
        self.groups.retain(|g| g.id != req);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_roundtrip_v4_v6_and_scratch() {
        for addr in ["127.0.0.1:4242", "[fe80::1%3]:77"] {
            let info = HandleInfo {
                addr: addr.parse().unwrap(),
                magic: DEFAULT_MAGIC,
                nstreams: 4,
                nthreads: 2,
                min_task: 65536,
            };
            let mut h = [0xAAu8; HANDLE_LEN];
            info.encode(&mut h);
            assert_eq!(scratch_token(&h), None);
            set_scratch_token(&mut h, Some(99));
            assert_eq!(HandleInfo::decode(&h).unwrap(), info);
            assert_eq!(scratch_token(&h), Some(99));
            set_scratch_token(&mut h, None);
            assert_eq!(scratch_token(&h), None);
        }
        let zero = [0u8; HANDLE_LEN];
        assert!(matches!(HandleInfo::decode(&zero), Err(ProtoError::BadHandle(_))));
    }

    #[test]
    fn hello_validation() {
        let h = Hello {
            magic: 7,
            sock_type: SOCKET_TYPE_NET,
            version: PROTO_VERSION,
            conn_id: 5,
            index: 2,
            nstreams: 2,
        };
        assert_eq!(Hello::decode(&h.encode(), 7, 2).unwrap(), h);
        let e = Hello::decode(&h.encode(), 8, 2).unwrap_err().to_string();
        assert!(e.contains("magic"), "{e}");
        assert!(Hello::decode(&h.encode(), 7, 1).is_err());
        let bad = Hello { sock_type: 1, ..h };
        assert!(
            Hello::decode(&bad.encode(), 7, 2)
                .unwrap_err()
                .to_string()
                .contains("socket type")
        );
        assert!(Hello::decode(&[0x55; HELLO_LEN], 7, 2).is_err());
    }

    #[test]
    fn task_split_rule() {
        assert_eq!(task_size(1 << 20, 2, 65536), 1 << 19);
        assert_eq!(task_size(1000, 4, 65536), 65536);
        let mut next = 1;
        let c = split(200_000, 2, 65536, &mut next);
        assert_eq!(c.len(), 2);
        assert_eq!(
            c[0],
            Chunk {
                stream: 1,
                offset: 0,
                len: 100_000
            }
        );
        assert_eq!(
            c[1],
            Chunk {
                stream: 0,
                offset: 100_000,
                len: 100_000
            }
        );
        assert_eq!(next, 1);
        assert!(split(0, 3, 1, &mut next).is_empty());
    }

    #[test]
    fn truncation_is_an_error_and_bigger_buffer_reports_true_size() {
        let mut tx = Sender::new(0, 1, 128);
        let mut rx = Receiver::new(0, 1);
        let r = rx.post(&[(100, 0)]);
        let p = tx.plan(10, 0);
        let m = rx.on_header(&p.header).unwrap().unwrap();
        assert_eq!((m.req, m.idx, m.size), (r, 0, 10));
        assert_eq!(
            rx.need(),
            Need::Payload {
                req: r,
                idx: 0,
                offset: 0,
                len: 10
            }
        );
        rx.on_payload(4);
        rx.on_payload(6);
        assert_eq!(rx.ctrl_complete(r), Some((vec![10], 0)));
        rx.remove(r);
        assert_eq!(rx.need(), Need::Idle);
        rx.post(&[(5, 0)]);
        let p = tx.plan(6, 0);
        assert_eq!(
            rx.on_header(&p.header),
            Err(ProtoError::Truncated {
                size: 6,
                cap: 5,
                tag: 0
            })
        );
    }

    #[test]
    fn header_waits_for_a_receive_with_its_tag() {
        let mut tx = Sender::new(0, 1, 128);
        let mut rx = Receiver::new(0, 1);
        let g1 = rx.post(&[(8, 1), (8, 2)]);
        // The sender runs ahead: tag 1 twice before tag 2.
        let m = rx.on_header(&tx.plan(0, 1).header).unwrap().unwrap();
        assert_eq!((m.req, m.idx), (g1, 0));
        assert_eq!(rx.on_header(&tx.plan(0, 1).header).unwrap(), None);
        assert_eq!(rx.need(), Need::Idle);
        let g2 = rx.post(&[(8, 1), (8, 2)]);
        let m = rx.match_stashed().unwrap().unwrap();
        assert_eq!((m.req, m.idx), (g2, 0));
        let m = rx.on_header(&tx.plan(3, 2).header).unwrap().unwrap();
        assert_eq!((m.req, m.idx), (g1, 1));
        rx.on_payload(3);
        assert_eq!(rx.ctrl_complete(g1), Some((vec![0, 3], 0)));
        assert_eq!(rx.ctrl_complete(g2), None);
    }

    #[test]
    fn garbage_header_flags_rejected() {
        let mut rx = Receiver::new(0, 1);
        rx.post(&[(8, 0)]);
        let mut b = [0u8; HDR_LEN];
        b[12] = 0x80;
        assert_eq!(rx.on_header(&b), Err(ProtoError::BadHeader { flags: 0x80 }));
    }
}

#[cfg(test)]
mod proptests {
    //! Two state machines connected by in-memory streams, driven in random
    //! interleavings and fragmentations: delivery must be byte-exact.
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    struct Case {
        nstreams: usize,
        min_task: usize,
        inline: usize,
        /// Groups of messages: (size, extra capacity, tag); tags distinct per group.
        groups: Vec<Vec<(usize, usize)>>,
        /// Send order within each group (a permutation seed).
        perm_seeds: Vec<u64>,
        /// Scheduler choices and fragment sizes.
        steps: Vec<(u8, usize)>,
    }

    fn size_strategy() -> impl Strategy<Value = usize> {
        prop_oneof![
            Just(0usize),
            Just(1),
            2usize..40,
            40usize..600,
            Just(127),
            Just(128),
            Just(129)
        ]
    }

    fn case_strategy() -> impl Strategy<Value = Case> {
        (
            0usize..5,
            1usize..64,
            0usize..40,
            prop::collection::vec(
                prop::collection::vec((size_strategy(), prop_oneof![Just(0usize), 1usize..50]), 1..=8),
                1..12,
            ),
            prop::collection::vec(any::<u64>(), 12),
            prop::collection::vec((any::<u8>(), 1usize..300), 0..400),
        )
            .prop_map(|(nstreams, min_task, inline, groups, perm_seeds, steps)| Case {
                nstreams,
                min_task,
                inline,
                groups,
                perm_seeds,
                steps,
            })
    }

    fn pattern(g: usize, i: usize, k: usize) -> u8 {
        (g.wrapping_mul(31) ^ i.wrapping_mul(7) ^ k.wrapping_mul(13) ^ (k >> 8)) as u8
    }

    /// Runs the case; returns the received buffers and sizes per group.
    type Delivered = Vec<(Vec<Vec<u8>>, Vec<usize>)>;

    fn run(c: &Case) -> Result<Delivered, ProtoError> {
        let mut tx = Sender::new(c.nstreams, c.min_task, c.inline);
        let mut rx = Receiver::new(c.nstreams, c.min_task);
        // Sends in posting order: (group, index in group).
        let mut sends = Vec::new();
        for (g, msgs) in c.groups.iter().enumerate() {
            let mut order: Vec<usize> = (0..msgs.len()).collect();
            let mut s = c.perm_seeds[g % c.perm_seeds.len()];
            for i in (1..order.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                order.swap(i, (s >> 33) as usize % (i + 1));
            }
            sends.extend(order.into_iter().map(|i| (g, i)));
        }
        let mut ctrl: VecDeque<u8> = VecDeque::new();
        let mut data: Vec<VecDeque<u8>> = vec![VecDeque::new(); c.nstreams];
        // Receiver-side per-stream read tasks: (req, idx, offset, len).
        let mut tasks: Vec<VecDeque<(RecvId, usize, usize, usize)>> = vec![VecDeque::new(); c.nstreams];
        let mut bufs: Vec<Vec<Vec<u8>>> = Vec::new();
        let mut ids = Vec::new();
        let mut done: Vec<Option<Vec<usize>>> = vec![None; c.groups.len()];
        let mut data_done = vec![0usize; c.groups.len()];
        let mut hdr = Vec::new();
        let (mut next_send, mut next_post) = (0, 0);
        let mut steps = c.steps.iter().copied().chain(
            std::iter::repeat((0u8, 1000))
                .enumerate()
                .map(|(i, (_, n))| ((i % 4) as u8, n)),
        );
        let mut idle_rounds = 0;
        while done.iter().any(|d| d.is_none()) {
            let (choice, n) = steps.next().expect("infinite");
            let before = (
                next_send,
                next_post,
                ctrl.len(),
                data.iter().map(|d| d.len()).sum::<usize>(),
                hdr.len(),
                done.iter().filter(|d| d.is_some()).count(),
            );
            match choice % 4 {
                0 if next_post < c.groups.len() => {
                    let g = &c.groups[next_post];
                    let spec: Vec<(usize, i32)> = g
                        .iter()
                        .enumerate()
                        .map(|(i, &(s, x))| (s + x, i as i32 * 3 + 1))
                        .collect();
                    bufs.push(spec.iter().map(|&(cap, _)| vec![0u8; cap]).collect());
                    ids.push(rx.post(&spec));
                    next_post += 1;
                    if let Some(m) = rx.match_stashed()? {
                        dispatch(&m, &ids, &mut tasks);
                    }
                }
                1 if next_send < sends.len() => {
                    let (g, i) = sends[next_send];
                    next_send += 1;
                    let size = c.groups[g][i].0;
                    let p = tx.plan(size, i as i32 * 3 + 1);
                    ctrl.extend(p.header);
                    let msg: Vec<u8> = (0..size).map(|k| pattern(g, i, k)).collect();
                    if p.payload_on_ctrl {
                        ctrl.extend(&msg);
                    }
                    for ch in p.chunks {
                        data[ch.stream].extend(&msg[ch.offset..ch.offset + ch.len]);
                    }
                }
                2 => {
                    // Receiver reads up to n bytes of the control stream.
                    let mut budget = n;
                    while budget > 0 {
                        match rx.need() {
                            Need::Idle => break,
                            Need::Header => {
                                let Some(b) = ctrl.pop_front() else { break };
                                hdr.push(b);
                                budget -= 1;
                                if hdr.len() == HDR_LEN {
                                    let h: [u8; HDR_LEN] = hdr.as_slice().try_into().unwrap();
                                    hdr.clear();
                                    if let Some(m) = rx.on_header(&h)? {
                                        dispatch(&m, &ids, &mut tasks);
                                    }
                                }
                            }
                            Need::Payload { req, idx, offset, len } => {
                                let k = len.min(budget).min(ctrl.len());
                                if k == 0 {
                                    break;
                                }
                                let g = ids.iter().position(|&x| x == req).unwrap();
                                for (j, b) in ctrl.drain(..k).enumerate() {
                                    bufs[g][idx][offset + j] = b;
                                }
                                rx.on_payload(k);
                                budget -= k;
                            }
                        }
                    }
                }
                _ => {
                    // Data streams: each moves up to n bytes of its head task.
                    for s in 0..c.nstreams {
                        if let Some(t) = tasks[s].front_mut() {
                            let k = t.3.min(n).min(data[s].len());
                            let g = ids.iter().position(|&x| x == t.0).unwrap();
                            for (j, b) in data[s].drain(..k).enumerate() {
                                bufs[g][t.1][t.2 + j] = b;
                            }
                            t.2 += k;
                            t.3 -= k;
                            data_done[g] += k;
                            if t.3 == 0 {
                                tasks[s].pop_front();
                            }
                        }
                    }
                }
            }
            for (g, &id) in ids.iter().enumerate() {
                if done[g].is_none()
                    && let Some((sizes, data_bytes)) = rx.ctrl_complete(id)
                    && data_done[g] == data_bytes
                {
                    done[g] = Some(sizes);
                    rx.remove(id);
                }
            }
            let after = (
                next_send,
                next_post,
                ctrl.len(),
                data.iter().map(|d| d.len()).sum::<usize>(),
                hdr.len(),
                done.iter().filter(|d| d.is_some()).count(),
            );
            idle_rounds = if before == after { idle_rounds + 1 } else { 0 };
            assert!(idle_rounds < 10_000, "no progress: {c:?}");
        }
        Ok(bufs.into_iter().zip(done.into_iter().map(Option::unwrap)).collect())
    }

    fn dispatch(m: &Matched, ids: &[RecvId], tasks: &mut [VecDeque<(RecvId, usize, usize, usize)>]) {
        assert!(ids.contains(&m.req));
        for ch in &m.chunks {
            tasks[ch.stream].push_back((m.req, m.idx, ch.offset, ch.len));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn delivery_is_byte_exact(c in case_strategy()) {
            let out = run(&c).expect("no protocol error for well-formed traffic");
            for (g, (bufs, sizes)) in out.iter().enumerate() {
                prop_assert_eq!(sizes.len(), c.groups[g].len());
                for (i, &(size, extra)) in c.groups[g].iter().enumerate() {
                    prop_assert_eq!(sizes[i], size, "reported size of group {} buf {}", g, i);
                    let expect: Vec<u8> = (0..size).map(|k| pattern(g, i, k)).collect();
                    prop_assert_eq!(&bufs[i][..size], &expect[..]);
                    prop_assert!(bufs[i][size..size + extra].iter().all(|&b| b == 0), "bytes past the message untouched");
                }
            }
        }

        #[test]
        fn truncation_iff_message_exceeds_buffer(
            nstreams in 0usize..4, inline in 0usize..200, size in 0usize..100_000, cap in 0usize..100_000, tag in any::<i32>()
        ) {
            let mut tx = Sender::new(nstreams, 1024, inline);
            let mut rx = Receiver::new(nstreams, 1024);
            let id = rx.post(&[(cap, tag)]);
            let r = rx.on_header(&tx.plan(size, tag).header);
            if size > cap {
                prop_assert_eq!(r, Err(ProtoError::Truncated { size: size as u64, cap, tag }));
            } else {
                let m = r.unwrap().unwrap();
                prop_assert_eq!((m.req, m.size), (id, size));
                prop_assert_eq!(m.chunks.iter().map(|c| c.len).sum::<usize>() + if m.chunks.is_empty() { size } else { 0 }, size);
            }
        }
    }
}
