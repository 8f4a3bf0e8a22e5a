//! Topology model (NCCL 2.30.7 `src/graph/topo.h`, `topo.cc`, `paths.cc`, `xml.cc`): the
//! machine as a graph of GPUs, PCI switches, NVSwitch, CPUs (NUMA domains), NICs and net
//! devices, with link bandwidths and precomputed paths, built from NCCL's topology XML.
//!
//! Layers, bottom up:
//! - [`types`]: node/link/path types, bandwidth constants, NCCL's parsing helpers.
//! - [`xml`]: the XML tree (quick-xml reader, NCCL's writer, fuse, trim).
//! - [`fuse`]: NIC fusion (`makeVDevice`, `NCCL_NET_MERGE_LEVEL`, `NCCL_NET_FORCE_MERGE`).
//! - [`fill`]: the XML edits NCCL makes while detecting a rank's view of its host (a GPU
//!   added by bus id, net plugin devices attached by `pciPath`, CPU attributes).
//! - [`system`]: the graph built from a fused XML (`ncclTopoGetSystemFromXml`).
//! - [`paths`]: `ncclTopoComputePaths`, trimming, P2P/GDR rules, local NIC selection.
//! - [`model`]: hardware facts for PCI-skeleton files (what NCCL gets from NVML and the net
//!   plugin), used by the offline explorer.
//! - [`detect`]: this host from sysfs (CPUs/NUMA, the PCI tree above each NIC, affinity,
//!   host hash); [`nvml`]: GPUs through a dynamically loaded NVML when a driver is present.
//! - [`record`]: the per-rank record exchanged at init ([`TopoRecord`]).
//!
//! ## CPU-process ranks
//!
//! ferroccl's ranks are processes; without a GPU a rank has no PCI function. Such a rank
//! enters the model as a *process device*: a `<pci busid="fffe:00:XX.0" class="0x03ff00">`
//! directly under the `<cpu>` of the NUMA node its CPU affinity lies in, holding a
//! `<gpu dev="<local index>" sm="0" rank="<rank>" gdr="0"/>`. In the system this becomes a
//! DEV node and a GPU node attached to that CPU by a PCI link, exactly like a PCIe GPU on a
//! root port with no switch (NCCL's analogue: the GPUs of Azure NC A100 v4 or AWS g5, each
//! on its own root port). Consequences, all NCCL's own rules:
//! - two ranks on one NUMA node are `PHB` apart, on different nodes `SYS` (inter-socket
//!   bandwidth from the CPU vendor/model), so rings and tree chains keep NUMA neighbours
//!   together and cross the socket link as few times as bandwidth allows;
//! - P2P is off (`PHB` > the default `PXB` level) and GPUDirect RDMA is off (`gdr="0"`), so
//!   rank↔NIC traffic goes through the rank's CPU, and the NIC per channel is the closest one
//!   by NUMA (`ncclTopoGetLocalNet` spreads ranks of one NUMA node over its NICs by `dev`);
//! - the link is PCIe Gen3 x16 (12 GB/s), the bandwidth NCCL assumes when sysfs is silent:
//!   a single-socket host finds one ring per search (two channels after NCCL's doubling),
//!   which suits a CPU runtime.
//!
//! `dev` is the rank's index among the ranks of its host in rank order, as NVML's index
//! is for GPUs, so NIC spreading works the same. `sm="0"` exempts these devices from the
//! pre-Ampere reverse-link charge of the search (`followPath`), which models GPU PCIe reads
//! and has no meaning for a process.

pub mod detect;
pub mod fill;
pub mod fuse;
pub mod model;
pub mod nvml;
pub mod paths;
pub mod record;
pub mod system;
pub mod types;
pub mod xml;

use std::path::PathBuf;

pub use paths::NetDevsPolicy;
pub use record::TopoRecord;
pub use system::{NodeInfo, NodeRef, System};
pub use types::{LinkType, NodeType, Path, PathType};
pub use xml::XmlNode;

/// Errors of topology loading, detection and graph construction. Messages name the XML
/// element and attribute at fault where there is one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopoError {
    /// The document is not well-formed XML (or has text where NCCL expects elements).
    #[error("{origin}: XML syntax error at byte {position}: {message}")]
    XmlSyntax {
        /// The file or input name.
        origin: String,
        /// Byte offset.
        position: u64,
        /// What was wrong.
        message: String,
    },
    /// A required attribute is absent.
    #[error("<{element}> is missing attribute \"{attribute}\"")]
    MissingAttribute {
        /// Element name.
        element: String,
        /// Attribute name.
        attribute: String,
    },
    /// An attribute value does not parse.
    #[error("<{element} {attribute}=\"{value}\">: expected {expected}")]
    BadAttribute {
        /// Element name.
        element: String,
        /// Attribute name.
        attribute: String,
        /// The value found.
        value: String,
        /// What was expected.
        expected: String,
    },
    /// `version` is not the one NCCL 2.30.7 reads.
    #[error("<{element} version=\"{found}\">: unknown version, this reader needs version {expected}")]
    Version {
        /// Element name.
        element: String,
        /// Version found.
        found: String,
        /// Version required.
        expected: i64,
    },
    /// A required element is absent.
    #[error("{what}: no <{element}> element")]
    MissingElement {
        /// The input.
        what: String,
        /// Element name.
        element: String,
    },
    /// An input exceeds one of NCCL's limits.
    #[error("{what}: more than {limit} {item}")]
    TooLarge {
        /// The input.
        what: String,
        /// The limit.
        limit: usize,
        /// What is counted.
        item: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Inconsistent hardware-model facts (explorer options).
    #[error("hardware model: {0}")]
    Model(String),
    /// The topology contradicts itself (NCCL's `ncclInternalError` cases: a GPU with no
    /// path to any NIC, a DEV missing for an NVLink, …).
    #[error("topology: {0}")]
    Topology(String),
    /// A per-rank record is malformed or inconsistent with the others.
    #[error("topology record: {0}")]
    Record(String),
    /// A graph (`NCCL_GRAPH_FILE`) is inconsistent with the system.
    #[error("graph: {0}")]
    Graph(String),
}

/// Default topology file NCCL tries when `NCCL_TOPO_FILE` is unset.
pub const DEFAULT_TOPO_FILE: &str = "/var/run/nvidia-topologyd/virtualTopology.xml";

/// The knobs of topology and graph construction, with NCCL's defaults, filled from
/// the `NCCL_*` variables declared in [`crate::config::params::topo`] (channel
/// bounds from `NCCL_MIN_NCHANNELS` / `NCCL_MAX_NCHANNELS`).
#[derive(Debug, Clone, PartialEq)]
pub struct TopoParams {
    /// `NCCL_TOPO_FILE`: topology to start from instead of detection.
    pub topo_file: Option<PathBuf>,
    /// `NCCL_GRAPH_FILE`: graphs to load instead of searching.
    pub graph_file: Option<PathBuf>,
    /// `NCCL_TOPO_DUMP_FILE`: where rank `topo_dump_rank` writes the fused topology.
    pub topo_dump_file: Option<PathBuf>,
    /// `NCCL_TOPO_DUMP_FILE_RANK` (default 0).
    pub topo_dump_rank: usize,
    /// `NCCL_GRAPH_DUMP_FILE`: where rank `graph_dump_rank` writes its graphs.
    pub graph_dump_file: Option<PathBuf>,
    /// `NCCL_GRAPH_DUMP_FILE_RANK` (default 0).
    pub graph_dump_rank: usize,
    /// `NCCL_CROSS_NIC` (0 = same NIC/rail, 1 = any, 2 = alternate; default 2).
    pub cross_nic: i64,
    /// `NCCL_MIN_NCHANNELS` (default 0: no minimum).
    pub min_nchannels: usize,
    /// `NCCL_MAX_NCHANNELS` (default 64).
    pub max_nchannels: usize,
    /// `config.minCTAs` (default 1).
    pub min_ctas: usize,
    /// `config.maxCTAs` (default 64).
    pub max_ctas: usize,
    /// `NCCL_P2P_LEVEL` / `NCCL_P2P_DISABLE=1` (→ LOC).
    pub p2p_level: Option<PathType>,
    /// `NCCL_NVB_DISABLE`.
    pub nvb_disable: bool,
    /// `NCCL_PXN_DISABLE`.
    pub pxn_disable: bool,
    /// `NCCL_PXN_C2C` (default 1).
    pub pxn_c2c: bool,
    /// `NCCL_NET_GDR_LEVEL`.
    pub net_gdr_level: Option<PathType>,
    /// `NCCL_NET_GDR_C2C` (default 1).
    pub net_gdr_c2c: bool,
    /// `NCCL_NET_GDR_READ` (default -2: on for cc ≥ 80 or NVLink-connected GPUs).
    pub net_gdr_read: i64,
    /// `NCCL_NET_GDR_MLOPART` (default 0).
    pub net_gdr_mlopart: bool,
    /// `NCCL_NETDEVS_POLICY`.
    pub netdevs_policy: NetDevsPolicy,
    /// `NCCL_P2P_PXN_LEVEL` (default 2).
    pub p2p_pxn_level: i64,
    /// `NCCL_NVLS_ENABLE` (0 off, 1 on, 2 = when the GPUs support multicast; default 2):
    /// whether the NVLS graph is searched ([`nvls_support`]).
    pub nvls_enable: i64,
    /// Record the search's relaxation steps (explorer `--why`).
    pub explain: bool,
}

impl Default for TopoParams {
    fn default() -> Self {
        TopoParams {
            topo_file: None,
            graph_file: None,
            topo_dump_file: None,
            topo_dump_rank: 0,
            graph_dump_file: None,
            graph_dump_rank: 0,
            cross_nic: 2,
            min_nchannels: 0,
            max_nchannels: types::MAXCHANNELS,
            min_ctas: 1,
            max_ctas: types::MAXCHANNELS,
            p2p_level: None,
            nvb_disable: false,
            pxn_disable: false,
            pxn_c2c: true,
            net_gdr_level: None,
            net_gdr_c2c: true,
            net_gdr_read: -2,
            net_gdr_mlopart: false,
            netdevs_policy: NetDevsPolicy::Auto,
            p2p_pxn_level: 2,
            nvls_enable: 2,
            explain: false,
        }
    }
}

/// `ncclGetLevel`: a path type name (`LOC`…`SYS`) or a legacy number 0..5
/// (→ LOC, PIX, PXB, PHB, SYS, SYS); `None` when unrecognised.
pub fn parse_level(s: &str) -> Option<PathType> {
    if let Some(t) = PathType::from_name(s).filter(|&t| t <= PathType::Sys) {
        return Some(t);
    }
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
        let old: usize = digits.parse().unwrap_or(usize::MAX).min(5);
        return Some(
            [
                PathType::Loc,
                PathType::Pix,
                PathType::Pxb,
                PathType::Phb,
                PathType::Sys,
                PathType::Sys,
            ][old],
        );
    }
    None
}

impl TopoParams {
    /// Reads the parameters from a lookup function (`NCCL_*` name → value), e.g. the
    /// config layer's `get_str`. Unset or empty values keep the defaults; malformed numbers
    /// are reported.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<TopoParams, TopoError> {
        use crate::config::params::{self, topo as t};
        let mut p = TopoParams::default();
        let val_named = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let int_named = |k: &str| -> Result<Option<i64>, TopoError> {
            match val_named(k) {
                None => Ok(None),
                Some(v) => types::parse_c_int(&v)
                    .map(Some)
                    .ok_or_else(|| TopoError::Model(format!("{k}={v}: expected an integer"))),
            }
        };
        let val = |p: &crate::config::StrParam| val_named(p.name);
        let int = |p: &crate::config::StrParam| int_named(p.name);
        p.topo_file = val(&t::TOPO_FILE).map(PathBuf::from);
        p.graph_file = val(&t::GRAPH_FILE).map(PathBuf::from);
        p.topo_dump_file = val(&t::TOPO_DUMP_FILE).map(PathBuf::from);
        p.graph_dump_file = val(&t::GRAPH_DUMP_FILE).map(PathBuf::from);
        if let Some(v) = int(&t::TOPO_DUMP_FILE_RANK)? {
            p.topo_dump_rank = usize::try_from(v).unwrap_or(0);
        }
        if let Some(v) = int(&t::GRAPH_DUMP_FILE_RANK)? {
            p.graph_dump_rank = usize::try_from(v).unwrap_or(0);
        }
        if let Some(v) = int(&t::CROSS_NIC)? {
            p.cross_nic = v;
        }
        if let Some(v) = int_named(params::MIN_NCHANNELS.name)?.or(int(&t::MIN_NRINGS)?) {
            p.min_nchannels = v.clamp(0, types::MAXCHANNELS as i64) as usize;
        }
        if let Some(v) = int_named(params::MAX_NCHANNELS.name)?.or(int(&t::MAX_NRINGS)?) {
            p.max_nchannels = v.clamp(1, types::MAXCHANNELS as i64) as usize;
        }
        if int(&t::P2P_DISABLE)? == Some(1) {
            p.p2p_level = Some(PathType::Loc);
        } else if let Some(v) = val(&t::P2P_LEVEL) {
            p.p2p_level = parse_level(&v);
        }
        p.nvb_disable = int(&t::NVB_DISABLE)?.unwrap_or(0) != 0;
        p.pxn_disable = int(&t::PXN_DISABLE)?.unwrap_or(0) != 0;
        p.pxn_c2c = int(&t::PXN_C2C)?.unwrap_or(1) != 0;
        p.net_gdr_level = val(&t::NET_GDR_LEVEL).and_then(|v| parse_level(&v));
        p.net_gdr_c2c = int(&t::NET_GDR_C2C)?.unwrap_or(1) != 0;
        if let Some(v) = int(&t::NET_GDR_READ)? {
            p.net_gdr_read = v;
        }
        p.net_gdr_mlopart = int(&t::NET_GDR_MLOPART)?.unwrap_or(0) != 0;
        if let Some(v) = val(&t::NETDEVS_POLICY) {
            p.netdevs_policy = NetDevsPolicy::parse(&v);
        }
        if let Some(v) = int(&t::P2P_PXN_LEVEL)? {
            p.p2p_pxn_level = v;
        }
        if let Some(v) = int(&t::NVLS_ENABLE)? {
            p.nvls_enable = v;
        }
        if let Some(v) = int(&t::MIN_CTAS)?.filter(|&v| v > 0) {
            p.min_ctas = v.min(types::MAXCHANNELS as i64) as usize;
        }
        if let Some(v) = int(&t::MAX_CTAS)?.filter(|&v| v > 0) {
            p.max_ctas = v.min(types::MAXCHANNELS as i64) as usize;
        }
        p.min_ctas = p.min_ctas.min(p.max_ctas);
        Ok(p)
    }

    /// [`from_lookup`](Self::from_lookup) over the config layer (environment, then
    /// `~/.nccl.conf`, then `/etc/nccl.conf`).
    pub fn from_config(cfg: &crate::config::Config) -> Result<TopoParams, TopoError> {
        TopoParams::from_lookup(&|k| cfg.get_str(k).map(str::to_string))
    }

    /// [`from_lookup`](Self::from_lookup) over the process environment.
    pub fn from_env() -> Result<TopoParams, TopoError> {
        TopoParams::from_lookup(&|k| std::env::var(k).ok())
    }
}

/// `ncclNvlsInit`'s verdict for one host's system: NVLS (NVLink SHARP) is used when
/// `NCCL_NVLS_ENABLE` is not 0, the host has more than two GPUs and, with the default 2,
/// the GPUs support multicast objects (`CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`). Offline
/// that attribute is modelled as "every GPU is sm 9.0 or newer and the system has an
/// NVSwitch" (multicast needs both, and every such machine NCCL 2.30.7 supports has it with
/// its fabric manager running); `NCCL_NVLS_ENABLE=1` forces it as in NCCL.
pub fn nvls_support(sys: &System, nvls_enable: i64) -> bool {
    let ngpus = sys.count(NodeType::Gpu);
    if nvls_enable == 0 || ngpus <= 2 {
        return false;
    }
    if nvls_enable != 2 {
        return true;
    }
    let cc_min = sys.comp_cap().map_or(0, |(lo, _)| lo);
    cc_min >= 90 && sys.count(NodeType::Nvs) > 0
}
