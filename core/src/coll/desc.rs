//! Operation descriptors: what each rank believes an operation is, carried in a
//! 32-byte header at the start of every operation on every connection, and
//! checked by the receiver before it uses any of the operation's data.
//!
//! NCCL has no such check (ranks that call mismatched collectives hang or
//! return wrong data); ferroccl makes every mismatch of collective, count,
//! datatype, reduction op or root an error naming both sides' calls. The
//! header rides in the operation's first step to each peer (a FIFO step whose
//! payload starts [`OP_HDR_BYTES`] in), or alone in a header-only step where
//! the operation sends nothing else to that peer, so it costs no extra message
//! on the ring collectives' hot path. What is and is not detected is listed in
//! the README ("Mismatched operations").

use ferroccl_kernels::{DataType, RedOp};

use super::{CollArgs, CollKind};
use crate::error::Error;

/// Bytes reserved at the start of an operation's first step to a peer (the
/// header uses all 32). Half a cache line: the payload of a small operation
/// (up to 32 bytes) shares the header's line, so its step is one cache line
/// to transfer over shared memory, not two; the payload stays 32-byte aligned
/// in the slot (the kernels take any alignment).
pub(crate) const OP_HDR_BYTES: usize = 32;

/// "FCOP" in little-endian: the first bytes of every operation header.
const MAGIC: u32 = 0x504f_4346;

/// Kind codes on the wire.
const K_ALLREDUCE: u8 = 1;
const K_ALLGATHER: u8 = 2;
const K_REDUCESCATTER: u8 = 3;
const K_BROADCAST: u8 = 4;
const K_REDUCE: u8 = 5;
const K_SENDRECV: u8 = 6;

/// One operation as a rank sees it: the data every rank taking part must agree on.
///
/// For collectives `seq` counts the communicator's collectives (every rank
/// issues them in the same order); for point-to-point it counts the operations
/// between this pair of ranks in this direction, and `count` is in bytes
/// (`dtype` and `op` are not compared: a send and a receive only need to agree
/// on the byte count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpDesc {
    /// Sequence number.
    pub seq: u64,
    /// Wire kind code.
    kind: u8,
    /// `ncclDataType_t` value (0xff for point-to-point).
    dtype: u8,
    /// `ncclRedOp_t` kind (0xff when the collective does not reduce; PreMulSum
    /// scalars are per rank and not compared).
    op: u8,
    /// Root of Broadcast/Reduce; for point-to-point the receiving rank.
    root: u32,
    /// Elements (bytes for point-to-point).
    count: u64,
}

impl OpDesc {
    /// The descriptor of collective or p2p operation `a` with sequence number
    /// `seq`, as the *sender* of its data puts it on the wire. For a `Recv`
    /// from `peer` this is what `peer`'s matching `Send` to `me` carries.
    pub(crate) fn of(a: &CollArgs, seq: u64, me: usize) -> OpDesc {
        let reduces = matches!(
            a.kind,
            CollKind::AllReduce | CollKind::ReduceScatter | CollKind::Reduce { .. }
        );
        let op = if reduces { op_code(&a.op) } else { 0xff };
        let dtype = a.dtype.to_nccl() as u8;
        let (kind, root) = match a.kind {
            CollKind::AllReduce => (K_ALLREDUCE, 0),
            CollKind::AllGather => (K_ALLGATHER, 0),
            CollKind::ReduceScatter => (K_REDUCESCATTER, 0),
            CollKind::Broadcast { root } => (K_BROADCAST, root as u32),
            CollKind::Reduce { root } => (K_REDUCE, root as u32),
            CollKind::Send { peer } => (K_SENDRECV, peer as u32),
            CollKind::Recv { .. } => (K_SENDRECV, me as u32),
        };
        if kind == K_SENDRECV {
            return OpDesc {
                seq,
                kind,
                dtype: 0xff,
                op: 0xff,
                root,
                count: (a.count * a.dtype.size()) as u64,
            };
        }
        OpDesc {
            seq,
            kind,
            dtype,
            op,
            root,
            count: a.count as u64,
        }
    }

    /// The header's bytes.
    fn bytes(&self) -> [u8; OP_HDR_BYTES] {
        let mut b = [0u8; OP_HDR_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = self.kind;
        b[5] = self.dtype;
        b[6] = self.op;
        b[8..12].copy_from_slice(&self.root.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.count.to_le_bytes());
        b
    }

    /// Writes the header into `out` (at least [`OP_HDR_BYTES`] bytes), built
    /// on the stack and stored whole (`out` is usually a FIFO slot in memory
    /// the peer reads).
    pub(crate) fn encode(&self, out: &mut [u8]) {
        out[..OP_HDR_BYTES].copy_from_slice(&self.bytes());
    }

    /// Reads a header; `None` when `b` does not start with one.
    fn decode(b: &[u8]) -> Option<OpDesc> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if b.len() < OP_HDR_BYTES || u32_at(0) != MAGIC {
            return None;
        }
        Some(OpDesc {
            kind: b[4],
            dtype: b[5],
            op: b[6],
            root: u32_at(8),
            seq: u64_at(16),
            count: u64_at(24),
        })
    }

    /// Checks the header `got` received from `peer` against this rank's own
    /// view of the operation. Errors: [`Error::InvalidUsage`] naming both calls
    /// (the ranks called different operations); [`Error::Remote`] when `got`
    /// is not a header at all.
    pub(crate) fn check(&self, got: &[u8], peer: usize, me: usize) -> Result<(), Error> {
        // The common case, one comparison of the bytes; decoded only to explain a mismatch.
        if got.len() >= OP_HDR_BYTES && got[..OP_HDR_BYTES] == self.bytes() {
            return Ok(());
        }
        let Some(theirs) = OpDesc::decode(got) else {
            return Err(Error::Remote(format!(
                "rank {peer} sent data where rank {me} expected the start of its {} \
                 (the ranks are not running the same operations)",
                self.describe()
            )));
        };
        if theirs == *self {
            return Ok(());
        }
        Err(Error::InvalidUsage(format!(
            "mismatched operations: rank {me} called {} but rank {peer} called {}",
            self.describe(),
            theirs.describe()
        )))
    }

    /// The call in words, e.g. `AllReduce #3 of 1048576 x float sum`.
    pub(crate) fn describe(&self) -> String {
        let dtype = DataType::from_nccl(i32::from(self.dtype))
            .map(|d| d.name().to_string())
            .unwrap_or_else(|_| format!("datatype {}", self.dtype));
        let op = match self.op {
            0 => "sum",
            1 => "prod",
            2 => "max",
            3 => "min",
            4 => "avg",
            5 => "premulsum",
            _ => "",
        };
        let seq = self.seq;
        match self.kind {
            K_ALLREDUCE => format!("AllReduce #{seq} of {} x {dtype} {op}", self.count),
            K_ALLGATHER => format!("AllGather #{seq} of {} x {dtype}", self.count),
            K_REDUCESCATTER => format!("ReduceScatter #{seq} of {} x {dtype} {op}", self.count),
            K_BROADCAST => format!("Broadcast #{seq} of {} x {dtype} from root {}", self.count, self.root),
            K_REDUCE => format!("Reduce #{seq} of {} x {dtype} {op} to root {}", self.count, self.root),
            K_SENDRECV => format!("Send/Recv #{seq} of {} bytes to rank {}", self.count, self.root),
            k => format!("operation kind {k} #{seq}"),
        }
    }
}

fn op_code(op: &RedOp) -> u8 {
    match op {
        RedOp::Sum => 0,
        RedOp::Prod => 1,
        RedOp::Max => 2,
        RedOp::Min => 3,
        RedOp::Avg => 4,
        RedOp::PreMulSum(_) => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(kind: CollKind, count: usize, dtype: DataType, op: RedOp) -> CollArgs {
        CollArgs {
            kind,
            send: std::ptr::null(),
            recv: std::ptr::null_mut(),
            count,
            dtype,
            op,
            bytes: (0, 0),
            mem: crate::coll::mem::OpMem::HOST,
        }
    }

    #[test]
    fn header_round_trips_and_names_both_calls() {
        let mine = OpDesc::of(&args(CollKind::AllReduce, 1 << 20, DataType::Float32, RedOp::Sum), 3, 0);
        let mut buf = [0u8; OP_HDR_BYTES];
        mine.encode(&mut buf);
        assert!(mine.check(&buf, 1, 0).is_ok());
        let theirs = OpDesc::of(&args(CollKind::AllReduce, 2 << 20, DataType::Float32, RedOp::Sum), 3, 1);
        theirs.encode(&mut buf);
        let e = mine.check(&buf, 1, 0).unwrap_err().to_string();
        assert!(
            e.contains("rank 0 called AllReduce #3 of 1048576 x float sum")
                && e.contains("rank 1 called AllReduce #3 of 2097152 x float sum"),
            "{e}"
        );
        let e = mine.check(&[7u8; OP_HDR_BYTES], 1, 0).unwrap_err();
        assert!(matches!(e, Error::Remote(_)), "{e}");
    }

    #[test]
    fn every_field_takes_part() {
        let base = args(CollKind::Reduce { root: 1 }, 10, DataType::Int32, RedOp::Max);
        let d = OpDesc::of(&base, 0, 0);
        let variants = [
            OpDesc::of(&base, 1, 0),
            OpDesc::of(&CollArgs { count: 11, ..base }, 0, 0),
            OpDesc::of(
                &CollArgs {
                    dtype: DataType::Uint32,
                    ..base
                },
                0,
                0,
            ),
            OpDesc::of(&CollArgs { op: RedOp::Min, ..base }, 0, 0),
            OpDesc::of(
                &CollArgs {
                    kind: CollKind::Reduce { root: 2 },
                    ..base
                },
                0,
                0,
            ),
            OpDesc::of(
                &CollArgs {
                    kind: CollKind::Broadcast { root: 1 },
                    ..base
                },
                0,
                0,
            ),
        ];
        for v in variants {
            assert_ne!(v, d, "{}", v.describe());
        }
        // A send of 40 bytes matches a receive of 10 x int32 by the peer.
        let send = OpDesc::of(&args(CollKind::Send { peer: 1 }, 40, DataType::Uint8, RedOp::Sum), 0, 0);
        let recv = OpDesc::of(&args(CollKind::Recv { peer: 0 }, 10, DataType::Int32, RedOp::Sum), 0, 1);
        assert_eq!(send, recv);
    }
}
