//! Shared helpers for the bootstrap integration tests (loopback only).
#![allow(dead_code)]

use std::time::Duration;

use ferroccl::bootstrap::{Bootstrap, BootstrapConfig, UniqueId, get_unique_id};

/// Generous bound for tests where everything should work (the machine is shared and slow).
pub const OK_TIMEOUT: Duration = Duration::from_secs(30);

pub fn cfg(timeout: Duration) -> BootstrapConfig {
    let mut c = BootstrapConfig::loopback(timeout);
    c.retry_count = 20;
    c.retry_sleep = Duration::from_millis(20);
    c
}

/// Kept as a hook: the tests do not depend on a tracing subscriber crate.
pub fn init_tracing() {}

/// Runs `nranks` ranks as threads on `id`, each calling `f(bootstrap)`.
pub fn run_threads<F>(id: UniqueId, nranks: usize, c: &BootstrapConfig, f: F)
where
    F: Fn(&Bootstrap) + Send + Sync + Clone + 'static,
{
    let hs: Vec<_> = (0..nranks)
        .map(|r| {
            let (c, f) = (c.clone(), f.clone());
            std::thread::spawn(move || {
                let bs = Bootstrap::init(&id, r, nranks, &c).unwrap_or_else(|e| panic!("rank {r}: init: {e}"));
                assert_eq!((bs.rank(), bs.nranks()), (r, nranks));
                f(&bs);
            })
        })
        .collect();
    for (r, h) in hs.into_iter().enumerate() {
        h.join().unwrap_or_else(|_| panic!("rank {r} panicked"));
    }
}

pub fn new_id(c: &BootstrapConfig) -> UniqueId {
    get_unique_id(c).expect("get_unique_id")
}

fn blob(salt: &str, r: usize) -> Vec<u8> {
    format!("{salt}:rank{r};").repeat(r + 1).into_bytes()
}

fn p2p(salt: &str, from: usize, to: usize, tag: u32, k: usize) -> Vec<u8> {
    format!("{salt} {from}->{to} tag {tag} #{k}").into_bytes()
}

/// Exercises every bootstrap operation and checks the results. `salt` distinguishes
/// concurrent bootstraps so cross-talk would be detected.
pub fn exercise(bs: &Bootstrap, salt: &str) {
    let (r, n) = (bs.rank(), bs.nranks());
    // Address table is consistent with this rank's own listener.
    let addrs = bs.peer_addresses();
    assert_eq!(addrs.len(), n);
    assert_eq!(addrs[r], bs.listen_addr());
    assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");

    // Ring all-gather with variable sizes.
    let all = bs.allgather(&blob(salt, r)).expect("allgather");
    assert_eq!(all.len(), n);
    for (p, b) in all.iter().enumerate() {
        assert_eq!(b, &blob(salt, p), "rank {r}: allgather block {p}");
    }
    // Fixed-size, then empty blobs.
    let all = bs.allgather(&(r as u64 * 7919).to_le_bytes()).expect("allgather u64");
    for (p, b) in all.iter().enumerate() {
        assert_eq!(u64::from_le_bytes(b[..].try_into().unwrap()), p as u64 * 7919);
    }
    assert!(bs.allgather(&[]).expect("allgather empty").iter().all(|b| b.is_empty()));

    // Tagged point-to-point, every pair, both directions, two messages on tag 1
    // (FIFO), received in reverse tag order. Includes a message to self.
    for p in 0..n {
        for tag in [1u32, 2, 3] {
            bs.send(p, tag, &p2p(salt, r, p, tag, 0)).expect("send");
        }
        bs.send(p, 1, &p2p(salt, r, p, 1, 1)).expect("send second");
    }
    for p in (0..n).rev() {
        for tag in [3u32, 2, 1] {
            assert_eq!(
                bs.recv(p, tag).expect("recv"),
                p2p(salt, p, r, tag, 0),
                "rank {r} from {p} tag {tag}"
            );
        }
        assert_eq!(bs.recv(p, 1).expect("recv second"), p2p(salt, p, r, 1, 1));
    }
    // A larger message.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 31 + r as u32) as u8).collect();
    let next = (r + 1) % n;
    let prev = (r + n - 1) % n;
    bs.send(next, 77, &big).expect("send big");
    let got = bs.recv(prev, 77).expect("recv big");
    assert_eq!(got.len(), big.len());
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, &b)| b == (i as u32 * 31 + prev as u32) as u8)
    );

    bs.barrier().expect("barrier");
    let root = n - 1;
    let msg = format!("{salt}: hello from root {root}").into_bytes();
    let mine = if r == root { msg.clone() } else { b"ignored".to_vec() };
    assert_eq!(bs.broadcast(root, &mine).expect("broadcast"), msg);
    assert_eq!(bs.broadcast(0, &[r as u8; 3]).expect("broadcast 0"), vec![0u8; 3]);
    bs.barrier().expect("final barrier");
}

static LOG: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures this process' `ferroccl::bootstrap` log lines (debug and up) in memory,
/// for [`wait_for_log`]. Idempotent; concurrent callers wait for the first. Every test
/// of a binary that captures logs must call it before touching the bootstrap: a
/// tracing call site first reached without a subscriber may stay disabled.
pub fn capture_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_writer(|| LogWriter)
            .with_ansi(false)
            .with_env_filter("ferroccl::bootstrap=debug")
            .try_init();
    });
}

/// Everything captured so far.
pub fn logs() -> String {
    String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned()
}

/// Waits (at most `limit`) for a captured line containing every one of `parts`;
/// returns the line or panics listing the log.
pub fn wait_for_log(parts: &[&str], limit: Duration) -> String {
    let t0 = std::time::Instant::now();
    loop {
        if let Some(l) = logs().lines().find(|l| parts.iter().all(|p| l.contains(p))) {
            return l.to_string();
        }
        if t0.elapsed() > limit {
            panic!("no log line with {parts:?} within {limit:?}; log:\n{}", logs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
