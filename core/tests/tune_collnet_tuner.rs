//! A tuner plugin choosing CollNet, as NCCL 2.30.7 lets one (`src/enqueue.cc`:
//! `updateCollCostTable` fills the CollNetDirect/CollNetChain rows only when
//! `collNetSupport == 1` and leaves them at `NCCL_ALGO_PROTO_IGNORE` (-1) otherwise;
//! the tuner's `getCollInfo` then edits the table and `topoGetAlgoInfo` takes the
//! cheapest entry that is not ignored).
//!
//! Two processes on two "hosts" (`NCCL_HOSTID`) over the in-tree CollNet plugin
//! (`libnccl_net_collnet_socket.so`), with the C test tuner (`testing/tuner-c`,
//! `libnccl-tuner-cv5.so`) forcing CollNetChain/Simple (`CTUNER_FORCE=3,2`, which
//! sets the entry to 0.0 unless it is -1) and logging the table it received:
//!
//! * with `NCCL_COLLNET_ENABLE=1` CollNet is connected, the CollNetChain/Simple
//!   entry reaches the tuner as a cost, the tuner's choice is taken for a 16 MiB
//!   AllReduce (where the model alone prices another entry lower: CollNetDirect,
//!   whose bandwidth NCCL's model raises with one rank per node), and the
//!   results are correct;
//! * without it, the CollNet rows reach the tuner as -1, so the forced entry is
//!   ignored and the model's choice stands (no CollNet algorithm).

mod coll_support;

use std::time::Duration;

use coll_support::{Out, assert_all_ok, dump, join, launch, role, target_dir};
use ferroccl::tune::{Algorithm, Func};
use ferroccl::{DataType, RedOp};

const WORKER: &str = "collnet_tuner_worker";
const LIMIT: Duration = Duration::from_secs(240);
/// 16 MiB of f32: large enough that the model alone picks Ring on 2 ranks.
const COUNT: usize = 4 << 20;

/// One rank: a 16 MiB f32 sum AllReduce, checked, then the decision printed.
#[test]
fn collnet_tuner_worker() {
    let Some(r) = role(WORKER) else { return };
    let comm = join(&r, Duration::from_secs(60));
    let send: Vec<u8> = (0..COUNT)
        .flat_map(|i| (((i % 97) + r.rank) as f32).to_ne_bytes())
        .collect();
    let mut recv = vec![0u8; send.len()];
    comm.all_reduce_sync(&send, &mut recv, DataType::Float32, RedOp::Sum)
        .expect("all_reduce");
    for (i, c) in recv.chunks_exact(4).enumerate() {
        let v = f32::from_ne_bytes(c.try_into().expect("4 bytes"));
        let want = (2 * (i % 97) + 1) as f32;
        assert!(v == want, "rank {}: element {i} = {v}, want {want}", r.rank);
    }
    let d = comm.tuning().last(Func::AllReduce).expect("a decision");
    println!("DECISION algo={:?} by_tuner={}", d.algo, d.by_tuner);
    comm.destroy().expect("destroy");
}

/// Runs the two ranks; `collnet` sets `NCCL_COLLNET_ENABLE=1`. Returns the outputs
/// and each rank's tuner log.
fn run(tag: &str, collnet: bool) -> (Vec<Out>, Vec<String>) {
    let dir = std::env::temp_dir().join(format!("ferroccl-collnet-tuner-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let tuner = target_dir().join("libnccl-tuner-cv5.so");
    let plugin = target_dir().join("libnccl_net_collnet_socket.so");
    for f in [&tuner, &plugin] {
        assert!(
            f.is_file(),
            "{} missing (built by `cargo build --workspace`)",
            f.display()
        );
    }
    let (tuner, plugin) = (tuner.display().to_string(), plugin.display().to_string());
    let mut env = vec![
        ("NCCL_NET_PLUGIN", plugin.as_str()),
        ("NCCL_TUNER_PLUGIN", tuner.as_str()),
        ("CTUNER_FORCE", "3,2"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT,TUNING"),
    ];
    if collnet {
        env.push(("NCCL_COLLNET_ENABLE", "1"));
    }
    let logs = dir.clone();
    let outs = launch(
        WORKER,
        WORKER,
        2,
        &[0, 1],
        &env,
        move |r| {
            vec![
                ("NCCL_HOSTID".into(), format!("host{r}")),
                (
                    "CTUNER_LOG".into(),
                    logs.join(format!("rank{r}.log")).display().to_string(),
                ),
            ]
        },
        LIMIT,
    );
    assert_all_ok(&outs, tag);
    let tables = (0..2)
        .map(|r| std::fs::read_to_string(dir.join(format!("rank{r}.log"))).unwrap_or_default())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    (outs, tables)
}

/// The 16 MiB AllReduce's table (func 4; Tree, Ring, CollNetDirect, CollNetChain …
/// × LL, LL128, Simple) in a tuner log, as the tuner received it.
fn table(log: &str, what: &str) -> Vec<f32> {
    let line = log
        .lines()
        .find(|l| l.contains("func=4 nBytes=16777216"))
        .unwrap_or_else(|| panic!("{what}: the tuner saw no 16 MiB AllReduce:\n{log}"));
    let table: Vec<f32> = line
        .split("table=")
        .nth(1)
        .expect("table")
        .split(',')
        .map(|v| v.trim().parse().expect("float"))
        .collect();
    assert_eq!(table.len(), 7 * 3, "{what}: {line}");
    table
}

/// The row of `algo` in [`table`].
fn row_of(log: &str, what: &str, algo: Algorithm) -> [f32; 3] {
    let t = table(log, what);
    let c = algo as usize * 3;
    [t[c], t[c + 1], t[c + 2]]
}

#[test]
fn a_tuner_picks_collnet_chain_when_collnet_is_connected() {
    let (outs, logs) = run("on", true);
    for o in &outs {
        println!(
            "rank {}: {}",
            o.rank,
            o.stdout.lines().find(|l| l.starts_with("DECISION")).unwrap_or_default()
        );
        assert!(
            o.stdout.contains("DECISION algo=CollNetChain by_tuner=true"),
            "rank {}: the tuner's CollNetChain was not taken:\n{}",
            o.rank,
            dump(&outs)
        );
        assert!(
            o.stdout.contains("CollNet enabled"),
            "rank {}:\n{}",
            o.rank,
            dump(&outs)
        );
    }
    assert!(
        outs.iter().any(|o| o
            .stdout
            .contains("AllReduce: 16777216 Bytes -> Algo CollNetChain proto Simple")),
        "rank 0's tuning INFO line:\n{}",
        dump(&outs)
    );
    for (r, log) in logs.iter().enumerate() {
        let row = row_of(log, &format!("rank {r}"), Algorithm::CollNetChain);
        println!("rank {r}: CollNetChain row (LL, LL128, Simple) {row:?}");
        // CollNetChain runs the Simple protocol only (NCCL's ncclTopoTuneModel).
        assert!(
            row[2] >= 0.0,
            "rank {r}: CollNetChain/Simple reached the tuner as {row:?}"
        );
        // The model alone would not have picked it: another entry is cheaper.
        let best = table(log, "best")
            .into_iter()
            .filter(|&v| v >= 0.0)
            .fold(f32::INFINITY, f32::min);
        assert!(
            best < row[2],
            "rank {r}: cheapest entry {best} vs CollNetChain/Simple {}",
            row[2]
        );
    }
}

#[test]
fn without_collnet_the_tuner_sees_collnet_as_ignored_and_cannot_pick_it() {
    let (outs, logs) = run("off", false);
    for o in &outs {
        let line = o.stdout.lines().find(|l| l.starts_with("DECISION")).unwrap_or_default();
        println!("rank {}: {line}", o.rank);
        assert!(
            !line.is_empty() && !line.contains("CollNet"),
            "rank {}: {line:?}\n{}",
            o.rank,
            dump(&outs)
        );
    }
    for (r, log) in logs.iter().enumerate() {
        for algo in [Algorithm::CollNetDirect, Algorithm::CollNetChain] {
            let row = row_of(log, &format!("rank {r}"), algo);
            println!("rank {r}: {algo:?} row (LL, LL128, Simple) {row:?}");
            assert_eq!(row, [-1.0; 3], "rank {r}: {algo:?} without CollNet");
        }
    }
}
