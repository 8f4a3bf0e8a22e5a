//! Detection of this host (NCCL 2.30.7 `xml.cc:ncclTopoGetXmlFromSys`,
//! `ncclTopoGetXmlFromCpu`, `ncclTopoFillNet`; `os/linux.cc`; `utils.cc:getHostHash`):
//! NUMA nodes and their CPU sets, the PCI tree above each net device the plugin reports
//! (by its `pciPath`), this process's CPU affinity, and the host hash.
//!
//! Everything is read below a sysfs root (`/sys` normally) so the same code can be pointed
//! at a copy. A rank that drives a GPU gets its facts from [`super::nvml::gpus`] (or any
//! other source) and calls [`detect_gpu_rank`]; a CPU-process rank calls [`detect_cpu_rank`].
//! Comm init gathers no GPU facts: it detects every rank, bound to a GPU or not, with
//! [`detect_fused`] (the rank's process device), marking the CollNet table's NICs
//! `coll="1"` for a rank bound to a GPU that wants CollNet.
//!
//! One deviation from NCCL: a PCI device whose `numa_node` reads `-1` on a host with a
//! single NUMA node is placed on node 0 (NCCL would create a `<cpu numaid="-1">`), so that
//! it shares a CPU with the ranks, which are placed by their affinity.

use std::path::{Path, PathBuf};

use ferroccl_plugin_api::sdk::Properties;

use super::fill::{self, Ancestor, CpuAttrs, HostFacts, NetFacts, PciAttrs};
use super::record::TopoRecord;
use super::types::djb2a;
use super::xml::{self, Schema, XmlNode};
use super::{DEFAULT_TOPO_FILE, TopoError, TopoParams};

/// `NCCL_PTR_CUDA`.
const PTR_CUDA: i32 = 0x2;

/// A CPU set (bit `i` = CPU `i`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuSet(pub Vec<bool>);

impl CpuSet {
    /// Parses the sysfs `cpumap` format: comma-separated 32-bit hex words, most significant
    /// first (`ncclStrToCpuset`).
    pub fn parse_mask(s: &str) -> Option<CpuSet> {
        let mut bits = Vec::new();
        for word in s.trim().split(',').rev() {
            let w = u32::from_str_radix(word.trim(), 16).ok()?;
            for b in 0..32 {
                bits.push(w & (1 << b) != 0);
            }
        }
        Some(CpuSet(bits))
    }

    /// Formats as a sysfs `cpumap` (at least one 32-bit word).
    pub fn to_mask(&self) -> String {
        let words = self.0.len().div_ceil(32).max(1);
        let mut out = Vec::with_capacity(words);
        for w in (0..words).rev() {
            let mut v = 0u32;
            for b in 0..32 {
                if self.0.get(w * 32 + b).copied().unwrap_or(false) {
                    v |= 1 << b;
                }
            }
            out.push(format!("{v:08x}"));
        }
        out.join(",")
    }

    /// Parses a CPU list (`0-3,8,10-11`).
    pub fn parse_list(s: &str) -> Option<CpuSet> {
        let mut bits = Vec::new();
        for part in s.trim().split(',').filter(|p| !p.is_empty()) {
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
                None => {
                    let a = part.parse::<usize>().ok()?;
                    (a, a)
                }
            };
            if b >= bits.len() {
                bits.resize(b + 1, false);
            }
            for bit in bits.iter_mut().take(b + 1).skip(a) {
                *bit = true;
            }
        }
        Some(CpuSet(bits))
    }

    /// CPUs in both sets.
    pub fn overlap(&self, o: &CpuSet) -> usize {
        self.0.iter().zip(&o.0).filter(|(a, b)| **a && **b).count()
    }

    /// CPUs in the set.
    pub fn count(&self) -> usize {
        self.0.iter().filter(|b| **b).count()
    }
}

/// The host as seen through a sysfs root.
#[derive(Debug, Clone)]
pub struct Sysfs {
    /// `/sys` or a copy of it.
    pub root: PathBuf,
    /// `/proc/cpuinfo` content (CPU vendor/family/model), if readable.
    pub cpuinfo: Option<String>,
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs {
            root: PathBuf::from("/sys"),
            cpuinfo: std::fs::read_to_string("/proc/cpuinfo").ok(),
        }
    }
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// `checkBDFFormat`: `dddd:bb:dd.f`.
fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && [0, 1, 2, 3, 5, 6, 8, 9, 11].iter().all(|&i| b[i].is_ascii_hexdigit())
}

impl Sysfs {
    /// Online NUMA nodes with their CPU sets (`node<N>/cpumap`), ascending.
    pub fn numa_nodes(&self) -> Vec<(i64, CpuSet)> {
        let dir = self.root.join("devices/system/node");
        let mut out = Vec::new();
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(n) = name.strip_prefix("node").and_then(|n| n.parse::<i64>().ok()) else {
                    continue;
                };
                if let Some(m) = read_trim(&e.path().join("cpumap")).and_then(|s| CpuSet::parse_mask(&s)) {
                    out.push((n, m));
                }
            }
        }
        out.sort_by_key(|(n, _)| *n);
        out
    }

    fn single_numa(&self) -> bool {
        self.numa_nodes().len() <= 1
    }

    /// The sysfs directory of a PCI function (resolved).
    pub fn pci_dir(&self, bus_id: &str) -> Option<PathBuf> {
        std::fs::canonicalize(self.root.join("bus/pci/devices").join(bus_id.to_ascii_lowercase())).ok()
    }

    fn numa_of_dir(&self, dir: &Path) -> String {
        let n = read_trim(&dir.join("numa_node")).unwrap_or_else(|| "-1".into());
        if n == "-1" && self.single_numa() {
            "0".to_string()
        } else {
            n
        }
    }

    /// NUMA node whose CPUs hold most of `aff` (ties: the lowest); 0 without NUMA info.
    pub fn numa_of_affinity(&self, aff: &CpuSet) -> i64 {
        let nodes = self.numa_nodes();
        let Some(first) = nodes.first() else { return 0 };
        let mut best = (first.0, first.1.overlap(aff));
        for (n, set) in &nodes[1..] {
            let o = set.overlap(aff);
            if o > best.1 {
                best = (*n, o);
            }
        }
        best.0
    }

    fn cpu_model(&self) -> (Option<String>, Option<i64>, Option<i64>) {
        let Some(info) = &self.cpuinfo else {
            return (None, None, None);
        };
        let field = |k: &str| {
            info.lines()
                .find(|l| l.split(':').next().is_some_and(|x| x.trim() == k))
                .and_then(|l| l.split_once(':').map(|(_, v)| v.trim().to_string()))
        };
        let vendor = field("vendor_id");
        // NCCL's familyid = family + (extFamily << 4) from CPUID; /proc/cpuinfo gives
        // family + extFamily.
        let family = field("cpu family")
            .and_then(|f| f.parse::<i64>().ok())
            .map(|f| if f >= 15 { 15 + ((f - 15) << 4) } else { f });
        let model = field("model").and_then(|m| m.parse::<i64>().ok());
        (vendor, family, model)
    }
}

fn arch_name() -> Option<&'static str> {
    if cfg!(target_arch = "x86_64") {
        Some("x86_64")
    } else if cfg!(target_arch = "aarch64") {
        Some("arm64")
    } else if cfg!(target_arch = "powerpc64") {
        Some("ppc64")
    } else {
        None
    }
}

impl HostFacts for Sysfs {
    fn pci_attrs(&self, bus_id: &str) -> Result<PciAttrs, TopoError> {
        let Some(dir) = self.pci_dir(bus_id) else {
            return Ok(PciAttrs::default());
        };
        let r = |f: &str| read_trim(&dir.join(f));
        let speed = |p: &Path| read_trim(&p.join("max_link_speed"));
        let num = |s: &str| {
            s.split_whitespace()
                .next()
                .and_then(|x| x.parse::<f32>().ok())
                .unwrap_or(f32::MAX)
        };
        let dev_s = speed(&dir).unwrap_or_default();
        let port_s = dir.parent().and_then(speed).unwrap_or_default();
        let link_speed = if num(&port_s) < num(&dev_s) { port_s } else { dev_s };
        let width = |p: &Path| read_trim(&p.join("max_link_width")).and_then(|s| s.parse::<i64>().ok());
        let link_width = match (width(&dir), dir.parent().and_then(width)) {
            (Some(a), Some(b)) => a.min(b).to_string(),
            (Some(a), None) => a.to_string(),
            _ => String::new(),
        };
        Ok(PciAttrs {
            class: r("class"),
            vendor: r("vendor"),
            device: r("device"),
            subsystem_vendor: r("subsystem_vendor"),
            subsystem_device: r("subsystem_device"),
            link_speed: Some(link_speed),
            link_width: Some(link_width),
        })
    }

    fn cpu_attrs(&self, numaid: &str) -> Result<CpuAttrs, TopoError> {
        let affinity = numaid
            .parse::<i64>()
            .ok()
            .and_then(|n| read_trim(&self.root.join(format!("devices/system/node/node{n}/cpumap"))));
        let (vendor, family, model) = self.cpu_model();
        Ok(CpuAttrs {
            affinity,
            arch: arch_name().map(str::to_string),
            vendor,
            family,
            model,
        })
    }

    fn ancestors(&self, bus_id: &str) -> Result<Vec<Ancestor>, TopoError> {
        let mut out = Vec::new();
        let mut dir = self.pci_dir(bus_id).ok_or_else(|| {
            TopoError::Topology(format!("PCI device {bus_id} not found under {}", self.root.display()))
        })?;
        // ncclTopoGetXmlFromSys: go up two components at a time; a non-BDF component is the
        // root complex; the second component up is the parent switch.
        loop {
            let numa = self.numa_of_dir(&dir);
            let mut up = dir.clone();
            let mut parent = None;
            for step in 1..=2 {
                if !up.pop() {
                    break;
                }
                let name = up
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if !is_bdf(&name) {
                    parent = Some(Ancestor::Cpu(numa.clone()));
                    break;
                }
                if step == 2 {
                    parent = Some(Ancestor::Pci(name));
                }
            }
            match parent {
                Some(Ancestor::Pci(b)) => {
                    out.push(Ancestor::Pci(b));
                    dir = up;
                }
                Some(c @ Ancestor::Cpu(_)) => {
                    out.push(c);
                    return Ok(out);
                }
                None => {
                    out.push(Ancestor::Cpu(numa));
                    return Ok(out);
                }
            }
        }
    }

    fn pci_bus_of_path(&self, pci_path: &str) -> Option<String> {
        let p = Path::new(pci_path);
        let sub = std::fs::canonicalize(p.join("subsystem")).ok()?;
        if sub.file_name()? != "pci" {
            return None;
        }
        let name = p.file_name()?.to_string_lossy().into_owned();
        is_bdf(&name).then_some(name)
    }
}

/// `getHostHash`: DJB2a of the host name followed by the boot id, or of `NCCL_HOSTID`.
pub fn host_hash_of(hostname: &str, boot_id: Option<&str>, host_id: Option<&str>) -> u64 {
    let s = match host_id {
        Some(id) => id.to_string(),
        None => format!("{hostname}{}", boot_id.unwrap_or_default()),
    };
    djb2a(s.as_bytes())
}

/// This host's hash (hostname, `/proc/sys/kernel/random/boot_id`, `NCCL_HOSTID`).
pub fn host_hash() -> u64 {
    let mut buf = [0u8; 1024];
    // SAFETY: `buf` is valid for `buf.len()` bytes; only bytes up to the first NUL are read.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok();
    let boot = boot.as_deref().and_then(|b| b.split_whitespace().next());
    let id = crate::config::Config::global()
        .raw(crate::config::params::HOSTID.name)
        .map(str::to_owned);
    host_hash_of(&name, boot, id.as_deref())
}

/// This process's CPU affinity (`sched_getaffinity`).
pub fn process_affinity() -> CpuSet {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    let mut bits = Vec::new();
    if rc == 0 {
        for i in 0..libc::CPU_SETSIZE as usize {
            // SAFETY: `i` < CPU_SETSIZE and `set` is initialised.
            bits.push(unsafe { libc::CPU_ISSET(i, &set) });
        }
        while bits.len() > 1 && bits.last() == Some(&false) {
            bits.pop();
        }
    }
    CpuSet(bits)
}

/// The net facts the topology reads from a plugin device's properties.
pub fn net_facts(p: &Properties) -> NetFacts {
    NetFacts {
        name: p.name.clone(),
        pci_path: p.pci_path.clone(),
        guid: p.guid,
        speed: p.speed,
        port: p.port,
        latency: p.latency,
        max_comms: p.max_comms,
        gdr: p.ptr_support & PTR_CUDA != 0,
        rail: p.rail_id,
        plane: p.plane_id,
    }
}

/// The starting XML: `NCCL_TOPO_FILE` (a missing file is not an error, as NCCL), else the
/// default virtual topology when present, else an empty `<system version="1">`.
pub fn initial_xml(params: &TopoParams) -> Result<(XmlNode, Vec<String>), TopoError> {
    let mut log = Vec::new();
    let path = match &params.topo_file {
        Some(p) => {
            log.push(format!("NCCL_TOPO_FILE set by environment to {}", p.display()));
            Some(p.clone())
        }
        None => Some(PathBuf::from(DEFAULT_TOPO_FILE)).filter(|p| p.exists()),
    };
    if let Some(p) = path {
        match std::fs::read_to_string(&p) {
            Ok(text) => {
                log.push(format!("Loading topology file {}", p.display()));
                return Ok((xml::parse(&text, Schema::Topology, &p.display().to_string())?, log));
            }
            Err(e) => log.push(format!("Could not open XML topology file {} : {e}", p.display())),
        }
    }
    Ok((XmlNode::new("system").with("version", 1), log))
}

/// The record of CPU rank `rank` on this host: the topology file or an empty system, this
/// rank's process device on the NUMA node of its affinity, and every net device of the
/// plugin attached by its `pciPath`. `sysfs` is normally [`Sysfs::default`].
pub fn detect_cpu_rank(
    rank: usize,
    nets: &[Properties],
    params: &TopoParams,
    sysfs: &Sysfs,
    host_hash: u64,
    affinity: &CpuSet,
) -> Result<(TopoRecord, Vec<String>), TopoError> {
    detect_cpu_rank_fused(rank, nets, &[], params, sysfs, host_hash, affinity, None).map(|(r, l, _)| (r, l))
}

/// What NIC fusion needs during detection: its parameters, the plugin, and the number
/// of virtual devices the plugin already has (`None`: this is the plugin's first
/// communicator in the process, so fusion runs and makes them).
pub struct Fusion<'a> {
    /// `NCCL_NET_MERGE_LEVEL`, `NCCL_NET_FORCE_MERGE`, `NCCL_NET_MERGE_POLICY`.
    pub params: &'a super::fuse::FusionParams,
    /// The plugin's `makeVDevice` / `devices` / `getProperties`.
    pub plugin: &'a mut dyn super::fuse::NetFusion,
    /// Virtual devices already made (NCCL's `nVirtualNics`), `None` when undefined.
    pub made: Option<usize>,
}

/// What fusion produced: the number of virtual devices and their properties.
pub type Fused = (usize, Vec<Properties>);

/// [`detect_cpu_rank`] with NIC fusion (`ncclTopoProcessNet`): `nets` are the physical
/// devices; with `fusion` the virtual devices replace their members in the record.
///
/// `coll_nets` are the devices of the plugin's CollNet table (empty: none marked): each
/// net device of the same name gets `coll="1"` ([`fill::mark_coll_net`]), as NCCL's
/// `ncclTopoGetSystem` (`src/graph/topo.cc`) runs `ncclTopoProcessNet(xml, 1, ...)` over
/// the CollNet table when `collNetSupport(comm)`. Comm init passes them only for a rank
/// bound to a GPU (`CommConfig::cuda_dev`) that wants CollNet; a CPU-process rank passes
/// none (see [`detect_gpu_rank`] for why).
#[allow(clippy::too_many_arguments)] // NCCL's detection inputs, one per fact source
pub fn detect_cpu_rank_fused(
    rank: usize,
    nets: &[Properties],
    coll_nets: &[Properties],
    params: &TopoParams,
    sysfs: &Sysfs,
    host_hash: u64,
    affinity: &CpuSet,
    fusion: Option<&mut Fusion<'_>>,
) -> Result<(TopoRecord, Vec<String>, Option<Fused>), TopoError> {
    let (mut root, mut log) = initial_xml(params)?;
    fill::set_host_hash(&mut root, host_hash);
    let numa = sysfs.numa_of_affinity(affinity);
    fill::add_process_device(&mut root, rank, numa, sysfs, host_hash)?;
    for (dev, p) in nets.iter().enumerate() {
        fill::fill_net(&mut root, &net_facts(p), dev, sysfs, host_hash)?;
    }
    let fused = match fusion {
        Some(f) => Some(super::fuse::process_net(
            &mut root, nets, f.made, f.params, f.plugin, sysfs, host_hash, &mut log,
        )?),
        None => None,
    };
    for p in coll_nets {
        fill::mark_coll_net(&mut root, &p.name);
    }
    let rec = TopoRecord::new(
        u32::try_from(rank).map_err(|_| TopoError::Record(format!("rank {rank} too large")))?,
        host_hash,
        xml::dump(&root),
        None,
        i32::try_from(numa).unwrap_or(-1),
        affinity.to_mask(),
    );
    Ok((rec, log, fused))
}

/// The record of rank `rank` driving the GPU at `bus_id` (`dddd:bb:dd.f`) described by
/// `gpu` (normally from [`super::nvml::gpus`]): NCCL's `ncclTopoGetSystem` steps for a GPU
/// rank — the topology file or an empty system, the GPU's PCI branch from sysfs with its
/// `<gpu>` (dev, sm, NVLinks, rank, gdr), and every net device of the plugin.
///
/// `coll_nets` are the devices of the plugin's CollNet table when CollNet is enabled
/// (empty otherwise): each net device of the same name gets `coll="1"`
/// ([`fill::mark_coll_net`]; NCCL's `ncclTopoProcessNet` for the CollNet table), so the
/// CollNet graph searches run on this host. A CPU-process rank ([`detect_cpu_rank`])
/// never marks its NICs: its process device is a GPU-type node to the searches
/// ([`fill::PROCESS_CLASS`]), so a marked NIC would make the CollNetDirect search
/// (`src/graph/search.cc`, one head per CollNet NIC: the NIC's local GPU) give its host
/// one head where every rank of the host reaches the plugin alike; its host keeps the
/// layout rule for CollNet heads (every rank a head), a deliberate difference (NCCL's
/// searches are over GPUs, whose NICs are not shared alike). Comm init detects every
/// rank with [`detect_fused`] (the process-device record: it gathers no GPU facts) and
/// marks the CollNet NICs there for ranks bound to a GPU.
#[allow(clippy::too_many_arguments)] // NCCL's detection inputs, one per fact source
pub fn detect_gpu_rank(
    rank: usize,
    bus_id: &str,
    gpu: &fill::GpuFacts,
    nets: &[Properties],
    coll_nets: &[Properties],
    params: &TopoParams,
    sysfs: &Sysfs,
    host_hash: u64,
) -> Result<(TopoRecord, Vec<String>), TopoError> {
    let (mut root, log) = initial_xml(params)?;
    fill::set_host_hash(&mut root, host_hash);
    let bus = bus_id.to_ascii_lowercase();
    fill::fill_gpu(&mut root, &bus, gpu, rank, sysfs, host_hash)?;
    for (dev, p) in nets.iter().enumerate() {
        fill::fill_net(&mut root, &net_facts(p), dev, sysfs, host_hash)?;
    }
    for p in coll_nets {
        fill::mark_coll_net(&mut root, &p.name);
    }
    let rec = TopoRecord::new(
        u32::try_from(rank).map_err(|_| TopoError::Record(format!("rank {rank} too large")))?,
        host_hash,
        xml::dump(&root),
        Some(bus),
        -1,
        process_affinity().to_mask(),
    );
    Ok((rec, log))
}

/// [`detect_cpu_rank`] on the live host (`/sys`, this process's affinity, the host hash).
pub fn detect(rank: usize, nets: &[Properties], params: &TopoParams) -> Result<(TopoRecord, Vec<String>), TopoError> {
    detect_cpu_rank(rank, nets, params, &Sysfs::default(), host_hash(), &process_affinity())
}

/// [`detect_cpu_rank_fused`] on the live host (`coll_nets`: the CollNet table's devices
/// to mark `coll="1"`, empty for none).
pub fn detect_fused(
    rank: usize,
    nets: &[Properties],
    coll_nets: &[Properties],
    params: &TopoParams,
    fusion: Option<&mut Fusion<'_>>,
) -> Result<(TopoRecord, Vec<String>, Option<Fused>), TopoError> {
    detect_cpu_rank_fused(
        rank,
        nets,
        coll_nets,
        params,
        &Sysfs::default(),
        host_hash(),
        &process_affinity(),
        fusion,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpumasks() {
        let m = CpuSet::parse_mask("00000000,0000ffff").unwrap();
        assert_eq!(m.count(), 16);
        assert_eq!(m.to_mask(), "00000000,0000ffff");
        let l = CpuSet::parse_list("0-3,8").unwrap();
        assert_eq!(l.count(), 5);
        assert_eq!(l.to_mask(), "0000010f");
        assert!(CpuSet::parse_mask("zz").is_none());
    }

    #[test]
    fn bdf() {
        assert!(is_bdf("0000:00:03.0"));
        assert!(!is_bdf("pci0000:00"));
        assert!(!is_bdf("virtio2"));
    }

    #[test]
    fn host_hash_follows_nccl() {
        assert_eq!(host_hash_of("a", None, Some("x")), djb2a(b"x"));
        assert_eq!(host_hash_of("h", Some("b"), None), djb2a(b"hb"));
    }
}
