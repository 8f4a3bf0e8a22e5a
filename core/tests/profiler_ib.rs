//! The IB plugin's profiler events (`net_ib_v1`) over real verbs: two processes
//! run an AllReduce and a send/receive group through `libnccl_net_ib.so`
//! (strict, no fallback; shared memory disabled, so every connection is NET)
//! with the recording C profiler (`ncclProfiler_v6`), and the test checks the
//! logged tree: every `ncclProfileQp` event (plugin id `NCCL_PROFILER_NET_TYPE_IB
//! | 1`) hangs under a ProxyStep started before it, is stopped exactly once, and
//! carries NCCL's descriptor (reference `docs/reference/nccl-graph-tuning.md` §6.6): on a send
//! step one event per QP with opcode `IBV_WR_RDMA_WRITE_WITH_IMM`, the QP number
//! and lengths summing to the step's transfer size; on a receive step one event
//! per QP with the QP number only.
//!
//! Needs an RDMA device (`/sys/class/infiniband`: a real HCA, or soft-RoCE in the
//! VM stage of `scripts/ib-vm-test.sh`); elsewhere it says why it skipped and
//! passes, unless `IB_VM_REQUIRE=1` (set by the VM stage).

mod coll_support;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use coll_support::{all_reduce_then_ring_exchange, assert_all_ok, fresh_dir, join, launch, role, target_dir};

const WORKER: &str = "profib_worker";
const COUNT: usize = 300_000;
const P2P_COUNT: usize = 70_000;
/// `IBV_WR_RDMA_WRITE_WITH_IMM` (`enum ibv_wr_opcode`).
const WRITE_WITH_IMM: &str = "1";

/// Child entry point (does nothing when run as a normal test).
#[test]
fn profib_worker() {
    let Some(r) = role("profib") else { return };
    let comm = join(&r, Duration::from_secs(60));
    all_reduce_then_ring_exchange(&comm, &r, COUNT, 7, P2P_COUNT, 5);
    comm.destroy().expect("destroy");
}

#[derive(Debug, Default)]
struct Ev {
    ty: u64,
    parent: u64,
    f: HashMap<String, String>,
    states: Vec<(i32, i64)>,
    stops: usize,
}

fn parse(text: &str, bad: &mut Vec<String>) -> BTreeMap<u64, Ev> {
    let mut evs: BTreeMap<u64, Ev> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let parts: Vec<&str> = line.split(' ').collect();
        let f: HashMap<String, String> = parts[1..]
            .iter()
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let id = f.get("id").and_then(|v| v.parse::<u64>().ok());
        match (parts[0], id) {
            ("start", Some(id)) => {
                let parent = f.get("parent").and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
                if parent != 0 && !evs.contains_key(&parent) {
                    bad.push(format!("line {n}: parent not started before: {line}"));
                }
                let ty = f.get("type").and_then(|v| v.parse().ok()).unwrap_or(0);
                evs.insert(
                    id,
                    Ev {
                        ty,
                        parent,
                        f,
                        ..Ev::default()
                    },
                );
            }
            ("state", Some(id)) => match evs.get_mut(&id) {
                Some(e) => e
                    .states
                    .push((f["st"].parse().unwrap_or(-1), f["size"].parse().unwrap_or(-1))),
                None => bad.push(format!("line {n}: state of an unknown event: {line}")),
            },
            ("stop", Some(id)) => match evs.get_mut(&id) {
                Some(e) => e.stops += 1,
                None => bad.push(format!("line {n}: stop of an unknown event: {line}")),
            },
            ("init" | "finalize", _) => {}
            _ => bad.push(format!("line {n}: unexpected: {line}")),
        }
    }
    evs
}

#[test]
fn ib_plugin_emits_qp_events_under_their_proxy_steps() {
    let devs: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    if devs.is_empty() {
        assert!(
            std::env::var("IB_VM_REQUIRE").is_err(),
            "IB_VM_REQUIRE is set but /sys/class/infiniband has no device"
        );
        eprintln!("SKIPPED: no RDMA device in /sys/class/infiniband (no HCA, rdma_rxe not loaded)");
        return;
    }
    let so = target_dir().join("libnccl_net_ib.so");
    assert!(so.is_file(), "{} missing: cargo build -p ferroccl-net-ib", so.display());
    let dir = fresh_dir("profib");
    let d = dir.to_string_lossy().into_owned();
    let so_s = so.to_string_lossy().into_owned();
    let env = [
        ("NCCL_NET_PLUGIN", so_s.as_str()),
        ("FERROCCL_NET_STRICT", "1"),
        ("NCCL_SHM_DISABLE", "1"),
        ("NCCL_PROFILER_PLUGIN", "recv6"),
        ("PROFREC_DIR", d.as_str()),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT,NET"),
    ];
    let outs = launch(
        WORKER,
        "profib",
        2,
        &[0, 1],
        &env,
        |_| Vec::new(),
        Duration::from_secs(600),
    );
    assert_all_ok(
        &outs,
        "AllReduce and send/recv over the IB plugin with the recording profiler",
    );
    assert!(
        outs.iter()
            .all(|o| o.stdout.contains("FerrocclIB") || o.stderr.contains("FerrocclIB")),
        "the IB plugin was not the one used"
    );
    let logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("log dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(logs.len(), 2, "{logs:?}");
    let mut bad = Vec::new();
    for file in &logs {
        let who = file.display().to_string();
        let mut b = Vec::new();
        let evs = parse(&std::fs::read_to_string(file).expect("read log"), &mut b);
        let ty_of = |id: u64| evs.get(&id).map_or(0, |e| e.ty);
        let mut qp_events = [0usize; 2];
        for (id, e) in &evs {
            if e.stops != 1 {
                b.push(format!("event {id} (type {}) stopped {} times", e.ty, e.stops));
            }
            if e.ty != 16 {
                continue;
            }
            // A ProxyStep: its IB events.
            let Some(op) = evs.get(&e.parent).filter(|o| o.ty == 8) else {
                b.push(format!("ProxyStep {id} is not under a ProxyOp"));
                continue;
            };
            let is_send = op.f.get("send").map(String::as_str) == Some("1");
            let kids: Vec<&Ev> = evs.values().filter(|k| k.parent == *id && k.ty == 128).collect();
            if kids.is_empty() {
                b.push(format!("ProxyStep {id} (send {is_send}) has no IB event"));
                continue;
            }
            qp_events[is_send as usize] += kids.len();
            for k in &kids {
                let g = |key: &str| k.f.get(key).map_or("", String::as_str);
                let ok = g("netid") == ((1 << 16) | 1).to_string()
                    && g("ntype") == "1"
                    && g("dev") == "0"
                    && g("qp").parse::<i64>().unwrap_or(0) > 0
                    && if is_send {
                        g("op") == WRITE_WITH_IMM
                    } else {
                        g("op") == "0" && g("len") == "0"
                    };
                if !ok {
                    b.push(format!("IB event under step {id} (send {is_send}): {:?}", k.f));
                }
            }
            if is_send {
                // The QPs' shares add up to the bytes the step sent (SendWait's transSize).
                let sent = e.states.iter().find(|s| s.0 == 9).map_or(-1, |s| s.1);
                let sum: i64 = kids
                    .iter()
                    .map(|k| k.f.get("len").and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1))
                    .sum();
                if sum != sent {
                    b.push(format!("step {id}: QP lengths sum to {sum}, the step sent {sent}"));
                }
            }
        }
        for e in evs.values().filter(|e| e.ty == 128) {
            if ty_of(e.parent) != 16 {
                b.push(format!("NetPlugin event under type {}: {:?}", ty_of(e.parent), e.f));
            }
        }
        println!("{who}: IB events on (recv, send) steps: {qp_events:?}");
        if qp_events[0] == 0 || qp_events[1] == 0 {
            b.push(format!("IB events by side (recv, send): {qp_events:?}"));
        }
        bad.extend(b.into_iter().map(|x| format!("{who}: {x}")));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
