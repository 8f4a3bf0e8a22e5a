//! The perf tool's warm-up runs the path every measured size uses before that
//! size is timed (issue 35: the first row of a default sweep was 10-60x slow).
//! Real ranks (two processes, shared memory on this host); `--show-tuning`
//! prints a `#  warm-up:` line per warm-up (size, iterations, and the
//! algorithm/protocol/channels it ran on) and a `#  tuning:` line per row.
//! Nothing here depends on timing.

use std::process::Command;

/// `(bytes, path)` of a `#  warm-up: 8 B x2: Ring/Simple (allgather+reduce) channels 1` line.
fn warm_up_line(l: &str) -> Option<(usize, String)> {
    let rest = l.strip_prefix("#  warm-up: ")?;
    let (bytes, rest) = rest.split_once(" B x")?;
    let (_, path) = rest.split_once(": ")?;
    Some((bytes.parse().ok()?, path.to_string()))
}

/// `(bytes, path)` of a `#  tuning: AllReduce 8 B: Ring/Simple (allgather+reduce) channels 1 chunk …` line.
fn tuning_line(l: &str) -> Option<(usize, String)> {
    let rest = l.strip_prefix("#  tuning: AllReduce ")?;
    let (bytes, rest) = rest.split_once(" B: ")?;
    let (path, _) = rest.split_once(" chunk ")?;
    Some((bytes.parse().ok()?, path.to_string()))
}

#[test]
fn every_size_runs_on_a_warmed_path_and_the_first_size_is_warmed() {
    // 2 KiB, 2 MiB, 64 MiB: on this host's model the smallest runs as
    // AllGather+Reduce, the middle one as a ring AllReduce on one channel, the
    // largest on two; whatever the model picks, each must have been warmed.
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferroccl-perf"));
    c.args([
        "--ranks",
        "2",
        "-b",
        "2K",
        "-e",
        "64M",
        "-f",
        "1024",
        "-w",
        "2",
        "-n",
        "1",
        "-c",
        "0",
        "--show-tuning",
        "all_reduce",
    ])
    .env("NCCL_NET_PLUGIN", "socket");
    for (k, _) in std::env::vars() {
        if (k.starts_with("NCCL_") && k != "NCCL_NET_PLUGIN") || k.starts_with("FERROCCL_") {
            c.env_remove(k);
        }
    }
    let o = c.output().expect("run ferroccl-perf");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "exit {:?}\n{out}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let mut warmed: Vec<(usize, String)> = Vec::new();
    let mut rows = 0;
    let mut first_row_seen = false;
    for l in out.lines() {
        if let Some(w) = warm_up_line(l) {
            assert!(w.1.contains("channels"), "a warm-up without a decision: {l}");
            warmed.push(w);
        } else if l.starts_with("       ") && l.split_whitespace().count() > 6 && !first_row_seen {
            // nccl-tests' order: the largest size, then the smallest, before any row.
            first_row_seen = true;
            let sizes: Vec<usize> = warmed.iter().map(|w| w.0).collect();
            assert_eq!(sizes, [64 << 20, 2048], "warm-ups before the first row:\n{out}");
        } else if let Some((bytes, path)) = tuning_line(l) {
            rows += 1;
            assert!(
                warmed.iter().any(|w| w.1 == path),
                "{bytes} B ran on {path}, which no warm-up before it ran:\n{out}"
            );
            if bytes == 2048 {
                assert_eq!(
                    warmed[1].1, path,
                    "the first size's own warm-up ran another path:\n{out}"
                );
            }
        }
    }
    assert_eq!(rows, 2, "expected rows for 2 KiB and 2 MiB:\n{out}");
}
