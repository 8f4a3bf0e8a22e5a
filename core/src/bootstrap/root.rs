//! The bootstrap root: a sans-IO gathering state machine ([`RootGather`]) and the thin
//! thread that drives it over TCP (NCCL 2.30 `bootstrapRoot` in `src/bootstrap.cc`).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::error::{BootstrapError, Result, fmt_duration};
use super::id::{SOCKET_ADDRESS_BYTES, decode_socket_address, encode_socket_address};
use super::wire::{self, Deadline, Flags, POLL_SLICE, Retry};

/// Size of the rank → root message (NCCL's `struct extInfo`).
pub const EXT_INFO_BYTES: usize = 176;
/// Size of the `connectInfo` field carried in `extInfo` and in the root's reply.
pub const CONNECT_INFO_BYTES: usize = 128;
const REPLY_OK: u8 = 0;
const REPLY_ERR: u8 = 1;
/// Largest root reply accepted (status byte + error text).
pub(crate) const MAX_REPLY_BYTES: usize = 64 * 1024;

/// What a rank tells the root (NCCL `extInfo`, 176 bytes): `int rank, nranks, iroot,
/// nroots, offset` @0..20, `listenRootAddress` (28 B) @20, `connectInfo` (128 B) @48
/// whose first 28 bytes are the rank's ring listen address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankInfo {
    /// The sender's rank.
    pub rank: usize,
    /// The communicator size the sender was given.
    pub nranks: usize,
    /// Where the rank waits for the root's reply.
    pub reply_addr: SocketAddr,
    /// Where the rank accepts its ring predecessor (and point-to-point peers).
    pub ring_addr: SocketAddr,
}

impl RankInfo {
    /// Encodes as the 176-byte `extInfo` (iroot 0, nroots 1, offset 0).
    pub fn encode(&self) -> [u8; EXT_INFO_BYTES] {
        let mut b = [0u8; EXT_INFO_BYTES];
        b[0..4].copy_from_slice(&(self.rank as i32).to_ne_bytes());
        b[4..8].copy_from_slice(&(self.nranks as i32).to_ne_bytes());
        b[8..12].copy_from_slice(&0i32.to_ne_bytes());
        b[12..16].copy_from_slice(&1i32.to_ne_bytes());
        b[16..20].copy_from_slice(&0i32.to_ne_bytes());
        b[20..20 + SOCKET_ADDRESS_BYTES].copy_from_slice(&encode_socket_address(&self.reply_addr));
        b[48..48 + SOCKET_ADDRESS_BYTES].copy_from_slice(&encode_socket_address(&self.ring_addr));
        b
    }

    /// Decodes an `extInfo`; errors say which field is wrong.
    pub fn decode(b: &[u8]) -> std::result::Result<Self, String> {
        if b.len() != EXT_INFO_BYTES {
            return Err(format!("extInfo must be {EXT_INFO_BYTES} bytes, got {}", b.len()));
        }
        let int = |o: usize| i32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let (rank, nranks, iroot, nroots) = (int(0), int(4), int(8), int(12));
        if rank < 0 || nranks <= 0 {
            return Err(format!("rank {rank} / nranks {nranks} out of range"));
        }
        if iroot != 0 || nroots != 1 {
            return Err(format!(
                "multi-root bootstrap (iroot {iroot}, nroots {nroots}) is not supported"
            ));
        }
        let reply_addr = decode_socket_address(&b[20..48]).map_err(|e| format!("listenRootAddress: {e}"))?;
        let ring_addr = decode_socket_address(&b[48..76]).map_err(|e| format!("connectInfo: {e}"))?;
        Ok(RankInfo {
            rank: rank as usize,
            nranks: nranks as usize,
            reply_addr,
            ring_addr,
        })
    }
}

/// The root's answer to one rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The ring listen address of the rank's successor `(rank + 1) % nranks`.
    Successor(SocketAddr),
    /// The bootstrap failed; the text names what happened and which ranks.
    Error(String),
}

impl Reply {
    /// Wire form: status byte 0 + 128-byte `connectInfo`, or 1 + UTF-8 error text.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Successor(a) => {
                let mut v = vec![REPLY_OK];
                let mut ci = [0u8; CONNECT_INFO_BYTES];
                ci[..SOCKET_ADDRESS_BYTES].copy_from_slice(&encode_socket_address(a));
                v.extend_from_slice(&ci);
                v
            }
            Reply::Error(m) => {
                let mut v = vec![REPLY_ERR];
                v.extend_from_slice(&m.as_bytes()[..m.len().min(MAX_REPLY_BYTES - 1)]);
                v
            }
        }
    }

    /// Parses [`Reply::encode`]'s output.
    pub fn decode(b: &[u8]) -> std::result::Result<Self, String> {
        match b.first() {
            Some(&REPLY_OK) if b.len() == 1 + CONNECT_INFO_BYTES => decode_socket_address(&b[1..])
                .map(Reply::Successor)
                .map_err(|e| e.to_string()),
            Some(&REPLY_ERR) => Ok(Reply::Error(String::from_utf8_lossy(&b[1..]).into_owned())),
            _ => Err(format!("malformed root reply of {} bytes", b.len())),
        }
    }
}

/// A reply the root must send now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// The rank it is for.
    pub rank: usize,
    /// That rank's reply listen address.
    pub to: SocketAddr,
    /// What to send.
    pub reply: Reply,
}

/// Sans-IO state of the root while it gathers ranks: who arrived from where, the
/// agreed nranks, and whether the bootstrap failed. Feed it arrivals and a timeout;
/// it returns the replies to send.
#[derive(Debug, Default)]
pub struct RootGather {
    nranks: Option<usize>,
    first_from: Option<(usize, SocketAddr)>,
    arrived: Vec<Option<(RankInfo, SocketAddr)>>,
    count: usize,
    failure: Option<String>,
    complete: bool,
}

fn rank_list(v: &[usize]) -> String {
    const SHOW: usize = 32;
    let mut s: Vec<String> = v.iter().take(SHOW).map(|r| r.to_string()).collect();
    if v.len() > SHOW {
        s.push(format!("… ({} more)", v.len() - SHOW));
    }
    format!("{} {}", if v.len() == 1 { "rank" } else { "ranks" }, s.join(", "))
}

impl RootGather {
    /// A root that has seen nobody yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// nranks as announced by the first rank (None before anyone arrived).
    pub fn expected(&self) -> Option<usize> {
        self.nranks
    }

    /// Number of distinct ranks that arrived.
    pub fn arrived(&self) -> usize {
        self.count
    }

    /// Ranks that have not arrived (empty before the first arrival).
    pub fn missing(&self) -> Vec<usize> {
        self.arrived
            .iter()
            .enumerate()
            .filter(|(_, a)| a.is_none())
            .map(|(r, _)| r)
            .collect()
    }

    /// Every rank arrived and was told its successor.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The failure message, once the bootstrap failed.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    fn fail(&mut self, msg: String, extra: Option<&RankInfo>) -> Vec<Outgoing> {
        self.failure = Some(msg.clone());
        let mut out: Vec<Outgoing> = self
            .arrived
            .iter()
            .flatten()
            .map(|(i, _)| Outgoing {
                rank: i.rank,
                to: i.reply_addr,
                reply: Reply::Error(msg.clone()),
            })
            .collect();
        if let Some(i) = extra {
            out.push(Outgoing {
                rank: i.rank,
                to: i.reply_addr,
                reply: Reply::Error(msg),
            });
        }
        out
    }

    /// A rank reported `info` over a connection from `from`. Returns the replies to
    /// send: none while waiting; every rank's successor when the last one arrives;
    /// an error to every arrived rank (and this one) on a duplicate rank or an nranks
    /// mismatch; an error to this rank alone if the bootstrap had already failed.
    pub fn arrive(&mut self, info: RankInfo, from: SocketAddr) -> Vec<Outgoing> {
        if let Some(f) = &self.failure {
            return vec![Outgoing {
                rank: info.rank,
                to: info.reply_addr,
                reply: Reply::Error(f.clone()),
            }];
        }
        if self.complete {
            let msg = format!(
                "bootstrap root: rank {} (from {from}) arrived after all {} ranks had already joined",
                info.rank,
                self.nranks.unwrap_or(0)
            );
            return vec![Outgoing {
                rank: info.rank,
                to: info.reply_addr,
                reply: Reply::Error(msg),
            }];
        }
        if info.rank >= info.nranks {
            let msg = format!(
                "bootstrap root: rank {} (from {from}) is out of range for nranks {}",
                info.rank, info.nranks
            );
            return self.fail(msg, Some(&info));
        }
        match self.nranks {
            None => {
                self.nranks = Some(info.nranks);
                self.first_from = Some((info.rank, from));
                self.arrived = vec![None; info.nranks];
            }
            Some(n) if n != info.nranks => {
                let (r0, a0) = self.first_from.expect("set with nranks");
                let msg = format!(
                    "bootstrap root: nranks mismatch: rank {} (from {from}) says nranks={} but rank {r0} (from {a0}) \
                     said nranks={n}; every rank must pass the same nranks",
                    info.rank, info.nranks
                );
                return self.fail(msg, Some(&info));
            }
            Some(_) => {}
        }
        if let Some((_, prev_from)) = &self.arrived[info.rank] {
            let msg = format!(
                "bootstrap root: rank {} joined twice (from {prev_from} and from {from}); every process must use a \
                 distinct rank",
                info.rank
            );
            return self.fail(msg, Some(&info));
        }
        self.arrived[info.rank] = Some((info, from));
        self.count += 1;
        let n = self.arrived.len();
        if self.count < n {
            return Vec::new();
        }
        self.complete = true;
        (0..n)
            .map(|r| {
                let me = self.arrived[r].as_ref().expect("all arrived").0;
                let succ = self.arrived[(r + 1) % n].as_ref().expect("all arrived").0;
                Outgoing {
                    rank: r,
                    to: me.reply_addr,
                    reply: Reply::Successor(succ.ring_addr),
                }
            })
            .collect()
    }

    /// The wait ran out after `waited`: fails the bootstrap with a message naming the
    /// ranks that never connected, and returns the error replies for those that did.
    pub fn time_out(&mut self, waited: Duration) -> Vec<Outgoing> {
        if self.complete || self.failure.is_some() {
            return Vec::new();
        }
        let n = self.nranks.unwrap_or(0);
        let msg = format!(
            "bootstrap root: timed out after {} waiting for {n} ranks; {} never connected",
            fmt_duration(waited),
            rank_list(&self.missing())
        );
        self.fail(msg, None)
    }
}

/// Parameters of a running root.
pub(crate) struct RootParams {
    pub magic: u64,
    pub timeout: Duration,
    pub retry: Retry,
    pub abort: Arc<AtomicBool>,
}

/// Starts the root on `listener` in a detached thread. The gathering deadline starts at
/// the first rank's arrival; the root ends once every rank got its reply, or (after a
/// failure) when that deadline passes.
pub(crate) fn spawn_root(listener: TcpListener, p: RootParams) -> Result<()> {
    let local = listener
        .local_addr()
        .map_err(|e| BootstrapError::io("root listener address", e))?;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<(RankInfo, SocketAddr)>();
    let tx = std::sync::Mutex::new(tx);
    let (abort_h, stop_h, timeout) = (p.abort.clone(), stop.clone(), p.timeout);
    let handler: wire::Handler = Arc::new(move |mut s: TcpStream, from: SocketAddr| {
        let dl = Deadline::after(timeout);
        let flags = Flags {
            abort: &abort_h,
            stop: Some(&stop_h),
        };
        let what = || format!("extInfo from {from}");
        match wire::read_frame(&mut s, EXT_INFO_BYTES, &dl, flags, &what) {
            Ok(b) => match RankInfo::decode(&b) {
                Ok(info) => {
                    let _ = tx.lock().map(|t| t.send((info, from)));
                }
                Err(e) => tracing::warn!(target: "ferroccl::bootstrap", "bootstrap root {local}: rejected {from}: {e}"),
            },
            Err(BootstrapError::Aborted { .. }) => {}
            Err(e) => tracing::warn!(target: "ferroccl::bootstrap", "bootstrap root {local}: rejected {from}: {e}"),
        }
    });
    wire::spawn_acceptor(
        listener,
        format!("bootstrap root {local}"),
        p.magic,
        p.timeout,
        stop.clone(),
        p.abort.clone(),
        handler,
    )?;
    std::thread::Builder::new()
        .name("ferroccl-bs-root".into())
        .spawn(move || {
            root_loop(local, rx, &p);
            stop.store(true, Ordering::Relaxed);
        })
        .map_err(|e| BootstrapError::io("spawning the bootstrap root thread", e))?;
    Ok(())
}

fn root_loop(local: SocketAddr, rx: mpsc::Receiver<(RankInfo, SocketAddr)>, p: &RootParams) {
    let mut st = RootGather::new();
    let mut first: Option<Instant> = None;
    loop {
        if p.abort.load(Ordering::Relaxed) {
            tracing::info!(target: "ferroccl::bootstrap", "bootstrap root {local}: aborted");
            return;
        }
        if let Some(t0) = first
            && t0.elapsed() >= p.timeout
        {
            let out = st.time_out(p.timeout);
            if let Some(f) = st.failure() {
                tracing::error!(target: "ferroccl::bootstrap", "{f}");
            }
            send_replies(local, out, p);
            return;
        }
        match rx.recv_timeout(POLL_SLICE) {
            Ok((info, from)) => {
                first.get_or_insert_with(Instant::now);
                tracing::debug!(target: "ferroccl::bootstrap", "bootstrap root {local}: rank {}/{} from {from}", info.rank, info.nranks);
                let out = st.arrive(info, from);
                if let Some(f) = st.failure() {
                    tracing::error!(target: "ferroccl::bootstrap", "{f}");
                }
                send_replies(local, out, p);
                if st.is_complete() {
                    tracing::info!(target: "ferroccl::bootstrap", "bootstrap root {local}: all {} ranks joined", st.arrived());
                    return;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn send_replies(local: SocketAddr, out: Vec<Outgoing>, p: &RootParams) {
    for o in out {
        let what = || format!("bootstrap root {local}: sending rank {}'s reply to {}", o.rank, o.to);
        let dl = Deadline::after(p.timeout.min(Duration::from_secs(10)));
        let flags = Flags {
            abort: &p.abort,
            stop: None,
        };
        let retry = Retry {
            count: p.retry.count.min(3),
            sleep: p.retry.sleep,
        };
        let r = wire::connect_bootstrap(o.to, p.magic, retry, &dl, flags, &what).and_then(|mut s| {
            let _ = s.set_write_timeout(Some(p.timeout));
            wire::write_frame(&mut s, &o.reply.encode(), &what)
        });
        if let Err(e) = r {
            tracing::warn!(target: "ferroccl::bootstrap", "{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(rank: usize, nranks: usize) -> RankInfo {
        RankInfo {
            rank,
            nranks,
            reply_addr: format!("127.0.0.1:{}", 10000 + rank).parse().unwrap(),
            ring_addr: format!("127.0.0.1:{}", 20000 + rank).parse().unwrap(),
        }
    }
    fn from(port: u16) -> SocketAddr {
        format!("127.0.0.1:{port}").parse().unwrap()
    }

    #[test]
    fn ext_info_roundtrip_and_layout() {
        let i = info(3, 8);
        let b = i.encode();
        assert_eq!(i32::from_ne_bytes(b[0..4].try_into().unwrap()), 3);
        assert_eq!(i32::from_ne_bytes(b[4..8].try_into().unwrap()), 8);
        assert_eq!(i32::from_ne_bytes(b[12..16].try_into().unwrap()), 1);
        assert_eq!(RankInfo::decode(&b).unwrap(), i);
        assert!(RankInfo::decode(&b[..175]).is_err());
        let mut bad = b;
        bad[4..8].copy_from_slice(&0i32.to_ne_bytes());
        assert!(RankInfo::decode(&bad).is_err());
        let mut bad = b;
        bad[20] = 99;
        bad[21] = 0;
        assert!(RankInfo::decode(&bad).unwrap_err().contains("listenRootAddress"));
    }

    #[test]
    fn reply_roundtrip() {
        for r in [Reply::Successor(from(5)), Reply::Error("boom".into())] {
            assert_eq!(Reply::decode(&r.encode()).unwrap(), r);
        }
        assert!(Reply::decode(&[]).is_err());
        assert!(Reply::decode(&[0, 1, 2]).is_err());
    }

    #[test]
    fn gathers_and_tells_successors() {
        let mut g = RootGather::new();
        assert!(g.arrive(info(2, 3), from(1)).is_empty());
        assert_eq!(g.missing(), vec![0, 1]);
        assert!(g.arrive(info(0, 3), from(2)).is_empty());
        let out = g.arrive(info(1, 3), from(3));
        assert!(g.is_complete());
        assert_eq!(out.len(), 3);
        for o in &out {
            assert_eq!(o.to, info(o.rank, 3).reply_addr);
            assert_eq!(o.reply, Reply::Successor(info((o.rank + 1) % 3, 3).ring_addr));
        }
        assert!(g.time_out(Duration::from_secs(1)).is_empty());
        // A straggler after completion gets an error, not a ring slot.
        let late = g.arrive(info(1, 3), from(4));
        assert!(matches!(&late[0].reply, Reply::Error(m) if m.contains("already joined")));
    }

    #[test]
    fn single_rank_is_its_own_successor() {
        let mut g = RootGather::new();
        let out = g.arrive(info(0, 1), from(1));
        assert_eq!(
            out,
            vec![Outgoing {
                rank: 0,
                to: info(0, 1).reply_addr,
                reply: Reply::Successor(info(0, 1).ring_addr)
            }]
        );
    }

    #[test]
    fn duplicate_rank_fails_everyone() {
        let mut g = RootGather::new();
        g.arrive(info(0, 3), from(1));
        g.arrive(info(1, 3), from(2));
        let out = g.arrive(info(1, 3), from(3));
        assert_eq!(out.len(), 3);
        for o in &out {
            let Reply::Error(m) = &o.reply else {
                panic!("expected error")
            };
            assert!(m.contains("rank 1 joined twice"), "{m}");
            assert!(m.contains("127.0.0.1:2") && m.contains("127.0.0.1:3"), "{m}");
        }
        let later = g.arrive(info(2, 3), from(4));
        assert_eq!(later.len(), 1);
        assert!(matches!(&later[0].reply, Reply::Error(m) if m.contains("twice")));
    }

    #[test]
    fn nranks_mismatch_and_out_of_range() {
        let mut g = RootGather::new();
        g.arrive(info(0, 4), from(1));
        let out = g.arrive(info(1, 3), from(2));
        assert_eq!(out.len(), 2);
        let Reply::Error(m) = &out[0].reply else { panic!() };
        assert!(
            m.contains("nranks mismatch") && m.contains("nranks=3") && m.contains("nranks=4"),
            "{m}"
        );

        let mut g = RootGather::new();
        let out = g.arrive(info(5, 4), from(1));
        assert!(matches!(&out[0].reply, Reply::Error(m) if m.contains("out of range")));
    }

    #[test]
    fn timeout_names_missing_ranks() {
        let mut g = RootGather::new();
        g.arrive(info(0, 4), from(1));
        g.arrive(info(1, 4), from(2));
        let out = g.time_out(Duration::from_secs(30));
        assert_eq!(out.len(), 2);
        let m = g.failure().unwrap();
        assert_eq!(
            m,
            "bootstrap root: timed out after 30 s waiting for 4 ranks; ranks 2, 3 never connected"
        );
        let mut g = RootGather::new();
        g.arrive(info(0, 2), from(1));
        g.time_out(Duration::from_millis(1500));
        assert!(
            g.failure().unwrap().ends_with("rank 1 never connected"),
            "{:?}",
            g.failure()
        );
    }
}
