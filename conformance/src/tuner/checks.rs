//! The tuner checks: each an id, a one-line rule, the reference section it comes
//! from, a level and the API versions it applies to, and a body that drives the
//! plugin through the host's adapter with NCCL's own cost tables.

use std::sync::Arc;

use ferroccl::plugin::tuner::{NvlDomainInfo, TunerAdapter, TunerContext, TunerError};
use ferroccl::tune::constants::TunerConstants;
use ferroccl::tune::enable::EnableMatrix;
use ferroccl::tune::ids::{Algorithm, Func, Protocol};
use ferroccl::tune::model::*;
use ferroccl::tune::select::{self, ChunkGeometry, CostTable, IGNORE, TableSupport};
use ferroccl_plugin_api::abi::ncclTunerConstants_v5_t;

use super::worker::enter;
use crate::outcome::{Res, Stop};
use crate::registry::Level;
use crate::{ensure, fail};

/// What a check body works with.
#[derive(Debug)]
pub struct TunerCx {
    /// The plugin, loaded for the version under test.
    pub adapter: Arc<TunerAdapter>,
    /// API version under test.
    pub version: u32,
    /// Extra observations for the report.
    pub notes: Vec<String>,
}

/// One tuner check (id `tuner.*`; the record every plugin section uses).
/// Reference sections: `§3.1` = ABI, `§3.5` = how NCCL calls a tuner, `§5.3` = loading.
pub type TunerCheck = crate::section::SectionCheck<TunerCx>;

/// Every tuner check, in run order.
pub fn all() -> Vec<TunerCheck> {
    let c = |id, section, rule, level, min_version, body| TunerCheck {
        id,
        section,
        rule,
        level,
        min_version,
        max_version: 6,
        body,
    };
    vec![
        c(
            "tuner.load",
            "§5.3",
            "the library exports ncclTunerPlugin_vN with a non-NULL, non-empty name",
            Level::Required,
            2,
            load,
        ),
        c(
            "tuner.init",
            "§3.1",
            "init succeeds for a realistic communicator and (v5+) leaves every constant finite and >= 0",
            Level::Required,
            2,
            init,
        ),
        c(
            "tuner.coll_info.errors",
            "§3.5",
            "getCollInfo returns ncclSuccess for every function and size on NCCL's own cost tables",
            Level::Required,
            2,
            coll_errors,
        ),
        c(
            "tuner.coll_info.bounds",
            "§3.1",
            "getCollInfo writes only inside the 7x3 cost table (a flat float[7][3] passed as float**)",
            Level::Required,
            3,
            coll_bounds,
        ),
        c(
            "tuner.coll_info.values",
            "§3.5",
            "after getCollInfo every table entry is a finite number and nChannels is >= 0",
            Level::Required,
            2,
            coll_values,
        ),
        c(
            "tuner.coll_info.ignore",
            "§3.5",
            "entries NCCL marked -1 (impossible) stay -1, and forbidding uses -1 exactly (NCCL would run a forced impossible entry)",
            Level::Advisory,
            3,
            coll_ignore,
        ),
        c(
            "tuner.coll_info.deterministic",
            "§3.5",
            "the same inputs give the same table and nChannels (every rank must choose alike, or collectives mismatch)",
            Level::Required,
            2,
            coll_deterministic,
        ),
        c(
            "tuner.multi_comm",
            "§3.5",
            "several communicators' contexts live at once, are called from several threads and finalized in any order",
            Level::Required,
            2,
            multi_comm,
        ),
        c(
            "tuner.chunk_size",
            "§3.5",
            "getChunkSize (v6, optional) returns ncclSuccess and a chunk size > 0",
            Level::Required,
            6,
            chunk_size,
        ),
        c(
            "tuner.finalize",
            "§3.5",
            "finalize (destroy before v5) succeeds, and a context created afterwards works",
            Level::Required,
            2,
            finalize,
        ),
    ]
}

/// A machine the tables are computed for.
#[derive(Debug, Clone)]
pub struct Machine {
    /// Description.
    pub name: &'static str,
    /// Model inputs.
    pub input: ModelInput,
    /// Graphs.
    pub graphs: GraphInfo,
    /// Constants.
    pub constants: TunerConstants,
}

fn gpu_input(nranks: usize, nnodes: usize, cc: i32) -> ModelInput {
    ModelInput::gpu_cluster(nranks, nnodes, cc)
}

fn pattern(nch: usize, intra: f32, inter: f32, ti: u8, tn: u8, lat: f32) -> PatternInfo {
    PatternInfo {
        nchannels: nch,
        bw_intra: intra,
        bw_inter: inter,
        type_intra: ti,
        type_inter: tn,
        latency_inter: lat,
        same_channels: true,
    }
}

fn graphs(p: PatternInfo) -> GraphInfo {
    GraphInfo {
        tree: p,
        ring: p,
        collnet_direct: PatternInfo::NONE,
        collnet_chain: PatternInfo::NONE,
        nvls: PatternInfo::NONE,
        max_tree_pattern: PATTERN_BALANCED_TREE,
    }
}

/// The machines: one 8-GPU Hopper node, four of them over the network, two
/// single-GPU Ampere nodes, and a 4-rank CPU host.
pub fn machines() -> Vec<Machine> {
    use ferroccl::tune::host;
    let h = host::HostFacts {
        nranks: 4,
        nnodes: 1,
        min_local_ranks: 4,
        max_local_ranks: 4,
        local_ranks: 4,
        nchannels: 2,
        net_speed_mbps: 10_000,
        net_latency_us: 0.0,
        cores: 2,
    };
    vec![
        Machine {
            name: "1 node x 8 H100 (NVLink)",
            input: gpu_input(8, 1, 90),
            graphs: graphs(pattern(16, 20.0, 20.0, path::NVL, path::PIX, 0.0)),
            constants: TunerConstants::nccl_gpu(),
        },
        Machine {
            name: "4 nodes x 8 H100 (network)",
            input: gpu_input(32, 4, 90),
            graphs: graphs(pattern(16, 20.0, 12.0, path::NVL, path::PIX, 2.0)),
            constants: TunerConstants::nccl_gpu(),
        },
        Machine {
            name: "2 nodes x 1 A100",
            input: gpu_input(2, 2, 80),
            graphs: graphs(pattern(4, 12.0, 6.0, path::LOC, path::PXB, 2.0)),
            constants: TunerConstants::nccl_gpu(),
        },
        Machine {
            name: "CPU host, 4 ranks (ferroccl)",
            input: host::model_input(&h, ModelParams::default()),
            graphs: host::graph_info(&h),
            constants: TunerConstants::cpu_host(),
        },
    ]
}

/// One getCollInfo call's inputs.
#[derive(Debug, Clone)]
pub struct Case {
    /// Which machine.
    pub machine: &'static str,
    /// Function index.
    pub func: usize,
    /// `nBytes`.
    pub nbytes: usize,
    /// `numPipeOps`.
    pub pipe: usize,
    /// NCCL's table.
    pub table: CostTable,
}

impl Case {
    fn describe(&self) -> String {
        format!(
            "{} on {} bytes (numPipeOps {}) for {}",
            Func::from_index(self.func).map_or("?", |f| f.name()),
            self.nbytes,
            self.pipe,
            self.machine
        )
    }
}

/// Every function × 8 B … 1 GiB (×64 steps) × numPipeOps {1, 4} on every machine.
pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for m in machines() {
        let mut c = m.constants;
        let model = tune_model(&m.input, &m.graphs, &mut c, &EnableMatrix::default(), &ALL_RUNNABLE);
        let s = TableSupport {
            max_local_ranks: m.input.max_local_ranks,
            local_ranks: m.input.max_local_ranks,
            ..TableSupport::default()
        };
        for f in Func::ALL {
            let mut nbytes = 8usize;
            while nbytes <= 1 << 30 {
                for pipe in [1, 4] {
                    out.push(Case {
                        machine: m.name,
                        func: f.index(),
                        nbytes,
                        pipe,
                        table: select::coll_cost_table(&model, f, nbytes, pipe, &s),
                    });
                }
                nbytes *= 64;
            }
        }
    }
    out
}

fn tuner_fail(call: &str, e: &TunerError) -> Stop {
    fail!(format!("{call} returns ncclSuccess"), "{e}")
}

/// `init` as NCCL calls it for an 8-rank, 2-node communicator (4 ranks per NVLink domain).
pub fn init_ctx(cx: &TunerCx, comm_id: u64) -> Res<(TunerContext, ncclTunerConstants_v5_t)> {
    let mut c = TunerConstants::nccl_gpu().to_abi();
    let nvl = NvlDomainInfo {
        n_domains: 2,
        min_ranks: 4,
        max_ranks: 4,
    };
    let _g = enter("init");
    let ctx = cx
        .adapter
        .init(comm_id, 8, 2, nvl, &mut c)
        .map_err(|e| tuner_fail("init", &e))?;
    Ok((ctx, c))
}

fn call(ctx: &TunerContext, case: &Case) -> Result<(CostTable, i32), TunerError> {
    let mut t = case.table;
    let _g = enter("getCollInfo");
    let info = ctx.get_coll_info(case.func, case.nbytes, case.pipe, false, &mut t)?;
    Ok((t, info.nchannels))
}

fn load(cx: &mut TunerCx) -> Res {
    ensure!(
        !cx.adapter.name().is_empty(),
        "a non-NULL, non-empty name (NCCL logs it and compares it)",
        "the name is NULL or empty"
    );
    if cx.version == 6 && !cx.adapter.has_chunk_size() {
        cx.notes
            .push("getChunkSize is NULL (allowed: NCCL keeps its chunk size)".into());
    }
    Ok(())
}

fn init(cx: &mut TunerCx) -> Res {
    let (ctx, c) = init_ctx(cx, 0x1234)?;
    if cx.version >= 5 {
        let back = TunerConstants::from_abi(&c);
        if let Some(bad) = back.first_invalid() {
            return Err(fail!(
                "every constant finite and >= 0 after init (NCCL's model reads them back)",
                "init left {bad}"
            ));
        }
        if back != TunerConstants::nccl_gpu() {
            cx.notes.push("init changed NCCL's tuning constants".into());
        }
    }
    let _g = enter("finalize");
    ctx.finalize().map_err(|e| tuner_fail("finalize", &e))
}

fn sweep(cx: &mut TunerCx, mut each: impl FnMut(&Case, Result<(CostTable, i32), TunerError>) -> Res) -> Res {
    let (ctx, _) = init_ctx(cx, 0x5678)?;
    for case in cases() {
        let r = call(&ctx, &case);
        each(&case, r)?;
    }
    let _g = enter("finalize");
    ctx.finalize().map_err(|e| tuner_fail("finalize", &e))
}

fn coll_errors(cx: &mut TunerCx) -> Res {
    sweep(cx, |case, r| match r {
        Err(e @ TunerError::Call { .. }) => Err(fail!(
            "getCollInfo returns ncclSuccess (NCCL propagates an error: the collective fails)",
            "{} for {}",
            e,
            case.describe()
        )),
        _ => Ok(()),
    })
}

fn coll_bounds(cx: &mut TunerCx) -> Res {
    sweep(cx, |case, r| match r {
        Err(e @ TunerError::OutOfBounds { .. }) => Err(fail!(
            "writes only inside the 7x3 table (NCCL's table is a stack array: anything else corrupts NCCL's memory)",
            "{} for {}",
            e,
            case.describe()
        )),
        _ => Ok(()),
    })
}

fn coll_values(cx: &mut TunerCx) -> Res {
    sweep(cx, |case, r| {
        let Ok((t, nch)) = r else { return Ok(()) };
        for (a, row) in t.iter().enumerate() {
            for (p, v) in row.iter().enumerate() {
                ensure!(
                    v.is_finite(),
                    "finite table entries (NCCL compares them to pick the cheapest)",
                    "entry [{}][{}] = {v} for {}",
                    Algorithm::from_index(a).map_or("?", |x| x.name()),
                    Protocol::from_index(p).map_or("?", |x| x.name()),
                    case.describe()
                );
            }
        }
        ensure!(
            nch >= 0,
            "nChannels >= 0 (0 keeps NCCL's count)",
            "nChannels = {nch} for {}",
            case.describe()
        );
        Ok(())
    })
}

fn coll_ignore(cx: &mut TunerCx) -> Res {
    sweep(cx, |case, r| {
        let Ok((t, _)) = r else { return Ok(()) };
        for (a, (row_before, row_after)) in case.table.iter().zip(t.iter()).enumerate() {
            for (p, (&before, &after)) in row_before.iter().zip(row_after).enumerate() {
                let name = || {
                    format!(
                        "{}/{}",
                        Algorithm::from_index(a).map_or("?", |x| x.name()),
                        Protocol::from_index(p).map_or("?", |x| x.name())
                    )
                };
                ensure!(
                    !(before == IGNORE && after >= 0.0),
                    "entries NCCL marked -1 stay -1",
                    "{} was -1 and the tuner set it to {after} for {}",
                    name(),
                    case.describe()
                );
                ensure!(
                    !(after < 0.0 && after != IGNORE),
                    "forbidding with exactly -1.0 (NCCL_ALGO_PROTO_IGNORE)",
                    "{} set to {after} for {}",
                    name(),
                    case.describe()
                );
            }
        }
        Ok(())
    })
}

fn coll_deterministic(cx: &mut TunerCx) -> Res {
    let (ctx, _) = init_ctx(cx, 0x9abc)?;
    for case in cases().into_iter().step_by(3) {
        let a = call(&ctx, &case);
        let b = call(&ctx, &case);
        if let (Ok(a), Ok(b)) = (&a, &b) {
            let same = a.1 == b.1
                && a.0
                    .iter()
                    .flatten()
                    .zip(b.0.iter().flatten())
                    .all(|(x, y)| x.to_bits() == y.to_bits());
            ensure!(
                same,
                "the same result for the same inputs",
                "two calls for {} gave different results: {:?} / {:?}",
                case.describe(),
                a,
                b
            );
        }
    }
    let _g = enter("finalize");
    ctx.finalize().map_err(|e| tuner_fail("finalize", &e))
}

fn multi_comm(cx: &mut TunerCx) -> Res {
    let cases: Arc<Vec<Case>> = Arc::new(cases().into_iter().step_by(7).collect());
    let mut ctxs = Vec::new();
    for i in 0..3u64 {
        ctxs.push(init_ctx(cx, 0x100 + i)?.0);
    }
    // Reference results, one context at a time.
    let mut want = Vec::new();
    for ctx in &ctxs {
        want.push(cases.iter().map(|c| call(ctx, c).ok()).collect::<Vec<_>>());
    }
    let got: Vec<Vec<Option<(CostTable, i32)>>> = std::thread::scope(|s| {
        let hs: Vec<_> = ctxs
            .iter()
            .map(|ctx| {
                let cases = cases.clone();
                s.spawn(move || {
                    let mut last = Vec::new();
                    for _ in 0..5 {
                        last = cases.iter().map(|c| call(ctx, c).ok()).collect();
                    }
                    last
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        ensure!(
            g.len() == w.len() && g.iter().zip(w).all(|(a, b)| a == b),
            "each context answers the same from any thread, alongside other contexts",
            "context {i} gave different results when three contexts were called concurrently"
        );
    }
    // Finalize in another order than created.
    for (i, ctx) in ctxs.into_iter().enumerate().rev() {
        let _g = enter("finalize");
        ctx.finalize()
            .map_err(|e| fail!("finalize of every context succeeds", "context {i}: {e}"))?;
    }
    Ok(())
}

fn chunk_size(cx: &mut TunerCx) -> Res {
    if !cx.adapter.has_chunk_size() {
        return Err(Stop::Skip("getChunkSize is NULL (optional)".into()));
    }
    let (ctx, _) = init_ctx(cx, 0xdef0)?;
    let g = ChunkGeometry::nccl_default();
    for f in Func::ALL {
        for (a, p) in [
            (Algorithm::Ring, Protocol::Simple),
            (Algorithm::Ring, Protocol::Ll),
            (Algorithm::Tree, Protocol::Ll128),
        ] {
            for nbytes in [4096usize, 1 << 20, 1 << 28] {
                let mut c = select::chunk_size(&g, f, a, p, nbytes, 1, 1, 8.0);
                let _g = enter("getChunkSize");
                ctx.get_chunk_size(f.index(), nbytes, a.index(), p.index(), 1, &mut c)
                    .map_err(|e| tuner_fail("getChunkSize", &e))?;
                ensure!(
                    c > 0,
                    "a chunk size > 0 (NCCL rounds it down to the protocol grain)",
                    "0 for {} {}/{} on {nbytes} bytes",
                    f.name(),
                    a.name(),
                    p.name()
                );
            }
        }
    }
    let _g = enter("finalize");
    ctx.finalize().map_err(|e| tuner_fail("finalize", &e))
}

fn finalize(cx: &mut TunerCx) -> Res {
    let (ctx, _) = init_ctx(cx, 1)?;
    {
        let _g = enter("finalize");
        ctx.finalize().map_err(|e| tuner_fail("finalize", &e))?;
    }
    // A communicator created after another was destroyed (its calls are the
    // other checks' business; here only its life cycle).
    let (ctx, _) = init_ctx(cx, 2)?;
    let _g = enter("finalize");
    ctx.finalize().map_err(|e| tuner_fail("finalize", &e))
}
