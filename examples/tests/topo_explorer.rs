//! `ferroccl-topo` as an operator runs it: the topology and graph files and every graph and
//! tuning variable from the environment or `nccl.conf` (flags win), the tuning as JSON, and a
//! tuner plugin's changes. The numbers are the hand-derived ones of `core/tests/tune_gpu.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn public(f: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../core/tests/data/topo/public")
        .join(f)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferroccl-topo-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Runs the explorer with only `env` set among NCCL_*/FERROCCL_* (HOME points at an empty
/// directory, so no ~/.nccl.conf is read).
fn topo(args: &[&str], env: &[(&str, &str)]) -> Output {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let home = HOME.get_or_init(|| scratch("home"));
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferroccl-topo"));
    c.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_") || k.starts_with("FERROCCL_") {
            c.env_remove(k);
        }
    }
    c.env("HOME", home);
    c.envs(env.iter().copied());
    c.output().expect("run ferroccl-topo")
}

fn ok(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{out}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn json(o: &Output) -> Value {
    let text = ok(o);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON: {e}\n{text}"))
}

fn channel_lines(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.starts_with("Channel ")).collect()
}

const H100: [&str; 4] = ["--sm", "90", "--nvlink", "nvswitch"];

/// (lo, hi, algo, proto) of a JSON range list.
fn ranges(v: &Value) -> Vec<(u64, u64, String, String)> {
    v.as_array()
        .expect("ranges")
        .iter()
        .map(|r| {
            (
                r["lo_bytes"].as_u64().unwrap(),
                r["hi_bytes"].as_u64().unwrap(),
                r["algo"].as_str().unwrap().to_string(),
                r["proto"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn r(lo: u64, hi: u64, a: &str, p: &str) -> (u64, u64, String, String) {
    (lo, hi, a.to_string(), p.to_string())
}

#[test]
fn topology_file_from_nccl_topo_file_and_the_argument_wins() {
    let f = public("azhpc-images/ncv4-topo.xml");
    let f = f.to_str().unwrap();
    let by_env = ok(&topo(&[], &[("NCCL_TOPO_FILE", f)]));
    let by_arg = ok(&topo(&[f], &[("NCCL_TOPO_FILE", "/nonexistent/topo.xml")]));
    assert_eq!(by_env, by_arg);
    assert_eq!(
        channel_lines(&by_env),
        ["Channel 00/02 : 0 1 2 3", "Channel 01/02 : 0 1 2 3"]
    );
    // Neither: NCCL's default file, which this machine does not have.
    let o = topo(&[], &[]);
    if !Path::new(ferroccl::topo::DEFAULT_TOPO_FILE).exists() {
        assert!(!o.status.success());
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("set NCCL_TOPO_FILE"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn graph_file_from_nccl_graph_file_and_the_flag_wins() {
    // Azure's graph file for NC A100 v4: ring 2 channels, tree 4, so 2 x 2 channels.
    let topo_f = public("azhpc-images/ncv4-topo.xml");
    let graph = public("azhpc-images/ncv4-graph.xml");
    let (t, g) = (topo_f.to_str().unwrap(), graph.to_str().unwrap());
    let want = [
        "Channel 00/04 : 0 1 2 3",
        "Channel 01/04 : 0 3 2 1",
        "Channel 02/04 : 0 1 2 3",
        "Channel 03/04 : 0 3 2 1",
    ];
    let out = ok(&topo(&[t], &[("NCCL_GRAPH_FILE", g)]));
    assert_eq!(channel_lines(&out), want);
    let out = ok(&topo(
        &[t, "--graph-file", g],
        &[("NCCL_GRAPH_FILE", "/nonexistent/graph.xml")],
    ));
    assert_eq!(channel_lines(&out), want);
    // An unreadable NCCL_GRAPH_FILE is an error, as in NCCL.
    let o = topo(&[t], &[("NCCL_GRAPH_FILE", "/nonexistent/graph.xml")]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/graph.xml"));
}

#[test]
fn search_variables_from_the_environment_and_nccl_conf() {
    // ND A100 v4, one node: 24 channels by default (12 search channels doubled).
    let f = public("azhpc-images/ndv4-topo.xml");
    let args = ["--sm", "80", "--nvlink", "nvswitch", f.to_str().unwrap()];
    let count = |out: &str| channel_lines(out).len();
    assert_eq!(count(&ok(&topo(&args, &[]))), 24);
    assert_eq!(count(&ok(&topo(&args, &[("NCCL_MAX_NCHANNELS", "4")]))), 4);
    // The flag wins over the environment.
    let mut a = args.to_vec();
    a.extend(["--max-nchannels", "2"]);
    assert_eq!(count(&ok(&topo(&a, &[("NCCL_MAX_NCHANNELS", "4")]))), 2);
    // From NCCL_CONF_FILE, and the environment over the file.
    let d = scratch("conf");
    let conf = d.join("nccl.conf");
    std::fs::write(&conf, "NCCL_MAX_NCHANNELS=6\n").unwrap();
    let conf = conf.to_str().unwrap();
    assert_eq!(count(&ok(&topo(&args, &[("NCCL_CONF_FILE", conf)]))), 6);
    assert_eq!(
        count(&ok(&topo(
            &args,
            &[("NCCL_CONF_FILE", conf), ("NCCL_MAX_NCHANNELS", "8")]
        ))),
        8
    );
}

#[test]
fn json_tuning_nvls_and_nccl_algo() {
    // ND H100 v5, one node (derivation in core/tests/tune_gpu.rs, ndv5_1n):
    // AllReduce Ring/LL up to 1 MiB, NVLS/Simple from 2 MiB; 15.0 us at 8 B.
    let f = public("azhpc-images/ndv5-topo.xml");
    let mut args = H100.to_vec();
    args.extend([f.to_str().unwrap(), "--json"]);
    let v = json(&topo(&args, &[]));
    let ar = &v["tuning"]["collectives"]["AllReduce"];
    assert_eq!(
        ranges(ar),
        [r(8, 1 << 20, "Ring", "LL"), r(2 << 20, 8 << 30, "NVLS", "Simple")]
    );
    assert!((ar[0]["time_lo_us"].as_f64().unwrap() - 15.0).abs() < 1e-3);
    assert_eq!(v["topology"]["nvls"]["nchannels"], 8);
    // The table rows: NVLS AllReduce latency 25 us, 272 GB/s.
    let row = v["tuning"]["table"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["func"] == "AllReduce" && r["algo"] == "NVLS" && r["proto"] == "Simple")
        .expect("NVLS row")
        .clone();
    assert!((row["latency_us"].as_f64().unwrap() - 25.0).abs() < 1e-3, "{row}");
    assert!((row["bandwidth_gbs"].as_f64().unwrap() - 272.0).abs() < 1e-3, "{row}");
    // NCCL_ALGO=allreduce:ring: NVLS gone, the rings' ranges (tune_gpu.rs,
    // nvls_enable_0_takes_nvls_away: Tree never wins there either).
    let v = json(&topo(&args, &[("NCCL_ALGO", "allreduce:ring")]));
    assert_eq!(
        ranges(&v["tuning"]["collectives"]["AllReduce"]),
        [
            r(8, 2 << 20, "Ring", "LL"),
            r(4 << 20, 32 << 20, "Ring", "LL128"),
            r(64 << 20, 8 << 30, "Ring", "Simple")
        ]
    );
    // NCCL_NVLS_ENABLE=0 from the environment does the same through the graph search.
    let v = json(&topo(&args, &[("NCCL_NVLS_ENABLE", "0")]));
    assert_eq!(v["topology"]["nvls"]["nchannels"], 0);
    // A value NCCL refuses fails as NCCL fails, naming the token.
    let o = topo(&args, &[("NCCL_PROTO", "fast")]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("\"fast\""));
}

#[test]
fn text_report_has_the_table_and_the_choices_after_the_trees() {
    let f = public("azhpc-images/ndv5-topo.xml");
    let mut args = H100.to_vec();
    args.extend([f.to_str().unwrap(), "--nodes", "2"]);
    let out = ok(&topo(&args, &[]));
    let at = |s: &str| out.find(s).unwrap_or_else(|| panic!("no {s:?} in\n{out}"));
    assert!(at("== Trees ==") < at("== Tuning"));
    assert!(at("== Tuning") < at("== Choices"));
    // NCCL's TUNING lines: Tree/LL AllReduce 25.2 us / 16.6 GB/s on two H100 nodes
    // (6.8 + 2 x (7 x 0.6 + 1 x 5.0); min(0.92 x 384, 8 x 41.4) / 3.8 capped at 45, x 0.85, x 0.5).
    assert!(out.contains("    AllReduce |    25.2/  16.6 |"), "{out}");
    // The AllReduce choices (tune_gpu.rs, ndv5_2n).
    let choices = &out[at("== Choices")..];
    let ar = &choices[choices.find("AllReduce\n").unwrap()..];
    let rows: Vec<&str> = ar.lines().skip(1).take(3).map(str::trim).collect();
    assert!(rows[0].starts_with("8 .. 128K   Tree/LL "), "{rows:?}");
    assert!(rows[1].starts_with("256K .. 1M     Tree/LL128 "), "{rows:?}");
    assert!(rows[2].starts_with("2M .. 8G     NVLSTree/Simple "), "{rows:?}");
}

#[test]
fn dump_files_from_the_environment() {
    let d = scratch("dump");
    let (g, t) = (d.join("graph.xml"), d.join("topo.xml"));
    let f = public("azhpc-images/ncv4-topo.xml");
    ok(&topo(
        &[f.to_str().unwrap()],
        &[
            ("NCCL_GRAPH_DUMP_FILE", g.to_str().unwrap()),
            ("NCCL_TOPO_DUMP_FILE", t.to_str().unwrap()),
        ],
    ));
    let graphs = std::fs::read_to_string(&g).expect("graph dump");
    assert!(graphs.contains("<graph id=\"0\" pattern=\"4\""), "{graphs}");
    assert!(std::fs::read_to_string(&t).expect("topo dump").contains("<system"));
}

fn rules_tuner() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    let so = dir.join("libnccl_tuner_rules.so");
    assert!(so.exists(), "{} not built", so.display());
    so
}

#[test]
fn tuner_changes_row_by_row() {
    // Rule: AllReduce up to 64 KiB on Ring/Simple with 4 channels; everything else NCCL's.
    let d = scratch("tuner");
    let rules = d.join("rules.csv");
    std::fs::write(&rules, "allreduce,0,65536,ring,simple,4,-1,-1\n").unwrap();
    let so = rules_tuner();
    let f = public("azhpc-images/ndv5-topo.xml");
    let mut args = H100.to_vec();
    args.extend([f.to_str().unwrap(), "--json", "--tuner", so.to_str().unwrap()]);
    let v = json(&topo(&args, &[("NCCL_TUNER_CONFIG_FILE", rules.to_str().unwrap())]));
    let rows = v["tuner"]["collectives"]["AllReduce"].as_array().unwrap();
    // 8 .. 64K: NCCL's Ring/LL -> Ring/Simple on 4 channels; 128K .. 1M Ring/LL and
    // 2M .. 8G NVLS unchanged (ndv5_1n in tune_gpu.rs).
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(
        (rows[0]["lo_bytes"].as_u64(), rows[0]["hi_bytes"].as_u64()),
        (Some(8), Some(65536))
    );
    assert_eq!(rows[0]["nccl"]["algo"], "Ring");
    assert_eq!(rows[0]["nccl"]["proto"], "LL");
    assert_eq!(rows[0]["tuned"]["proto"], "Simple");
    assert_eq!(rows[0]["nchannels"], 4);
    assert_eq!(rows[0]["changed"], true);
    // Ring/Simple AllReduce on one H100 node: 56 us + 8 B / 205.7 GB/s.
    assert!((rows[0]["time_lo_us"].as_f64().unwrap() - 56.0).abs() < 1e-3);
    assert_eq!(rows[1]["changed"], false);
    assert_eq!(rows[2]["nccl"]["algo"], "NVLS");
    assert_eq!(rows[2]["changed"], false);
    for func in ["Broadcast", "Reduce", "AllGather", "ReduceScatter"] {
        let rs = v["tuner"]["collectives"][func].as_array().unwrap();
        assert!(rs.iter().all(|r| r["changed"] == false), "{func}: {rs:?}");
    }
    assert_eq!(v["tuner"]["constants_changed"], false);
    // NCCL_TUNER_PLUGIN is the default; --tuner none turns it off.
    let mut a = H100.to_vec();
    a.extend([f.to_str().unwrap(), "--json"]);
    let env = [
        ("NCCL_TUNER_CONFIG_FILE", rules.to_str().unwrap()),
        ("NCCL_TUNER_PLUGIN", so.to_str().unwrap()),
    ];
    assert!(json(&topo(&a, &env)).get("tuner").is_some());
    a.extend(["--tuner", "none"]);
    assert!(json(&topo(&a, &env)).get("tuner").is_none());
    // The text report shows the changed row.
    let mut a = H100.to_vec();
    a.extend([f.to_str().unwrap(), "--tuner", so.to_str().unwrap()]);
    let out = ok(&topo(&a, &env[..1]));
    assert!(
        out.contains("Ring/LL               -> Ring/Simple          nChannels 4"),
        "{out}"
    );
}
