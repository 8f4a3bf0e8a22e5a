//! Profiler plugins fed with NCCL's events, over real processes and the socket
//! plugin on loopback (shared memory disabled, so every connection is NET and has
//! a proxy): the recording C profiler of every API version (v1 … v6,
//! `testing/profiler-rec`) logs each call, and the test rebuilds the event tree
//! of an AllReduce and of a group of send/receive:
//!
//! * every event started is stopped exactly once, and nothing else is stopped;
//! * every parent was started before its child, in the same process;
//! * the hierarchy is NCCL's (reference `docs/reference/nccl-graph-tuning.md` §6.2): v5/v6
//!   `GroupApi → CollApi/P2pApi → Coll/P2p → ProxyOp → ProxyStep` with
//!   `parentGroup` naming a Group event; v1–v4 `Group → Coll/P2p → ProxyOp →
//!   ProxyStep` and no API events;
//! * descriptors carry NCCL's spellings (func, algorithm, protocol, datatype or,
//!   for v1, their enum codes), the sequence number, counts and peers;
//! * ProxyStep states follow `net.cc` (send `SendGPUWait`, `SendPeerWait_v4`
//!   (v4+), `SendWait`; receive `RecvWait`, `RecvFlushWait`, `RecvGPUWait`), a
//!   ProxyOp has as many steps as its `nSteps`, and `finalize` is called.

mod coll_support;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use coll_support::{
    all_reduce_checked, all_reduce_then_ring_exchange, ar_input, assert_all_ok, fresh_dir, join, launch, role,
};

const WORKER: &str = "prof_worker";
const LIMIT: Duration = Duration::from_secs(180);
/// AllReduce elements (f32): several network steps per connection.
const AR_COUNT: usize = 300_000;
/// Send/receive elements (i32).
const P2P_COUNT: usize = 70_000;

/// Child entry point (does nothing when run as a normal test).
#[test]
fn prof_worker() {
    let Some(r) = role("prof") else { return };
    let comm = join(&r, Duration::from_secs(60));
    // One AllReduce (standalone: an implicit group), then a group of one send
    // and one receive around the ring.
    all_reduce_then_ring_exchange(&comm, &r, AR_COUNT, 13, P2P_COUNT, 3);
    comm.destroy().expect("destroy");
    println!("rank {} done", r.rank);
}

/// AllReduces of [`rep_worker`], all on the same buffers.
const REPEATS: usize = 3;

/// Child entry point of [`repeated_allreduce_profiles_every_run`]: the same
/// AllReduce `REPEATS` times on the same buffers, so that every run after the
/// first reuses the proxy's cached plan (and its ProxyOps).
#[test]
fn rep_worker() {
    let Some(r) = role("prof_rep") else { return };
    let comm = join(&r, Duration::from_secs(60));
    let send = ar_input(&r, AR_COUNT, 7);
    let mut recv = vec![0f32; AR_COUNT];
    let s = ferroccl::Stream::new();
    for _ in 0..REPEATS {
        recv.fill(-1.0);
        all_reduce_checked(&comm, &r, &send, &mut recv, 7, &s);
    }
    comm.destroy().expect("destroy");
    println!("rank {} done", r.rank);
}

#[derive(Debug, Clone)]
struct Ev {
    id: u64,
    ty: u64,
    parent: u64,
    line: usize,
    fields: HashMap<String, String>,
    states: Vec<(i32, i64)>,
    stops: usize,
}

impl Ev {
    fn f(&self, k: &str) -> &str {
        self.fields.get(k).map_or("", String::as_str)
    }
}

/// One process's log.
struct Log {
    file: PathBuf,
    init: Option<HashMap<String, String>>,
    events: BTreeMap<u64, Ev>,
    finalized: usize,
    problems: Vec<String>,
}

fn kv(parts: &[&str]) -> HashMap<String, String> {
    parts
        .iter()
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn parse(file: &Path) -> Log {
    let text = std::fs::read_to_string(file).expect("read log");
    let mut log = Log {
        file: file.to_path_buf(),
        init: None,
        events: BTreeMap::new(),
        finalized: 0,
        problems: Vec::new(),
    };
    for (n, line) in text.lines().enumerate() {
        let parts: Vec<&str> = line.split(' ').collect();
        let m = kv(&parts[1..]);
        match parts[0] {
            "init" => log.init = Some(m),
            "finalize" => log.finalized += 1,
            "start" => {
                let id: u64 = m["id"].parse().unwrap();
                let parent = m["parent"].parse().unwrap_or_else(|_| {
                    log.problems.push(format!("line {n}: unknown parent pointer: {line}"));
                    u64::MAX
                });
                if parent != 0 && !log.events.contains_key(&parent) {
                    log.problems
                        .push(format!("line {n}: parent {parent} not started before: {line}"));
                }
                log.events.insert(
                    id,
                    Ev {
                        id,
                        ty: m["type"].parse().unwrap(),
                        parent,
                        line: n,
                        fields: m,
                        states: Vec::new(),
                        stops: 0,
                    },
                );
            }
            "state" => match m["id"].parse::<u64>().ok().and_then(|id| log.events.get_mut(&id)) {
                Some(e) => e.states.push((m["st"].parse().unwrap(), m["size"].parse().unwrap())),
                None => log
                    .problems
                    .push(format!("line {n}: state of an unknown event: {line}")),
            },
            "stop" => match m["id"].parse::<u64>().ok().and_then(|id| log.events.get_mut(&id)) {
                Some(e) => e.stops += 1,
                None => log.problems.push(format!("line {n}: stop of an unknown event: {line}")),
            },
            _ => log.problems.push(format!("line {n}: unexpected: {line}")),
        }
    }
    log
}

const GROUP: u64 = 1;
const COLL: u64 = 2;
const P2P: u64 = 4;
const PROXY_OP: u64 = 8;
const PROXY_STEP: u64 = 16;
const PROXY_CTRL: u64 = 32;
const NET_PLUGIN: u64 = 128;
const GROUP_API: u64 = 256;
const COLL_API: u64 = 512;
const P2P_API: u64 = 1024;

/// Checks one process's tree for a plugin of version `v` on `nranks` ranks.
fn check(log: &Log, v: u32, nranks: usize) -> Vec<String> {
    let mut bad = log.problems.clone();
    let who = log.file.display().to_string();
    let init = log.init.as_ref().expect("init line");
    assert_eq!(init["v"], v.to_string(), "{who}");
    if v >= 4 {
        assert_eq!(init["nranks"], nranks.to_string(), "{who}: init nranks");
    }
    if log.finalized != 1 {
        bad.push(format!("finalize called {} times", log.finalized));
    }
    let evs = &log.events;
    let of = |ty: u64| evs.values().filter(move |e| e.ty == ty);
    for e in evs.values() {
        if e.stops != 1 {
            bad.push(format!("event {} (type {}) stopped {} times", e.id, e.ty, e.stops));
        }
        if e.parent != 0
            && let Some(p) = evs.get(&e.parent)
            && p.line >= e.line
        {
            bad.push(format!("event {} started before its parent {}", e.id, p.id));
        }
    }
    let parent_ty = |e: &Ev| evs.get(&e.parent).map_or(0, |p| p.ty);
    // API events: v5+ only.
    let api = of(GROUP_API).count() + of(COLL_API).count() + of(P2P_API).count();
    if v <= 4 {
        if api != 0 {
            bad.push(format!("{api} API events reached a v{v} plugin"));
        }
    } else {
        // One GroupApi for the AllReduce's implicit group, one for the send/recv group.
        let ga: Vec<&Ev> = of(GROUP_API).collect();
        if ga.len() != 2 {
            bad.push(format!("{} GroupApi events, expected 2", ga.len()));
        }
        if ga.iter().any(|e| e.parent != 0) {
            bad.push("a GroupApi event has a parent".into());
        }
        let depths: Vec<&str> = ga.iter().map(|e| e.f("depth")).collect();
        if depths != ["1", "2"] {
            bad.push(format!("GroupApi depths {depths:?}, expected [1, 2]"));
        }
        for e in ga {
            let st: Vec<i32> = e.states.iter().map(|s| s.0).collect();
            if st != [23, 24] {
                bad.push(format!("GroupApi states {st:?}, expected [23, 24]"));
            }
        }
        for e in of(COLL_API).chain(of(P2P_API)) {
            if parent_ty(e) != GROUP_API {
                bad.push(format!("API event {} is not under a GroupApi", e.id));
            }
        }
        let ca: Vec<&Ev> = of(COLL_API).collect();
        if ca.len() != 1 || ca[0].f("func") != "AllReduce" || ca[0].f("count") != AR_COUNT.to_string() {
            bad.push(format!("CollApi events {ca:?}"));
        }
        let mut pa: Vec<&str> = of(P2P_API).map(|e| e.f("func")).collect();
        pa.sort();
        if pa != ["Recv", "Send"] {
            bad.push(format!("P2pApi funcs {pa:?}"));
        }
    }
    // Coll.
    let colls: Vec<&Ev> = of(COLL).collect();
    if colls.len() != 1 {
        bad.push(format!("{} Coll events, expected 1", colls.len()));
    }
    for c in &colls {
        let want_parent = if v >= 5 { COLL_API } else { GROUP };
        if parent_ty(c) != want_parent {
            bad.push(format!("Coll parent type {} (expected {want_parent})", parent_ty(c)));
        }
        if v >= 5 && evs.get(&c.f("group").parse().unwrap_or(0)).map(|g| g.ty) != Some(GROUP) {
            bad.push(format!("Coll parentGroup {} is not a Group event", c.f("group")));
        }
        let (func, dtype, algos, proto): (&str, &str, &[&str], &str) = if v == 1 {
            ("4", "7", &["0", "1"], "2")
        } else {
            ("AllReduce", "ncclFloat32", &["TREE", "RING"], "SIMPLE")
        };
        if c.f("func") != func || c.f("dtype") != dtype || !algos.contains(&c.f("algo")) || c.f("proto") != proto {
            bad.push(format!("Coll descriptor {:?}", c.fields));
        }
        if c.f("seq") != "0" || c.f("count") != AR_COUNT.to_string() || c.f("rank").is_empty() {
            bad.push(format!("Coll seq/count {:?}", c.fields));
        }
        if c.f("nch").parse::<u32>().unwrap_or(0) == 0 {
            bad.push(format!("Coll nChannels {:?}", c.fields));
        }
    }
    // P2p.
    let p2ps: Vec<&Ev> = of(P2P).collect();
    if p2ps.len() != 2 {
        bad.push(format!("{} P2p events, expected 2", p2ps.len()));
    }
    for p in &p2ps {
        let want_parent = if v >= 5 { P2P_API } else { GROUP };
        if parent_ty(p) != want_parent {
            bad.push(format!("P2p parent type {} (expected {want_parent})", parent_ty(p)));
        }
        let (send, recv) = if v == 1 { ("6", "7") } else { ("Send", "Recv") };
        if (p.f("func") != send && p.f("func") != recv) || p.f("count") != P2P_COUNT.to_string() {
            bad.push(format!("P2p descriptor {:?}", p.fields));
        }
    }
    // ProxyOp / ProxyStep.
    let ops: Vec<&Ev> = of(PROXY_OP).collect();
    if ops.is_empty() {
        bad.push("no ProxyOp events".into());
    }
    let mut op_sides = [0usize; 2];
    for o in &ops {
        let pt = parent_ty(o);
        if pt != COLL && pt != P2P {
            bad.push(format!("ProxyOp {} under type {pt}", o.id));
        }
        if o.f("pidok") != "1" {
            bad.push(format!("ProxyOp pid is not the process's: {:?}", o.fields));
        }
        let is_send = o.f("send") == "1";
        op_sides[is_send as usize] += 1;
        let steps: Vec<&Ev> = of(PROXY_STEP).filter(|s| s.parent == o.id).collect();
        if steps.len().to_string() != o.f("nsteps") || steps.is_empty() {
            bad.push(format!("ProxyOp {:?} has {} steps", o.fields, steps.len()));
        }
        for (i, s) in steps.iter().enumerate() {
            if s.f("step") != i.to_string() {
                bad.push(format!("step {} numbered {}", i, s.f("step")));
            }
            let st: Vec<i32> = s.states.iter().map(|x| x.0).collect();
            let want: &[i32] = match (is_send, v >= 4) {
                (true, true) => &[8, 20, 9],
                (true, false) => &[8, 9],
                (false, _) => &[10, 11, 12],
            };
            if st != want {
                bad.push(format!("ProxyStep states {st:?}, expected {want:?} (send {is_send})"));
            }
            if s.states.iter().any(|x| x.1 <= 0) {
                bad.push(format!("ProxyStep transfer sizes {:?}", s.states));
            }
        }
    }
    if op_sides[0] == 0 || op_sides[1] == 0 {
        bad.push(format!("ProxyOps by side (recv, send): {op_sides:?}"));
    }
    if of(PROXY_STEP).any(|s| parent_ty(s) != PROXY_OP) {
        bad.push("a ProxyStep is not under a ProxyOp".into());
    }
    // The socket plugin's events (net_socket_v1, id SOCK|1) under the steps (v3+).
    let net: Vec<&Ev> = of(NET_PLUGIN).collect();
    if v >= 3 {
        if net.is_empty() {
            bad.push("no NetPlugin events from the socket plugin".into());
        }
        for e in &net {
            if parent_ty(e) != PROXY_STEP || e.f("netid") != ((2 << 16) | 1).to_string() {
                bad.push(format!("NetPlugin event {:?} under type {}", e.fields, parent_ty(e)));
            }
        }
    } else if !net.is_empty() {
        bad.push(format!("{} NetPlugin events reached a v{v} plugin", net.len()));
    }
    for c in of(PROXY_CTRL) {
        if c.parent != 0 || c.states.is_empty() {
            bad.push(format!("ProxyCtrl {:?} {:?}", c.fields, c.states));
        }
    }
    bad.into_iter().map(|b| format!("{who}: {b}")).collect()
}

fn run(v: u32, nranks: usize) {
    let dir = fresh_dir(&format!("prof-v{v}"));
    let plugin = format!("recv{v}");
    let d = dir.to_string_lossy().into_owned();
    let env = [
        ("NCCL_PROFILER_PLUGIN", plugin.as_str()),
        ("PROFREC_DIR", d.as_str()),
        ("NCCL_SHM_DISABLE", "1"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT"),
    ];
    let ranks: Vec<usize> = (0..nranks).collect();
    let outs = launch(WORKER, "prof", nranks, &ranks, &env, |_| Vec::new(), LIMIT);
    assert_all_ok(&outs, &format!("profiler v{v} on {nranks} ranks"));
    assert!(
        outs.iter()
            .any(|o| o.stdout.contains("Profiler event mask") || o.stderr.contains("Profiler event mask")),
        "NCCL's 'Profiler event mask' INFO line is missing"
    );
    let logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("log dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(logs.len(), nranks, "one log per process in {}", dir.display());
    let mut bad = Vec::new();
    for f in &logs {
        let log = parse(f);
        let mut by_type: BTreeMap<u64, usize> = BTreeMap::new();
        for e in log.events.values() {
            *by_type.entry(e.ty).or_default() += 1;
        }
        println!("v{v} {}: events by type {by_type:?}", f.display());
        bad.extend(check(&log, v, nranks));
    }
    assert!(bad.is_empty(), "profiler v{v}:\n{}", bad.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same AllReduce three times on the same buffers (the second and third
/// reuse the proxy's plan and its ProxyOps, computed once): every run gets its
/// own Coll event with ProxyOps on both sides, the same (side, nSteps) as the
/// first run, each with exactly nSteps ProxySteps, every event stopped once.
#[test]
fn repeated_allreduce_profiles_every_run() {
    let dir = fresh_dir("prof-rep");
    let d = dir.to_string_lossy().into_owned();
    let env = [
        ("NCCL_PROFILER_PLUGIN", "recv6"),
        ("PROFREC_DIR", d.as_str()),
        ("NCCL_SHM_DISABLE", "1"),
    ];
    let outs = launch("rep_worker", "prof_rep", 2, &[0, 1], &env, |_| Vec::new(), LIMIT);
    assert_all_ok(&outs, "repeated AllReduce with profiler v6");
    let mut bad = Vec::new();
    let mut files = 0;
    for f in std::fs::read_dir(&dir)
        .expect("log dir")
        .map(|e| e.expect("entry").path())
    {
        files += 1;
        let log = parse(&f);
        let who = f.display().to_string();
        bad.extend(log.problems.iter().map(|p| format!("{who}: {p}")));
        let evs = &log.events;
        for e in evs.values().filter(|e| e.stops != 1) {
            bad.push(format!(
                "{who}: event {} (type {}) stopped {} times",
                e.id, e.ty, e.stops
            ));
        }
        let colls: Vec<&Ev> = evs.values().filter(|e| e.ty == COLL).collect();
        if colls.len() != REPEATS {
            bad.push(format!("{who}: {} Coll events, expected {REPEATS}", colls.len()));
        }
        let mut shapes = Vec::new();
        for c in &colls {
            let mut shape: Vec<(bool, String)> = Vec::new();
            for o in evs.values().filter(|o| o.ty == PROXY_OP && o.parent == c.id) {
                let steps = evs.values().filter(|s| s.ty == PROXY_STEP && s.parent == o.id).count();
                if steps == 0 || steps.to_string() != o.f("nsteps") {
                    bad.push(format!("{who}: ProxyOp {:?} has {steps} steps", o.fields));
                }
                shape.push((o.f("send") == "1", o.f("nsteps").to_string()));
            }
            shape.sort();
            if !shape.iter().any(|s| s.0) || !shape.iter().any(|s| !s.0) {
                bad.push(format!("{who}: Coll {} ProxyOps by side {shape:?}", c.id));
            }
            shapes.push(shape);
        }
        if shapes.windows(2).any(|w| w[0] != w[1]) {
            bad.push(format!("{who}: runs' ProxyOps differ: {shapes:?}"));
        }
    }
    assert_eq!(files, 2, "one log per process in {d}");
    assert!(bad.is_empty(), "repeated AllReduce:\n{}", bad.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn v6_event_tree_of_allreduce_and_send_recv_group() {
    run(6, 3);
}

#[test]
fn v5_event_tree() {
    run(5, 2);
}

#[test]
fn v4_event_tree_has_no_api_events() {
    run(4, 2);
}

#[test]
fn v3_v2_v1_event_trees() {
    for v in [3, 2, 1] {
        run(v, 2);
    }
}

/// The trace profiler (`plugins/profiler-trace`) on 4 ranks: each process writes
/// a Chrome trace that parses as JSON, has the AllReduce with its algorithm and
/// protocol, and nests as it should — every socket event inside its ProxyStep,
/// every ProxyStep inside its ProxyOp, every ProxyOp inside its Coll/P2p, every
/// Coll/P2p inside its Group; start ≤ stop.
#[test]
fn trace_profiler_writes_nested_chrome_traces() {
    let dir = fresh_dir("trace");
    let pattern = dir.join("trace-%h-%p.json").to_string_lossy().into_owned();
    let env = [
        ("NCCL_PROFILER_PLUGIN", "trace"),
        ("NCCL_PROFILER_TRACE_FILE", pattern.as_str()),
        ("NCCL_SHM_DISABLE", "1"),
    ];
    let nranks = 4;
    let ranks: Vec<usize> = (0..nranks).collect();
    let outs = launch(WORKER, "prof", nranks, &ranks, &env, |_| Vec::new(), LIMIT);
    assert_all_ok(&outs, "trace profiler on 4 ranks");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("trace dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(files.len(), nranks, "one trace per process: {files:?}");
    let mut ranks_seen = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.contains('%'), "{name}: %h/%p expanded");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f).expect("read")).expect("JSON");
        let evs = v["traceEvents"].as_array().expect("traceEvents");
        // (id → (cat, ts, end, name, args)) of the complete events of the tree.
        let mut by_id: HashMap<u64, (String, f64, f64, &serde_json::Value)> = HashMap::new();
        for e in evs.iter().filter(|e| e["ph"] == "X" && e["args"]["id"].is_u64()) {
            let ts = e["ts"].as_f64().expect("ts");
            let dur = e["dur"].as_f64().expect("dur");
            assert!(dur >= 0.0, "{f:?}: negative duration {e}");
            assert!(e["args"]["notStopped"].is_null(), "{f:?}: event never stopped: {e}");
            by_id.insert(
                e["args"]["id"].as_u64().unwrap(),
                (e["cat"].as_str().unwrap().to_string(), ts, ts + dur, e),
            );
        }
        let coll: Vec<_> = by_id.values().filter(|x| x.0 == "coll").collect();
        assert_eq!(coll.len(), 1, "{f:?}: one collective");
        let c = coll[0].3;
        assert_eq!(c["name"], "AllReduce");
        assert!(
            c["args"]["algorithm"] == "RING" || c["args"]["algorithm"] == "TREE",
            "{c}"
        );
        assert_eq!(c["args"]["protocol"], "SIMPLE");
        assert_eq!(c["args"]["count"], AR_COUNT);
        ranks_seen.push(c["pid"].as_i64().unwrap());
        let mut checked = [0usize; 4];
        const EPS: f64 = 1e-3;
        let links = by_id.iter().flat_map(|(id, (_, _, _, e))| {
            [e["args"]["parent"].as_u64(), e["args"]["group"].as_u64()]
                .into_iter()
                .flatten()
                .map(move |p| (*id, p))
        });
        for (id, p) in links {
            let (cat, ts, end, _) = &by_id[&id];
            let (pcat, pts, pend, _) = by_id
                .get(&p)
                .unwrap_or_else(|| panic!("{f:?}: event {id} has unknown parent {p}"));
            let slot = match (cat.as_str(), pcat.as_str()) {
                ("proxyStep", "proxyOp") => 0,
                ("proxyOp", "coll" | "p2p") => 1,
                ("coll" | "p2p", "group") => 2,
                ("net", "proxyStep") => 3,
                ("coll" | "p2p", "api") | ("api", "api") => continue,
                other => panic!("{f:?}: unexpected nesting {other:?}"),
            };
            assert!(
                *pts <= ts + EPS && end <= &(pend + EPS),
                "{f:?}: {cat} {id} [{ts}, {end}] is not inside {pcat} {p} [{pts}, {pend}]"
            );
            checked[slot] += 1;
        }
        assert!(checked.iter().all(|&n| n > 0), "{f:?}: nesting checked {checked:?}");
        // Every step carries its transfer size and its state intervals.
        let steps: Vec<_> = by_id.values().filter(|x| x.0 == "proxyStep").collect();
        assert!(
            steps
                .iter()
                .all(|s| s.3["args"]["transSize"].as_u64().is_some_and(|n| n > 0))
        );
        assert!(evs.iter().any(|e| e["name"] == "SendWait") && evs.iter().any(|e| e["name"] == "RecvWait"));
    }
    ranks_seen.sort();
    assert_eq!(ranks_seen, [0, 1, 2, 3], "one trace per rank");
    let _ = std::fs::remove_dir_all(&dir);
}
