//! Helpers shared by the integration tests: a loopback-only plugin, connection
//! setup through the `Net` trait, bounded waits.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use ferroccl_plugin_api::sdk::{Buf, CommConfig, Handle, Net, NetResult, RecvBuf, TestStatus};
use nccl_net_socket::{Config, ProfRequest as Request, RecvComm, SendComm, SocketNet};

/// Every wait in the tests is bounded by this (generous: the machine is shared).
pub const BOUND: Duration = Duration::from_secs(60);

/// A plugin restricted to `lo` (IPv4) with the given extra `NCCL_*` variables.
pub fn net_with(vars: &[(&str, &str)]) -> SocketNet {
    let cfg = Config::from_lookup(|n| match n {
        "NCCL_SOCKET_IFNAME" => Some("=lo".into()),
        "NCCL_SOCKET_FAMILY" => Some("AF_INET".into()),
        _ => vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string()),
    });
    let net = SocketNet::with_config(cfg);
    assert_eq!(net.devices().unwrap(), 1, "exactly the loopback device");
    net
}

/// The default plugin on `lo`.
pub fn net() -> SocketNet {
    net_with(&[])
}

/// Listens on device 0 and connects/accepts, interleaved on this thread.
pub fn pair(net: &SocketNet) -> (SendComm, RecvComm) {
    let mut handle: Handle = [0; 128];
    let mut l = net.listen(&(), 0, &mut handle).unwrap();
    let (mut s, mut r) = (None, None);
    let t0 = Instant::now();
    while s.is_none() || r.is_none() {
        assert!(t0.elapsed() < BOUND, "connect/accept did not finish");
        if s.is_none() {
            s = net.connect(&(), 0, &mut handle, &CommConfig::default()).unwrap();
        }
        if r.is_none() {
            r = net.accept(&mut l).unwrap();
        }
    }
    net.close_listen(l).unwrap();
    (s.unwrap(), r.unwrap())
}

/// Tests `req` until done (bounded); returns the sizes.
pub fn wait(net: &SocketNet, req: &mut Request) -> NetResult<Vec<usize>> {
    let t0 = Instant::now();
    loop {
        match net.test(req)? {
            TestStatus::Done { n, sizes } => return Ok(sizes[..n].to_vec()),
            TestStatus::Pending => assert!(t0.elapsed() < BOUND, "request did not complete within {BOUND:?}"),
        }
    }
}

/// Tests all requests round-robin until all are done; sizes in input order.
pub fn wait_all(net: &SocketNet, reqs: &mut [Request]) -> Vec<Vec<usize>> {
    let mut out: Vec<Option<Vec<usize>>> = vec![None; reqs.len()];
    let t0 = Instant::now();
    while out.iter().any(|o| o.is_none()) {
        assert!(t0.elapsed() < BOUND, "requests did not complete within {BOUND:?}");
        for (i, r) in reqs.iter_mut().enumerate() {
            if out[i].is_none()
                && let TestStatus::Done { n, sizes } = net.test(r).unwrap()
            {
                out[i] = Some(sizes[..n].to_vec());
            }
        }
    }
    out.into_iter().map(Option::unwrap).collect()
}

/// Deterministic test bytes for message `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A `Buf` over a vector.
pub fn buf(v: &mut [u8]) -> Buf {
    Buf::new(v.as_mut_ptr(), v.len())
}

/// A single receive buffer with a tag.
pub fn rb(v: &mut [u8], tag: i32) -> RecvBuf<'static, nccl_net_socket::SocketMr> {
    RecvBuf {
        buf: buf(v),
        tag,
        mr: None,
    }
}

/// Posts, retrying while the plugin returns a NULL request (bounded).
pub fn post<F: FnMut() -> NetResult<Option<Request>>>(mut f: F) -> Request {
    let t0 = Instant::now();
    loop {
        if let Some(r) = f().unwrap() {
            return r;
        }
        assert!(t0.elapsed() < BOUND, "post kept returning NULL");
    }
}
