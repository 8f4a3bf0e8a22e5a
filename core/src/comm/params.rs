//! Communicator configuration: the caller's [`CommConfig`] over `NCCL_*`
//! parameters, resolved once per communicator into [`CommParams`].

use std::sync::Arc;
use std::time::Duration;

use super::{Error, Result};
use crate::bootstrap::BootstrapConfig;
use crate::config::{Config, IntParamExt, StrParamExt, params};
use crate::plugin::net::{NetInfo, NetPlugin};
use crate::plugin::options::LoadOptions;

/// Per-communicator options (`ncclConfig_t` in spirit). Every `None` field takes
/// its value from the `NCCL_*` / `FERROCCL_*` parameters (environment, then
/// `nccl.conf`), then the default.
#[derive(Debug, Clone, Default)]
pub struct CommConfig {
    /// Bound on every wait: bootstrap (ranks that never join), connection setup,
    /// and the proxy's no-progress watchdog (`FERROCCL_TIMEOUT_SEC`, default 300 s).
    pub timeout: Option<Duration>,
    /// At most this many channels (default: as many as the topology search
    /// gives within `NCCL_MIN_NCHANNELS` ..= `NCCL_MAX_NCHANNELS`).
    pub nchannels: Option<usize>,
    /// Per-connection FIFO bytes (`NCCL_BUFFSIZE`, default 4 MiB), cut in `NCCL_STEPS` slots.
    pub buffsize: Option<usize>,
    /// Plugin selection; `None` = [`LoadOptions::from_env`].
    pub net: Option<LoadOptions>,
    /// Bootstrap settings; `None` = from `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY`,
    /// `NCCL_COMM_ID`, `NCCL_SOCKET_RETRY_*`.
    pub bootstrap: Option<BootstrapConfig>,
    /// An already loaded plugin to use instead of loading one (embedding, tests).
    pub preloaded_net: Option<PreloadedNet>,
    /// CollNet for this communicator (`ncclConfig_t.collnetEnable`); `NCCL_COLLNET_ENABLE`,
    /// when set, overrides it as in NCCL; default off. See [`resolve_collnet_enable`].
    pub collnet_enable: Option<bool>,
    /// The communicator's network traffic class (`ncclConfig_t.trafficClass`), handed
    /// to the net plugin in `ncclNetCommConfig_t` (v11+ `init`, v10 `connect`); what a
    /// class means is the plugin's (the IB plugin: the GRH traffic class unless
    /// `NCCL_IB_TC` is set; the socket plugin: `IP_TOS`). `None`:
    /// `NCCL_NET_TRAFFIC_CLASS_UNDEF` (-1). No `NCCL_*` variable overrides it, as in
    /// NCCL. See [`resolve_traffic_class`].
    pub traffic_class: Option<i32>,
    /// RMA contexts of the one-sided API (`ncclConfig_t.numRmaCtx`, default 1, at most
    /// 64; 0 disables one-sided operations); `NCCL_NUM_RMA_CTX`, when set, overrides it
    /// as in NCCL. See [`resolve_num_rma_ctx`].
    pub num_rma_ctx: Option<i32>,
    /// The CUDA device this communicator's rank drives. NCCL binds the device
    /// current at init (`src/init.cc`, `ncclCommInitRank`: `cudaGetDevice`);
    /// the C API sets it from the current device when CUDA is present. Bound
    /// ranks on one host may use the P2P transport (FIFOs in GPU memory,
    /// `NCCL_P2P_DISABLE` / `NCCL_P2P_LEVEL`); `None`: a host process (P2P
    /// never used).
    pub cuda_dev: Option<usize>,
}

/// `NCCL_NET_TRAFFIC_CLASS_UNDEF`: no traffic class.
pub const TRAFFIC_CLASS_UNDEF: i32 = -1;

/// The traffic class handed to the net plugin, as NCCL 2.30.7 resolves it: the config's
/// value when set (`src/init.cc`, `parseCommConfig`: `NCCL_CONFIG_DEFAULT(..., trafficClass,
/// NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, "Traffic class", ...)`, which logs
/// `Comm config Traffic class set to <v>`; `envConfigOverride` reads no variable for it),
/// else `NCCL_NET_TRAFFIC_CLASS_UNDEF` (`src/plugin/net.cc`, `ncclNetPluginInit`: an
/// undefined config class becomes -1 in `ncclNetCommConfig_t`). A set value is passed as
/// is (NCCL checks no range; the plugin decides what it accepts).
pub fn resolve_traffic_class(c: &CommConfig) -> i32 {
    match c.traffic_class {
        Some(tc) => {
            crate::log::nccl_info!(ENV, "Comm config Traffic class set to {tc}");
            tc
        }
        None => TRAFFIC_CLASS_UNDEF,
    }
}

/// `comm->config.numRmaCtx` as NCCL 2.30.7 resolves it: the config's value, default 1
/// (`src/init.cc`, `parseCommConfig`: `NCCL_CONFIG_DEFAULT(…, numRmaCtx, …, 1, …)`),
/// then `envConfigOverride`: `NCCL_NUM_RMA_CTX`, when set, replaces it unless negative
/// (NCCL's INFO lines `NCCL_NUM_RMA_CTX <v> is too low, leaving it set at <c>` and
/// `NCCL_NUM_RMA_CTX=0, RMA disabled for this communicator`).
///
/// Errors: a config value outside 0..=64, or `NCCL_NUM_RMA_CTX` above 64 or not an
/// integer (`Error::InvalidArgument` / `Error::Config`).
pub fn resolve_num_rma_ctx(c: &CommConfig) -> Result<usize> {
    let mut n = match c.num_rma_ctx {
        None => 1,
        Some(v @ 0..=64) => v as usize,
        Some(v) => {
            return Err(Error::InvalidArgument(format!(
                "numRmaCtx {v} is out of range (expected 0..=64; 0 disables one-sided operations)"
            )));
        }
    };
    let cfg = Config::global();
    if cfg.setting(params::NUM_RMA_CTX.name).is_some() {
        match params::NUM_RMA_CTX.get(cfg).map_err(cfg_err)? {
            v if v < 0 => crate::log::nccl_info!(ENV, "NCCL_NUM_RMA_CTX {v} is too low, leaving it set at {n}"),
            v => {
                if v == 0 {
                    crate::log::nccl_info!(ENV, "NCCL_NUM_RMA_CTX=0, RMA disabled for this communicator");
                }
                n = v as usize;
            }
        }
    }
    Ok(n)
}

/// `comm->config.collnetEnable` as NCCL 2.30.7 resolves it (`src/init.cc`,
/// `envConfigOverride`): `NCCL_COLLNET_ENABLE` (environment or `nccl.conf`), when set,
/// overrides [`CommConfig::collnet_enable`] (NCCL's INFO lines `Comm config collnetEnable
/// reset to NCCL_COLLNET_ENABLE=<v>` and `NCCL_COLLNET_ENABLE set by environment to
/// <v>.`); unset, the config decides; neither: off. Whether CollNet is then used also
/// needs a usable CollNet table (`collNetSupport`) and
/// [`collnet_after_node_threshold`].
///
/// Errors: `NCCL_COLLNET_ENABLE` set to anything but 0 or 1 (`Error::Config`).
pub fn resolve_collnet_enable(c: &CommConfig) -> Result<bool> {
    let cfg = Config::global();
    if cfg.setting(params::tune::COLLNET_ENABLE.name).is_some() {
        let v = params::tune::COLLNET_ENABLE.get(cfg).map_err(cfg_err)?;
        if c.collnet_enable.is_some() {
            crate::log::nccl_info!(ENV, "Comm config collnetEnable reset to NCCL_COLLNET_ENABLE={v}");
        }
        // NCCL's "NCCL_COLLNET_ENABLE set by environment to <v>." is the
        // configuration's echo of every set variable (`Config::echo`).
        return Ok(v == 1);
    }
    Ok(c.collnet_enable.unwrap_or(false))
}

/// `NCCL_COLLNET_NODE_THRESHOLD` (default 2, NCCL's `ncclParamCollNetNodeThreshold`).
///
/// Errors: a value that is not an integer (`Error::Config`).
pub fn collnet_node_threshold() -> Result<i64> {
    params::tune::COLLNET_NODE_THRESHOLD
        .get(Config::global())
        .map_err(cfg_err)
}

/// NCCL's check after the topology all-gather (`src/init.cc`, `initTransportsRank`):
/// with CollNet enabled and fewer than `threshold` nodes, CollNet is turned off and
/// NCCL's INFO line `Communicator has <n> nodes which is less than CollNet node
/// threshold <t>, disabling CollNet` is logged. Returns whether CollNet stays on.
pub fn collnet_after_node_threshold(enabled: bool, n_nodes: usize, threshold: i64) -> bool {
    if enabled && (n_nodes as i64) < threshold {
        crate::log::nccl_info!(
            INIT,
            "Communicator has {n_nodes} nodes which is less than CollNet node threshold {threshold}, disabling CollNet"
        );
        return false;
    }
    enabled
}

/// A plugin loaded by the caller, for [`CommConfig::preloaded_net`].
#[derive(Clone)]
pub struct PreloadedNet(pub Arc<dyn NetPlugin>);

impl std::fmt::Debug for PreloadedNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PreloadedNet").field(&self.0.info().name).finish()
    }
}

/// Resolved parameters.
#[derive(Debug, Clone)]
pub(crate) struct CommParams {
    pub timeout: Duration,
    /// The caller's cap on channels (`CommConfig::nchannels`).
    pub nchannels: Option<usize>,
    pub buffsize: usize,
    pub p2p_chunksize: usize,
    /// `FERROCCL_NET_USER_SEND_MIN` (`None` when -1).
    pub user_send_min: Option<usize>,
    /// `FERROCCL_MAX_QUEUED_OPS`: enqueue blocks beyond this many queued work items.
    pub max_queued_ops: usize,
    /// `FERROCCL_PROXY_SPIN_US` (-1 = automatic, see `proxy_spin`).
    pub proxy_spin_us: i64,
    /// Tuning parameters (`NCCL_ALGO`, `NCCL_PROTO`, thread/channel thresholds, …).
    pub tune: crate::tune::TuneParams,
    pub bootstrap: BootstrapConfig,
    /// [`resolve_traffic_class`]: what the plugin's `ncclNetCommConfig_t` carries.
    pub traffic_class: i32,
    /// [`resolve_num_rma_ctx`]: the one-sided API's contexts (0: disabled).
    pub num_rma_ctx: usize,
}

fn cfg_err(e: crate::config::ConfigError) -> Error {
    Error::Config(e)
}

fn str_param(p: &crate::config::StrParam) -> Option<String> {
    p.get(Config::global()).map(str::to_string)
}

impl CommParams {
    pub(crate) fn resolve(c: &CommConfig) -> Result<CommParams> {
        let cfg = Config::global();
        cfg.env_plugin_result().map_err(cfg_err)?; // NCCL: NCCLCHECK(ncclInitEnv()) at comm init
        let timeout = match c.timeout {
            Some(t) => t,
            None => Duration::from_secs(params::TIMEOUT_SEC.get(cfg).map_err(cfg_err)? as u64),
        };
        let min_ch = params::MIN_NCHANNELS.get(cfg).map_err(cfg_err)? as usize;
        let max_ch = params::MAX_NCHANNELS.get(cfg).map_err(cfg_err)? as usize;
        if min_ch > max_ch {
            return Err(Error::ConfigMismatch(format!(
                "NCCL_MIN_NCHANNELS={min_ch} is larger than NCCL_MAX_NCHANNELS={max_ch}"
            )));
        }
        let nchannels = match c.nchannels {
            Some(n) if (1..=64).contains(&n) => Some(n),
            Some(n) => {
                return Err(Error::ConfigMismatch(format!(
                    "nchannels {n} is out of range (expected 1..=64)"
                )));
            }
            // The topology search decides, within NCCL_MIN/MAX_NCHANNELS.
            None => None,
        };
        let buffsize = match c.buffsize {
            Some(b) => b,
            None => params::BUFFSIZE.get(cfg).map_err(cfg_err)? as usize,
        };
        if buffsize < NCCL_STEPS_MIN_BYTES || buffsize % 64 != 0 {
            return Err(Error::ConfigMismatch(format!(
                "NCCL_BUFFSIZE={buffsize} must be a multiple of 64 and at least {NCCL_STEPS_MIN_BYTES}"
            )));
        }
        let p2p_chunksize = params::P2P_NET_CHUNKSIZE.get(cfg).map_err(cfg_err)? as usize;
        let p2p_chunksize = p2p_chunksize / 64 * 64;
        let mut bootstrap = match &c.bootstrap {
            Some(b) => b.clone(),
            None => BootstrapConfig {
                ifname: str_param(&params::SOCKET_IFNAME),
                family: crate::bootstrap::SocketFamily::from_nccl(params::SOCKET_FAMILY.get(cfg)),
                comm_id: str_param(&params::COMM_ID),
                retry_count: params::SOCKET_RETRY_CNT.get(cfg).map_err(cfg_err)? as u32,
                retry_sleep: Duration::from_millis(params::SOCKET_RETRY_SLEEP_MSEC.get(cfg).map_err(cfg_err)? as u64),
                ..Default::default()
            },
        };
        bootstrap.timeout = timeout;
        Ok(CommParams {
            timeout,
            nchannels,
            buffsize,
            p2p_chunksize,
            // Operations with buffers of at least this many bytes send straight from
            // user memory registered with the plugin for the operation (regMr at
            // its start, deregMr at its end) instead of copying into the FIFO
            // first; -1 = never. Below 64 KiB the copy is cheaper than the
            // registrations.
            user_send_min: usize::try_from(params::NET_USER_SEND_MIN.get(cfg).map_err(cfg_err)?).ok(),
            // Operations (or groups) queued on a communicator before enqueue blocks:
            // bounds the memory an application that never synchronizes can make us
            // hold (each queued item is a few hundred bytes), as NCCL's bounded work
            // FIFO does.
            max_queued_ops: params::MAX_QUEUED_OPS.get(cfg).map_err(cfg_err)? as usize,
            proxy_spin_us: params::PROXY_SPIN_US.get(cfg).map_err(cfg_err)?,
            tune: crate::tune::TuneParams::from_config(cfg)?,
            bootstrap,
            traffic_class: resolve_traffic_class(c),
            num_rma_ctx: resolve_num_rma_ctx(c)?,
        })
    }
}

const NCCL_STEPS_MIN_BYTES: usize = 8 * 4096;

/// A loaded net plugin: the plugin, its identity, and the file of an external
/// (not in-tree, not preloaded) plugin library, where NCCL also looks for a tuner.
pub(crate) type LoadedNetParts = (Arc<dyn NetPlugin>, NetInfo, Option<std::path::PathBuf>);

/// Loads the net plugin for a communicator; the error is kept as text so it can be
/// shared with the other ranks during the init agreement.
pub(crate) fn load_net(c: &super::CommConfig) -> std::result::Result<LoadedNetParts, String> {
    if let Some(p) = &c.preloaded_net {
        return Ok((p.0.clone(), p.0.info().clone(), None));
    }
    let opts = c.net.clone().unwrap_or_else(LoadOptions::from_env);
    match crate::plugin::load_net(&opts) {
        Ok(l) => {
            let info = l.plugin.info().clone();
            let external = l.is_external().then(|| info.path.clone());
            Ok((l.plugin, info, external))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Initialises logging from the process config (first call only), echoes the
/// `NCCL_*` settings once at INFO, and tags this thread's lines with `rank`.
pub(crate) fn init_logging(rank: usize) {
    static ECHO: std::sync::Once = std::sync::Once::new();
    let cfg = Config::global();
    crate::log::init_from_config(cfg);
    crate::log::set_rank(Some(rank as i32));
    ECHO.call_once(|| {
        for line in cfg.echo() {
            crate::log::nccl_info!(ENV, "{line}");
        }
    });
}
