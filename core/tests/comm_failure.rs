//! Failure behaviour across processes over the socket plugin on loopback:
//! a rank killed in the middle of AllReduce, a rank that never joins, and ranks
//! that loaded different plugin versions.

#[path = "coll_support/mod.rs"]
mod coll_support;

use std::time::{Duration, Instant};

use coll_support::{all_reduce_until_error, assert_all_ok, config, dump, join, launch, launch_with_id, role};
use ferroccl::{Comm, DataType, Error, RedOp};

const WORKER: &str = "failure_worker";

/// Child entry point for every scenario below.
#[test]
fn failure_worker() {
    if let Some(r) = role("kill") {
        const TIMEOUT: Duration = Duration::from_secs(10);
        let comm = join(&r, TIMEOUT);
        if r.rank == 1 {
            // The victim dies while collectives are in flight.
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                // SAFETY: raising a signal on ourselves.
                unsafe { libc::raise(libc::SIGKILL) };
            });
        }
        let start = Instant::now();
        let (err, iters) = all_reduce_until_error(&comm, 1 << 20, |_| {});
        let detected = start.elapsed();
        println!(
            "rank {} got error after {iters} iterations ({detected:?}): {err}",
            r.rank
        );
        assert!(comm.async_error().is_some(), "async_error must report the failure");
        let t = Instant::now();
        comm.abort();
        let took = t.elapsed();
        println!("rank {}: abort took {took:?}", r.rank);
        assert!(took < Duration::from_secs(5), "abort took {took:?}");
        return;
    }
    if let Some(r) = role("stall") {
        let comm = join(&r, Duration::from_secs(2));
        if r.rank == 1 {
            // Alive but never calls the collective: only the watchdog can end rank 0's wait.
            std::thread::sleep(Duration::from_secs(8));
            comm.abort();
            return;
        }
        let send = vec![0u8; 4096];
        let mut recv = vec![0u8; 4096];
        let t = Instant::now();
        let e = comm
            .all_reduce_sync(&send, &mut recv, DataType::Float32, RedOp::Sum)
            .expect_err("must time out");
        println!("rank 0 got error after {:?}: {e}", t.elapsed());
        assert!(matches!(e, Error::Timeout(_)), "expected a timeout, got {e:?}");
        assert!(t.elapsed() < Duration::from_secs(7), "watchdog took {:?}", t.elapsed());
        comm.abort();
        return;
    }
    if let Some(r) = role("badsize") {
        // The ranks disagree on the count: every rank must get an error naming
        // both ranks' calls (checked from the operation header before any data is
        // used), none may crash or hang.
        let comm = join(&r, Duration::from_secs(10));
        let mine = 1000 + r.rank;
        let send = vec![0u8; mine * 4];
        let mut recv = vec![0u8; mine * 4];
        let e = comm
            .all_reduce_sync(&send, &mut recv, DataType::Float32, RedOp::Sum)
            .expect_err("must fail");
        println!("rank {} count {mine}: {e}", r.rank);
        assert!(matches!(e, Error::InvalidUsage(_)), "unexpected error kind: {e:?}");
        let m = e.to_string();
        assert!(
            m.contains("AllReduce #0 of 1000 x float sum") && m.contains("AllReduce #0 of 1001 x float sum"),
            "the error must name both calls: {m}"
        );
        // The communicator is now failed: later operations report the same error.
        assert!(comm.async_error().is_some());
        let again = comm.all_reduce_sync(&send, &mut recv, DataType::Float32, RedOp::Sum);
        assert!(again.is_err(), "a failed communicator must refuse new work");
        comm.abort();
        return;
    }
    if let Some(r) = role("nojoin") {
        let t = Instant::now();
        let res = Comm::init_rank(r.nranks, &r.id, r.rank, config(Duration::from_secs(3)));
        let e = res.expect_err("init must fail when a rank never joins");
        println!("rank {} init failed after {:?}: {e}", r.rank, t.elapsed());
        assert!(
            matches!(e, Error::Bootstrap(_)),
            "expected a bootstrap error, got {e:?}"
        );
        assert!(e.to_string().contains("rank 2"), "error does not name rank 2: {e}");
        return;
    }
    if let Some(r) = role("mismatch") {
        let res = Comm::init_rank(r.nranks, &r.id, r.rank, config(Duration::from_secs(20)));
        let e = res.expect_err("init must fail when ranks loaded different plugin versions");
        println!("rank {} init failed: {e}", r.rank);
        assert!(
            matches!(e, Error::PluginMismatch(_)),
            "expected PluginMismatch, got {e:?}"
        );
        let m = e.to_string();
        assert!(
            m.contains("rank 0") && m.contains("rank 1"),
            "report must list every rank: {m}"
        );
        assert!(
            m.contains("v12") && m.contains("v9"),
            "report must show both versions: {m}"
        );
    }
}

#[test]
fn killed_rank_mid_allreduce_gives_survivors_an_error_and_abort_returns() {
    let outs = launch(
        WORKER,
        "kill",
        3,
        &[0, 1, 2],
        &[],
        |_| Vec::new(),
        Duration::from_secs(120),
    );
    eprintln!("{}", dump(&outs));
    let victim = outs.iter().find(|o| o.rank == 1).expect("victim");
    assert!(!victim.success, "the victim should have been killed:\n{}", dump(&outs));
    for o in outs.iter().filter(|o| o.rank != 1) {
        assert!(o.success, "survivor rank {} failed:\n{}", o.rank, dump(&outs));
        assert!(
            o.stdout.contains("got error"),
            "survivor rank {} saw no error:\n{}",
            o.rank,
            dump(&outs)
        );
        // Configured timeout 10 s; allow scheduling slack on a loaded machine.
        let after = o.elapsed.saturating_sub(victim.elapsed);
        assert!(
            after < Duration::from_secs(20),
            "survivor rank {} needed {after:?} after the kill",
            o.rank
        );
    }
}

#[test]
fn stalled_peer_trips_the_watchdog() {
    let outs = launch(
        WORKER,
        "stall",
        2,
        &[0, 1],
        &[],
        |_| Vec::new(),
        Duration::from_secs(60),
    );
    assert_all_ok(&outs, "stalled peer");
    eprintln!("{}", outs[0].stdout);
    assert!(outs[0].stdout.contains("got error"), "{}", dump(&outs));
}

#[test]
fn mismatched_counts_are_an_error_on_every_rank() {
    let outs = launch(
        WORKER,
        "badsize",
        2,
        &[0, 1],
        &[],
        |_| Vec::new(),
        Duration::from_secs(60),
    );
    eprintln!("{}", dump(&outs));
    assert_all_ok(&outs, "mismatched counts");
}

#[test]
fn rank_that_never_joins_is_named_in_the_bootstrap_error() {
    // The root lives in this process; give it the ranks' 3 s timeout.
    let id =
        ferroccl::get_unique_id(&ferroccl::bootstrap::BootstrapConfig::loopback(Duration::from_secs(3))).expect("id");
    let outs = launch_with_id(
        &id,
        WORKER,
        "nojoin",
        3,
        &[0, 1],
        &[],
        |_| Vec::new(),
        Duration::from_secs(60),
    );
    assert_all_ok(&outs, "ranks 0 and 1 without rank 2");
    for o in &outs {
        eprintln!(
            "{}",
            o.stdout
                .lines()
                .filter(|l| l.contains("failed"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[test]
fn plugin_version_mismatch_fails_init_on_every_rank() {
    let outs = launch(
        WORKER,
        "mismatch",
        2,
        &[0, 1],
        &[],
        |r| {
            if r == 1 {
                vec![("FERROCCL_NET_MAX_VERSION".into(), "9".into())]
            } else {
                Vec::new()
            }
        },
        Duration::from_secs(60),
    );
    assert_all_ok(&outs, "plugin mismatch");
    for o in &outs {
        assert!(
            o.elapsed < Duration::from_secs(20),
            "rank {} took {:?} to fail",
            o.rank,
            o.elapsed
        );
    }
}
