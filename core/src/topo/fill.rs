//! The XML edits NCCL makes while building one rank's view of its host
//! (`topo.cc:ncclTopoGetSystem`, `ncclTopoPopulateNics`; `xml.cc:ncclTopoFillGpu`,
//! `ncclTopoFillNet`, `ncclTopoGetXmlFromSys`, `ncclTopoGetXmlFromCpu`,
//! `ncclTopoGetXmlFromGpu`). Where NCCL reads sysfs, NVML or the net plugin, these
//! functions take the facts from a [`HostFacts`] implementation: the live host
//! ([`super::detect`]) or a hardware model for an offline file ([`super::model`]).
//!
//! Attributes are written in NCCL's order so dumps match NCCL's.

use super::TopoError;
use super::types::*;
use super::xml::XmlNode;

/// Attribute values sysfs (or NVML, for GPUs) gives for one PCI function; `None` = unknown.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PciAttrs {
    /// `class` (overwrites the file's value, as NCCL does when sysfs has the device).
    pub class: Option<String>,
    /// `vendor`.
    pub vendor: Option<String>,
    /// `device`.
    pub device: Option<String>,
    /// `subsystem_vendor`.
    pub subsystem_vendor: Option<String>,
    /// `subsystem_device`.
    pub subsystem_device: Option<String>,
    /// `link_speed` (NCCL writes `""` when nothing is known).
    pub link_speed: Option<String>,
    /// `link_width` (NCCL writes `""` when nothing is known).
    pub link_width: Option<String>,
}

/// Attribute values for a `<cpu>`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuAttrs {
    /// `affinity` (sysfs cpumap of the NUMA node).
    pub affinity: Option<String>,
    /// `arch` (`x86_64`, `arm64`, `ppc64`).
    pub arch: Option<String>,
    /// `vendor` (CPUID vendor string, x86 only).
    pub vendor: Option<String>,
    /// `familyid` (x86 only).
    pub family: Option<i64>,
    /// `modelid` (x86 only).
    pub model: Option<i64>,
}

/// Where a PCI function sits: its ancestors from the nearest up.
#[derive(Debug, Clone, PartialEq)]
pub enum Ancestor {
    /// A PCI switch (upstream port) by bus id.
    Pci(String),
    /// The root complex of a NUMA node (`numaid`, `-1` when unknown).
    Cpu(String),
}

/// A GPU as NVML describes it (`ncclTopoGetXmlFromGpu`).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuFacts {
    /// NVML index.
    pub dev: i32,
    /// Compute capability, `major*10 + minor`.
    pub sm: i32,
    /// GPUDirect RDMA support (`peerInfo.gdrSupport`).
    pub gdr: bool,
    /// NVLinks: (target bus id, link count, target class; empty class = ask
    /// [`HostFacts::pci_attrs`], NVSwitch when unknown).
    pub nvlinks: Vec<(String, u32, String)>,
    /// C2C: (per-link bandwidth MB/s, links up), sm ≥ 90 only.
    pub c2c: Option<(i64, i64)>,
}

/// A net plugin device as `getProperties` describes it (the fields the topology reads).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetFacts {
    /// Device name.
    pub name: String,
    /// sysfs PCI path (`None` for a virtual device).
    pub pci_path: Option<String>,
    /// NIC guid (ports of one NIC share it).
    pub guid: u64,
    /// Speed, Mb/s.
    pub speed: i32,
    /// Port.
    pub port: i32,
    /// Latency, µs (NCCL stores it as an integer attribute).
    pub latency: f32,
    /// `maxComms`.
    pub max_comms: i32,
    /// GPUDirect RDMA (`ptrSupport & NCCL_PTR_CUDA`, or DMA-BUF).
    pub gdr: bool,
    /// Rail id (-1 undefined).
    pub rail: i16,
    /// Plane id (-1 undefined).
    pub plane: i16,
}

/// What NCCL learns from the OS while building its XML.
pub trait HostFacts {
    /// sysfs/NVML attributes of PCI function `bus_id` (`None` fields = unknown).
    fn pci_attrs(&self, bus_id: &str) -> Result<PciAttrs, TopoError>;
    /// Attributes of NUMA node `numaid`.
    fn cpu_attrs(&self, numaid: &str) -> Result<CpuAttrs, TopoError>;
    /// Ancestors of a PCI function not yet in the XML (nearest first, ending at a CPU).
    fn ancestors(&self, bus_id: &str) -> Result<Vec<Ancestor>, TopoError>;
    /// Whether `pci_path` is a PCI device (`<pciPath>/subsystem` resolves to `…/pci`) and,
    /// if so, its bus id (the last path component).
    fn pci_bus_of_path(&self, pci_path: &str) -> Option<String>;
}

/// `xmlSetAttrLong` for `host_hash` (`%#lx`).
fn hash_str(h: u64) -> String {
    if h == 0 { "0".to_string() } else { format!("{h:#x}") }
}

/// Sets `host_hash` on every `<cpu>` (NCCL overwrites it locally, never trusting a file).
pub fn set_host_hash(root: &mut XmlNode, hash: u64) {
    root.for_each_mut("cpu", &mut |c| c.set_attr("host_hash", hash_str(hash)));
}

/// The path (child indices from `root`) of `<pci busid=bus_id>`, attaching it (and missing
/// ancestors, children kept sorted by bus id as NCCL does) when absent.
pub fn get_or_attach_pci(
    root: &mut XmlNode,
    bus_id: &str,
    facts: &dyn HostFacts,
    hash: u64,
) -> Result<Vec<usize>, TopoError> {
    fn is(b: &str) -> impl Fn(&XmlNode) -> bool + '_ {
        move |n: &XmlNode| n.name == "pci" && n.attr("busid") == Some(b)
    }
    if let Some(p) = root.path_to(&is(bus_id)) {
        return Ok(p);
    }
    let chain = facts.ancestors(bus_id)?;
    // Find the nearest ancestor already present; create the rest downwards.
    let mut missing: Vec<&Ancestor> = Vec::new();
    let mut base: Option<Vec<usize>> = None;
    for a in &chain {
        let found = match a {
            Ancestor::Pci(b) => root.path_to(&is(b)),
            Ancestor::Cpu(numa) => root
                .subs
                .iter()
                .position(|c| c.name == "cpu" && c.attr("numaid") == Some(numa.as_str()))
                .map(|i| vec![i]),
        };
        match found {
            Some(p) => {
                base = Some(p);
                break;
            }
            None => missing.push(a),
        }
    }
    let mut path = match base {
        Some(p) => p,
        None => {
            // The chain ends at a CPU that is not there: create it.
            let Some(Ancestor::Cpu(numa)) = missing.pop() else {
                return Err(TopoError::Topology(format!(
                    "no root complex found above PCI device {bus_id}"
                )));
            };
            let cpu = XmlNode::new("cpu")
                .with("host_hash", hash_str(hash))
                .with("numaid", numa);
            root.subs.push(cpu);
            vec![root.subs.len() - 1]
        }
    };
    let mut to_create: Vec<String> = missing
        .iter()
        .rev()
        .filter_map(|a| match a {
            Ancestor::Pci(b) => Some(b.clone()),
            Ancestor::Cpu(_) => None,
        })
        .collect();
    to_create.push(bus_id.to_string());
    for b in to_create {
        let parent = root.at_path_mut(&path);
        let node = XmlNode::new("pci").with("busid", &b);
        let pos = parent
            .subs
            .iter()
            .position(|s| s.attr("busid").is_some_and(|x| b.as_str() < x))
            .unwrap_or(parent.subs.len());
        parent.subs.insert(pos, node);
        path.push(pos);
    }
    Ok(path)
}

/// `ncclTopoGetXmlFromSys` attribute filling for the PCI element at `path` and every PCI
/// ancestor, then `ncclTopoGetXmlFromCpu` for the CPU above them.
pub fn fill_from_sys(root: &mut XmlNode, path: &[usize], facts: &dyn HostFacts) -> Result<(), TopoError> {
    for depth in (1..=path.len()).rev() {
        let node = root.at_path_mut(&path[..depth]);
        match node.name.as_str() {
            "pci" => {
                let bus = node.req("busid")?.to_string();
                let a = facts.pci_attrs(&bus)?;
                if let Some(c) = a.class {
                    node.set_attr("class", c);
                }
                for (k, v) in [
                    ("vendor", a.vendor),
                    ("device", a.device),
                    ("subsystem_vendor", a.subsystem_vendor),
                    ("subsystem_device", a.subsystem_device),
                ] {
                    if let Some(v) = v {
                        node.init_attr(k, v);
                    }
                }
                node.init_attr("link_speed", a.link_speed.unwrap_or_default());
                node.init_attr("link_width", a.link_width.unwrap_or_default());
            }
            "cpu" => {
                fill_cpu(node, facts)?;
                break;
            }
            _ => {}
        }
    }
    Ok(())
}

/// `ncclTopoGetXmlFromCpu`: fills missing `affinity`, `arch`, and on x86 `vendor`,
/// `familyid`, `modelid`.
pub fn fill_cpu(cpu: &mut XmlNode, facts: &dyn HostFacts) -> Result<(), TopoError> {
    let numa = cpu.req("numaid")?.to_string();
    let a = facts.cpu_attrs(&numa)?;
    if !cpu.has_attr("affinity")
        && let Some(v) = a.affinity
    {
        cpu.set_attr("affinity", v);
    }
    if !cpu.has_attr("arch")
        && let Some(v) = &a.arch
    {
        cpu.set_attr("arch", v);
    }
    if cpu.attr("arch").map(cpu_arch_from_str) == Some(cpu_arch::X86) {
        if !cpu.has_attr("vendor")
            && let Some(v) = a.vendor
        {
            cpu.set_attr("vendor", v);
        }
        if !cpu.has_attr("familyid")
            && let (Some(f), Some(m)) = (a.family, a.model)
        {
            cpu.set_attr("familyid", f);
            cpu.set_attr("modelid", m);
        }
    }
    Ok(())
}

/// `ncclTopoFillGpu` + the rank attributes `ncclTopoGetSystem` sets: the GPU at `bus_id`
/// gets its `<gpu>` (dev, sm, NVLinks, C2C, target classes), then `keep`, `rank`, `gdr`,
/// `mlopart`.
pub fn fill_gpu(
    root: &mut XmlNode,
    bus_id: &str,
    gpu: &GpuFacts,
    rank: usize,
    facts: &dyn HostFacts,
    hash: u64,
) -> Result<(), TopoError> {
    let path = get_or_attach_pci(root, bus_id, facts, hash)?;
    root.at_path_mut(&path).init_attr("class", "0x03");
    fill_from_sys(root, &path, facts)?;
    // Target classes are looked up before borrowing the element.
    let mut classes = Vec::new();
    for (target, _, class) in &gpu.nvlinks {
        let c = if target == "fffffff:ffff:ff" {
            "0x068000".to_string()
        } else if !class.is_empty() {
            class.clone()
        } else {
            facts.pci_attrs(target)?.class.unwrap_or_else(|| "0x068000".to_string())
        };
        classes.push(c);
    }
    let pci = root.at_path_mut(&path);
    if pci.sub("gpu").is_none() {
        pci.subs.push(XmlNode::new("gpu"));
    }
    let g = pci
        .sub_mut("gpu")
        .ok_or_else(|| TopoError::Topology("gpu element vanished".into()))?;
    g.init_attr("dev", gpu.dev);
    if g.req_int("dev")? == -1 {
        return Ok(());
    }
    g.init_attr("sm", gpu.sm);
    if g.sub("nvlink").is_none() {
        for (target, count, _) in &gpu.nvlinks {
            let t = target.to_ascii_lowercase();
            match g.sub_kv_mut("nvlink", "target", &t) {
                Some(n) => {
                    let c = n.req_int("count")? + i64::from(*count);
                    n.set_attr("count", c);
                }
                None => g
                    .subs
                    .push(XmlNode::new("nvlink").with("target", &t).with("count", count)),
            }
        }
    }
    if g.sub("c2c").is_none()
        && gpu.sm >= 90
        && let Some((bw, count)) = gpu.c2c.filter(|c| c.1 > 0)
    {
        g.subs.push(XmlNode::new("c2c").with("bw", bw).with("count", count));
    }
    for s in g.subs.iter_mut().filter(|s| s.name == "nvlink") {
        if !s.has_attr("tclass") {
            let target = s.attr("target").unwrap_or_default().to_string();
            let c = gpu
                .nvlinks
                .iter()
                .position(|(t, _, _)| t.eq_ignore_ascii_case(&target))
                .map(|i| classes[i].clone())
                .unwrap_or_else(|| "0x068000".to_string());
            s.set_attr("tclass", c);
        }
    }
    g.set_attr("keep", 1);
    g.set_attr("rank", rank);
    g.init_attr("gdr", i32::from(gpu.gdr));
    g.set_attr("mlopart", -1);
    Ok(())
}

/// `ncclTopoFillNet` + `ncclTopoPopulateNics` for plugin device `dev`.
pub fn fill_net(
    root: &mut XmlNode,
    net: &NetFacts,
    dev: usize,
    facts: &dyn HostFacts,
    hash: u64,
) -> Result<(), TopoError> {
    fill_net_under(root, net, dev, facts, hash, None)
}

/// Marks the `<net>` named `name` as served by the CollNet plugin (`coll="1"`, set only
/// where absent, as NCCL 2.30.7's `ncclTopoPopulateNics` does for the CollNet table's
/// devices when `collNetSupport`, `src/graph/topo.cc` `ncclTopoProcessNet`). Returns
/// whether such a `<net>` exists: a CollNet device the net plugin does not also list is
/// not added (NCCL would add it with `net="0"`; ferroccl's graph reads CollNet NICs
/// through the net plugin's devices only).
pub fn mark_coll_net(root: &mut XmlNode, name: &str) -> bool {
    let mut found = false;
    root.for_each_mut("net", &mut |n| {
        if n.attr("name") == Some(name) {
            n.init_attr("coll", 1);
            found = true;
        }
    });
    found
}

/// [`fill_net`] with NCCL's `forceParent` (`ncclTopoFillNet`'s last argument, used for
/// fused virtual NICs): a new `<net>` goes into the first `<nic>` of the element at
/// `parent` (a path of child indices), created when absent. When `parent` is itself a
/// `<nic>` (the fused devices were ports of one NIC) the `<net>` joins it directly rather
/// than a `<nic>` nested in it, which the system builder would not read.
pub fn fill_net_under(
    root: &mut XmlNode,
    net: &NetFacts,
    dev: usize,
    facts: &dyn HostFacts,
    hash: u64,
    forced_parent: Option<Vec<usize>>,
) -> Result<(), TopoError> {
    let name = net.name.as_str();
    let found = root.path_to(&|n: &XmlNode| n.name == "net" && n.attr("name") == Some(name));
    let net_path = match found {
        Some(p) => p,
        None if forced_parent.as_ref().is_some_and(|p| root.at_path(p).name == "nic") => {
            let mut p = forced_parent.expect("checked above");
            let nic = root.at_path_mut(&p);
            nic.subs.push(XmlNode::new("net").with("name", name));
            p.push(nic.subs.len() - 1);
            p
        }
        None => {
            let bus = net.pci_path.as_deref().and_then(|p| facts.pci_bus_of_path(p));
            let parent = match (forced_parent, bus) {
                (Some(p), _) => p,
                (None, bus) => match bus {
                    Some(b) => {
                        let p = get_or_attach_pci(root, &b, facts, hash)?;
                        root.at_path_mut(&p).init_attr("class", "0x02");
                        fill_from_sys(root, &p, facts)?;
                        p
                    }
                    None => match root.path_to(&|n: &XmlNode| n.name == "cpu") {
                        Some(p) => p,
                        None => {
                            root.subs
                                .push(XmlNode::new("cpu").with("host_hash", hash_str(hash)).with("numaid", 0));
                            vec![root.subs.len() - 1]
                        }
                    },
                },
            };
            let pnode = root.at_path_mut(&parent);
            let nic_idx = match pnode.subs.iter().position(|s| s.name == "nic") {
                Some(i) => i,
                None => {
                    pnode.subs.push(XmlNode::new("nic"));
                    pnode.subs.len() - 1
                }
            };
            let nic = &mut pnode.subs[nic_idx];
            nic.subs.push(XmlNode::new("net").with("name", name));
            let mut p = parent;
            p.push(nic_idx);
            p.push(nic.subs.len() - 1);
            p
        }
    };
    let n = root.at_path_mut(&net_path);
    n.set_attr("keep", 1);
    n.set_attr("dev", dev);
    n.init_attr("latency", net.latency as i32);
    n.init_attr("speed", net.speed);
    n.init_attr("port", net.port);
    if net.rail != -1 {
        n.init_attr("rail", net.rail);
    }
    if net.plane != -1 {
        n.init_attr("plane", net.plane);
    }
    n.init_attr("guid", format!("0x{:x}", net.guid));
    n.init_attr("maxconn", net.max_comms);
    n.init_attr("gdr", i32::from(net.gdr));
    // `netInfo->net || isNet`: always 1 for the net plugin.
    n.set_attr("net", 1);
    Ok(())
}

/// Bus id of a CPU rank's process device (domain `fffe`, the rank in the low bits; the
/// two lowest bits stay 0 as NCCL's MLOPart check requires).
pub fn process_bus_id(rank: usize) -> String {
    i64_to_bus_id(0x000f_ffe0_0000_i64 | (((rank as i64) << 2) & 0xf_ffff))
}

/// Class code of a process device: `0x03…` so NCCL's class dictionary (`kvDictPciClass`)
/// makes it a GPU-type device; subclass `ff` marks it as synthetic.
pub const PROCESS_CLASS: &str = "0x03ff00";

/// Adds a CPU rank's process device under `<cpu numaid=numa>` (created, and filled from
/// `facts`, when absent): `<pci busid class link_speed link_width><gpu sm="0" rank gdr="0"
/// keep="1"/></pci>`. `dev` is set later, once the host's ranks are known
/// ([`set_process_dev`]).
pub fn add_process_device(
    root: &mut XmlNode,
    rank: usize,
    numa: i64,
    facts: &dyn HostFacts,
    hash: u64,
) -> Result<(), TopoError> {
    // A topology file (NCCL_TOPO_FILE, e.g. one dumped by an earlier run) may
    // already hold this rank's device: fill it in place, as ncclTopoFillGpu
    // finds a GPU's existing <pci> by bus id, instead of adding a second one.
    let bus = process_bus_id(rank);
    if let Some(pci) = root.find_kv_mut("pci", "busid", &bus) {
        if pci.sub_mut("gpu").is_none() {
            pci.subs.push(XmlNode::new("gpu"));
        }
        let gpu = pci.sub_mut("gpu").expect("just ensured");
        gpu.set_attr("sm", "0");
        gpu.set_attr("rank", rank);
        gpu.set_attr("gdr", "0");
        gpu.set_attr("keep", "1");
        return Ok(());
    }
    let numa_s = numa.to_string();
    let idx = match root
        .subs
        .iter()
        .position(|c| c.name == "cpu" && c.attr("numaid") == Some(numa_s.as_str()))
    {
        Some(i) => i,
        None => {
            root.subs.push(
                XmlNode::new("cpu")
                    .with("host_hash", hash_str(hash))
                    .with("numaid", &numa_s),
            );
            root.subs.len() - 1
        }
    };
    fill_cpu(&mut root.subs[idx], facts)?;
    let pci = XmlNode {
        name: "pci".to_string(),
        attrs: vec![
            ("busid".into(), bus),
            ("class".into(), PROCESS_CLASS.into()),
            ("link_speed".into(), "8.0 GT/s PCIe".into()),
            ("link_width".into(), "16".into()),
        ],
        subs: vec![XmlNode {
            name: "gpu".into(),
            attrs: vec![
                ("sm".into(), "0".into()),
                ("rank".into(), rank.to_string()),
                ("gdr".into(), "0".into()),
                ("keep".into(), "1".into()),
            ],
            subs: Vec::new(),
        }],
    };
    root.subs[idx].subs.push(pci);
    Ok(())
}

/// Sets `dev` of rank `rank`'s process device (its index among its host's ranks), placed
/// first as NCCL writes `dev` first.
pub fn set_process_dev(root: &mut XmlNode, rank: usize, dev: usize) -> bool {
    let bus = process_bus_id(rank);
    match root.find_kv_mut("pci", "busid", &bus).and_then(|p| p.sub_mut("gpu")) {
        Some(g) => {
            g.unset_attr("dev");
            g.attrs.insert(0, ("dev".to_string(), dev.to_string()));
            true
        }
        None => false,
    }
}
