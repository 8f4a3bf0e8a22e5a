//! NCCL 2.30.7's tuning for a GPU communicator, offline: the inputs
//! `ncclTopoTuneModel` (`src/graph/tuning.cc`) reads, taken from a
//! [`CommTopology`] (the graphs after the all-gather, the system's GPUs, CPUs and
//! NVSwitches), and the per-operation choice of `ncclGetAlgoInfo` /
//! `topoGetAlgoInfo` (`src/enqueue.cc`) over a range of sizes. The topology
//! explorer (`ferroccl-topo`) prints what this module computes.
//!
//! What NCCL takes from the driver or from plugins is modelled, and said so in
//! [`GpuTuning::notes`]:
//! * compute capability, CPU arch/vendor, NVSwitches, NICs and their speed come from
//!   the topology (and the explorer's hardware model for skeleton files);
//! * NVLS (`comm->nvlsSupport`) follows [`crate::topo::nvls_support`] and needs NVLS
//!   channels from the search, as in `initTransportsRank`;
//! * CollNet needs a CollNet plugin (`ncclCollNet`) serving the NICs: with
//!   `NCCL_COLLNET_ENABLE=1`, more than one node, and NICs the topology marks
//!   `coll="1"` (as `ncclTopoFillNet` marks the ones the plugin serves), CollNet is on
//!   with the searched CollNetDirect/CollNetChain graphs, their heads
//!   (`collNetHeadsNum`) and chain support; otherwise it is off (NCCL without such a
//!   plugin behaves the same);
//! * the net plugin is a host-side one (`NCCL_NET_DEVICE_HOST`, as IB and Socket), which
//!   PAT's automatic enable requires;
//! * NCCL is a CUDA 12 build (`CUDART_VERSION` is only read by the LL128 rule for
//!   2-rank sm 9.0 AllReduce under CUDA 11.8).

use crate::config::Config;
use crate::error::Error;
use crate::graph::CommTopology;
use crate::graph::connect::GraphInfo as CommGraphInfo;
use crate::topo::NodeType;
use crate::topo::types::{cpu_arch, cpu_vendor};

use super::constants::TunerConstants;
use super::enable::EnableMatrix;
use super::ids::{Algorithm as A, Func as F, Protocol as P};
use super::model::{
    ALL_RUNNABLE, CpuArch, CpuVendor, GraphInfo, Model, ModelInput, ModelParams, PatternInfo, tune_model,
};
use super::select::{self, ChoiceRange, CostTable, TableSupport};

/// Smallest size the explorer evaluates (bytes).
pub const MIN_BYTES: usize = 8;
/// Largest size the explorer evaluates (bytes): 8 GiB.
pub const MAX_BYTES: usize = 8 << 30;

/// `CUDART_VERSION` assumed for NCCL (a CUDA 12 build).
pub const CUDART_VERSION: i32 = 12000;

/// The parameters of a GPU communicator's tuning, as the runtime reads them
/// (environment over `nccl.conf`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuTuneParams {
    /// `NCCL_ALGO` / `NCCL_PROTO`.
    pub enable: EnableMatrix,
    /// `NCCL_NTHREADS`, `NCCL_LL128_NTHREADS`, `NCCL_PAT_ENABLE`, `NCCL_LL128_C2C`,
    /// `NCCL_NET_OVERHEAD`, `NCCL_THREAD_THRESHOLDS`.
    pub model: ModelParams,
    /// `NCCL_COLLNET_ENABLE` (`comm->config.collnetEnable`; default 0).
    pub collnet_enable: bool,
}

impl GpuTuneParams {
    /// Reads the parameters from the configuration, as [`super::TuneParams::from_config`]
    /// does for the runtime.
    ///
    /// Errors: [`Error::InvalidUsage`] for an `NCCL_ALGO` / `NCCL_PROTO` NCCL would
    /// refuse, [`Error::Config`] for numbers out of range.
    pub fn from_config(cfg: &Config) -> Result<GpuTuneParams, Error> {
        let t = super::TuneParams::from_config(cfg)?;
        use crate::config::IntParamExt;
        let collnet = crate::config::params::tune::COLLNET_ENABLE
            .get(cfg)
            .map_err(Error::Config)?;
        Ok(GpuTuneParams {
            enable: t.enable,
            model: t.model,
            collnet_enable: collnet != 0,
        })
    }
}

/// A graph after the all-gather as the model reads it (`graphs[a]`).
pub fn pattern_info(g: &CommGraphInfo) -> PatternInfo {
    if g.n_channels == 0 {
        return PatternInfo::NONE;
    }
    PatternInfo {
        nchannels: g.n_channels,
        bw_intra: g.bw_intra,
        bw_inter: g.bw_inter,
        type_intra: g.type_intra as u8,
        type_inter: g.type_inter as u8,
        latency_inter: g.latency_inter,
        same_channels: g.same_channels,
    }
}

fn arch_of(a: i32) -> CpuArch {
    match a {
        cpu_arch::X86 => CpuArch::X86,
        cpu_arch::POWER => CpuArch::Power,
        cpu_arch::ARM => CpuArch::Arm,
        _ => CpuArch::Other,
    }
}

fn vendor_of(v: i32) -> CpuVendor {
    match v {
        cpu_vendor::INTEL => CpuVendor::Intel,
        cpu_vendor::AMD => CpuVendor::Amd,
        cpu_vendor::ZHAOXIN => CpuVendor::Zhaoxin,
        cpu_vendor::MIXED => CpuVendor::Mixed,
        _ => CpuVendor::Other,
    }
}

/// One GPU communicator's model and what the choice reads besides it.
#[derive(Debug, Clone)]
pub struct GpuTuning {
    /// The communicator facts `ncclTopoTuneModel` reads.
    pub input: ModelInput,
    /// `graphs[]` after the all-gather.
    pub graphs: GraphInfo,
    /// The constants the model ran with (NCCL's defaults, or what a v5+ tuner left).
    pub constants: TunerConstants,
    /// The user's enable matrix.
    pub enable: EnableMatrix,
    /// The model (`comm->bandwidths`, `latencies`, `maxThreads`, `threadThresholds`).
    pub model: Model,
    /// `updateCollCostTable`'s inputs for a float32 sum (NVLS and CollNet support, local ranks).
    pub support: TableSupport,
    /// What was modelled and why something is off (for the report).
    pub notes: Vec<String>,
}

impl GpuTuning {
    /// Runs `ncclTopoTuneModel` for the communicator of `topo` with `constants`
    /// ([`TunerConstants::nccl_gpu`] unless a tuner rewrote them).
    pub fn new(topo: &CommTopology, p: &GpuTuneParams, constants: TunerConstants) -> GpuTuning {
        let comm = &topo.comm;
        let sys = &topo.hosts[0].graphs.system;
        let nranks = comm.nranks;
        let nnodes = comm.n_nodes.max(1);
        let mut local = vec![0usize; nnodes];
        for &n in &comm.rank_to_node {
            local[n] += 1;
        }
        let max_local = local.iter().copied().max().unwrap_or(0);
        let mut notes = Vec::new();
        let nvls_support = comm.nvls.n_channels > 0;
        let nvs_count = topo
            .hosts
            .iter()
            .map(|h| h.graphs.system.count(NodeType::Nvs))
            .min()
            .unwrap_or(0);
        // CollNet (src/init.cc: collNetSupport after ncclCollNetSetup; heads from the
        // CollNetDirect graph, or the NVLS heads where NVLS is supported).
        let collnet = p.collnet_enable && nnodes > 1 && comm.collnet_heads > 0;
        let collnet_heads = if nvls_support {
            comm.nvls.n_channels
        } else {
            comm.collnet_heads
        };
        if p.collnet_enable && !collnet {
            notes.push(
                "NCCL_COLLNET_ENABLE=1: no NIC is marked coll=\"1\" (no CollNet plugin serves one) or one node, so CollNet stays off (as in NCCL)"
                    .to_string(),
            );
        } else if collnet {
            notes.push(format!(
                "CollNet: {} heads per node, CollNetDirect {} channels, CollNetChain {} channels{}",
                collnet_heads,
                comm.collnet_direct.n_channels,
                comm.collnet_chain.n_channels,
                if comm.collnet_chain_support {
                    ""
                } else {
                    " (chain heads without CollNet: no CollNetChain)"
                }
            ));
        }
        let input = ModelInput {
            nranks,
            nnodes,
            nchannels: comm.n_channels,
            min_compcap: comm.comp_cap.0,
            max_compcap: comm.comp_cap.1,
            cpu_arch: arch_of(comm.cpu_arch_vendor.0),
            cpu_vendor: vendor_of(comm.cpu_arch_vendor.1),
            // config.collnetEnable is reset when no CollNet plugin is present.
            collnet_enable: collnet,
            collnet_chain_support: collnet && comm.collnet_chain_support,
            nvs_count,
            collnet_iallgather: false,
            collnet_ireducescatter: false,
            collnet_heads: if collnet { collnet_heads } else { 0 },
            max_local_ranks: max_local,
            net_device_host: true,
            cudart_version: CUDART_VERSION,
            params: p.model.clone(),
        };
        let graphs = GraphInfo {
            tree: pattern_info(&comm.tree),
            ring: pattern_info(&comm.ring),
            collnet_direct: if collnet {
                pattern_info(&comm.collnet_direct)
            } else {
                PatternInfo::NONE
            },
            collnet_chain: if collnet {
                pattern_info(&comm.collnet_chain)
            } else {
                PatternInfo::NONE
            },
            nvls: pattern_info(&comm.nvls),
            max_tree_pattern: comm.max_tree_pattern.clamp(0, 255) as u8,
        };
        if let Some(a) = &p.enable.algo_str {
            notes.push(format!("NCCL_ALGO set to {a}"));
        }
        if let Some(pr) = &p.enable.proto_str {
            notes.push(format!("NCCL_PROTO set to {pr}"));
        }
        if p.enable.user_set() {
            notes.push(format!(
                "Enabled NCCL Func/Proto/Algo Matrix:{}",
                p.enable.matrix_text().trim_end()
            ));
        }
        let mut c = constants;
        let model = tune_model(&input, &graphs, &mut c, &p.enable, &ALL_RUNNABLE);
        notes.extend(model.notes.iter().cloned());
        let nvls_why = if nvls_support {
            format!(
                "NVLS: {} heads, bw {}/{} GB/s (multicast assumed on sm >= 90 with an NVSwitch)",
                comm.nvls.n_channels, comm.nvls.bw_intra, comm.nvls.bw_inter
            )
        } else if sys.count(NodeType::Nvs) == 0 {
            "NVLS: off (no NVSwitch)".to_string()
        } else if comm.comp_cap.0 < 90 {
            "NVLS: off (needs sm >= 90)".to_string()
        } else {
            "NVLS: off (NCCL_NVLS_ENABLE=0, two GPUs or fewer, or no NVLS channel found)".to_string()
        };
        notes.push(nvls_why);
        let support = TableSupport {
            // ncclGetCollNetSupport(float32 sum): the plugin reduces it.
            collnet,
            // ncclNvlsSupported(ncclDevSum, ncclFloat32) holds.
            nvls: nvls_support,
            max_local_ranks: max_local,
            local_ranks: local.first().copied().unwrap_or(0),
            scaled_op: false,
            fp8: false,
        };
        GpuTuning {
            input,
            graphs,
            constants: c,
            enable: p.enable.clone(),
            model,
            support,
            notes,
        }
    }

    /// `updateCollCostTable` for one float32-sum operation of `f` on `nbytes`
    /// (`ncclFuncMaxSendRecvCount × 4`).
    pub fn cost_table(&self, f: F, nbytes: usize) -> CostTable {
        select::coll_cost_table(&self.model, f, nbytes, 1, &self.support)
    }

    /// `topoGetAlgoInfo`'s pick without a tuner for every power-of-two size from `min`
    /// to `max`, grouped into ranges of the same choice.
    pub fn ranges(&self, f: F, min: usize, max: usize) -> Vec<ChoiceRange> {
        select::choice_ranges(&self.model, f, &self.support, min, max)
    }

    /// One line of the facts the model ran with.
    pub fn facts(&self) -> String {
        let i = &self.input;
        format!(
            "nRanks {} nNodes {} nChannels {} compCap {}/{} cpu {:?}/{:?} nvsCount {} PAT {}",
            i.nranks,
            i.nnodes,
            i.nchannels,
            i.min_compcap,
            i.max_compcap,
            i.cpu_arch,
            i.cpu_vendor,
            i.nvs_count,
            if (0..super::ids::NUM_FUNCS).any(|f| self.model.bandwidths[f][A::Pat.index()][P::Simple.index()] > 0.0) {
                "on"
            } else {
                "off"
            }
        )
    }
}

/// One row of a tuner's effect: sizes `lo ..= hi` where NCCL alone picks `nccl` and
/// with the tuner `tuned` (`None`: the tuner left nothing available, which NCCL
/// reports as "No algorithm/protocol available").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TunerRow {
    /// Smallest size (bytes).
    pub lo: usize,
    /// Largest size (bytes).
    pub hi: usize,
    /// NCCL's choice without the tuner.
    pub nccl: (A, P),
    /// The choice with the tuner.
    pub tuned: Option<(A, P)>,
    /// The `nChannels` the tuner returned (0 = NCCL's own).
    pub nchannels: i32,
    /// The tuner chose an entry NCCL had marked unavailable (-1).
    pub was_ignored: bool,
    /// NCCL's model time of the tuned choice at `lo` and `hi` (µs; `None` where the
    /// model has no time for it).
    pub t_lo: Option<f32>,
    /// See `t_lo`.
    pub t_hi: Option<f32>,
}

impl TunerRow {
    /// Whether the tuner changed anything in this row.
    pub fn changed(&self) -> bool {
        self.tuned != Some(self.nccl) || self.nchannels != 0
    }
}

/// The tuner's effect on `f` for every power-of-two size from `min` to `max`: `base`
/// is NCCL without the tuner, `with` NCCL with the tuner's constants, and
/// `get_coll_info` the tuner's `getCollInfo` on a cost table (returning its
/// `nChannels`). Consecutive sizes with the same (NCCL, tuned, nChannels) form a row.
///
/// Errors: whatever `get_coll_info` returns (NCCL fails the operation).
pub fn tuner_rows<E>(
    base: &GpuTuning,
    with: &GpuTuning,
    f: F,
    min: usize,
    max: usize,
    get_coll_info: &mut dyn FnMut(F, usize, &mut CostTable) -> Result<i32, E>,
) -> Result<Vec<TunerRow>, E> {
    let mut rows: Vec<TunerRow> = Vec::new();
    let mut n = min.max(1);
    while n <= max {
        if let Some((a0, p0, _)) = select::pick(&base.cost_table(f, n)) {
            let before = with.cost_table(f, n);
            let mut t = before;
            let nch = get_coll_info(f, n, &mut t)?;
            let tuned = select::pick(&t).map(|(a, p, _)| (a, p));
            let was_ignored = tuned.is_some_and(|(a, p)| before[a.index()][p.index()] == select::IGNORE);
            let time = tuned.and_then(|(a, p)| with.model.algo_time(f, a, p, n, 1));
            match rows.last_mut() {
                Some(r) if r.nccl == (a0, p0) && r.tuned == tuned && r.nchannels == nch => {
                    r.hi = n;
                    r.t_hi = time;
                    r.was_ignored |= was_ignored;
                }
                _ => rows.push(TunerRow {
                    lo: n,
                    hi: n,
                    nccl: (a0, p0),
                    tuned,
                    nchannels: nch,
                    was_ignored,
                    t_lo: time,
                    t_hi: time,
                }),
            }
        }
        match n.checked_mul(2) {
            Some(x) => n = x,
            None => break,
        }
    }
    Ok(rows)
}
