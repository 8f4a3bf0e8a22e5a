//! A loopback TCP port for tests that must name one before anything listens on it
//! (`NCCL_COMM_ID`, an absent root).
//!
//! Binding port 0 and closing it again hands out a port from the kernel's ephemeral
//! range, which any process connecting out may be given a moment later: a parallel
//! test did exactly that in CI and the root's bind failed with EADDRINUSE. Ports
//! below `net.ipv4.ip_local_port_range` are only ever taken by an explicit bind, so
//! one picked there at random and free now stays free unless another test picks the
//! same number.
#![allow(dead_code)]

use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;

/// Lowest port we pick from (well above the registered services tests might meet).
const PICK_FROM: u16 = 20000;

fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// A port on 127.0.0.1 that is free now and outside the ephemeral range when the
/// range leaves room below it; falls back to an ephemeral one otherwise.
pub fn unused_port() -> u16 {
    let hi = ephemeral_low();
    if hi > PICK_FROM + 100 {
        let span = u64::from(hi - PICK_FROM);
        for _ in 0..200 {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0),
            );
            let port = PICK_FROM + (h.finish() % span) as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local addr")
        .port()
}
