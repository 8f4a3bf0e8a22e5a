//! The record every rank contributes to the init all-gather (NCCL's
//! `struct ncclPeerInfo`, `src/include/transport.h`, filled by `fillInfo` in
//! `src/init.cc`): who the rank is (host hash, pid), which net plugin it loaded,
//! the transport parameters that must agree, and its topology facts; and the
//! agreement every rank then checks on the whole set, so that all ranks fail
//! with the same per-rank report when they disagree.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::params::CommParams;
use crate::error::{Error, Result};
use crate::plugin::net::NetInfo;
use crate::transport::TransportParams;

/// Largest encoded record accepted from a peer (bytes). Records are a few
/// hundred bytes plus the topology facts; anything larger is a peer bug.
const MAX_RECORD_BYTES: usize = 16 << 20;

/// The net plugin a rank loaded, as compared across ranks: vtable name, API
/// version, file and the file's content hash (BLAKE3, hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NetIdentity {
    /// Vtable `name`.
    pub name: String,
    /// `ncclNet_vN` version.
    pub version: u32,
    /// The file it was loaded from.
    pub path: String,
    /// BLAKE3 of the file's bytes (empty when unreadable).
    pub hash: String,
}

impl NetIdentity {
    pub(crate) fn of(info: &NetInfo) -> NetIdentity {
        NetIdentity {
            name: info.name.clone(),
            version: info.version,
            path: info.path.display().to_string(),
            hash: file_hash(&info.path),
        }
    }
}

impl std::fmt::Display for NetIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "net={} v{} file={} hash={}",
            self.name, self.version, self.path, self.hash
        )
    }
}

/// BLAKE3 of a file's bytes in hex (empty when unreadable).
fn file_hash(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| blake3::hash(&b).to_hex().to_string())
        .unwrap_or_default()
}

/// One rank's record (`ncclPeerInfo`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PeerInfo {
    /// The rank that sent it.
    pub rank: usize,
    /// Identity of the rank's host (NCCL's `getHostHash`, [`crate::topo::detect::host_hash`]:
    /// host name and boot id, or `NCCL_HOSTID`); ranks with equal hashes share a host.
    pub host_hash: u64,
    /// Process id.
    pub pid: u32,
    /// PID namespace ([`crate::transport::pid_namespace`]): the shared-memory
    /// transport reaches a peer's segment through `/proc/<pid>`.
    pub pid_ns: u64,
    /// The rank's transport switches (`NCCL_SHM_DISABLE`, `NCCL_NET_DISABLE_INTRA`).
    pub transport: TransportParams,
    /// The net plugin loaded, or why loading failed.
    pub net: std::result::Result<NetIdentity, String>,
    /// `NCCL_BUFFSIZE` (bytes per connection FIFO); must agree.
    pub buffsize: usize,
    /// `NCCL_P2P_NET_CHUNKSIZE`; must agree.
    pub p2p_chunksize: usize,
    /// This rank's cap on channels, if any; the communicator uses the smallest.
    pub nchannels: Option<usize>,
    /// The rank's topology facts (opaque here; see `crate::graph`).
    pub topo: Vec<u8>,
    /// Net device 0's speed (Mbit/s, `ncclNetProperties.speed`; 0 unknown),
    /// for the tuning every rank must compute alike.
    pub net_speed_mbps: i32,
    /// Net device 0's latency (µs, `ncclNetProperties.latency`; 0 unknown).
    pub net_latency_us: f32,
    /// CPU cores this process may run on.
    pub cores: u32,
    /// This rank wants CollNet and its plugin's table is usable: its
    /// `reduceSupport` answers ([`crate::plugin::collnet::SupportBits`] bytes);
    /// `None` otherwise (see `comm::collnet`).
    #[serde(default)]
    pub collnet: Option<Vec<u8>>,
    /// The GPU the rank's communicator bound (`CommConfig::cuda_dev`: NCCL's
    /// `cudaDev` and `busId`); `None`: a host process.
    #[serde(default)]
    pub gpu: Option<crate::transport::p2p::GpuLoc>,
}

impl PeerInfo {
    /// This rank's record.
    pub(crate) fn local(
        rank: usize,
        net: &std::result::Result<NetIdentity, String>,
        p: &CommParams,
        transport: TransportParams,
    ) -> PeerInfo {
        PeerInfo {
            rank,
            host_hash: crate::topo::detect::host_hash(),
            pid: std::process::id(),
            pid_ns: crate::transport::pid_namespace(),
            transport,
            net: net.clone(),
            buffsize: p.buffsize,
            p2p_chunksize: p.p2p_chunksize,
            nchannels: p.nchannels,
            topo: Vec::new(),
            net_speed_mbps: 0,
            net_latency_us: 0.0,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as u32,
            collnet: None,
            gpu: None,
        }
    }

    /// Encodes the record for the bootstrap all-gather.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a PeerInfo always serializes")
    }

    /// Decodes rank `from`'s record. Errors: [`Error::Remote`] naming the rank
    /// when the bytes are too long, not a record, or claim another rank.
    pub(crate) fn from_bytes(from: usize, b: &[u8]) -> Result<PeerInfo> {
        if b.len() > MAX_RECORD_BYTES {
            return Err(Error::Remote(format!(
                "rank {from} sent a {}-byte peer-info record (at most {MAX_RECORD_BYTES})",
                b.len()
            )));
        }
        let p: PeerInfo = serde_json::from_slice(b)
            .map_err(|e| Error::Remote(format!("rank {from} sent a malformed peer-info record: {e}")))?;
        if p.rank != from {
            return Err(Error::Remote(format!(
                "rank {from} sent a peer-info record claiming to be rank {}",
                p.rank
            )));
        }
        Ok(p)
    }
}

/// What every rank agreed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Agreement {
    /// Cap on channels: the smallest any rank asked for (`None`: the topology decides).
    pub nchannels: Option<usize>,
}

/// An agreement failure, the same on every rank.
#[derive(Debug)]
pub(crate) enum Disagreement {
    /// This rank or another could not load its plugin, or ranks loaded different ones.
    Net(Error),
    /// Transport parameters differ.
    Params(Error),
}

impl From<Disagreement> for Error {
    fn from(d: Disagreement) -> Error {
        match d {
            Disagreement::Net(e) | Disagreement::Params(e) => e,
        }
    }
}

/// Checks every rank's record (`peers[r]` is rank `r`'s): the same net plugin
/// everywhere, the same FIFO parameters. `local_load_error` is this rank's own
/// plugin load error, reported first when every rank failed the same way.
pub(crate) fn agree(
    peers: &[PeerInfo],
    local_load_error: Option<&str>,
) -> std::result::Result<Agreement, Disagreement> {
    let line = |p: &PeerInfo| match &p.net {
        Ok(id) => id.to_string(),
        Err(e) => format!("net=<failed to load: {e}>"),
    };
    let first = line(&peers[0]);
    let same = peers.iter().all(|p| line(p) == first);
    if !same || peers.iter().any(|p| p.net.is_err()) {
        let report: Vec<String> = peers
            .iter()
            .map(|p| format!("  rank {}: {}", p.rank, line(p)))
            .collect();
        let report = report.join("\n");
        if let (Some(e), true) = (local_load_error, same) {
            return Err(Disagreement::Net(Error::PluginLoad(format!("{e}\n{report}"))));
        }
        return Err(Disagreement::Net(Error::PluginMismatch(report)));
    }
    let fifo = |p: &PeerInfo| (p.buffsize, p.p2p_chunksize);
    if peers.iter().any(|p| fifo(p) != fifo(&peers[0])) {
        let report: Vec<String> = peers
            .iter()
            .map(|p| {
                format!(
                    "  rank {}: buffsize={} p2p_chunksize={}",
                    p.rank, p.buffsize, p.p2p_chunksize
                )
            })
            .collect();
        return Err(Disagreement::Params(Error::ConfigMismatch(format!(
            "ranks disagree on NCCL_BUFFSIZE / NCCL_P2P_NET_CHUNKSIZE:\n{}",
            report.join("\n")
        ))));
    }
    let nchannels = peers.iter().filter_map(|p| p.nchannels).min();
    Ok(Agreement { nchannels })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(rank: usize, name: &str) -> PeerInfo {
        PeerInfo {
            rank,
            host_hash: 1,
            pid: 2,
            pid_ns: 3,
            transport: TransportParams::default(),
            net: Ok(NetIdentity {
                name: name.into(),
                version: 12,
                path: "/x.so".into(),
                hash: "ab".into(),
            }),
            buffsize: 4 << 20,
            p2p_chunksize: 128 << 10,
            nchannels: Some(2 + rank),
            topo: vec![1, 2, 3],
            net_speed_mbps: 10_000,
            net_latency_us: 0.5,
            cores: 2,
            collnet: None,
            gpu: None,
        }
    }

    #[test]
    fn record_round_trips_and_rejects_garbage() {
        let r = rec(3, "Socket");
        assert_eq!(PeerInfo::from_bytes(3, &r.to_bytes()).unwrap(), r);
        assert!(
            matches!(PeerInfo::from_bytes(2, &r.to_bytes()), Err(Error::Remote(m)) if m.contains("claiming to be rank 3"))
        );
        assert!(matches!(PeerInfo::from_bytes(1, b"\x00garbage"), Err(Error::Remote(m)) if m.contains("rank 1")));
    }

    #[test]
    fn agreement_takes_the_smallest_channel_count_and_names_mismatches() {
        let ok = agree(&[rec(0, "Socket"), rec(1, "Socket")], None).unwrap();
        assert_eq!(ok.nchannels, Some(2));
        let e = Error::from(agree(&[rec(0, "Socket"), rec(1, "IB")], None).unwrap_err());
        let m = e.to_string();
        assert!(
            matches!(e, Error::PluginMismatch(_)) && m.contains("rank 1: net=IB"),
            "{m}"
        );
        let mut b = rec(1, "Socket");
        b.buffsize = 1 << 20;
        let e = Error::from(agree(&[rec(0, "Socket"), b], None).unwrap_err());
        assert!(matches!(e, Error::ConfigMismatch(_)), "{e}");
    }
}
