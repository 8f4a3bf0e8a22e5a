//! The `NCCL_DEBUG_SUBSYS=TUNING` table exactly as `ncclTopoTuneModel` prints it
//! (reference `docs/reference/nccl-graph-tuning.md` §3.3): algorithms in blocks of three, each
//! block an `Algorithm` line (names centred over their three protocol cells), a
//! `Protocol` line, a ` Max NThreads` line and one `latency/bandwidth` line per
//! function.

use super::model::Model;
use crate::coll::ids::{ALGO_NAMES, FUNC_NAMES, NUM_ALGOS, PROTO_NAMES};

/// The table's lines (without NCCL's `host:pid:tid [rank] NCCL INFO ` prefix).
pub fn lines(m: &Model) -> Vec<String> {
    let mut out = Vec::new();
    for block in 0..NUM_ALGOS.div_ceil(3) {
        let algos = || (0..3).map(move |ba| block * 3 + ba).filter(|&a| a < NUM_ALGOS);
        let mut line = String::from("  Algorithm   |");
        for a in algos() {
            line.push_str(&format!(" {:>14}   {:>14}   {:>14} |", "", ALGO_NAMES[a], ""));
        }
        out.push(line);
        // NCCL prints the protocol header for three algorithms even in a short block.
        let mut line = String::from("  Protocol    |");
        for _ in 0..3 {
            for p in PROTO_NAMES {
                line.push_str(&format!(" {p:>14} |"));
            }
        }
        out.push(line);
        let mut line = String::from(" Max NThreads |");
        for a in algos() {
            for p in 0..3 {
                line.push_str(&format!(" {:>14} |", m.max_threads[a][p]));
            }
        }
        out.push(line);
        for (f, fname) in FUNC_NAMES.iter().enumerate() {
            let mut line = format!("{fname:>13} |");
            for a in algos() {
                for p in 0..3 {
                    line.push_str(&format!(
                        "{:>8.1}/{:>6.1} |",
                        m.latencies[f][a][p], m.bandwidths[f][a][p]
                    ));
                }
            }
            out.push(line);
        }
    }
    out
}

/// NCCL's `threadThresholds` INFO/INIT line.
pub fn thread_thresholds_line(m: &Model) -> String {
    let t = &m.thread_thresholds;
    format!(
        "threadThresholds {}/{}/{} | {}/{}/{} | {} | {}",
        t[0][0], t[0][1], t[0][2], t[1][0], t[1][1], t[1][2], t[2][2], t[3][2]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::ids::{NUM_FUNCS, NUM_PROTOS};

    #[test]
    fn layout_matches_nccl() {
        let mut m = Model {
            bandwidths: [[[0.0; NUM_PROTOS]; NUM_ALGOS]; NUM_FUNCS],
            latencies: [[[0.0; NUM_PROTOS]; NUM_ALGOS]; NUM_FUNCS],
            max_threads: [[512, 640, 512]; NUM_ALGOS],
            thread_thresholds: [[8, 8, 64]; NUM_ALGOS],
            nranks: 2,
            nnodes: 1,
            nchannels: 2,
            min_compcap: 0,
            cpu_arch: crate::tune::model::CpuArch::X86,
            notes: Vec::new(),
        };
        m.latencies[4][1][2] = 12.5;
        m.bandwidths[4][1][2] = 1.25;
        let l = lines(&m);
        // 3 blocks × (3 header lines + 5 functions).
        assert_eq!(l.len(), 24);
        assert_eq!(
            l[0],
            format!(
                "  Algorithm   |{}",
                ["Tree", "Ring", "CollNetDirect"]
                    .iter()
                    .map(|a| format!(" {:>14}   {:>14}   {:>14} |", "", a, ""))
                    .collect::<String>()
            )
        );
        assert_eq!(l[1].matches("LL128").count(), 3);
        assert!(l[2].starts_with(" Max NThreads |            512 |            640 |"));
        assert!(l[7].starts_with("    AllReduce |     0.0/   0.0 |     0.0/   0.0 |     0.0/   0.0 |     0.0/   0.0 |     0.0/   0.0 |    12.5/   1.2 |"), "{}", l[7]);
        // The last block has PAT only, but still nine protocol cells.
        assert_eq!(l[16].matches('|').count(), 2);
        assert_eq!(l[17].matches('|').count(), 10);
        assert_eq!(l[18].matches('|').count(), 4);
        assert_eq!(thread_thresholds_line(&m), "threadThresholds 8/8/64 | 8/8/64 | 64 | 64");
    }
}
