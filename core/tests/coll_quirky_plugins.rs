//! The collective matrix over third-party-style C plugins that NCCL runs but that
//! a host can trip over (testing/zoo-quirky, built from conformance/zoo/zoo_net.c):
//!
//! * `libnccl-net-zoo-no-sizes.so`: `test()` never writes the received sizes.
//!   NCCL 2.30.7 only reads receive sizes for GPU flushes and the profiler
//!   (net.cc `recvProxyProgress`), so collectives must work.
//! * `libnccl-net-zoo-oldest-test.so`: `test()` refuses any request but the oldest
//!   outstanding one of its comm. NCCL only ever tests that one
//!   (`sendProxyProgress`/`recvProxyProgress`).
//!
//! Each rank is its own process (core/tests/coll_support) on loopback, with the
//! plugin named by path in `NCCL_NET_PLUGIN`.

mod coll_support;

use std::path::PathBuf;
use std::time::Duration;

use coll_support::{assert_all_ok, join, launch, role, run_matrix, target_dir};
use ferroccl::{DataType, RedOp};

const WORKER: &str = "quirky_worker";
const LIMIT: Duration = Duration::from_secs(240);

/// The zoo plugin `name`, built by the ferroccl-zoo-quirky dev-dependency.
fn zoo(name: &str) -> PathBuf {
    let p = target_dir().join(format!("libnccl-net-zoo-{name}.so"));
    assert!(
        p.exists(),
        "{} is not built: run `cargo build --workspace` (testing/zoo-quirky builds it)",
        p.display()
    );
    p
}

/// Child entry point (does nothing when run as a normal test).
#[test]
fn quirky_worker() {
    let Some(r) = role("quirky") else { return };
    let comm = join(&r, Duration::from_secs(60));
    let (fails, ran) = run_matrix(
        &comm,
        &[DataType::Float32, DataType::Int8, DataType::Float64],
        Some(&[RedOp::Sum, RedOp::Max]),
        &[0, 1, 1031, 20011],
    );
    println!("rank {}: {ran} operations, {} failures", r.rank, fails.len());
    assert!(fails.is_empty(), "{}", fails.join("\n"));
    comm.destroy().expect("destroy");
}

fn run(name: &str, nranks: usize) {
    let so = zoo(name);
    let so = so.to_str().expect("utf-8 path");
    let env = [
        ("NCCL_NET_PLUGIN", so),
        ("NCCL_NET", "Zoo"),
        // Small buffers and channels so even these counts take many steps.
        ("NCCL_BUFFSIZE", "65536"),
        ("FERROCCL_MIN_CHANNEL_BYTES", "4096"),
        ("NCCL_MAX_NCHANNELS", "2"),
    ];
    let ranks: Vec<usize> = (0..nranks).collect();
    let outs = launch(WORKER, "quirky", nranks, &ranks, &env, |_| Vec::new(), LIMIT);
    assert_all_ok(&outs, &format!("collective matrix over zoo-{name} on {nranks} ranks"));
    for o in &outs {
        assert!(
            o.stdout.contains(" 0 failures"),
            "rank {} printed no summary:\n{}",
            o.rank,
            o.stdout
        );
    }
}

#[test]
fn matrix_over_a_plugin_that_never_reports_sizes() {
    run("no-sizes", 3);
}

#[test]
fn matrix_over_a_plugin_that_tests_only_the_oldest_request() {
    run("oldest-test", 3);
}
