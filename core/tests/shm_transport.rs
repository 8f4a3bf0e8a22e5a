//! The transports across processes: the collective matrix over the network
//! only (`NCCL_SHM_DISABLE=1`), over shared memory with the LL protocol, and with
//! ranks split between two "hosts" (`NCCL_HOSTID`) so that some peers use shared
//! memory and others the network; NCCL's per-connection INFO lines; no transport
//! at all; peers killed or stopped in the middle of collectives over shared
//! memory (every survivor gets an error naming the culprit); and no `/dev/shm`
//! entry left behind after success, failure, or SIGKILL of every rank. (The
//! plain matrix in `coll_matrix.rs` runs over shared memory, the default between
//! local ranks.)

mod coll_support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use coll_support::{
    ENV_ID, ENV_NRANKS, ENV_RANK, ENV_ROLE, Out, assert_all_ok, config, join, launch, role, run_matrix,
};
use ferroccl::bootstrap::{BootstrapConfig, get_unique_id};
use ferroccl::{Comm, DataType, Error, RedOp, Stream};

const WORKER: &str = "shm_worker";
const LIMIT: Duration = Duration::from_secs(240);

fn dump(outs: &[Out]) -> String {
    outs.iter()
        .map(|o| {
            format!(
                "--- rank {} ({:?}, success {}, code {:?})\nstdout:\n{}\nstderr:\n{}",
                o.rank, o.elapsed, o.success, o.code, o.stdout, o.stderr
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs AllReduce in a loop until it fails; returns the error and how many ran.
fn allreduce_until_error(comm: &Comm, limit: Duration) -> (Error, usize) {
    let count = 1 << 18;
    let send = vec![1u8; count * 4];
    let mut recv = vec![0u8; count * 4];
    let s = Stream::new();
    let start = Instant::now();
    let mut iters = 0;
    loop {
        // SAFETY: the buffers outlive the synchronize.
        let r = unsafe {
            comm.all_reduce(
                send.as_ptr(),
                recv.as_mut_ptr(),
                count,
                DataType::Float32,
                RedOp::Sum,
                &s,
            )
        };
        if let Err(e) = r.and_then(|_| s.synchronize()) {
            return (e, iters);
        }
        iters += 1;
        if iters == 3 {
            println!("looping");
        }
        assert!(start.elapsed() < limit, "no error after {iters} iterations");
    }
}

/// Child entry point for every scenario below.
#[test]
fn shm_worker() {
    if let Some(r) = role("matrix") {
        let comm = join(&r, Duration::from_secs(60));
        let small = std::env::var("MATRIX_SMALL").is_ok();
        let (fails, ran) = if small {
            run_matrix(&comm, &DataType::ALL, Some(&[RedOp::Sum, RedOp::Avg]), &[0, 1, 1031])
        } else {
            run_matrix(&comm, &DataType::ALL, None, &[0, 1, 13, 1031, 6007, 40009])
        };
        println!("rank {}: {ran} operations, {} failures", r.rank, fails.len());
        for (t, n) in comm.transports() {
            println!("transport {t} x{n}");
        }
        assert!(fails.is_empty(), "{}", fails.join("\n"));
        comm.destroy().expect("destroy");
        return;
    }
    if let Some(r) = role("notransport") {
        let e = Comm::init_rank(r.nranks, &r.id, r.rank, config(Duration::from_secs(20)))
            .expect_err("init must fail without a transport");
        println!("rank {} init failed: {e}", r.rank);
        assert!(e.to_string().contains("No transport found"), "{e}");
        return;
    }
    if let Some(r) = role("kill") {
        let comm = join(&r, Duration::from_secs(30));
        if r.rank == 1 {
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                // SAFETY: raising a signal on ourselves.
                unsafe { libc::raise(libc::SIGKILL) };
            });
        }
        let t = Instant::now();
        let (e, iters) = allreduce_until_error(&comm, Duration::from_secs(60));
        println!(
            "rank {} got error after {iters} iterations ({:?}): {e}",
            r.rank,
            t.elapsed()
        );
        comm.abort();
        return;
    }
    if let Some(r) = role("stop") {
        let comm = join(&r, Duration::from_secs(6));
        if r.rank == 1 {
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                // SAFETY: raising a signal on ourselves (a survivor kills us later).
                unsafe { libc::raise(libc::SIGSTOP) };
            });
        }
        let (e, iters) = allreduce_until_error(&comm, Duration::from_secs(60));
        println!("rank {} got error after {iters} iterations: {e}", r.rank);
        // Clean up the stopped rank: its pid is in the message.
        let m = e.to_string();
        if let Some(pid) = m
            .split("(pid ")
            .nth(1)
            .and_then(|t| t.split(')').next())
            .and_then(|p| p.parse::<i32>().ok())
        {
            // SAFETY: signalling the stopped test rank named by the error.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        comm.abort();
        return;
    }
    if let Some(r) = role("loop") {
        // Runs until killed by the test.
        let comm = join(&r, Duration::from_secs(60));
        let (e, _) = allreduce_until_error(&comm, Duration::from_secs(120));
        println!("rank {} got error: {e}", r.rank);
    }
}

/// Runs the matrix on `nranks` ranks with `env` and `per_rank` settings; returns
/// every rank's transport lines.
fn matrix(
    nranks: usize,
    small: bool,
    env: &[(&str, &str)],
    per_rank: impl Fn(usize) -> Vec<(String, String)>,
) -> Vec<Out> {
    let mut all = vec![
        ("NCCL_BUFFSIZE", "65536"),
        ("FERROCCL_MIN_CHANNEL_BYTES", "4096"),
        ("NCCL_MAX_NCHANNELS", "2"),
    ];
    if small {
        all.push(("MATRIX_SMALL", "1"));
    }
    all.extend_from_slice(env);
    let ranks: Vec<usize> = (0..nranks).collect();
    let outs = launch(WORKER, "matrix", nranks, &ranks, &all, per_rank, LIMIT);
    assert_all_ok(&outs, &format!("matrix on {nranks} ranks with {env:?}"));
    for o in &outs {
        assert!(
            o.stdout.contains("0 failures"),
            "rank {} printed no summary:\n{}",
            o.rank,
            o.stdout
        );
    }
    outs
}

fn transport_lines(o: &Out) -> Vec<&str> {
    o.stdout.lines().filter(|l| l.starts_with("transport ")).collect()
}

#[test]
fn matrix_over_the_network_only_with_shm_disabled() {
    let outs = matrix(2, false, &[("NCCL_SHM_DISABLE", "1")], |_| Vec::new());
    for o in &outs {
        let t = transport_lines(o);
        assert!(
            !t.is_empty() && t.iter().all(|l| l.starts_with("transport NET/")),
            "rank {}: {t:?}",
            o.rank
        );
    }
}

#[test]
fn matrix_over_shared_memory_with_the_ll_protocol() {
    let outs = matrix(3, false, &[("NCCL_PROTO", "LL")], |_| Vec::new());
    for o in &outs {
        let t = transport_lines(o);
        // Ring connections and the Send/Recv connections of the matrix.
        assert!(
            !t.is_empty() && t.iter().all(|l| l.starts_with("transport SHM/LL")),
            "rank {}: {t:?}",
            o.rank
        );
    }
}

#[test]
fn matrix_with_ranks_on_two_hosts_mixes_shm_and_net_and_logs_each_connection() {
    // Ranks 0, 1 on host A and 2, 3 on host B: the ring 0 -> 1 -> 2 -> 3 -> 0 has
    // two shared-memory hops and two network hops.
    let outs = matrix(
        4,
        false,
        &[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT")],
        |r| vec![("NCCL_HOSTID".into(), if r < 2 { "hostA" } else { "hostB" }.into())],
    );
    let text: String = outs.iter().map(|o| o.stdout.as_str()).collect();
    for want in [
        "Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct",
        "Channel 01/0 : 2[0] -> 3[1] via SHM/direct/direct",
        "Channel 00/0 : 1[1] -> 2[0] [send] via NET/",
        "Channel 00/0 : 1[1] -> 2[0] [receive] via NET/",
        "Channel 01/0 : 3[1] -> 0[0] [send] via NET/",
    ] {
        assert!(text.contains(want), "no line containing {want:?} in\n{text}");
    }
    assert!(!text.contains("1[1] -> 2[0] via SHM"), "{text}");
    for o in &outs {
        let t = transport_lines(o);
        assert!(
            t.iter().any(|l| l.starts_with("transport SHM/")) && t.iter().any(|l| l.starts_with("transport NET/")),
            "rank {}: {t:?}",
            o.rank
        );
    }
}

#[test]
fn no_transport_between_local_ranks_is_an_init_error() {
    let env = [("NCCL_SHM_DISABLE", "1"), ("NCCL_NET_DISABLE_INTRA", "1")];
    let outs = launch(WORKER, "notransport", 2, &[0, 1], &env, |_| Vec::new(), LIMIT);
    assert_all_ok(&outs, "no transport");
}

#[test]
fn killed_peer_is_named_by_every_survivor() {
    let outs = launch(WORKER, "kill", 4, &[0, 1, 2, 3], &[], |_| Vec::new(), LIMIT);
    let victim = outs.iter().find(|o| o.rank == 1).expect("victim");
    assert!(!victim.success, "the victim should have been killed:\n{}", dump(&outs));
    for o in outs.iter().filter(|o| o.rank != 1) {
        assert!(o.success, "survivor rank {} failed:\n{}", o.rank, dump(&outs));
        let line = o.stdout.lines().find(|l| l.contains("got error")).unwrap_or_default();
        // Only the liveness check (or a peer passing its finding on) says "exited";
        // the 30 s watchdog would report a timeout instead.
        assert!(
            line.contains("rank 1 (pid") && line.contains("exited"),
            "survivor rank {} did not name rank 1:\n{}",
            o.rank,
            dump(&outs)
        );
    }
}

#[test]
fn stopped_peer_is_named_by_every_survivor() {
    let outs = launch(WORKER, "stop", 4, &[0, 1, 2, 3], &[], |_| Vec::new(), LIMIT);
    for o in outs.iter().filter(|o| o.rank != 1) {
        assert!(o.success, "survivor rank {} failed:\n{}", o.rank, dump(&outs));
        let line = o.stdout.lines().find(|l| l.contains("got error")).unwrap_or_default();
        assert!(
            line.contains("rank 1 (pid") && line.contains("stopped"),
            "survivor rank {} did not name the stopped rank 1:\n{}",
            o.rank,
            dump(&outs)
        );
    }
}

/// Entries of `/dev/shm` that ferroccl or NCCL could have made.
fn dev_shm_entries() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("ferroccl") || n.contains("nccl"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn nothing_is_left_in_dev_shm_after_success_failure_or_sigkill_of_every_rank() {
    let before = dev_shm_entries();
    // Success (the matrix, small) and failure (a killed rank).
    matrix(2, true, &[], |_| Vec::new());
    assert_eq!(dev_shm_entries(), before, "after a successful run");
    let outs = launch(WORKER, "kill", 3, &[0, 1, 2], &[], |_| Vec::new(), LIMIT);
    assert!(outs.iter().any(|o| !o.success), "{}", dump(&outs));
    assert_eq!(dev_shm_entries(), before, "after a killed rank");
    // SIGKILL of every rank in the middle of collectives.
    coll_support::require_socket_plugin();
    let id = get_unique_id(&BootstrapConfig::loopback(LIMIT)).expect("unique id");
    let exe = std::env::current_exe().expect("current exe");
    let n = 3;
    let mut children: Vec<_> = (0..n)
        .map(|r| {
            Command::new(&exe)
                .args([WORKER, "--exact", "--nocapture", "--test-threads=1"])
                .env(ENV_ROLE, "loop")
                .env(ENV_RANK, r.to_string())
                .env(ENV_NRANKS, n.to_string())
                .env(ENV_ID, id.to_hex())
                .env("NCCL_SOCKET_IFNAME", "lo")
                .env("NCCL_NET_PLUGIN", "socket")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn rank")
        })
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    for c in &mut children {
        let out = c.stdout.take().expect("stdout");
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if line.ends_with("looping") {
                    let _ = tx.send(());
                }
            }
        });
    }
    for _ in 0..n {
        rx.recv_timeout(Duration::from_secs(120))
            .expect("every rank runs collectives");
    }
    // The segments are memfds, visible only as mappings of the ranks.
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", children[0].id())).unwrap_or_default();
    assert!(
        maps.contains("/memfd:ferroccl-shm"),
        "rank 0 maps no shared-memory segment:\n{maps}"
    );
    for c in &mut children {
        let _ = c.kill();
    }
    for c in &mut children {
        let _ = c.wait();
    }
    assert_eq!(dev_shm_entries(), before, "after SIGKILL of every rank");
}
