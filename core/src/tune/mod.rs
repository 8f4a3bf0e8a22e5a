//! Tuning: which algorithm, protocol, channel count and chunk size each
//! collective runs with (NCCL's `src/graph/tuning.cc` and the selection half of
//! `src/enqueue.cc`; reference `docs/reference/nccl-graph-tuning.md` §3). The schedule builder
//! only obeys the [`Decision`] made here.
//!
//! * [`model`] — NCCL 2.30.7's cost model, exact and free of I/O: per function,
//!   algorithm and protocol a latency and a bandwidth ([`model::tune_model`]),
//!   and the time of one operation ([`model::Model::algo_time`]). The same code
//!   gives NCCL's numbers for a GPU machine ([`constants::TunerConstants::nccl_gpu`])
//!   and ferroccl's for a host ([`constants::TunerConstants::cpu_host`], inputs
//!   from [`host`]).
//! * [`enable`] — `NCCL_ALGO` / `NCCL_PROTO` with NCCL's grammar.
//! * [`select`] — the cost table, the pick, channels and threads, chunk sizes.
//! * [`table`] — the `NCCL_DEBUG_SUBSYS=TUNING` table.
//! * [`gpu`] — the model and the choices of a GPU communicator described by a
//!   topology (what `ferroccl-topo` prints).
//! * [`Tuning`] — one communicator's tuning state: the model, the user's enable
//!   matrix, the tuner plugin's context (consulted on every collective with the
//!   real cost table), and the runnable set (what the host's data path can run:
//!   an input, so protocols added later are chosen as soon as they exist).

pub mod constants;
pub mod enable;
pub mod gpu;
pub mod host;
/// NCCL's function, algorithm and protocol ids (they live with the plans that
/// run them, [`crate::coll::ids`]).
pub use crate::coll::ids;
pub mod model;
pub mod select;
pub mod table;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ferroccl_kernels::{DataType, RedOp};

pub use ids::{Algorithm, Func, Protocol};

pub use crate::coll::Decision;
use crate::coll::{CollArgs, CollKind, PerOp};
use crate::config::Config;
use crate::error::Error;
use crate::plugin::tuner::{NvlDomainInfo, TunerAdapter, TunerContext, TunerError};
use constants::TunerConstants;
use enable::EnableMatrix;
use host::HostFacts;
use model::{Model, ModelParams, Runnable};
use select::{ChunkGeometry, CostTable, IGNORE, TableSupport};

/// Tuning parameters, read once per communicator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TuneParams {
    /// `NCCL_ALGO` / `NCCL_PROTO`, parsed.
    pub enable: EnableMatrix,
    /// The model's parameters.
    pub model: ModelParams,
    /// `FERROCCL_MIN_CHANNEL_BYTES`: bytes a channel must get before another is
    /// used (the host's `threadThresholds`, one thread per channel; default 16 MiB,
    /// see `BENCHMARKS.md`).
    pub min_channel_bytes: usize,
    /// `FERROCCL_SMALL_ALLREDUCE_BYTES`: largest Ring/Simple AllReduce that may
    /// run as all-gather + local reduction ([`Decision::allgather_reduce`]) when
    /// the model prices it lower.
    pub small_allreduce_bytes: usize,
}

impl TuneParams {
    /// Reads the parameters from the process configuration.
    ///
    /// Errors: [`Error::InvalidUsage`] for a value of `NCCL_ALGO` / `NCCL_PROTO`
    /// NCCL would refuse (the message names the token), [`Error::Config`] for
    /// numbers out of range.
    pub fn from_config(cfg: &Config) -> Result<TuneParams, Error> {
        use crate::config::params::{self, tune as p};
        use crate::config::{IntParamExt, StrParamExt};
        let int = |p: &crate::config::IntParam| p.get(cfg).map_err(Error::Config);
        let enable = EnableMatrix::parse(params::PROTO.get(cfg), params::ALGO.get(cfg)).map_err(|e| {
            crate::log::nccl_warn!("{e}");
            Error::InvalidUsage(e.to_string())
        })?;
        Ok(TuneParams {
            enable,
            model: ModelParams {
                nthreads: int(&p::NTHREADS)?,
                ll128_nthreads: int(&p::LL128_NTHREADS)?,
                pat_enable: int(&p::PAT_ENABLE)?,
                ll128_c2c: int(&p::LL128_C2C)? != 0,
                net_overhead_ns: int(&p::NET_OVERHEAD)?,
                thread_thresholds: p::THREAD_THRESHOLDS.get(cfg).map(str::to_owned),
            },
            min_channel_bytes: int(&params::MIN_CHANNEL_BYTES)? as usize,
            small_allreduce_bytes: int(&p::SMALL_ALLREDUCE_BYTES)? as usize,
        })
    }
}

/// Everything a communicator's tuning is built from.
#[derive(Debug, Clone)]
pub struct TuningSetup {
    /// This rank (rank 0 prints the tables).
    pub rank: usize,
    /// Ranks, nodes, channels, the net device.
    pub facts: HostFacts,
    /// Communicator id (the tuner's `commId`).
    pub comm_id: u64,
    /// Bytes of payload per FIFO step of collective connections (Simple).
    pub simple_step_bytes: usize,
    /// Protocols the data path can run.
    pub protocols: Vec<Protocol>,
    /// Parameters.
    pub params: TuneParams,
    /// CollNet connected on every channel: the (operation, datatype) pairs every
    /// rank's plugin reduces (`None`: no CollNet).
    pub collnet: Option<crate::plugin::collnet::SupportMatrix>,
    /// `(iallgather, ireducescatter)`: the CollNet plugin runs AllGather /
    /// ReduceScatter (`coll::collnet_agrs`; used only with `collnet`).
    pub collnet_sge: (bool, bool),
    /// CollNetDirect heads per host and channel (`comm->collNetHeadsNum`, from the
    /// CollNetDirect graph search or the host layout,
    /// [`crate::graph::collnet::direct_nheads`]), as the connection setup connected
    /// them; `None`: CollNetDirect cannot run (used only with `collnet`).
    pub collnet_heads: Option<usize>,
}

/// Host chunk geometry: Ring/Simple chunks of this many FIFO steps for every
/// function (NCCL uses 4 for AllReduce/AllGather/ReduceScatter and 1 for
/// Broadcast/Reduce; on the host one step is one slice, and two slices per chunk
/// keep one in flight while the next is reduced).
pub const HOST_RING_CHUNK_STEPS: usize = 2;

/// A communicator's tuning state (thread-safe; decisions are made on the
/// thread that enqueues, as NCCL decides at `ncclGroupEnd`).
pub struct Tuning {
    rank: usize,
    model: Model,
    enable: EnableMatrix,
    constants: TunerConstants,
    geometry: ChunkGeometry,
    runnable: Runnable,
    protocols: Vec<Protocol>,
    facts: HostFacts,
    small_allreduce_bytes: usize,
    tuner: Mutex<Option<TunerContext>>,
    tuner_name: Option<String>,
    /// The last decision per function (for tools and tests).
    last: Mutex<BTreeMap<Func, Decision>>,
    /// (func, algo, proto) a tuner forced that the host cannot run, already warned about.
    warned: Mutex<Vec<(Func, Algorithm, Protocol)>>,
    /// The last single collective decided without a tuner plugin, for a repeat
    /// of it (function, count, datatype, reduction).
    repeat: Mutex<Option<RepeatKey>>,
    /// What CollNet reduces, when it is connected.
    collnet: Option<crate::plugin::collnet::SupportMatrix>,
    /// AllGather / ReduceScatter runnable over CollNet (see [`TuningSetup::collnet_sge`]).
    collnet_sge: (bool, bool),
    /// CollNetDirect heads per host and channel (see [`TuningSetup::collnet_heads`]).
    collnet_heads: Option<usize>,
}

impl std::fmt::Debug for Tuning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tuning")
            .field("rank", &self.rank)
            .field("facts", &self.facts)
            .field("tuner", &self.tuner_name)
            .finish()
    }
}

/// A decided single collective: (function, count, datatype, reduction) and its decision.
type RepeatKey = ((Func, usize, DataType, RedOp), Decision);

/// Maps a tuner failure to the error NCCL would return (the plugin's own code
/// for a failed call).
fn tuner_error(e: &TunerError) -> Error {
    match e {
        TunerError::Call { code, .. } if code.ends_with("(4)") => Error::InvalidArgument(e.to_string()),
        TunerError::Call { code, .. } if code.ends_with("(5)") => Error::InvalidUsage(e.to_string()),
        _ => Error::Internal(e.to_string()),
    }
}

impl Tuning {
    /// Builds the tuning of a communicator: initialises the tuner (if any) with the
    /// host constants, runs the model, logs the tables (rank 0).
    ///
    /// Errors: the tuner's `init` failing fails communicator creation, as in NCCL.
    pub fn new(s: TuningSetup, tuner: Option<Arc<TunerAdapter>>) -> Result<Tuning, Error> {
        let f = &s.facts;
        let mut constants = TunerConstants::cpu_host_oversubscribed(f.oversubscription());
        let mut ctx = None;
        let mut tuner_name = None;
        if let Some(t) = tuner {
            let mut abi = constants.to_abi();
            let nvl = NvlDomainInfo {
                n_domains: f.nnodes as i32,
                min_ranks: f.min_local_ranks as i32,
                max_ranks: f.max_local_ranks as i32,
            };
            crate::log::nccl_info!(TUNING, "TUNER/Plugin: Using {} (v{})", t.name(), t.version());
            let c = t.init(s.comm_id, f.nranks, f.nnodes, nvl, &mut abi).map_err(|e| {
                crate::log::nccl_warn!("TUNER/Plugin: {e}");
                tuner_error(&e)
            })?;
            if t.version() >= 5 {
                let back = TunerConstants::from_abi(&abi);
                match back.first_invalid() {
                    None => constants = back,
                    Some(bad) => crate::log::nccl_warn!(
                        "TUNER/Plugin: tuner '{}' init left an invalid constant ({bad}); keeping the defaults",
                        t.name()
                    ),
                }
            }
            crate::log::nccl_info!(TUNING, "Successfully loaded external tuner plugin {}", t.name());
            tuner_name = Some(t.name().to_owned());
            ctx = Some(c);
        }
        let mut runnable = host::runnable(&s.protocols);
        let mut inp = host::model_input(f, s.params.model.clone());
        let mut graphs = host::graph_info(f);
        // AllGather/ReduceScatter over CollNet: one collComm member per host,
        // so every host must have as many ranks (`coll::collnet_agrs`).
        let collnet_sge = if s.collnet.is_some() && f.min_local_ranks == f.max_local_ranks {
            s.collnet_sge
        } else {
            (false, false)
        };
        let collnet_heads = s.collnet.and(s.collnet_heads);
        if s.collnet.is_some() {
            let yes = |b: bool| if b { "on" } else { "off" };
            crate::log::nccl_info!(
                INIT,
                "CollNet AllGather {} ReduceScatter {} (CollNetDirect: {} heads, iallgather {}, ireducescatter {}, {}..{} ranks per host)",
                yes(collnet_sge.0),
                yes(collnet_sge.1),
                collnet_heads.unwrap_or(0),
                yes(s.collnet_sge.0),
                yes(s.collnet_sge.1),
                f.min_local_ranks,
                f.max_local_ranks
            );
            host::with_collnet(
                &mut runnable,
                &mut inp,
                &mut graphs,
                host::CollNetGates {
                    direct_heads: collnet_heads,
                    sge: collnet_sge,
                },
            );
        }
        let mut model = model::tune_model(&inp, &graphs, &mut constants, &s.params.enable, &runnable);
        // A host channel is one CPU thread: the thread-count rules of the GPU model
        // become one thread per channel and a byte threshold per channel.
        model.max_threads = [[1; ids::NUM_PROTOS]; ids::NUM_ALGOS];
        model.thread_thresholds = [[s.params.min_channel_bytes as i64; ids::NUM_PROTOS]; ids::NUM_ALGOS];
        if let Some(t) = &s.params.model.thread_thresholds {
            let vals: Vec<i64> = t.split_whitespace().map_while(|v| v.parse().ok()).take(6).collect();
            for (i, v) in vals.into_iter().enumerate() {
                if v >= 0 {
                    model.thread_thresholds[i / 3][i % 3] = v;
                }
            }
        }
        for n in &model.notes {
            crate::log::nccl_info!(ENV, "{n}");
        }
        for (var, set) in [
            (
                crate::config::params::tune::NTHREADS.name,
                s.params.model.nthreads != -2,
            ),
            (
                crate::config::params::tune::LL128_NTHREADS.name,
                s.params.model.ll128_nthreads != -2,
            ),
        ] {
            if set {
                crate::log::nccl_info!(
                    ENV,
                    "{var} has no effect on a CPU host: a channel is one thread (channels follow FERROCCL_MIN_CHANNEL_BYTES / NCCL_THREAD_THRESHOLDS)"
                );
            }
        }
        let mut geometry = ChunkGeometry::nccl_default();
        geometry.step_bytes[Protocol::Simple.index()] = s.simple_step_bytes;
        geometry.grain[Protocol::Simple.index()] = 64;
        geometry.ring_simple_chunk_steps = [HOST_RING_CHUNK_STEPS; ids::NUM_FUNCS];
        let t = Tuning {
            rank: s.rank,
            model,
            enable: s.params.enable.clone(),
            constants,
            geometry,
            runnable,
            protocols: s.protocols.clone(),
            facts: s.facts.clone(),
            small_allreduce_bytes: s.params.small_allreduce_bytes,
            tuner: Mutex::new(ctx),
            tuner_name,
            last: Mutex::new(BTreeMap::new()),
            warned: Mutex::new(Vec::new()),
            repeat: Mutex::new(None),
            collnet: s.collnet,
            collnet_sge,
            collnet_heads,
        };
        t.log_init();
        Ok(t)
    }

    fn log_init(&self) {
        if self.rank != 0 {
            return;
        }
        if self.enable.user_set() {
            crate::log::nccl_info!(ENV, "Enabled NCCL Func/Proto/Algo Matrix:{}", self.enable.matrix_text());
        }
        for line in table::lines(&self.model) {
            crate::log::nccl_info!(TUNING, "{line}");
        }
        crate::log::nccl_info!(INIT, "{}", table::thread_thresholds_line(&self.model));
        // A function left with nothing it can run fails every call; say so now.
        for func in Func::ALL {
            if !self.model.bandwidths[func.index()].iter().flatten().any(|&b| b > 0.0) && self.model.nranks > 1 {
                crate::log::nccl_warn!(
                    "{}: no algorithm/protocol is enabled and runnable for {} ({}); every {} call will fail",
                    self.settings_text(),
                    func.name(),
                    self.runnable_text(func),
                    func.name()
                );
            }
        }
    }

    /// `NCCL_ALGO=… NCCL_PROTO=…` as set, for messages.
    fn settings_text(&self) -> String {
        let mut v = Vec::new();
        if let Some(a) = &self.enable.algo_str {
            v.push(format!("NCCL_ALGO={a}"));
        }
        if let Some(p) = &self.enable.proto_str {
            v.push(format!("NCCL_PROTO={p}"));
        }
        if v.is_empty() { "defaults".into() } else { v.join(" ") }
    }

    /// What the host can run for `func`, e.g. `this runtime runs Ring/Simple, Tree/Simple`.
    fn runnable_text(&self, func: Func) -> String {
        let mut v = Vec::new();
        for a in Algorithm::ALL {
            for p in Protocol::ALL {
                if self.runnable[func.index()][a.index()][p.index()] {
                    v.push(format!("{}/{}", a.name(), p.name()));
                }
            }
        }
        format!("this runtime runs {}", v.join(", "))
    }

    /// The model (latencies, bandwidths, thread rules).
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The constants the model used (after a v5/v6 tuner's `init`).
    pub fn constants(&self) -> &TunerConstants {
        &self.constants
    }

    /// The protocols the data path runs.
    pub fn protocols(&self) -> &[Protocol] {
        &self.protocols
    }

    /// The tuner plugin's name, if one is in use.
    pub fn tuner_name(&self) -> Option<&str> {
        self.tuner_name.as_deref()
    }

    /// The last decision made for `func` on this communicator.
    pub fn last(&self, func: Func) -> Option<Decision> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).get(&func).copied()
    }

    /// `finalize` of the tuner context (once; later calls do nothing).
    pub fn finalize(&self) {
        let ctx = self.tuner.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(c) = ctx {
            let name = c.adapter().name().to_owned();
            if let Err(e) = c.finalize() {
                crate::log::nccl_warn!("TUNER/Plugin: {e}");
            }
            crate::log::nccl_info!(TUNING, "TUNER/Plugin: Closing tuner: '{name}'");
        }
    }

    /// The cost table handed to the tuner for `func` on `nbytes`: NCCL's
    /// (`updateCollCostTable`), except that a host's AllReduce Ring/Simple entry is
    /// the cheaper of its two ring implementations (see [`Decision::allgather_reduce`]).
    pub fn cost_table(&self, func: Func, nbytes: usize, num_pipe_ops: usize, scaled_op: bool) -> CostTable {
        self.cost_table_with(func, nbytes, num_pipe_ops, scaled_op, false)
    }

    /// [`Tuning::cost_table`] with CollNet's entries where `collnet` (the
    /// operation's datatype and reduction are ones CollNet reduces).
    fn cost_table_with(
        &self,
        func: Func,
        nbytes: usize,
        num_pipe_ops: usize,
        scaled_op: bool,
        collnet: bool,
    ) -> CostTable {
        let support = TableSupport {
            collnet,
            nvls: false,
            max_local_ranks: self.facts.max_local_ranks,
            local_ranks: self.facts.local_ranks,
            scaled_op,
            fp8: false,
        };
        let mut t = select::coll_cost_table(&self.model, func, nbytes, num_pipe_ops, &support);
        if func == Func::AllReduce
            && let Some(ag) = self.allgather_reduce_time(nbytes, num_pipe_ops)
        {
            let e = &mut t[Algorithm::Ring.index()][Protocol::Simple.index()];
            if *e >= 0.0 && ag < *e {
                *e = ag;
            }
        }
        t
    }

    /// The model's time (µs) of the all-gather + local reduce AllReduce on
    /// `nbytes`, in the ring model's own terms: the ring's base latency, half its
    /// hops (n-1 instead of 2(n-1)), and n-1 whole buffers per link at the ring's
    /// bus bandwidth. `None` above `FERROCCL_SMALL_ALLREDUCE_BYTES` or where the
    /// ring is not available.
    pub fn allgather_reduce_time(&self, nbytes: usize, num_pipe_ops: usize) -> Option<f32> {
        let n = self.facts.nranks;
        if n < 2 || nbytes > self.small_allreduce_bytes {
            return None;
        }
        let (fi, ri, si) = (
            Func::AllReduce.index(),
            Algorithm::Ring.index(),
            Protocol::Simple.index(),
        );
        let bw = self.model.bandwidths[fi][ri][si];
        if bw <= 0.0 {
            return None;
        }
        let lat = self.model.latencies[fi][ri][si];
        let base = self.constants.base_latencies[ri][si] as f32;
        let nf = n as f32;
        let bus = bw * 2.0 * (nf - 1.0) / nf;
        Some((base + (lat - base) / 2.0) * num_pipe_ops as f32 + nbytes as f32 * (nf - 1.0) / (1000.0 * bus))
    }

    /// Decides every collective of one group (`colls`, in order; `None` for
    /// send/receive), aggregating similar collectives as NCCL's `ncclPrepareTasks`
    /// does: per (function, reduction, datatype), in increasing size, an operation
    /// and the following ones under 4× its traffic share one decision.
    ///
    /// Errors: [`Error::InvalidUsage`] when `NCCL_ALGO`/`NCCL_PROTO` leave nothing
    /// to run; the tuner's error when its `getCollInfo` fails (NCCL propagates it);
    /// [`Error::Internal`] when nothing is runnable otherwise.
    pub(crate) fn decide(&self, colls: &[CollArgs]) -> Result<PerOp<Option<Decision>>, Error> {
        let nranks = self.facts.nranks;
        let mut out: PerOp<Option<Decision>> = smallvec::smallvec![None; colls.len()];
        let n_coll = colls.iter().filter(|a| Func::of(a.kind).is_some()).count();
        let num_pipe_ops = n_coll.div_ceil(self.facts.nchannels.max(1)).max(1);
        // One collective (the common case): its own group, no binning; without
        // a tuner plugin the decision is a pure function of the operation, so a
        // repeat of the last one reuses it.
        if n_coll == 1
            && let Some(i) = colls.iter().position(|a| Func::of(a.kind).is_some())
            && let Some(func) = Func::of(colls[i].kind)
        {
            let a = &colls[i];
            let key = (func, a.count, a.dtype, a.op);
            let cacheable = self.tuner_name.is_none();
            if cacheable
                && let Some((k, d)) = *self.repeat.lock().unwrap_or_else(|e| e.into_inner())
                && k == key
            {
                self.log_decision(func, max_send_recv_bytes(func, a.count, a.dtype, nranks), &d);
                out[i] = Some(d);
                return Ok(out);
            }
            self.decide_group(colls, func, &[i], num_pipe_ops, &mut out)?;
            if cacheable && let Some(d) = out[i] {
                *self.repeat.lock().unwrap_or_else(|e| e.into_inner()) = Some((key, d));
            }
            return Ok(out);
        }
        // Bins keyed by (function, reduction, datatype), tasks sorted by traffic.
        let mut bins: BTreeMap<(Func, String, u8), Vec<(usize, usize)>> = BTreeMap::new();
        for (i, a) in colls.iter().enumerate() {
            let Some(func) = Func::of(a.kind) else { continue };
            let es = a.dtype.size();
            let k = match func {
                Func::AllReduce => 2,
                Func::AllGather | Func::ReduceScatter => nranks,
                _ => 1,
            };
            let op = if matches!(func, Func::AllReduce | Func::ReduceScatter | Func::Reduce) {
                format!("{:?}", a.op)
            } else {
                String::new()
            };
            bins.entry((func, op, a.dtype as u8))
                .or_default()
                .push((a.count * es * k, i));
        }
        for ((func, _, _), mut tasks) in bins {
            tasks.sort();
            let mut j = 0;
            while j < tasks.len() {
                let base = tasks[j].0;
                let mut end = j + 1;
                while end < tasks.len() && tasks[end].0 < 4 * base.max(1) {
                    end += 1;
                }
                let members: Vec<usize> = tasks[j..end].iter().map(|&(_, i)| i).collect();
                self.decide_group(colls, func, &members, num_pipe_ops, &mut out)?;
                j = end;
            }
        }
        Ok(out)
    }

    /// Decides the operations `members` of `colls` (all of `func`, aggregated
    /// as NCCL's `scheduleCollTasksToPlan` groups them) into `out`.
    fn decide_group(
        &self,
        colls: &[CollArgs],
        func: Func,
        members: &[usize],
        num_pipe_ops: usize,
        out: &mut [Option<Decision>],
    ) -> Result<(), Error> {
        let nranks = self.facts.nranks;
        let first = &colls[members[0]];
        let count: usize = members.iter().map(|&i| colls[i].count).sum();
        let nbytes = max_send_recv_bytes(func, count, first.dtype, nranks);
        let scaled = matches!(first.op, RedOp::Avg | RedOp::PreMulSum(_));
        // CollNet (ncclGetCollNetSupport, src/enqueue.cc): an AllReduce whose
        // datatype and reduction (Avg and PreMulSum as Sum) every plugin reduces.
        // AllGather needs no reduction; ReduceScatter one the plugin reduces.
        let supported = self.collnet.is_some_and(|m| m.supports(first.dtype, &first.op));
        let collnet = match func {
            Func::AllReduce => supported,
            Func::AllGather => self.collnet.is_some() && self.collnet_sge.0,
            Func::ReduceScatter => supported && self.collnet_sge.1,
            _ => false,
        };
        let d = self.decide_one(func, nbytes, num_pipe_ops, scaled, first.dtype, collnet)?;
        for &i in members {
            let a = &colls[i];
            let own = max_send_recv_bytes(func, a.count, a.dtype, nranks);
            let mut di = d;
            di.chunk_bytes = self.chunk(func, d.algo, d.proto, own, d.nchannels);
            // Host buffers only (its scratch is pageable host memory; the
            // schedule checks again, for decisions reused from the plan cache).
            di.allgather_reduce = func == Func::AllReduce
                && !a.mem.any_staged()
                && d.algo == Algorithm::Ring
                && d.proto == Protocol::Simple
                && self.allgather_reduce_time(own, 1).is_some_and(|ag| {
                    self.model
                        .algo_time(func, Algorithm::Ring, Protocol::Simple, own, 1)
                        .is_none_or(|rs| ag < rs)
                });
            self.log_decision(func, own, &di);
            self.last.lock().unwrap_or_else(|e| e.into_inner()).insert(func, di);
            out[i] = Some(di);
        }
        Ok(())
    }

    /// Whether a decision is a pure function of the operations it was made
    /// for (no tuner plugin is loaded), so that a repeat of the same
    /// operations may reuse it (the proxy's plan cache does, see
    /// `proxy::ProxyHandle::submit`).
    pub(crate) fn reusable(&self) -> bool {
        self.tuner_name.is_none()
    }

    /// Logs the reused decisions `plans` of `colls` as [`Tuning::decide`] logs
    /// fresh ones (rank 0).
    pub(crate) fn log_reused(&self, colls: &[CollArgs], plans: &[Option<Decision>]) {
        // Asked first (the check `nccl_info!` makes, on the same callsite
        // target and level): a repeat of the same small operation, logged by
        // nobody, computes no byte counts per operation (issue 35).
        if self.rank != 0
            || !crate::log::__private::tracing::enabled!(target: "nccl::TUNING", crate::log::__private::tracing::Level::INFO)
        {
            return;
        }
        for (a, d) in colls.iter().zip(plans) {
            if let (Some(func), Some(d)) = (Func::of(a.kind), d) {
                self.log_decision(func, max_send_recv_bytes(func, a.count, a.dtype, self.facts.nranks), d);
            }
        }
    }

    /// scheduleCollTasksToPlan's INFO line, per operation (rank 0).
    fn log_decision(&self, func: Func, nbytes: usize, d: &Decision) {
        if self.rank == 0 {
            crate::log::nccl_info!(
                TUNING,
                "{}: {} Bytes -> Algo {} proto {} channel{{Lo..Hi}}={{{}..{}}}",
                func.name(),
                nbytes,
                d.algo.name(),
                d.proto.name(),
                0,
                d.nchannels - 1
            );
        }
    }

    /// The decision for one (aggregated) operation of `func` on `nbytes`.
    fn decide_one(
        &self,
        func: Func,
        nbytes: usize,
        num_pipe_ops: usize,
        scaled_op: bool,
        dtype: DataType,
        collnet: bool,
    ) -> Result<Decision, Error> {
        let mut t = self.cost_table_with(func, nbytes, num_pipe_ops, scaled_op, collnet);
        let before = t;
        let mut tuner_channels = 0i32;
        {
            let guard = self.tuner.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(ctx) = guard.as_ref() {
                match ctx.get_coll_info(func.index(), nbytes, num_pipe_ops, false, &mut t) {
                    Ok(info) => tuner_channels = info.nchannels,
                    Err(e @ TunerError::Call { .. }) => {
                        crate::log::nccl_warn!("TUNER/Plugin: {e}");
                        return Err(tuner_error(&e));
                    }
                    Err(e) => {
                        // Out-of-bounds writes or garbage: the table is NCCL's again.
                        crate::log::nccl_warn!("TUNER/Plugin: {e}; ignoring the tuner for this operation");
                        t = before;
                    }
                }
            }
        }
        // Entries the tuner made available that the host cannot run: warn once each
        // and forbid them (NCCL would run them; here there is no code for them).
        for a in Algorithm::ALL {
            for p in Protocol::ALL {
                let v = t[a.index()][p.index()];
                if v >= 0.0 && !self.runnable[func.index()][a.index()][p.index()] {
                    let key = (func, a, p);
                    let mut w = self.warned.lock().unwrap_or_else(|e| e.into_inner());
                    if !w.contains(&key) {
                        w.push(key);
                        crate::log::nccl_warn!(
                            "TUNER/Plugin: tuner '{}' offers {}/{} for {} ({} us), which this runtime cannot run ({}); choosing among the runnable entries",
                            self.tuner_name.as_deref().unwrap_or("?"),
                            a.name(),
                            p.name(),
                            func.name(),
                            v,
                            self.runnable_text(func)
                        );
                    }
                    t[a.index()][p.index()] = IGNORE;
                }
            }
        }
        let (algo, proto, time) = match select::pick(&t).or_else(|| select::pick(&before)) {
            Some(x) => x,
            None => {
                let mut msg = format!(
                    "No algorithm/protocol available for function {} with datatype {}.",
                    func.name(),
                    dtype
                );
                if let Some(a) = &self.enable.algo_str {
                    msg.push_str(&format!(" NCCL_ALGO was set to {a}."));
                }
                if let Some(p) = &self.enable.proto_str {
                    msg.push_str(&format!(" NCCL_PROTO was set to {p}."));
                }
                msg.push_str(&format!(" ({})", self.runnable_text(func)));
                crate::log::nccl_warn!("{msg}");
                return Err(if self.enable.user_set() {
                    Error::InvalidUsage(msg)
                } else {
                    Error::Internal(msg)
                });
            }
        };
        let comm_ch = self.facts.nchannels.max(1);
        // CollNetDirect's channel count scales with its heads per host
        // (`comm->collNetHeadsNum` in NCCL's topoGetAlgoInfo).
        let heads = self
            .collnet_heads
            .filter(|_| algo == Algorithm::CollNetDirect)
            .unwrap_or(0);
        let res = select::resources(&self.model, algo, proto, nbytes, comm_ch, 0, heads);
        let mut nch = res.nchannels;
        if tuner_channels > 0 {
            nch = (tuner_channels as usize).min(comm_ch);
        } else if tuner_channels < 0 {
            crate::log::nccl_warn!(
                "TUNER/Plugin: tuner '{}' returned nChannels {tuner_channels} for {}; keeping {nch}",
                self.tuner_name.as_deref().unwrap_or("?"),
                func.name()
            );
        }
        let by_tuner = t != before || tuner_channels > 0;
        let chunk = self.chunk(func, algo, proto, nbytes, nch);
        let d = Decision {
            func,
            nbytes,
            num_pipe_ops,
            algo,
            proto,
            nchannels: nch.max(1),
            chunk_bytes: chunk,
            allgather_reduce: false,
            time_us: time,
            by_tuner,
        };
        Ok(d)
    }

    /// `calcCollChunking` for one operation of `nbytes` over `nchannels`: the
    /// chunk of one channel's part, then the tuner's `getChunkSize` (v6), clamped
    /// to the buffer and rounded down to the protocol grain.
    fn chunk(&self, func: Func, algo: Algorithm, proto: Protocol, nbytes: usize, nchannels: usize) -> usize {
        let g = &self.geometry;
        let part = nbytes.div_ceil(nchannels.max(1));
        let ppn = self.facts.nranks as f32 / self.facts.nnodes.max(1) as f32;
        let mut chunk = select::chunk_size(g, func, algo, proto, part, 1, self.facts.nnodes, ppn);
        let max = g.max_chunk(func, algo, proto);
        let guard = self.tuner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ctx) = guard.as_ref() {
            let mut c = chunk;
            match ctx.get_chunk_size(func.index(), part, algo.index(), proto.index(), 1, &mut c) {
                Ok(true) => {
                    if c > max {
                        crate::log::nccl_info!(
                            TUNING,
                            "{}: tuner chunk size {c} exceeds buffer max {max}, clamping",
                            func.name()
                        );
                        c = max;
                    }
                    if select::round_to_grain(g, proto, c) == 0 {
                        crate::log::nccl_warn!(
                            "TUNER/Plugin: tuner chunk size {c} for {} is below the {} grain of {} bytes; keeping {chunk}",
                            func.name(),
                            proto.name(),
                            g.grain[proto.index()]
                        );
                    } else {
                        chunk = c;
                    }
                }
                Ok(false) => {}
                Err(e) => crate::log::nccl_warn!("TUNER/Plugin: {e}; keeping chunk size {chunk}"),
            }
        }
        select::round_to_grain(g, proto, chunk).max(g.grain[proto.index()].min(chunk).max(1))
    }
}

impl Drop for Tuning {
    fn drop(&mut self) {
        self.finalize();
    }
}

/// `ncclFuncMaxSendRecvCount × typeSize`: the bytes NCCL tunes on (the full
/// buffer of AllGather/ReduceScatter).
pub fn max_send_recv_bytes(func: Func, count: usize, dtype: DataType, nranks: usize) -> usize {
    let b = count * dtype.size();
    match func {
        Func::AllGather | Func::ReduceScatter => b * nranks,
        _ => b,
    }
}

/// The function of a collective kind (re-export of [`Func::of`] for callers
/// holding a [`CollKind`]).
pub fn func_of(kind: CollKind) -> Option<Func> {
    Func::of(kind)
}

/// Loads the tuner plugin for a communicator (NCCL's `ncclTunerPluginLoad`,
/// reference `docs/reference/nccl-plugin-abi.md` §5.3): `NCCL_TUNER_PLUGIN` (`none` = no tuner),
/// then the net plugin's own library when `external_net` names one. Failures are
/// logged at INFO and mean "no tuner", as in NCCL; the outcome is sticky for the
/// process.
pub fn load_tuner(
    opts: &crate::plugin::LoadOptions,
    external_net: Option<&std::path::Path>,
) -> Option<Arc<TunerAdapter>> {
    if let Some(v) = &opts.tuner_plugin {
        crate::log::nccl_info!(ENV, "NCCL_TUNER_PLUGIN set by environment to {v}");
    }
    let aux = crate::plugin::tuner_profiler::tuner_loader()
        .load_with_net_path(opts, external_net)
        .ok()?;
    match TunerAdapter::from_aux(&aux) {
        Ok(a) => Some(Arc::new(a)),
        Err(e) => {
            crate::log::nccl_warn!("TUNER/Plugin: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuning(nranks: usize, cores: usize, params: TuneParams) -> Tuning {
        let facts = HostFacts {
            nranks,
            nnodes: 1,
            min_local_ranks: nranks,
            max_local_ranks: nranks,
            local_ranks: nranks,
            nchannels: 2,
            net_speed_mbps: 10_000,
            net_latency_us: 0.0,
            cores,
        };
        Tuning::new(setup(facts, params, None), None).expect("tuning")
    }

    /// The setup every test builds from: rank 1 of comm 7, Simple with 4 MiB
    /// buffers, CollNet as given (`(matrix, (iallgather, ireducescatter))`),
    /// with the heads the host layout gives.
    fn setup(
        facts: HostFacts,
        params: TuneParams,
        collnet: Option<(crate::plugin::collnet::SupportMatrix, (bool, bool))>,
    ) -> TuningSetup {
        let heads = crate::graph::collnet::direct_nheads(0, facts.min_local_ranks, facts.max_local_ranks);
        TuningSetup {
            rank: 1,
            facts,
            comm_id: 7,
            simple_step_bytes: (4 << 20) / 8 - 64,
            protocols: vec![Protocol::Simple],
            params,
            collnet: collnet.map(|c| c.0),
            collnet_sge: collnet.map_or((false, false), |c| c.1),
            collnet_heads: heads,
        }
    }

    fn params() -> TuneParams {
        TuneParams {
            enable: EnableMatrix::default(),
            model: ModelParams::default(),
            min_channel_bytes: 1 << 20,
            small_allreduce_bytes: 256 << 10,
        }
    }

    fn allreduce(count: usize) -> CollArgs {
        CollArgs {
            kind: CollKind::AllReduce,
            send: std::ptr::null(),
            recv: std::ptr::null_mut(),
            count,
            dtype: DataType::Float32,
            op: RedOp::Sum,
            bytes: (0, 0),
            mem: crate::coll::mem::OpMem::HOST,
        }
    }

    #[test]
    fn allgather_reduce_is_priced_not_thresholded() {
        // Two ranks: n-1 = 1 hop of the whole buffer beats 2 hops of halves at any
        // size up to the cap.
        let t = tuning(2, 2, params());
        for count in [2, 4096, 65536] {
            let d = t.decide(&[allreduce(count)]).unwrap()[0].unwrap();
            assert!(d.allgather_reduce, "{}", d.describe());
        }
        let d = t.decide(&[allreduce(1 << 20)]).unwrap()[0].unwrap();
        assert!(!d.allgather_reduce, "above the cap: {}", d.describe());
        // Eight ranks: the variant moves 7 whole buffers per link; only small ones pay.
        let t = tuning(8, 16, params());
        let small = t.decide(&[allreduce(2)]).unwrap()[0].unwrap();
        let large = t.decide(&[allreduce(60_000)]).unwrap()[0].unwrap();
        assert!(small.allgather_reduce, "{}", small.describe());
        assert!(!large.allgather_reduce, "{}", large.describe());
        // The tuner sees the cheaper ring implementation in the Ring/Simple entry.
        let table = t.cost_table(Func::AllReduce, 8, 1, false);
        let ag = t.allgather_reduce_time(8, 1).unwrap();
        assert_eq!(table[1][2], ag);
    }

    /// CollNetDirect AllGather/ReduceScatter rows: offered when CollNet is
    /// connected with the plugin's calls and equal hosts; ReduceScatter only for
    /// pairs `reduceSupport` claims (the others fall back to the ring), NCCL's
    /// `ncclGetCollNetSupport`.
    #[test]
    fn collnet_allgather_reducescatter_rows() {
        let mk = |min_local: usize, sge: (bool, bool)| {
            let facts = HostFacts {
                nranks: 4,
                nnodes: 2,
                min_local_ranks: min_local,
                max_local_ranks: 4 - min_local,
                local_ranks: 2,
                nchannels: 2,
                net_speed_mbps: 10_000,
                net_latency_us: 0.0,
                cores: 8,
            };
            // Every pair but float32 prod.
            let mut m = crate::plugin::collnet::SupportMatrix([[true; 12]; 4]);
            m.0[1][DataType::Float32 as usize] = false;
            Tuning::new(setup(facts, params(), Some((m, sge))), None).expect("tuning")
        };
        let cd = |t: &Tuning, f: Func, op: RedOp| {
            let a = CollArgs {
                kind: f.kind(),
                op,
                ..allreduce(1 << 16)
            };
            let ok = t.collnet.is_some_and(|m| m.supports(a.dtype, &a.op));
            let on = match f {
                Func::AllGather => t.collnet_sge.0,
                _ => ok && t.collnet_sge.1,
            };
            t.cost_table_with(f, 1 << 20, 1, false, on)[Algorithm::CollNetDirect.index()][Protocol::Simple.index()]
        };
        let t = mk(2, (true, true));
        assert!(cd(&t, Func::AllGather, RedOp::Sum) >= 0.0);
        assert!(cd(&t, Func::ReduceScatter, RedOp::Sum) >= 0.0);
        assert!(cd(&t, Func::ReduceScatter, RedOp::Avg) >= 0.0, "Avg is summed");
        assert_eq!(cd(&t, Func::ReduceScatter, RedOp::Prod), IGNORE, "unclaimed");
        // The unclaimed pair is decided for another algorithm.
        let prod = CollArgs {
            kind: CollKind::ReduceScatter,
            op: RedOp::Prod,
            ..allreduce(1 << 16)
        };
        let d = t.decide(&[prod]).unwrap()[0].unwrap();
        assert_ne!(d.algo, Algorithm::CollNetDirect, "{}", d.describe());
        // A plugin without ireducescatter (v6-v8, or a NULL slot): no ReduceScatter row.
        let t = mk(2, (true, false));
        assert!(cd(&t, Func::AllGather, RedOp::Sum) >= 0.0);
        assert_eq!(cd(&t, Func::ReduceScatter, RedOp::Sum), IGNORE);
        // Hosts of 1 and 3 ranks: one bytesPerRank cannot serve both.
        let t = mk(1, (true, true));
        assert_eq!(cd(&t, Func::AllGather, RedOp::Sum), IGNORE);
        assert_eq!(cd(&t, Func::ReduceScatter, RedOp::Sum), IGNORE);
    }

    /// One gate decides every CollNet row from the heads (NCCL's
    /// `ncclTopoTuneModel`: AllGather/ReduceScatter over CollNetDirect need every
    /// local rank to be a head, `localRanks <= collNetHeadsNum`). With 2 ranks per
    /// host and the 2 heads the host layout gives, AllGather runs over CollNet; with
    /// the 1 head a search over one CollNet NIC gives, it does not (the head count is
    /// not raised for it), and the AllReduce rows are the same with or without the
    /// plugin's AllGather/ReduceScatter calls.
    #[test]
    fn collnet_rows_follow_the_searched_heads() {
        let facts = HostFacts {
            nranks: 4,
            nnodes: 2,
            min_local_ranks: 2,
            max_local_ranks: 2,
            local_ranks: 2,
            nchannels: 2,
            net_speed_mbps: 10_000,
            net_latency_us: 0.0,
            cores: 8,
        };
        let m = crate::plugin::collnet::SupportMatrix([[true; 12]; 4]);
        let mk = |heads: Option<usize>, sge: (bool, bool)| {
            let mut s = setup(facts.clone(), params(), Some((m, sge)));
            s.collnet_heads = heads;
            Tuning::new(s, None).expect("tuning")
        };
        let cd = |t: &Tuning, f: Func| {
            t.cost_table_with(f, 1 << 20, 1, false, true)[Algorithm::CollNetDirect.index()][Protocol::Simple.index()]
        };
        assert_eq!(mk(Some(2), (false, false)).collnet_heads, Some(2), "the layout's heads");
        let two = mk(Some(2), (true, true));
        assert!(cd(&two, Func::AllGather) >= 0.0);
        let one = mk(Some(1), (true, true));
        assert_eq!(cd(&one, Func::AllGather), IGNORE, "2 local ranks, 1 head");
        assert_eq!(cd(&one, Func::ReduceScatter), IGNORE);
        assert!(cd(&one, Func::AllReduce) >= 0.0);
        for heads in [Some(1), Some(2)] {
            assert_eq!(
                cd(&mk(heads, (true, true)), Func::AllReduce),
                cd(&mk(heads, (false, false)), Func::AllReduce),
                "{heads:?}"
            );
        }
        // More heads: more CollNetDirect streams, a cheaper AllReduce.
        assert!(cd(&two, Func::AllReduce) < cd(&one, Func::AllReduce));
        // No CollNetDirect (a host with more ranks than it serves): no row.
        assert_eq!(cd(&mk(None, (false, false)), Func::AllReduce), IGNORE);
    }

    #[test]
    fn channels_follow_the_per_channel_threshold_and_groups_aggregate() {
        let t = tuning(4, 8, params());
        let d = t.decide(&[allreduce(1 << 18)]).unwrap()[0].unwrap();
        assert_eq!(d.nchannels, 1, "1 MiB: {}", d.describe());
        let d = t.decide(&[allreduce(1 << 20)]).unwrap()[0].unwrap();
        assert_eq!(d.nchannels, 2, "4 MiB: {}", d.describe());
        // A group of two similar AllReduces is decided once (numPipeOps 1 per
        // channel, summed bytes); a much larger one is decided on its own.
        let d = t
            .decide(&[allreduce(1000), allreduce(1500), allreduce(1 << 20)])
            .unwrap();
        let (a, b, c) = (d[0].unwrap(), d[1].unwrap(), d[2].unwrap());
        assert_eq!(a.nbytes, 10_000);
        assert_eq!(b.nbytes, 10_000);
        assert_eq!(c.nbytes, 4 << 20);
        assert_eq!(a.num_pipe_ops, 2);
        // Send/receive get no decision.
        let p2p = CollArgs {
            kind: CollKind::Send { peer: 0 },
            ..allreduce(5)
        };
        assert!(t.decide(&[p2p]).unwrap()[0].is_none());
        assert_eq!(t.last(Func::AllReduce).map(|d| d.nbytes), Some(4 << 20));
    }

    #[test]
    fn forcing_a_protocol_the_host_lacks_is_an_error_naming_it() {
        let mut p = params();
        p.enable = EnableMatrix::parse(Some("LL"), None).unwrap();
        let t = tuning(2, 2, p);
        let e = t.decide(&[allreduce(10)]).unwrap_err();
        assert!(matches!(e, Error::InvalidUsage(_)), "{e}");
        assert!(e.to_string().contains("NCCL_PROTO was set to LL"), "{e}");
    }
}
