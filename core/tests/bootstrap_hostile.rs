//! Hostile and absurd input to the bootstrap, over real loopback TCP: crafted root
//! records (huge nranks, wrong rank, nranks mismatch, duplicate rank, truncated,
//! garbage after the magic) against a live root, which must reject each with a
//! clear message and keep serving the real ranks; absurd nranks from the caller,
//! the communicator API and the perf tool's launcher environment (an error, never
//! an abort).

mod bootstrap_common;

#[path = "port_support/mod.rs"]
mod port_support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use bootstrap_common::*;
use ferroccl::bootstrap::{
    Bootstrap, BootstrapError, EXT_INFO_BYTES, HANDSHAKE_BYTES, MAX_NRANKS, RankInfo, Reply, SOCKET_TYPE_BOOTSTRAP,
    UniqueId, encode_handshake,
};

const WAIT: Duration = Duration::from_secs(30);

fn handshake(magic: u64) -> Vec<u8> {
    encode_handshake(magic, SOCKET_TYPE_BOOTSTRAP).to_vec()
}

fn framed(magic: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = handshake(magic);
    v.extend_from_slice(&(payload.len() as u32).to_ne_bytes());
    v.extend_from_slice(payload);
    v
}

/// Connects to `to`, writes `bytes`, half-closes if `close`, returns the stream
/// (kept open by the caller otherwise).
fn send_raw(to: SocketAddr, bytes: &[u8], close: bool) -> TcpStream {
    let mut s = TcpStream::connect(to).expect("connect to the root");
    s.write_all(bytes).expect("write");
    if close {
        s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    }
    s
}

/// A fake rank's root-reply listener: returns the text of the root's error reply.
fn read_error_reply(l: &TcpListener, magic: u64) -> String {
    l.set_nonblocking(true).unwrap();
    let t0 = Instant::now();
    let mut s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock && t0.elapsed() < WAIT => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("no reply from the root within {WAIT:?}: {e}"),
        }
    };
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut hs = [0u8; HANDSHAKE_BYTES];
    s.read_exact(&mut hs).unwrap();
    assert_eq!(hs.to_vec(), handshake(magic), "the root's reply handshake");
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut b = vec![0u8; u32::from_ne_bytes(len) as usize];
    s.read_exact(&mut b).unwrap();
    match Reply::decode(&b).expect("a well-formed reply") {
        Reply::Error(m) => m,
        r => panic!("expected an error reply, got {r:?}"),
    }
}

/// Sends a decodable record claiming (rank, nranks) and returns the root's error.
fn crafted(root: SocketAddr, magic: u64, rank: usize, nranks: usize) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let info = RankInfo {
        rank,
        nranks,
        reply_addr: l.local_addr().unwrap(),
        ring_addr: "127.0.0.1:9".parse().unwrap(),
    };
    let _s = send_raw(root, &framed(magic, &info.encode()), true);
    read_error_reply(&l, magic)
}

/// Sends `bytes`, then waits for the root's log line rejecting this connection.
fn rejected(root: SocketAddr, bytes: &[u8], expect: &str) -> String {
    let s = send_raw(root, bytes, true);
    let me = s.local_addr().unwrap().to_string();
    wait_for_log(
        &[
            &format!("bootstrap root {root}"),
            &format!("rejected connection from {me}"),
            expect,
        ],
        WAIT,
    )
}

#[test]
fn crafted_records_are_rejected_and_the_root_keeps_serving() {
    capture_logs();
    // NCCL_COMM_ID: the magic is public (NCCL_MAGIC) and rank 0's root knows nranks.
    let port = port_support::unused_port();
    let mut c = cfg(WAIT);
    c.comm_id = Some(format!("127.0.0.1:{port}"));
    let id = ferroccl::bootstrap::get_unique_id(&c).unwrap();
    let (root, magic) = (id.root_addr().unwrap(), id.magic());
    let spawn = |r: usize| {
        let c = c.clone();
        std::thread::spawn(move || {
            let bs = Bootstrap::init(&id, r, 3, &c).unwrap_or_else(|e| panic!("rank {r}: {e}"));
            exercise(&bs, "hostile");
        })
    };
    let r0 = spawn(0);
    // The duplicate below must come after the real rank 0's record. If rank 0 failed
    // (e.g. another process took the port), report its error rather than waiting.
    let want = format!("bootstrap root {root}: rank 0/3 from");
    let t0 = Instant::now();
    while !logs().contains(&want) {
        if r0.is_finished() {
            r0.join().expect("rank 0 failed before reaching its root");
            panic!("rank 0 finished before its root logged its record");
        }
        assert!(t0.elapsed() < WAIT, "no {want:?} in the log:\n{}", logs());
        std::thread::sleep(Duration::from_millis(20));
    }

    let m = crafted(root, magic, 1, i32::MAX as usize);
    assert!(
        m.contains("nranks=2147483647") && m.contains(&format!("above the bootstrap's limit of {MAX_NRANKS}")),
        "{m}"
    );
    let m = crafted(root, magic, 5, 3);
    assert!(
        m.contains("rank 5") && m.contains("out of range for its nranks=3"),
        "{m}"
    );
    let m = crafted(root, magic, 1, 4);
    assert!(
        m.contains("nranks mismatch")
            && m.contains("says nranks=4 but this root gathers nranks=3 (set by the rank that started this root)"),
        "{m}"
    );
    let m = crafted(root, magic, 0, 3);
    assert!(
        m.contains("rank 0 joined twice") && m.contains("keeps its place"),
        "{m}"
    );

    // Undecodable input is logged with what was wrong.
    let mut truncated = handshake(magic);
    truncated.extend_from_slice(&(EXT_INFO_BYTES as u32).to_ne_bytes());
    truncated.extend_from_slice(&[0u8; 100]);
    rejected(
        root,
        &truncated,
        "connection closed after 100 of 176 bytes of the opening message",
    );
    let mut garbage = handshake(magic);
    garbage.extend_from_slice(b"GARBAGE AFTER THE MAGIC");
    let announced = u32::from_ne_bytes(*b"GARB");
    rejected(
        root,
        &garbage,
        &format!("the opening message announces {announced} bytes, more than the limit of 176"),
    );
    rejected(root, &framed(magic, &[0xab; EXT_INFO_BYTES]), "malformed extInfo");
    rejected(
        root,
        &framed(magic, &[1, 2, 3]),
        "malformed extInfo: extInfo must be 176 bytes, got 3",
    );
    rejected(root, &framed(magic ^ 1, &[0; EXT_INFO_BYTES]), "wrong magic");
    // A connection that stays open with half a record keeps nobody waiting.
    let mut half = handshake(magic);
    half.extend_from_slice(&(EXT_INFO_BYTES as u32).to_ne_bytes());
    let held = send_raw(root, &half, false);

    // The real ranks still form the ring.
    let others = [spawn(1), spawn(2)];
    r0.join().expect("rank 0");
    for h in others {
        h.join().expect("rank");
    }
    drop(held);
}

#[test]
fn a_fresh_root_sizes_nothing_from_a_huge_first_record() {
    capture_logs();
    let c = cfg(WAIT);
    let id = new_id(&c);
    let (root, magic) = (id.root_addr().unwrap(), id.magic());
    // The first record to arrive would have set nranks (and sized the root's tables).
    let m = crafted(root, magic, 0, i32::MAX as usize);
    assert!(m.contains("above the bootstrap's limit"), "{m}");
    let m = crafted(root, magic, 7, 3);
    assert!(m.contains("out of range"), "{m}");
    run_threads(id, 2, &c, |bs| exercise(bs, "fresh"));
}

#[test]
fn absurd_nranks_is_an_error_not_an_abort() {
    capture_logs();
    let c = cfg(Duration::from_secs(5));
    let id = UniqueId::new(0x1234, "127.0.0.1:9".parse().unwrap());
    for n in [MAX_NRANKS + 1, i32::MAX as usize, usize::MAX] {
        let e = Bootstrap::init(&id, 0, n, &c).unwrap_err();
        assert!(matches!(e, BootstrapError::InvalidArgument(_)), "{e}");
        assert!(e.to_string().contains(&format!("limit of {MAX_NRANKS} ranks")), "{e}");
    }
    // Through the communicator API (the plugin is loaded first, then the bootstrap refuses).
    let cc = ferroccl::CommConfig {
        bootstrap: Some(c.clone()),
        ..Default::default()
    };
    let e = ferroccl::Comm::init_rank(i32::MAX as usize, &id, 0, cc).unwrap_err();
    assert!(e.to_string().contains("limit of"), "{e}");
}

fn perf_tool() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let perf = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .join("ferroccl-perf");
    assert!(
        perf.exists(),
        "{} is not built: run `cargo build --workspace` first",
        perf.display()
    );
    perf
}

#[test]
fn perf_tool_rejects_absurd_launcher_sizes_with_an_error() {
    capture_logs();
    let perf = perf_tool();
    let port = port_support::unused_port();
    let run = |env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(&perf);
        cmd.args(["all_reduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0"]);
        for k in [
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "PMIX_RANK",
            "PMI_RANK",
            "PMI_SIZE",
            "PMIX_SIZE",
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "RANK",
            "WORLD_SIZE",
        ] {
            cmd.env_remove(k);
        }
        cmd.env("NCCL_COMM_ID", format!("127.0.0.1:{port}"))
            .env("FERROCCL_TIMEOUT_SEC", "10");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run ferroccl-perf");
        (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (st, err) = run(&[("RANK", "0"), ("WORLD_SIZE", "2147483647")]);
    assert_eq!(st.code(), Some(1), "must exit with an error, not a signal: {st} {err}");
    assert!(
        err.contains("nranks 2147483647 is above the bootstrap's limit"),
        "{err}"
    );
    let (st, err) = run(&[("RANK", "0"), ("WORLD_SIZE", "99999999999999999999999")]);
    assert_eq!(st.code(), Some(2), "{st} {err}");
    assert!(
        err.contains("WORLD_SIZE=\"99999999999999999999999\" is not a non-negative integer"),
        "{err}"
    );
    let (st, err) = run(&[("SLURM_PROCID", "-1"), ("SLURM_NTASKS", "4")]);
    assert_eq!(st.code(), Some(2), "{st} {err}");
    assert!(err.contains("SLURM_PROCID=\"-1\""), "{err}");
}
