//! Ranks that call mismatched operations (count, datatype, reduction op, root,
//! collective) get an error, never OK with wrong data: real processes over the
//! socket plugin on loopback. The ranks that receive a mismatching operation
//! header name both calls, and every rank prints the same diagnosis.

#[path = "coll_support/mod.rs"]
mod coll_support;

use std::time::Duration;

use coll_support::{Out, join, launch, role};
use ferroccl::{DataType, Error, RedOp};

const WORKER: &str = "mismatch_worker";
const ENV_CASE: &str = "FERROCCL_TEST_MISMATCH";

/// What rank `rank` calls in scenario `case`: 1 MiB-ish operations, with the
/// last rank (or half the ranks) calling something else.
fn call(case: &str, rank: usize, nranks: usize, comm: &ferroccl::Comm) -> Result<(), Error> {
    let odd = rank == nranks - 1;
    let n = 1 << 18;
    let mut a = vec![0u8; 2 * n * 4];
    let mut b = vec![0u8; 2 * n * 4];
    let (f32s, i32s) = (DataType::Float32, DataType::Int32);
    match case {
        "count" => {
            let c = if odd { n + 1 } else { n };
            comm.all_reduce_sync(&a[..c * 4], &mut b[..c * 4], f32s, RedOp::Sum)
        }
        "small_count" => {
            let c = if odd { 3 } else { 2 };
            comm.all_reduce_sync(&a[..c * 4], &mut b[..c * 4], f32s, RedOp::Sum)
        }
        "dtype" => {
            let t = if odd { i32s } else { f32s };
            comm.all_reduce_sync(&a[..n * 4], &mut b[..n * 4], t, RedOp::Sum)
        }
        "op" => {
            let op = if odd { RedOp::Max } else { RedOp::Sum };
            comm.all_reduce_sync(&a[..n * 4], &mut b[..n * 4], f32s, op)
        }
        "root" => {
            let root = if rank < nranks / 2 { 0 } else { nranks - 1 };
            comm.broadcast_sync(&mut a[..n * 4], f32s, root)
        }
        "collective" => {
            if odd {
                comm.broadcast_sync(&mut a[..n * 4], f32s, 0)
            } else {
                comm.all_reduce_sync(&a[..n * 4], &mut b[..n * 4], f32s, RedOp::Sum)
            }
        }
        "zero_count" => {
            let c = if odd { 0 } else { 16 };
            comm.all_reduce_sync(&a[..c * 4], &mut b[..c * 4], f32s, RedOp::Sum)
        }
        other => panic!("unknown case {other}"),
    }
}

/// Child entry point.
#[test]
fn mismatch_worker() {
    let Some(r) = role("mismatch") else { return };
    let case = std::env::var(ENV_CASE).expect("case");
    let comm = join(&r, Duration::from_secs(15));
    match call(&case, r.rank, r.nranks, &comm) {
        Ok(()) => println!("RESULT ok"),
        Err(e) => println!("RESULT error {}", e.to_string().replace('\n', " | ")),
    }
    comm.abort();
}

fn run(case: &str, nranks: usize) -> Vec<Out> {
    let ranks: Vec<usize> = (0..nranks).collect();
    launch(
        WORKER,
        "mismatch",
        nranks,
        &ranks,
        &[(ENV_CASE, case)],
        |_| Vec::new(),
        Duration::from_secs(90),
    )
}

fn result(o: &Out) -> &str {
    o.stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or("<no result>")
}

/// Every rank reports an error, and at least one names both calls.
fn assert_every_rank_fails(case: &str, nranks: usize) {
    let outs = run(case, nranks);
    let report: String = outs
        .iter()
        .map(|o| format!("rank {}: {}\n", o.rank, result(o)))
        .collect();
    eprintln!("{case} on {nranks} ranks:\n{report}");
    for o in &outs {
        assert!(
            result(o).starts_with("error"),
            "{case} on {nranks} ranks: rank {} did not fail:\n{report}\n{}\n{}",
            o.rank,
            o.stdout,
            o.stderr
        );
    }
    assert!(
        outs.iter().any(|o| result(o).contains("mismatched operations: rank")),
        "{case} on {nranks} ranks: no rank named the mismatch:\n{report}"
    );
}

#[test]
fn mismatches_on_two_ranks_fail_both() {
    for case in [
        "count",
        "small_count",
        "dtype",
        "op",
        "root",
        "collective",
        "zero_count",
    ] {
        assert_every_rank_fails(case, 2);
    }
}

#[test]
fn count_and_dtype_mismatch_on_four_ranks_fail_every_rank() {
    for case in ["count", "dtype"] {
        assert_every_rank_fails(case, 4);
    }
}
