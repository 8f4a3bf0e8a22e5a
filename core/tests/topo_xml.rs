//! Topology and graph XML: round trips of every public file, errors that name the element
//! and attribute, and no panics on damaged input.

mod topo_common;

use ferroccl::graph::TopoGraph;
use ferroccl::graph::graph_xml::load_graph;
use ferroccl::topo::paths::{compute_paths, print_paths};
use ferroccl::topo::system::{self, print_system};
use ferroccl::topo::xml::{self, Schema};
use ferroccl::topo::{NodeType, TopoError, TopoParams, fill};
use topo_common::*;

fn public_files() -> Vec<(std::path::PathBuf, Schema)> {
    let mut v = Vec::new();
    for dir in ["azhpc-images", "aws-ofi-nccl"] {
        let d = data_dir().join("public").join(dir);
        let mut files: Vec<_> = std::fs::read_dir(&d).unwrap().flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            if f.extension().is_some_and(|e| e == "xml") {
                let schema = if f.to_string_lossy().contains("graph") {
                    Schema::Graphs
                } else {
                    Schema::Topology
                };
                v.push((f, schema));
            }
        }
    }
    assert_eq!(v.len(), 8, "all public files present");
    v
}

#[test]
fn every_public_file_round_trips_through_the_writer() {
    for (f, schema) in public_files() {
        let a = xml::load_file(&f, schema).unwrap();
        let text = xml::dump(&a);
        let b = xml::parse(&text, schema, "dump").unwrap();
        assert_eq!(a, b, "{}", f.display());
        assert_eq!(xml::dump(&b), text, "{}: the dump is a fixed point", f.display());
        assert!(!text.contains("<!--"), "comments are not kept");
    }
}

#[test]
fn every_public_topology_gives_the_same_system_after_dump_and_reload() {
    for m in machines() {
        let topo = build(&m, 1, &TopoParams::default());
        let host = &topo.hosts[0];
        let hash = host.host_hash;
        let a = system::from_xml(&host.fused_xml, hash).unwrap();
        let text = xml::dump(&host.fused_xml);
        let reparsed = xml::parse(&text, Schema::Topology, "dump").unwrap();
        assert_eq!(reparsed, host.fused_xml, "{}", m.name);
        let b = system::from_xml(&reparsed, hash).unwrap();
        assert_eq!(a.nodes, b.nodes, "{}: nodes", m.name);
        assert_eq!(a.links, b.links, "{}: links", m.name);
        let (mut a, mut b) = (a, b);
        let p = TopoParams::default();
        compute_paths(&mut a, &p).unwrap();
        compute_paths(&mut b, &p).unwrap();
        assert_eq!(print_system(&a), print_system(&b), "{}", m.name);
        assert_eq!(print_paths(&a), print_paths(&b), "{}", m.name);
        // The system has what the model says.
        let gpus = a.count(NodeType::Gpu);
        let expect_gpus = if m.name == "ncv4" { 4 } else { 8 };
        assert_eq!(gpus, expect_gpus, "{}", m.name);
        let nets = a.count(NodeType::Net);
        let expect_nets = match m.name {
            "ncv4" | "ndv2" | "g5" => 1,
            "p4d" | "p4de" => 4,
            _ => 8,
        };
        assert_eq!(nets, expect_nets, "{}", m.name);
    }
}

#[test]
fn the_complete_ncv4_file_loads_as_nccl_reads_it() {
    let m = machine("ncv4");
    let mut x = load(&m);
    fill::set_host_hash(&mut x, 7);
    let mut s = system::from_xml(&x, 7).unwrap();
    compute_paths(&mut s, &TopoParams::default()).unwrap();
    assert_eq!(s.count(NodeType::Cpu), 4);
    assert_eq!(s.count(NodeType::Gpu), 4);
    assert_eq!(s.count(NodeType::Net), 1);
    // AMD: 16 GB/s between sockets; PCI link "" x0 reads as Gen3 x16 = 12 GB/s; the net is
    // 100 Gb/s = 12.5 GB/s.
    let lines = print_system(&s);
    assert!(lines.contains(&"+ SYS[16.0] - CPU/0-1".to_string()), "{lines:#?}");
    assert!(
        lines.iter().any(|l| l.contains("+ PCI[12.0] - DEV/0-100000")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("NET/0-0 (0/0/0/12.500000)")),
        "{lines:#?}"
    );
}

fn sys_err(text: &str) -> String {
    match xml::parse(text, Schema::Topology, "test") {
        Err(e) => e.to_string(),
        Ok(x) => match system::from_xml(&x, 0) {
            Err(e) => e.to_string(),
            Ok(_) => "no error".to_string(),
        },
    }
}

const CPU: &str = r#"<cpu numaid="0" host_hash="0" arch="x86_64" vendor="AuthenticAMD">"#;

fn with_pci(pci: &str) -> String {
    format!("<system version=\"1\">{CPU}{pci}</cpu></system>")
}

#[test]
fn missing_attributes_name_the_element_and_the_attribute() {
    let cases: Vec<(String, &str)> = vec![
        (
            with_pci(r#"<pci class="0x060400" link_speed="" link_width="16"/>"#),
            r#"<pci> is missing attribute "busid""#,
        ),
        (
            with_pci(r#"<pci busid="0000:01:00.0" link_speed="" link_width="16"/>"#),
            r#"<pci> is missing attribute "class""#,
        ),
        (
            with_pci(r#"<pci busid="0000:01:00.0" class="0x060400" link_width="16"/>"#),
            r#"<pci> is missing attribute "link_speed""#,
        ),
        (
            with_pci(r#"<pci busid="0000:01:00.0" class="0x060400" link_speed=""/>"#),
            r#"<pci> is missing attribute "link_width""#,
        ),
        (
            with_pci(
                r#"<pci busid="0000:01:00.0" class="0x030200" link_speed="" link_width="16"><gpu dev="0" rank="0" gdr="1"/></pci>"#,
            ),
            r#"<gpu> is missing attribute "sm""#,
        ),
        (
            with_pci(
                r#"<pci busid="0000:01:00.0" class="0x030200" link_speed="" link_width="16"><gpu dev="0" sm="80" rank="0"/></pci>"#,
            ),
            r#"<gpu> is missing attribute "gdr""#,
        ),
        (
            with_pci(
                r#"<pci busid="0000:01:00.0" class="0x030200" link_speed="" link_width="16"><gpu dev="0" sm="80" rank="0" gdr="1"><nvlink target="x" tclass="0x068000"/></gpu></pci>"#,
            ),
            r#"<nvlink> is missing attribute "count""#,
        ),
        (
            r#"<system version="1"><cpu host_hash="0" arch="x86_64" vendor="AuthenticAMD"/></system>"#.to_string(),
            r#"<cpu> is missing attribute "numaid""#,
        ),
        (
            r#"<system version="1"><cpu numaid="0" host_hash="0"/></system>"#.to_string(),
            r#"<cpu> is missing attribute "arch""#,
        ),
        (
            r#"<system version="1"><cpu numaid="0" host_hash="0" arch="x86_64"/></system>"#.to_string(),
            r#"<cpu> is missing attribute "vendor""#,
        ),
        (
            r#"<system version="1"><cpu numaid="0" host_hash="0" arch="x86_64" vendor="GenuineIntel"/></system>"#
                .to_string(),
            r#"<cpu> is missing attribute "familyid""#,
        ),
        (
            r#"<system><cpu numaid="0"/></system>"#.to_string(),
            r#"<system> is missing attribute "version""#,
        ),
    ];
    for (text, want) in cases {
        let got = sys_err(&text);
        assert!(got.contains(want), "input {text}\n want {want}\n got  {got}");
    }
}

#[test]
fn malformed_values_name_the_attribute_and_what_was_expected() {
    let got = sys_err(&with_pci(
        r#"<pci busid="0000:01:00.0" class="0x060400" link_speed="" link_width="x16"/>"#,
    ));
    assert!(got.contains(r#"<pci link_width="x16">: expected an integer"#), "{got}");
    let got = sys_err(&with_pci(
        r#"<pci busid="zz" class="0x060400" link_speed="" link_width="16"/>"#,
    ));
    assert!(got.contains(r#"<pci busid="zz">: expected a PCI bus id"#), "{got}");
    let got = sys_err(r#"<system version="1"><cpu numaid="0" host_hash="nothex" arch="arm64"/></system>"#);
    assert!(got.contains(r#"<cpu host_hash="nothex">"#), "{got}");
    let got = sys_err(
        r#"<system version="1"><cpu numaid="0" host_hash="0" arch="arm64"><nic><net dev="0" speed="fast"/></nic></cpu></system>"#,
    );
    assert!(got.contains(r#"<net speed="fast">: expected an integer"#), "{got}");
}

#[test]
fn unknown_versions_are_refused() {
    for (text, schema) in [
        (r#"<system version="2"/>"#, Schema::Topology),
        (r#"<graphs version="0"/>"#, Schema::Graphs),
    ] {
        let e = xml::parse(text, schema, "t").unwrap_err();
        assert!(matches!(e, TopoError::Version { .. }), "{e}");
        assert!(e.to_string().contains("unknown version"), "{e}");
    }
}

#[test]
fn syntax_errors_are_errors() {
    for text in [
        "<system version=\"1\"><cpu numaid=\"0\">",
        "<system version=\"1\"></cpu></system>",
        "<system version=1/>",
        "<system version=\"1\">text</system>",
        "<system version=\"1\"><cpu numaid=\"0\" numaid=\"1\"/></system>",
        "<system version=\"1\"",
        "\u{0}\u{1}",
    ] {
        let e = xml::parse(text, Schema::Topology, "t");
        assert!(e.is_err(), "{text:?} parsed: {e:?}");
    }
}

#[test]
fn unknown_elements_are_skipped_as_nccl_does() {
    let x = xml::parse(
        r#"<system version="1"><mystery a="1"><cpu numaid="9"/></mystery><cpu numaid="0"><gpu/><pci busid="1"><foo/></pci></cpu></system>"#,
        Schema::Topology,
        "t",
    )
    .unwrap();
    assert_eq!(
        xml::dump(&x),
        "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"1\"/>\n  </cpu>\n</system>\n"
    );
    // A <net> without dev is not a device (NCCL skips it).
    let x = xml::parse(
        r#"<system version="1"><cpu numaid="0" host_hash="0" arch="arm64"><nic><net name="a"/></nic></cpu></system>"#,
        Schema::Topology,
        "t",
    )
    .unwrap();
    assert_eq!(system::from_xml(&x, 0).unwrap().count(NodeType::Net), 0);
}

#[test]
fn element_limits_are_enforced() {
    let mut t = String::from("<system version=\"1\"><cpu numaid=\"0\">");
    for i in 0..300 {
        t.push_str(&format!("<pci busid=\"0000:{:02x}:00.0\"/>", i % 256));
    }
    t.push_str("</cpu></system>");
    let e = xml::parse(&t, Schema::Topology, "big").unwrap_err();
    assert!(matches!(e, TopoError::TooLarge { limit: 256, .. }), "{e}");
}

#[test]
fn graph_files_read_both_attribute_spellings() {
    let m = machine("ncv4");
    let topo = build(&m, 1, &TopoParams::default());
    let sys = &topo.hosts[0].graphs.system;
    let g = |attrs: &str| {
        format!(
            r#"<graphs version="1"><graph id="0" pattern="4" crossnic="0" nchannels="1" {attrs} typeintra="SYS" typeinter="PIX" samechannels="0"><channel><gpu dev="0"/><gpu dev="1"/><gpu dev="2"/><gpu dev="3"/></channel></graph></graphs>"#
        )
    };
    for (attrs, bw) in [
        (r#"speedintra="12" speedinter="6""#, (12.0, 6.0)),
        (r#"bwintra="11" bwinter="5""#, (11.0, 5.0)),
        (
            r#"speedintra="10" bwintra="11" speedinter="4" bwinter="5""#,
            (10.0, 4.0),
        ),
    ] {
        let x = xml::parse(&g(attrs), Schema::Graphs, "g").unwrap();
        let mut graph = TopoGraph::new(0, 4, 1, 32, 4);
        let n = load_graph(&x, sys, &mut graph, &TopoParams::default()).unwrap();
        assert_eq!(n, 1);
        assert_eq!((graph.bw_intra, graph.bw_inter), bw, "{attrs}");
        assert_eq!(graph.channel(0), &[0, 1, 2, 3]);
    }
    let x = xml::parse(&g(r#"speedinter="6""#), Schema::Graphs, "g").unwrap();
    let mut graph = TopoGraph::new(0, 4, 1, 32, 4);
    let e = load_graph(&x, sys, &mut graph, &TopoParams::default()).unwrap_err();
    assert!(
        e.to_string().contains(r#"<graph> is missing attribute "speedintra""#),
        "{e}"
    );
    let bad = g(r#"speedintra="12" speedinter="6""#).replace(r#"<gpu dev="3"/>"#, r#"<gpu dev="9"/>"#);
    let x = xml::parse(&bad, Schema::Graphs, "g").unwrap();
    let mut graph = TopoGraph::new(0, 4, 1, 32, 4);
    let e = load_graph(&x, sys, &mut graph, &TopoParams::default()).unwrap_err();
    assert!(e.to_string().contains("dev 9 not found"), "{e}");
}

/// Damaged files (every truncation point, flipped bytes) give errors or systems, never a
/// panic.
#[test]
fn damaged_inputs_never_panic() {
    let p = TopoParams::default();
    for (f, schema) in public_files() {
        let text = std::fs::read_to_string(&f).unwrap();
        let bytes = text.as_bytes();
        let mut inputs: Vec<Vec<u8>> = (0..bytes.len()).step_by(7).map(|i| bytes[..i].to_vec()).collect();
        for i in (0..bytes.len()).step_by(13) {
            let mut b = bytes.to_vec();
            b[i] = match b[i] {
                b'"' => b' ',
                b'<' => b'>',
                b'0'..=b'9' => b'z',
                _ => b'"',
            };
            inputs.push(b);
        }
        for b in inputs {
            let Ok(s) = std::str::from_utf8(&b) else { continue };
            if let Ok(mut x) = xml::parse(s, schema, "damaged")
                && schema == Schema::Topology
            {
                fill::set_host_hash(&mut x, 1);
                if let Ok(mut sys) = system::from_xml(&x, 1) {
                    let _ = compute_paths(&mut sys, &p);
                }
            }
        }
    }
}
