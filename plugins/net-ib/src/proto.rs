//! Sans-IO core of the IB plugin: the receiver-driven FIFO/CTS matching, request
//! accounting, data chunking across QPs, the listen handle and the connection
//! handshake. Nothing here calls verbs or sockets; [`crate::net`] drives it.
//!
//! The protocol follows NCCL 2.30.7's IB transport (reference §6.2) in shape,
//! not in bytes (only this plugin talks to itself):
//!
//! * The receiver's `irecv(n ≤ 8)` builds `n` [`FifoEntry`]s (address, rkey,
//!   size, tag, `idx = seq + 1`) and RDMA-writes them into slot `seq % 256` of the
//!   sender's registered FIFO. It also posts one zero-SGE receive per data QP.
//! * The sender's `isend` waits until the slot's entries carry `idx == seq + 1`,
//!   matches its tag to an unused entry, and once all `nreqs` sends of the slot
//!   are posted writes each payload split across the QPs ([`chunks`]), then (if
//!   needed) the sizes record, then one `RDMA_WRITE_WITH_IMM` per QP.
//! * Every message of a slot uses every QP, so the k-th immediate completion on
//!   any QP belongs to slot `k`: the receiver attributes completions by counting.
//! * Immediate data = the size for single receives below [`IMM_USE_RECORD`],
//!   otherwise [`IMM_USE_RECORD`] and the sizes are in the completion record.

use std::collections::VecDeque;

/// FIFO slots per comm (`NET_IB_MAX_REQUESTS` = 32 × 8 = 256).
pub const FIFO_SLOTS: usize = 256;
/// Most receive requests in flight on a recv comm (`NCCL_NET_MAX_REQUESTS`).
pub const MAX_REQUESTS: usize = 32;
/// Most buffers in one grouped receive (`NCCL_NET_IB_MAX_RECVS`).
pub const MAX_RECVS: usize = 8;
/// Chunks of a message on different QPs are aligned to this (NCCL: 128 B).
pub const CHUNK_ALIGN: usize = 128;
/// Immediate value meaning "read the sizes from the completion record".
pub const IMM_USE_RECORD: u32 = u32::MAX;
/// Handshake magic (also stored in the listen handle at offset 32).
pub const MAGIC: u64 = 0x4645_5252_4f49_4201; // "FERROIB\x01"
/// Handshake version; a peer with another version is refused.
pub const PROTO_VERSION: u32 = 1;

/// One CTS FIFO entry, written by the receiver into the sender's FIFO
/// (`struct ncclIbSendFifo` in NCCL). 48 bytes, `#[repr(C)]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FifoEntry {
    /// Receive buffer address.
    pub addr: u64,
    /// Posted (maximum) size in bytes.
    pub size: u64,
    /// rkey of the receive buffer's registration.
    pub rkey: u32,
    /// Number of entries in this slot (1 ..= 8).
    pub nreqs: u32,
    /// Tag of this buffer.
    pub tag: i32,
    /// Reserved, 0.
    pub pad: u32,
    /// `seq + 1`: tells the sender the entry is valid for sequence `seq`.
    pub idx: u64,
    /// Reserved, 0.
    pub reserved: u64,
}

/// Bytes of one slot of FIFO entries (8 entries).
pub const FIFO_SLOT_BYTES: usize = MAX_RECVS * std::mem::size_of::<FifoEntry>();

/// Splits `size` bytes into one contiguous chunk per QP, each a multiple of
/// [`CHUNK_ALIGN`] except the last non-empty one: `(offset, len)` per QP, some
/// possibly empty. The chunks tile `0..size` exactly.
pub fn chunks(size: usize, nqps: usize) -> Vec<(usize, usize)> {
    let nqps = nqps.max(1);
    let per = size.div_ceil(nqps).div_ceil(CHUNK_ALIGN) * CHUNK_ALIGN;
    (0..nqps)
        .map(|q| {
            let off = (q * per).min(size);
            let end = ((q + 1) * per).min(size);
            (off, end - off)
        })
        .collect()
}

/// Splits one chunk into pieces of at most `max_msg` bytes (the port's
/// `max_msg_sz`; rxe allows 8 MiB per work request). An empty chunk yields none.
pub fn pieces(off: usize, len: usize, max_msg: usize) -> impl Iterator<Item = (usize, usize)> {
    let max_msg = max_msg.max(1);
    (0..len.div_ceil(max_msg)).map(move |i| (off + i * max_msg, (len - i * max_msg).min(max_msg)))
}

/// Error of the sans-IO core; the I/O layer maps it to a `NetError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// The send is larger than the receive buffer it matched.
    #[error("message truncated: isend of {send} bytes with tag {tag} matched a receive buffer of {recv} bytes")]
    Truncated {
        /// Send size.
        send: u64,
        /// Posted receive size.
        recv: u64,
        /// Tag.
        tag: i32,
    },
    /// The peer wrote an impossible FIFO entry.
    #[error("corrupt CTS FIFO entry for sequence {seq}: {what}")]
    BadFifo {
        /// Sequence number.
        seq: u64,
        /// What was wrong.
        what: String,
    },
    /// A completion arrived that no request expects.
    #[error("unexpected completion: {0}")]
    Unexpected(String),
    /// A handshake message was malformed or from an incompatible peer.
    #[error("bad handshake from peer: {0}")]
    Handshake(String),
}

/// A send matched to a FIFO entry, waiting for the rest of its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchedSend {
    /// Request id the I/O layer gave the send.
    pub req: u64,
    /// Index of the entry in the slot.
    pub entry: usize,
    /// Local source address.
    pub addr: u64,
    /// Send size.
    pub size: u64,
    /// lkey of the source registration (0 when size 0).
    pub lkey: u32,
    /// Remote destination (from the entry).
    pub remote_addr: u64,
    /// Remote rkey (from the entry).
    pub rkey: u32,
}

/// Outcome of [`SendMatcher::try_match`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendMatch {
    /// The receiver has not posted this sequence yet, or no unused entry has
    /// this tag: retry later (`*request = NULL`).
    NotReady,
    /// Matched; more sends of this slot are still expected.
    Partial,
    /// Matched and the slot is complete: post these sends (slot `seq`) now,
    /// then call [`SendMatcher::slot_posted`] (or [`SendMatcher::unmatch_last`]
    /// if posting is not possible yet).
    Complete {
        /// Sequence (slot = `seq % FIFO_SLOTS`).
        seq: u64,
        /// All sends of the slot, by entry index.
        sends: Vec<MatchedSend>,
    },
}

/// Sender-side FIFO matching and request accounting.
#[derive(Debug, Default)]
pub struct SendMatcher {
    /// Next sequence to consume.
    seq: u64,
    /// Sends matched so far for `seq`.
    matched: Vec<MatchedSend>,
    /// Slots posted and not yet completed: (seq, request ids, QP completions left).
    inflight: VecDeque<(u64, Vec<u64>, usize)>,
}

impl SendMatcher {
    /// A matcher starting at sequence 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Next sequence the sender waits for.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Number of slots posted and not completed.
    pub fn inflight_slots(&self) -> usize {
        self.inflight.len()
    }

    /// Tries to match a send (`req`, `tag`, local `addr`/`size`/`lkey`) against
    /// `slot`, the current contents of FIFO slot `seq % FIFO_SLOTS` (read
    /// volatile by the caller).
    pub fn try_match(
        &mut self,
        slot: &[FifoEntry; MAX_RECVS],
        req: u64,
        tag: i32,
        addr: u64,
        size: u64,
        lkey: u32,
    ) -> Result<SendMatch, ProtoError> {
        let want = self.seq + 1;
        if slot[0].idx != want {
            return Ok(SendMatch::NotReady);
        }
        let nreqs = slot[0].nreqs as usize;
        if nreqs == 0 || nreqs > MAX_RECVS {
            return Err(ProtoError::BadFifo {
                seq: self.seq,
                what: format!("nreqs {nreqs} not in 1..=8"),
            });
        }
        if slot[..nreqs].iter().any(|e| e.idx != want) {
            // Entries of a slot are written in one RDMA write; wait until all landed.
            return Ok(SendMatch::NotReady);
        }
        let Some(entry) = (0..nreqs).find(|&i| slot[i].tag == tag && !self.matched.iter().any(|m| m.entry == i)) else {
            return Ok(SendMatch::NotReady);
        };
        let e = slot[entry];
        if size > e.size {
            return Err(ProtoError::Truncated {
                send: size,
                recv: e.size,
                tag,
            });
        }
        self.matched.push(MatchedSend {
            req,
            entry,
            addr,
            size,
            lkey,
            remote_addr: e.addr,
            rkey: e.rkey,
        });
        if self.matched.len() < nreqs {
            return Ok(SendMatch::Partial);
        }
        let mut sends = self.matched.clone();
        sends.sort_by_key(|m| m.entry);
        Ok(SendMatch::Complete { seq: self.seq, sends })
    }

    /// Takes back the last match (the slot could not be posted now; the caller
    /// returns `*request = NULL` and NCCL retries that send).
    pub fn unmatch_last(&mut self) {
        self.matched.pop();
    }

    /// The complete slot was posted with one signalled completion per QP
    /// (`nqps`): advance to the next sequence.
    pub fn slot_posted(&mut self, nqps: usize) {
        let reqs = self.matched.drain(..).map(|m| m.req).collect();
        self.inflight.push_back((self.seq, reqs, nqps));
        self.seq += 1;
    }

    /// A signalled send completion for `seq` arrived on one QP. Returns the
    /// request ids that are now complete (all QPs done for that slot).
    pub fn on_completion(&mut self, seq: u64) -> Result<Vec<u64>, ProtoError> {
        let Some(front) = self.inflight.front_mut() else {
            return Err(ProtoError::Unexpected(format!(
                "send completion for seq {seq} with nothing in flight"
            )));
        };
        if front.0 != seq {
            return Err(ProtoError::Unexpected(format!(
                "send completion for seq {seq}, expected {}",
                front.0
            )));
        }
        front.2 -= 1;
        if front.2 == 0 {
            let (_, reqs, _) = self.inflight.pop_front().expect("front exists");
            return Ok(reqs);
        }
        Ok(Vec::new())
    }
}

/// Receiver-side accounting: sequences, FIFO entries, and attribution of
/// immediate completions to requests.
#[derive(Debug)]
pub struct RecvTracker {
    nqps: usize,
    seq: u64,
    /// Immediate completions counted per QP (= next sequence each QP completes).
    per_qp: Vec<u64>,
    /// In flight: (seq, req id, n, imm of the first completion, QP completions left).
    inflight: VecDeque<(u64, u64, usize, Option<u32>, usize)>,
}

/// A receive that finished: which request, and how to get its sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvDone {
    /// Request id.
    pub req: u64,
    /// Sequence (the completion-record slot is `seq % FIFO_SLOTS`).
    pub seq: u64,
    /// Buffers in the request.
    pub n: usize,
    /// `Some(size)` when the immediate carried it (single receive), `None` when
    /// the sizes must be read from the completion record.
    pub imm_size: Option<u64>,
}

impl RecvTracker {
    /// A tracker for a connection with `nqps` data QPs.
    pub fn new(nqps: usize) -> Self {
        RecvTracker {
            nqps: nqps.max(1),
            seq: 0,
            per_qp: vec![0; nqps.max(1)],
            inflight: VecDeque::new(),
        }
    }

    /// Receive requests in flight.
    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }

    /// Whether another receive may be posted (fewer than [`MAX_REQUESTS`] in flight).
    pub fn can_post(&self) -> bool {
        self.inflight.len() < MAX_REQUESTS
    }

    /// Registers a receive of `bufs` = (addr, size, rkey, tag) as request `req`
    /// and returns its sequence and the FIFO entries to write into the sender's
    /// slot `seq % FIFO_SLOTS`. `None` when [`MAX_REQUESTS`] are in flight.
    pub fn post(&mut self, req: u64, bufs: &[(u64, u64, u32, i32)]) -> Option<(u64, Vec<FifoEntry>)> {
        if !self.can_post() || bufs.is_empty() || bufs.len() > MAX_RECVS {
            return None;
        }
        let seq = self.seq;
        self.seq += 1;
        let entries = bufs
            .iter()
            .map(|&(addr, size, rkey, tag)| FifoEntry {
                addr,
                size,
                rkey,
                nreqs: bufs.len() as u32,
                tag,
                pad: 0,
                idx: seq + 1,
                reserved: 0,
            })
            .collect();
        self.inflight.push_back((seq, req, bufs.len(), None, self.nqps));
        Some((seq, entries))
    }

    /// An immediate completion arrived on data QP `qp` with value `imm`.
    /// Returns the receive it finished, if that was its last QP.
    pub fn on_imm(&mut self, qp: usize, imm: u32) -> Result<Option<RecvDone>, ProtoError> {
        let Some(count) = self.per_qp.get_mut(qp) else {
            return Err(ProtoError::Unexpected(format!(
                "immediate completion on unknown QP index {qp}"
            )));
        };
        let seq = *count;
        *count += 1;
        let Some(pos) = self.inflight.iter().position(|s| s.0 == seq) else {
            return Err(ProtoError::Unexpected(format!(
                "immediate completion for seq {seq} on QP {qp}, not posted"
            )));
        };
        let slot = &mut self.inflight[pos];
        if slot.3.is_none() {
            slot.3 = Some(imm);
        } else if slot.3 != Some(imm) {
            return Err(ProtoError::Unexpected(format!(
                "QPs disagree on the immediate of seq {seq}: {:?} vs {imm}",
                slot.3
            )));
        }
        slot.4 -= 1;
        if slot.4 > 0 {
            return Ok(None);
        }
        let (seq, req, n, imm, _) = self.inflight.remove(pos).expect("position exists");
        let imm = imm.expect("set above");
        let imm_size = (n == 1 && imm != IMM_USE_RECORD).then_some(u64::from(imm));
        Ok(Some(RecvDone { req, seq, n, imm_size }))
    }
}

/// Immediate value the sender uses for a slot of `sizes`.
pub fn imm_for(sizes: &[u64]) -> u32 {
    match sizes {
        [s] if *s < u64::from(IMM_USE_RECORD) => *s as u32,
        _ => IMM_USE_RECORD,
    }
}

/// Whether the sender must write a completion record for a slot of `sizes`.
pub fn needs_record(sizes: &[u64]) -> bool {
    imm_for(sizes) == IMM_USE_RECORD
}

/// The 128-byte listen handle: side-channel address and magic, plus
/// connect-state scratch (NCCL keeps its connect state machine in the handle).
///
/// Layout: `[0..2]` address family (2 = IPv4, 10 = IPv6, native endian),
/// `[2..4]` port (big endian), `[4..20]` address bytes, `[32..40]` magic,
/// `[40..48]` connect stage, `[48..56]` connect-state pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenHandle {
    /// Side-channel address of the listener.
    pub addr: std::net::SocketAddr,
    /// Magic the connector must present.
    pub magic: u64,
}

/// Offset of the connect stage word in the handle.
pub const HANDLE_STAGE_OFF: usize = 40;
/// Offset of the connect state pointer in the handle.
pub const HANDLE_PTR_OFF: usize = 48;

impl ListenHandle {
    /// Writes the handle into `h` and zeroes the connect scratch.
    pub fn encode(&self, h: &mut [u8; 128]) {
        h.fill(0);
        match self.addr {
            std::net::SocketAddr::V4(a) => {
                h[0..2].copy_from_slice(&2u16.to_ne_bytes());
                h[4..8].copy_from_slice(&a.ip().octets());
            }
            std::net::SocketAddr::V6(a) => {
                h[0..2].copy_from_slice(&10u16.to_ne_bytes());
                h[4..20].copy_from_slice(&a.ip().octets());
            }
        }
        h[2..4].copy_from_slice(&self.addr.port().to_be_bytes());
        h[32..40].copy_from_slice(&self.magic.to_le_bytes());
    }

    /// Reads a handle written by [`ListenHandle::encode`].
    pub fn decode(h: &[u8; 128]) -> Result<Self, ProtoError> {
        let fam = u16::from_ne_bytes([h[0], h[1]]);
        let port = u16::from_be_bytes([h[2], h[3]]);
        let ip: std::net::IpAddr = match fam {
            2 => std::net::Ipv4Addr::new(h[4], h[5], h[6], h[7]).into(),
            10 => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&h[4..20]).expect("16 bytes")).into(),
            f => {
                return Err(ProtoError::Handshake(format!(
                    "handle address family {f}, expected 2 or 10"
                )));
            }
        };
        let magic = u64::from_le_bytes(h[32..40].try_into().expect("8 bytes"));
        if magic != MAGIC {
            return Err(ProtoError::Handshake(format!(
                "handle magic {magic:#x}, expected {MAGIC:#x}"
            )));
        }
        Ok(ListenHandle {
            addr: (ip, port).into(),
            magic,
        })
    }
}

/// What one side tells the other at connection time
/// (NCCL's `ncclIbConnectionMetadata`, for one device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnMeta {
    /// QP numbers of the data QPs, in order.
    pub qpns: Vec<u32>,
    /// Initial PSN of each QP (same order).
    pub psns: Vec<u32>,
    /// Port LID (InfiniBand).
    pub lid: u16,
    /// Port number.
    pub port: u8,
    /// Link layer (1 = InfiniBand, 2 = Ethernet/RoCE).
    pub link_layer: u8,
    /// Active MTU (`ibv_mtu` code, 1 = 256 … 5 = 4096).
    pub mtu: u8,
    /// GID index used locally.
    pub gid_index: u8,
    /// The GID.
    pub gid: [u8; 16],
    /// Sender: FIFO address; receiver: completion-records address.
    pub buf_addr: u64,
    /// rkey of `buf_addr`.
    pub buf_rkey: u32,
    /// Traffic class the side uses.
    pub tc: u8,
    /// Service level the side uses.
    pub sl: u8,
}

impl ConnMeta {
    /// Encodes as one length-prefixed frame: `u32 len`, magic, version, fields.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + 8 * self.qpns.len());
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&PROTO_VERSION.to_le_bytes());
        b.extend_from_slice(&(self.qpns.len() as u32).to_le_bytes());
        for (q, p) in self.qpns.iter().zip(&self.psns) {
            b.extend_from_slice(&q.to_le_bytes());
            b.extend_from_slice(&p.to_le_bytes());
        }
        b.extend_from_slice(&self.lid.to_le_bytes());
        b.extend_from_slice(&[self.port, self.link_layer, self.mtu, self.gid_index, self.tc, self.sl]);
        b.extend_from_slice(&self.gid);
        b.extend_from_slice(&self.buf_addr.to_le_bytes());
        b.extend_from_slice(&self.buf_rkey.to_le_bytes());
        let mut f = (b.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(&b);
        f
    }

    /// Decodes a frame body (without the length prefix), validating magic,
    /// version and field ranges.
    pub fn decode(b: &[u8]) -> Result<Self, ProtoError> {
        let bad = |w: String| ProtoError::Handshake(w);
        let mut r = Reader { b, pos: 0 };
        let magic = r.u64().ok_or_else(|| bad("short frame".into()))?;
        if magic != MAGIC {
            return Err(bad(format!(
                "magic {magic:#x}, expected {MAGIC:#x} (not a ferroccl IB peer?)"
            )));
        }
        let ver = r.u32().ok_or_else(|| bad("short frame".into()))?;
        if ver != PROTO_VERSION {
            return Err(bad(format!("protocol version {ver}, expected {PROTO_VERSION}")));
        }
        let nqps = r.u32().ok_or_else(|| bad("short frame".into()))? as usize;
        if nqps == 0 || nqps > 128 {
            return Err(bad(format!("{nqps} QPs, expected 1..=128")));
        }
        let (mut qpns, mut psns) = (Vec::new(), Vec::new());
        for _ in 0..nqps {
            qpns.push(r.u32().ok_or_else(|| bad("short QP list".into()))?);
            psns.push(r.u32().ok_or_else(|| bad("short QP list".into()))? & 0xff_ffff);
        }
        let lid = r.u16().ok_or_else(|| bad("short frame".into()))?;
        let f = r.take(6).ok_or_else(|| bad("short frame".into()))?;
        let (port, link_layer, mtu, gid_index, tc, sl) = (f[0], f[1], f[2], f[3], f[4], f[5]);
        if !(1..=5).contains(&mtu) {
            return Err(bad(format!("MTU code {mtu}, expected 1..=5")));
        }
        let gid: [u8; 16] = r
            .take(16)
            .ok_or_else(|| bad("short frame".into()))?
            .try_into()
            .expect("16 bytes");
        let buf_addr = r.u64().ok_or_else(|| bad("short frame".into()))?;
        let buf_rkey = r.u32().ok_or_else(|| bad("short frame".into()))?;
        if r.pos != b.len() {
            return Err(bad(format!("{} trailing bytes", b.len() - r.pos)));
        }
        Ok(ConnMeta {
            qpns,
            psns,
            lid,
            port,
            link_layer,
            mtu,
            gid_index,
            gid,
            buf_addr,
            buf_rkey,
            tc,
            sl,
        })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.pos..self.pos + n)?;
        self.pos += n;
        Some(s)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|s| u16::from_le_bytes(s.try_into().expect("2")))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|s| u32::from_le_bytes(s.try_into().expect("4")))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|s| u64::from_le_bytes(s.try_into().expect("8")))
    }
}

/// Largest handshake frame accepted (bytes).
pub const MAX_FRAME: usize = 4096;
/// The byte the connector sends once its QPs are in RTS.
pub const READY: u8 = 0xA5;

/// Stage of a connection handshake (both roles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Connector: send own metadata, then wait for the peer's.
    /// Acceptor: wait for the connector's metadata.
    AwaitPeerMeta,
    /// Connector: peer metadata received; the I/O layer brings QPs to RTS, then
    /// calls [`Handshake::queue_ready`]. Acceptor: QPs are created and in RTS,
    /// own metadata queued; wait for the ready byte.
    AwaitReady,
    /// Everything sent and received.
    Done,
}

/// Role of a [`Handshake`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `connect` side (becomes the send comm).
    Connector,
    /// `accept` side (becomes the recv comm).
    Acceptor,
}

/// Handshake event for the I/O layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The peer's metadata arrived.
    PeerMeta(ConnMeta),
    /// The connector signalled ready (acceptor only).
    Ready,
}

/// Byte-level handshake over the TCP side channel, independent of the socket:
/// feed received bytes with [`Handshake::received`], send what
/// [`Handshake::outgoing`] returns and confirm with [`Handshake::sent`].
#[derive(Debug)]
pub struct Handshake {
    role: Role,
    stage: Stage,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    ready_queued: bool,
}

impl Handshake {
    /// A handshake in `role`; the connector passes its metadata right away.
    pub fn new(role: Role, own: Option<&ConnMeta>) -> Self {
        let out = own.map(ConnMeta::encode).unwrap_or_default();
        Handshake {
            role,
            stage: Stage::AwaitPeerMeta,
            inbuf: Vec::new(),
            out,
            ready_queued: false,
        }
    }

    /// Current stage.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// Bytes waiting to be written.
    pub fn outgoing(&self) -> &[u8] {
        &self.out
    }

    /// `n` bytes of [`Handshake::outgoing`] were written.
    pub fn sent(&mut self, n: usize) {
        self.out.drain(..n.min(self.out.len()));
        if self.ready_queued && self.out.is_empty() {
            self.stage = Stage::Done;
        }
    }

    /// Acceptor: queue own metadata after the QPs are in RTS.
    pub fn queue_meta(&mut self, own: &ConnMeta) {
        self.out.extend_from_slice(&own.encode());
    }

    /// Connector: the QPs are in RTS; queue the ready byte.
    pub fn queue_ready(&mut self) {
        self.out.push(READY);
        self.ready_queued = true;
    }

    /// Whether the handshake is complete (and all output flushed).
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done && self.out.is_empty()
    }

    /// Feeds bytes from the socket; returns at most one event per call (call
    /// again with an empty slice to drain buffered input).
    pub fn received(&mut self, bytes: &[u8]) -> Result<Option<Event>, ProtoError> {
        self.inbuf.extend_from_slice(bytes);
        match self.stage {
            Stage::AwaitPeerMeta => {
                if self.inbuf.len() < 4 {
                    return Ok(None);
                }
                let len = u32::from_le_bytes(self.inbuf[..4].try_into().expect("4")) as usize;
                if len > MAX_FRAME {
                    return Err(ProtoError::Handshake(format!(
                        "frame of {len} bytes, at most {MAX_FRAME}"
                    )));
                }
                if self.inbuf.len() < 4 + len {
                    return Ok(None);
                }
                let meta = ConnMeta::decode(&self.inbuf[4..4 + len])?;
                self.inbuf.drain(..4 + len);
                self.stage = Stage::AwaitReady;
                Ok(Some(Event::PeerMeta(meta)))
            }
            Stage::AwaitReady if self.role == Role::Acceptor => {
                let Some(&b) = self.inbuf.first() else { return Ok(None) };
                if b != READY {
                    return Err(ProtoError::Handshake(format!("ready byte {b:#x}, expected {READY:#x}")));
                }
                self.inbuf.remove(0);
                self.stage = Stage::Done;
                Ok(Some(Event::Ready))
            }
            _ if !self.inbuf.is_empty() => Err(ProtoError::Handshake(format!(
                "{} unexpected bytes in stage {:?}",
                self.inbuf.len(),
                self.stage
            ))),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn meta(n: usize, base: u32) -> ConnMeta {
        ConnMeta {
            qpns: (0..n as u32).map(|i| base + i).collect(),
            psns: (0..n as u32).map(|i| (base * 7 + i) & 0xff_ffff).collect(),
            lid: 3,
            port: 1,
            link_layer: 2,
            mtu: 3,
            gid_index: 1,
            gid: [9; 16],
            buf_addr: 0xdead_beef_0000,
            buf_rkey: 0x1234,
            tc: 106,
            sl: 0,
        }
    }

    #[test]
    fn fifo_entry_layout() {
        assert_eq!(std::mem::size_of::<FifoEntry>(), 48);
        assert_eq!(std::mem::offset_of!(FifoEntry, idx), 32);
        assert_eq!(FIFO_SLOT_BYTES, 384);
    }

    #[test]
    fn handle_roundtrip_and_magic() {
        let h = ListenHandle {
            addr: "10.0.2.15:4242".parse().unwrap(),
            magic: MAGIC,
        };
        let mut b = [0xffu8; 128];
        h.encode(&mut b);
        assert_eq!(&b[40..56], &[0u8; 16], "connect scratch zeroed");
        assert_eq!(ListenHandle::decode(&b).unwrap(), h);
        b[32] ^= 1;
        assert!(ListenHandle::decode(&b).unwrap_err().to_string().contains("magic"));
        let h6 = ListenHandle {
            addr: "[fd00::1]:7".parse().unwrap(),
            magic: MAGIC,
        };
        h6.encode(&mut b);
        assert_eq!(ListenHandle::decode(&b).unwrap(), h6);
    }

    #[test]
    fn meta_rejects_garbage() {
        let f = meta(2, 100).encode();
        assert_eq!(ConnMeta::decode(&f[4..]).unwrap(), meta(2, 100));
        let mut bad = f[4..].to_vec();
        bad[0] ^= 0xff;
        assert!(ConnMeta::decode(&bad).is_err());
        assert!(ConnMeta::decode(&f[4..f.len() - 1]).is_err());
        let mut bad = f[4..].to_vec();
        bad[8] = 2; // version
        assert!(ConnMeta::decode(&bad).unwrap_err().to_string().contains("version"));
    }

    #[test]
    fn single_recv_flow() {
        let mut rt = RecvTracker::new(2);
        let mut sm = SendMatcher::new();
        let mut slot = [FifoEntry::default(); MAX_RECVS];
        // Send before the CTS arrives: not ready.
        assert_eq!(sm.try_match(&slot, 1, 5, 0x1000, 100, 7).unwrap(), SendMatch::NotReady);
        let (seq, ents) = rt.post(10, &[(0x9000, 4096, 0x77, 5)]).unwrap();
        assert_eq!(seq, 0);
        slot[..1].copy_from_slice(&ents);
        // Wrong tag waits.
        assert_eq!(sm.try_match(&slot, 1, 6, 0x1000, 100, 7).unwrap(), SendMatch::NotReady);
        let SendMatch::Complete { seq, sends } = sm.try_match(&slot, 1, 5, 0x1000, 100, 7).unwrap() else {
            panic!("complete expected")
        };
        assert_eq!((seq, sends[0].remote_addr, sends[0].rkey), (0, 0x9000, 0x77));
        sm.slot_posted(2);
        assert_eq!(sm.on_completion(0).unwrap(), Vec::<u64>::new());
        assert_eq!(sm.on_completion(0).unwrap(), vec![1]);
        assert!(sm.on_completion(0).is_err());
        assert_eq!(rt.on_imm(0, imm_for(&[100])).unwrap(), None);
        let d = rt.on_imm(1, imm_for(&[100])).unwrap().unwrap();
        assert_eq!(
            d,
            RecvDone {
                req: 10,
                seq: 0,
                n: 1,
                imm_size: Some(100)
            }
        );
        assert!(rt.on_imm(1, 0).is_err(), "nothing posted for seq 1");
    }

    #[test]
    fn truncation_is_an_error() {
        let mut rt = RecvTracker::new(1);
        let mut sm = SendMatcher::new();
        let mut slot = [FifoEntry::default(); MAX_RECVS];
        let (_, e) = rt.post(1, &[(0, 10, 0, 0)]).unwrap();
        slot[0] = e[0];
        let err = sm.try_match(&slot, 1, 0, 0, 11, 0).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
    }

    #[test]
    fn request_limit() {
        let mut rt = RecvTracker::new(1);
        for i in 0..MAX_REQUESTS as u64 {
            assert!(rt.post(i, &[(0, 0, 0, 0)]).is_some());
        }
        assert!(
            rt.post(99, &[(0, 0, 0, 0)]).is_none(),
            "33rd receive must be refused (NULL request)"
        );
        let done = rt.on_imm(0, 0).unwrap().unwrap();
        assert_eq!(done.req, 0);
        assert!(rt.post(99, &[(0, 0, 0, 0)]).is_some());
    }

    #[test]
    fn chunks_tile() {
        assert_eq!(chunks(0, 2), vec![(0, 0), (0, 0)]);
        assert_eq!(chunks(1000, 1), vec![(0, 1000)]);
        assert_eq!(chunks(1000, 4), vec![(0, 256), (256, 256), (512, 256), (768, 232)]);
        assert_eq!(chunks(100, 4), vec![(0, 100), (100, 0), (100, 0), (100, 0)]);
        let p: Vec<_> = pieces(0, 20, 8).collect();
        assert_eq!(p, vec![(0, 8), (8, 8), (16, 4)]);
        assert_eq!(pieces(5, 0, 8).count(), 0);
    }

    proptest! {
        #[test]
        fn chunks_cover_exactly(size in 0usize..10_000_000, nqps in 1usize..=128, max_msg in 1usize..9_000_000) {
            let c = chunks(size, nqps);
            prop_assert_eq!(c.len(), nqps);
            let mut next = 0;
            for (i, &(off, len)) in c.iter().enumerate() {
                prop_assert_eq!(off, next);
                if i + 1 < c.len() && c[i + 1].1 > 0 { prop_assert_eq!(len % CHUNK_ALIGN, 0); }
                let mut pn = off;
                for (po, pl) in pieces(off, len, max_msg) { prop_assert_eq!(po, pn); prop_assert!(pl <= max_msg && pl > 0); pn += pl; }
                prop_assert_eq!(pn, off + len);
                next = off + len;
            }
            prop_assert_eq!(next, size);
        }

        /// Grouped receives with arbitrary tags and sends arriving in arbitrary
        /// order: every send lands in the buffer with its tag, each slot is
        /// posted exactly once, and receives complete in order with the right n.
        #[test]
        fn grouped_matching(groups in prop::collection::vec(
            (prop::collection::vec(0i32..1000, 1..=MAX_RECVS), any::<u64>()), 1..20), nqps in 1usize..4) {
            let mut rt = RecvTracker::new(nqps);
            let mut sm = SendMatcher::new();
            let mut fifo = vec![[FifoEntry::default(); MAX_RECVS]; FIFO_SLOTS];
            let mut req = 0u64;
            for (gi, (tags, shuffle)) in groups.iter().enumerate() {
                // Make tags unique within a group (NCCL: distinct peers).
                let tags: Vec<i32> = tags.iter().enumerate().map(|(i, t)| t * 8 + i as i32).collect();
                let bufs: Vec<_> = tags.iter().enumerate().map(|(i, &t)| (0x1000 * (i as u64 + 1), 64, i as u32, t)).collect();
                let (seq, ents) = rt.post(1000 + gi as u64, &bufs).unwrap();
                prop_assert_eq!(seq, gi as u64);
                fifo[seq as usize % FIFO_SLOTS][..ents.len()].copy_from_slice(&ents);
                // Send order: a rotation of the tags chosen by `shuffle`.
                let rot = (*shuffle as usize) % tags.len();
                let order: Vec<i32> = tags[rot..].iter().chain(&tags[..rot]).copied().collect();
                let mut complete = None;
                for (k, &t) in order.iter().enumerate() {
                    req += 1;
                    let slot = &fifo[sm.seq() as usize % FIFO_SLOTS];
                    let m = sm.try_match(slot, req, t, 0, 64, 0).unwrap();
                    if k + 1 < order.len() { prop_assert_eq!(m, SendMatch::Partial); } else { complete = Some(m); }
                }
                let Some(SendMatch::Complete { seq: s, sends }) = complete else { panic!("slot must complete") };
                prop_assert_eq!(s, seq);
                for m in &sends {
                    prop_assert_eq!(tags[m.entry], order[(m.req - (req - order.len() as u64) - 1) as usize]);
                    prop_assert_eq!(m.remote_addr, 0x1000 * (m.entry as u64 + 1));
                }
                sm.slot_posted(nqps);
                let sizes = vec![64u64; tags.len()];
                let mut done = None;
                for q in 0..nqps {
                    done = rt.on_imm(q, imm_for(&sizes)).unwrap();
                }
                let d = done.unwrap();
                prop_assert_eq!(d.req, 1000 + gi as u64);
                prop_assert_eq!(d.n, tags.len());
                prop_assert_eq!(d.imm_size.is_some(), tags.len() == 1);
                let mut finished = vec![];
                for _ in 0..nqps { finished.extend(sm.on_completion(seq).unwrap()); }
                prop_assert_eq!(finished.len(), tags.len());
            }
        }

        #[test]
        fn handshake_any_chunking(cut_a in prop::collection::vec(1usize..40, 1..50), cut_b in prop::collection::vec(1usize..40, 1..50), nqps in 1usize..=8) {
            let ma = meta(nqps, 10);
            let mb = meta(nqps, 500);
            let mut c = Handshake::new(Role::Connector, Some(&ma));
            let mut a = Handshake::new(Role::Acceptor, None);
            let (mut ia, mut ib) = (0usize, 0usize);
            let mut got_c = None;
            let mut got_a = None;
            let mut ready = false;
            for _ in 0..10_000 {
                // connector -> acceptor
                let n = c.outgoing().len().min(cut_a[ia % cut_a.len()]); ia += 1;
                let bytes = c.outgoing()[..n].to_vec(); c.sent(n);
                let mut ev = a.received(&bytes).unwrap();
                while let Some(e) = ev {
                    match e { Event::PeerMeta(m) => { got_a = Some(m); a.queue_meta(&mb); } Event::Ready => ready = true }
                    ev = a.received(&[]).unwrap();
                }
                // acceptor -> connector
                let n = a.outgoing().len().min(cut_b[ib % cut_b.len()]); ib += 1;
                let bytes = a.outgoing()[..n].to_vec(); a.sent(n);
                if let Some(Event::PeerMeta(m)) = c.received(&bytes).unwrap() { got_c = Some(m); c.queue_ready(); }
                if c.is_done() && a.is_done() { break; }
            }
            prop_assert!(c.is_done() && a.is_done() && ready);
            prop_assert_eq!(got_a.unwrap(), ma);
            prop_assert_eq!(got_c.unwrap(), mb);
        }
    }
}
