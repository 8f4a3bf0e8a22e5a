//! The system graph NCCL builds from a fused topology XML (`src/graph/topo.cc`:
//! `ncclTopoGetSystemFromXml`, `ncclTopoAddCpu/Pci/Nic/Net/NvLinks/C2c/PciLinks`,
//! `ncclTopoFlattenBcmSwitches`, `ncclTopoConnectCpus`, `ncclTopoSortSystem`, `ncclTopoPrint`).
//!
//! Nodes live in one vector per [`NodeType`]; links are kept in a global table and each node
//! lists its outgoing link ids in NCCL's order (sorted by bandwidth, descending, at
//! insertion; the PCI up-link last after sorting). Paths (see [`super::paths`]) refer to link
//! ids, so the search can charge bandwidth on the exact links NCCL would.

use super::TopoError;
use super::types::*;
use super::xml::XmlNode;

/// A node reference: type and index into `System::nodes[type]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeRef {
    /// Node type.
    pub ty: NodeType,
    /// Index within its type.
    pub idx: usize,
}

impl NodeRef {
    /// Shorthand constructor.
    pub fn new(ty: NodeType, idx: usize) -> NodeRef {
        NodeRef { ty, idx }
    }
}

/// One directed link (`struct ncclTopoLink`).
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// Link type.
    pub ty: LinkType,
    /// Bandwidth, GB/s (aggregated over parallel links of the same type).
    pub bw: f32,
    /// Source node.
    pub from: NodeRef,
    /// Remote node.
    pub rem: NodeRef,
}

/// Type-specific data of a node (NCCL's union).
#[derive(Debug, Clone, PartialEq)]
pub enum NodeInfo {
    /// GPU (a rank's device view).
    Gpu {
        /// NVML index (`dev`); for a CPU rank, its index among the host's ranks.
        dev: i32,
        /// Communicator rank.
        rank: i32,
        /// Compute capability (`sm`), 0 for a CPU rank.
        cc: i32,
        /// GPUDirect RDMA support.
        gdr: bool,
        /// MLOPart partition (-1 = none).
        mlo_part: i32,
        /// Parent DEV node index.
        parent: usize,
    },
    /// Physical GPU.
    Dev {
        /// `vendor<<48 | device<<32 | subsystem_vendor<<16 | subsystem_device`.
        device: u64,
        /// NVML index.
        dev: i32,
        /// Compute capability.
        cc: i32,
        /// GPU nodes hanging off this DEV.
        n_gpus: i32,
    },
    /// PCI switch.
    Pci {
        /// Same encoding as [`NodeInfo::Dev::device`].
        device: u64,
    },
    /// NUMA domain.
    Cpu {
        /// `NCCL_TOPO_CPU_ARCH_*`.
        arch: i32,
        /// `NCCL_TOPO_CPU_VENDOR_*` (x86 only, else -1).
        vendor: i32,
        /// `NCCL_TOPO_CPU_MODEL_*` (-1 undefined).
        model: i32,
        /// `affinity` attribute (sysfs cpumap format), empty when unknown.
        affinity: String,
    },
    /// Net plugin device.
    Net(NetInfo),
    /// No specific data (NVS, NIC, CXB).
    None,
}

/// Net device data (`node->net`).
#[derive(Debug, Clone, PartialEq)]
pub struct NetInfo {
    /// Plugin device index.
    pub dev: i32,
    /// `name` attribute.
    pub name: String,
    /// Hash of the parent PCI bus id (or of the guid).
    pub pci_id: u64,
    /// NIC ASIC id (guid).
    pub asic: u64,
    /// Port.
    pub port: i32,
    /// Bandwidth, GB/s (`speed / 8000`).
    pub bw: f32,
    /// Latency, µs.
    pub latency: f32,
    /// GPUDirect RDMA.
    pub gdr: bool,
    /// CollNet support.
    pub coll: bool,
    /// `maxconn`.
    pub max_channels: i32,
    /// Closest GPU index (set by path computation), -1 when none.
    pub local_gpu: i32,
    /// Rail id (-1 undefined).
    pub rail: i16,
    /// Plane id (-1 undefined).
    pub plane: i16,
}

/// One node.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Type.
    pub ty: NodeType,
    /// `NCCL_TOPO_ID(systemId, localId)`.
    pub id: i64,
    /// Type-specific data.
    pub info: NodeInfo,
    /// Outgoing link ids, in NCCL's order.
    pub links: Vec<usize>,
}

impl Node {
    /// GPU fields (`dev`, `rank`, `cc`, `gdr`, `parent`), panicking on other types (internal).
    pub fn gpu(&self) -> (i32, i32, i32, bool, usize) {
        match &self.info {
            NodeInfo::Gpu {
                dev,
                rank,
                cc,
                gdr,
                parent,
                ..
            } => (*dev, *rank, *cc, *gdr, *parent),
            _ => unreachable!("gpu() on a {} node", self.ty),
        }
    }

    /// Net fields, panicking on other types (internal).
    pub fn net(&self) -> &NetInfo {
        match &self.info {
            NodeInfo::Net(n) => n,
            _ => unreachable!("net() on a {} node", self.ty),
        }
    }

    /// CPU arch/vendor/model (`-1`s for other types).
    pub fn cpu(&self) -> (i32, i32, i32) {
        match &self.info {
            NodeInfo::Cpu {
                arch, vendor, model, ..
            } => (*arch, *vendor, *model),
            _ => (-1, -1, -1),
        }
    }

    /// Compute capability of a GPU or DEV node.
    pub fn cc(&self) -> i32 {
        match &self.info {
            NodeInfo::Gpu { cc, .. } | NodeInfo::Dev { cc, .. } => *cc,
            _ => -1,
        }
    }
}

/// The system (`struct ncclTopoSystem`) plus the path table of [`super::paths`].
#[derive(Debug, Clone)]
pub struct System {
    /// Nodes per type.
    pub nodes: [Vec<Node>; NODE_TYPES],
    /// Link table (ids referenced by nodes and paths; removed links stay as garbage).
    pub links: Vec<Link>,
    /// Host hashes, index = systemId.
    pub host_hashes: Vec<u64>,
    /// Index of the local host in `host_hashes`.
    pub system_id: usize,
    /// Per-channel maximum bandwidth (`ncclTopoSearchInit`).
    pub max_bw: f32,
    /// Total bandwidth of the best DEV (`ncclTopoSearchInit`).
    pub total_bw: f32,
    /// Whether the communicator spans more than this system (`nGPUs != nRanks`).
    pub inter: bool,
    /// `paths[fromType][fromIdx][toType]` = one path per node of `toType` (empty = never
    /// computed, NCCL's NULL).
    pub paths: Vec<Vec<[Vec<Path>; NODE_TYPES]>>,
}

impl Default for System {
    fn default() -> Self {
        System {
            nodes: Default::default(),
            links: Vec::new(),
            host_hashes: Vec::new(),
            system_id: 0,
            max_bw: 0.0,
            total_bw: 0.0,
            inter: false,
            paths: Vec::new(),
        }
    }
}

/// Largest number of links per node (`NCCL_TOPO_MAX_LINKS`).
pub const TOPO_MAX_LINKS: usize = 576;

impl System {
    /// The nodes of one type.
    pub fn of(&self, ty: NodeType) -> &[Node] {
        &self.nodes[ty.idx()]
    }

    /// Count of one type.
    pub fn count(&self, ty: NodeType) -> usize {
        self.nodes[ty.idx()].len()
    }

    /// A node.
    pub fn node(&self, r: NodeRef) -> &Node {
        &self.nodes[r.ty.idx()][r.idx]
    }

    /// Index of the node of `ty` with `id` (`ncclTopoIdToIndex`).
    pub fn index_of(&self, ty: NodeType, id: i64) -> Option<usize> {
        self.of(ty).iter().position(|n| n.id == id)
    }

    /// GPU index of `rank` (`ncclTopoRankToIndex`).
    pub fn rank_to_index(&self, rank: i32) -> Option<usize> {
        self.of(NodeType::Gpu).iter().position(|n| n.gpu().1 == rank)
    }

    /// `ncclTopoCreateNode`.
    pub fn create_node(&mut self, ty: NodeType, id: i64, info: NodeInfo) -> Result<NodeRef, TopoError> {
        if self.count(ty) == TOPO_MAX_NODES {
            return Err(TopoError::Topology(format!(
                "too many {ty} nodes (max {TOPO_MAX_NODES})"
            )));
        }
        self.nodes[ty.idx()].push(Node {
            ty,
            id,
            info,
            links: Vec::new(),
        });
        Ok(NodeRef::new(ty, self.count(ty) - 1))
    }

    /// `ncclTopoGetNode`.
    pub fn find_node(&self, ty: NodeType, id: i64) -> Option<NodeRef> {
        self.index_of(ty, id).map(|i| NodeRef::new(ty, i))
    }

    /// `ncclTopoConnectNodes`: adds `bw` to the link `node → rem` of type `ty` (creating it),
    /// then moves the link up while its predecessor has less bandwidth.
    pub fn connect(&mut self, node: NodeRef, rem: NodeRef, ty: LinkType, bw: f32) -> Result<(), TopoError> {
        let links = &self.nodes[node.ty.idx()][node.idx].links;
        let pos = links
            .iter()
            .position(|&l| self.links[l].rem == rem && self.links[l].ty == ty);
        let mut pos = match pos {
            Some(p) => {
                let id = links[p];
                self.links[id].bw += bw;
                p
            }
            None => {
                if links.len() == TOPO_MAX_LINKS {
                    return Err(TopoError::Topology(format!("too many links (max {TOPO_MAX_LINKS})")));
                }
                let id = self.links.len();
                self.links.push(Link {
                    ty,
                    bw,
                    from: node,
                    rem,
                });
                self.nodes[node.ty.idx()][node.idx].links.push(id);
                self.nodes[node.ty.idx()][node.idx].links.len() - 1
            }
        };
        let links = &mut self.nodes[node.ty.idx()][node.idx].links;
        let me = links[pos];
        while pos > 0 && self.links[links[pos - 1]].bw < self.links[me].bw {
            links[pos] = links[pos - 1];
            pos -= 1;
        }
        links[pos] = me;
        Ok(())
    }

    /// `ncclTopoRemoveNode`: removes node `idx` of `ty` and every link to it; references to
    /// later nodes of that type shift down. Invalidates paths (recompute them).
    pub fn remove_node(&mut self, ty: NodeType, idx: usize) {
        let del = NodeRef::new(ty, idx);
        for t in NodeType::ALL {
            for n in 0..self.count(t) {
                if t == ty && n == idx {
                    continue;
                }
                let links = std::mem::take(&mut self.nodes[t.idx()][n].links);
                let kept = links.into_iter().filter(|&l| self.links[l].rem != del).collect();
                self.nodes[t.idx()][n].links = kept;
            }
        }
        for l in &mut self.links {
            for r in [&mut l.rem, &mut l.from] {
                if r.ty == ty && r.idx > idx {
                    r.idx -= 1;
                }
            }
        }
        if ty == NodeType::Dev {
            for g in &mut self.nodes[NodeType::Gpu.idx()] {
                if let NodeInfo::Gpu { parent, .. } = &mut g.info
                    && *parent > idx
                {
                    *parent -= 1;
                }
            }
        }
        self.nodes[ty.idx()].remove(idx);
        self.paths.clear();
    }

    /// The link from `from` to `to` of type `ty` (`findRevLink`).
    pub fn find_link(&self, from: NodeRef, to: NodeRef, ty: LinkType) -> Option<usize> {
        self.node(from)
            .links
            .iter()
            .copied()
            .find(|&l| self.links[l].rem == to && self.links[l].ty == ty)
    }

    /// `ncclTopoCpuType`: arch/vendor/model of the first CPU node.
    pub fn cpu_type(&self) -> (i32, i32, i32) {
        self.of(NodeType::Cpu).first().map(Node::cpu).unwrap_or((-1, -1, -1))
    }

    /// `ncclTopoGetCompCap`: (min, max) compute capability over DEV nodes.
    pub fn comp_cap(&self) -> Option<(i32, i32)> {
        let ccs = self.of(NodeType::Dev).iter().map(Node::cc);
        let min = ccs.clone().min()?;
        Some((min, ccs.max()?))
    }
}

fn get_int_device(x: &XmlNode) -> u64 {
    let mut ret: u64 = 0;
    for (k, sh) in [
        ("vendor", 48),
        ("device", 32),
        ("subsystem_vendor", 16),
        ("subsystem_device", 0),
    ] {
        if let Some(v) = x.attr(k) {
            let n = parse_c_int(v).unwrap_or(0) as u64;
            ret = ret.wrapping_add(n << sh);
        }
    }
    ret
}

/// `ncclTopoGetInterCpuBw`.
pub fn inter_cpu_bw(arch: i32, vendor: i32, model: i32) -> f32 {
    if arch == cpu_arch::POWER {
        return P9_BW;
    }
    if arch == cpu_arch::ARM {
        return ARM_BW;
    }
    if arch == cpu_arch::X86 && vendor == cpu_vendor::INTEL {
        return match model {
            cpu_model::INTEL_ERP => ERP_QPI_BW,
            cpu_model::INTEL_SRP => SRP_QPI_BW,
            cpu_model::INTEL_SKL => SKL_QPI_BW,
            _ => BDW_QPI_BW,
        };
    }
    if arch == cpu_arch::X86 && vendor == cpu_vendor::AMD {
        return AMD_BW;
    }
    if arch == cpu_arch::X86 && vendor == cpu_vendor::ZHAOXIN {
        return if model == cpu_model::YONGFENG {
            YONGFENG_ZPI_BW
        } else {
            ZPI_BW
        };
    }
    LOC_BW
}

/// Builds the system from a fused `<system>` tree (`ncclTopoGetSystemFromXml`).
/// `local_host_hash` selects `systemId` (error when no `<cpu host_hash>` matches).
pub fn from_xml(xml: &XmlNode, local_host_hash: u64) -> Result<System, TopoError> {
    if xml.name != "system" {
        return Err(TopoError::MissingElement {
            what: "topology".to_string(),
            element: "system".to_string(),
        });
    }
    let mut sys = System::default();
    for cpu in xml.subs.iter().filter(|s| s.name == "cpu") {
        add_cpu(&mut sys, cpu)?;
    }
    sys.system_id = sys
        .host_hashes
        .iter()
        .position(|&h| h == local_host_hash)
        .ok_or_else(|| {
            TopoError::Topology(format!(
                "localHostHash = {local_host_hash:#x} not found in the list of system hostHashes"
            ))
        })?;
    add_nvlinks(&mut sys, xml, None, 0)?;
    add_c2c(&mut sys, xml, None, 0)?;
    add_pcilinks(&mut sys, xml, None, 0)?;
    flatten_bcm_switches(&mut sys)?;
    connect_cpus(&mut sys)?;
    sort_system(&mut sys);
    Ok(sys)
}

fn system_id_of(sys: &mut System, cpu: &XmlNode) -> Result<usize, TopoError> {
    let h = match cpu.attr("host_hash") {
        Some(s) => parse_hex_u64(s).ok_or_else(|| cpu.bad("host_hash", s, "a hexadecimal host hash"))?,
        None => 0,
    };
    Ok(match sys.host_hashes.iter().position(|&x| x == h) {
        Some(i) => i,
        None => {
            sys.host_hashes.push(h);
            sys.host_hashes.len() - 1
        }
    })
}

fn add_cpu(sys: &mut System, x: &XmlNode) -> Result<(), TopoError> {
    let numa = x.req_int("numaid")?;
    let system_id = system_id_of(sys, x)?;
    let arch = cpu_arch_from_str(x.req("arch")?);
    let mut vendor = -1;
    let mut model = -1;
    if arch == cpu_arch::X86 {
        vendor = cpu_vendor_from_str(x.req("vendor")?);
        if vendor == cpu_vendor::INTEL {
            let fam = x.req_int("familyid")?;
            let m = x.req_int("modelid")?;
            model = if fam == 6 && m >= 0xCF {
                cpu_model::INTEL_ERP
            } else if fam == 6 && m >= 0x8F {
                cpu_model::INTEL_SRP
            } else if fam == 6 && m >= 0x55 {
                cpu_model::INTEL_SKL
            } else {
                cpu_model::INTEL_BDW
            };
        } else if vendor == cpu_vendor::ZHAOXIN {
            let fam = x.req_int("familyid")?;
            let m = x.req_int("modelid")?;
            if fam == 7 && m == 0x5B {
                model = cpu_model::YONGFENG;
            }
        }
    }
    let cpu = sys.create_node(
        NodeType::Cpu,
        topo_id(system_id, numa),
        NodeInfo::Cpu {
            arch,
            vendor,
            model,
            affinity: x.attr("affinity").unwrap_or_default().to_string(),
        },
    )?;
    for s in &x.subs {
        if s.name == "pci" {
            add_pci(sys, s, cpu, system_id, numa)?;
        }
        if s.name == "nic" {
            // NCCL_TOPO_LOCAL_NIC_ID(numaId, 0) masked by NCCL_TOPO_ID: every CPU-attached
            // NIC of a host is the same node.
            let id = topo_id(system_id, numa << 56);
            let nic = match sys.find_node(NodeType::Nic, id) {
                Some(n) => n,
                None => {
                    let n = sys.create_node(NodeType::Nic, id, NodeInfo::None)?;
                    sys.connect(cpu, n, LinkType::Pci, LOC_BW)?;
                    sys.connect(n, cpu, LinkType::Pci, LOC_BW)?;
                    n
                }
            };
            add_nic(sys, s, nic, system_id, None)?;
        }
    }
    Ok(())
}

fn add_nic(
    sys: &mut System,
    x: &XmlNode,
    nic: NodeRef,
    system_id: usize,
    parent_bus_id: Option<&str>,
) -> Result<(), TopoError> {
    for n in x.subs.iter().filter(|s| s.name == "net") {
        if !n.has_attr("dev") {
            continue;
        }
        if n.int_or("net", 1)? != 0 {
            add_net(sys, n, nic, system_id, parent_bus_id)?;
        }
        // GIN / RMA devices are out of scope (graph search never uses them).
    }
    Ok(())
}

fn add_net(
    sys: &mut System,
    x: &XmlNode,
    nic: NodeRef,
    system_id: usize,
    parent_bus_id: Option<&str>,
) -> Result<(), TopoError> {
    let dev = x.req_int("dev")?;
    let id = topo_id(system_id, dev);
    let asic = match x.attr("guid") {
        Some(g) => parse_hex_u64(g).ok_or_else(|| x.bad("guid", g, "a hexadecimal guid"))?,
        None => id as u64,
    };
    let mut mbps = x.int_or("speed", 0)?;
    if mbps <= 0 {
        mbps = 10000;
    }
    let bw = (mbps as f64 / 8000.0) as f32;
    let pci_id = match parent_bus_id {
        Some(b) => pci_id_hash(b),
        None => pci_id_hash(&format!("{asic:x}")),
    };
    let info = NetInfo {
        dev: dev as i32,
        name: x.attr("name").unwrap_or_default().to_string(),
        pci_id,
        asic,
        port: x.int_or("port", 0)? as i32,
        bw,
        latency: x.float_or("latency", 0.0)?,
        gdr: x.int_or("gdr", 0)? != 0,
        coll: x.int_or("coll", 0)? != 0,
        max_channels: x.int_or("maxconn", MAXCHANNELS as i64)? as i32,
        local_gpu: -1,
        rail: x.int_or("rail", -1)? as i16,
        plane: x.int_or("plane", -1)? as i16,
    };
    let net = sys.create_node(NodeType::Net, id, NodeInfo::Net(info))?;
    sys.connect(nic, net, LinkType::Net, bw)?;
    sys.connect(net, nic, LinkType::Net, bw)?;
    Ok(())
}

fn add_pci(sys: &mut System, x: &XmlNode, parent: NodeRef, system_id: usize, numa: i64) -> Result<(), TopoError> {
    let class = x.req("class")?;
    let mut ty = pci_class_type(class);
    let bus_str = x.req("busid")?;
    let bus_id = bus_id_to_i64(bus_str).ok_or_else(|| x.bad("busid", bus_str, "a PCI bus id (dddd:bb:dd.f)"))?;
    let width = x.req_int("link_width")?;
    let speed = x.req("link_speed")?;
    let bw = pci_bw(width, speed);

    for g in x.subs.iter().filter(|s| s.name == "gpu") {
        if !g.has_attr("rank") {
            // NCCL skips the whole pci element (a GPU of another communicator).
            return Ok(());
        }
        add_gpu(sys, x, g, parent, system_id, bus_id, bw)?;
    }

    let mut node = None;
    if let Some(nic_x) = x.sub("nic") {
        ty = NodeType::Nic;
        // NCCL_TOPO_LOCAL_NIC_ID(numa, busId): the NUMA part is masked away by NCCL_TOPO_ID.
        let id = topo_id(system_id, (numa << 56).wrapping_add(bus_id));
        let nic = match sys.find_node(ty, id) {
            Some(n) => n,
            None => {
                let n = sys.create_node(ty, id, NodeInfo::None)?;
                node = Some(n);
                n
            }
        };
        add_nic(sys, nic_x, nic, system_id, Some(bus_str))?;
    } else if ty == NodeType::Pci {
        let n = sys.create_node(
            NodeType::Pci,
            topo_id(system_id, bus_id),
            NodeInfo::Pci {
                device: get_int_device(x),
            },
        )?;
        // NCCL calls AddPci on every non-pcilink child (a `<gpu>`/`<nic>` directly under a
        // bridge then fails on its missing `class`, as in NCCL).
        for s in x.subs.iter().filter(|s| s.name != "pcilink") {
            add_pci(sys, s, n, system_id, numa)?;
        }
        node = Some(n);
    }
    if let Some(n) = node {
        sys.connect(n, parent, LinkType::Pci, bw)?;
        sys.connect(parent, n, LinkType::Pci, bw)?;
    }
    Ok(())
}

fn add_gpu(
    sys: &mut System,
    pci: &XmlNode,
    g: &XmlNode,
    parent: NodeRef,
    system_id: usize,
    bus_id: i64,
    bw: f32,
) -> Result<(), TopoError> {
    if bus_id & 0x3 != 0 {
        return Err(pci.bad(
            "busid",
            pci.attr("busid").unwrap_or_default(),
            "a bus id whose two low bits are 0 (reserved for MLOPart)",
        ));
    }
    let mlo = g.int_or("mlopart", -1)?;
    let sm = g.req_int("sm")?;
    let dev_bus = if mlo >= 0 {
        if mlo >= 2 {
            return Err(g.bad("mlopart", &mlo.to_string(), "0 or 1 (NCCL_TOPO_MLOPART_DEV_MAX = 2)"));
        }
        bus_id | (((mlo << 1) | 1) & 3)
    } else {
        bus_id
    };
    let dev_id = topo_id(system_id, dev_bus);
    let dev_node = match sys.find_node(NodeType::Dev, dev_id) {
        Some(d) => d,
        None => {
            let d = sys.create_node(
                NodeType::Dev,
                dev_id,
                NodeInfo::Dev {
                    device: get_int_device(pci),
                    dev: g.req_int("dev")? as i32,
                    cc: sm as i32,
                    n_gpus: 0,
                },
            )?;
            sys.connect(d, parent, LinkType::Pci, bw)?;
            sys.connect(parent, d, LinkType::Pci, bw)?;
            let sibs: Vec<usize> = dev_siblings(sys, dev_id);
            for s in sibs {
                if s == d.idx {
                    continue;
                }
                let sr = NodeRef::new(NodeType::Dev, s);
                sys.connect(d, sr, LinkType::Loc, 2618.0)?;
                sys.connect(sr, d, LinkType::Loc, 2618.0)?;
            }
            d
        }
    };
    let n_gpus = match &sys.node(dev_node).info {
        NodeInfo::Dev { n_gpus, .. } => *n_gpus,
        _ => 0,
    };
    let local = ((n_gpus as i64) << 40) | (dev_bus & ((1i64 << 40) - 1));
    let info = NodeInfo::Gpu {
        rank: g.req_int("rank")? as i32,
        cc: sm as i32,
        dev: g.req_int("dev")? as i32,
        gdr: g.req_int("gdr")? != 0,
        mlo_part: mlo as i32,
        parent: dev_node.idx,
    };
    let gpu = sys.create_node(NodeType::Gpu, topo_id(system_id, local), info)?;
    sys.connect(dev_node, gpu, LinkType::Loc, LOC_BW)?;
    sys.connect(gpu, dev_node, LinkType::Loc, LOC_BW)?;
    if let NodeInfo::Dev { n_gpus, .. } = &mut sys.nodes[NodeType::Dev.idx()][dev_node.idx].info {
        *n_gpus += 1;
    }
    Ok(())
}

/// DEV nodes of one physical GPU (ids equal once the MLOPart bits are masked).
fn dev_siblings(sys: &System, id: i64) -> Vec<usize> {
    let base = id & !3;
    sys.of(NodeType::Dev)
        .iter()
        .enumerate()
        .filter(|(_, d)| d.id & !3 == base)
        .map(|(i, _)| i)
        .collect()
}

/// `findLocalCpu`: walks up PCI links (through PCI switches only) to the CPU.
fn find_local_cpu(sys: &System, node: NodeRef, from: Option<NodeRef>) -> Option<NodeRef> {
    if node.ty == NodeType::Cpu {
        return Some(node);
    }
    for &l in &sys.node(node).links {
        let link = &sys.links[l];
        if link.ty == LinkType::Pci
            && Some(link.rem) != from
            && (link.rem.ty == NodeType::Pci || link.rem.ty == NodeType::Cpu)
            && let Some(c) = find_local_cpu(sys, link.rem, Some(node))
        {
            return Some(c);
        }
    }
    None
}

fn gpu_dev_node(sys: &System, g: &XmlNode, bus: &str, system_id: usize) -> Result<Option<NodeRef>, TopoError> {
    let raw = bus_id_to_i64(bus).unwrap_or(0);
    let mlo = g.int_or("mlopart", -1)?;
    let dev_bus = if mlo >= 0 { raw | (((mlo << 1) | 1) & 3) } else { raw };
    Ok(sys.find_node(NodeType::Dev, topo_id(system_id, dev_bus)))
}

/// `ncclTopoXmlIsPrimaryGpuForDev`: only the first `<gpu>` of a DEV adds its links.
fn is_primary_gpu(pci: &XmlNode, gi: usize) -> Result<bool, TopoError> {
    let me = pci.subs[gi].int_or("mlopart", -1)?;
    for (i, s) in pci.subs.iter().enumerate() {
        if s.name != "gpu" {
            continue;
        }
        if i == gi {
            break;
        }
        if s.int_or("mlopart", -1)? == me {
            return Ok(false);
        }
    }
    Ok(true)
}

fn add_nvlinks(sys: &mut System, x: &XmlNode, parent_bus: Option<&str>, system_id: usize) -> Result<(), TopoError> {
    let system_id = if x.name == "cpu" {
        system_id_of(sys, x)?
    } else {
        system_id
    };
    let bus = x.attr("busid").or(parent_bus);
    for (gi, g) in x.subs.iter().enumerate() {
        if g.name == "gpu" && x.name == "pci" {
            if !g.has_attr("rank") || !is_primary_gpu(x, gi)? {
                continue;
            }
            for nvl in g.subs.iter().filter(|s| s.name == "nvlink") {
                let Some(bus) = bus else { continue };
                let dev = gpu_dev_node(sys, g, bus, system_id)?.ok_or_else(|| {
                    TopoError::Topology(format!("Add NVLink error : could not find DEV for GPU {bus}"))
                })?;
                let local_devs = dev_siblings(sys, sys.node(dev).id).len().max(1);
                let count = nvl.req_int("count")?;
                let tclass = nvl.req("tclass")?;
                let target_ty = pci_class_type(tclass);
                let nvl_bw = nvlink_bw(sys.node(dev).cc());
                if target_ty == NodeType::Gpu {
                    let target = nvl.req("target")?;
                    let tb = bus_id_to_i64(target).ok_or_else(|| nvl.bad("target", target, "a PCI bus id"))?;
                    let rem = dev_siblings(sys, topo_id(system_id, tb));
                    let n_rem = rem.len();
                    for r in rem {
                        let bw = count as f32 * nvl_bw / n_rem as f32 / local_devs as f32;
                        sys.connect(dev, NodeRef::new(NodeType::Dev, r), LinkType::Nvl, bw)?;
                    }
                } else {
                    let remote = if target_ty == NodeType::Cpu {
                        find_local_cpu(sys, dev, None)
                    } else if sys.count(NodeType::Nvs) == 0 {
                        Some(sys.create_node(NodeType::Nvs, 0, NodeInfo::None)?)
                    } else {
                        Some(NodeRef::new(NodeType::Nvs, 0))
                    };
                    if let Some(r) = remote {
                        let bw = count as f32 * nvl_bw / local_devs as f32;
                        sys.connect(dev, r, LinkType::Nvl, bw)?;
                        sys.connect(r, dev, LinkType::Nvl, bw)?;
                    }
                }
            }
        } else {
            add_nvlinks(sys, g, bus, system_id)?;
        }
    }
    Ok(())
}

fn add_c2c(sys: &mut System, x: &XmlNode, parent_bus: Option<&str>, system_id: usize) -> Result<(), TopoError> {
    let system_id = if x.name == "cpu" {
        system_id_of(sys, x)?
    } else {
        system_id
    };
    let bus = x.attr("busid").or(parent_bus);
    for (gi, g) in x.subs.iter().enumerate() {
        if g.name == "gpu" && x.name == "pci" {
            if !g.has_attr("rank") || !is_primary_gpu(x, gi)? {
                continue;
            }
            for c in g.subs.iter().filter(|s| s.name == "c2c") {
                let Some(bus) = bus else { continue };
                let dev = gpu_dev_node(sys, g, bus, system_id)?
                    .ok_or_else(|| TopoError::Topology(format!("Add C2C error : could not find DEV for GPU {bus}")))?;
                let n_sib = dev_siblings(sys, sys.node(dev).id).len();
                let count = c.req_int("count")?;
                let bw_attr = c.req_int("bw")?;
                let bw = (bw_attr * count) as f32 / 1000.0;
                let Some(cpu) = find_local_cpu(sys, dev, None) else {
                    continue;
                };
                if n_sib > 1 {
                    let xid = sys.node(dev).id & !3;
                    let xb = match sys.find_node(NodeType::Cxb, xid) {
                        Some(x) => x,
                        None => {
                            let x = sys.create_node(NodeType::Cxb, xid, NodeInfo::None)?;
                            sys.connect(x, cpu, LinkType::C2c, bw)?;
                            sys.connect(cpu, x, LinkType::C2c, bw)?;
                            x
                        }
                    };
                    sys.connect(dev, xb, LinkType::C2c, bw)?;
                    sys.connect(xb, dev, LinkType::C2c, bw)?;
                } else {
                    sys.connect(dev, cpu, LinkType::C2c, bw)?;
                    sys.connect(cpu, dev, LinkType::C2c, bw)?;
                }
            }
        } else {
            add_c2c(sys, g, bus, system_id)?;
        }
    }
    Ok(())
}

fn add_pcilinks(sys: &mut System, x: &XmlNode, parent_bus: Option<&str>, system_id: usize) -> Result<(), TopoError> {
    if x.name == "pcilink" {
        let Some(pb) = parent_bus.and_then(bus_id_to_i64) else {
            return Ok(());
        };
        let pci = sys.find_node(NodeType::Pci, topo_id(system_id, pb)).ok_or_else(|| {
            TopoError::Topology(format!(
                "Add PCI Link error : could not find PCI SW {:x}",
                topo_id(system_id, pb)
            ))
        })?;
        let target = x.req("target")?;
        let tb = bus_id_to_i64(target).ok_or_else(|| x.bad("target", target, "a PCI bus id"))?;
        if let Some(r) = sys.find_node(NodeType::Pci, topo_id(system_id, tb)) {
            sys.connect(pci, r, LinkType::Loc, LOC_BW)?;
        }
        return Ok(());
    }
    let system_id = if x.name == "cpu" {
        system_id_of(sys, x)?
    } else {
        system_id
    };
    let bus = x.attr("busid").or(parent_bus);
    for s in &x.subs {
        add_pcilinks(sys, s, bus, system_id)?;
    }
    Ok(())
}

fn bcm_gen(id: u64, level: u64) -> i32 {
    if id & 0xffff_ffff_ffff_f000 == 0x1000_c010_1000_a000 {
        return 4;
    }
    if id & 0xffff_ffff_ffff_f000 == (0x1000_c030_1000_0000 | (level * 0x1000)) {
        return 5;
    }
    0
}

/// `ncclTopoFlattenBcmSwitches`: a Broadcom Gen4/Gen5 switch absorbs its sub-switches.
fn flatten_bcm_switches(sys: &mut System) -> Result<(), TopoError> {
    let mut s = 0;
    while s < sys.count(NodeType::Pci) {
        let device = match sys.of(NodeType::Pci)[s].info {
            NodeInfo::Pci { device } => device,
            _ => 0,
        };
        let bcm = bcm_gen(device, 0);
        if bcm == 0 {
            s += 1;
            continue;
        }
        let me = NodeRef::new(NodeType::Pci, s);
        let mut subs = Vec::new();
        let links = sys.nodes[NodeType::Pci.idx()][s].links.clone();
        let mut kept = Vec::new();
        for l in links {
            let rem = sys.links[l].rem;
            let sub_dev = match sys.node(rem).info {
                NodeInfo::Pci { device } if rem.ty == NodeType::Pci => Some(device),
                _ => None,
            };
            if sub_dev.is_some_and(|d| bcm_gen(d, 1) == bcm) {
                subs.push(sys.node(rem).id);
            } else {
                kept.push(l);
            }
        }
        sys.nodes[NodeType::Pci.idx()][s].links = kept;
        let my_id = sys.node(me).id;
        for sub_id in subs {
            let me_idx = sys.index_of(NodeType::Pci, my_id).unwrap_or(s);
            let me = NodeRef::new(NodeType::Pci, me_idx);
            let Some(si) = sys.index_of(NodeType::Pci, sub_id) else {
                continue;
            };
            let sub = NodeRef::new(NodeType::Pci, si);
            for l in sys.node(sub).links.clone() {
                let rem = sys.links[l].rem;
                if rem == me {
                    continue;
                }
                // Parent takes the sub-switch's link; the child's up-link now points to the parent.
                let id = sys.links.len();
                let mut nl = sys.links[l].clone();
                nl.from = me;
                sys.links.push(nl);
                sys.nodes[NodeType::Pci.idx()][me.idx].links.push(id);
                if let Some(&rl) = sys.node(rem).links.iter().find(|&&rl| sys.links[rl].rem == sub) {
                    sys.links[rl].rem = me;
                }
            }
            sys.remove_node(NodeType::Pci, si);
        }
        let my_idx = sys.index_of(NodeType::Pci, my_id).unwrap_or(s);
        if let NodeInfo::Pci { device } = &mut sys.nodes[NodeType::Pci.idx()][my_idx].info {
            *device |= 0xffff;
        }
        s = 0; // restart: node indices changed
    }
    Ok(())
}

/// `ncclTopoConnectCpus`: every ordered pair of CPUs of one host gets a `LINK_SYS`.
fn connect_cpus(sys: &mut System) -> Result<(), TopoError> {
    let n = sys.count(NodeType::Cpu);
    for a in 0..n {
        for b in 0..n {
            let (ca, cb) = (&sys.of(NodeType::Cpu)[a], &sys.of(NodeType::Cpu)[b]);
            if a == b || topo_id_system(ca.id) != topo_id_system(cb.id) {
                continue;
            }
            let (arch, vendor, model) = ca.cpu();
            let bw = inter_cpu_bw(arch, vendor, model);
            sys.connect(
                NodeRef::new(NodeType::Cpu, a),
                NodeRef::new(NodeType::Cpu, b),
                LinkType::Sys,
                bw,
            )?;
        }
    }
    Ok(())
}

fn sort_rec(sys: &mut System, node: NodeRef, up: Option<NodeRef>) {
    if let Some(up) = up {
        let links = &mut sys.nodes[node.ty.idx()][node.idx].links;
        if let Some(p) = links.iter().position(|&l| sys.links[l].rem == up) {
            let l = links.remove(p);
            links.push(l);
        }
    }
    let links = sys.node(node).links.clone();
    for l in links {
        let link = &sys.links[l];
        if link.ty == LinkType::Pci && Some(link.rem) != up {
            let rem = link.rem;
            sort_rec(sys, rem, Some(node));
        }
    }
}

/// `ncclTopoSortSystem`: PCI up-links last (NVLinks first, then PCI down, PCI up, SYS).
fn sort_system(sys: &mut System) {
    for c in 0..sys.count(NodeType::Cpu) {
        sort_rec(sys, NodeRef::new(NodeType::Cpu, c), None);
    }
}

fn id_str(ty: NodeType, id: i64) -> String {
    format!("{}/{:x}-{:x}", ty, topo_id_system(id), topo_id_local(id))
}

/// The `NODE/sys-local` label NCCL prints.
pub fn node_label(sys: &System, r: NodeRef) -> String {
    id_str(r.ty, sys.node(r).id)
}

fn print_rec(sys: &System, node: NodeRef, prev: Option<NodeRef>, indent: usize, out: &mut Vec<String>, prefix: String) {
    let n = sys.node(node);
    let head = match &n.info {
        NodeInfo::Gpu { rank, mlo_part, .. } => {
            let mlo = if *mlo_part == -1 {
                String::new()
            } else {
                format!(" [MLOPart {mlo_part}]")
            };
            format!("{} ({}){}", id_str(n.ty, n.id), rank, mlo)
        }
        NodeInfo::Cpu {
            arch, vendor, model, ..
        } => format!("{} ({}/{}/{})", id_str(n.ty, n.id), arch, vendor, model),
        NodeInfo::Pci { device } | NodeInfo::Dev { device, .. } => format!("{} ({:x})", id_str(n.ty, n.id), device),
        _ => id_str(n.ty, n.id),
    };
    out.push(format!("{prefix}{head}"));
    let pad = " ".repeat(indent);
    for &l in &n.links {
        let link = &sys.links[l];
        let rem = sys.node(link.rem);
        if link.ty == LinkType::Loc {
            out.push(format!(
                "{pad}+ {}[{:2.1}] - {}",
                link.ty.as_str(),
                link.bw,
                id_str(rem.ty, rem.id)
            ));
        } else if link.ty != LinkType::Pci || Some(link.rem) != prev {
            let p = format!("{pad}+ {}[{:2.1}] - ", link.ty.as_str(), link.bw);
            if link.ty == LinkType::Pci {
                let w = p.len();
                print_rec(sys, link.rem, Some(node), w, out, p);
            } else if let NodeInfo::Net(ni) = &rem.info {
                out.push(format!(
                    "{p}{} ({}/{:x}/{}/{:.6})",
                    id_str(rem.ty, rem.id),
                    i32::from(ni.coll),
                    ni.asic,
                    ni.port,
                    ni.bw
                ));
            } else {
                out.push(format!("{p}{}", id_str(rem.ty, rem.id)));
            }
        }
    }
}

/// `ncclTopoPrint` lines (without the path lines, see [`super::paths::print_paths`]).
pub fn print_system(sys: &System) -> Vec<String> {
    let mut out = vec![format!(
        "=== System : maxBw {:2.1} totalBw {:2.1} ===",
        sys.max_bw, sys.total_bw
    )];
    for c in 0..sys.count(NodeType::Cpu) {
        print_rec(sys, NodeRef::new(NodeType::Cpu, c), None, 0, &mut out, String::new());
    }
    out.push("==========================================".to_string());
    out
}
