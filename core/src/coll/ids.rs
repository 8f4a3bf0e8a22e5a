//! The indices of NCCL's tuning tables: functions (`ncclFunc_t` 0–4), algorithms
//! (`NCCL_ALGO_*`) and protocols (`NCCL_PROTO_*`), with NCCL's spellings
//! (`ncclFuncStr`, `ncclAlgoStr`, `ncclProtoStr` in `src/collectives.cc`;
//! values from `src/include/plugin/nccl_tuner.h`, reference `docs/reference/nccl-plugin-abi.md` §4.5).

use super::{Algo, CollKind};

/// `NCCL_NUM_FUNCTIONS`: the functions that go through the tuning model.
pub const NUM_FUNCS: usize = 5;
/// `NCCL_NUM_ALGORITHMS` (2.23 and later).
pub const NUM_ALGOS: usize = 7;
/// `NCCL_NUM_PROTOCOLS`.
pub const NUM_PROTOS: usize = 3;

/// A tuned collective function (`ncclFunc_t` 0–4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Func {
    /// `ncclFuncBroadcast` (0).
    Broadcast = 0,
    /// `ncclFuncReduce` (1).
    Reduce = 1,
    /// `ncclFuncAllGather` (2).
    AllGather = 2,
    /// `ncclFuncReduceScatter` (3).
    ReduceScatter = 3,
    /// `ncclFuncAllReduce` (4).
    AllReduce = 4,
}

impl Func {
    /// Every function, in index order.
    pub const ALL: [Func; NUM_FUNCS] = [
        Func::Broadcast,
        Func::Reduce,
        Func::AllGather,
        Func::ReduceScatter,
        Func::AllReduce,
    ];

    /// NCCL's spelling (`ncclFuncStr`).
    pub fn name(self) -> &'static str {
        match self {
            Func::Broadcast => "Broadcast",
            Func::Reduce => "Reduce",
            Func::AllGather => "AllGather",
            Func::ReduceScatter => "ReduceScatter",
            Func::AllReduce => "AllReduce",
        }
    }

    /// The table index (`ncclFunc_t` value).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The function of index `i` (0–4).
    pub fn from_index(i: usize) -> Option<Func> {
        Func::ALL.get(i).copied()
    }

    /// The tuned function of a collective; `None` for send/receive, which NCCL
    /// schedules without the model.
    pub fn of(kind: CollKind) -> Option<Func> {
        Some(match kind {
            CollKind::AllReduce => Func::AllReduce,
            CollKind::AllGather => Func::AllGather,
            CollKind::ReduceScatter => Func::ReduceScatter,
            CollKind::Broadcast { .. } => Func::Broadcast,
            CollKind::Reduce { .. } => Func::Reduce,
            CollKind::Send { .. } | CollKind::Recv { .. } => return None,
        })
    }

    /// The collective kind (roots of Broadcast/Reduce set to 0).
    pub fn kind(self) -> CollKind {
        match self {
            Func::Broadcast => CollKind::Broadcast { root: 0 },
            Func::Reduce => CollKind::Reduce { root: 0 },
            Func::AllGather => CollKind::AllGather,
            Func::ReduceScatter => CollKind::ReduceScatter,
            Func::AllReduce => CollKind::AllReduce,
        }
    }
}

/// An NCCL algorithm (`NCCL_ALGO_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// `NCCL_ALGO_TREE` (0).
    Tree = 0,
    /// `NCCL_ALGO_RING` (1).
    Ring = 1,
    /// `NCCL_ALGO_COLLNET_DIRECT` (2).
    CollNetDirect = 2,
    /// `NCCL_ALGO_COLLNET_CHAIN` (3).
    CollNetChain = 3,
    /// `NCCL_ALGO_NVLS` (4).
    Nvls = 4,
    /// `NCCL_ALGO_NVLS_TREE` (5).
    NvlsTree = 5,
    /// `NCCL_ALGO_PAT` (6).
    Pat = 6,
}

impl Algorithm {
    /// NCCL's `ncclAlgoToString` spelling, as profilers get it (differs from
    /// the `NCCL_ALGO` keywords of [`Algorithm::name`]).
    pub fn upper_name(self) -> &'static std::ffi::CStr {
        match self {
            Algorithm::Tree => c"TREE",
            Algorithm::Ring => c"RING",
            Algorithm::CollNetDirect => c"COLLNET_DIRECT",
            Algorithm::CollNetChain => c"COLLNET_CHAIN",
            Algorithm::Nvls => c"NVLS",
            Algorithm::NvlsTree => c"NVLS_TREE",
            Algorithm::Pat => c"PAT",
        }
    }

    /// Every algorithm, in index order.
    pub const ALL: [Algorithm; NUM_ALGOS] = [
        Algorithm::Tree,
        Algorithm::Ring,
        Algorithm::CollNetDirect,
        Algorithm::CollNetChain,
        Algorithm::Nvls,
        Algorithm::NvlsTree,
        Algorithm::Pat,
    ];

    /// NCCL's spelling (`ncclAlgoStr`, the `NCCL_ALGO` keywords).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Tree => "Tree",
            Algorithm::Ring => "Ring",
            Algorithm::CollNetDirect => "CollNetDirect",
            Algorithm::CollNetChain => "CollNetChain",
            Algorithm::Nvls => "NVLS",
            Algorithm::NvlsTree => "NVLSTree",
            Algorithm::Pat => "PAT",
        }
    }

    /// The table index (`NCCL_ALGO_*` value).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The algorithm of index `i` (0–6).
    pub fn from_index(i: usize) -> Option<Algorithm> {
        Algorithm::ALL.get(i).copied()
    }

    /// The algorithm the schedule builder runs for this one, if it has one.
    pub fn runtime(self) -> Option<Algo> {
        match self {
            Algorithm::Tree => Some(Algo::Tree),
            Algorithm::Ring => Some(Algo::Ring),
            _ => None,
        }
    }
}

impl From<Algo> for Algorithm {
    fn from(a: Algo) -> Algorithm {
        match a {
            Algo::Tree => Algorithm::Tree,
            Algo::Ring => Algorithm::Ring,
        }
    }
}

/// An NCCL protocol (`NCCL_PROTO_*`): the transport layer's wire protocol, one
/// type for the cost table and the connections that carry it.
pub use crate::transport::proto::Protocol;

/// NCCL's function names, in index order (`ncclFuncStr[0..5]`).
pub const FUNC_NAMES: [&str; NUM_FUNCS] = ["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"];
/// NCCL's algorithm names, in index order (`ncclAlgoStr`).
pub const ALGO_NAMES: [&str; NUM_ALGOS] = [
    "Tree",
    "Ring",
    "CollNetDirect",
    "CollNetChain",
    "NVLS",
    "NVLSTree",
    "PAT",
];
/// NCCL's protocol names, in index order (`ncclProtoStr`).
pub const PROTO_NAMES: [&str; NUM_PROTOS] = ["LL", "LL128", "Simple"];

/// What one collective runs with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    /// The function.
    pub func: Func,
    /// Bytes the model was asked about (`ncclFuncMaxSendRecvCount × typeSize`;
    /// the aggregate's total when several operations were decided together).
    pub nbytes: usize,
    /// Operations decided together (NCCL's aggregation of a group's similar
    /// collectives) and `numPipeOps`.
    pub num_pipe_ops: usize,
    /// The algorithm.
    pub algo: Algorithm,
    /// The protocol.
    pub proto: Protocol,
    /// Channels to spread the operation over (1 ..= the communicator's channels).
    pub nchannels: usize,
    /// Chunk size in bytes (the unit of pipelining per channel and loop).
    pub chunk_bytes: usize,
    /// Host-only AllReduce variant: every rank's input is all-gathered around the
    /// ring and reduced locally in rank order (n-1 hops of the whole buffer
    /// instead of 2(n-1) hops of 1/n of it). Chosen for Ring/Simple AllReduce
    /// when the model prices it below reduce-scatter + all-gather (see
    /// [`crate::tune::Tuning::allgather_reduce_time`]) and the buffer is at most
    /// `FERROCCL_SMALL_ALLREDUCE_BYTES` (its scratch is nranks × the buffer).
    pub allgather_reduce: bool,
    /// The model's (or the tuner's) cost of the chosen entry, µs.
    pub time_us: f32,
    /// Whether a tuner plugin changed the table or the channel count.
    pub by_tuner: bool,
}

impl Decision {
    /// One-line description: `AllReduce 1048576 B: Ring/Simple channels 2 chunk 1048448 (model 412.3 us)`.
    pub fn describe(&self) -> String {
        format!(
            "{} {} B: {}/{}{} channels {} chunk {}{}",
            self.func.name(),
            self.nbytes,
            self.algo.name(),
            self.proto.name(),
            if self.allgather_reduce {
                " (allgather+reduce)"
            } else {
                ""
            },
            self.nchannels,
            self.chunk_bytes,
            if self.by_tuner {
                " (tuner)".to_string()
            } else {
                format!(" (model {:.1} us)", self.time_us)
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_match_the_abi() {
        use ferroccl_plugin_api::abi;
        assert_eq!(Algorithm::Tree.index() as i32, abi::NCCL_ALGO_TREE);
        assert_eq!(Algorithm::Pat.index() as i32, abi::NCCL_ALGO_PAT);
        assert_eq!(Algorithm::NvlsTree.index() as i32, abi::NCCL_ALGO_NVLS_TREE);
        assert_eq!(Protocol::Simple.index() as i32, abi::NCCL_PROTO_SIMPLE);
        assert_eq!(NUM_ALGOS, abi::NCCL_NUM_ALGORITHMS);
        assert_eq!(NUM_PROTOS, abi::NCCL_NUM_PROTOCOLS);
        assert_eq!(NUM_FUNCS as i32, abi::NCCL_NUM_FUNCTIONS);
        for (i, f) in Func::ALL.iter().enumerate() {
            assert_eq!(f.index(), i);
            assert_eq!(f.name(), FUNC_NAMES[i]);
        }
        for (i, a) in Algorithm::ALL.iter().enumerate() {
            assert_eq!(a.name(), ALGO_NAMES[i]);
        }
    }
}
