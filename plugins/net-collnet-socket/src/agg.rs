//! The aggregation: one worker thread per collComm runs its collectives in posting
//! order. Rank 0 is the aggregator: every other rank sends its contribution, rank 0
//! reduces (or assembles) them in rank order and sends each rank its result. One
//! collective finishes on a rank before its next starts, so no two ranks ever wait
//! on each other's writes (no deadlock), and every wait is bounded by the socket
//! timeouts.
//!
//! | collective | rank r sends rank 0 | rank 0 sends rank r |
//! |---|---|---|
//! | iallreduce | its `count` elements | the reduced `count` elements |
//! | iallgather | its part of the window | the whole window |
//! | ireducescatter | its whole window | the reduced part r of the window |
//!
//! Failure: the first error on a rank (a peer closed, reset, stalled past the
//! timeout, or sent garbage) breaks the collComm: rank 0 sends every other rank an
//! abort naming the cause and shuts its sockets; a rank ≥ 1 shuts its socket so
//! rank 0 notices at once. The failed collective and every later one complete
//! with that error.

use std::net::Shutdown;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use ferroccl_kernels::{DataType, RedOp, Reducer};
use ferroccl_plugin_api::sdk::collnet::Window;
use ferroccl_plugin_api::sdk::{Buf, NetError, NetResult};

use crate::wire::{self, OpHeader, Peer};

/// Bytes received per step while reducing a contribution.
pub const CHUNK: usize = 256 << 10;

/// Completion slot shared by a request and the worker: `None` while pending.
pub type Done = Arc<Mutex<Option<NetResult<usize>>>>;

/// The collective kinds (wire values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// `iallreduce`.
    AllReduce = 1,
    /// `iallgather`.
    AllGather = 2,
    /// `ireducescatter`.
    ReduceScatter = 3,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "iallreduce",
            Kind::AllGather => "iallgather",
            Kind::ReduceScatter => "ireducescatter",
        }
    }
}

/// One posted collective with its buffers (valid until it completes: NCCL's contract).
#[derive(Debug)]
pub enum Op {
    /// `recv = reduce(send of every rank)`.
    AllReduce {
        /// This rank's input.
        send: Buf,
        /// The output (same length; may be `send`).
        recv: Buf,
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: RedOp,
    },
    /// The window of every rank's parts, in rank order, into `parts`.
    AllGather {
        /// This rank's bytes in the window.
        send: Buf,
        /// Where the window lands, in order.
        parts: Vec<Buf>,
        /// The window.
        w: Window,
    },
    /// This rank's part of the reduced window into `recv`.
    ReduceScatter {
        /// This rank's window, in order.
        parts: Vec<Buf>,
        /// This rank's part of the result.
        recv: Buf,
        /// The window.
        w: Window,
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: RedOp,
    },
}

impl Op {
    fn kind(&self) -> Kind {
        match self {
            Op::AllReduce { .. } => Kind::AllReduce,
            Op::AllGather { .. } => Kind::AllGather,
            Op::ReduceScatter { .. } => Kind::ReduceScatter,
        }
    }

    fn types(&self) -> (i32, i32) {
        match self {
            Op::AllReduce { dtype, op, .. } | Op::ReduceScatter { dtype, op, .. } => (dtype.to_nccl(), op_code(op)),
            Op::AllGather { .. } => (-1, -1),
        }
    }

    /// Bytes rank `r` contributes.
    fn contrib_len(&self, r: usize) -> usize {
        match self {
            Op::AllReduce { send, .. } => send.len,
            Op::AllGather { w, .. } => w.rank_part(r).1,
            Op::ReduceScatter { w, .. } => w.bytes,
        }
    }

    /// Bytes rank `r` receives.
    fn result_len(&self, r: usize) -> usize {
        match self {
            Op::AllReduce { recv, .. } => recv.len,
            Op::AllGather { w, .. } => w.bytes,
            Op::ReduceScatter { w, .. } => w.rank_part(r).1,
        }
    }
}

fn op_code(op: &RedOp) -> i32 {
    match op {
        RedOp::Sum => 0,
        RedOp::Prod => 1,
        RedOp::Max => 2,
        RedOp::Min => 3,
        RedOp::Avg => 4,
        RedOp::PreMulSum(_) => -2,
    }
}

/// A posted collective: its sequence number, the op, where to report.
#[derive(Debug)]
pub struct Job {
    /// Sequence number in the collComm (equal on every rank for the same collective).
    pub seq: u64,
    /// What to do.
    pub op: Op,
    /// Completion slot.
    pub done: Done,
}

/// Starts the worker of a collComm; returns the queue to post jobs on.
///
/// # Errors
/// `System` when the thread cannot be spawned.
pub fn spawn(
    rank: usize,
    nranks: usize,
    peers: Vec<Option<Peer>>,
) -> NetResult<(Sender<Job>, std::thread::JoinHandle<()>)> {
    let (tx, rx) = channel::<Job>();
    let mut w = Worker {
        rank,
        nranks,
        peers,
        broken: None,
        scratch: Vec::new(),
    };
    let h = std::thread::Builder::new()
        .name(format!("collnet-r{rank}"))
        .spawn(move || w.run(rx))
        .map_err(|e| NetError::System(format!("collnet worker thread: {e}")))?;
    Ok((tx, h))
}

struct Worker {
    rank: usize,
    nranks: usize,
    /// Rank 0: index r = rank r (index 0 empty). Other ranks: index 0 = rank 0.
    peers: Vec<Option<Peer>>,
    broken: Option<NetError>,
    scratch: Vec<u8>,
}

/// `buf` as a slice.
///
/// SAFETY (for every caller): the buffers of a job are valid and not touched by
/// anyone else until the job completes (NCCL's contract for posted collectives).
fn rd<'a>(b: &Buf) -> &'a [u8] {
    // SAFETY: see above.
    unsafe { b.as_slice() }
}

fn wr<'a>(b: &Buf) -> &'a mut [u8] {
    // SAFETY: see `rd`.
    unsafe { b.as_mut_slice() }
}

/// Copies `src` into the scatter list `parts` at logical offset `off`.
fn sg_put(parts: &[Buf], mut off: usize, mut src: &[u8]) {
    for p in parts {
        if src.is_empty() {
            return;
        }
        if off >= p.len {
            off -= p.len;
            continue;
        }
        let n = (p.len - off).min(src.len());
        wr(p)[off..off + n].copy_from_slice(&src[..n]);
        src = &src[n..];
        off = 0;
    }
}

/// Calls `f` on each contiguous piece of logical range `[off, off+len)` of `parts`.
fn sg_pieces(
    parts: &[Buf],
    mut off: usize,
    mut len: usize,
    mut f: impl FnMut(&mut [u8]) -> NetResult<()>,
) -> NetResult<()> {
    for p in parts {
        if len == 0 {
            break;
        }
        if off >= p.len {
            off -= p.len;
            continue;
        }
        let n = (p.len - off).min(len);
        f(&mut wr(p)[off..off + n])?;
        len -= n;
        off = 0;
    }
    Ok(())
}

impl Worker {
    fn run(&mut self, rx: Receiver<Job>) {
        while let Ok(job) = rx.recv() {
            let r = match &self.broken {
                Some(e) => Err(e.clone()),
                None => {
                    let what = format!("{} #{}", job.op.kind().name(), job.seq);
                    let r = if self.rank == 0 {
                        self.root(&job, &what)
                    } else {
                        self.leaf(&job, &what)
                    };
                    if let Err(e) = &r {
                        self.fail(e.clone(), job.seq);
                    }
                    r
                }
            };
            let mut d = job.done.lock().unwrap_or_else(|e| e.into_inner());
            *d = Some(r);
        }
    }

    /// Breaks the collComm with `e`: rank 0 tells the others why, every rank shuts its sockets.
    fn fail(&mut self, e: NetError, seq: u64) {
        ferroccl_plugin_api::net_warn!("COLLNET/Socket : rank {} of {}: {e}", self.rank, self.nranks);
        let reason = format!("rank {}: {e}", self.rank);
        let reason = &reason.as_bytes()[..reason.len().min(wire::MAX_REASON)];
        for p in self.peers.iter_mut().flatten() {
            if self.rank == 0 {
                let hdr = wire::encode_result(1, seq, reason.len() as u64);
                let _ = p.stream.set_write_timeout(Some(std::time::Duration::from_millis(500)));
                let _ = p.write_all(&hdr, "abort").and_then(|_| p.write_all(reason, "abort"));
            }
            let _ = p.stream.shutdown(Shutdown::Both);
        }
        self.broken = Some(e);
    }

    fn peer(&mut self, i: usize) -> NetResult<&mut Peer> {
        self.peers
            .get_mut(i)
            .and_then(Option::as_mut)
            .ok_or_else(|| NetError::Internal(format!("collnet: no connection to rank {i}")))
    }

    /// A rank ≥ 1: send the contribution, receive the result.
    fn leaf(&mut self, job: &Job, what: &str) -> NetResult<usize> {
        let op = &job.op;
        let (dtype, rop) = op.types();
        let rank = self.rank;
        let hdr = OpHeader {
            kind: op.kind() as u8,
            seq: job.seq,
            dtype,
            op: rop,
            nbytes: op.contrib_len(rank) as u64,
        };
        let p = self.peer(0)?;
        p.write_all(&hdr.encode(), what)?;
        match op {
            Op::AllReduce { send, .. } | Op::AllGather { send, .. } => p.write_all(rd(send), what)?,
            Op::ReduceScatter { parts, .. } => {
                for b in parts {
                    p.write_all(rd(b), what)?;
                }
            }
        }
        let mut rh = [0u8; wire::RES_HEADER];
        p.read_exact(&mut rh, what)?;
        let Some((status, seq, n)) = wire::decode_result(&rh) else {
            return Err(NetError::Remote(format!(
                "the aggregator, rank 0 ({}), sent garbage instead of the result of {what}: {:02x?}",
                p.addr,
                &rh[..8]
            )));
        };
        let want = op.result_len(rank);
        if status == 1 {
            let mut reason = vec![0u8; (n as usize).min(wire::MAX_REASON)];
            p.read_exact(&mut reason, what)?;
            return Err(NetError::Remote(format!(
                "the aggregator, rank 0 ({}), aborted {what}: {}",
                p.addr,
                String::from_utf8_lossy(&reason)
            )));
        }
        if status != 0 || seq != job.seq || n != want as u64 {
            return Err(NetError::Remote(format!(
                "the aggregator, rank 0 ({}), answered {what} with status {status}, #{seq}, {n} bytes; \
                 expected status 0, #{}, {want} bytes",
                p.addr, job.seq
            )));
        }
        match op {
            Op::AllReduce { recv, .. } | Op::ReduceScatter { recv, .. } => p.read_exact(wr(recv), what)?,
            Op::AllGather { parts, .. } => {
                for b in parts {
                    p.read_exact(wr(b), what)?;
                }
            }
        }
        Ok(want)
    }

    /// Reads rank `r`'s op header and checks it matches `job`.
    fn header(&mut self, r: usize, job: &Job, what: &str) -> NetResult<()> {
        let (dtype, rop) = job.op.types();
        let want = OpHeader {
            kind: job.op.kind() as u8,
            seq: job.seq,
            dtype,
            op: rop,
            nbytes: job.op.contrib_len(r) as u64,
        };
        let p = self.peer(r)?;
        let mut b = [0u8; wire::OP_HEADER];
        p.read_exact(&mut b, what)?;
        let Some(h) = OpHeader::decode(&b) else {
            return Err(NetError::Remote(format!(
                "rank {r} ({}) sent garbage instead of its header for {what}: {:02x?}",
                p.addr,
                &b[..8]
            )));
        };
        if h != want {
            return Err(NetError::Remote(format!(
                "rank {r} ({}) posted kind {} #{} (dtype {}, op {}, {} bytes) where rank 0 posted {what} \
                 (dtype {dtype}, op {rop}, {} bytes): every rank must post the same collectives in the same order",
                p.addr, h.kind, h.seq, h.dtype, h.op, h.nbytes, want.nbytes
            )));
        }
        Ok(())
    }

    /// Reads `len` bytes from rank `r` and reduces them into `acc` (`len` = `acc.len()`).
    fn reduce_from(&mut self, r: usize, acc: &mut [u8], dtype: DataType, op: &RedOp, what: &str) -> NetResult<()> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.resize(CHUNK.min(acc.len()).max(1), 0);
        let res = (|| {
            let p = self.peer(r)?;
            for a in acc.chunks_mut(CHUNK) {
                let s = &mut scratch[..a.len()];
                p.read_exact(s, what)?;
                Reducer
                    .reduce_inplace(a, s, dtype, op)
                    .map_err(|e| NetError::Internal(format!("collnet reduction of {what}: {e}")))?;
            }
            Ok(())
        })();
        self.scratch = scratch;
        res
    }

    /// Rank 0: gather and reduce every contribution, then send every rank its result.
    fn root(&mut self, job: &Job, what: &str) -> NetResult<usize> {
        let n = self.nranks;
        match &job.op {
            Op::AllReduce { send, recv, dtype, op } => {
                if send.ptr != recv.ptr && recv.len > 0 {
                    // SAFETY: both buffers hold `len` bytes (shim-checked); `copy` allows overlap.
                    unsafe { std::ptr::copy(send.ptr, recv.ptr, recv.len) };
                }
                for r in 1..n {
                    self.header(r, job, what)?;
                    self.reduce_from(r, wr(recv), *dtype, op, what)?;
                }
                for r in 1..n {
                    let p = self.peer(r)?;
                    p.write_all(&wire::encode_result(0, job.seq, recv.len as u64), what)?;
                    p.write_all(rd(recv), what)?;
                }
                Ok(recv.len)
            }
            Op::AllGather { send, parts, w } => {
                let (off, _) = w.rank_part(0);
                sg_put(parts, off, rd(send));
                for r in 1..n {
                    self.header(r, job, what)?;
                    let (off, len) = w.rank_part(r);
                    let p = self.peer(r)?;
                    sg_pieces(parts, off, len, |piece| p.read_exact(piece, what))?;
                }
                for r in 1..n {
                    let p = self.peer(r)?;
                    p.write_all(&wire::encode_result(0, job.seq, w.bytes as u64), what)?;
                    for b in parts {
                        p.write_all(rd(b), what)?;
                    }
                }
                Ok(w.bytes)
            }
            Op::ReduceScatter {
                parts,
                recv,
                w,
                dtype,
                op,
            } => {
                let mut acc = vec![0u8; w.bytes];
                let mut at = 0;
                for b in parts {
                    acc[at..at + b.len].copy_from_slice(rd(b));
                    at += b.len;
                }
                for r in 1..n {
                    self.header(r, job, what)?;
                    self.reduce_from(r, &mut acc, *dtype, op, what)?;
                }
                for r in 1..n {
                    let (off, len) = w.rank_part(r);
                    let p = self.peer(r)?;
                    p.write_all(&wire::encode_result(0, job.seq, len as u64), what)?;
                    p.write_all(&acc[off..off + len], what)?;
                }
                let (off, len) = w.rank_part(0);
                wr(recv)[..len].copy_from_slice(&acc[off..off + len]);
                Ok(len)
            }
        }
    }
}
