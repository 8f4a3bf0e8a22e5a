//! Bootstrap failure handling on loopback: missing ranks, stray and malformed
//! connections, duplicate ranks, nranks mismatch, a silent root.

mod bootstrap_common;

#[path = "port_support/mod.rs"]
mod port_support;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use bootstrap_common::*;
use ferroccl::bootstrap::{
    Bootstrap, BootstrapError, EXT_INFO_BYTES, RankInfo, SOCKET_TYPE_BOOTSTRAP, UniqueId, encode_handshake,
};

/// Runs the given ranks of an `nranks` bootstrap as threads and returns each result.
fn join_some(
    id: UniqueId,
    ranks: &[(usize, usize)],
    c: &ferroccl::bootstrap::BootstrapConfig,
) -> Vec<Result<(), BootstrapError>> {
    let hs: Vec<_> = ranks
        .iter()
        .map(|&(r, n)| {
            let c = c.clone();
            std::thread::spawn(move || Bootstrap::init(&id, r, n, &c).map(|_| ()))
        })
        .collect();
    hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
}

#[test]
fn a_rank_that_never_joins_is_named() {
    let timeout = Duration::from_secs(2);
    let c = cfg(timeout);
    let id = new_id(&c);
    let t0 = Instant::now();
    let res = join_some(id, &[(0, 4), (1, 4), (3, 4)], &c);
    let took = t0.elapsed();
    for r in res {
        let e = r.expect_err("must fail");
        let m = e.to_string();
        assert!(matches!(e, BootstrapError::Root(_)), "{m}");
        assert!(
            m.contains("timed out after 2 s waiting for 4 ranks; rank 2 never connected"),
            "{m}"
        );
    }
    // Root deadline is `timeout` after the first arrival; allow for a slow machine.
    assert!(
        took >= timeout && took < timeout * 2 + Duration::from_secs(10),
        "took {took:?}"
    );
}

fn stray(addr: SocketAddr, bytes: Vec<u8>) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("stray connect");
    if !bytes.is_empty() {
        let _ = s.write_all(&bytes);
    }
    s
}

fn strays_for(addr: SocketAddr, magic: u64) -> Vec<TcpStream> {
    let hs = |m: u64, t: u32| encode_handshake(m, t).to_vec();
    let with = |mut a: Vec<u8>, b: &[u8]| {
        a.extend_from_slice(b);
        a
    };
    let fake = RankInfo {
        rank: 0,
        nranks: 3,
        reply_addr: "127.0.0.1:9".parse().unwrap(),
        ring_addr: "127.0.0.1:9".parse().unwrap(),
    };
    let mut bad_info = fake.encode();
    bad_info[20] = 0x7f; // unknown address family
    bad_info[21] = 0x7f;
    vec![
        // Silent: connects and never sends a byte (held open for the whole test).
        stray(addr, vec![]),
        // Garbage.
        stray(addr, b"GET / HTTP/1.0\r\n\r\n".to_vec()),
        // Wrong magic, right type.
        stray(
            addr,
            with(
                hs(magic ^ 1, SOCKET_TYPE_BOOTSTRAP),
                &(EXT_INFO_BYTES as u32).to_ne_bytes(),
            ),
        ),
        // Right magic, wrong type (Proxy = 2).
        stray(addr, hs(magic, 2)),
        // Right handshake, oversize length.
        stray(addr, with(hs(magic, SOCKET_TYPE_BOOTSTRAP), &u32::MAX.to_ne_bytes())),
        // Right handshake, then silence.
        stray(addr, hs(magic, SOCKET_TYPE_BOOTSTRAP)),
        // Right handshake and length, malformed extInfo.
        stray(
            addr,
            with(
                with(hs(magic, SOCKET_TYPE_BOOTSTRAP), &(EXT_INFO_BYTES as u32).to_ne_bytes()),
                &bad_info,
            ),
        ),
        // Half a handshake.
        stray(addr, magic.to_ne_bytes()[..5].to_vec()),
    ]
}

#[test]
fn strays_at_the_root_are_rejected_and_do_not_block_init() {
    // Strays must be rejected quickly relative to this (long) timeout.
    let c = cfg(Duration::from_secs(60));
    let id = new_id(&c);
    let root = id.root_addr().unwrap();
    let held = strays_for(root, id.magic());
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    run_threads(id, 3, &c, |bs| {
        // Strays at each rank's own listener must not disturb point-to-point either.
        let mine = strays_for(bs.listen_addr(), 0x5eed);
        bs.barrier().unwrap();
        exercise(bs, "strays");
        drop(mine);
    });
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "init blocked by strays: {:?}",
        t0.elapsed()
    );
    drop(held);
}

#[test]
fn duplicate_rank_fails_both_and_names_the_duplicate() {
    // A client with the right magic that reports a rank already taken is refused at
    // once; the first one keeps its place, so the bootstrap still cannot complete
    // (rank 1 never comes) and the root's timeout report names the duplicate too.
    let c = cfg(Duration::from_secs(3));
    let id = new_id(&c);
    let res = join_some(id, &[(0, 2), (0, 2)], &c);
    for r in res {
        let m = r.expect_err("duplicate must fail").to_string();
        assert!(m.contains("rank 0 joined twice"), "{m}");
    }
}

#[test]
fn nranks_mismatch_fails_everyone() {
    let c = cfg(Duration::from_secs(3));
    let id = new_id(&c);
    let res = join_some(id, &[(0, 2), (1, 3)], &c);
    for r in res {
        let m = r.expect_err("mismatch must fail").to_string();
        assert!(m.contains("nranks mismatch"), "{m}");
    }
}

#[test]
fn a_silent_root_gives_a_timeout_naming_it() {
    // A listener that accepts (kernel backlog) but never replies.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let id = UniqueId::new(0x1234, addr);
    let c = cfg(Duration::from_secs(1));
    let t0 = Instant::now();
    let e = Bootstrap::init(&id, 0, 2, &c).unwrap_err();
    assert!(matches!(e, BootstrapError::Timeout { .. }), "{e}");
    assert!(e.to_string().contains(&format!("the root's reply from {addr}")), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(15));
    drop(l);
}

#[test]
fn an_absent_root_fails_after_the_retries() {
    let port = port_support::unused_port();
    let id = UniqueId::new(0x1234, format!("127.0.0.1:{port}").parse().unwrap());
    let mut c = cfg(Duration::from_secs(20));
    c.retry_count = 3;
    c.retry_sleep = Duration::from_millis(10);
    let e = Bootstrap::init(&id, 0, 2, &c).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("connecting to the bootstrap root") && m.contains("after 3 retries"),
        "{m}"
    );
}
