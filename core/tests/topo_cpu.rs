//! CPU-process ranks: detection of this machine from sysfs with the socket plugin's real
//! devices (the plugin `.so` is loaded with dlopen, as the runtime does), and a copied-out
//! sysfs tree with two NUMA nodes and a NIC behind a PCIe switch.
//!
//! Build the plugin first: `cargo build -p ferroccl-net-socket`.

use std::path::{Path, PathBuf};

use ferroccl::graph::{CommTopology, plan};
use ferroccl::plugin::{LoadOptions, load_net_from};
use ferroccl::topo::detect::{self, CpuSet, Sysfs};
use ferroccl::topo::xml::{self, Schema};
use ferroccl::topo::{TopoParams, TopoRecord};
use ferroccl_plugin_api::sdk::Properties;

fn socket_plugin_devices() -> Vec<Properties> {
    let exe = std::env::current_exe().unwrap();
    let lib = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("libnccl_net_socket.so");
    assert!(
        lib.is_file(),
        "{} missing: cargo build -p ferroccl-net-socket",
        lib.display()
    );
    let opts = LoadOptions {
        in_tree: false,
        ..LoadOptions::default()
    };
    let net = load_net_from(&lib.to_string_lossy(), &opts).expect("socket plugin loads");
    let n = net.plugin.devices().expect("devices");
    (0..n).map(|d| net.plugin.properties(d).expect("properties")).collect()
}

/// Simulates the all-gather: every record goes through its wire encoding.
fn exchange(records: &[TopoRecord]) -> Vec<TopoRecord> {
    records
        .iter()
        .map(|r| TopoRecord::from_bytes(&r.to_bytes()).expect("record decodes"))
        .collect()
}

#[test]
fn this_machine_with_the_socket_plugin_gives_a_valid_single_node_result() {
    let nets = socket_plugin_devices();
    assert!(!nets.is_empty());
    let params = TopoParams::default();
    let nranks = 4;
    let records: Vec<TopoRecord> = (0..nranks)
        .map(|r| detect::detect(r, &nets, &params).expect("detection").0)
        .collect();
    let records = exchange(&records);
    let plans: Vec<_> = (0..nranks).map(|r| plan(r, &records, &params).expect("plan")).collect();
    let p0 = &plans[0];
    assert_eq!(p0.n_nodes, 1);
    assert_eq!(p0.local_ranks, nranks);
    assert!(!p0.channels.is_empty());
    for p in &plans {
        assert_eq!(p.channels.len(), p0.channels.len());
        for (c, ch) in p.channels.iter().enumerate() {
            // The same ring on every rank, holding every rank once.
            assert_eq!(ch.ring, p0.channels[c].ring);
            let mut v = ch.ring.ranks.clone();
            v.sort_unstable();
            assert_eq!(v, (0..nranks).collect::<Vec<_>>());
            // Single node: no network on any channel, trees are one chain.
            assert_eq!(ch.net_dev, None);
            assert!(ch.tree.down.len() <= 1);
        }
        assert!(p.p2p.iter().all(Vec::is_empty));
        assert!(p.graph_xml.is_ok());
    }
    // The fused topology holds one process device per rank and every plugin device.
    let x = xml::parse(&p0.topo_xml, Schema::Topology, "fused").unwrap();
    let mut devs = 0;
    let mut nets_seen = Vec::new();
    fn walk(x: &ferroccl::topo::XmlNode, devs: &mut usize, nets: &mut Vec<String>) {
        if x.name == "pci" && x.attr("class") == Some("0x03ff00") {
            *devs += 1;
        }
        if x.name == "net" {
            nets.push(x.attr("name").unwrap_or_default().to_string());
        }
        for s in &x.subs {
            walk(s, devs, nets);
        }
    }
    walk(&x, &mut devs, &mut nets_seen);
    assert_eq!(devs, nranks);
    let names: Vec<String> = nets.iter().map(|n| n.name.clone()).collect();
    assert_eq!(nets_seen, names);
    // Logs in NCCL's formats.
    assert!(p0.log.iter().any(|l| l.text.starts_with("Channel 00/")));
    assert!(p0.log.iter().any(|l| l.text.starts_with("Trees [0] ")));
    assert!(p0.log.iter().any(|l| l.text.starts_with("Pattern 4, crossNic ")));
}

/// A copied-out sysfs: NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7, and a NIC at
/// 0000:03:00.0 behind a switch (upstream 0000:01:00.0, downstream 0000:02:00.0) on root
/// port 0000:00:01.0 of node 1.
struct FakeSys {
    root: PathBuf,
}

impl FakeSys {
    fn new(tag: &str) -> FakeSys {
        let root = std::env::temp_dir().join(format!("ferroccl-topo-sysfs-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let w = |p: &Path, s: &str| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, s).unwrap();
        };
        w(&root.join("devices/system/node/node0/cpumap"), "0000000f\n");
        w(&root.join("devices/system/node/node1/cpumap"), "000000f0\n");
        std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        let mut dir = root.join("devices/pci0000:00");
        for (bus, class, speed) in [
            ("0000:00:01.0", "0x060400", "16.0 GT/s PCIe"),
            ("0000:01:00.0", "0x060400", "16.0 GT/s PCIe"),
            ("0000:02:00.0", "0x060400", "16.0 GT/s PCIe"),
            ("0000:03:00.0", "0x020000", "8.0 GT/s PCIe"),
        ] {
            dir = dir.join(bus);
            w(&dir.join("class"), &format!("{class}\n"));
            w(&dir.join("vendor"), "0x15b3\n");
            w(&dir.join("device"), "0x1017\n");
            w(&dir.join("numa_node"), "1\n");
            w(&dir.join("max_link_speed"), &format!("{speed}\n"));
            w(&dir.join("max_link_width"), "16\n");
            std::os::unix::fs::symlink(root.join("bus/pci"), dir.join("subsystem")).unwrap();
            std::os::unix::fs::symlink(&dir, root.join("bus/pci/devices").join(bus)).unwrap();
        }
        FakeSys { root }
    }

    fn sysfs(&self) -> Sysfs {
        Sysfs {
            root: self.root.clone(),
            cpuinfo: Some("vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n".to_string()),
        }
    }

    fn nic(&self) -> Properties {
        Properties {
            name: "eth9".to_string(),
            pci_path: Some(
                self.root
                    .join("devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0")
                    .to_string_lossy()
                    .into_owned(),
            ),
            guid: 0x42,
            speed: 100_000,
            ..Properties::default()
        }
    }
}

impl Drop for FakeSys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn numa_records(fake: &FakeSys, hosts: usize, params: &TopoParams) -> Vec<TopoRecord> {
    let sys = fake.sysfs();
    let nic = fake.nic();
    let mut out = Vec::new();
    for h in 0..hosts {
        for local in 0..4 {
            // Ranks 0 and 2 of each host on NUMA node 0, 1 and 3 on node 1.
            let cpus = if local % 2 == 0 { "0-1" } else { "4-5" };
            let aff = CpuSet::parse_list(cpus).unwrap();
            let rank = h * 4 + local;
            let (rec, _) =
                detect::detect_cpu_rank(rank, std::slice::from_ref(&nic), params, &sys, 1000 + h as u64, &aff).unwrap();
            out.push(rec);
        }
    }
    exchange(&out)
}

#[test]
fn numa_neighbours_share_the_ring_and_the_nic_sits_under_its_switch() {
    let fake = FakeSys::new("single");
    let params = TopoParams::default();
    let records = numa_records(&fake, 1, &params);
    assert_eq!(records[1].numa_node, 1);
    assert_eq!(records[2].numa_node, 0);
    let topo = CommTopology::build(&records, &params).unwrap();
    let fused = xml::dump(&topo.hosts[0].fused_xml);
    // The NIC hangs off the switch's upstream port (downstream port and root port are not
    // PCI nodes in NCCL's walk), on NUMA node 1, with sysfs attributes and plugin facts.
    let x = &topo.hosts[0].fused_xml;
    let cpu1 = x.subs.iter().find(|c| c.attr("numaid") == Some("1")).expect("cpu 1");
    let sw = cpu1.sub("pci").expect("switch under cpu 1");
    assert_eq!(sw.attr("busid"), Some("0000:01:00.0"), "{fused}");
    let nic = sw.sub("pci").expect("nic pci");
    assert_eq!(nic.attr("busid"), Some("0000:03:00.0"));
    assert_eq!(nic.attr("class"), Some("0x020000"));
    assert_eq!(nic.attr("link_speed"), Some("8.0 GT/s PCIe"));
    let net = nic.sub("nic").and_then(|n| n.sub("net")).expect("net");
    assert_eq!(net.attr("name"), Some("eth9"));
    assert_eq!(net.attr("speed"), Some("100000"));
    assert_eq!(net.attr("guid"), Some("0x42"));
    assert!(
        cpu1.attr("affinity") == Some("000000f0") && cpu1.attr("vendor") == Some("GenuineIntel"),
        "{fused}"
    );
    // Process devices are on the NUMA node of their affinity: the ring keeps NUMA neighbours
    // together and crosses the socket link only twice (there and back).
    let ring = &topo.comm.rings[0];
    let numa = |r: usize| r % 2;
    let crossings = (0..4).filter(|&i| numa(ring[i]) != numa(ring[(i + 1) % 4])).count();
    assert_eq!(crossings, 2, "ring {ring:?}");
    // Skylake root complex: the same-socket hop is PHB, the other SYS at 10 GB/s.
    let h = &topo.hosts[0].graphs;
    assert_eq!(h.ring.type_intra, ferroccl::topo::PathType::Sys);
    assert_eq!(h.ring.bw_intra, 10.0);
}

#[test]
fn two_cpu_hosts_connect_through_the_nic() {
    let fake = FakeSys::new("two");
    let params = TopoParams::default();
    let records = numa_records(&fake, 2, &params);
    let plans: Vec<_> = (0..8).map(|r| plan(r, &records, &params).unwrap()).collect();
    assert_eq!(plans[0].n_nodes, 2);
    for (r, p) in plans.iter().enumerate() {
        for ch in &p.channels {
            let next = ch.ring.next(r);
            let prev = ch.ring.prev(r);
            let remote = |x: usize| x / 4 != r / 4;
            // Ranks with a neighbour on the other host use the only NIC (device 0).
            if remote(next) || remote(prev) {
                assert_eq!(ch.net_dev, Some(0), "rank {r} channel {}", ch.id);
            } else {
                assert_eq!(ch.net_dev, None);
            }
        }
        // p2p toward the other host's ranks goes through device 0, driven by this rank.
        for peer in 0..8 {
            let n = p.p2p_net(peer, 0);
            if peer / 4 == r / 4 {
                assert!(n.is_none());
            } else {
                let n = n.unwrap();
                assert_eq!((n.net_dev, n.proxy_rank), (0, r));
            }
        }
    }
    // Trees: the two hosts' chains are joined by the double binary tree.
    let links = &CommTopology::build(&records, &params).unwrap().comm.links;
    assert_eq!(links[0].len(), plans[0].channels.len());
    for c in 0..links[0].len() {
        let roots = links.iter().filter(|l| l[c].tree_up < 0).count();
        assert_eq!(roots, 1);
    }
}

#[test]
fn a_topology_file_overrides_detection() {
    // NCCL_TOPO_FILE with two sockets of an AMD machine and no NIC: the ranks are placed on
    // the file's CPUs; the plugin's virtual NIC (no PCI path) attaches to the first CPU.
    let dir = std::env::temp_dir().join(format!("ferroccl-topo-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("topo.xml");
    std::fs::write(
        &file,
        r#"<system version="1">
  <cpu numaid="0" affinity="0000000f" arch="x86_64" vendor="AuthenticAMD" familyid="175" modelid="1"/>
  <cpu numaid="1" affinity="000000f0" arch="x86_64" vendor="AuthenticAMD" familyid="175" modelid="1"/>
</system>
"#,
    )
    .unwrap();
    let params = TopoParams {
        topo_file: Some(file.clone()),
        ..TopoParams::default()
    };
    let fake = FakeSys::new("file");
    let sys = fake.sysfs();
    let virt = Properties {
        name: "lo".to_string(),
        pci_path: None,
        speed: 10_000,
        ..Properties::default()
    };
    let mut recs = Vec::new();
    for r in 0..2 {
        let aff = CpuSet::parse_list(if r == 0 { "0" } else { "4" }).unwrap();
        recs.push(
            detect::detect_cpu_rank(r, std::slice::from_ref(&virt), &params, &sys, 5, &aff)
                .unwrap()
                .0,
        );
    }
    let topo = CommTopology::build(&exchange(&recs), &params).unwrap();
    let fused = xml::dump(&topo.hosts[0].fused_xml);
    let x = &topo.hosts[0].fused_xml;
    assert_eq!(x.subs.len(), 2, "{fused}");
    // AMD attributes come from the file, not from this machine's cpuinfo.
    assert!(fused.contains(r#"vendor="AuthenticAMD""#), "{fused}");
    assert!(x.subs[0].sub("nic").is_some(), "virtual NIC on the first CPU: {fused}");
    // Two ranks on two AMD sockets: SYS at 12 GB/s (process devices' Gen3 links; AMD 16).
    assert_eq!(topo.hosts[0].graphs.ring.type_intra, ferroccl::topo::PathType::Sys);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gpu_detection_skips_cleanly_without_a_driver_and_fills_a_gpu_rank_from_facts() {
    // No NVIDIA driver on this machine: no GPUs, no error.
    if !std::path::Path::new("/proc/driver/nvidia").exists() {
        assert!(ferroccl::topo::nvml::gpus().is_empty());
    }
    // A GPU rank's record from facts (as NVML would give them): the GPU's PCI branch comes
    // from sysfs, its <gpu> from the facts, in NCCL's attribute order.
    let fake = FakeSys::new("gpu");
    let sys = fake.sysfs();
    let facts = ferroccl::topo::fill::GpuFacts {
        dev: 0,
        sm: 90,
        gdr: true,
        nvlinks: vec![("fffffff:ffff:ff".to_string(), 18, String::new())],
        c2c: None,
    };
    // Reuse the NIC's PCI function as the "GPU" location: what matters is the branch.
    let (rec, _) =
        detect::detect_gpu_rank(0, "0000:03:00.0", &facts, &[], &[], &TopoParams::default(), &sys, 9).unwrap();
    let x = xml::parse(&rec.xml, Schema::Topology, "gpu rank").unwrap();
    let pci = x.find_kv("pci", "busid", "0000:03:00.0").unwrap();
    let g = pci.sub("gpu").unwrap();
    let keys: Vec<&str> = g.attrs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["dev", "sm", "keep", "rank", "gdr", "mlopart"]);
    let nvl = g.sub("nvlink").unwrap();
    assert_eq!(
        nvl.attrs,
        [
            ("target".to_string(), "fffffff:ffff:ff".to_string()),
            ("count".to_string(), "18".to_string()),
            ("tclass".to_string(), "0x068000".to_string())
        ]
    );
    // One GPU alone: maxBw = totalBw = LOC_BW and its self-ring costs nothing, so the ring
    // search reaches maxChannels (32) at once; the postset doubles to 64, as in NCCL.
    let topo = CommTopology::build(&[rec], &TopoParams::default()).unwrap();
    assert_eq!(topo.hosts[0].graphs.ring.n_channels, 32);
    assert_eq!(topo.comm.n_channels, 64);
}

/// CollNet heads of CPU-process hosts: the NIC detection makes carries no CollNet
/// mark, so the CollNetDirect search finds nothing and every rank of the smallest
/// host is a head (`direct_nheads`: what `coll_collnet_direct` runs with, 4 heads
/// for 2 hosts x 4 ranks). Marked `coll="1"` (a topology file saying the CollNet
/// plugin serves it), the one NIC gives NCCL's answer, one head per host: its
/// search takes a new head only while `nChannels < netCount`.
#[test]
fn cpu_hosts_collnet_heads() {
    let fake = FakeSys::new("collnet");
    let params = TopoParams::default();
    let records = numa_records(&fake, 2, &params);
    let p = plan(0, &records, &params).unwrap();
    assert_eq!(p.collnet_heads, 0);
    assert_eq!(p.collnet_direct.n_channels, 0);
    assert_eq!(ferroccl::graph::collnet::direct_nheads(p.collnet_heads, 4, 4), Some(4));
    let marked: Vec<TopoRecord> = records
        .iter()
        .map(|r| {
            let mut x = xml::parse(&r.xml, Schema::Topology, "record").unwrap();
            x.for_each_mut("net", &mut |n| n.set_attr("coll", 1));
            TopoRecord {
                xml: xml::dump(&x),
                ..r.clone()
            }
        })
        .collect();
    let p = plan(0, &marked, &params).unwrap();
    assert_eq!(p.collnet_direct.n_channels, 1);
    assert_eq!(p.collnet_heads, 1);
    assert_eq!(ferroccl::graph::collnet::direct_nheads(p.collnet_heads, 4, 4), Some(1));
}

/// Detection marks the NICs the CollNet plugin serves (`coll="1"`, NCCL's
/// `ncclTopoProcessNet` for the CollNet table) only for GPU ranks given the CollNet
/// devices; a CPU-process rank's record never carries the mark (the layout rule for
/// its heads), nor does a GPU rank's without CollNet devices. With the mark, the
/// CollNetDirect search of two such hosts finds the NIC's head.
#[test]
fn gpu_detection_marks_collnet_nics() {
    let fake = FakeSys::new("gpucoll");
    let sys = fake.sysfs();
    let nic = fake.nic();
    let facts = ferroccl::topo::fill::GpuFacts {
        dev: 0,
        sm: 90,
        gdr: true,
        nvlinks: vec![],
        c2c: None,
    };
    let params = TopoParams::default();
    let coll_of = |xml_text: &str| {
        let x = xml::parse(xml_text, Schema::Topology, "rank").unwrap();
        x.find_kv("net", "name", "eth9")
            .map(|n| n.attr("coll").map(str::to_string))
    };
    let other = Properties {
        name: "cn0".to_string(),
        ..Properties::default()
    };
    let gpu = |rank: usize, coll: &[Properties], hash: u64| {
        detect::detect_gpu_rank(
            rank,
            "0000:03:00.0",
            &facts,
            std::slice::from_ref(&nic),
            coll,
            &params,
            &sys,
            hash,
        )
        .unwrap()
        .0
    };
    let marked = gpu(0, &[nic.clone(), other.clone()], 9);
    assert_eq!(coll_of(&marked.xml), Some(Some("1".to_string())), "{}", marked.xml);
    assert!(
        !marked.xml.contains("cn0"),
        "a CollNet-only device is not added: {}",
        marked.xml
    );
    let plain = gpu(0, &[], 9);
    assert_eq!(coll_of(&plain.xml), Some(None), "{}", plain.xml);
    let (cpu, _) = detect::detect_cpu_rank(
        0,
        std::slice::from_ref(&nic),
        &params,
        &sys,
        9,
        &CpuSet::parse_list("0").unwrap(),
    )
    .unwrap();
    assert_eq!(coll_of(&cpu.xml), Some(None), "{}", cpu.xml);
    // Two hosts of one marked GPU rank each: one CollNetDirect head per host.
    let recs = vec![
        gpu(0, std::slice::from_ref(&nic), 9),
        gpu(1, std::slice::from_ref(&nic), 10),
    ];
    let p = plan(0, &recs, &params).unwrap();
    assert_eq!(p.collnet_heads, 1);
    assert_eq!(p.collnet_firsts, vec![vec![0], vec![1]]);
    let unmarked = vec![gpu(0, &[], 9), gpu(1, &[], 10)];
    assert_eq!(plan(0, &unmarked, &params).unwrap().collnet_heads, 0);
}
