//! Per-operation selection: the cost table (`src/enqueue.cc: updateCollCostTable`),
//! the choice of algorithm and protocol and of channels and threads
//! (`topoGetAlgoInfo`), and the chunk size (`calcCollChunking`); reference
//! `docs/reference/nccl-graph-tuning.md` §3.4, §3.7.

use super::model::Model;
use crate::coll::ids::{Algorithm as A, Func as F, NUM_ALGOS, NUM_PROTOS, Protocol as P};

/// `NCCL_ALGO_PROTO_IGNORE`: an impossible or forbidden cost-table entry.
pub const IGNORE: f32 = -1.0;

/// One operation's `[algo][proto]` cost table (µs, or [`IGNORE`]).
pub type CostTable = [[f32; NUM_PROTOS]; NUM_ALGOS];

/// `NCCL_MAX_DIRECT_ARITY + 1`: CollNetDirect handles at most this many local ranks.
pub const MAX_DIRECT_LOCAL_RANKS: usize = 8;

/// What `updateCollCostTable` needs besides the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableSupport {
    /// CollNet usable for this operation (`collNetSupport == 1`).
    pub collnet: bool,
    /// NVLS usable for this operation.
    pub nvls: bool,
    /// Most ranks on one node (`comm->maxLocalRanks`).
    pub max_local_ranks: usize,
    /// Ranks on this node (`comm->localRanks`).
    pub local_ranks: usize,
    /// The reduction is `ncclAvg` or a PreMulSum (PAT ReduceScatter cannot do it).
    pub scaled_op: bool,
    /// The datatype is an fp8 type (Ring over more than 8 ranks costs ×1024).
    pub fp8: bool,
}

/// `updateCollCostTable`: the predicted time of every (algorithm, protocol) for
/// `f` on `nbytes` (`ncclFuncMaxSendRecvCount × typeSize`), [`IGNORE`] where
/// impossible.
pub fn coll_cost_table(m: &Model, f: F, nbytes: usize, num_pipe_ops: usize, s: &TableSupport) -> CostTable {
    let mut t = [[IGNORE; NUM_PROTOS]; NUM_ALGOS];
    if m.nranks <= 1 {
        t[A::Ring.index()][P::Simple.index()] = 0.0;
        return t;
    }
    for a in A::ALL {
        let collnet = matches!(a, A::CollNetDirect | A::CollNetChain);
        if collnet && !s.collnet {
            continue;
        }
        if a == A::CollNetDirect && s.max_local_ranks > MAX_DIRECT_LOCAL_RANKS {
            continue;
        }
        if matches!(a, A::Nvls | A::NvlsTree) && (!s.nvls || (f != F::AllReduce && s.local_ranks > 32)) {
            continue;
        }
        if a == A::Nvls && m.nnodes > 1 && !s.collnet {
            continue;
        }
        if a == A::Pat && f == F::ReduceScatter && s.scaled_op {
            continue;
        }
        for p in P::ALL {
            if let Some(mut time) = m.algo_time(f, a, p, nbytes, num_pipe_ops) {
                if s.fp8 && a == A::Ring && m.nranks > 8 {
                    time *= 1024.0;
                }
                t[a.index()][p.index()] = time;
            }
        }
    }
    t
}

/// `topoGetAlgoInfo`'s pick: the smallest entry that is neither [`IGNORE`] nor
/// negative; ties go to the lower algorithm index, then the lower protocol index.
pub fn pick(t: &CostTable) -> Option<(A, P, f32)> {
    let mut best: Option<(A, P, f32)> = None;
    for a in A::ALL {
        for p in P::ALL {
            let v = t[a.index()][p.index()];
            if v == IGNORE || v < 0.0 || v.is_nan() {
                continue;
            }
            if best.is_none_or(|(_, _, b)| v < b) {
                best = Some((a, p, v));
            }
        }
    }
    best
}

/// Channels and threads of a choice (the rest of `topoGetAlgoInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    /// Channels (`nMaxChannels`).
    pub nchannels: usize,
    /// Threads per channel (`nWarps × 32`).
    pub nthreads: i32,
}

/// `topoGetAlgoInfo` after the pick: fewer channels, then fewer threads, while
/// each would get less than its threshold of bytes. `comm_channels` is
/// `comm->nChannels`; `nvls_channels` and `collnet_heads` matter only for NVLS
/// and CollNetDirect.
pub fn resources(
    m: &Model,
    a: A,
    p: P,
    nbytes: usize,
    comm_channels: usize,
    nvls_channels: usize,
    collnet_heads: usize,
) -> Resources {
    let (ai, pi) = (a.index(), p.index());
    let mut nc = comm_channels.max(1) as i64;
    let mut nt = m.max_threads[ai][pi] as i64;
    let mut thr = m.thread_thresholds[ai][pi];
    let nb = nbytes as i64;
    match a {
        A::CollNetDirect => {
            let heads = collnet_heads.max(1) as i64;
            for sw in [16i64, 8, 4, 2, 1] {
                while nb < nc * nt * heads * thr && nc > sw {
                    if nc == sw + sw / 2 {
                        thr /= 2;
                    }
                    nc -= 1;
                }
            }
        }
        A::Nvls | A::NvlsTree => {
            nc = if m.nnodes > 1 {
                nvls_channels.min(comm_channels) as i64
            } else {
                nvls_channels as i64
            };
        }
        _ => {
            while nb < nc * nt * thr && nc >= 2 {
                nc -= 1;
            }
        }
    }
    if !matches!(a, A::Nvls | A::NvlsTree | A::CollNetDirect) {
        while nb < nc * nt * thr && nt % 128 == 0 {
            nt /= 2;
        }
    }
    if p == P::Simple {
        if a == A::Ring {
            nt += 32;
        }
        if a == A::Tree {
            nt += 128;
        }
    }
    nt = nt.max(96);
    if matches!(a, A::Tree | A::Pat) {
        nt = super::model::MAX_NTHREADS as i64;
    }
    Resources {
        nchannels: nc.max(1) as usize,
        nthreads: nt as i32,
    }
}

/// `ncclProtoGrainSize` (bytes): LL 16, LL128 1920, Simple 512.
pub const NCCL_GRAINS: [usize; NUM_PROTOS] = [16, 1920, 512];

/// Buffer geometry behind the chunk size of each protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkGeometry {
    /// Bytes of one FIFO step per protocol (`buffSizes[p] / NCCL_STEPS`, less
    /// any per-step header the transport keeps in the step).
    pub step_bytes: [usize; NUM_PROTOS],
    /// Chunks are a multiple of this per protocol (`ncclProtoGrainSize`).
    pub grain: [usize; NUM_PROTOS],
    /// Steps per chunk of Ring/Simple, per function (`ALLREDUCE_CHUNKSTEPS` etc.;
    /// every other combination uses 1).
    pub ring_simple_chunk_steps: [usize; crate::coll::ids::NUM_FUNCS],
}

impl ChunkGeometry {
    /// NCCL's defaults: `NCCL_LL_BUFFSIZE` 524 288, `NCCL_LL128_BUFFSIZE`
    /// 4 915 200, `NCCL_BUFFSIZE` 4 MiB, 8 steps; chunk steps 4 for AllReduce,
    /// AllGather, ReduceScatter and 1 for Broadcast, Reduce.
    pub const fn nccl_default() -> ChunkGeometry {
        ChunkGeometry {
            step_bytes: [524_288 / 8, 4_915_200 / 8, (4 << 20) / 8],
            grain: NCCL_GRAINS,
            ring_simple_chunk_steps: [1, 1, 4, 4, 4],
        }
    }

    /// The largest chunk of `(f, a, p)` before any size-dependent reduction
    /// (the ceiling a tuner's `getChunkSize` is clamped to).
    pub fn max_chunk(&self, f: F, a: A, p: P) -> usize {
        let steps = if a == A::Ring && p == P::Simple {
            self.ring_simple_chunk_steps[f.index()]
        } else {
            1
        };
        let c = self.step_bytes[p.index()] * steps;
        match p {
            P::Ll => c / 2,
            P::Ll128 => c / 16 * 15,
            P::Simple => c,
        }
    }
}

/// `calcCollChunking` up to the tuner call: the chunk of `(f, a, p)` for a part
/// of `nbytes` over `nchannels` channels (NCCL passes 1 and one channel's part),
/// for Ring, Tree (with the LL128 tree rule) and PAT; CollNet and NVLS keep the
/// protocol's maximum here. `ppn` = ranks per node.
#[allow(clippy::too_many_arguments)]
pub fn chunk_size(
    g: &ChunkGeometry,
    f: F,
    a: A,
    p: P,
    nbytes: usize,
    nchannels: usize,
    nnodes: usize,
    ppn: f32,
) -> usize {
    let mut chunk = g.max_chunk(f, a, p);
    let nch = nchannels.max(1);
    if a == A::Tree && p == P::Ll128 {
        let steps = 1.0 + super::model::log2i(nnodes.max(1) as u64) as f32 + 0.1 * ppn;
        while ((nbytes / (nch * chunk)) as f32) < steps * 64.0 / ppn && chunk > 131_072 {
            chunk /= 2;
        }
        while ((nbytes / (nch * chunk)) as f32) < steps * 16.0 / ppn && chunk > 32_768 {
            chunk /= 2;
        }
    }
    if a == A::Pat {
        let k = if f == F::AllGather { 32 } else { 16 };
        while chunk * nch * k > nbytes && chunk > 65_536 {
            chunk /= 2;
        }
    }
    chunk
}

/// Rounds a chunk down to the protocol grain (the last step of `calcCollChunking`).
pub fn round_to_grain(g: &ChunkGeometry, p: P, chunk: usize) -> usize {
    let grain = g.grain[p.index()].max(1);
    chunk / grain * grain
}

/// One row of the explorer's summary: sizes `lo ..= hi` (powers of two) all pick
/// `algo`/`proto`, with model times from `t_lo` to `t_hi` µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChoiceRange {
    /// Smallest size of the range (bytes).
    pub lo: usize,
    /// Largest size of the range (bytes).
    pub hi: usize,
    /// The algorithm picked.
    pub algo: A,
    /// The protocol picked.
    pub proto: P,
    /// Model time at `lo` (µs).
    pub t_lo: f32,
    /// Model time at `hi` (µs).
    pub t_hi: f32,
}

impl std::fmt::Display for ChoiceRange {
    /// `8 .. 128K   Tree/LL   25.20 .. 48.50 us`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let algo_proto = format!("{}/{}", self.algo.name(), self.proto.name());
        write!(
            f,
            "{:>5} .. {:<5}  {:<20}  {:.2} .. {:.2} us",
            human_size(self.lo),
            human_size(self.hi),
            algo_proto,
            self.t_lo,
            self.t_hi
        )
    }
}

/// `8`, `128K`, `64M`, `8G` (power-of-two sizes as the explorer prints them).
pub fn human_size(b: usize) -> String {
    const UNITS: [(usize, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (u, s) in UNITS {
        if b >= u && b.is_multiple_of(u) {
            return format!("{}{s}", b / u);
        }
    }
    b.to_string()
}

/// The choice per power-of-two size from `min` to `max` bytes for `f` (one
/// operation, no tuner), grouped into ranges of equal choice: what the topology
/// explorer prints per collective.
pub fn choice_ranges(m: &Model, f: F, s: &TableSupport, min: usize, max: usize) -> Vec<ChoiceRange> {
    let mut out: Vec<ChoiceRange> = Vec::new();
    let mut n = min.max(1);
    while n <= max {
        if let Some((a, p, t)) = pick(&coll_cost_table(m, f, n, 1, s)) {
            match out.last_mut() {
                Some(r) if r.algo == a && r.proto == p => {
                    r.hi = n;
                    r.t_hi = t;
                }
                _ => out.push(ChoiceRange {
                    lo: n,
                    hi: n,
                    algo: a,
                    proto: p,
                    t_lo: t,
                    t_hi: t,
                }),
            }
        }
        match n.checked_mul(2) {
            Some(x) => n = x,
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::constants::TunerConstants;
    use crate::tune::enable::EnableMatrix;
    use crate::tune::model::*;

    fn model(nranks: usize) -> Model {
        let pat = PatternInfo {
            nchannels: 16,
            bw_intra: 20.0,
            bw_inter: 20.0,
            type_intra: path::NVL,
            type_inter: path::PIX,
            latency_inter: 0.0,
            same_channels: true,
        };
        let inp = ModelInput::gpu_cluster(nranks, 1, 90);
        let g = GraphInfo {
            tree: pat,
            ring: pat,
            collnet_direct: PatternInfo::NONE,
            collnet_chain: PatternInfo::NONE,
            nvls: PatternInfo::NONE,
            max_tree_pattern: PATTERN_BALANCED_TREE,
        };
        tune_model(
            &inp,
            &g,
            &mut TunerConstants::nccl_gpu(),
            &EnableMatrix::default(),
            &ALL_RUNNABLE,
        )
    }

    #[test]
    fn one_rank_runs_ring_simple() {
        let m = model(1);
        let t = coll_cost_table(&m, F::AllReduce, 1 << 20, 1, &TableSupport::default());
        assert_eq!(pick(&t), Some((A::Ring, P::Simple, 0.0)));
    }

    #[test]
    fn pick_ties_and_ignores() {
        let mut t = [[IGNORE; 3]; 7];
        assert_eq!(pick(&t), None);
        t[1][2] = 5.0;
        t[0][2] = 5.0;
        t[6][0] = -3.0;
        assert_eq!(pick(&t), Some((A::Tree, P::Simple, 5.0)));
        t[1][0] = 0.0;
        assert_eq!(pick(&t), Some((A::Ring, P::Ll, 0.0)));
    }

    /// 8 Hopper GPUs on NVLink (the §3.4 example): LL wins small sizes, Simple
    /// large ones; Tree/LL128 disabled elements stay -1 for AllGather.
    #[test]
    fn choice_on_the_reference_node() {
        let m = model(8);
        let s = TableSupport {
            max_local_ranks: 8,
            local_ranks: 8,
            ..TableSupport::default()
        };
        let t = coll_cost_table(&m, F::AllReduce, 8, 1, &s);
        let (a, p, _) = pick(&t).unwrap();
        assert_eq!((a, p), (A::Ring, P::Ll), "{t:?}");
        let t = coll_cost_table(&m, F::AllReduce, 1 << 30, 1, &s);
        assert_eq!(pick(&t).map(|x| (x.0, x.1)), Some((A::Ring, P::Simple)), "{t:?}");
        let t = coll_cost_table(&m, F::AllGather, 1 << 20, 1, &s);
        assert_eq!(t[A::Tree.index()], [IGNORE; 3]);
        assert_eq!(t[A::Pat.index()], [IGNORE; 3]);
    }

    #[test]
    fn channels_shrink_for_small_operations() {
        let m = model(8);
        // Ring/Simple: 512 threads × 64 B per channel; 16 channels need 512 KiB.
        let r = resources(&m, A::Ring, P::Simple, 16 * 512 * 64, 16, 0, 0);
        assert_eq!(
            r,
            Resources {
                nchannels: 16,
                nthreads: 544
            }
        );
        let r = resources(&m, A::Ring, P::Simple, 4 * 512 * 64, 16, 0, 0);
        assert_eq!(r.nchannels, 4);
        let r = resources(&m, A::Ring, P::Simple, 8, 16, 0, 0);
        assert_eq!(r.nchannels, 1);
        // nt halves down to 64 (not a multiple of 128 after that), +32, then max(…, 96).
        assert_eq!(r.nthreads, 96);
        assert_eq!(resources(&m, A::Tree, P::Simple, 8, 16, 0, 0).nthreads, 640);
    }

    #[test]
    fn explorer_ranges() {
        let m = model(8);
        let s = TableSupport {
            max_local_ranks: 8,
            local_ranks: 8,
            ..TableSupport::default()
        };
        let r = choice_ranges(&m, F::AllReduce, &s, 8, 8 << 30);
        assert_eq!(r.first().map(|x| (x.lo, x.algo, x.proto)), Some((8, A::Ring, P::Ll)));
        assert_eq!(r.last().map(|x| (x.hi, x.proto)), Some((8 << 30, P::Simple)));
        // Ranges are contiguous and each covers sizes of one choice.
        for w in r.windows(2) {
            assert_eq!(w[1].lo, w[0].hi * 2);
            assert!((w[0].algo, w[0].proto) != (w[1].algo, w[1].proto));
        }
        assert!(r[0].to_string().starts_with("    8 .. "), "{}", r[0]);
        assert_eq!(human_size(128 << 10), "128K");
        assert_eq!(human_size(3000), "3000");
    }

    #[test]
    fn default_chunk_sizes() {
        let g = ChunkGeometry::nccl_default();
        let c = |f, a, p| round_to_grain(&g, p, chunk_size(&g, f, a, p, 1 << 30, 1, 1, 8.0));
        // Reference §3.7 "Resulting defaults".
        assert_eq!(c(F::AllReduce, A::Ring, P::Simple), 2 << 20);
        assert_eq!(c(F::AllGather, A::Ring, P::Simple), 2 << 20);
        assert_eq!(c(F::Broadcast, A::Ring, P::Simple), 512 << 10);
        assert_eq!(c(F::AllReduce, A::Tree, P::Simple), 512 << 10);
        assert_eq!(c(F::AllReduce, A::Ring, P::Ll), 32 << 10);
        assert_eq!(c(F::AllReduce, A::Tree, P::Ll), 32 << 10);
        assert_eq!(c(F::AllReduce, A::Ring, P::Ll128), 576_000);
        // Tree/LL128 shrinks for small parts: 1 node, 8 ppn, steps = 1.8.
        let small = chunk_size(&g, F::AllReduce, A::Tree, P::Ll128, 1 << 20, 1, 1, 8.0);
        assert_eq!(small, 576_000 / 8);
    }
}
