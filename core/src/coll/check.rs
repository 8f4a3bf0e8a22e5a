//! Deterministic test data and expected results for every collective, as
//! nccl-tests does it: every rank can generate every rank's input, so each rank
//! checks its own output locally against a sequential reference
//! ([`ferroccl_kernels::reference`]). Used by the perf tool's `-c 1` and by tests.
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
    /// Elements in the send and receive buffers of one rank.
    pub fn buffer_elems(&self, count: usize, nranks: usize) -> (usize, usize) {
        match self {
            TestOp::AllReduce | TestOp::Broadcast { .. } | TestOp::Reduce { .. } | TestOp::SendRecv => (count, count),
            TestOp::AllGather => (count, count * nranks),
            TestOp::ReduceScatter => (count * nranks, count),
            TestOp::AllToAll => (count * nranks, count * nranks),
        }
    }

    fn reduces(&self) -> bool {
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
