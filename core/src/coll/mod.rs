//! Collective operations: what the user asked for ([`CollArgs`]), how each becomes
//! per-channel step schedules over the ring ([`schedule`]), and how one slice step
//! is carried out on host memory ([`exec`]).
//!
//! Algorithms follow NCCL's ring collectives (`src/device/all_reduce.h`,
//! `all_gather.h`, `reduce_scatter.h`, `broadcast.h`, `reduce.h`, `sendrecv.h`):
//! data is cut per channel, each channel loops over the buffer in chunks of
//! `nranks × chunkSize`, and every chunk primitive (`send`, `recvReduceSend`,
//! `directRecvReduceCopySend`, …) moves data in slices of one FIFO step.

/// NCCL's function, algorithm and protocol ids, and the decision a plan obeys.
pub mod ids;
pub use ids::Decision;
pub(crate) mod collnet_agrs;
pub(crate) mod desc;
pub(crate) mod exec;
pub(crate) mod mem;
pub(crate) mod schedule;

use ferroccl_kernels::{DataType, RedOp};

/// One entry per operation of a work item: a lone collective (the common
/// case) needs no heap allocation.
pub(crate) type PerOp<T> = smallvec::SmallVec<[T; 1]>;

/// Which operation (NCCL's `ncclFunc_t` subset run on the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollKind {
    /// `ncclAllReduce`: `count` elements in, `count` out.
    AllReduce,
    /// `ncclAllGather`: `count` (sendcount) in, `nranks × count` out.
    AllGather,
    /// `ncclReduceScatter`: `nranks × count` in, `count` (recvcount) out.
    ReduceScatter,
    /// `ncclBroadcast` from `root`: `count` elements.
    Broadcast {
        /// Source rank.
        root: usize,
    },
    /// `ncclReduce` to `root`: `count` elements.
    Reduce {
        /// Destination rank.
        root: usize,
    },
    /// `ncclSend` of `count` elements to `peer`.
    Send {
        /// Destination rank.
        peer: usize,
    },
    /// `ncclRecv` of `count` elements from `peer`.
    Recv {
        /// Source rank.
        peer: usize,
    },
}

impl CollKind {
    /// Bytes an operation of this kind on `count` elements of `dtype` over
    /// `nranks` ranks reads from its send buffer and writes to its receive
    /// buffer (NCCL's `sendcount`/`recvcount` per collective, `src/collectives.cc`).
    pub(crate) fn buffer_bytes(self, count: usize, dtype: DataType, nranks: usize) -> (usize, usize) {
        let b = count * dtype.size();
        match self {
            CollKind::AllReduce | CollKind::Broadcast { .. } | CollKind::Reduce { .. } => (b, b),
            CollKind::AllGather => (b, b * nranks),
            CollKind::ReduceScatter => (b * nranks, b),
            CollKind::Send { .. } => (b, 0),
            CollKind::Recv { .. } => (0, b),
        }
    }

    /// NCCL-style name for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            CollKind::AllReduce => "AllReduce",
            CollKind::AllGather => "AllGather",
            CollKind::ReduceScatter => "ReduceScatter",
            CollKind::Broadcast { .. } => "Broadcast",
            CollKind::Reduce { .. } => "Reduce",
            CollKind::Send { .. } => "Send",
            CollKind::Recv { .. } => "Recv",
        }
    }
}

/// A collective algorithm (NCCL's `NCCL_ALGO_*`, `src/include/device.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    /// `NCCL_ALGO_TREE` (0): reduce up and broadcast down each channel's tree.
    Tree,
    /// `NCCL_ALGO_RING` (1): around each channel's ring.
    Ring,
}

impl Algo {
    /// NCCL's spelling (`NCCL_ALGO` values, log lines).
    pub fn name(self) -> &'static str {
        match self {
            Algo::Tree => "Tree",
            Algo::Ring => "Ring",
        }
    }
}

/// One enqueued operation: raw buffer addresses as NCCL takes them.
///
/// `send`/`recv` must stay valid until the stream the operation was enqueued on
/// has been synchronized (the caller's promise in the `unsafe` enqueue API).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CollArgs {
    pub kind: CollKind,
    pub send: *const u8,
    pub recv: *mut u8,
    pub count: usize,
    pub dtype: DataType,
    pub op: RedOp,
    /// Bytes read from `send` and written to `recv` ([`CollKind::buffer_bytes`]),
    /// computed once, at enqueue (zero until then).
    pub bytes: (usize, usize),
    /// Memory spaces of `send`/`recv`, classified at enqueue ([`mem::OpMem::classify`]).
    pub mem: mem::OpMem,
}

// SAFETY: the addresses are the caller's buffers, which the enqueue API's contract
// keeps valid and untouched by the caller until the stream is synchronized; the
// executor thread is the only one touching them meanwhile.
unsafe impl Send for CollArgs {}

/// What a work item is, for logs and errors: formatted only when printed (a
/// work item is described on every enqueue and printed almost never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkWhat {
    /// One operation: `AllReduce of 2 x float32`.
    One {
        /// The operation.
        kind: CollKind,
        /// Its element count.
        count: usize,
        /// Its datatype.
        dtype: DataType,
    },
    /// A group: `group of 3 operations`.
    Group(usize),
    /// A one-sided operation: `PutSignal to rank 1`.
    Rma {
        /// `PutSignal`, `Signal` or `WaitSignal`.
        op: &'static str,
        /// The peer (the first descriptor's for `WaitSignal`).
        peer: usize,
    },
}

impl WorkWhat {
    /// The description of the operations `colls` of one work item.
    pub(crate) fn of(colls: &[CollArgs]) -> WorkWhat {
        match colls {
            [one] => WorkWhat::One {
                kind: one.kind,
                count: one.count,
                dtype: one.dtype,
            },
            _ => WorkWhat::Group(colls.len()),
        }
    }
}

impl std::fmt::Display for WorkWhat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkWhat::One { kind, count, dtype } => write!(f, "{} of {count} x {dtype}", kind.name()),
            WorkWhat::Group(n) => write!(f, "group of {n} operations"),
            WorkWhat::Rma { op, peer } => write!(f, "{op} with rank {peer}"),
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_mock_cuda;

impl CollKind {
    /// NCCL's `ncclFuncToString` spelling of an operation (`Send`/`Recv` included).
    pub fn nccl_name(self) -> &'static std::ffi::CStr {
        use CollKind::*;
        match self {
            AllReduce => c"AllReduce",
            AllGather => c"AllGather",
            ReduceScatter => c"ReduceScatter",
            Broadcast { .. } => c"Broadcast",
            Reduce { .. } => c"Reduce",
            Send { .. } => c"Send",
            Recv { .. } => c"Recv",
        }
    }
}
