//! NIC fusion (NCCL 2.30.7 `src/graph/topo.cc`: `ncclTopoProcessNet`, `ncclTopoMakeVNics`,
//! `ncclTopoForceMerge`, `ncclTopoAutoMerge`, `ncclTopoMakeVnic`, `ncclTopoGetPath`,
//! `ncclTopoGetVNicParent`, `ncclTopoUpdateVNics`, `ncclTopoGetFusionEnv`,
//! `ncclTopoGetMergePolicy`): physical net devices close enough to each other are fused
//! by the plugin's `makeVDevice` (v9+) into one virtual device, which then replaces its
//! members in the topology, so the graph search and each channel's NIC choice see one
//! device with the members' summed speed.
//!
//! The steps, as `ncclTopoProcessNet` runs them after the physical devices are in the XML:
//! 1. once per process and plugin (the plugin keeps its virtual devices): the groups named
//!    by `NCCL_NET_FORCE_MERGE` are fused, then every device not yet placed is fused with
//!    the unplaced devices at most `NCCL_NET_MERGE_LEVEL` away from it (default `PORT`:
//!    the ports of one NIC), at most `maxDevsPerNic` (8 for ncclNet v12, 4 before) per
//!    virtual device; groups of one are not made. A `makeVDevice` that fails during the
//!    automatic pass is logged, its devices are marked `PATH_DIS` from the group's root
//!    and the pass restarts, as NCCL does.
//! 2. every virtual device (`devices()` minus the physical count): its members' `<net>`
//!    get `net="0" keep="0"` (the system builder skips them), and the virtual device's
//!    `<net>` (name, speed, … from its own `getProperties`, `dev` = its index) is added
//!    under the members' common parent (a made-up PCI function with a unique bus id when
//!    that parent is a PCI bridge or a CPU; an error across NUMA domains).
//!
//! One deviation: when the members are ports of one `<nic>` (the common parent is the
//! `<nic>`, e.g. two interfaces with no PCI device, both attached to the first CPU),
//! NCCL would nest a new `<nic>` inside it; here the fused `<net>` joins that `<nic>`.

use std::collections::HashMap;
use std::sync::Mutex;

use ferroccl_plugin_api::sdk::Properties;

use super::TopoError;
use super::fill::{self, HostFacts};
use super::types::{PathType, bus_id_to_i64, i64_to_bus_id, kv_prefix};
use super::xml::XmlNode;

/// NCCL's `PATH_PORT` (`src/graph/topo.h`: `#define PATH_PORT PATH_NVL`): two ports of
/// one NIC. Only merge levels use it.
pub const PATH_PORT: PathType = PathType::Nvl;
/// `NCCL_NET_MAX_DEVS_PER_NIC` (ncclNet v12).
pub const MAX_DEVS_PER_NIC: usize = 8;
/// `NCCL_NET_MAX_DEVS_PER_NIC_V11` (ncclNet v9–v11).
pub const MAX_DEVS_PER_NIC_V11: usize = 4;
/// `PCI_BRIDGE_DEVICE_CLASS`.
const PCI_BRIDGE_DEVICE_CLASS: &str = "0x060400";
/// `NCCL_NET_ID_UNDEF` (rail and plane ids).
const ID_UNDEF: i16 = -1;

/// `nicPathKvList` (`topo.cc`): the names `NCCL_NET_MERGE_LEVEL` accepts.
const NIC_PATH_KV: &[(&str, PathType)] = &[
    ("LOC", PathType::Loc),
    ("PORT", PATH_PORT),
    ("PIX", PathType::Pix),
    ("PXB", PathType::Pxb),
    ("P2C", PathType::P2c),
    ("PXN", PathType::Pxn),
    ("PHB", PathType::Phb),
    ("SYS", PathType::Sys),
];

/// `NCCL_NET_MERGE_POLICY` (`ncclTopoGetMergePolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergePolicy {
    /// Every device within the merge level (`NCCL_NET_MERGE_POLICY_ALL`, the default
    /// except on Vera Rubin, which ferroccl does not model).
    All,
    /// Only devices of the root's rail, the rail defined (`NCCL_NET_MERGE_POLICY_RAIL`).
    Rail,
}

/// The fusion parameters (`ncclTopoGetFusionEnv`, `ncclTopoGetMergePolicy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FusionParams {
    /// `NCCL_NET_MERGE_LEVEL`: farthest path between fused devices (default `PORT`,
    /// [`PATH_PORT`]; `LOC` turns automatic fusion off).
    pub merge_level: PathType,
    /// `NCCL_NET_FORCE_MERGE`: `;`-separated groups of `,`-separated `name[:port]`.
    pub force_merge: Option<String>,
    /// `NCCL_NET_MERGE_POLICY` (default ALL).
    pub policy: MergePolicy,
}

impl Default for FusionParams {
    fn default() -> Self {
        FusionParams {
            merge_level: PATH_PORT,
            force_merge: None,
            policy: MergePolicy::All,
        }
    }
}

/// A merge level's name as NCCL spells it (`PORT` for [`PATH_PORT`]).
pub fn level_name(l: PathType) -> &'static str {
    NIC_PATH_KV.iter().find(|(_, t)| *t == l).map_or(l.as_str(), |(n, _)| n)
}

impl FusionParams {
    /// Reads `NCCL_NET_MERGE_LEVEL`, `NCCL_NET_FORCE_MERGE` and `NCCL_NET_MERGE_POLICY`
    /// through `get` (name → value). Returns the parameters and NCCL's log lines.
    /// An unknown merge level is NCCL's `kvConvertToInt` failure: logged, and the level
    /// stays at its zeroed value, `LOC` (no automatic fusion).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> (FusionParams, Vec<String>) {
        use crate::config::params::topo as t;
        let mut log = Vec::new();
        let mut p = FusionParams {
            force_merge: get(t::NET_FORCE_MERGE.name).filter(|v| !v.is_empty()),
            ..FusionParams::default()
        };
        if let Some(v) = get(t::NET_MERGE_LEVEL.name) {
            p.merge_level = match parse_merge_level(&v) {
                Some(l) => l,
                None => {
                    log.push(format!(
                        "NCCL_NET_MERGE_LEVEL={v}: unknown value (expected LOC, PORT, PIX, PXB, P2C, PXN, PHB or SYS); NIC fusion off (LOC)"
                    ));
                    PathType::Loc
                }
            };
        }
        if let Some(v) = get(t::NET_MERGE_POLICY.name) {
            if v.eq_ignore_ascii_case("RAIL") {
                p.policy = MergePolicy::Rail;
                log.push("NCCL_NET_MERGE_POLICY set by environment to RAIL".into());
            } else if !v.eq_ignore_ascii_case("ALL") {
                log.push(format!("NCCL_NET_MERGE_POLICY: unknown value '{v}', defaulting to ALL"));
            }
        }
        (p, log)
    }
}

/// `kvConvertToInt(…, nicPathKvList)`: the first name that prefixes `s`, ignoring case.
pub fn parse_merge_level(s: &str) -> Option<PathType> {
    let up = s.trim().to_ascii_uppercase();
    let dict: Vec<(&str, Option<PathType>)> = NIC_PATH_KV.iter().map(|&(k, v)| (k, Some(v))).collect();
    kv_prefix(&up, &dict, None)
}

/// The plugin calls fusion makes (implemented by the runtime over its net plugin, and by
/// tests over a fake).
pub trait NetFusion {
    /// `maxDevsPerNic`: [`MAX_DEVS_PER_NIC`] for ncclNet v12+, [`MAX_DEVS_PER_NIC_V11`] before.
    fn max_devs_per_nic(&self) -> usize;
    /// `makeVDevice(&d, {ndevs, devs})`: the new device's index.
    fn make_vdevice(&mut self, devs: &[i32]) -> Result<usize, String>;
    /// `devices()`: physical and virtual devices.
    fn devices(&mut self) -> Result<usize, String>;
    /// `getProperties(dev)`.
    fn properties(&mut self, dev: usize) -> Result<Properties, String>;
}

fn fusion_err(e: String) -> TopoError {
    TopoError::Topology(format!("NIC fusion: {e}"))
}

/// `parseStringList` + `matchIfList(name, port, …, exact=1)`: `name[:port]` entries.
fn parse_group(s: &str) -> Vec<(String, i32)> {
    s.split(',')
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once(':') {
            Some((n, p)) => (n.to_string(), p.trim().parse().unwrap_or(-1)),
            None => (e.to_string(), -1),
        })
        .collect()
}

/// What one fusion pass did: the groups handed to `makeVDevice`, in call order, with the
/// index each got (`Err` = the plugin refused).
pub type Calls = Vec<(Vec<i32>, Result<usize, String>)>;

/// `ncclTopoMakeVnic`: fuses `devs` (groups of one are skipped: `Ok(None)`).
fn make_vnic(devs: &[i32], fusion: &mut dyn NetFusion, log: &mut Vec<String>) -> Result<Option<usize>, String> {
    let max = fusion.max_devs_per_nic();
    if devs.len() > max {
        return Err(format!(
            "TOPO/NET : Tried to merge too many NICs. {} > {max}",
            devs.len()
        ));
    }
    if devs.len() == 1 {
        return Ok(None);
    }
    match fusion.make_vdevice(devs) {
        Ok(d) => {
            log.push(format!("TOPO/NET : Made vNic {d}"));
            Ok(Some(d))
        }
        Err(e) => {
            let mut shown = [-1i32; 4];
            for (s, d) in shown.iter_mut().zip(devs) {
                *s = *d;
            }
            log.push(format!(
                "TOPO/NET : Tried merging multiple devices together and failed. vProps={{ndevs={}, devs=[{} {} {} {}]}}. Set NCCL_NET_MERGE_LEVEL=LOC to disable NIC fusion. ({e})",
                devs.len(),
                shown[0],
                shown[1],
                shown[2],
                shown[3]
            ));
            Err(e)
        }
    }
}

/// `ncclTopoForceMerge`: each `;`-group of `NCCL_NET_FORCE_MERGE` must match exactly as
/// many devices (by exact name and, when given, port) as it names, and fuse.
pub fn force_merge(
    spec: &str,
    props: &[Properties],
    placed: &mut [bool],
    fusion: &mut dyn NetFusion,
    log: &mut Vec<String>,
) -> Result<(), TopoError> {
    log.push(format!(
        "TOPO/NET : Force-fusing NICs using NCCL_NET_FORCE_MERGE={spec}"
    ));
    for group in spec.split(';').filter(|g| !g.is_empty()) {
        let want = parse_group(group);
        if want.is_empty() {
            log.push(format!(
                "NET/IB : Invalid NCCL_NET_FORCE_MERGE specified {spec}. Couldn't parse substring {group}. Please provide a semicolon-delimited list of comma-delimited NIC groups."
            ));
            continue;
        }
        let devs: Vec<i32> = props
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                want.iter()
                    .any(|(n, port)| *n == p.name && (*port == -1 || *port == p.port))
            })
            .map(|(d, _)| d as i32)
            .collect();
        if devs.len() != want.len() {
            return Err(fusion_err(format!(
                "TOPO/NET : Only matched {} devices, {} requested from {group}",
                devs.len(),
                want.len()
            )));
        }
        let max = fusion.max_devs_per_nic();
        if devs.len() > max {
            return Err(fusion_err(format!(
                "Specified fused NIC {group} which has too many devices ({}). Max {max}",
                devs.len()
            )));
        }
        match make_vnic(&devs, fusion, log) {
            Ok(_) => {
                for &d in &devs {
                    placed[d as usize] = true;
                }
            }
            Err(e) => {
                return Err(fusion_err(format!(
                    "TOPO/NET : Could not force merge NICs {group}. Please specify a valid NCCL_NET_FORCE_MERGE string. ({e})"
                )));
            }
        }
    }
    Ok(())
}

/// `ncclTopoAutoMerge` over a precomputed `n`×`n` matrix of path types between the
/// physical devices (`paths[i*n + j]`, [`xml_path`]).
pub fn auto_merge(
    paths: &mut [PathType],
    props: &[Properties],
    placed: &mut [bool],
    params: &FusionParams,
    fusion: &mut dyn NetFusion,
    log: &mut Vec<String>,
) -> Result<(), TopoError> {
    let n = props.len();
    let max = fusion.max_devs_per_nic();
    let mut i = 0;
    while i < n {
        if placed[i] {
            i += 1;
            continue;
        }
        let mut devs = vec![i as i32];
        placed[i] = true;
        for j in 0..n {
            let rail_ok = params.policy != MergePolicy::Rail
                || (props[i].rail_id != ID_UNDEF && props[i].rail_id == props[j].rail_id);
            if paths[i * n + j] <= params.merge_level && !placed[j] && j != i && rail_ok {
                devs.push(j as i32);
                placed[j] = true;
            }
            if devs.len() == max {
                break;
            }
        }
        if make_vnic(&devs, fusion, log).is_err() {
            log.push("Marking physical devices as unplaced, increasing distance and restarting search.".into());
            placed[i] = false;
            for &d in &devs[1..] {
                let d = d as usize;
                placed[d] = false;
                paths[i * n + d] = PathType::Dis;
                paths[d * n + i] = PathType::Dis;
            }
            // NCCL sets i = 0 and the loop's increment then resumes at 1.
            i = 1;
            continue;
        }
        i += 1;
    }
    Ok(())
}

/// The element at `p` (a path of child indices from the root).
fn node<'a>(root: &'a XmlNode, p: &[usize]) -> &'a XmlNode {
    root.at_path(p)
}

/// `ncclTopoCheckPix`: every net's `<nic>` sits in a `<pci>` directly under `common`.
fn check_pix(root: &XmlNode, common: &[usize], nets: &[Vec<usize>]) -> bool {
    if node(root, common).attr("busid").is_none() {
        return false;
    }
    for n in nets {
        if node(root, n).name != "net" {
            continue;
        }
        if n.len() < 2 || node(root, &n[..n.len() - 1]).name != "nic" {
            continue;
        }
        let pci = &n[..n.len() - 2];
        if node(root, pci).name == "pci" && (pci.is_empty() || &pci[..pci.len() - 1] != common) {
            return false;
        }
    }
    true
}

/// `ncclFindFirstPciParent`: the nearest `<pci>` at or above `p`, or `p` itself when
/// there is none below `<system>`.
fn first_pci_parent(root: &XmlNode, p: &[usize]) -> Vec<usize> {
    let mut q = p.to_vec();
    while node(root, &q).name != "pci" {
        if q.is_empty() {
            return p.to_vec();
        }
        q.pop();
        if node(root, &q).name == "system" {
            return p.to_vec();
        }
    }
    q
}

/// `ncclTopoGetPath` over XML elements (paths of child indices from the `<system>`
/// root): the path type between them and their common parent (its nearest `<pci>`).
/// `PORT` when the first elements where they part are PCI functions whose bus ids differ
/// only in their last character (ports of one multi-function device).
pub fn xml_path(root: &XmlNode, nets: &[Vec<usize>]) -> (PathType, Vec<usize>) {
    if nets.len() == 1 {
        return (PathType::Loc, first_pci_parent(root, &nets[0]));
    }
    // Depth of the deepest element all share.
    let mut depth = 0;
    while let Some(&c) = nets[0].get(depth)
        && nets.iter().all(|n| n.get(depth) == Some(&c))
    {
        depth += 1;
    }
    let common = nets[0][..depth].to_vec();
    // The multi-port check on the first elements below `common`.
    if let Some(first) = nets[0].get(depth)
        && let Some(bus0) = node(root, &[&common[..], &[*first]].concat()).attr("busid")
    {
        let multi = nets[1..].iter().all(|n| match n.get(depth) {
            None => true,
            Some(&k) => match node(root, &[&common[..], &[k]].concat()).attr("busid") {
                Some(b) => {
                    b.len() == bus0.len() && b[..b.len().saturating_sub(1)] == bus0[..bus0.len().saturating_sub(1)]
                }
                None => false,
            },
        });
        if multi {
            return (PATH_PORT, first_pci_parent(root, &common));
        }
    }
    let ty = match node(root, &common).name.as_str() {
        "system" => PathType::Sys,
        "cpu" => PathType::Phb,
        "nic" | "net" => PATH_PORT,
        _ if check_pix(root, &common, nets) => PathType::Pix,
        _ => PathType::Pxb,
    };
    (ty, first_pci_parent(root, &common))
}

fn net_path(root: &XmlNode, name: &str) -> Option<Vec<usize>> {
    root.path_to(&|n: &XmlNode| n.name == "net" && n.attr("name") == Some(name))
}

/// `ncclTopoMakePciParent`: a copy of the first member's `<pci>` with a bus id not yet
/// in the XML (the original's plus 1, 2, … up to 100 tries), added under `parent`.
fn make_pci_parent(root: &mut XmlNode, parent: &[usize], first_net: &[usize]) -> Result<Vec<usize>, TopoError> {
    let name = node(root, first_net).attr("name").unwrap_or("?").to_string();
    let no_bus = || TopoError::Topology(format!("TOPO/NET : Can't find busId of child 0 {name}"));
    if first_net.len() < 2 {
        return Err(no_bus());
    }
    let pci = node(root, &first_net[..first_net.len() - 2]).clone();
    if pci.name != "pci" {
        return Err(no_bus());
    }
    let orig = pci.attr("busid").ok_or_else(no_bus)?;
    let mut id = bus_id_to_i64(orig).ok_or_else(no_bus)?;
    for _ in 0..100 {
        id += 1;
        let bus = i64_to_bus_id(id);
        if root.find_kv("pci", "busid", &bus).is_none() {
            let mut n = XmlNode::new("pci");
            n.attrs = pci.attrs.clone();
            n.set_attr("busid", &bus);
            let p = root.at_path_mut(parent);
            p.subs.push(n);
            let mut out = parent.to_vec();
            out.push(p.subs.len() - 1);
            return Ok(out);
        }
    }
    Err(TopoError::Topology(
        "TOPO/NET : Couldn't generate unique busId after 100 tries".into(),
    ))
}

/// `ncclTopoFindLinkWidthRec`: whether `p` is or holds one of `nets`, and the PCI
/// `link_width` that reaches them through it (a `<pci>`'s own width caps the sum of its
/// children's; the nearest `<pci>` above a net lends its width when none below has one).
fn link_width_rec(root: &XmlNode, p: &mut Vec<usize>, nets: &[Vec<usize>]) -> (bool, i64) {
    let n = node(root, p);
    let mine = if n.name == "pci" {
        n.int_or("link_width", 0).unwrap_or(0)
    } else {
        0
    };
    let mut found = nets.iter().any(|m| m == p);
    let mut total = 0;
    for k in 0..n.subs.len() {
        p.push(k);
        let (f, w) = link_width_rec(root, p, nets);
        p.pop();
        if f {
            found = true;
            total += w;
        }
    }
    let width = match (found, total) {
        (false, _) => 0,
        (true, 0) => mine,
        (true, t) if mine > 0 => mine.min(t),
        (true, t) => t,
    };
    (found, width)
}

/// `ncclTopoFindLinkWidth`: the summed `link_width` of the branches under `parent`
/// that hold the fused devices.
fn aggregate_link_width(root: &XmlNode, parent: &[usize], nets: &[Vec<usize>]) -> i64 {
    let mut p = parent.to_vec();
    let mut sum = 0;
    for k in 0..node(root, parent).subs.len() {
        p.push(k);
        let (f, w) = link_width_rec(root, &mut p, nets);
        p.pop();
        if f {
            sum += w;
        }
    }
    sum
}

/// `ncclTopoGetVNicParent`: where a fused device goes, from its members' `<net>`s. For
/// members `PIX`, `PXB` or `PHB` apart, the PCI functions from the new parent up to
/// the members' common parent get the members' summed `link_width`, so the fused
/// device's PCI path carries what its members' did together.
pub fn vnic_parent(root: &mut XmlNode, members: &[Vec<usize>]) -> Result<Vec<usize>, TopoError> {
    let (ty, common) = xml_path(root, members);
    let width = if matches!(ty, PathType::Phb | PathType::Pxb | PathType::Pix) {
        aggregate_link_width(root, &common, members)
    } else {
        0
    };
    let p = node(root, &common);
    let parent = match p.name.as_str() {
        "pci" if p.attr("class") == Some(PCI_BRIDGE_DEVICE_CLASS) => make_pci_parent(root, &common, &members[0])?,
        "cpu" => make_pci_parent(root, &common, &members[0])?,
        "system" => {
            return Err(TopoError::Topology(
                "Fusing NET devices from different NUMA domains is not supported.".into(),
            ));
        }
        _ => common.clone(),
    };
    if width > 0 {
        let mut q = parent.clone();
        loop {
            let n = root.at_path_mut(&q);
            if n.name == "pci" {
                n.set_attr("link_width", width);
            }
            if q == common || q.is_empty() {
                break;
            }
            q.pop();
        }
    }
    Ok(parent)
}

/// Per process and plugin, the physical and virtual device counts once fusion ran
/// (NCCL's `ncclNetGetDevCount` / `ncclNetSetVirtDevCount` state): virtual devices are
/// made once; later communicators reuse them.
static DEV_COUNTS: Mutex<Option<HashMap<String, (usize, usize)>>> = Mutex::new(None);

/// The recorded (physical, virtual) counts of the plugin identified by `key`.
pub fn dev_counts(key: &str) -> Option<(usize, usize)> {
    let g = DEV_COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    g.as_ref().and_then(|m| m.get(key).copied())
}

/// Records the counts of the plugin identified by `key` after its fusion pass.
pub fn set_dev_counts(key: &str, nphys: usize, nvirt: usize) {
    let mut g = DEV_COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    g.get_or_insert_with(HashMap::new)
        .insert(key.to_string(), (nphys, nvirt));
}

/// `ncclTopoProcessNet`'s fusion part, after the `phys` devices were added to `root`:
/// makes the virtual devices when `made` is `None` (the first communicator of this plugin
/// in the process), then puts every virtual device in the XML in place of its members.
/// Returns the number of virtual devices and the fused devices' properties.
///
/// Errors: a physical device missing from the XML, a failed forced merge, a plugin call
/// failing, a fused device whose members are not in the XML or span NUMA domains.
#[allow(clippy::too_many_arguments)]
pub fn process_net(
    root: &mut XmlNode,
    phys: &[Properties],
    made: Option<usize>,
    params: &FusionParams,
    fusion: &mut dyn NetFusion,
    facts: &dyn HostFacts,
    hash: u64,
    log: &mut Vec<String>,
) -> Result<(usize, Vec<Properties>), TopoError> {
    let nphys = phys.len();
    let nvirt = match made {
        Some(v) => v,
        None => {
            if nphys > 0 {
                let nets = phys
                    .iter()
                    .map(|p| {
                        net_path(root, &p.name).ok_or_else(|| {
                            TopoError::Topology(format!("NIC fusion: net device '{}' is not in the topology", p.name))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let mut placed = vec![false; nphys];
                if let Some(spec) = &params.force_merge {
                    force_merge(spec, phys, &mut placed, fusion, log)?;
                }
                let mut paths = Vec::with_capacity(nphys * nphys);
                for a in &nets {
                    for b in &nets {
                        paths.push(xml_path(root, &[a.clone(), b.clone()]).0);
                    }
                }
                auto_merge(&mut paths, phys, &mut placed, params, fusion, log)?;
            }
            fusion.devices().map_err(fusion_err)?.saturating_sub(nphys)
        }
    };
    let mut vprops = Vec::with_capacity(nvirt);
    for v in nphys..nphys + nvirt {
        vprops.push(fusion.properties(v).map_err(fusion_err)?);
    }
    // ncclTopoUpdateVNics: the members leave the graph.
    for vp in &vprops {
        for &m in &vp.vdevs {
            let name = match phys.get(m as usize) {
                Some(p) => p.name.clone(),
                None => fusion.properties(m as usize).map_err(fusion_err)?.name,
            };
            if let Some(p) = net_path(root, &name) {
                let n = root.at_path_mut(&p);
                n.set_attr("net", 0);
                n.set_attr("keep", 0);
            }
        }
    }
    // ncclTopoPopulateNics(virtual=true).
    for (k, vp) in vprops.iter().enumerate() {
        let dev = nphys + k;
        let parent = if net_path(root, &vp.name).is_none() {
            let members = vp
                .vdevs
                .iter()
                .map(|&m| {
                    let name = phys.get(m as usize).map(|p| p.name.as_str()).unwrap_or("?");
                    net_path(root, name).ok_or_else(|| {
                        TopoError::Topology(format!(
                            "NIC fusion: member {m} ('{name}') of virtual device {dev} is not in the topology"
                        ))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if members.is_empty() {
                return Err(TopoError::Topology(format!(
                    "NIC fusion: virtual device {dev} ('{}') lists no member devices in vProps",
                    vp.name
                )));
            }
            Some(vnic_parent(root, &members)?)
        } else {
            None
        };
        fill::fill_net_under(root, &super::detect::net_facts(vp), dev, facts, hash, parent)?;
        log.push(format!(
            "ncclTopoPopulateNics : Filled {} in topo with pciPath={} net=1 keep=1 rail={} plane={} (vNic of {:?})",
            vp.name,
            vp.pci_path.as_deref().unwrap_or("(null)"),
            vp.rail_id,
            vp.plane_id,
            vp.vdevs
        ));
    }
    Ok((nvirt, vprops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topo::detect::Sysfs;

    /// A plugin double: `phys` physical devices; vdevices sum speeds and join names with
    /// '+', as NCCL's IB plugin; `refuse` lists groups it refuses.
    struct Fake {
        phys: Vec<Properties>,
        vdevs: Vec<Vec<i32>>,
        calls: Vec<Vec<i32>>,
        refuse: Vec<Vec<i32>>,
        max: usize,
    }

    impl Fake {
        fn new(names: &[&str]) -> Fake {
            let phys = names
                .iter()
                .enumerate()
                .map(|(i, n)| Properties {
                    name: n.to_string(),
                    guid: 0x100 + i as u64,
                    speed: 10_000,
                    vdevs: vec![i as i32],
                    ..Properties::default()
                })
                .collect();
            Fake {
                phys,
                vdevs: Vec::new(),
                calls: Vec::new(),
                refuse: Vec::new(),
                max: MAX_DEVS_PER_NIC,
            }
        }
    }

    impl NetFusion for Fake {
        fn max_devs_per_nic(&self) -> usize {
            self.max
        }
        fn make_vdevice(&mut self, devs: &[i32]) -> Result<usize, String> {
            self.calls.push(devs.to_vec());
            if self.refuse.iter().any(|r| r == devs) {
                return Err("refused".into());
            }
            self.vdevs.push(devs.to_vec());
            Ok(self.phys.len() + self.vdevs.len() - 1)
        }
        fn devices(&mut self) -> Result<usize, String> {
            Ok(self.phys.len() + self.vdevs.len())
        }
        fn properties(&mut self, dev: usize) -> Result<Properties, String> {
            if let Some(p) = self.phys.get(dev) {
                return Ok(p.clone());
            }
            let m = self.vdevs.get(dev - self.phys.len()).ok_or("no such device")?;
            let mut p = self.phys[m[0] as usize].clone();
            p.name = m
                .iter()
                .map(|&d| self.phys[d as usize].name.clone())
                .collect::<Vec<_>>()
                .join("+");
            p.speed = m.iter().map(|&d| self.phys[d as usize].speed).sum();
            p.vdevs = m.clone();
            Ok(p)
        }
    }

    fn pci(bus: &str, class: &str) -> XmlNode {
        XmlNode::new("pci")
            .with("busid", bus)
            .with("class", class)
            .with("link_speed", "16.0 GT/s PCIe")
            .with("link_width", 16)
    }
    fn nic(nets: &[(&str, usize)]) -> XmlNode {
        let mut n = XmlNode::new("nic");
        for (name, dev) in nets {
            n.subs.push(
                XmlNode::new("net")
                    .with("name", name)
                    .with("dev", dev)
                    .with("speed", 10000)
                    .with("net", 1),
            );
        }
        n
    }
    fn cpu(numa: i64) -> XmlNode {
        XmlNode::new("cpu").with("numaid", numa).with("host_hash", "0x1")
    }

    /// Two CPUs; under CPU 0 a switch with a dual-port NIC (mlx5_0, mlx5_1 at
    /// 0000:11:00.0/.1) and a second NIC (mlx5_2 at 0000:12:00.0); under CPU 1 mlx5_3.
    fn two_socket() -> XmlNode {
        let mut sw = pci("0000:10:00.0", "0x060400");
        let mut p0 = pci("0000:11:00.0", "0x020000");
        p0.subs.push(nic(&[("mlx5_0", 0)]));
        let mut p1 = pci("0000:11:00.1", "0x020000");
        p1.subs.push(nic(&[("mlx5_1", 1)]));
        let mut p2 = pci("0000:12:00.0", "0x020000");
        p2.subs.push(nic(&[("mlx5_2", 2)]));
        sw.subs.extend([p0, p1, p2]);
        let mut c0 = cpu(0);
        c0.subs.push(sw);
        let mut p3 = pci("0000:81:00.0", "0x020000");
        p3.subs.push(nic(&[("mlx5_3", 3)]));
        let mut c1 = cpu(1);
        c1.subs.push(p3);
        let mut root = XmlNode::new("system").with("version", 1);
        root.subs.extend([c0, c1]);
        root
    }

    fn run(root: &mut XmlNode, fake: &mut Fake, params: &FusionParams) -> Result<(usize, Vec<String>), TopoError> {
        let phys = fake.phys.clone();
        let mut log = Vec::new();
        let (n, _) = process_net(root, &phys, None, params, fake, &Sysfs::default(), 1, &mut log)?;
        Ok((n, log))
    }

    fn net<'a>(root: &'a XmlNode, name: &str) -> &'a XmlNode {
        root.find_kv("net", "name", name)
            .unwrap_or_else(|| panic!("no net {name}"))
    }

    #[test]
    fn merge_level_grammar_follows_nic_path_kv_list() {
        assert_eq!(parse_merge_level("PORT"), Some(PATH_PORT));
        assert_eq!(parse_merge_level("loc"), Some(PathType::Loc));
        assert_eq!(parse_merge_level("PXB"), Some(PathType::Pxb));
        assert_eq!(parse_merge_level("SYS"), Some(PathType::Sys));
        assert_eq!(parse_merge_level("NVL"), None);
        let (p, log) = FusionParams::from_lookup(&|k| (k == "NCCL_NET_MERGE_LEVEL").then(|| "bogus".to_string()));
        assert_eq!(p.merge_level, PathType::Loc);
        assert!(log[0].contains("unknown value"), "{log:?}");
        let (p, _) = FusionParams::from_lookup(&|_| None);
        assert_eq!(p, FusionParams::default());
        assert_eq!(level_name(p.merge_level), "PORT");
    }

    #[test]
    fn path_types_between_net_devices() {
        let root = two_socket();
        let p = |a: &str, b: &str| xml_path(&root, &[net_path(&root, a).unwrap(), net_path(&root, b).unwrap()]).0;
        // Functions .0 and .1 of one device: ports of one NIC.
        assert_eq!(p("mlx5_0", "mlx5_1"), PATH_PORT);
        // Two devices behind one switch.
        assert_eq!(p("mlx5_0", "mlx5_2"), PathType::Pix);
        // Different CPUs.
        assert_eq!(p("mlx5_0", "mlx5_3"), PathType::Sys);
        assert_eq!(xml_path(&root, &[net_path(&root, "mlx5_3").unwrap()]).0, PathType::Loc);
    }

    #[test]
    fn default_level_fuses_the_ports_of_one_nic_only() {
        let mut root = two_socket();
        let mut fake = Fake::new(&["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
        let (nvirt, log) = run(&mut root, &mut fake, &FusionParams::default()).unwrap();
        assert_eq!(fake.calls, vec![vec![0, 1]]);
        assert_eq!(nvirt, 1);
        assert!(log.iter().any(|l| l == "TOPO/NET : Made vNic 4"), "{log:?}");
        // The members leave the graph; the fused device takes index 4 and their speed.
        for m in ["mlx5_0", "mlx5_1"] {
            assert_eq!(net(&root, m).attr("net"), Some("0"));
            assert_eq!(net(&root, m).attr("keep"), Some("0"));
        }
        let v = net(&root, "mlx5_0+mlx5_1");
        assert_eq!(v.attr("dev"), Some("4"));
        assert_eq!(v.attr("speed"), Some("20000"));
        assert_eq!(net(&root, "mlx5_2").attr("net"), Some("1"));
        // Its parent is the switch, a bridge: a made-up PCI function next to the members'.
        let vp = net_path(&root, "mlx5_0+mlx5_1").unwrap();
        let parent = root.at_path(&vp[..vp.len() - 2]);
        assert_eq!(parent.name, "pci");
        assert_eq!(parent.attr("busid"), Some("0000:11:00.2"));
        assert_eq!(root.at_path(&vp[..vp.len() - 3]).attr("busid"), Some("0000:10:00.0"));
    }

    #[test]
    fn wider_levels_fuse_more_and_respect_max_devs_per_nic() {
        let mut root = two_socket();
        let mut fake = Fake::new(&["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
        let params = FusionParams {
            merge_level: PathType::Pxb,
            ..FusionParams::default()
        };
        run(&mut root, &mut fake, &params).unwrap();
        assert_eq!(fake.calls, vec![vec![0, 1, 2]]);
        // Never across NUMA domains below SYS; at most maxDevsPerNic per group.
        let mut root = two_socket();
        let mut fake = Fake::new(&["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
        fake.max = 2;
        run(&mut root, &mut fake, &params).unwrap();
        assert_eq!(fake.calls, vec![vec![0, 1]]);
        // LOC: no fusion at all.
        let mut root = two_socket();
        let mut fake = Fake::new(&["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
        let loc = FusionParams {
            merge_level: PathType::Loc,
            ..FusionParams::default()
        };
        assert_eq!(run(&mut root, &mut fake, &loc).unwrap().0, 0);
        assert!(fake.calls.is_empty());
    }

    #[test]
    fn a_refused_fusion_restarts_the_search_with_those_devices_apart() {
        let mut root = two_socket();
        let mut fake = Fake::new(&["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
        fake.refuse = vec![vec![0, 1, 2]];
        let params = FusionParams {
            merge_level: PathType::Pxb,
            ..FusionParams::default()
        };
        let (nvirt, log) = run(&mut root, &mut fake, &params).unwrap();
        // Refused {0,1,2}; NCCL restarts at device 1 (its `i = 0` then `i++`), which now
        // fuses with 2 (both are DIS from 0 only).
        assert_eq!(fake.calls, vec![vec![0, 1, 2], vec![1, 2]]);
        assert_eq!(nvirt, 1);
        assert!(
            log.iter()
                .any(|l| l.contains("Set NCCL_NET_MERGE_LEVEL=LOC to disable NIC fusion"))
        );
        assert_eq!(net(&root, "mlx5_0").attr("net"), Some("1"));
    }

    #[test]
    fn force_merge_fuses_named_groups_before_the_automatic_pass() {
        let mut root = two_socket();
        let mut fake = Fake::new(&["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
        let params = FusionParams {
            force_merge: Some("mlx5_0,mlx5_2;mlx5_3".into()),
            ..FusionParams::default()
        };
        let (nvirt, log) = run(&mut root, &mut fake, &params).unwrap();
        // mlx5_0+mlx5_2 forced; mlx5_3 alone is no vNic; mlx5_1 has nothing left at PORT.
        assert_eq!(fake.calls, vec![vec![0, 2]]);
        assert_eq!(nvirt, 1);
        assert!(log[0].starts_with("TOPO/NET : Force-fusing NICs using NCCL_NET_FORCE_MERGE=mlx5_0,mlx5_2;mlx5_3"));
        // A group naming a device that does not exist is an error (ncclInvalidUsage).
        let mut root = two_socket();
        let mut fake = Fake::new(&["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
        let bad = FusionParams {
            force_merge: Some("mlx5_0,eth9".into()),
            ..FusionParams::default()
        };
        let e = run(&mut root, &mut fake, &bad).unwrap_err().to_string();
        assert!(
            e.contains("Only matched 1 devices, 2 requested from mlx5_0,eth9"),
            "{e}"
        );
        // Fusing across NUMA domains is refused when the vNic is placed.
        let mut root = two_socket();
        let mut fake = Fake::new(&["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
        let numa = FusionParams {
            force_merge: Some("mlx5_2,mlx5_3".into()),
            merge_level: PathType::Loc,
            ..FusionParams::default()
        };
        let e = run(&mut root, &mut fake, &numa).unwrap_err().to_string();
        assert!(e.contains("different NUMA domains"), "{e}");
    }

    #[test]
    fn nics_on_two_root_ports_fuse_under_a_made_up_function_of_their_cpu() {
        // mlx5_0 and mlx5_1 each on its own root port of CPU 0: PHB apart.
        let mut c0 = cpu(0);
        for (k, bus) in ["0000:21:00.0", "0000:31:00.0"].iter().enumerate() {
            let mut p = pci(bus, "0x020000");
            p.subs.push(nic(&[(&format!("mlx5_{k}"), k)]));
            c0.subs.push(p);
        }
        let mut root = XmlNode::new("system").with("version", 1);
        root.subs.push(c0);
        let p = |r: &XmlNode| xml_path(r, &[net_path(r, "mlx5_0").unwrap(), net_path(r, "mlx5_1").unwrap()]).0;
        assert_eq!(p(&root), PathType::Phb);
        let mut fake = Fake::new(&["mlx5_0", "mlx5_1"]);
        // PORT (the default) leaves them apart; PHB fuses them.
        assert_eq!(
            run(&mut root.clone(), &mut fake, &FusionParams::default()).unwrap().0,
            0
        );
        let phb = FusionParams {
            merge_level: PathType::Phb,
            ..FusionParams::default()
        };
        let mut fake = Fake::new(&["mlx5_0", "mlx5_1"]);
        assert_eq!(run(&mut root, &mut fake, &phb).unwrap().0, 1);
        let vp = net_path(&root, "mlx5_0+mlx5_1").unwrap();
        assert_eq!(vp.len(), 4, "cpu > made-up pci > nic > net: {vp:?}");
        let made = root.at_path(&vp[..2]);
        assert_eq!((made.name.as_str(), made.attr("busid")), ("pci", Some("0000:21:00.1")));
        assert_eq!(made.attr("class"), Some("0x020000"));
        // ncclTopoFindLinkWidth: the made-up function carries both x16 links.
        assert_eq!(made.attr("link_width"), Some("32"));
    }

    #[test]
    fn interfaces_without_pci_fuse_into_their_shared_nic() {
        // Two virtual interfaces, both attached to the first CPU's <nic> (fill_net's rule).
        let mut c = cpu(0);
        c.subs.push(nic(&[("veth0", 0), ("veth1", 1)]));
        let mut root = XmlNode::new("system").with("version", 1);
        root.subs.push(c);
        let mut fake = Fake::new(&["veth0", "veth1"]);
        let (nvirt, _) = run(&mut root, &mut fake, &FusionParams::default()).unwrap();
        assert_eq!(nvirt, 1);
        let vp = net_path(&root, "veth0+veth1").unwrap();
        assert_eq!(root.at_path(&vp[..vp.len() - 1]).name, "nic");
        assert_eq!(vp.len(), 3, "the fused net joins the members' <nic>: {vp:?}");
        // A second communicator reuses the virtual device without fusing again.
        let mut c = cpu(0);
        c.subs.push(nic(&[("veth0", 0), ("veth1", 1)]));
        let mut again = XmlNode::new("system").with("version", 1);
        again.subs.push(c);
        let phys = fake.phys.clone();
        let mut log = Vec::new();
        let (n, v) = process_net(
            &mut again,
            &phys,
            Some(1),
            &FusionParams::default(),
            &mut fake,
            &Sysfs::default(),
            1,
            &mut log,
        )
        .unwrap();
        assert_eq!((n, v[0].vdevs.clone()), (1, vec![0, 1]));
        assert_eq!(fake.calls.len(), 1);
        assert_eq!(net(&again, "veth0+veth1").attr("dev"), Some("2"));
    }

    #[test]
    fn the_system_uses_the_fused_device_only() {
        let mut c = cpu(0)
            .with("arch", "x86_64")
            .with("vendor", "GenuineIntel")
            .with("familyid", 6)
            .with("modelid", 85);
        c.subs.push(nic(&[("veth0", 0), ("veth1", 1)]));
        let mut root = XmlNode::new("system").with("version", 1);
        root.subs.push(c);
        let mut fake = Fake::new(&["veth0", "veth1"]);
        run(&mut root, &mut fake, &FusionParams::default()).unwrap();
        let sys = crate::topo::system::from_xml(&root, 1).unwrap();
        let nets: Vec<(i32, String)> = sys
            .of(crate::topo::NodeType::Net)
            .iter()
            .map(|n| (n.net().dev, n.net().name.clone()))
            .collect();
        assert_eq!(nets, vec![(2, "veth0+veth1".to_string())]);
        assert!((sys.of(crate::topo::NodeType::Net)[0].net().bw - 2.5).abs() < 1e-6);
    }
}
