//! Node, link and path types, bandwidth constants and the small parsing helpers NCCL's
//! topology code relies on (`src/graph/topo.h`, `src/include/graph.h`, `src/misc/utils.cc`).
//!
//! Bandwidths are `f32` GB/s throughout, as NCCL keeps them in `float`: the search compares
//! and subtracts them in single precision, and reproducing its choices needs the same
//! rounding.

use std::fmt;

/// `LOC_BW`: bandwidth of a local link (GPU↔DEV) and of a node's path to itself, GB/s.
pub const LOC_BW: f32 = 5000.0;
/// `SM60_NVLINK_BW`: per-NVLink bandwidth for compute capability 6.x, GB/s.
pub const SM60_NVLINK_BW: f32 = 18.0;
/// `SM70_NVLINK_BW`.
pub const SM70_NVLINK_BW: f32 = 20.0;
/// `SM80_NVLINK_BW` (also the fallback below 6.0).
pub const SM80_NVLINK_BW: f32 = 20.0;
/// `SM86_NVLINK_BW`.
pub const SM86_NVLINK_BW: f32 = 12.0;
/// `SM90_NVLINK_BW`.
pub const SM90_NVLINK_BW: f32 = 20.6;
/// `SM100_NVLINK_BW`.
pub const SM100_NVLINK_BW: f32 = 40.1;
/// `PCI_BW`: "PCIe Gen3 x16", used by the tuning model only.
pub const PCI_BW: f32 = 12.0;
/// `AMD_BW`: x86 AMD inter-socket bandwidth (NCCL 2.30.7 has one AMD value).
pub const AMD_BW: f32 = 16.0;
/// `BDW_QPI_BW`: Intel before Skylake.
pub const BDW_QPI_BW: f32 = 6.0;
/// `SKL_QPI_BW`: Intel Skylake class.
pub const SKL_QPI_BW: f32 = 10.0;
/// `SRP_QPI_BW`: Intel Sapphire Rapids class.
pub const SRP_QPI_BW: f32 = 22.0;
/// `ERP_QPI_BW`: Intel Emerald Rapids class.
pub const ERP_QPI_BW: f32 = 40.0;
/// `ZPI_BW`: Zhaoxin.
pub const ZPI_BW: f32 = 6.0;
/// `YONGFENG_ZPI_BW`: Zhaoxin Yongfeng.
pub const YONGFENG_ZPI_BW: f32 = 9.0;
/// `P9_BW`: IBM POWER inter-socket.
pub const P9_BW: f32 = 32.0;
/// `ARM_BW`: ARM inter-socket.
pub const ARM_BW: f32 = 6.0;

/// `MAXCHANNELS` (`src/include/device.h`).
pub const MAXCHANNELS: usize = 64;
/// `NCCL_TOPO_MAX_NODES`: most nodes of one type (`src/include/graph.h`).
pub const TOPO_MAX_NODES: usize = 640;
/// `NCCL_TOPO_XML_MAX_NODES`: most XML elements one rank contributes.
pub const TOPO_XML_MAX_NODES: usize = 256;
/// `NCCL_GRAPH_XML_MAX_NODES`.
pub const GRAPH_XML_MAX_NODES: usize = 65536;
/// `NCCL_TOPO_XML_VERSION`.
pub const TOPO_XML_VERSION: i64 = 1;
/// `NCCL_GRAPH_XML_VERSION`.
pub const GRAPH_XML_VERSION: i64 = 1;

/// `INTEL_P2P_OVERHEAD(bw)`: Intel root complexes split GPU P2P traffic into 64 B TLPs.
pub fn intel_p2p_overhead(bw: f32) -> f32 {
    bw * 6.0 / 5.0
}

/// `ncclTopoNVLinkBw(cc)` (`topo.h`): bandwidth of one NVLink for a compute capability.
pub fn nvlink_bw(cc: i32) -> f32 {
    if cc >= 100 {
        SM100_NVLINK_BW
    } else if cc >= 90 {
        SM90_NVLINK_BW
    } else if cc == 86 {
        SM86_NVLINK_BW
    } else if cc >= 80 {
        SM80_NVLINK_BW
    } else if cc >= 70 {
        SM70_NVLINK_BW
    } else if cc >= 60 {
        SM60_NVLINK_BW
    } else {
        SM80_NVLINK_BW
    }
}

/// Node types (`GPU PCI NVS CPU NIC NET GIN RMA DEV CXB`, `topo.h`), in NCCL's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeType {
    /// A rank's view of a GPU (or, in ferroccl, of a CPU-process rank; see [`crate::topo`]).
    Gpu = 0,
    /// A PCI switch.
    Pci = 1,
    /// The NVSwitch fabric (one node).
    Nvs = 2,
    /// A NUMA domain / root complex.
    Cpu = 3,
    /// A NIC PCI function.
    Nic = 4,
    /// A net plugin device.
    Net = 5,
    /// A GPU-initiated networking device (not used here).
    Gin = 6,
    /// An RMA plugin device (not used here).
    Rma = 7,
    /// A physical GPU (PCI function).
    Dev = 8,
    /// C2C cross bridge (MLOPart).
    Cxb = 9,
}

/// Number of node types (`NCCL_TOPO_NODE_TYPES`).
pub const NODE_TYPES: usize = 10;

impl NodeType {
    /// All types in index order.
    pub const ALL: [NodeType; NODE_TYPES] = [
        NodeType::Gpu,
        NodeType::Pci,
        NodeType::Nvs,
        NodeType::Cpu,
        NodeType::Nic,
        NodeType::Net,
        NodeType::Gin,
        NodeType::Rma,
        NodeType::Dev,
        NodeType::Cxb,
    ];

    /// Index into per-type arrays.
    pub fn idx(self) -> usize {
        self as usize
    }

    /// `topoNodeTypeStr`.
    pub fn as_str(self) -> &'static str {
        ["GPU", "PCI", "NVS", "CPU", "NIC", "NET", "GIN", "RMA", "DEV", "CXB"][self as usize]
    }
}

impl fmt::Display for NodeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Link types (`LINK_*`, `topo.h`); values coincide with the path types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkType {
    /// `LINK_LOC` (0).
    Loc = 0,
    /// `LINK_NVL` (1).
    Nvl = 1,
    /// `LINK_C2C` (3).
    C2c = 3,
    /// `LINK_PCI` (4).
    Pci = 4,
    /// `LINK_SYS` (9).
    Sys = 9,
    /// `LINK_NET` (10).
    Net = 10,
}

impl LinkType {
    /// `topoLinkTypeStr`.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkType::Loc => "LOC",
            LinkType::Nvl => "NVL",
            LinkType::C2c => "C2C",
            LinkType::Pci => "PCI",
            LinkType::Sys => "SYS",
            LinkType::Net => "NET",
        }
    }

    /// The path type with the same value.
    pub fn as_path(self) -> PathType {
        PathType::from_u8(self as u8).unwrap_or(PathType::Dis)
    }
}

/// Path types (`PATH_*`, `src/include/graph.h`). Smaller is closer; NCCL compares them
/// with `<`, so the order matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum PathType {
    /// Same node.
    Loc = 0,
    /// NVLink only.
    Nvl = 1,
    /// NVLink through one intermediate GPU.
    Nvb = 2,
    /// Through a C2C link.
    C2c = 3,
    /// At most one PCI switch.
    Pix = 4,
    /// Several PCI switches, no host bridge.
    Pxb = 5,
    /// GPU→CPU over C2C then CPU→NIC over PCIe.
    P2c = 6,
    /// GPU→(NVLink)→peer GPU→(PCI) NIC.
    Pxn = 7,
    /// Through a PCI host bridge.
    Phb = 8,
    /// Through the inter-CPU link.
    Sys = 9,
    /// Through the network.
    Net = 10,
    /// Disconnected.
    #[default]
    Dis = 11,
}

impl PathType {
    /// All types in order.
    pub const ALL: [PathType; 12] = [
        PathType::Loc,
        PathType::Nvl,
        PathType::Nvb,
        PathType::C2c,
        PathType::Pix,
        PathType::Pxb,
        PathType::P2c,
        PathType::Pxn,
        PathType::Phb,
        PathType::Sys,
        PathType::Net,
        PathType::Dis,
    ];

    /// From the numeric value.
    pub fn from_u8(v: u8) -> Option<PathType> {
        PathType::ALL.get(usize::from(v)).copied()
    }

    /// `topoPathTypeStr`.
    pub fn as_str(self) -> &'static str {
        [
            "LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS",
        ][self as usize]
    }

    /// The next wider type (`type + 1`), saturating at `DIS`.
    pub fn next(self) -> PathType {
        PathType::from_u8(self as u8 + 1).unwrap_or(PathType::Dis)
    }

    /// Parses a `topoPathTypeStr` name (exact, as `ncclGetLevel` compares).
    pub fn from_name(s: &str) -> Option<PathType> {
        PathType::ALL.iter().copied().find(|t| t.as_str() == s)
    }
}

impl fmt::Display for PathType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `NCCL_TOPO_CPU_ARCH_*`.
pub mod cpu_arch {
    /// Unknown (`kvDictCpuArch` fallback).
    pub const UNKNOWN: i32 = 0;
    /// `NCCL_TOPO_CPU_ARCH_X86`.
    pub const X86: i32 = 1;
    /// `NCCL_TOPO_CPU_ARCH_POWER`.
    pub const POWER: i32 = 2;
    /// `NCCL_TOPO_CPU_ARCH_ARM`.
    pub const ARM: i32 = 3;
    /// `NCCL_TOPO_CPU_ARCH_MIXED` (communicator level).
    pub const MIXED: i32 = 4;
}

/// `NCCL_TOPO_CPU_VENDOR_*`.
pub mod cpu_vendor {
    /// `NCCL_TOPO_CPU_VENDOR_INTEL`.
    pub const INTEL: i32 = 1;
    /// `NCCL_TOPO_CPU_VENDOR_AMD`.
    pub const AMD: i32 = 2;
    /// `NCCL_TOPO_CPU_VENDOR_ZHAOXIN`.
    pub const ZHAOXIN: i32 = 3;
    /// `NCCL_TOPO_CPU_VENDOR_MIXED`.
    pub const MIXED: i32 = 4;
}

/// `NCCL_TOPO_CPU_MODEL_*` (Intel generations and Zhaoxin Yongfeng).
pub mod cpu_model {
    /// `NCCL_TOPO_CPU_MODEL_INTEL_BDW`.
    pub const INTEL_BDW: i32 = 1;
    /// `NCCL_TOPO_CPU_MODEL_INTEL_SKL`.
    pub const INTEL_SKL: i32 = 2;
    /// `NCCL_TOPO_CPU_MODEL_INTEL_SRP`.
    pub const INTEL_SRP: i32 = 3;
    /// `NCCL_TOPO_CPU_MODEL_INTEL_ERP`.
    pub const INTEL_ERP: i32 = 4;
    /// `NCCL_TOPO_CPU_MODEL_YONGFENG`.
    pub const YONGFENG: i32 = 1;
}

/// `kvConvertToInt` (`utils.cc`): the value of the first dictionary key that is a prefix of
/// `s`, else the fallback (NCCL logs "KV Convert to int" and uses it).
pub fn kv_prefix<T: Copy>(s: &str, dict: &[(&str, T)], fallback: T) -> T {
    dict.iter()
        .find(|(k, _)| s.starts_with(k))
        .map(|&(_, v)| v)
        .unwrap_or(fallback)
}

/// `kvDictPciClass`: PCI class code → node type (prefix match; default PCI).
pub fn pci_class_type(class: &str) -> NodeType {
    kv_prefix(
        class,
        &[
            ("0x060400", NodeType::Pci),
            ("0x080100", NodeType::Pci),
            ("0x068000", NodeType::Nvs),
            ("0x068001", NodeType::Cpu),
            ("0x03", NodeType::Gpu),
            ("0x02", NodeType::Nic),
        ],
        NodeType::Pci,
    )
}

/// `kvDictPciGen`: `link_speed` → per-lane speed in units of 100 Mb/s (prefix match;
/// anything else, the empty string included, is 60).
pub fn pci_gen_speed(link_speed: &str) -> i32 {
    kv_prefix(
        link_speed,
        &[
            ("2.5 GT/s", 15),
            ("5 GT/s", 30),
            ("8 GT/s", 60),
            ("16 GT/s", 120),
            ("32 GT/s", 240),
            ("2.5 GT/s PCIe", 15),
            ("5.0 GT/s PCIe", 30),
            ("8.0 GT/s PCIe", 60),
            ("16.0 GT/s PCIe", 120),
            ("32.0 GT/s PCIe", 240),
            ("64.0 GT/s PCIe", 480),
        ],
        60,
    )
}

/// PCI link bandwidth as `ncclTopoAddPci` computes it: `width * speed / 80.0` (double) stored
/// in a float; a width of 0 means 16.
pub fn pci_bw(link_width: i64, link_speed: &str) -> f32 {
    let width = if link_width == 0 { 16 } else { link_width };
    (width as f64 * f64::from(pci_gen_speed(link_speed)) / 80.0) as f32
}

/// `kvDictCpuArch`.
pub fn cpu_arch_from_str(s: &str) -> i32 {
    kv_prefix(
        s,
        &[
            ("x86_64", cpu_arch::X86),
            ("arm64", cpu_arch::ARM),
            ("ppc64", cpu_arch::POWER),
        ],
        0,
    )
}

/// `kvDictCpuVendor`.
pub fn cpu_vendor_from_str(s: &str) -> i32 {
    kv_prefix(
        s,
        &[
            ("GenuineIntel", cpu_vendor::INTEL),
            ("AuthenticAMD", cpu_vendor::AMD),
            ("CentaurHauls", cpu_vendor::ZHAOXIN),
            ("  Shanghai  ", cpu_vendor::ZHAOXIN),
        ],
        0,
    )
}

/// `busIdToInt64` (`utils.cc`): every hex digit of `"DDDD:BB:DD.F"` concatenated (`:` and `.`
/// skipped, stops at the first other character, at most 16 digits). `None` when the string
/// starts with no hex digit at all.
pub fn bus_id_to_i64(bus_id: &str) -> Option<i64> {
    let mut v: u64 = 0;
    let mut n = 0;
    for c in bus_id.chars() {
        if c == '.' || c == ':' {
            continue;
        }
        let Some(d) = c.to_digit(16) else { break };
        if n == 16 {
            break;
        }
        v = (v << 4) | u64::from(d);
        n += 1;
    }
    // strtol saturates at LONG_MAX for 16-digit values above it.
    (n > 0).then(|| i64::try_from(v).unwrap_or(i64::MAX))
}

/// `int64ToBusId` (`utils.cc`): `%04lx:%02lx:%02lx.%01lx`.
pub fn i64_to_bus_id(id: i64) -> String {
    format!(
        "{:04x}:{:02x}:{:02x}.{:01x}",
        id >> 20,
        (id & 0xff000) >> 12,
        (id & 0xff0) >> 4,
        id & 0xf
    )
}

/// C `strtol(s, NULL, 0)`-like parse of a complete attribute value: optional sign, `0x`
/// hex, leading-`0` octal, else decimal. The empty string is 0 (as NCCL reads it); trailing
/// garbage is rejected (`None`), where NCCL would silently stop.
pub fn parse_c_int(s: &str) -> Option<i64> {
    let t = s.trim();
    if t.is_empty() {
        return Some(0);
    }
    let (neg, body) = match t.as_bytes()[0] {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if body.len() > 1 && body.starts_with('0') {
        i64::from_str_radix(&body[1..], 8).ok()?
    } else {
        body.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

/// `strtof`-like parse of a complete attribute value (empty = 0).
pub fn parse_c_float(s: &str) -> Option<f32> {
    let t = s.trim();
    if t.is_empty() {
        return Some(0.0);
    }
    t.parse::<f32>().ok()
}

/// Hex string (`strtoull(s, NULL, 16)`), with or without `0x`.
pub fn parse_hex_u64(s: &str) -> Option<u64> {
    let t = s.trim();
    let h = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")).unwrap_or(t);
    if h.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(h, 16).ok()
}

/// `NCCL_TOPO_ID(systemId, localId)`.
pub fn topo_id(system_id: usize, local: i64) -> i64 {
    ((system_id as i64) << 56).wrapping_add(local & 0x00ff_ffff_ffff_ffff)
}

/// `NCCL_TOPO_ID_SYSTEM_ID(id)`.
pub fn topo_id_system(id: i64) -> i64 {
    id >> 56
}

/// `NCCL_TOPO_ID_LOCAL_ID(id)`.
pub fn topo_id_local(id: i64) -> i64 {
    id & 0x00ff_ffff_ffff_ffff
}

/// `getHash` (`utils.cc`): DJB2a, `result = result * 33 ^ c`.
pub fn djb2a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 5381;
    for &b in bytes {
        // NCCL hashes `char` (signed on x86): sign-extend like the C code.
        h = (h << 5).wrapping_add(h) ^ (b as i8 as i64 as u64);
    }
    h
}

/// `eatHash`/`digestHash` stand-in for `pciId` (a hash of the parent bus id): any stable
/// hash works, NCCL only compares pciIds for equality.
pub fn pci_id_hash(s: &str) -> u64 {
    djb2a(s.as_bytes())
}

/// One route (`struct ncclTopoLinkList`).
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    /// Link ids, first hop first.
    pub links: Vec<usize>,
    /// Bottleneck bandwidth, GB/s.
    pub bw: f32,
    /// Path class.
    pub ty: PathType,
}

impl Path {
    /// An unreachable path (NCCL's calloc'd entry with `type = PATH_DIS`).
    pub fn dis() -> Path {
        Path {
            links: Vec::new(),
            bw: 0.0,
            ty: PathType::Dis,
        }
    }

    /// Hop count.
    pub fn count(&self) -> usize {
        self.links.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids() {
        assert_eq!(bus_id_to_i64("0000:07:00.0"), Some(0x7000));
        assert_eq!(bus_id_to_i64("ffff:ff:01.0"), Some(0xf_ffff_f010));
        assert_eq!(bus_id_to_i64("0001:00:00.0"), Some(0x10_0000));
        assert_eq!(bus_id_to_i64("zz"), None);
        assert_eq!(i64_to_bus_id(0x7000), "0000:07:00.0");
        assert_eq!(i64_to_bus_id(0x10_0000), "0001:00:00.0");
    }

    #[test]
    fn pci_speeds_match_the_reference_table() {
        assert_eq!(pci_bw(16, "8 GT/s"), 12.0);
        assert_eq!(pci_bw(16, "16 GT/s"), 24.0);
        assert_eq!(pci_bw(16, "32.0 GT/s PCIe"), 48.0);
        assert_eq!(pci_bw(16, "64.0 GT/s PCIe"), 96.0);
        assert_eq!(pci_bw(0, ""), 12.0);
        // NVML fallback string matches nothing: Gen3 speed.
        assert_eq!(pci_bw(16, "16.0 GT/s"), 12.0);
        assert_eq!(pci_bw(8, "2.5 GT/s PCIe"), 1.5);
    }

    #[test]
    fn classes_and_vendors() {
        assert_eq!(pci_class_type("0x030200"), NodeType::Gpu);
        assert_eq!(pci_class_type("0x020700"), NodeType::Nic);
        assert_eq!(pci_class_type("0x060400"), NodeType::Pci);
        assert_eq!(pci_class_type("0x068000"), NodeType::Nvs);
        assert_eq!(pci_class_type("0x123456"), NodeType::Pci);
        assert_eq!(cpu_vendor_from_str("AuthenticAMD"), cpu_vendor::AMD);
        assert_eq!(cpu_arch_from_str("x86_64"), cpu_arch::X86);
        assert_eq!(cpu_arch_from_str("riscv"), 0);
    }

    #[test]
    fn ints_and_nvlink() {
        assert_eq!(parse_c_int("0x10"), Some(16));
        assert_eq!(parse_c_int("010"), Some(8));
        assert_eq!(parse_c_int("-1"), Some(-1));
        assert_eq!(parse_c_int(""), Some(0));
        assert_eq!(parse_c_int("12a"), None);
        assert_eq!(nvlink_bw(90), 20.6);
        assert_eq!(nvlink_bw(86), 12.0);
        assert_eq!(nvlink_bw(50), 20.0);
        assert_eq!(PathType::Phb.next(), PathType::Sys);
        assert_eq!(PathType::from_name("PXN"), Some(PathType::Pxn));
    }
}
