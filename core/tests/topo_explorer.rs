//! The explorer's report for every public topology with its real hardware model at 1, 2 and
//! 4 nodes, against reviewed expectation files (`tests/data/topo/expected/`), plus
//! hand-derived facts about each machine and the Azure NC A100 v4 `NCCL_GRAPH_FILE`.
//!
//! The expectation files were produced by this code and then checked by hand against the
//! reference; `tests/data/topo/expected/REVIEW.md` lists what was checked. To regenerate
//! after a reviewed change: `FERROCCL_BLESS=1 cargo test -p ferroccl --test topo_explorer`.

mod topo_common;

use ferroccl::graph::report::{ReportOptions, report};
use ferroccl::topo::system::NodeRef;
use ferroccl::topo::{NodeType, PathType, TopoParams};
use topo_common::*;

fn params() -> TopoParams {
    TopoParams {
        explain: true,
        ..TopoParams::default()
    }
}

fn render(m: &Machine, nodes: usize) -> String {
    let p = params();
    let topo = build(m, nodes, &p);
    let body = report(&topo, m.file, &p, ReportOptions { paths: true, why: true }).unwrap();
    format!(
        "# model: {}\n{body}",
        if m.options.is_empty() { "(none)" } else { m.options }
    )
}

#[test]
fn reports_match_the_reviewed_expectations() {
    let dir = data_dir().join("expected");
    let bless = std::env::var_os("FERROCCL_BLESS").is_some();
    let mut failures = Vec::new();
    for m in machines() {
        for nodes in [1, 2, 4] {
            let got = render(&m, nodes);
            assert_eq!(got, render(&m, nodes), "{} x{nodes}: output is deterministic", m.name);
            let path = dir.join(format!("{}-{}n.txt", m.name, nodes));
            if bless {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &got).unwrap();
                continue;
            }
            let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if want != got {
                let line = want
                    .lines()
                    .zip(got.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or(want.lines().count().min(got.lines().count()));
                failures.push(format!(
                    "{}: first difference at line {}:\n  want {:?}\n  got  {:?}",
                    path.display(),
                    line + 1,
                    want.lines().nth(line),
                    got.lines().nth(line)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn channel_lines(m: &Machine, nodes: usize) -> Vec<String> {
    let topo = build(m, nodes, &TopoParams::default());
    topo.comm
        .log
        .iter()
        .filter(|l| l.text.starts_with("Channel "))
        .map(|l| l.text.clone())
        .collect()
}

#[test]
fn ncv4_one_ring_of_pcie_gpus() {
    // Four A100 PCIe on four AMD NUMA nodes: every GPU pair is SYS at 12 GB/s (the "" x0
    // link reads as Gen3 x16); one ring at 12 GB/s uses every PCIe link fully, so one search
    // channel, doubled to two.
    let m = machine("ncv4");
    let topo = build(&m, 1, &TopoParams::default());
    let ring = &topo.hosts[0].graphs.ring;
    assert_eq!(
        (ring.n_channels, ring.bw_intra, ring.type_intra),
        (1, 12.0, PathType::Sys)
    );
    assert_eq!(ring.channel(0), &[0, 1, 2, 3]);
    assert_eq!(
        channel_lines(&m, 1),
        ["Channel 00/02 : 0 1 2 3", "Channel 01/02 : 0 1 2 3"]
    );
}

#[test]
fn ncv4_graph_file_gives_exactly_its_channels() {
    let m = machine("ncv4");
    let p = TopoParams {
        graph_file: Some(data_dir().join("public/azhpc-images/ncv4-graph.xml")),
        ..TopoParams::default()
    };
    let topo = build(&m, 1, &p);
    let h = &topo.hosts[0].graphs;
    assert_eq!(
        (h.ring.n_channels, h.ring.pattern, h.ring.bw_intra, h.ring.bw_inter),
        (2, 4, 12.0, 12.0)
    );
    assert_eq!((h.ring.type_intra, h.ring.type_inter), (PathType::Sys, PathType::Pix));
    assert_eq!(h.ring.channel(0), &[0, 1, 2, 3]);
    assert_eq!(h.ring.channel(1), &[0, 3, 2, 1]);
    assert_eq!((h.tree.n_channels, h.tree.pattern), (4, 1));
    let tree: Vec<&[i32]> = (0..4).map(|c| h.tree.channel(c)).collect();
    assert_eq!(tree, [&[0, 1, 2, 3][..], &[1, 0, 3, 2], &[3, 2, 1, 0], &[2, 3, 0, 1]]);
    // The communicator uses min(ring, tree) = 2 channels, doubled.
    let lines: Vec<String> = topo
        .comm
        .log
        .iter()
        .filter(|l| l.text.starts_with("Channel "))
        .map(|l| l.text.clone())
        .collect();
    assert_eq!(
        lines,
        [
            "Channel 00/04 : 0 1 2 3",
            "Channel 01/04 : 0 3 2 1",
            "Channel 02/04 : 0 1 2 3",
            "Channel 03/04 : 0 3 2 1"
        ]
    );
    // Tree channel 1 is the graph's chain 1 -> 0 -> 3 -> 2.
    assert_eq!(topo.comm.links[0][1].tree_up, 1);
    assert_eq!(topo.comm.links[0][1].tree_down[0], 3);
    // And the dump of what was loaded reads back the same.
    let dumped = topo.graph_xml(0).unwrap();
    assert!(dumped.contains(r#"<graph id="0" pattern="4" crossnic="0" nchannels="2" speedintra="12" speedinter="12" latencyinter="0" typeintra="SYS" typeinter="PIX" samechannels="0">"#), "{dumped}");
}

#[test]
fn nvswitch_a100_single_node_has_twelve_search_channels() {
    // 12 NVLinks x 20 GB/s = 240 GB/s per GPU. The intra search starts at 40 GB/s and
    // finds 6 rings (6 x 40 = 240 = totalBw), then ncclTopoDupChannels doubles them at
    // 20 GB/s (bwIntra >= 25, cc 8.0): 12 search channels, 24 after the postset doubling.
    for name in ["ndv4", "p4d", "p4de"] {
        let topo = build(&machine(name), 1, &TopoParams::default());
        let ring = &topo.hosts[0].graphs.ring;
        assert_eq!(
            (ring.n_channels, ring.bw_intra, ring.type_intra),
            (12, 20.0, PathType::Nvl),
            "{name}"
        );
        assert_eq!(topo.comm.n_channels, 24, "{name}");
    }
}

#[test]
fn nvswitch_h100_single_node() {
    // 18 x 20.6 = 370.8 GB/s: 6 rings at 60 GB/s (360 < 370.8, so the search keeps trying
    // lower speeds, none better), doubled at 30 GB/s because bwIntra 60 >= 50.
    let topo = build(&machine("ndv5"), 1, &TopoParams::default());
    let ring = &topo.hosts[0].graphs.ring;
    assert_eq!((ring.n_channels, ring.bw_intra), (12, 30.0));
    assert_eq!(topo.comm.n_channels, 24);
}

#[test]
fn ndv4_multi_node_rings_are_rail_aligned() {
    // Eight 200 Gb/s NICs, one per GPU under the same Gen4 switch (24 GB/s): 8 channels of
    // 24 GB/s, each entering and leaving by the same NIC (crossNic 0), the NIC local to the
    // channel's first GPU; each GPU's NIC is its own (GPU dev d <-> NIC dev d).
    for nodes in [2, 4] {
        let topo = build(&machine("ndv4"), nodes, &TopoParams::default());
        let h = &topo.hosts[0].graphs;
        let sys = &h.system;
        assert_eq!((h.ring.n_channels, h.ring.bw_inter, h.ring.cross_nic), (8, 24.0, 0));
        for c in 0..8 {
            let (i, o) = h.ring.nets(c);
            assert_eq!(i, o, "channel {c}");
            let g = sys.rank_to_index(h.ring.channel(c)[0]).unwrap();
            let n = sys.index_of(NodeType::Net, i).unwrap();
            assert_eq!(
                sys.path(NodeRef::new(NodeType::Gpu, g), NodeType::Net, n).ty,
                PathType::Pix
            );
            let dev = sys.of(NodeType::Gpu)[g].gpu().0;
            assert_eq!(sys.of(NodeType::Net)[n].net().dev, dev, "channel {c}: rail");
        }
        assert_eq!(topo.comm.n_channels, 16);
    }
}

#[test]
fn h100_multi_node_uses_alternating_nics_and_the_simple_tree() {
    // One GPU and one 400 Gb/s NIC per Gen5 switch: a ring cannot enter and leave by the
    // same NIC without PXN, so the search settles on crossNic 2 (channel pairs A->B, B->A)
    // at 48 GB/s, 8 x 48 >= 370.8 = totalBw. sm 9.0 trees switch to the TREE pattern (3).
    let topo = build(&machine("ndv5"), 2, &TopoParams::default());
    let h = &topo.hosts[0].graphs;
    assert_eq!((h.ring.n_channels, h.ring.bw_inter, h.ring.cross_nic), (8, 48.0, 2));
    for c in (0..8).step_by(2) {
        let (a, b) = h.ring.nets(c);
        assert_eq!(h.ring.nets(c + 1), (b, a), "channel pair {c}");
    }
    assert_eq!(h.tree.pattern, 3);
    // Odd nodes use each ring pair in the other order (ncclTopoPostset's crossNic swap):
    // node 1's channel 0 is node 0's channel 1 shifted by 8 ranks.
    let ring0 = &topo.comm.rings[0];
    let pos = |r: usize| ring0.iter().position(|&x| x == r).unwrap();
    assert_eq!(ring0.len(), 16);
    assert!(pos(8) < 16);
}

#[test]
fn h100_nvls_graph_has_one_head_per_gpu() {
    // ncclTopoCompute with the NVLS pattern (search.cc: ncclTopoSearchTryNvls): each channel
    // charges every GPU's NVSwitch link both ways at bwIntra, twice for the channel's head.
    // Eight heads need 7 x bw + 2 x bw <= 370.8 (18 x 20.6) per link: 50 GB/s fails after six
    // channels (6 x 50 + 50 = 350, the seventh head would need 400), 40 fits all eight
    // (360). One node: minChannels = maxChannels = 8, so 40 is the first speed kept; pass 2
    // raises bwInter while it stays below 2 x bwIntra: 50, then 60 (the top intra speed).
    // With NICs the inter speeds apply (48 first: six channels, 45: seven, 42: no better, 40:
    // eight); pass 2 raises bwInter to 48 (each head uses its own 50 GB/s NIC).
    let topo = build(&machine("ndv5"), 1, &TopoParams::default());
    let g = &topo.hosts[0].graphs.nvls;
    assert_eq!((g.n_channels, g.bw_intra, g.bw_inter), (8, 40.0, 60.0));
    let heads: Vec<i32> = (0..8).map(|c| g.channel(c)[0]).collect();
    assert_eq!(heads, [0, 1, 2, 3, 4, 5, 6, 7]);
    for nodes in [2, 4] {
        let topo = build(&machine("ndv5"), nodes, &TopoParams::default());
        let h = &topo.hosts[0].graphs;
        let g = &h.nvls;
        assert_eq!((g.n_channels, g.bw_intra, g.bw_inter), (8, 40.0, 48.0), "{nodes} nodes");
        for c in 0..8 {
            let gi = h.system.rank_to_index(g.channel(c)[0]).unwrap();
            let dev = h.system.of(NodeType::Gpu)[gi].gpu().0;
            let (i, o) = g.nets(c);
            assert_eq!(i, o);
            let n = h.system.index_of(NodeType::Net, i).unwrap();
            assert_eq!(
                h.system.of(NodeType::Net)[n].net().dev,
                dev,
                "channel {c}: the head's own NIC"
            );
        }
        assert_eq!(topo.comm.nvls.n_channels, 8);
    }
    // Without multicast (sm 8.0) or with NCCL_NVLS_ENABLE=0 there is no NVLS graph.
    assert_eq!(
        build(&machine("ndv4"), 1, &TopoParams::default()).comm.nvls.n_channels,
        0
    );
    let off = TopoParams {
        nvls_enable: 0,
        ..TopoParams::default()
    };
    assert_eq!(build(&machine("ndv5"), 2, &off).comm.nvls.n_channels, 0);
}

#[test]
fn ndv2_multi_node_has_one_ring_on_its_single_nic() {
    // One 100 Gb/s NIC (12.5 GB/s) on socket 0: one channel of 12 GB/s uses it up.
    for nodes in [2, 4] {
        let topo = build(&machine("ndv2"), nodes, &TopoParams::default());
        let h = &topo.hosts[0].graphs;
        assert_eq!((h.ring.n_channels, h.ring.bw_inter), (1, 12.0));
        assert_eq!(topo.comm.n_channels, 2);
    }
}

#[test]
fn channel_bounds_apply() {
    let m = machine("ndv4");
    let p = TopoParams {
        max_nchannels: 4,
        ..TopoParams::default()
    };
    assert_eq!(build(&m, 1, &p).comm.n_channels, 4);
    let p = TopoParams {
        min_nchannels: 32,
        ..TopoParams::default()
    };
    let topo = build(&m, 1, &p);
    assert_eq!(topo.comm.n_channels, 32);
    // Channels beyond the search's repeat its rings.
    assert_eq!(topo.comm.rings[24], topo.comm.rings[0]);
}

#[test]
fn dumped_graphs_load_back_as_the_same_graphs() {
    let dir = std::env::temp_dir().join(format!("ferroccl-topo-dump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (topo_path, graph_path) = (dir.join("topo.xml"), dir.join("graph.xml"));
    for name in ["ndv2", "ndv4", "ndv5", "ncv4"] {
        let m = machine(name);
        let p = TopoParams {
            topo_dump_file: Some(topo_path.clone()),
            graph_dump_file: Some(graph_path.clone()),
            ..TopoParams::default()
        };
        let records = records(&m, 2);
        let _ = std::fs::remove_file(&graph_path);
        // Rank 1 is not the dumping rank: it writes nothing.
        let p1 = ferroccl::graph::plan(1, &records, &p).unwrap();
        assert!(p1.write_dumps(&p).unwrap().is_empty());
        assert!(!graph_path.exists());
        let p0 = ferroccl::graph::plan(0, &records, &p).unwrap();
        let log = p0.write_dumps(&p).unwrap();
        assert_eq!(log.len(), 2, "{log:?}");
        // The topology dump is the fused XML; the graph dump loads back to the same graphs.
        let topo_text = std::fs::read_to_string(&topo_path).unwrap();
        assert_eq!(topo_text, p0.topo_xml);
        let searched = ferroccl::graph::CommTopology::build(&records, &TopoParams::default()).unwrap();
        let loaded = ferroccl::graph::CommTopology::build(
            &records,
            &TopoParams {
                graph_file: Some(graph_path.clone()),
                ..TopoParams::default()
            },
        )
        .unwrap();
        let (a, b) = (&searched.hosts[0].graphs, &loaded.hosts[0].graphs);
        for (x, y) in [(&a.ring, &b.ring), (&a.tree, &b.tree), (&a.nvls, &b.nvls)] {
            assert_eq!(
                (
                    x.pattern,
                    x.n_channels,
                    x.bw_intra,
                    x.bw_inter,
                    x.type_intra,
                    x.type_inter,
                    x.cross_nic,
                    x.same_channels
                ),
                (
                    y.pattern,
                    y.n_channels,
                    y.bw_intra,
                    y.bw_inter,
                    y.type_intra,
                    y.type_inter,
                    y.cross_nic,
                    y.same_channels
                ),
                "{name}"
            );
            for c in 0..x.n_channels {
                assert_eq!(x.channel(c), y.channel(c), "{name} channel {c}");
                assert_eq!(x.nets(c), y.nets(c), "{name} channel {c}");
            }
        }
        assert_eq!(searched.comm.rings, loaded.comm.rings, "{name}");
        assert_eq!(searched.comm.links, loaded.comm.links, "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
