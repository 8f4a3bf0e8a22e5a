//! Hardware facts for offline topology files: what NCCL would get from NVML, sysfs and the
//! net plugin on the real machine, given as a model (the explorer's `--sm`, `--nvlink`,
//! `--net-speed`, `--cpu`, `--gpus`, `--nics`, `--pci-link` options; see
//! `core/tests/data/topo/public/README.md` for the public machines' models).
//!
//! From a file and a model, [`HardwareModel::records`] builds, for `nodes` identical
//! machines, the [`TopoRecord`] each rank would contribute: NCCL's per-rank XML
//! (`ncclTopoGetSystem` steps 1–5) with the rank's GPU filled in and every net device
//! attached, marked `keep`.
//!
//! Conventions of the model (each one what NCCL sees on those machines):
//! - GPUs are numbered by NVML in PCI bus-id order; rank `node * G + d` drives GPU `d`.
//! - Net devices are numbered by the plugin in PCI bus-id order, after devices the file
//!   already describes as `<net>` (in `dev` order).
//! - A NIC-class PCI device without `<nic>` is one port whose speed follows its PCIe link
//!   (Gen3 100 Gb/s, Gen4 200, Gen5 400, Gen6 800; unknown links count as Gen3) unless
//!   `--net-speed` says otherwise; GPUDirect RDMA is available on every NIC and GPU.
//! - `--nvlink nvswitch[:N]` gives each GPU N links to an NVSwitch that is not visible to
//!   the VM (target `fffffff:ffff:ff`); the default N is 12 for sm 8.x, 18 for sm ≥ 9.0.
//! - `--nvlink map:A-BxN,…` joins GPUs A and B (NVML indices) by N links; each GPU lists
//!   its peers in the order they appear in the map.

use super::TopoError;
use super::fill::{self, Ancestor, CpuAttrs, GpuFacts, HostFacts, NetFacts, PciAttrs};
use super::record::TopoRecord;
use super::types::*;
use super::xml::{self, XmlNode};

/// NVLink model.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum NvlinkModel {
    /// No NVLink (or whatever the file already says).
    #[default]
    None,
    /// Every GPU has N links (None = default for its sm) to one NVSwitch fabric.
    NvSwitch(Option<u32>),
    /// GPU pairs (NVML indices) and link counts.
    Map(Vec<(usize, usize, u32)>),
}

impl NvlinkModel {
    /// Parses `none`, `nvswitch`, `nvswitch:N`, `map:A-BxN,…`.
    pub fn parse(s: &str) -> Result<NvlinkModel, TopoError> {
        let bad = |why: &str| TopoError::Model(format!("--nvlink {s}: {why}"));
        if s == "none" {
            return Ok(NvlinkModel::None);
        }
        if s == "nvswitch" {
            return Ok(NvlinkModel::NvSwitch(None));
        }
        if let Some(n) = s.strip_prefix("nvswitch:") {
            let n: u32 = n.parse().map_err(|_| bad("expected nvswitch:N with N links per GPU"))?;
            return Ok(NvlinkModel::NvSwitch(Some(n)));
        }
        if let Some(m) = s.strip_prefix("map:") {
            let mut out = Vec::new();
            for item in m.split(',').filter(|i| !i.is_empty()) {
                let (pair, n) = item.split_once('x').ok_or_else(|| bad("expected A-BxN items"))?;
                let (a, b) = pair.split_once('-').ok_or_else(|| bad("expected A-BxN items"))?;
                let a: usize = a.parse().map_err(|_| bad("GPU index is not a number"))?;
                let b: usize = b.parse().map_err(|_| bad("GPU index is not a number"))?;
                let n: u32 = n.parse().map_err(|_| bad("link count is not a number"))?;
                if a == b {
                    return Err(bad("a GPU cannot link to itself"));
                }
                out.push((a, b, n));
            }
            return Ok(NvlinkModel::Map(out));
        }
        Err(bad("expected none, nvswitch[:N] or map:A-BxN,..."))
    }
}

/// CPU facts (`--cpu ARCH,VENDOR,FAMILY,MODEL`).
#[derive(Debug, Clone, PartialEq)]
pub struct CpuModel {
    /// `x86_64`, `arm64`, `ppc64`.
    pub arch: String,
    /// CPUID vendor string (`GenuineIntel`, `AuthenticAMD`, …).
    pub vendor: String,
    /// CPUID family (with extended family, as NCCL computes `familyid`).
    pub family: i64,
    /// CPUID model (with extended model).
    pub model: i64,
}

impl CpuModel {
    /// Parses `ARCH,VENDOR,FAMILY,MODEL`.
    pub fn parse(s: &str) -> Result<CpuModel, TopoError> {
        let p: Vec<&str> = s.split(',').collect();
        let bad = || TopoError::Model(format!("--cpu {s}: expected ARCH,VENDOR,FAMILY,MODEL"));
        if p.len() != 4 {
            return Err(bad());
        }
        Ok(CpuModel {
            arch: p[0].to_string(),
            vendor: p[1].to_string(),
            family: parse_c_int(p[2]).ok_or_else(bad)?,
            model: parse_c_int(p[3]).ok_or_else(bad)?,
        })
    }
}

/// The facts NCCL gets from the driver and the plugin, for a file that leaves them out.
#[derive(Debug, Clone, PartialEq)]
pub struct HardwareModel {
    /// Compute capability of every GPU without `<gpu sm>`.
    pub sm: Option<i32>,
    /// NVLinks.
    pub nvlink: NvlinkModel,
    /// Speed of NICs without `speed`, Mb/s.
    pub net_speed: Option<i32>,
    /// CPU arch/vendor/family/model where `<cpu>` lacks them.
    pub cpu: Option<CpuModel>,
    /// Bus ids that are GPUs (when the file has no class code).
    pub gpus: Vec<String>,
    /// Bus ids that are NICs (when the file has no class code).
    pub nics: Vec<String>,
    /// `link_speed`, `link_width` for PCI devices that lack them (default: unknown, which
    /// NCCL reads as Gen3 x16).
    pub pci_link: Option<(String, String)>,
    /// GPUDirect RDMA on GPUs and NICs (default true).
    pub gdr: bool,
}

impl Default for HardwareModel {
    fn default() -> Self {
        HardwareModel {
            sm: None,
            nvlink: NvlinkModel::None,
            net_speed: None,
            cpu: None,
            gpus: Vec::new(),
            nics: Vec::new(),
            pci_link: None,
            gdr: true,
        }
    }
}

/// A GPU found in the file.
#[derive(Debug, Clone)]
struct FileGpu {
    bus: String,
    dev: usize,
}

/// A net device the plugin would report.
#[derive(Debug, Clone)]
struct FileNet {
    facts: NetFacts,
}

fn all_pci(x: &XmlNode, out: &mut Vec<XmlNode>) {
    for s in &x.subs {
        if s.name == "pci" {
            out.push(s.clone());
        }
        all_pci(s, out);
    }
}

fn all_nets(x: &XmlNode, out: &mut Vec<XmlNode>) {
    for s in &x.subs {
        if s.name == "net" {
            out.push(s.clone());
        }
        all_nets(s, out);
    }
}

struct ModelFacts<'a> {
    model: &'a HardwareModel,
}

impl HostFacts for ModelFacts<'_> {
    fn pci_attrs(&self, bus_id: &str) -> Result<PciAttrs, TopoError> {
        let b = bus_id.to_ascii_lowercase();
        let class = if self.model.gpus.iter().any(|g| g.eq_ignore_ascii_case(&b)) {
            Some("0x030200".to_string())
        } else if self.model.nics.iter().any(|g| g.eq_ignore_ascii_case(&b)) {
            Some("0x020000".to_string())
        } else {
            None
        };
        let (speed, width) = match &self.model.pci_link {
            Some((s, w)) => (Some(s.clone()), Some(w.clone())),
            None => (None, None),
        };
        Ok(PciAttrs {
            class,
            link_speed: speed,
            link_width: width,
            ..PciAttrs::default()
        })
    }

    fn cpu_attrs(&self, _numaid: &str) -> Result<CpuAttrs, TopoError> {
        Ok(match &self.model.cpu {
            Some(c) => CpuAttrs {
                affinity: None,
                arch: Some(c.arch.clone()),
                vendor: Some(c.vendor.clone()),
                family: Some(c.family),
                model: Some(c.model),
            },
            None => CpuAttrs::default(),
        })
    }

    fn ancestors(&self, bus_id: &str) -> Result<Vec<Ancestor>, TopoError> {
        Err(TopoError::Model(format!(
            "PCI device {bus_id} is not in the topology file (an offline model cannot place it)"
        )))
    }

    fn pci_bus_of_path(&self, pci_path: &str) -> Option<String> {
        pci_path.rsplit('/').next().map(str::to_string)
    }
}

/// NIC speed from its PCIe link generation (the README's rule).
fn speed_for_link(link_speed: &str) -> i32 {
    match pci_gen_speed(link_speed) {
        s if s >= 480 => 800_000,
        s if s >= 240 => 400_000,
        s if s >= 120 => 200_000,
        _ => 100_000,
    }
}

impl HardwareModel {
    fn is_gpu(&self, p: &XmlNode) -> bool {
        let bus = p.attr("busid").unwrap_or_default();
        p.sub("gpu").is_some()
            || self.gpus.iter().any(|g| g.eq_ignore_ascii_case(bus))
            || (p.attr("class").is_some_and(|c| c.starts_with("0x03"))
                && !self.nics.iter().any(|n| n.eq_ignore_ascii_case(bus)))
    }

    fn is_nic(&self, p: &XmlNode) -> bool {
        let bus = p.attr("busid").unwrap_or_default();
        p.sub("nic").is_none()
            && (self.nics.iter().any(|g| g.eq_ignore_ascii_case(bus))
                || (p.attr("class").is_some_and(|c| c.starts_with("0x02"))
                    && !self.gpus.iter().any(|n| n.eq_ignore_ascii_case(bus))))
    }

    /// GPUs (bus id, NVML index) and net devices the file describes under this model.
    fn inventory(&self, file: &XmlNode) -> Result<(Vec<FileGpu>, Vec<FileNet>), TopoError> {
        let mut pcis = Vec::new();
        all_pci(file, &mut pcis);
        for b in self.gpus.iter().chain(&self.nics) {
            if !pcis
                .iter()
                .any(|p| p.attr("busid").is_some_and(|x| x.eq_ignore_ascii_case(b)))
            {
                return Err(TopoError::Model(format!("bus id {b} is not a <pci> of the file")));
            }
        }
        let mut gpus: Vec<(String, Option<i64>)> = Vec::new();
        for p in pcis.iter().filter(|p| self.is_gpu(p)) {
            let bus = p.req("busid")?.to_ascii_lowercase();
            let dev = match p.sub("gpu") {
                Some(g) if g.has_attr("dev") => Some(g.req_int("dev")?),
                _ => None,
            };
            gpus.push((bus, dev));
        }
        gpus.sort();
        let mut out_gpus = Vec::new();
        for (i, (bus, dev)) in gpus.iter().enumerate() {
            let d = dev.map(|d| d as usize).unwrap_or(i);
            if out_gpus.iter().any(|g: &FileGpu| g.dev == d) {
                return Err(TopoError::Model(format!("two GPUs have NVML index {d}")));
            }
            out_gpus.push(FileGpu {
                bus: bus.clone(),
                dev: d,
            });
        }
        out_gpus.sort_by_key(|g| g.dev);
        if out_gpus.is_empty() {
            return Err(TopoError::Model(
                "the file has no GPU (no <gpu>, no class 0x03 device); name them with --gpus".to_string(),
            ));
        }

        let mut nets = Vec::new();
        let mut existing = Vec::new();
        all_nets(file, &mut existing);
        existing.sort_by_key(|n| n.attr("dev").and_then(parse_c_int).unwrap_or(i64::MAX));
        for n in existing {
            let name = n.req("name")?.to_string();
            nets.push(FileNet {
                facts: NetFacts {
                    name,
                    pci_path: None,
                    guid: n.attr("guid").and_then(parse_hex_u64).unwrap_or(0),
                    speed: n
                        .attr("speed")
                        .and_then(parse_c_int)
                        .map(|s| s as i32)
                        .or(self.net_speed)
                        .unwrap_or(100_000),
                    port: n.attr("port").and_then(parse_c_int).unwrap_or(0) as i32,
                    latency: 0.0,
                    max_comms: 65536,
                    gdr: self.gdr,
                    rail: -1,
                    plane: -1,
                },
            });
        }
        let mut nic_pcis: Vec<&XmlNode> = pcis.iter().filter(|p| self.is_nic(p)).collect();
        nic_pcis.sort_by_key(|p| p.attr("busid").unwrap_or_default().to_ascii_lowercase());
        for p in nic_pcis {
            let bus = p.req("busid")?.to_ascii_lowercase();
            let link = match &self.pci_link {
                Some((s, _)) if !p.has_attr("link_speed") => s.clone(),
                _ => p.attr("link_speed").unwrap_or_default().to_string(),
            };
            let dev = nets.len();
            nets.push(FileNet {
                facts: NetFacts {
                    name: format!("net{dev}"),
                    pci_path: Some(format!("/sys/devices/model/{bus}")),
                    guid: bus_id_to_i64(&bus).unwrap_or(dev as i64) as u64,
                    speed: self.net_speed.unwrap_or_else(|| speed_for_link(&link)),
                    port: 0,
                    latency: 0.0,
                    max_comms: 65536,
                    gdr: self.gdr,
                    rail: -1,
                    plane: -1,
                },
            });
        }
        Ok((out_gpus, nets))
    }

    fn gpu_facts(&self, gpu: &FileGpu, all: &[FileGpu]) -> Result<GpuFacts, TopoError> {
        let sm = self.sm.unwrap_or(0);
        let mut nvlinks = Vec::new();
        match &self.nvlink {
            NvlinkModel::None => {}
            NvlinkModel::NvSwitch(n) => {
                let n = match n {
                    Some(n) => *n,
                    None if sm >= 90 => 18,
                    None if sm >= 80 => 12,
                    None => {
                        return Err(TopoError::Model(format!(
                            "--nvlink nvswitch needs a link count for sm {sm} (nvswitch:N)"
                        )));
                    }
                };
                nvlinks.push(("fffffff:ffff:ff".to_string(), n, "0x068000".to_string()));
            }
            NvlinkModel::Map(m) => {
                for &(a, b, n) in m {
                    let peer = if a == gpu.dev {
                        b
                    } else if b == gpu.dev {
                        a
                    } else {
                        continue;
                    };
                    let pg = all.iter().find(|g| g.dev == peer).ok_or_else(|| {
                        TopoError::Model(format!(
                            "--nvlink map names GPU {peer}, the file has {} GPUs",
                            all.len()
                        ))
                    })?;
                    nvlinks.push((pg.bus.clone(), n, "0x030200".to_string()));
                }
            }
        }
        Ok(GpuFacts {
            dev: gpu.dev as i32,
            sm,
            gdr: self.gdr,
            nvlinks,
            c2c: None,
        })
    }

    /// One record per rank for `nodes` copies of the machine in `file` (a `<system>`).
    /// Node `k` has host hash [`model_host_hash`]`(k)`; its ranks are `k*G .. k*G+G-1`.
    pub fn records(&self, file: &XmlNode, nodes: usize) -> Result<Vec<TopoRecord>, TopoError> {
        let (gpus, nets) = self.inventory(file)?;
        for g in &gpus {
            let p = find_pci(file, &g.bus).ok_or_else(|| TopoError::Model(format!("GPU {} vanished", g.bus)))?;
            if !p.sub("gpu").is_some_and(|x| x.has_attr("sm")) && self.sm.is_none() {
                return Err(TopoError::Model(format!(
                    "GPU {} has no compute capability in the file; give --sm",
                    g.bus
                )));
            }
        }
        let facts = ModelFacts { model: self };
        let ngpus = gpus.len();
        let mut out = Vec::with_capacity(nodes * ngpus);
        for k in 0..nodes {
            let hash = model_host_hash(k);
            for g in &gpus {
                let rank = k * ngpus + g.dev;
                let mut x = file.clone();
                fill::set_host_hash(&mut x, hash);
                // The file's own spelling of the bus id (it may use upper case).
                let bus = find_pci(&x, &g.bus)
                    .and_then(|p| p.attr("busid"))
                    .unwrap_or(&g.bus)
                    .to_string();
                fill::fill_gpu(&mut x, &bus, &self.gpu_facts(g, &gpus)?, rank, &facts, hash)?;
                for (dev, n) in nets.iter().enumerate() {
                    let mut f = n.facts.clone();
                    if let Some(path) = &f.pci_path {
                        let b = path.rsplit('/').next().unwrap_or_default();
                        if let Some(real) = find_pci(&x, b).and_then(|p| p.attr("busid")) {
                            f.pci_path = Some(format!("/sys/devices/model/{real}"));
                        }
                    }
                    fill::fill_net(&mut x, &f, dev, &facts, hash)?;
                }
                check_cpus(&x)?;
                out.push(TopoRecord::new(
                    rank as u32,
                    hash,
                    xml::dump(&x),
                    Some(bus),
                    -1,
                    String::new(),
                ));
            }
        }
        Ok(out)
    }
}

/// The `<pci>` whose bus id is `bus`, ignoring case.
fn find_pci<'a>(x: &'a XmlNode, bus: &str) -> Option<&'a XmlNode> {
    if x.name == "pci" && x.attr("busid").is_some_and(|b| b.eq_ignore_ascii_case(bus)) {
        return Some(x);
    }
    x.subs.iter().find_map(|s| find_pci(s, bus))
}

/// Every `<cpu>` that keeps a device needs `arch` (and `vendor` on x86): say which option
/// supplies them.
fn check_cpus(x: &XmlNode) -> Result<(), TopoError> {
    let mut t = x.clone();
    xml::trim(&mut t);
    for c in t.subs.iter().filter(|s| s.name == "cpu") {
        if !c.has_attr("arch")
            || (c.attr("arch").map(cpu_arch_from_str) == Some(cpu_arch::X86) && !c.has_attr("vendor"))
        {
            return Err(TopoError::Model(format!(
                "<cpu numaid=\"{}\"> has no arch/vendor in the file; give --cpu ARCH,VENDOR,FAMILY,MODEL",
                c.attr("numaid").unwrap_or("?")
            )));
        }
    }
    Ok(())
}

/// Host hash of modelled node `k` (any distinct values work; NCCL only compares them).
pub fn model_host_hash(k: usize) -> u64 {
    djb2a(format!("ferroccl-topo-node-{k}").as_bytes())
}
