//! Path types and bandwidths on small hand-made systems. Every expected value is derived
//! by hand from the reference (`docs/reference/nccl-graph-tuning.md` §1.2–§1.9) in the comment beside it.

use ferroccl::topo::paths::{self, compute_paths, get_local, intermediate_rank, local_net, search_init};
use ferroccl::topo::system::{self, NodeRef, inter_cpu_bw};
use ferroccl::topo::types::{cpu_arch, cpu_model, cpu_vendor};
use ferroccl::topo::xml::{self, Schema};
use ferroccl::topo::{NodeType, PathType, System, TopoParams};

fn build(text: &str, params: &TopoParams) -> System {
    let x = xml::parse(text, Schema::Topology, "test").unwrap();
    let mut s = system::from_xml(&x, 0).unwrap();
    compute_paths(&mut s, params).unwrap();
    s
}

/// (type, hops, bw) of the path from GPU `a` to node `b` of `ty`.
fn p(s: &System, a: usize, ty: NodeType, b: usize) -> (PathType, usize, f32) {
    let x = s.path(NodeRef::new(NodeType::Gpu, a), ty, b);
    (x.ty, x.count(), x.bw)
}

fn gpu(bus: &str, dev: u32, link: &str) -> String {
    format!(r#"<pci busid="{bus}" class="0x030200" {link}><gpu dev="{dev}" sm="80" rank="{dev}" gdr="1"/></pci>"#)
}

const GEN4: &str = r#"link_speed="16 GT/s" link_width="16""#; // 120 * 16 / 80 = 24 GB/s
const GEN3: &str = r#"link_speed="8 GT/s" link_width="16""#; // 60 * 16 / 80 = 12 GB/s
const GEN3X8: &str = r#"link_speed="8 GT/s" link_width="8""#; // 6 GB/s
const SKL: &str = r#"host_hash="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85""#; // 0x55: Skylake, 10 GB/s between sockets

/// Socket 0: a Gen4 switch with GPU0, GPU1 and a Gen3 NIC (100 Gb/s = 12.5 GB/s), and GPU2
/// on its own Gen3 x8 root port. Socket 1: GPU3 on a Gen4 root port.
fn system_a() -> String {
    format!(
        r#"<system version="1">
  <cpu numaid="0" {SKL}>
    <pci busid="0000:10:00.0" class="0x060400" {GEN4}>
      {g0}
      {g1}
      <pci busid="0000:13:00.0" class="0x020000" {GEN3}><nic><net name="n0" dev="0" speed="100000" gdr="1"/></nic></pci>
    </pci>
    {g2}
  </cpu>
  <cpu numaid="1" {SKL}>
    {g3}
  </cpu>
</system>"#,
        g0 = gpu("0000:11:00.0", 0, GEN4),
        g1 = gpu("0000:12:00.0", 1, GEN4),
        g2 = gpu("0000:20:00.0", 2, GEN3X8),
        g3 = gpu("0000:80:00.0", 3, GEN4),
    )
}

#[test]
fn pci_switch_root_port_and_socket_paths() {
    let s = build(&system_a(), &TopoParams::default());
    // GPU-DEV-PCI-DEV-GPU: PCI hops are PIX; bw = the Gen4 links.
    assert_eq!(p(&s, 0, NodeType::Gpu, 1), (PathType::Pix, 4, 24.0));
    // Through the root complex: GPU-DEV-PCI-CPU-DEV-GPU, PHB; the x8 link limits to 6.
    assert_eq!(p(&s, 0, NodeType::Gpu, 2), (PathType::Phb, 5, 6.0));
    // To the other socket: ...-CPU0-CPU1-DEV-GPU, SYS; Skylake QPI 10 GB/s.
    assert_eq!(p(&s, 0, NodeType::Gpu, 3), (PathType::Sys, 6, 10.0));
    assert_eq!(p(&s, 3, NodeType::Gpu, 2), (PathType::Sys, 5, 6.0));
    // GPU to the NIC under the same switch: GPU-DEV-PCI-NIC-NET, PIX (NET hop counts as
    // LOC); bw min(24, 12 (NIC link), 12.5 (100 Gb/s)).
    assert_eq!(p(&s, 0, NodeType::Net, 0), (PathType::Pix, 4, 12.0));
    assert_eq!(p(&s, 2, NodeType::Net, 0), (PathType::Phb, 5, 6.0));
    assert_eq!(p(&s, 3, NodeType::Net, 0), (PathType::Sys, 6, 10.0));
    // Local CPU of each GPU: its own socket.
    assert_eq!(p(&s, 0, NodeType::Cpu, 0), (PathType::Phb, 3, 24.0));
    assert_eq!(paths::local_cpu(&s, 3).unwrap(), 1);
    // ncclTopoSearchInit without network: maxBw = best DEV->DEV path (24), totalBw = the
    // largest DEV PCI link (24).
    let mut s2 = s.clone();
    search_init(&mut s2);
    assert_eq!((s2.max_bw, s2.total_bw), (24.0, 24.0));
    // The NIC's local GPUs: best bw 12 at PIX -> GPU0 and GPU1; GPU0 (dev 0) prefers it.
    let (gpus, ty) = get_local(&s, NodeRef::new(NodeType::Net, 0), NodeType::Gpu);
    assert_eq!((gpus, ty), (vec![0, 1], PathType::Pix));
    assert_eq!(paths::local_gpu(&s, 0, Default::default()).unwrap(), 0);
    // Printed as ncclTopoPrint does.
    let lines = system::print_system(&s);
    assert!(lines.contains(&"+ SYS[10.0] - CPU/0-1".to_string()), "{lines:#?}");
}

#[test]
fn p2p_disabled_routes_gpu_traffic_through_the_cpu() {
    // NCCL_P2P_LEVEL=LOC (or NCCL_P2P_DISABLE=1): GPU0->GPU1 becomes GPU0->CPU0 (3 hops,
    // PHB) + CPU0->GPU1 (3 hops), PHB, bw 24.
    let params = TopoParams {
        p2p_level: Some(PathType::Loc),
        ..TopoParams::default()
    };
    let s = build(&system_a(), &params);
    assert_eq!(p(&s, 0, NodeType::Gpu, 1), (PathType::Phb, 6, 24.0));
    let params = TopoParams::from_lookup(&|k| (k == "NCCL_P2P_DISABLE").then(|| "1".to_string())).unwrap();
    assert_eq!(params.p2p_level, Some(PathType::Loc));
}

#[test]
fn no_gpudirect_routes_nic_traffic_through_the_cpu() {
    // Same system, NIC without GDR: the PIX path (< PHB) is rerouted through GPU0's CPU,
    // both ways: GPU-DEV-PCI-CPU (3) + CPU-PCI-NIC-NET (3) = 6 hops, PHB.
    let text = system_a().replace(r#"speed="100000" gdr="1""#, r#"speed="100000" gdr="0""#);
    let s = build(&text, &TopoParams::default());
    assert_eq!(p(&s, 0, NodeType::Net, 0), (PathType::Phb, 6, 12.0));
    let back = s.path(NodeRef::new(NodeType::Net, 0), NodeType::Gpu, 0);
    assert_eq!((back.ty, back.count()), (PathType::Phb, 6));
}

fn nvl(target: &str, count: u32) -> String {
    format!(r#"<nvlink target="{target}" count="{count}" tclass="0x030200"/>"#)
}

/// Three sm 8.0 GPUs on root ports of one AMD socket; NVLinks 0-1 x2, 1-2 x1.
fn system_b() -> String {
    let g = |bus: &str, dev: u32, links: String| {
        format!(
            r#"<pci busid="{bus}" class="0x030200" {GEN4}><gpu dev="{dev}" sm="80" rank="{dev}" gdr="1">{links}</gpu></pci>"#
        )
    };
    format!(
        r#"<system version="1"><cpu numaid="0" host_hash="0" arch="x86_64" vendor="AuthenticAMD">{}{}{}</cpu></system>"#,
        g("0000:01:00.0", 0, nvl("0000:02:00.0", 2)),
        g("0000:02:00.0", 1, nvl("0000:01:00.0", 2) + &nvl("0000:03:00.0", 1)),
        g("0000:03:00.0", 2, nvl("0000:02:00.0", 1)),
    )
}

#[test]
fn nvlink_and_nvlink_through_a_relay_gpu() {
    let s = build(&system_b(), &TopoParams::default());
    // GPU-DEV-DEV-GPU over 2 links of 20 GB/s (sm 8.0).
    assert_eq!(p(&s, 0, NodeType::Gpu, 1), (PathType::Nvl, 3, 40.0));
    assert_eq!(p(&s, 1, NodeType::Gpu, 2), (PathType::Nvl, 3, 20.0));
    // GPU0 -> GPU2 through GPU1's NVLinks: NVB, GPU-DEV-DEV-DEV-GPU, bw min(40, 20).
    assert_eq!(p(&s, 0, NodeType::Gpu, 2), (PathType::Nvb, 4, 20.0));
    // The relay is rank 1: path.list[1] lands on DEV1 (ncclTopoCheckP2p's intermediateRank).
    let path = s.path(NodeRef::new(NodeType::Gpu, 0), NodeType::Gpu, 2);
    assert_eq!(s.links[path.links[1]].rem, NodeRef::new(NodeType::Dev, 1));
    assert!(!paths::split_nvlink(&s));
    // NCCL_NVB_DISABLE=1: only the PCI route is left, GPU-DEV-CPU-DEV-GPU, PHB at 24.
    let s = build(
        &system_b(),
        &TopoParams {
            nvb_disable: true,
            ..TopoParams::default()
        },
    );
    assert_eq!(p(&s, 0, NodeType::Gpu, 2), (PathType::Phb, 4, 24.0));
}

/// Two sm 9.0 GPUs on an NVSwitch (18 links each), each under its own Gen5 switch with a
/// 400 Gb/s NIC, both switches on one Intel Sapphire Rapids socket.
fn system_c() -> String {
    let gen5 = r#"link_speed="32.0 GT/s PCIe" link_width="16""#; // 48 GB/s
    let sw = |n: u32| {
        format!(
            r#"<pci busid="0000:{n}0:00.0" class="0x060400" {gen5}>
  <pci busid="0000:{n}1:00.0" class="0x030200" {gen5}><gpu dev="{d}" sm="90" rank="{d}" gdr="1"><nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/></gpu></pci>
  <pci busid="0000:{n}2:00.0" class="0x020700" {gen5}><nic><net name="ib{d}" dev="{d}" speed="400000" gdr="1" guid="0x{n}"/></nic></pci>
</pci>"#,
            d = n - 1
        )
    };
    format!(
        r#"<system version="1"><cpu numaid="0" host_hash="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">{}{}</cpu></system>"#,
        sw(1),
        sw(2)
    )
}

#[test]
fn nvswitch_and_pxn() {
    let s = build(&system_c(), &TopoParams::default());
    // GPU-DEV-NVS-DEV-GPU, 18 x 20.6 GB/s.
    let (ty, hops, bw) = p(&s, 0, NodeType::Gpu, 1);
    assert_eq!((ty, hops), (PathType::Nvl, 4));
    assert!((bw - 370.8).abs() < 1e-3, "{bw}");
    // Own NIC: PIX, min(48, 48, 50).
    assert_eq!(p(&s, 0, NodeType::Net, 0), (PathType::Pix, 4, 48.0));
    // The other NIC: the PCI route goes through the CPU (PHB), so NCCL uses PXN: GPU0 ->
    // NVSwitch -> GPU1 -> its NIC; 4 + 4 hops, type PXN, bw min(370.8, 48).
    assert_eq!(p(&s, 0, NodeType::Net, 1), (PathType::Pxn, 8, 48.0));
    assert_eq!(intermediate_rank(&s, 0, 1).unwrap(), 1);
    // The reverse (NIC -> GPU) is not rerouted: PHB through the CPU.
    let back = s.path(NodeRef::new(NodeType::Net, 1), NodeType::Gpu, 0);
    assert_eq!((back.ty, back.count()), (PathType::Phb, 6));
    // Each GPU's NIC: its own one.
    assert_eq!(local_net(&s, 0, 0, Default::default()).unwrap(), 0);
    assert_eq!(local_net(&s, 1, 0, Default::default()).unwrap(), 1);
    // NCCL_PXN_DISABLE=1 keeps the PHB route.
    let s = build(
        &system_c(),
        &TopoParams {
            pxn_disable: true,
            ..TopoParams::default()
        },
    );
    assert_eq!(p(&s, 0, NodeType::Net, 1), (PathType::Phb, 6, 48.0));
}

#[test]
fn two_gpus_share_two_nics_by_dev_index() {
    // ncclTopoGetLocalNet: GPUs dev 0 and 1 under one switch with two NICs: 2 nets, 2 GPUs,
    // one NIC each; index = dev % 2, bit-mirrored over 2 NICs (identity) -> GPU d uses NIC d.
    let text = format!(
        r#"<system version="1"><cpu numaid="0" {SKL}><pci busid="0000:10:00.0" class="0x060400" {GEN4}>{}{}
<pci busid="0000:13:00.0" class="0x020000" {GEN4}><nic><net name="a" dev="0" speed="200000" gdr="1" guid="0xa"/></nic></pci>
<pci busid="0000:14:00.0" class="0x020000" {GEN4}><nic><net name="b" dev="1" speed="200000" gdr="1" guid="0xb"/></nic></pci>
</pci></cpu></system>"#,
        gpu("0000:11:00.0", 0, GEN4),
        gpu("0000:12:00.0", 1, GEN4)
    );
    let s = build(&text, &TopoParams::default());
    for c in 0..4 {
        assert_eq!(local_net(&s, 0, c, Default::default()).unwrap(), 0);
        assert_eq!(local_net(&s, 1, c, Default::default()).unwrap(), 1);
    }
    // NCCL_NETDEVS_POLICY=ALL: every GPU cycles over both NICs by channel.
    let all = paths::NetDevsPolicy::All;
    assert_eq!(local_net(&s, 0, 1, all).unwrap(), 1);
    assert_eq!(local_net(&s, 1, 1, all).unwrap(), 0);
}

#[test]
fn inter_socket_bandwidth_by_cpu() {
    use cpu_arch::*;
    use cpu_vendor::*;
    assert_eq!(inter_cpu_bw(X86, INTEL, cpu_model::INTEL_BDW), 6.0);
    assert_eq!(inter_cpu_bw(X86, INTEL, cpu_model::INTEL_SKL), 10.0);
    assert_eq!(inter_cpu_bw(X86, INTEL, cpu_model::INTEL_SRP), 22.0);
    assert_eq!(inter_cpu_bw(X86, INTEL, cpu_model::INTEL_ERP), 40.0);
    assert_eq!(inter_cpu_bw(X86, AMD, -1), 16.0);
    assert_eq!(inter_cpu_bw(X86, ZHAOXIN, cpu_model::YONGFENG), 9.0);
    assert_eq!(inter_cpu_bw(X86, ZHAOXIN, -1), 6.0);
    assert_eq!(inter_cpu_bw(POWER, -1, -1), 32.0);
    assert_eq!(inter_cpu_bw(ARM, -1, -1), 6.0);
    assert_eq!(inter_cpu_bw(0, -1, -1), 5000.0);
    // Intel models from CPUID family/model, as ncclTopoAddCpu maps them.
    for (model, bw) in [("79", "6.0"), ("85", "10.0"), ("143", "22.0"), ("207", "40.0")] {
        let text = format!(
            r#"<system version="1"><cpu numaid="0" host_hash="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="{model}"/><cpu numaid="1" host_hash="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="{model}"/></system>"#
        );
        let s = build(&text, &TopoParams::default());
        let lines = system::print_system(&s);
        assert!(lines.contains(&format!("+ SYS[{bw}] - CPU/0-1")), "{model}: {lines:#?}");
    }
}
