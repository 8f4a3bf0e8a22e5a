//! Deterministic test data and expected results for every collective, as
//! nccl-tests does it: every rank can generate every rank's input, so each rank
//! checks its own output locally against a sequential reference
//! ([`ferroccl_kernels::reference`]). Used by the perf tool's `-c 1` and by tests.
//!
//! [`TestOp`] is the one description of a collective the perf tool, the checker
//! and the tests share: its name, buffer shapes, in-place offsets, bus factor and
//! how to launch it ([`TestOp::launch`], [`TestOp::run_checked`]).
//!
//! Inputs are small integers (so sums are exact in every type) or, for `prod`, ones
//! and twos (so products stay exact in float16); integers are compared exactly,
//! floats within a per-type relative bound.

use ferroccl_kernels::reference::{self, Value};
use ferroccl_kernels::{DataType, DevRedOp, RedOp};

/// The operations the perf tool and the tests check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestOp {
    /// AllReduce of `count` elements.
    AllReduce,
    /// AllGather of `count` elements per rank.
    AllGather,
    /// ReduceScatter of `count` elements per rank.
    ReduceScatter,
    /// Broadcast of `count` elements from `root`.
    Broadcast {
        /// Root rank.
        root: usize,
    },
    /// Reduce of `count` elements to `root`.
    Reduce {
        /// Root rank.
        root: usize,
    },
    /// Every rank sends `count` elements to `rank+1` and receives from `rank-1`.
    SendRecv,
    /// AllToAll: block `j` (`count` elements) of every rank goes to rank `j`.
    AllToAll,
}

impl TestOp {
    /// Every operation's nccl-tests name, in nccl-tests' binary order
    /// (`all_reduce_perf`, `all_gather_perf`, …).
    pub const NAMES: [&'static str; 7] = [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "sendrecv",
        "alltoall",
    ];

    /// The operation named `name` (nccl-tests' names, ASCII case-insensitive, `-`
    /// for `_`, and the unseparated forms `allreduce`, `bcast`, …), with `root`
    /// for the rooted ones. Errors name what was expected.
    pub fn parse(name: &str, root: usize) -> Result<TestOp, String> {
        Ok(match name.to_ascii_lowercase().replace('-', "_").as_str() {
            "all_reduce" | "allreduce" => TestOp::AllReduce,
            "all_gather" | "allgather" => TestOp::AllGather,
            "reduce_scatter" | "reducescatter" => TestOp::ReduceScatter,
            "broadcast" | "bcast" => TestOp::Broadcast { root },
            "reduce" => TestOp::Reduce { root },
            "sendrecv" | "send_recv" => TestOp::SendRecv,
            "alltoall" | "all_to_all" => TestOp::AllToAll,
            _ => {
                return Err(format!(
                    "unknown operation {name:?} (expected one of {})",
                    Self::NAMES.join(", ")
                ));
            }
        })
    }

    /// nccl-tests' name (`all_reduce`, …; its binaries are `<name>_perf`).
    pub fn name(&self) -> &'static str {
        match self {
            TestOp::AllReduce => "all_reduce",
            TestOp::AllGather => "all_gather",
            TestOp::ReduceScatter => "reduce_scatter",
            TestOp::Broadcast { .. } => "broadcast",
            TestOp::Reduce { .. } => "reduce",
            TestOp::SendRecv => "sendrecv",
            TestOp::AllToAll => "alltoall",
        }
    }

    /// The root of a rooted operation (Broadcast, Reduce).
    pub fn root(&self) -> Option<usize> {
        match self {
            TestOp::Broadcast { root } | TestOp::Reduce { root } => Some(*root),
            _ => None,
        }
    }

    /// The tuned collective function (`None` for the send/receive patterns,
    /// which the tuning does not cover).
    pub fn func(&self) -> Option<crate::coll::ids::Func> {
        use crate::coll::ids::Func;
        match self {
            TestOp::AllReduce => Some(Func::AllReduce),
            TestOp::AllGather => Some(Func::AllGather),
            TestOp::ReduceScatter => Some(Func::ReduceScatter),
            TestOp::Broadcast { .. } => Some(Func::Broadcast),
            TestOp::Reduce { .. } => Some(Func::Reduce),
            TestOp::SendRecv | TestOp::AllToAll => None,
        }
    }

    /// nccl-tests' bus bandwidth factor for `nranks` (its `<coll>GetBw`):
    /// AllReduce `2(n-1)/n`, AllGather/ReduceScatter/AllToAll `(n-1)/n`, else 1.
    pub fn bus_factor(&self, nranks: usize) -> f64 {
        let n = nranks as f64;
        match self {
            TestOp::AllReduce => 2.0 * (n - 1.0) / n,
            TestOp::AllGather | TestOp::ReduceScatter | TestOp::AllToAll => (n - 1.0) / n,
            TestOp::Broadcast { .. } | TestOp::Reduce { .. } | TestOp::SendRecv => 1.0,
        }
    }

    /// Whether an in-place variant is run (nccl-tests runs one for every
    /// collective; AllToAll and SendRecv in place would overwrite data still
    /// to be sent — a receive from rank r-1 lands in the buffer being sent to
    /// r+1, seen as 128 wrong elements at 1 MiB over 3 ranks — so they have none here).
    pub fn has_in_place(&self) -> bool {
        !matches!(self, TestOp::AllToAll | TestOp::SendRecv)
    }

    /// nccl-tests' `getCollByteCount` for a size of `bytes` (elements of `elem_size`
    /// bytes): `(count, total)`, the per-rank parameter count passed to the
    /// operation (nccl-tests' `count` column) and the elements the size column
    /// stands for (`bytes / elem_size`, rounded down to a multiple of `nranks`
    /// where the buffer is split by rank).
    pub fn counts(&self, bytes: usize, elem_size: usize, nranks: usize) -> (usize, usize) {
        let total = bytes / elem_size;
        match self {
            TestOp::AllGather | TestOp::ReduceScatter | TestOp::AllToAll => (total / nranks, total / nranks * nranks),
            _ => (total, total),
        }
    }

    /// In-place element offsets of rank `rank` (nccl-tests' `sendInplaceOffset` and
    /// `recvInplaceOffset` times the rank): where the operation reads its input and
    /// writes its output inside the one receive buffer.
    pub fn in_place_offsets(&self, count: usize, rank: usize) -> (usize, usize) {
        match self {
            TestOp::AllGather => (rank * count, 0),
            TestOp::ReduceScatter => (0, rank * count),
            _ => (0, 0),
        }
    }

    /// Enqueues this operation on `stream`: `count` is the per-rank parameter count,
    /// `op` the reduction (ignored by the non-reducing ones); SendRecv sends to
    /// `rank+1` and receives from `rank-1`, AllToAll sends block `j` to rank `j`,
    /// each as one group.
    ///
    /// # Safety
    /// `send` must be readable for the send buffer and `recv` writable for the
    /// receive buffer of [`buffer_elems`](Self::buffer_elems)`(count, nranks)`
    /// elements of `dtype` (in place: both inside one receive buffer at
    /// [`in_place_offsets`](Self::in_place_offsets)), untouched until `stream` is
    /// synchronized.
    #[allow(clippy::too_many_arguments)] // NCCL's collective signature plus the operation
    pub unsafe fn launch(
        &self,
        comm: &crate::comm::Comm,
        send: *const u8,
        recv: *mut u8,
        count: usize,
        dtype: DataType,
        op: RedOp,
        stream: &crate::stream::Stream,
    ) -> crate::error::Result<()> {
        let (n, r, es) = (comm.nranks(), comm.rank(), dtype.size());
        let (sp, rp, s) = (send, recv, stream);
        // SAFETY: the caller guarantees the buffers (see above).
        unsafe {
            match *self {
                TestOp::AllReduce => comm.all_reduce(sp, rp, count, dtype, op, s),
                TestOp::AllGather => comm.all_gather(sp, rp, count, dtype, s),
                TestOp::ReduceScatter => comm.reduce_scatter(sp, rp, count, dtype, op, s),
                TestOp::Broadcast { root } => comm.broadcast(sp, rp, count, dtype, root, s),
                TestOp::Reduce { root } => comm.reduce(sp, rp, count, dtype, op, root, s),
                TestOp::SendRecv => {
                    crate::group::group_start();
                    let a = comm.send(sp, count, dtype, (r + 1) % n, s);
                    let b = comm.recv(rp, count, dtype, (r + n - 1) % n, s);
                    let g = crate::group::group_end();
                    a.and(b).and(g)
                }
                TestOp::AllToAll => {
                    crate::group::group_start();
                    let mut res = Ok(());
                    for p in 0..n {
                        let a = comm.send(sp.wrapping_add(p * count * es), count, dtype, p, s);
                        let b = comm.recv(rp.wrapping_add(p * count * es), count, dtype, p, s);
                        res = res.and(a).and(b);
                    }
                    let g = crate::group::group_end();
                    res.and(g)
                }
            }
        }
    }

    /// Runs this operation once on fresh buffers with checked data (rank `rank`'s
    /// input of [`fill`] with `seed`, receive buffer poisoned with `0xEE`) and
    /// returns `#wrong` for this rank (0 where the output is unspecified), or the
    /// operation's error. What the tests and a one-shot check use.
    pub fn run_checked(
        &self,
        comm: &crate::comm::Comm,
        dtype: DataType,
        op: RedOp,
        count: usize,
        in_place: bool,
        seed: u64,
    ) -> crate::error::Result<usize> {
        let (n, r, es) = (comm.nranks(), comm.rank(), dtype.size());
        let in_place = in_place && self.has_in_place();
        let (se, re) = self.buffer_elems(count, n);
        let mut sendbuf = vec![0u8; se * es];
        fill(&mut sendbuf, dtype, &op, r, seed);
        let mut recvbuf = vec![0xEEu8; re.max(se) * es];
        let (soff, roff) = self.in_place_offsets(count, r);
        let (sp, rp): (*const u8, *mut u8) = if in_place {
            recvbuf[soff * es..soff * es + sendbuf.len()].copy_from_slice(&sendbuf);
            let p = recvbuf.as_mut_ptr();
            (p.wrapping_add(soff * es), p.wrapping_add(roff * es))
        } else {
            (sendbuf.as_ptr(), recvbuf.as_mut_ptr())
        };
        let stream = crate::stream::Stream::new();
        // SAFETY: both buffers are sized by `buffer_elems` and live past the
        // synchronize below; nothing touches them meanwhile.
        unsafe { self.launch(comm, sp, rp, count, dtype, op, &stream) }?;
        stream.synchronize()?;
        let got = if in_place {
            &recvbuf[roff * es..(roff + re) * es]
        } else {
            &recvbuf[..re * es]
        };
        Ok(match expected(*self, dtype, &op, n, r, count, seed) {
            Some(want) => count_wrong(dtype, got, &want),
            None => 0,
        })
    }

    /// Elements in the send and receive buffers of one rank.
    pub fn buffer_elems(&self, count: usize, nranks: usize) -> (usize, usize) {
        match self {
            TestOp::AllReduce | TestOp::Broadcast { .. } | TestOp::Reduce { .. } | TestOp::SendRecv => (count, count),
            TestOp::AllGather => (count, count * nranks),
            TestOp::ReduceScatter => (count * nranks, count),
            TestOp::AllToAll => (count * nranks, count * nranks),
        }
    }

    /// Whether the operation applies a reduction (so the redop column is meaningful).
    pub fn reduces(&self) -> bool {
        matches!(self, TestOp::AllReduce | TestOp::ReduceScatter | TestOp::Reduce { .. })
    }
}

/// Value of input element `i` of `rank` (see the module docs).
pub fn input_value(dtype: DataType, op: &RedOp, rank: usize, i: usize, seed: u64) -> Value {
    let h = (rank as u64)
        .wrapping_mul(7)
        .wrapping_add((i as u64).wrapping_mul(13))
        .wrapping_add(seed.wrapping_mul(31));
    if matches!(op, RedOp::Prod) {
        let v = 1 + (h % 2);
        return if dtype.is_float() {
            Value::F(v as f64)
        } else {
            Value::U(v)
        };
    }
    let v = (h % 9) as i64 - 4;
    if dtype.is_float() {
        Value::F(v as f64)
    } else if dtype.is_signed_int() {
        Value::I(v)
    } else {
        Value::U(h % 9)
    }
}

/// Fills `buf` (a whole send buffer) with rank `rank`'s input.
pub fn fill(buf: &mut [u8], dtype: DataType, op: &RedOp, rank: usize, seed: u64) {
    for i in 0..buf.len() / dtype.size() {
        reference::set(buf, dtype, i, input_value(dtype, op, rank, i, seed));
    }
}

/// Writes rank `rank`'s input elements `from .. from + out.len()/size` into `out`.
fn input_range(out: &mut [u8], dtype: DataType, op: &RedOp, rank: usize, from: usize, seed: u64) {
    for i in 0..out.len() / dtype.size() {
        reference::set(out, dtype, i, input_value(dtype, op, rank, from + i, seed));
    }
}

/// Elements generated per rank at a time while reducing, so checking a large
/// buffer needs memory for a few blocks, not for every rank's whole input.
const CHECK_BLOCK: usize = 16 << 10;

/// The expected receive buffer of `rank`, or `None` where the operation leaves it
/// unspecified (Reduce on a non-root rank).
pub fn expected(
    top: TestOp,
    dtype: DataType,
    op: &RedOp,
    nranks: usize,
    rank: usize,
    count: usize,
    seed: u64,
) -> Option<Vec<u8>> {
    let es = dtype.size();
    let (_, re) = top.buffer_elems(count, nranks);
    let mut out = vec![0u8; re * es];
    let red = if top.reduces() {
        DevRedOp::new(dtype, *op, nranks as u32).ok()
    } else {
        None
    };
    // Reduction of every rank's elements `from .. from + count` into `out`.
    let reduce_block = |out: &mut [u8], from: usize| {
        let red = red.as_ref().expect("reducing op");
        let mut parts: Vec<Vec<u8>> = vec![Vec::new(); nranks];
        let mut done = 0;
        while done < count {
            let len = CHECK_BLOCK.min(count - done);
            for (r, part) in parts.iter_mut().enumerate() {
                part.resize(len * es, 0);
                input_range(part, dtype, op, r, from + done, seed);
            }
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            reference::reduce_ranks(&mut out[done * es..(done + len) * es], &refs, red);
            done += len;
        }
    };
    match top {
        TestOp::AllReduce => reduce_block(&mut out, 0),
        TestOp::Reduce { root } => {
            if rank != root {
                return None;
            }
            reduce_block(&mut out, 0)
        }
        TestOp::ReduceScatter => reduce_block(&mut out, rank * count),
        TestOp::AllGather => {
            for r in 0..nranks {
                input_range(&mut out[r * count * es..(r + 1) * count * es], dtype, op, r, 0, seed);
            }
        }
        TestOp::Broadcast { root } => input_range(&mut out, dtype, op, root, 0, seed),
        TestOp::SendRecv => input_range(&mut out, dtype, op, (rank + nranks - 1) % nranks, 0, seed),
        TestOp::AllToAll => {
            for j in 0..nranks {
                input_range(
                    &mut out[j * count * es..(j + 1) * count * es],
                    dtype,
                    op,
                    j,
                    rank * count,
                    seed,
                );
            }
        }
    }
    Some(out)
}

/// Relative tolerance for floats of `dtype` (exact for integers).
pub fn tolerance(dtype: DataType) -> f64 {
    match dtype {
        DataType::Float16 => 1e-2,
        DataType::Bfloat16 => 6e-2,
        DataType::Float32 => 1e-5,
        DataType::Float64 => 1e-12,
        _ => 0.0,
    }
}

/// Number of elements of `got` that differ from `want` (nccl-tests' `#wrong`).
pub fn count_wrong(dtype: DataType, got: &[u8], want: &[u8]) -> usize {
    let n = want.len().min(got.len()) / dtype.size();
    let tol = tolerance(dtype);
    let mut wrong = (want.len().max(got.len()) - want.len().min(got.len())) / dtype.size();
    for i in 0..n {
        let (g, w) = (reference::get(got, dtype, i), reference::get(want, dtype, i));
        let ok = match (g, w) {
            (Value::F(g), Value::F(w)) => (g - w).abs() <= tol * w.abs().max(1.0) || (g.is_nan() && w.is_nan()),
            _ => g == w,
        };
        if !ok {
            wrong += 1;
        }
    }
    wrong
}
