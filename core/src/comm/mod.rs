//! Communicators (`ncclComm_t`): init by rank, finalize, destroy, abort, queries,
//! and the collective entry points (enqueued on a [`Stream`]).
//!
//! Init follows NCCL's `ncclCommInitRank` order (`src/init.cc`), one named phase
//! after another: parameters → net plugin (`ncclNetInit`, before the bootstrap) →
//! bootstrap → peer-info exchange (every rank's `PeerInfo`: host, pid, plugin
//! identity, transport parameters, topology facts) and agreement (every rank
//! fails with the same per-rank report if they disagree) → topology and graph
//! (this rank's [`crate::graph::Channel`]s) → transport setup (every channel's
//! connectors) → proxy thread ([`crate::proxy`]) → ready. One guard undoes
//! whatever a failing phase leaves behind.

mod collnet;
mod colls;
mod fusion;
mod params;
mod peer_info;
mod rma;
mod split;

use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use crate::error::{Error, Result};
pub(crate) use params::CommParams;
pub use params::{
    CommConfig, PreloadedNet, collnet_after_node_threshold, collnet_node_threshold, resolve_collnet_enable,
    resolve_traffic_class,
};
pub use rma::{NUM_RMA_SIG, WaitSignalDesc, Window};

use ferroccl_plugin_api::sdk::Properties;

use crate::bootstrap::{Bootstrap, UniqueId};
use crate::coll::CollArgs;
use crate::coll::schedule::SchedParams;
use crate::plugin::net::{NetInfo, NetPlugin, RawCtx};
use crate::proxy::{PlanCache, Proxy, ProxyHandle, Shared};
use crate::stream::Stream;
use crate::topo::fuse;
use crate::transport::net::NetTransport;
use crate::transport::setup::{self, Oob, TransportSetup};
use crate::transport::shm::ShmTransport;
use crate::transport::{ConnTable, NCCL_STEPS, Transport, TransportParams, TransportPeer, proto};
use peer_info::{NetIdentity, PeerInfo, agree};

/// The transports' view of every rank (`peers[r]` is rank `r`'s record); a
/// rank's local index counts the ranks before it with the same host hash.
fn transport_peers(peers: &[PeerInfo]) -> Vec<TransportPeer> {
    peers
        .iter()
        .map(|p| TransportPeer {
            rank: p.rank,
            host_hash: p.host_hash,
            pid: p.pid,
            pid_ns: p.pid_ns,
            params: p.transport,
            local_rank: peers[..p.rank].iter().filter(|q| q.host_hash == p.host_hash).count(),
            // The GPU the rank's communicator bound (`CommConfig::cuda_dev`);
            // `None`: a host process, which P2P never joins.
            gpu: p.gpu.clone(),
        })
        .collect()
}

/// All-gathers every rank's [`PeerInfo`] over the bootstrap; `peers[r]` is rank `r`'s.
fn exchange_peer_info(bootstrap: &Bootstrap, mine: &PeerInfo) -> Result<Vec<PeerInfo>> {
    let all = bootstrap.allgather(&mine.to_bytes())?;
    all.iter()
        .enumerate()
        .map(|(r, b)| PeerInfo::from_bytes(r, b))
        .collect()
}

struct BootstrapOob(Arc<Bootstrap>);

impl Oob for BootstrapOob {
    fn send(&self, peer: usize, tag: u32, data: &[u8]) -> Result<()> {
        self.0.send(peer, tag, data).map_err(Error::from)
    }
    fn recv(&self, peer: usize, tag: u32) -> Result<Vec<u8>> {
        self.0.recv(peer, tag).map_err(Error::from)
    }
}

pub(crate) struct CommInner {
    rank: usize,
    nranks: usize,
    nchannels: usize,
    /// Hands work to the proxy thread.
    proxy: Arc<ProxyHandle>,
    bootstrap: Arc<Bootstrap>,
    net: Arc<dyn NetPlugin>,
    ctx: Mutex<Option<RawCtx>>,
    /// The CollNet context, finalized after the connections (and their collComms) closed.
    collnet_ctx: Mutex<Option<(Arc<crate::plugin::collnet::CollNetAdapter>, RawCtx)>>,
    info: NetInfo,
    /// Transport selection and the connections made so far.
    transports: Arc<TransportSetup>,
    /// The one-sided API's state (RMA plugin, windows, signals; `rma.rs`).
    rma: rma::RmaSlot,
}

/// A communicator: one rank's membership in a group of `nranks` ranks that run
/// collectives together (`ncclComm_t`).
///
/// Operations are enqueued asynchronously on a [`Stream`] and executed in order by
/// the communicator's proxy thread. Dropping the communicator destroys it
/// (`ncclCommDestroy`; queued work is finished first unless the communicator
/// has failed, in which case it is aborted).
pub struct Comm {
    pub(crate) inner: Arc<CommInner>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.inner.rank)
            .field("nranks", &self.inner.nranks)
            .field("nchannels", &self.inner.nchannels)
            .field("net", &self.inner.info.name)
            .finish()
    }
}

/// Cleans up whatever init has built when a phase fails: the plugin context is
/// finalized and the bootstrap closed (gracefully when every rank reached the
/// same verdict, so their reports get through) or aborted (peers still waiting on
/// this rank fail fast). Connectors and the proxy thread clean up by their own drop.
struct InitGuard {
    bootstrap: Option<Arc<Bootstrap>>,
    ctx: Option<(Arc<dyn NetPlugin>, RawCtx)>,
    /// The failure is one every rank sees alike (close, do not abort).
    agreed: bool,
}

impl InitGuard {
    /// Init succeeded: nothing to clean up.
    fn disarm(mut self) {
        self.bootstrap = None;
        self.ctx = None;
    }
}

impl Drop for InitGuard {
    fn drop(&mut self) {
        if let Some((net, ctx)) = self.ctx.take() {
            let _ = net.finalize_ctx(ctx);
        }
        if let Some(b) = self.bootstrap.take() {
            if self.agreed { b.close() } else { b.abort() }
        }
    }
}

/// What a rank learns about itself before the exchange.
struct LocalFacts {
    /// The plugin context (finalized by the init guard on failure).
    ctx: RawCtx,
    /// Plugin devices (at least one).
    ndev: usize,
    /// This rank's topology record.
    record: crate::topo::TopoRecord,
    /// Device 0's speed (Mbit/s) and latency (µs), for the tuning.
    dev0: (i32, f32),
}

/// The devices of the net library's CollNet table whose NICs the detection marks
/// `coll="1"` (NCCL's `ncclTopoGetSystem`, `src/graph/topo.cc`: when
/// `collNetSupport(comm)`, `ncclTopoProcessNet(xml, 1, ...)` over the CollNet table
/// before the net table): this rank wants CollNet (`mark`), is bound to a GPU, and the
/// library exports a usable CollNet table. Empty otherwise, and for CPU-process ranks,
/// whose hosts keep the layout rule for CollNet heads
/// ([`crate::topo::detect::detect_gpu_rank`] says why). A table whose `devices` or
/// `getProperties` fails marks nothing (INFO line): CollNet is then decided as before,
/// by the peer exchange. The marking is by device name (as [`crate::topo::fill::mark_coll_net`]),
/// so a physical NIC the net table fused into a virtual one (`makeVDevice`) is not found
/// under its own name and stays unmarked.
fn collnet_nics(net: &Arc<dyn NetPlugin>, mark: bool) -> Vec<Properties> {
    let Some(c) = net.collnet().filter(|c| mark && c.is_enabled()) else {
        return Vec::new();
    };
    let props = c.devices().and_then(|n| {
        (0..n)
            .map(|d| c.properties(d))
            .collect::<std::result::Result<Vec<_>, _>>()
    });
    match props {
        Ok(p) => p,
        Err(e) => {
            crate::log::nccl_info!(INIT, "CollNet NICs not marked in the topology: {e}");
            Vec::new()
        }
    }
}

/// Opens the plugin context, counts its devices, reads their properties and
/// detects this rank's topology, marking the NICs of `coll_nets` (the CollNet
/// table's devices, [`collnet_nics`]) `coll="1"`. Errors are text (shared with the
/// other ranks in the agreement); the context is finalized on failure.
#[allow(clippy::too_many_arguments)] // the detection's inputs
fn local_facts(
    net: &Arc<dyn NetPlugin>,
    info: &NetInfo,
    rank: usize,
    comm_id: u64,
    topo_params: &crate::topo::TopoParams,
    traffic_class: i32,
    coll_nets: &[Properties],
) -> std::result::Result<LocalFacts, String> {
    // NCCL 2.30.7 src/plugin/net.cc ncclNetPluginInit: the communicator's traffic
    // class in `ncclNetCommConfig_t` (v11+ init; v10 connect through the adapter).
    let ctx = net
        .init_ctx(comm_id, &crate::plugin::net::CommConfig { traffic_class })
        .map_err(|e| Error::net("plugin init", e).to_string())?;
    let facts = (|| {
        let ndev = match net.devices() {
            Ok(n) if n > 0 => n,
            Ok(_) => {
                return Err(Error::from(crate::plugin::PluginError::NoDevices {
                    plugin: info.name.clone(),
                    version: info.version,
                }));
            }
            Err(e) => return Err(Error::net("devices", e)),
        };
        // NIC fusion (ncclTopoProcessNet): the physical devices are those counted
        // before this plugin's first fusion pass in the process.
        let key = fusion::key(info);
        let (nphys, made) = match fuse::dev_counts(&key) {
            Some((p, v)) => (p.min(ndev), Some(v)),
            None => (ndev, None),
        };
        let props = (0..nphys)
            .map(|d| {
                net.properties(d)
                    .map_err(|e| Error::net(format!("getProperties({d})"), e))
            })
            .collect::<Result<Vec<_>>>()?;
        let (fparams, flog) = fusion::params();
        for line in flog {
            crate::log::nccl_info!(ENV, "{line}");
        }
        let mut plugin = fusion::PluginFusion {
            net,
            version: info.version,
        };
        let mut f = crate::topo::detect::Fusion {
            params: &fparams,
            plugin: &mut plugin,
            made,
        };
        let can_fuse = net.has_make_vdevice();
        let (record, log, fused) =
            crate::topo::detect::detect_fused(rank, &props, coll_nets, topo_params, can_fuse.then_some(&mut f))?;
        for line in log {
            crate::log::nccl_info!(GRAPH, "{line}");
        }
        let (nvirt, vprops) = fused.unwrap_or_default();
        if can_fuse {
            fuse::set_dev_counts(&key, nphys, nvirt);
        }
        let ndev = nphys + nvirt;
        // The tuning's device: the first fused one when there is one (it carries the
        // channels), else device 0.
        let d0 = vprops.first().unwrap_or(&props[0]);
        let dev0 = (d0.speed, d0.latency);
        Ok(LocalFacts {
            ctx,
            ndev,
            record,
            dev0,
        })
    })();
    facts.map_err(|e| {
        let _ = net.finalize_ctx(ctx);
        e.to_string()
    })
}

/// Builds a communicator's tuning (phase 8 of init): ranks per host from the
/// peers' host hashes, the net device's speed and latency, the tuner plugin
/// (`NCCL_TUNER_PLUGIN`, or the external net plugin's library), then the model.
/// `shm_proto`: the shared-memory protocol when shared memory may carry
/// connections (`None` under `NCCL_SHM_DISABLE=1`); with every rank on this
/// host it is the one protocol the model may choose, else Simple.
/// Errors: the tuner's `init` failing (communicator creation fails, as in NCCL).
/// The proxy's busy-poll window (`FERROCCL_PROXY_SPIN_US`): the value given,
/// or with -1 50 µs while this host's ranks of the communicator (one proxy
/// thread each) do not outnumber the host's online CPUs, else none.
fn proxy_spin(us: i64, peers: &[PeerInfo], rank: usize) -> std::time::Duration {
    let us = if us >= 0 {
        us as u64
    } else {
        let local = peers.iter().filter(|p| p.host_hash == peers[rank].host_hash).count();
        // SAFETY: sysconf reads a system value and touches no memory of ours.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        if online > 0 && local <= online as usize { 50 } else { 0 }
    };
    std::time::Duration::from_micros(us)
}

#[allow(clippy::too_many_arguments)]
fn init_tuning(
    config: &CommConfig,
    params: &CommParams,
    (peers, rank): (&[PeerInfo], usize),
    nchannels: usize,
    external_net: Option<&std::path::Path>,
    comm_id: u64,
    shm_proto: Option<crate::tune::Protocol>,
    collnet: Option<(crate::plugin::collnet::SupportMatrix, (bool, bool), Option<usize>)>,
) -> Result<crate::tune::Tuning> {
    let mut per_host: std::collections::BTreeMap<u64, usize> = Default::default();
    for p in peers {
        *per_host.entry(p.host_hash).or_default() += 1;
    }
    // Every rank must decide alike, so the facts that can differ between hosts
    // (device speed and latency, cores; exchanged in the peer-info records) are
    // agreed on: the slowest device, the largest latency, the fewest cores.
    let speed = peers.iter().map(|p| p.net_speed_mbps).min().unwrap_or(0);
    let latency = peers.iter().map(|p| p.net_latency_us).fold(0.0f32, f32::max);
    let cores = peers.iter().map(|p| p.cores).min().unwrap_or(1).max(1);
    let facts = crate::tune::host::HostFacts {
        nranks: peers.len(),
        nnodes: per_host.len().max(1),
        min_local_ranks: per_host.values().copied().min().unwrap_or(1),
        max_local_ranks: per_host.values().copied().max().unwrap_or(1),
        local_ranks: per_host.get(&peers[rank].host_hash).copied().unwrap_or(1),
        nchannels,
        net_speed_mbps: speed,
        net_latency_us: latency,
        cores: cores as usize,
    };
    let opts = config.net.clone().unwrap_or_else(crate::plugin::LoadOptions::from_env);
    let tuner = if config.preloaded_net.is_some() && opts.tuner_plugin.is_none() {
        // An embedding that hands over its own net plugin gets a tuner only when it names one.
        None
    } else {
        crate::tune::load_tuner(&opts, external_net)
    };
    // AllReduce as all-gather + local reduce runs on host buffers only (its
    // scratch is pageable host memory), so a rank decides it from its own
    // buffers; where any rank is bound to a GPU, ranks may mix host and device
    // buffers and would then pair one rank's ring with another's all-gather:
    // the variant is off there, for every rank alike.
    let mut tune_params = params.tune.clone();
    if tune_params.small_allreduce_bytes > 0 && peers.iter().any(|p| p.gpu.is_some()) {
        tune_params.small_allreduce_bytes = 0;
        if rank == 0 {
            crate::log::nccl_info!(
                TUNING,
                "AllReduce as all-gather + local reduce off: ranks bound to GPUs may mix host and device buffers"
            );
        }
    }
    let setup = crate::tune::TuningSetup {
        rank,
        facts,
        comm_id,
        simple_step_bytes: params.buffsize / NCCL_STEPS - crate::coll::desc::OP_HDR_BYTES,
        // The protocols connections run: the shared-memory protocol where every
        // peer is on this host and shared memory carries every connection, else
        // Simple (the network transport's only protocol).
        protocols: match shm_proto {
            Some(p) if per_host.len() == 1 => vec![p],
            _ => vec![crate::tune::Protocol::Simple],
        },
        params: tune_params,
        collnet: collnet.map(|c| c.0),
        collnet_sge: collnet.map_or((false, false), |c| c.1),
        collnet_heads: collnet.and_then(|c| c.2),
    };
    crate::tune::Tuning::new(setup, tuner)
}

/// The 64-bit communicator id handed to the plugin's `init` (v11+ `commId`).
fn comm_hash(id: &UniqueId) -> u64 {
    let h = blake3::hash(id.as_bytes());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}

impl Comm {
    /// `ncclCommInitRank`: joins communicator `id` as `rank` of `nranks`; blocks until
    /// every rank has joined and all connections are up.
    ///
    /// The phases, in NCCL's order (`src/init.cc`): parameters, net plugin
    /// (`ncclNetInit`, before the bootstrap), bootstrap, peer-info exchange and
    /// agreement, topology and graph (channels), transport setup, proxy thread.
    ///
    /// Errors: invalid rank/nranks; [`Error::Bootstrap`] (e.g. naming ranks that
    /// never joined within the timeout); [`Error::PluginLoad`] /
    /// [`Error::PluginMismatch`] when ranks could not load or disagree on the net
    /// plugin (every rank fails, with every rank's plugin listed);
    /// [`Error::Config`] / [`Error::ConfigMismatch`] for invalid or inconsistent
    /// parameters; plugin errors while connecting.
    pub fn init_rank(nranks: usize, id: &UniqueId, rank: usize, config: CommConfig) -> Result<Comm> {
        if nranks == 0 || rank >= nranks {
            return Err(Error::InvalidArgument(format!("rank {rank} is not in 0..{nranks}")));
        }
        let t0 = Instant::now();
        // 1. Parameters.
        let params = CommParams::resolve(&config)?;
        params::init_logging(rank);
        let tparams = TransportParams::from_config()?;
        let shm_proto = crate::tune::enable::shm_protocol(&params.tune.enable, proto::SHM_DEFAULT_PROTOCOL)?;
        // 2. Net plugin (before the bootstrap, as NCCL does); its v10+ profiler
        // events go to the profiler layer.
        crate::plugin::adapter::set_net_profiler_callback(crate::profiler::net_callback);
        let loaded = params::load_net(&config);
        // 3. Bootstrap.
        let mut bcfg = params.bootstrap.clone();
        let abort = bcfg.abort.clone();
        bcfg.timeout = params.timeout;
        let bootstrap = Arc::new(Bootstrap::init(id, rank, nranks, &bcfg)?);
        let mut guard = InitGuard {
            bootstrap: Some(bootstrap.clone()),
            ctx: None,
            agreed: false,
        };
        // 4. Local facts: the plugin context, its devices and this rank's
        // topology record (NCCL's ncclTopoGetSystem runs after ncclNetInit).
        let topo_params = crate::topo::TopoParams::from_config(crate::config::Config::global())?;
        let (loaded, external_net) = match loaded {
            Ok((net, info, ext)) => (Ok((net, info)), ext),
            Err(e) => (Err(e), None),
        };
        // NCCL binds the device current at init (`src/init.cc`: cudaGetDevice).
        // A device the driver cannot describe leaves the rank unbound (no P2P)
        // rather than failing init.
        let gpu = config
            .cuda_dev
            .and_then(|dev| match crate::transport::p2p::bind_gpu(dev) {
                Ok(g) => Some(g),
                Err(e) => {
                    tracing::warn!(target: "ferroccl::init", "{e}; the P2P transport is not used by this rank");
                    None
                }
            });
        // Whether this rank wants CollNet, decided before the detection: a rank
        // bound to a GPU marks the CollNet table's NICs (collnet_nics).
        let want_collnet = resolve_collnet_enable(&config)?;
        let local = loaded.and_then(|(net, info)| {
            let coll_nets = collnet_nics(&net, want_collnet && gpu.is_some());
            local_facts(
                &net,
                &info,
                rank,
                comm_hash(id),
                &topo_params,
                params.traffic_class,
                &coll_nets,
            )
            .map(|f| (net, info, f))
        });
        if let Ok((net, _, f)) = &local {
            guard.ctx = Some((net.clone(), f.ctx));
        }
        // 5. Peer-info exchange and agreement.
        let identity = local
            .as_ref()
            .map(|(_, info, _)| NetIdentity::of(info))
            .map_err(Clone::clone);
        let mut mine = PeerInfo::local(rank, &identity, &params, tparams);
        mine.gpu = gpu;
        if let Ok((net, _, f)) = &local {
            mine.topo = f.record.to_bytes();
            (mine.net_speed_mbps, mine.net_latency_us) = f.dev0;
            mine.collnet = collnet::local_entry(want_collnet, net);
        }
        let peers = exchange_peer_info(&bootstrap, &mine)?;
        let agreement = agree(&peers, local.as_ref().err().map(String::as_str)).map_err(|d| {
            guard.agreed = true;
            Error::from(d)
        })?;
        let (net, info, facts) = local.map_err(Error::PluginLoad)?;
        let (ctx, ndev) = (facts.ctx, facts.ndev);
        // 6. Topology and graph: this rank's view of every channel (NCCL's graph
        // search over every host's fused topology, then ncclTopoPreset/Postset).
        let records = peers
            .iter()
            .map(|p| {
                crate::topo::TopoRecord::from_bytes(&p.topo)
                    .map_err(|e| Error::Remote(format!("rank {} sent a bad topology record: {e}", p.rank)))
            })
            .collect::<Result<Vec<_>>>()?;
        let topo = crate::graph::plan(rank, &records, &topo_params)?;
        topo.emit_log();
        for line in topo.write_dumps(&topo_params)? {
            crate::log::nccl_info!(GRAPH, "{line}");
        }
        let mut channels = topo.channels.clone();
        if let Some(cap) = agreement.nchannels {
            channels.truncate(cap.max(1));
        }
        // 7. Transport setup: every channel's ring connections (the rest on first
        // use), each through the first transport that can join the pair (SHM on
        // one host, then NET).
        let ring_step = params.buffsize / NCCL_STEPS;
        let oob: Arc<dyn Oob> = Arc::new(BootstrapOob(bootstrap.clone()));
        let tpeers = transport_peers(&peers);
        let pids = peers.iter().map(|p| p.pid).collect();
        let shm = ShmTransport::new(rank, pids, shm_proto, params.timeout);
        let transports: Vec<Arc<dyn Transport>> = vec![
            // NCCL's order: P2P, SHM, NET (src/transport.cc).
            Arc::new(crate::transport::p2p::P2pTransport::new(
                tpeers.iter().map(|p| p.params.p2p()).collect(),
                shm.with_proto(proto::Protocol::Simple),
            )),
            Arc::new(shm),
            Arc::new(NetTransport::new(
                net.clone(),
                ctx,
                crate::transport::gdr::GdrParams::from_config(&topo_params)?,
            )),
        ];
        let transports = Arc::new(TransportSetup::new(
            transports,
            tpeers,
            rank,
            oob,
            params.timeout,
            abort.clone(),
        ));
        let p2p_devs: Vec<usize> = (0..nranks)
            .map(|peer| topo.p2p_net(peer, 0).map_or(0, |n| n.net_dev))
            .collect();
        let plan = setup::ConnPlan {
            rank,
            channels: &channels,
            tree_devs: &topo.tree_net_dev,
            ndev,
            p2p_devs: &p2p_devs,
            coll_step: ring_step,
            p2p_step: params.p2p_chunksize,
        };
        let (sends, recvs) = setup::ring_keys(&channels, rank);
        let mut conns = ConnTable::default();
        setup::connect_keys(&transports, &plan, &sends, &recvs, &mut conns)?;
        // CollNet (NCCL's initTransportsRank, src/init.cc): when every rank asked
        // for it with a usable table, each channel's chain heads connect a collComm.
        let collnet = collnet::setup(
            &collnet::SetupArgs {
                net: &net,
                bootstrap: &bootstrap,
                peers: &peers,
                rank,
                nchannels: channels.len(),
                searched_heads: topo.collnet_heads,
                searched_firsts: &topo.collnet_firsts,
                comm_id: comm_hash(id),
                step_size: ring_step,
                threshold: collnet_node_threshold()?,
            },
            &mut conns,
        )?;
        // 8. Tuning: the tuner plugin (after the graph, as NCCL's ncclTunerPluginLoad)
        // and the cost model.
        let nchannels = channels.len();
        let tuning = Arc::new(init_tuning(
            &config,
            &params,
            (&peers, rank),
            nchannels,
            external_net.as_deref(),
            comm_hash(id),
            (!tparams.shm_disable).then_some(shm_proto),
            collnet.as_ref().map(|c| (c.matrix, c.sge_support(), c.direct_heads())),
        )?);
        let collnet_chains = collnet.as_ref().map(|c| c.chains.clone()).unwrap_or_default();
        let collnet_direct = collnet.as_ref().and_then(|c| c.direct.clone()).unwrap_or_default();
        let collnet_hosts: Vec<u64> = match &collnet {
            Some(_) => peers.iter().map(|p| p.host_hash).collect(),
            None => Vec::new(),
        };
        let (collnet_firsts, collnet_nheads) = collnet
            .as_ref()
            .map_or((Vec::new(), 1), |c| (c.firsts.clone(), c.nheads));
        let collnet_ctx = collnet.map(|c| (c.adapter, c.ctx));
        // 9. Profiler plugin (NCCL loads it in initTransportsRank; `init` per
        // communicator; a failing init only disables profiling).
        let profiler = {
            let opts = config.net.clone().unwrap_or_else(crate::plugin::LoadOptions::from_env);
            if config.preloaded_net.is_some() && opts.profiler_plugin.is_none() {
                None
            } else {
                let nnodes = peers
                    .iter()
                    .map(|p| p.host_hash)
                    .collect::<std::collections::BTreeSet<_>>()
                    .len();
                let facts = crate::profiler::CommFacts {
                    comm_id: comm_hash(id),
                    comm_name: None,
                    nnodes: nnodes as i32,
                    nranks: nranks as i32,
                    rank: rank as i32,
                };
                crate::profiler::load(&opts, external_net.as_deref(), &facts)
            }
        };
        // 10. Proxy thread.
        let proxy = Proxy {
            transports: transports.clone(),
            params: SchedParams {
                rank,
                nranks,
                channels,
                ring_step,
                p2p_step: params.p2p_chunksize,
                collnet: collnet_chains,
                collnet_direct,
                collnet_hosts,
                collnet_firsts,
                collnet_nheads,
            },
            user_send_min: params.user_send_min,
            conns,
            shared: Arc::new(Shared::new(abort, params.max_queued_ops)),
            timeout: params.timeout,
            spin: proxy_spin(params.proxy_spin_us, &peers, rank),
            p2p_devs,
            tree_devs: topo.tree_net_dev.clone(),
            ndev,
            coll_seq: 0,
            p2p_send_seq: Default::default(),
            p2p_recv_seq: Default::default(),
            bootstrap: bootstrap.clone(),
            waiting_on: Vec::new(),
            verdict: None,
            profiler,
            plan_cache: PlanCache::default(),
            prof_bufs: Default::default(),
            desc_buf: Vec::new(),
            user_registered: false,
            parked: None,
            finished: Vec::new(),
        };
        let proxy = Arc::new(ProxyHandle::start(proxy, nranks, tuning)?);
        guard.disarm();
        tracing::info!(
            target: "ferroccl::init",
            "comm rank {rank} nranks {nranks} net {} v{} ({}) nchannels {nchannels} buffsize {} ready in {:.1} ms",
            info.name,
            info.version,
            info.path.display(),
            params.buffsize,
            t0.elapsed().as_secs_f64() * 1e3
        );
        let comm = Comm {
            inner: Arc::new(CommInner {
                rank,
                nranks,
                nchannels,
                proxy,
                bootstrap,
                net,
                ctx: Mutex::new(Some(ctx)),
                collnet_ctx: Mutex::new(collnet_ctx),
                info,
                transports,
                rma: rma::RmaSlot::new(comm_hash(id), params.timeout, params.traffic_class, params.num_rma_ctx),
            }),
        };
        // NCCL_RMA_EAGER_INIT=1 (NCCL's parameter of that name): the one-sided API's
        // collective setup now rather than at the first window registration.
        comm.inner.rma.eager_init(&comm.inner)?;
        Ok(comm)
    }

    /// This rank (`ncclCommUserRank`).
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Number of ranks (`ncclCommCount`).
    pub fn nranks(&self) -> usize {
        self.inner.nranks
    }

    /// Channels (rings) in use.
    pub fn nchannels(&self) -> usize {
        self.inner.nchannels
    }

    /// The network plugin in use.
    pub fn net_info(&self) -> &NetInfo {
        &self.inner.info
    }

    /// The transports this rank's connections use so far: `(description,
    /// connections)` per transport, e.g. `("SHM/Simple", 4)` and
    /// `("NET/Socket", 2)`, counting each direction of each channel's ring
    /// connections and the point-to-point connections made on first use.
    pub fn transports(&self) -> Vec<(String, usize)> {
        self.inner.transports.usage()
    }

    /// The communicator's tuning: the cost model, the tuner plugin in use, and
    /// the last decision made per function (what the perf tool's `--show-tuning`
    /// reports).
    pub fn tuning(&self) -> &crate::tune::Tuning {
        &self.inner.proxy.tuning
    }

    /// `ncclCommGetAsyncError`: the first error an operation of this communicator hit
    /// (`None` while healthy). Once set, every later operation fails with it.
    pub fn async_error(&self) -> Option<Error> {
        self.inner.proxy.shared.error()
    }

    /// `ncclCommFinalize`: waits (bounded by the communicator's watchdog) until all
    /// enqueued work has finished, then synchronizes with the other ranks.
    /// Errors: the communicator's asynchronous error, or a bootstrap failure.
    pub fn finalize(&self) -> Result<()> {
        self.inner.finalize()
    }

    /// `ncclCommDestroy`: finalizes (if not done) and releases every resource.
    /// A communicator that has failed is aborted instead.
    pub fn destroy(self) -> Result<()> {
        if self.inner.proxy.shared.error().is_some() {
            self.inner.abort();
            Ok(())
        } else {
            let r = self.inner.finalize_local();
            self.inner.close();
            r
        }
    }

    /// Host-side barrier over the bootstrap network (not ordered with enqueued work:
    /// synchronize streams first). ferroccl only (NCCL has no user barrier).
    ///
    /// Errors: bootstrap failures and timeouts. A failed barrier is a failure of
    /// the communicator: this rank takes part in the survivors' agreement (as a
    /// failed collective does, `crate::diag`), so the error carries the diagnosis
    /// every rank prints, and ranks still in a collective hear this rank's report.
    pub fn barrier(&self) -> Result<()> {
        self.inner
            .bootstrap
            .barrier()
            .map_err(|e| self.inner.proxy.agree_outside("barrier", e))
    }

    /// `ncclCommAbort`: stops all operations in flight (they complete with
    /// [`Error::Aborted`]), closes every connection and returns promptly.
    pub fn abort(&self) {
        self.inner.abort();
    }

    /// Enqueues a collective (or adds it to the current group).
    pub(crate) fn enqueue(&self, args: CollArgs, stream: &Stream) -> Result<()> {
        crate::enqueue::enqueue(&self.inner.proxy, args, stream)
    }
}

impl CommInner {
    fn finalize_local(&self) -> Result<()> {
        self.proxy.wait_idle()
    }

    fn finalize(&self) -> Result<()> {
        self.finalize_local()?;
        if self.nranks > 1 {
            self.bootstrap
                .barrier()
                .map_err(|e| self.proxy.agree_outside("finalize's barrier", e))?;
        }
        self.proxy.close();
        Ok(())
    }

    fn release(&self) {
        self.rma.close();
        if let Some((c, ctx)) = self.collnet_ctx.lock().unwrap_or_else(|e| e.into_inner()).take()
            && let Err(e) = c.finalize_ctx(ctx)
        {
            crate::log::nccl_warn!("CollNet finalize: {e}");
        }
        if let Some(ctx) = self.ctx.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = self.net.finalize_ctx(ctx);
        }
    }

    fn close(&self) {
        self.proxy.close();
        self.proxy.stop();
        self.proxy.tuning.finalize();
        self.bootstrap.close();
        self.release();
    }

    fn abort(&self) {
        self.proxy.raise_abort();
        self.bootstrap.abort();
        self.proxy.stop();
        self.proxy.tuning.finalize();
        self.release();
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if self.inner.proxy.failed() {
            self.inner.abort();
        } else {
            let _ = self.inner.finalize_local();
            self.inner.close();
        }
    }
}
