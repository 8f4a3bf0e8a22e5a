//! `NCCL_*` parameters of the socket plugin, read once per process.
//!
//! Names, defaults and syntax follow NCCL's socket transport
//! (`src/transport/net_socket.cc`, reference §6.1): integers are parsed like
//! `strtoll(s, 0)` (decimal, `0x` hex, leading-`0` octal), an empty value means
//! the default.
//!
//! Automatic data streams (each of `NCCL_SOCKET_NTHREADS` / `NCCL_NSOCKS_PERTHREAD`
//! left unset, i.e. -2, is resolved on its own, as in NCCL): NCCL picks 0 threads ×
//! 1 socket (no data sockets, everything on the control socket driven by the
//! caller's thread) except on AWS/GCP NICs. We choose from the machine
//! ([`auto_streams`]): with at most [`SMALL_MACHINE_CORES`] usable cores, helper
//! threads only compete with the caller and the peer for the CPU, so we do as NCCL
//! does (0 × 1); with more cores, [`AUTO_NTHREADS`] × [`AUTO_NSOCKS_PERTHREAD`].

use std::sync::OnceLock;

use ferroccl_plugin_api::log::NCCL_INIT;
use ferroccl_plugin_api::net_info;
use ferroccl_plugin_api::params::{IntParam, socket};

use crate::proto::{DEFAULT_MAGIC, MAX_STREAMS};

ferroccl_plugin_api::params! {
    /// The plugin's own parameters, as NCCL's socket transport reads them
    /// (`src/transport/net_socket.cc`), exported as `ferrocclParams_v1`.
    /// `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY` and `NCCL_SOCKET_RETRY_*` are
    /// shared with the runtime (`ferroccl_plugin_api::params::socket`).
    pub static PARAMS = [
        NTHREADS: int "NCCL_SOCKET_NTHREADS" = -2, -2..=MAX_THREADS as i64, "socket plugin: helper threads per connection, 1..16 (-2: automatic)";
        NSOCKS_PERTHREAD: int "NCCL_NSOCKS_PERTHREAD" = -2, -2..=MAX_STREAMS as i64, "socket plugin: data sockets per helper thread (-2: automatic)";
        INLINE: int "NCCL_SOCKET_INLINE" = 128, 0..=1 << 30, "socket plugin: messages up to this many bytes travel on the control stream";
        MIN_TASKSIZE: int "NCCL_SOCKET_MIN_TASKSIZE" = 65536, 1..=1 << 30, "socket plugin: smallest chunk per data stream, bytes";
        SNDBUF: int "NCCL_SOCKET_SNDBUF" = -1, -1..=i32::MAX as i64, "socket plugin: SO_SNDBUF bytes (-1: system default)";
        RCVBUF: int "NCCL_SOCKET_RCVBUF" = -1, -1..=i32::MAX as i64, "socket plugin: SO_RCVBUF bytes (-1: system default)";
        MAGIC: int "NCCL_SOCKET_MAGIC" = DEFAULT_MAGIC as i64, i64::MIN..=i64::MAX, "socket plugin: 64-bit magic that starts every connection";
        /// Read by `libnccl-net-collnet-socket.so` (plugins/net-collnet-socket), which is
        /// this plugin plus a CollNet table and exports this table as its own.
        /// Opt-in because NCCL 2.30 takes the first RMA table with a device from
        /// the net plugin's library: offered by default, this host-memory-only
        /// emulation would displace NCCL's own RMA (which registers GPU memory).
        RMA_ENABLE: int "NCCL_SOCKET_RMA_ENABLE" = 0, 0..=1, "socket plugin: 1 offers its RMA table's devices (one-sided put/get emulated over TCP, host memory only); 0 reports none";
        COLLNET_TIMEOUT_MS: int "NCCL_COLLNET_SOCKET_TIMEOUT_MS" = 300_000, 1..=86_400_000, "collnet-socket plugin: bound on every wait of its CollNet table (connect, a peer's bytes), ms";
    ];
}
ferroccl_plugin_api::export_params!(PARAMS);

/// Helper threads per connection when `NCCL_SOCKET_NTHREADS` is unset (-2) on a
/// machine with more than [`SMALL_MACHINE_CORES`] cores.
pub const AUTO_NTHREADS: usize = 2;
/// Data streams per helper thread when `NCCL_NSOCKS_PERTHREAD` is unset (-2).
pub const AUTO_NSOCKS_PERTHREAD: usize = 1;
/// Machines with at most this many usable cores get no helper threads by default.
///
/// Measured on a loaded 2-core machine (`examples/socket_bench.rs`, BENCHMARKS.md):
/// 2 helper threads per side put 4 busy threads on 2 cores and reached 0.45–0.65×
/// raw TCP for 4 MiB messages; the caller-driven control stream matches raw TCP.
pub const SMALL_MACHINE_CORES: usize = 2;

/// Automatic `(NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD)` for a machine with
/// `cores` usable cores (`std::thread::available_parallelism`, which honours CPU
/// affinity and cgroup quotas): `(0, 1)` for ≤ [`SMALL_MACHINE_CORES`] cores (NCCL's
/// own default: no data streams), else `(AUTO_NTHREADS, AUTO_NSOCKS_PERTHREAD)`.
pub fn auto_streams(cores: usize) -> (usize, usize) {
    if cores <= SMALL_MACHINE_CORES {
        (0, 1)
    } else {
        (AUTO_NTHREADS, AUTO_NSOCKS_PERTHREAD)
    }
}

/// Usable cores of this process (1 if unknown).
pub fn usable_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
/// NCCL's `MAX_THREADS`.
pub const MAX_THREADS: usize = 16;

/// Address family restriction from `NCCL_SOCKET_FAMILY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `AF_INET`
    V4,
    /// `AF_INET6`
    V6,
}

/// The plugin's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `NCCL_SOCKET_IFNAME` (values of length ≤ 1 are dropped: auto-selection).
    pub ifname: Option<String>,
    /// `NCCL_SOCKET_FAMILY` (`AF_INET` / `AF_INET6`; anything else: none).
    pub family: Option<Family>,
    /// Helper threads per connection (`NCCL_SOCKET_NTHREADS`, resolved, 1 ..= 16; 0 if no data streams).
    pub nthreads: usize,
    /// Data streams per connection (`NCCL_SOCKET_NTHREADS` × `NCCL_NSOCKS_PERTHREAD`, ≤ 64).
    pub nstreams: usize,
    /// `NCCL_SOCKET_INLINE`: messages of at most this many bytes go on the control stream (default 128).
    pub inline: usize,
    /// `NCCL_SOCKET_MIN_TASKSIZE`: smallest chunk per data stream, bytes (default 65536).
    pub min_task: usize,
    /// `NCCL_SOCKET_RETRY_CNT`: connect retries on transient errors (default 34).
    pub retry_cnt: u32,
    /// `NCCL_SOCKET_RETRY_SLEEP_MSEC`: retry *n* waits n × this (default 100).
    pub retry_sleep_ms: u64,
    /// `NCCL_SOCKET_SNDBUF` (bytes; ≤ 0 = system default).
    pub sndbuf: i64,
    /// `NCCL_SOCKET_RCVBUF` (bytes; ≤ 0 = system default).
    pub rcvbuf: i64,
    /// `NCCL_SOCKET_MAGIC` (default 0x564ab9f2fc4b9d6c).
    pub magic: u64,
    /// Usable cores seen when the automatic stream counts were chosen.
    pub cores: usize,
    /// `NCCL_SOCKET_NTHREADS` was unset and chosen automatically.
    pub auto_nthreads: bool,
    /// `NCCL_NSOCKS_PERTHREAD` was unset and chosen automatically.
    pub auto_nsocks: bool,
}

/// Parses an integer like C's `strtoll(s, NULL, 0)`; `None` for empty or invalid text.
pub fn parse_int(s: &str) -> Option<i64> {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()? as i64
    } else if t.len() > 1 && t.starts_with('0') {
        i64::from_str_radix(&t[1..], 8).ok()?
    } else {
        t.parse::<i64>().ok()?
    };
    Some(if neg { v.wrapping_neg() } else { v })
}

impl Config {
    /// Builds the configuration from a variable lookup (the environment, or a map in
    /// tests), with automatic stream counts for this machine's [`usable_cores`].
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Config {
        Config::from_lookup_cores(get, usable_cores())
    }

    /// As [`Config::from_lookup`], for a machine with `cores` usable cores.
    pub fn from_lookup_cores(get: impl Fn(&str) -> Option<String>, cores: usize) -> Config {
        let int = |p: &IntParam| get(p.name).and_then(|v| parse_int(&v)).unwrap_or(p.default);
        let mut nthreads = int(&NTHREADS);
        let mut nsocks = int(&NSOCKS_PERTHREAD);
        let (auto_nt, auto_ns) = auto_streams(cores);
        let (auto_nthreads, auto_nsocks) = (nthreads == -2, nsocks == -2);
        if auto_nthreads {
            nthreads = auto_nt as i64;
        }
        if auto_nsocks {
            nsocks = auto_ns as i64;
        }
        let mut nthreads = nthreads.clamp(0, MAX_THREADS as i64) as usize;
        let mut nsocks = nsocks.clamp(0, MAX_STREAMS as i64) as usize;
        if nthreads * nsocks > MAX_STREAMS {
            nsocks = MAX_STREAMS / nthreads;
        }
        if nsocks == 0 {
            nthreads = 0;
        }
        Config {
            ifname: get(socket::IFNAME.name).filter(|s| s.len() > 1),
            family: match get(socket::FAMILY.name).as_deref() {
                Some("AF_INET") => Some(Family::V4),
                Some("AF_INET6") => Some(Family::V6),
                _ => None,
            },
            nthreads,
            nstreams: nthreads * nsocks,
            inline: int(&INLINE).max(0) as usize,
            min_task: int(&MIN_TASKSIZE).max(1) as usize,
            retry_cnt: int(&socket::RETRY_CNT).clamp(0, u32::MAX as i64) as u32,
            retry_sleep_ms: int(&socket::RETRY_SLEEP_MSEC).max(0) as u64,
            sndbuf: int(&SNDBUF),
            rcvbuf: int(&RCVBUF),
            magic: int(&MAGIC) as u64,
            cores,
            auto_nthreads,
            auto_nsocks,
        }
    }

    /// The process-wide configuration from the environment, read and logged (INFO) once.
    pub fn from_env() -> &'static Config {
        static CFG: OnceLock<Config> = OnceLock::new();
        CFG.get_or_init(|| {
            let c = Config::from_lookup(|n| std::env::var(n).ok());
            c.log();
            c
        })
    }

    /// Logs the parameters at INFO (`NCCL_INIT`), and why the stream counts were chosen.
    pub fn log(&self) {
        let src = |auto: bool| if auto { "auto" } else { "env" };
        let why = if self.nstreams == 0 {
            "no data streams: messages go on the control stream, driven by the thread calling isend/irecv/test"
        } else {
            "data streams driven by helper threads"
        };
        net_info!(
            NCCL_INIT,
            "NET/FerrocclSocket: {} usable cores: NCCL_SOCKET_NTHREADS={} ({}), NCCL_NSOCKS_PERTHREAD ({}) -> {} data \
             streams; {why}",
            self.cores,
            self.nthreads,
            src(self.auto_nthreads),
            src(self.auto_nsocks),
            self.nstreams
        );
        net_info!(
            NCCL_INIT,
            "NET/FerrocclSocket: NCCL_SOCKET_IFNAME={:?} NCCL_SOCKET_FAMILY={:?} NCCL_SOCKET_NTHREADS={} \
             data streams={} NCCL_SOCKET_INLINE={} NCCL_SOCKET_MIN_TASKSIZE={} NCCL_SOCKET_RETRY_CNT={} \
             NCCL_SOCKET_RETRY_SLEEP_MSEC={} NCCL_SOCKET_SNDBUF={} NCCL_SOCKET_RCVBUF={} NCCL_SOCKET_MAGIC={:#x}",
            self.ifname,
            self.family,
            self.nthreads,
            self.nstreams,
            self.inline,
            self.min_task,
            self.retry_cnt,
            self.retry_sleep_ms,
            self.sndbuf,
            self.rcvbuf,
            self.magic
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg_cores(vars: &[(&str, &str)], cores: usize) -> Config {
        Config::from_lookup_cores(
            |n| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string()),
            cores,
        )
    }

    fn cfg(vars: &[(&str, &str)]) -> Config {
        cfg_cores(vars, 8)
    }

    #[test]
    fn automatic_streams_follow_the_core_count() {
        for cores in [1, 2] {
            let c = cfg_cores(&[], cores);
            assert_eq!(
                (c.nthreads, c.nstreams, c.auto_nthreads, c.auto_nsocks),
                (0, 0, true, true)
            );
            // Each -2 is resolved on its own (NCCL): threads set, sockets auto (1 per thread).
            let c = cfg_cores(&[("NCCL_SOCKET_NTHREADS", "4")], cores);
            assert_eq!((c.nthreads, c.nstreams, c.auto_nthreads), (4, 4, false));
            let c = cfg_cores(&[("NCCL_NSOCKS_PERTHREAD", "4")], cores);
            assert_eq!((c.nthreads, c.nstreams), (0, 0));
        }
        let c = cfg_cores(&[], 3);
        assert_eq!(
            (c.nthreads, c.nstreams),
            (AUTO_NTHREADS, AUTO_NTHREADS * AUTO_NSOCKS_PERTHREAD)
        );
        assert!(usable_cores() >= 1);
    }

    #[test]
    fn strtoll_like_parsing() {
        assert_eq!(parse_int("0x10"), Some(16));
        assert_eq!(parse_int("010"), Some(8));
        assert_eq!(parse_int("-2"), Some(-2));
        assert_eq!(parse_int("0"), Some(0));
        assert_eq!(parse_int(""), None);
        assert_eq!(parse_int("abc"), None);
    }

    #[test]
    fn defaults_and_overrides() {
        let c = cfg(&[]);
        assert_eq!(
            (c.nthreads, c.nstreams, c.inline, c.min_task),
            (AUTO_NTHREADS, AUTO_NTHREADS * AUTO_NSOCKS_PERTHREAD, 128, 65536)
        );
        assert_eq!(c.magic, DEFAULT_MAGIC);
        let c = cfg(&[("NCCL_SOCKET_NTHREADS", "0")]);
        assert_eq!((c.nthreads, c.nstreams), (0, 0));
        let c = cfg(&[("NCCL_SOCKET_NTHREADS", "16"), ("NCCL_NSOCKS_PERTHREAD", "8")]);
        assert_eq!((c.nthreads, c.nstreams), (16, 64));
        let c = cfg(&[
            ("NCCL_SOCKET_IFNAME", "e"),
            ("NCCL_SOCKET_FAMILY", "AF_INET6"),
            ("NCCL_SOCKET_MAGIC", "0x1234"),
        ]);
        assert_eq!((c.ifname, c.family, c.magic), (None, Some(Family::V6), 0x1234));
    }
}
