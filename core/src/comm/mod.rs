//! Communicators (`ncclComm_t`): init by rank, finalize, destroy, abort, queries,
//! and the collective entry points (enqueued on a [`Stream`]).
//!
//! Init follows NCCL's `ncclCommInitRank` order (`src/init.cc`): parameters →
//! net plugin (`ncclNetInit`, before the bootstrap) → bootstrap → all ranks
//! all-gather which plugin they loaded (name, API version, file and its hash) and
//! their transport parameters, and every rank fails with the same per-rank report
//! if they disagree → rings and channels ([`crate::graph`]) → per-channel net
//! connections to the ring successor/predecessor through the plugin → proxy
//! thread ([`crate::proxy`]) → ready.

mod colls;
mod params;

use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use crate::error::{Error, Result};
pub(crate) use params::CommParams;
pub use params::{CommConfig, PreloadedNet};

use crate::bootstrap::{Bootstrap, UniqueId};
use crate::coll::CollArgs;
use crate::coll::schedule::SchedParams;
use crate::plugin::net::{NetInfo, NetPlugin, RawCtx};
use crate::proxy::{Proxy, ProxyHandle, Shared};
use crate::stream::Stream;
use crate::transport::NCCL_STEPS;
use crate::transport::setup::{self, Oob};

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
    info: NetInfo,
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

/// What every rank contributes to the init agreement.
fn agreement_record(loaded: &std::result::Result<(Arc<dyn NetPlugin>, NetInfo), String>, p: &CommParams) -> String {
    let net = match loaded {
        Ok((_, info)) => format!(
            "net={} v{} file={} hash={:016x}",
            info.name,
            info.version,
            info.path.display(),
            file_hash(&info.path)
        ),
        Err(e) => format!("net=<failed to load: {e}>"),
    };
    format!(
        "{net}\nbuffsize={} p2p_chunksize={}\nnchannels={}",
        p.buffsize, p.p2p_chunksize, p.nchannels
    )
}

/// FNV-1a 64 of a file's bytes (0 when unreadable).
fn file_hash(path: &std::path::Path) -> u64 {
    let Ok(bytes) = std::fs::read(path) else { return 0 };
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

impl Comm {
    /// `ncclCommInitRank`: joins communicator `id` as `rank` of `nranks`; blocks until
    /// every rank has joined and all connections are up.
    ///
    /// Errors: invalid rank/nranks; [`Error::Bootstrap`] (e.g. naming ranks that
    /// never joined within the timeout); [`Error::PluginLoad`] /
    /// [`Error::PluginMismatch`] when ranks could not load or disagree on the net
    /// plugin (every rank fails, with every rank's plugin listed);
    /// [`Error::Config`] for invalid or inconsistent parameters; plugin errors
    /// while connecting.
    pub fn init_rank(nranks: usize, id: &UniqueId, rank: usize, config: CommConfig) -> Result<Comm> {
        if nranks == 0 || rank >= nranks {
            return Err(Error::InvalidArgument(format!("rank {rank} is not in 0..{nranks}")));
        }
        let params = CommParams::resolve(&config)?;
        params::init_logging(rank);
        let t0 = Instant::now();
        // 1. Net plugin (before the bootstrap, as NCCL does).
        let loaded = params::load_net(&config);
        // 2. Bootstrap.
        let mut bcfg = params.bootstrap.clone();
        let abort = bcfg.abort.clone();
        bcfg.timeout = params.timeout;
        let bootstrap = Arc::new(Bootstrap::init(id, rank, nranks, &bcfg)?);
        // 3. Agreement on plugin and parameters.
        let mine = agreement_record(&loaded, &params);
        let all = bootstrap.allgather(mine.as_bytes())?;
        let all: Vec<String> = all.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect();
        let net_line = |s: &str| s.lines().next().unwrap_or("").to_string();
        let net_ok = all
            .iter()
            .all(|s| net_line(s) == net_line(&all[0]) && !s.starts_with("net=<failed"));
        if !net_ok {
            let report: Vec<String> = all
                .iter()
                .enumerate()
                .map(|(r, s)| format!("  rank {r}: {}", net_line(s)))
                .collect();
            let report = report.join("\n");
            bootstrap.close();
            if let (Err(e), true) = (&loaded, all.iter().all(|s| net_line(s) == net_line(&all[0]))) {
                return Err(Error::PluginLoad(format!("{e}\n{report}")));
            }
            return Err(Error::PluginMismatch(report));
        }
        if all.iter().any(|s| s.lines().nth(1) != all[0].lines().nth(1)) {
            let report: Vec<String> = all
                .iter()
                .enumerate()
                .map(|(r, s)| format!("  rank {r}: {}", s.lines().nth(1).unwrap_or("")))
                .collect();
            bootstrap.close();
            return Err(Error::ConfigMismatch(format!(
                "ranks disagree on NCCL_BUFFSIZE / NCCL_P2P_NET_CHUNKSIZE:\n{}",
                report.join("\n")
            )));
        }
        // Channels: the smallest count any rank asked for.
        let nchannels = all
            .iter()
            .filter_map(|s| s.lines().nth(2)?.strip_prefix("nchannels=")?.parse::<usize>().ok())
            .min()
            .unwrap_or(params.nchannels)
            .max(1);
        let (net, info) = loaded.map_err(Error::PluginLoad)?;
        // 4. Plugin context and ring connections.
        let comm_hash = file_hash_bytes(id.as_bytes());
        let ctx = net
            .init_ctx(comm_hash, &crate::plugin::net::CommConfig::default())
            .map_err(|e| Error::net("plugin init", e))?;
        let ndev = match net.devices() {
            Ok(n) if n > 0 => n,
            Ok(_) => {
                let _ = net.finalize_ctx(ctx);
                return Err(crate::plugin::PluginError::NoDevices {
                    plugin: info.name.clone(),
                    version: info.version,
                }
                .into());
            }
            Err(e) => {
                let _ = net.finalize_ctx(ctx);
                return Err(Error::net("devices", e));
            }
        };
        let channels = crate::graph::rank_order_channels(rank, nranks, nchannels);
        let ring_step = params.buffsize / NCCL_STEPS;
        let oob: Arc<dyn Oob> = Arc::new(BootstrapOob(bootstrap.clone()));
        let deadline = Instant::now() + params.timeout;
        let conns = match setup::connect_channels(&net, ctx, &*oob, &channels, rank, ndev, ring_step, deadline, &abort)
        {
            Ok(t) => t,
            Err(e) => {
                let _ = net.finalize_ctx(ctx);
                bootstrap.abort();
                return Err(e);
            }
        };
        // 5. Proxy thread.
        let shared = Arc::new(Shared {
            abort: abort.clone(),
            error: Mutex::new(None),
        });
        let proxy = Proxy {
            net: net.clone(),
            ctx,
            oob,
            params: SchedParams {
                rank,
                nranks,
                channels,
                ring_step,
                p2p_step: params.p2p_chunksize,
                chunk_slices: params.chunk_slices,
                min_channel_bytes: params.min_channel_bytes,
            },
            user_send_min: params.user_send_min,
            conns,
            shared: shared.clone(),
            timeout: params.timeout,
            p2p_dev: 0,
        };
        let proxy = Arc::new(ProxyHandle::start(proxy, nranks)?);
        tracing::info!(
            target: "ferroccl::init",
            "comm rank {rank} nranks {nranks} net {} v{} ({}) nchannels {nchannels} buffsize {} ready in {:.1} ms",
            info.name,
            info.version,
            info.path.display(),
            params.buffsize,
            t0.elapsed().as_secs_f64() * 1e3
        );
        Ok(Comm {
            inner: Arc::new(CommInner {
                rank,
                nranks,
                nchannels,
                proxy,
                bootstrap,
                net,
                ctx: Mutex::new(Some(ctx)),
                info,
            }),
        })
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
    /// synchronize streams first). Errors: bootstrap failures and timeouts.
    pub fn barrier(&self) -> Result<()> {
        self.inner.bootstrap.barrier().map_err(Error::from)
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

fn file_hash_bytes(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

impl CommInner {
    fn finalize_local(&self) -> Result<()> {
        self.proxy.wait_idle()
    }

    fn finalize(&self) -> Result<()> {
        self.finalize_local()?;
        if self.nranks > 1 {
            self.bootstrap.barrier()?;
        }
        self.proxy.close();
        Ok(())
    }

    fn release(&self) {
        if let Some(ctx) = self.ctx.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = self.net.finalize_ctx(ctx);
        }
    }

    fn close(&self) {
        self.proxy.close();
        self.proxy.stop();
        self.bootstrap.close();
        self.release();
    }

    fn abort(&self) {
        self.proxy.raise_abort();
        self.bootstrap.abort();
        self.proxy.stop();
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
