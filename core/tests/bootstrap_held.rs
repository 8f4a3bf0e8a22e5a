//! 2,000 held connections against the bootstrap root and against a rank's
//! listener: the process' thread count stays bounded (one event-loop thread per
//! listener), at most `MAX_PENDING_CONNECTIONS` unauthenticated connections are
//! kept (the oldest are dropped), and the real ranks still bootstrap.
//!
//! One test in this binary, so that no other test's threads are counted.

mod bootstrap_common;

use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bootstrap_common::*;
use ferroccl::bootstrap::{MAX_PENDING_CONNECTIONS, SOCKET_TYPE_BOOTSTRAP, encode_handshake};

const HELD: usize = 2000;

fn threads() -> usize {
    procfs::process::Process::myself()
        .and_then(|p| p.tasks())
        .expect("/proc/self/task")
        .count()
}

/// Opens `HELD` connections to `to`: half silent, half stopping after the handshake.
fn hold(to: SocketAddr, magic: u64) -> Vec<TcpStream> {
    (0..HELD)
        .map(|i| {
            let mut s = TcpStream::connect(to).unwrap_or_else(|e| panic!("connection {i} to {to}: {e}"));
            if i % 2 == 1 {
                s.write_all(&encode_handshake(magic, SOCKET_TYPE_BOOTSTRAP)).unwrap();
            }
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect()
}

/// Connections the server has not closed.
fn still_open(held: &[TcpStream]) -> usize {
    let mut b = [0u8; 1];
    held.iter()
        .filter(|s| matches!(s.peek(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock))
        .count()
}

/// Waits until the server keeps at most `MAX_PENDING_CONNECTIONS` of `held` open.
fn wait_for_cap(held: &[TcpStream], what: &str) {
    let t0 = Instant::now();
    loop {
        let open = still_open(held);
        if open <= MAX_PENDING_CONNECTIONS {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{what}: {open} of {HELD} held connections still open, cap is {MAX_PENDING_CONNECTIONS}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn held_connections_keep_threads_bounded_and_the_bootstrap_working() {
    let c = cfg(OK_TIMEOUT);
    let id = new_id(&c);
    let root = id.root_addr().unwrap();
    let base = threads();
    let t0 = Instant::now();
    let held_root = hold(root, id.magic());
    println!("connected {HELD} in {:?}", t0.elapsed());
    wait_for_cap(&held_root, "root");
    let at_root = threads();
    assert!(
        at_root <= base + 2,
        "{HELD} held connections at the root: {base} threads before, {at_root} after"
    );
    println!("capped after {:?}", t0.elapsed());
    println!("root: {base} threads before, {at_root} with {HELD} held connections");

    let magic = id.magic();
    run_threads(id, 3, &c, move |bs| {
        if bs.rank() == 0 {
            let before = threads();
            let held = hold(bs.listen_addr(), magic);
            wait_for_cap(&held, "rank 0's listener");
            let during = threads();
            println!("rank 0: {before} threads before, {during} with {HELD} held connections");
            // The three ranks' own threads come and go; 2,000 connections add none.
            assert!(
                during <= before + 8,
                "{HELD} held connections at rank 0: {before} threads before, {during} after"
            );
            bs.barrier().unwrap();
            exercise(bs, "held");
            drop(held);
        } else {
            bs.barrier().unwrap();
            exercise(bs, "held");
        }
    });
    drop(held_root);
}
