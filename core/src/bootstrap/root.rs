//! The bootstrap root: a sans-IO gathering state machine ([`RootGather`]) and the thin
//! event loop that drives it over TCP (NCCL 2.30 `bootstrapRoot` in `src/bootstrap.cc`).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use super::error::{BootstrapError, Result, fmt_duration};
use super::id::{SOCKET_ADDRESS_BYTES, decode_socket_address, encode_socket_address};
use super::reactor::{self, Reactor, Service, Stats, Verdict};
use super::wire::{self, Deadline, Flags, Retry};

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

/// At most this many rejected records are quoted in the root's failure message.
const REJECTS_SHOWN: usize = 8;

/// Sans-IO state of the root while it gathers ranks: who arrived from where, the
/// agreed nranks, the records it rejected, and whether the bootstrap failed. Feed it
/// arrivals and a timeout; it returns the replies to send.
///
/// Every field of a record is checked before it is used: a record with an nranks
/// above [`MAX_NRANKS`](super::MAX_NRANKS), a rank outside its nranks, an nranks that
/// differs from the one this root gathers, or a rank that already joined is rejected:
/// the sender alone gets an error reply naming the problem, the root keeps serving
/// the others, and the rejection is quoted if the gathering later times out. Memory
/// grows with the records that arrived, never with an announced nranks.
#[derive(Debug, Default)]
pub struct RootGather {
    nranks: Option<usize>,
    /// `Some(desc)` when nranks was set by the root's owner, not by a record.
    fixed_by: Option<String>,
    first_from: Option<(usize, SocketAddr)>,
    arrived: BTreeMap<usize, (RankInfo, SocketAddr)>,
    rejected: Vec<String>,
    rejected_count: usize,
    notes: Vec<String>,
    failure: Option<String>,
    complete: bool,
}

fn rank_list(v: &[usize], more: usize) -> String {
    let mut s: Vec<String> = v.iter().map(|r| r.to_string()).collect();
    if more > 0 {
        s.push(format!("… ({more} more)"));
    }
    format!(
        "{} {}",
        if v.len() + more == 1 { "rank" } else { "ranks" },
        s.join(", ")
    )
}

impl RootGather {
    /// A root that has seen nobody yet and learns nranks from the first valid record
    /// (`ncclGetUniqueId`'s root: NCCL's `bootstrapRoot` does the same).
    pub fn new() -> Self {
        Self::default()
    }

    /// A root that knows nranks (started by rank 0 inside `Bootstrap::init` for
    /// `NCCL_COMM_ID`): records with another nranks are rejected.
    pub fn with_nranks(nranks: usize) -> Self {
        RootGather {
            nranks: Some(nranks),
            fixed_by: Some("the rank that started this root".into()),
            ..Self::default()
        }
    }

    /// nranks being gathered (None before it is known).
    pub fn expected(&self) -> Option<usize> {
        self.nranks
    }

    /// Number of distinct ranks that arrived.
    pub fn arrived(&self) -> usize {
        self.arrived.len()
    }

    /// Ranks that have not arrived (empty while nranks is unknown).
    pub fn missing(&self) -> Vec<usize> {
        self.missing_first(usize::MAX).0
    }

    /// The first `limit` missing ranks and how many more are missing.
    fn missing_first(&self, limit: usize) -> (Vec<usize>, usize) {
        let n = self.nranks.unwrap_or(0);
        let total = n - self.arrived.len();
        let shown: Vec<usize> = (0..n)
            .filter(|r| !self.arrived.contains_key(r))
            .take(limit.min(total))
            .collect();
        let more = total - shown.len();
        (shown, more)
    }

    /// Every rank arrived and was told its successor.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The failure message, once the bootstrap failed.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The rejections so far (at most a few are kept verbatim) and their total count.
    pub fn rejected(&self) -> (&[String], usize) {
        (&self.rejected, self.rejected_count)
    }

    /// Records a connection whose record could not even be decoded (it is quoted in
    /// a later failure message).
    pub fn reject_undecodable(&mut self, from: SocketAddr, why: &str) {
        self.note_rejection(format!("an undecodable record from {from} ({why})"));
    }

    /// Adds a sentence (e.g. listener trouble) to a later failure message.
    pub fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    fn note_rejection(&mut self, msg: String) {
        self.rejected_count += 1;
        if self.rejected.len() < REJECTS_SHOWN {
            self.rejected.push(msg);
        }
    }

    fn reject(&mut self, info: &RankInfo, msg: String) -> Vec<Outgoing> {
        self.note_rejection(msg.clone());
        vec![Outgoing {
            rank: info.rank,
            to: info.reply_addr,
            reply: Reply::Error(format!("bootstrap root: {msg}")),
        }]
    }

    fn fail(&mut self, msg: String) -> Vec<Outgoing> {
        self.failure = Some(msg.clone());
        self.arrived
            .values()
            .map(|(i, _)| Outgoing {
                rank: i.rank,
                to: i.reply_addr,
                reply: Reply::Error(msg.clone()),
            })
            .collect()
    }

    /// A rank reported `info` over a connection from `from`. Returns the replies to
    /// send: none while waiting; every rank's successor when the last one arrives; an
    /// error to this sender alone when its record is rejected (nranks over the limit
    /// or different from the gathered one, rank out of range, rank already joined,
    /// arrival after completion or after the bootstrap failed).
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
                "rank {} (from {from}) arrived after all {} ranks had already joined",
                info.rank,
                self.nranks.unwrap_or(0)
            );
            return self.reject(&info, msg);
        }
        if info.nranks > super::MAX_NRANKS {
            let msg = format!(
                "rank {} (from {from}) says nranks={}, above the bootstrap's limit of {} ranks",
                info.rank,
                info.nranks,
                super::MAX_NRANKS
            );
            return self.reject(&info, msg);
        }
        if info.rank >= info.nranks {
            let msg = format!(
                "rank {} (from {from}) is out of range for its nranks={}",
                info.rank, info.nranks
            );
            return self.reject(&info, msg);
        }
        match self.nranks {
            None => {
                self.nranks = Some(info.nranks);
                self.first_from = Some((info.rank, from));
            }
            Some(n) if n != info.nranks => {
                let by = match (&self.fixed_by, self.first_from) {
                    (Some(d), _) => d.clone(),
                    (None, Some((r0, a0))) => format!("rank {r0} (from {a0}), the first to arrive"),
                    (None, None) => "an earlier rank".into(),
                };
                let msg = format!(
                    "nranks mismatch: rank {} (from {from}) says nranks={} but this root gathers nranks={n} (set by \
                     {by}); every rank must pass the same nranks",
                    info.rank, info.nranks
                );
                return self.reject(&info, msg);
            }
            Some(_) => {}
        }
        if let Some((_, prev_from)) = self.arrived.get(&info.rank) {
            let msg = format!(
                "rank {} joined twice (from {prev_from}, which keeps its place, and from {from}); every process must \
                 use a distinct rank",
                info.rank
            );
            return self.reject(&info, msg);
        }
        self.arrived.insert(info.rank, (info, from));
        let n = self.nranks.expect("set above");
        if self.arrived.len() < n {
            return Vec::new();
        }
        self.complete = true;
        let infos: Vec<&RankInfo> = self.arrived.values().map(|(i, _)| i).collect();
        (0..n)
            .map(|r| Outgoing {
                rank: r,
                to: infos[r].reply_addr,
                reply: Reply::Successor(infos[(r + 1) % n].ring_addr),
            })
            .collect()
    }

    /// The wait ran out after `waited`: fails the bootstrap with a message naming the
    /// ranks that never connected (the first 32), the records rejected meanwhile and
    /// any notes, and returns the error replies for the ranks that did connect.
    pub fn time_out(&mut self, waited: Duration) -> Vec<Outgoing> {
        if self.complete || self.failure.is_some() {
            return Vec::new();
        }
        let n = self.nranks.unwrap_or(0);
        let (shown, more) = self.missing_first(32);
        let mut msg = format!(
            "bootstrap root: timed out after {} waiting for {n} ranks; {} never connected",
            fmt_duration(waited),
            rank_list(&shown, more)
        );
        if self.rejected_count > 0 {
            msg.push_str(&format!(
                "; meanwhile the root rejected {} record{}: {}",
                self.rejected_count,
                if self.rejected_count == 1 { "" } else { "s" },
                self.rejected.join("; ")
            ));
            if self.rejected_count > self.rejected.len() {
                msg.push_str(&format!(" (and {} more)", self.rejected_count - self.rejected.len()));
            }
        }
        for note in &self.notes {
            msg.push_str("; ");
            msg.push_str(note);
        }
        self.fail(msg)
    }
}

/// Parameters of a running root.
pub(crate) struct RootParams {
    pub magic: u64,
    pub timeout: Duration,
    pub retry: Retry,
    pub abort: Arc<AtomicBool>,
    /// `Some(n)` when the root's owner knows nranks.
    pub nranks: Option<usize>,
}

/// A root of this process as its ranks see it: while it runs, and after it gave up.
/// A rank whose wait for the root's reply times out asks it what went wrong: a root
/// that ran out of file descriptors may have been unable to send its report at all.
#[derive(Debug)]
struct LocalRoot {
    addr: SocketAddr,
    stats: Arc<Stats>,
    /// `Some(message)` once the root gave up (its report of missing ranks).
    failure: Mutex<Option<String>>,
    /// The root's event loop has ended.
    ended: AtomicBool,
}

/// Ended roots whose record is kept (the newest; older ones are forgotten). Only
/// roots that failed or met trouble are kept after they end.
const ENDED_ROOTS_KEPT: usize = 16;

/// Roots of this process (running, and the last [`ENDED_ROOTS_KEPT`] that ended
/// badly), oldest first.
static LOCAL_ROOTS: Mutex<Vec<Arc<LocalRoot>>> = Mutex::new(Vec::new());

/// What a rank of this process can learn about the root of this process listening
/// on `addr`: the report it gave up with (which the rank may never have received),
/// or the trouble it met so far (see [`Stats::trouble`]). `None` when there is no
/// such root or nothing to say.
pub(crate) fn local_root_trouble(addr: SocketAddr) -> Option<String> {
    let root = LOCAL_ROOTS
        .lock()
        .ok()?
        .iter()
        .rev()
        .find(|r| r.addr == addr)
        .cloned()?;
    if let Some(f) = root.failure.lock().ok().and_then(|g| g.clone()) {
        return Some(format!("gave up with this report: \"{f}\""));
    }
    root.stats.trouble()
}

impl LocalRoot {
    fn register(addr: SocketAddr, stats: Arc<Stats>) -> Arc<LocalRoot> {
        let root = Arc::new(LocalRoot {
            addr,
            stats,
            failure: Mutex::new(None),
            ended: AtomicBool::new(false),
        });
        if let Ok(mut g) = LOCAL_ROOTS.lock() {
            g.push(root.clone());
        }
        root
    }

    /// The root's event loop ended: forget it, unless it failed or met trouble; keep
    /// at most [`ENDED_ROOTS_KEPT`] ended roots.
    fn end(self: &Arc<Self>) {
        self.ended.store(true, Ordering::SeqCst);
        let Ok(mut g) = LOCAL_ROOTS.lock() else { return };
        let keep = self.failure.lock().is_ok_and(|f| f.is_some()) || self.stats.trouble().is_some();
        if !keep {
            g.retain(|r| !Arc::ptr_eq(r, self));
        }
        let ended = g.iter().filter(|r| r.ended.load(Ordering::SeqCst)).count();
        let mut excess = ended.saturating_sub(ENDED_ROOTS_KEPT);
        g.retain(|r| {
            if excess > 0 && r.ended.load(Ordering::SeqCst) {
                excess -= 1;
                return false;
            }
            true
        });
    }
}

struct RootService {
    local: SocketAddr,
    gather: RootGather,
    timeout: Duration,
    first: Option<Instant>,
    replies: mpsc::Sender<Vec<Outgoing>>,
    stats: Arc<Stats>,
    record: Arc<LocalRoot>,
}

impl Drop for RootService {
    /// The event loop owns the service: dropping it means the root has ended
    /// (complete, failed, or aborted).
    fn drop(&mut self) {
        self.record.end();
    }
}

impl RootService {
    fn send(&self, out: Vec<Outgoing>) {
        if !out.is_empty() {
            let _ = self.replies.send(out);
        }
    }
}

impl Service for RootService {
    fn on_opening(&mut self, from: SocketAddr, opening: Vec<u8>) -> Verdict {
        let info = match RankInfo::decode(&opening) {
            Ok(i) => i,
            Err(e) => {
                self.gather.reject_undecodable(from, &e);
                return Verdict::Reject(format!("malformed extInfo: {e}"));
            }
        };
        let local = self.local;
        tracing::debug!(target: "ferroccl::bootstrap", "bootstrap root {local}: rank {}/{} from {from}", info.rank, info.nranks);
        self.first.get_or_insert_with(Instant::now);
        let before = self.gather.rejected().1;
        let out = self.gather.arrive(info, from);
        if self.gather.rejected().1 > before {
            let (shown, _) = self.gather.rejected();
            let why = shown.last().cloned().unwrap_or_else(|| "(see earlier)".into());
            tracing::warn!(target: "ferroccl::bootstrap", "bootstrap root {local}: rejected a record: {why}");
        }
        if self.gather.is_complete() {
            tracing::info!(target: "ferroccl::bootstrap", "bootstrap root {local}: all {} ranks joined", self.gather.arrived());
        }
        self.send(out);
        Verdict::Close
    }

    fn on_tick(&mut self) -> bool {
        if self.gather.is_complete() || self.gather.failure().is_some() {
            return false;
        }
        if let Some(t0) = self.first
            && t0.elapsed() >= self.timeout
        {
            if let Some(t) = self.stats.trouble() {
                self.gather.note(format!("the root's listener {t}"));
            }
            let out = self.gather.time_out(self.timeout);
            if let Some(f) = self.gather.failure() {
                tracing::error!(target: "ferroccl::bootstrap", "{f}");
                if let Ok(mut g) = self.record.failure.lock() {
                    *g = Some(f.to_string());
                }
            }
            self.send(out);
            return false;
        }
        true
    }
}

/// Starts the root on `listener`: one event-loop thread for the listener and one
/// thread sending replies. The gathering deadline starts at the first valid record;
/// the root ends once every rank was answered, or (after a timeout) once the ranks
/// that arrived were told which ranks are missing. It also ends on abort.
pub(crate) fn spawn_root(listener: TcpListener, p: RootParams) -> Result<()> {
    let local = listener
        .local_addr()
        .map_err(|e| BootstrapError::io("root listener address", e))?;
    let (tx, rx) = mpsc::channel::<Vec<Outgoing>>();
    let stats = Arc::new(Stats::default());
    let record = LocalRoot::register(local, stats.clone());
    let service = RootService {
        local,
        gather: match p.nranks {
            Some(n) => RootGather::with_nranks(n),
            None => RootGather::new(),
        },
        timeout: p.timeout,
        first: None,
        replies: tx,
        stats: stats.clone(),
        record,
    };
    let (magic, retry, abort, timeout) = (p.magic, p.retry, p.abort.clone(), p.timeout);
    std::thread::Builder::new()
        .name("ferroccl-bs-reply".into())
        .spawn(move || {
            while let Ok(batch) = rx.recv() {
                send_replies(local, batch, magic, retry, timeout, &abort);
            }
        })
        .map_err(|e| BootstrapError::io("spawning the bootstrap root's reply thread", e))?;
    Reactor::spawn(
        listener,
        "ferroccl-bs-root",
        reactor::Params {
            name: format!("bootstrap root {local}"),
            magic: p.magic,
            opening_max: EXT_INFO_BYTES,
            frame_max: 0,
            pending_timeout: p.timeout,
            abort: p.abort.clone(),
        },
        stats,
        service,
    )?;
    Ok(())
}

/// Most replies sent at once (each connects to a rank's reply listener).
const REPLY_WORKERS: usize = 8;

/// Sends a batch of replies, up to [`REPLY_WORKERS`] at a time, each bounded by
/// `min(timeout, TIMEOUT_SLACK)`: an unreachable rank cannot delay the others' replies.
/// A connection that cannot be made for lack of descriptors (or buffers, memory) is
/// retried with backoff within that bound, as the root's listener retries `accept`:
/// the report of a root that ran out of descriptors is the one that says so.
fn send_replies(
    local: SocketAddr,
    out: Vec<Outgoing>,
    magic: u64,
    retry: Retry,
    timeout: Duration,
    abort: &AtomicBool,
) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = out.len().clamp(1, REPLY_WORKERS);
    std::thread::scope(|sc| {
        for _ in 0..workers {
            sc.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(o) = out.get(i) else { break };
                    let what = || format!("bootstrap root {local}: sending rank {}'s reply to {}", o.rank, o.to);
                    let dl = Deadline::after(timeout.min(super::TIMEOUT_SLACK));
                    let flags = Flags { abort, stop: None };
                    let retry = Retry {
                        count: retry.count.min(3),
                        sleep: retry.sleep,
                    };
                    let r = connect_for_reply(o.to, magic, retry, &dl, flags, &what).and_then(|mut s| {
                        let _ = s.set_write_timeout(Some(timeout.min(super::TIMEOUT_SLACK)));
                        wire::write_frame(&mut s, &o.reply.encode(), &what)
                    });
                    if let Err(e) = r {
                        tracing::warn!(target: "ferroccl::bootstrap", "{e}");
                    }
                }
            });
        }
    });
}

/// [`wire::connect_bootstrap`], retried with backoff (10 ms doubling to 1 s) while it
/// fails for lack of descriptors, buffers or memory, until `dl` or a flag ends it.
fn connect_for_reply(
    to: SocketAddr,
    magic: u64,
    retry: Retry,
    dl: &Deadline,
    flags: Flags<'_>,
    what: &dyn Fn() -> String,
) -> Result<std::net::TcpStream> {
    let mut backoff = Duration::from_millis(10);
    loop {
        match wire::connect_bootstrap(to, magic, retry, dl, flags, what) {
            Err(BootstrapError::Io { source, .. }) if wire::resource_error(&source) => {
                tracing::debug!(target: "ferroccl::bootstrap", "{}: {source}; retrying with backoff", what());
                let until = Instant::now() + backoff;
                while Instant::now() < until {
                    let slice = wire::next_slice(dl, flags, what).map_err(|e| match e {
                        BootstrapError::Timeout { what, waited } => BootstrapError::Timeout {
                            what: format!("{what} (the last attempt failed: {source})"),
                            waited,
                        },
                        e => e,
                    })?;
                    std::thread::sleep(slice.min(until.saturating_duration_since(Instant::now())));
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            r => return r,
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

    fn error_of(o: &Outgoing) -> &str {
        match &o.reply {
            Reply::Error(m) => m,
            r => panic!("expected an error reply, got {r:?}"),
        }
    }

    #[test]
    fn duplicate_rank_is_rejected_and_the_first_keeps_its_place() {
        let mut g = RootGather::new();
        g.arrive(info(0, 3), from(1));
        g.arrive(info(1, 3), from(2));
        let out = g.arrive(info(1, 3), from(3));
        assert_eq!(out.len(), 1, "only the duplicate is answered");
        let m = error_of(&out[0]);
        assert!(m.contains("rank 1 joined twice"), "{m}");
        assert!(m.contains("127.0.0.1:2") && m.contains("127.0.0.1:3"), "{m}");
        assert!(g.failure().is_none());
        // The root keeps serving: the last rank completes the ring.
        let out = g.arrive(info(2, 3), from(4));
        assert!(g.is_complete());
        assert_eq!(out.len(), 3);
        assert!(out.iter().all(|o| matches!(o.reply, Reply::Successor(_))));
    }

    #[test]
    fn nranks_mismatch_out_of_range_and_huge_are_rejected_alone() {
        let mut g = RootGather::new();
        g.arrive(info(0, 4), from(1));
        let out = g.arrive(info(1, 3), from(2));
        assert_eq!(out.len(), 1);
        let m = error_of(&out[0]);
        assert!(
            m.contains("nranks mismatch") && m.contains("nranks=3") && m.contains("nranks=4"),
            "{m}"
        );
        assert!(m.contains("rank 0 (from 127.0.0.1:1)"), "{m}");
        let out = g.arrive(info(5, 4), from(3));
        assert!(error_of(&out[0]).contains("out of range"));
        let out = g.arrive(info(0, i32::MAX as usize), from(4));
        assert!(error_of(&out[0]).contains("above the bootstrap's limit"), "{:?}", out);
        assert_eq!(g.expected(), Some(4));
        assert_eq!(g.rejected().1, 3);
        assert!(g.failure().is_none());

        // A huge first record does not size anything and does not set nranks.
        let mut g = RootGather::new();
        let out = g.arrive(info(0, i32::MAX as usize), from(1));
        assert_eq!(out.len(), 1);
        assert_eq!(g.expected(), None);
        assert!(g.arrive(info(0, 2), from(2)).is_empty());
        assert_eq!(g.arrive(info(1, 2), from(3)).len(), 2);
    }

    #[test]
    fn known_nranks_rejects_the_first_wrong_record() {
        let mut g = RootGather::with_nranks(2);
        let out = g.arrive(info(0, 3), from(1));
        let m = error_of(&out[0]);
        assert!(
            m.contains("this root gathers nranks=2 (set by the rank that started this root)"),
            "{m}"
        );
        assert!(g.arrive(info(1, 2), from(2)).is_empty());
        assert_eq!(g.missing(), vec![0]);
    }

    #[test]
    fn timeout_quotes_rejections_and_notes() {
        let mut g = RootGather::with_nranks(3);
        g.arrive(info(0, 3), from(1));
        g.arrive(info(0, 3), from(2));
        g.reject_undecodable(from(3), "bad family");
        g.note("the root's listener ran out of file descriptors".into());
        let out = g.time_out(Duration::from_secs(2));
        assert_eq!(out.len(), 1);
        let m = error_of(&out[0]);
        assert!(m.starts_with("bootstrap root: timed out after 2 s waiting for 3 ranks; ranks 1, 2 never connected; meanwhile the root rejected 2 records: rank 0 joined twice"), "{m}");
        assert!(m.contains("an undecodable record from 127.0.0.1:3 (bad family)"), "{m}");
        assert!(m.ends_with("; the root's listener ran out of file descriptors"), "{m}");
    }

    /// Starts a root on loopback and sends it `info` as a rank would; returns the root's
    /// address and the listener `info` names for the reply (kept, never accepted).
    fn root_with_one_record(timeout: Duration, nranks: usize) -> (SocketAddr, std::net::TcpListener) {
        use std::io::Write;
        let magic = 0x5eed;
        let listener = wire::listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        spawn_root(
            listener,
            RootParams {
                magic,
                timeout,
                retry: Retry {
                    count: 0,
                    sleep: Duration::from_millis(1),
                },
                abort: Arc::new(AtomicBool::new(false)),
                nranks: None,
            },
        )
        .unwrap();
        let reply = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let info = RankInfo {
            rank: 0,
            nranks,
            reply_addr: reply.local_addr().unwrap(),
            ring_addr: reply.local_addr().unwrap(),
        };
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let mut bytes = wire::encode_handshake(magic, wire::SOCKET_TYPE_BOOTSTRAP).to_vec();
        bytes.extend_from_slice(&(EXT_INFO_BYTES as u32).to_ne_bytes());
        bytes.extend_from_slice(&info.encode());
        s.write_all(&bytes).unwrap();
        (addr, reply)
    }

    /// The record of the root at `addr`, once its event loop has ended (`None` if it
    /// is forgotten); waits at most 60 s.
    fn ended_root(addr: SocketAddr) -> Option<Arc<LocalRoot>> {
        let t0 = Instant::now();
        loop {
            let found = LOCAL_ROOTS.lock().unwrap().iter().find(|r| r.addr == addr).cloned();
            match found {
                None => return None,
                Some(r) if r.ended.load(Ordering::SeqCst) => return Some(r),
                Some(_) => {}
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "the root at {addr} did not end");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_root_that_gave_up_is_remembered_after_it_ends() {
        let (addr, _reply) = root_with_one_record(Duration::from_millis(200), 2);
        assert!(ended_root(addr).is_some(), "a failed root must stay known");
        let t = local_root_trouble(addr).expect("the failed root's report");
        assert!(
            t.starts_with(
                "gave up with this report: \"bootstrap root: timed out after 200 ms waiting for 2 ranks; rank 1 never \
                 connected\""
            ),
            "{t}"
        );
    }

    #[test]
    fn a_root_that_completed_is_forgotten() {
        let (addr, _reply) = root_with_one_record(Duration::from_secs(60), 1);
        assert!(
            ended_root(addr).is_none(),
            "a complete root without trouble is forgotten"
        );
        assert_eq!(local_root_trouble(addr), None);
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
