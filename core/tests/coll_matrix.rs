//! Every collective × every datatype × every reduction × in/out of place against a
//! sequential reference, on 1–4 ranks (full matrix) and 8 ranks (smaller
//! matrix), each rank its own process, over the real socket plugin on loopback.
//! Counts include 0, 1, primes and sizes that are not multiples of
//! channels × ranks; a small `NCCL_BUFFSIZE` and `FERROCCL_MIN_CHANNEL_BYTES`
//! make even these counts span several slices, loops and both channels.
//! `FERROCCL_NET_USER_SEND_MIN` varies per rank count so both send paths are
//! checked everywhere: 2 and 8 ranks use the default (larger operations send
//! from registered user memory, smaller ones copy through the FIFO), 3 ranks send
//! from user memory whenever a step allows it, 4 ranks always copy. Tree
//! AllReduce (`NCCL_ALGO=allreduce:tree`) runs the matrix on 3 and 5 ranks.

mod coll_support;

use std::time::Duration;

use coll_support::{assert_all_ok, join, launch, role, run_matrix};
use ferroccl::{DataType, RedOp};

const WORKER: &str = "matrix_worker";
const LIMIT: Duration = Duration::from_secs(240);

/// Child entry point (does nothing when run as a normal test).
#[test]
fn matrix_worker() {
    let Some(r) = role("matrix") else { return };
    let comm = join(&r, Duration::from_secs(60));
    let small = std::env::var("MATRIX_SMALL").is_ok();
    let (fails, ran) = if small {
        run_matrix(
            &comm,
            &DataType::ALL,
            Some(&[
                RedOp::Sum,
                RedOp::Avg,
                RedOp::Min,
                RedOp::PreMulSum(ferroccl::Scalar::from_f64(DataType::Float32, 2.0)),
            ]),
            &[0, 1, 1031],
        )
    } else {
        run_matrix(&comm, &DataType::ALL, None, &[0, 1, 13, 1031, 6007, 40009])
    };
    println!("rank {}: {ran} operations, {} failures", r.rank, fails.len());
    assert!(fails.is_empty(), "{}", fails.join("\n"));
    comm.destroy().expect("destroy");
}

fn run(nranks: usize, small: bool, user_send_min: Option<&'static str>) {
    run_with(nranks, small, user_send_min, &[]);
}

fn run_with(nranks: usize, small: bool, user_send_min: Option<&'static str>, extra: &[(&'static str, &'static str)]) {
    let mut env = vec![
        ("NCCL_BUFFSIZE", "65536"),
        ("FERROCCL_MIN_CHANNEL_BYTES", "4096"),
        ("NCCL_MAX_NCHANNELS", "2"),
    ];
    if small {
        env.push(("MATRIX_SMALL", "1"));
    }
    if let Some(v) = user_send_min {
        env.push(("FERROCCL_NET_USER_SEND_MIN", v));
    }
    env.extend_from_slice(extra);
    let ranks: Vec<usize> = (0..nranks).collect();
    let outs = launch(WORKER, "matrix", nranks, &ranks, &env, |_| Vec::new(), LIMIT);
    assert_all_ok(&outs, &format!("matrix on {nranks} ranks"));
    for o in &outs {
        eprintln!(
            "rank {} ({:?}): {}",
            o.rank,
            o.elapsed,
            o.stdout
                .lines()
                .filter(|l| l.contains("operations"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    for o in &outs {
        assert!(
            o.stdout.contains("0 failures"),
            "rank {} printed no summary:\n{}",
            o.rank,
            o.stdout
        );
    }
}

#[test]
fn matrix_1_rank() {
    run(1, false, None);
}

#[test]
fn matrix_2_ranks() {
    run(2, false, None);
}

#[test]
fn matrix_3_ranks() {
    run(3, false, Some("0"));
}

#[test]
fn matrix_4_ranks() {
    run(4, false, Some("-1"));
}

#[test]
fn matrix_8_ranks_small() {
    run(8, true, None);
}

/// AllReduce over the tree (the other collectives stay on the ring): a chain
/// of 3 ranks sending from user memory where steps allow, and 5 ranks.
#[test]
fn matrix_tree_3_ranks() {
    run_with(3, false, Some("0"), &[("NCCL_ALGO", "allreduce:tree")]);
}

#[test]
fn matrix_tree_5_ranks_small() {
    run_with(5, true, None, &[("NCCL_ALGO", "allreduce:tree")]);
}

/// Channels from the search over a topology file: a first run dumps the
/// detected topology (`NCCL_TOPO_DUMP_FILE`), a second one starts from it
/// (`NCCL_TOPO_FILE`), as an operator pinning a machine's topology would.
#[test]
fn matrix_3_ranks_small_with_topo_file() {
    let dir = std::env::temp_dir().join(format!("ferroccl-topo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("topo.xml");
    let path: &'static str = Box::leak(file.display().to_string().into_boxed_str());
    run_with(3, true, None, &[("NCCL_TOPO_DUMP_FILE", path)]);
    let xml = std::fs::read_to_string(&file).expect("rank 0 dumped the topology");
    assert!(xml.contains("<system") && xml.contains("<gpu"), "{xml}");
    run_with(3, true, None, &[("NCCL_TOPO_FILE", path)]);
    let _ = std::fs::remove_dir_all(&dir);
}
