//! The context a check runs in: the loaded plugin, and checked, timed, watched
//! wrappers around every plugin call (each returns [`Res`], so a plugin error
//! becomes a failure naming the call).
//!
//! # How the suite drives a plugin (one contract, one source)
//!
//! Every required check drives the plugin the way NCCL 2.30.7's net transport
//! does (`src/transport/net.cc`), so that a failure means the plugin is wrong:
//!
//! * **A fresh copy of the listen handle per connection**, the same copy for every
//!   retry of that connection: `sendConnect` copies the peer's handle into its
//!   `netSendConnectArgs` and `sendProxyConnect` calls
//!   `connect(ctx, dev, req->handle, ...)` with that copy until a sendComm comes
//!   back ([`Cx::establish`]). A plugin may keep connect state inside the handle.
//! * **One listen per connection**, closed right after accept:
//!   `recvProxySetup` listens, `recvProxyConnect` accepts then `closeListen`s.
//! * **Registered memory on every post**: the FIFO buffers are `regMr`ed when the
//!   connection is made (`sendProxyConnect`/`recvProxyConnect`) and every
//!   `isend`/`irecv` passes that `mhandle` (`sendProxyProgress`:
//!   `isend(..., sub->sendMhandle, ...)`; `recvProxyProgress`: `mhandles[i] =
//!   sub->recvMhandle`). [`Cx::isend`] and [`Cx::irecv`] take a [`RawMr`], not an
//!   option; only the advisory NULL-mhandle check uses [`Cx::isend_raw`].
//! * **`test` in posting order, one comm at a time**: `sendProxyProgress` tests only
//!   `requests[(base + done) % NCCL_STEPS]` and `recvProxyProgress` only
//!   `requests[received % NCCL_STEPS]`, the oldest outstanding request of the
//!   connection, and never tests a request again once done. [`Cx`] keeps every
//!   posted request in a per-comm queue; [`Cx::test`] refuses (a suite bug, it
//!   panics) to test anything but the head, and [`Cx::wait_all`] progresses by
//!   testing the head of every comm's queue, as NCCL's proxy loop does. A NULL
//!   request from `isend`/`irecv` means "try again": NCCL's loop goes on
//!   progressing (testing) before it retries the post, and so does [`Cx::post`].
//! * **Sizes only where NCCL reads them**: the receive side's `test` sizes
//!   (`recvProxyProgress` sums them into `totalSize` and stores `sizes[i]` as each
//!   sub's `transSize`); the send side's are never read (`sendProxyProgress`
//!   passes `&size` and ignores it). Data checks verify bytes; the checks whose
//!   rule is "test reports the received size" verify sizes.
//! * **`iflush` only for GPU memory**: `recvProxyProgress` calls `iflush` only when
//!   `totalSize > 0 && p == NCCL_PROTO_SIMPLE && needFlush`, and `needFlush` needs
//!   `useGdr` (CUDA buffers); never for host memory.
//!
//! Behaviour NCCL never exercises (out-of-order `test`, a NULL `mhandle`, reusing a
//! handle buffer or a listenComm) is only checked by advisory checks.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ferroccl::plugin::net::{NetHandle, NetPlugin, Properties, PtrType, RawComm, RawCtx, RawMr, RawRequest, RecvSlot};

use crate::outcome::{Res, Stop};
use crate::watch::{self, Call};
use crate::{fail, skip};

/// A single call slower than this is noted (advisory; the checklist's 100 ms).
pub const SLOW_CALL: Duration = Duration::from_millis(100);
/// How long connection establishment may take in total before a check fails.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(10);
/// How long one request may take to complete (by repeated `test`) before a check fails.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(20);

/// A posted request that has not completed yet.
#[derive(Debug)]
struct Outstanding {
    req: RawRequest,
    /// Size slots `test` fills (1, or n for a grouped receive).
    nsizes: usize,
    /// What was posted, for messages.
    what: String,
}

/// Everything a check body needs.
pub struct Cx {
    /// The plugin, loaded for this check's API version.
    pub net: std::sync::Arc<dyn NetPlugin>,
    /// The per-communicator context the check uses.
    pub ctx: RawCtx,
    /// Device under test.
    pub dev: usize,
    /// `devices()` as returned at load.
    pub ndev: usize,
    /// Devices the per-device checks cover (`--device N`, or all).
    pub devices: Vec<usize>,
    /// Lines the plugin logged through the host's logger while loading and in `init`.
    pub init_log_lines: usize,
    /// API version under test.
    pub version: u32,
    /// Properties of [`Cx::dev`].
    pub props: Properties,
    /// How the user named the plugin (passed on to peer processes).
    pub plugin: String,
    /// `--full` tier.
    pub full: bool,
    /// Observations added to the outcome.
    pub notes: Vec<String>,
    /// Measurements added to the outcome.
    pub metrics: Option<serde_json::Value>,
    /// Longest single call seen per entry point (name, duration).
    pub slowest: Vec<(&'static str, Duration)>,
    /// Posted, not yet completed requests: per comm, in posting order.
    queues: Vec<(RawComm, VecDeque<Outstanding>)>,
    /// Requests that completed while the suite progressed other comms, with their
    /// sizes, until a wait collects them.
    finished: Vec<(RawRequest, Vec<usize>)>,
}

/// A connected pair of comms on one device in this process.
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    /// The listenComm (closed already when `None`).
    pub listen: Option<RawComm>,
    /// The sendComm.
    pub send: RawComm,
    /// The recvComm.
    pub recv: RawComm,
}

/// `NCCL_NET_MAX_REQUESTS` for `version`: 8 for v6, 32 from v7 (reference §4.1).
pub fn max_requests(version: u32) -> usize {
    if version <= 6 { 8 } else { 32 }
}

fn word(seed: u64, k: u64) -> u64 {
    // splitmix64 of (seed, word index): cheap and different for every message.
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(k.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        ^ 0x94D0_49BB_1331_11EB;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Deterministic test pattern: byte `i` of message `seed`.
pub fn pattern_byte(seed: u64, i: usize) -> u8 {
    word(seed, (i / 8) as u64).to_le_bytes()[i % 8]
}

/// Fills `buf` with the pattern of message `seed`.
pub fn fill(buf: &mut [u8], seed: u64) {
    for (k, chunk) in buf.chunks_mut(8).enumerate() {
        let w = word(seed, k as u64).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// Checks `buf` against the pattern of message `seed`; `Err(offset)` of the first difference.
pub fn verify(buf: &[u8], seed: u64) -> Result<(), usize> {
    for (k, chunk) in buf.chunks(8).enumerate() {
        let w = word(seed, k as u64).to_le_bytes();
        if chunk != &w[..chunk.len()] {
            let j = chunk.iter().zip(w.iter()).position(|(a, b)| a != b).unwrap_or(0);
            return Err(k * 8 + j);
        }
    }
    Ok(())
}

fn human(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

/// `human` for sizes in messages.
pub fn size_str(n: usize) -> String {
    human(n)
}

impl Cx {
    /// A context for a loaded plugin (see `worker::setup`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        net: std::sync::Arc<dyn NetPlugin>,
        ctx: RawCtx,
        dev: usize,
        ndev: usize,
        devices: Vec<usize>,
        version: u32,
        props: Properties,
        plugin: String,
        full: bool,
    ) -> Cx {
        Cx {
            net,
            ctx,
            dev,
            ndev,
            devices,
            init_log_lines: 0,
            version,
            props,
            plugin,
            full,
            notes: Vec::new(),
            metrics: None,
            slowest: Vec::new(),
            queues: Vec::new(),
            finished: Vec::new(),
        }
    }

    /// A context for another thread driving its own comms on the same plugin
    /// instance, with its own plugin context `ctx` (NCCL: one context per
    /// communicator, each communicator with its own proxy thread).
    pub fn fork(&self, ctx: RawCtx) -> Cx {
        Cx::new(
            self.net.clone(),
            ctx,
            self.dev,
            self.ndev,
            self.devices.clone(),
            self.version,
            self.props.clone(),
            self.plugin.clone(),
            self.full,
        )
    }

    /// Runs one plugin call under the watchdog, timing it and turning an error
    /// into a failure that names the call and `what` it was doing.
    pub fn call<T>(
        &mut self,
        call: Call,
        what: &str,
        f: impl FnOnce(&dyn NetPlugin) -> ferroccl::plugin::net::NetResult<T>,
    ) -> Res<T> {
        let g = watch::enter(call);
        let r = f(&*self.net);
        let took = g.elapsed();
        drop(g);
        let name = call.name();
        match self.slowest.iter_mut().find(|(n, _)| *n == name) {
            Some((_, d)) => *d = (*d).max(took),
            None => self.slowest.push((name, took)),
        }
        r.map_err(|e| Stop::Fail {
            expected: format!("{name} succeeds ({what})"),
            observed: format!("{name} returned an error ({what}): {e}"),
        })
    }

    /// `listen` on the device under test; checks the listenComm is non-NULL (§1.5).
    pub fn listen(&mut self) -> Res<(RawComm, Box<NetHandle>)> {
        let mut h: Box<NetHandle> = Box::new([0u8; 128]);
        let (ctx, dev) = (self.ctx, self.dev);
        let l = self.call(Call::Listen, "listen", |n| n.listen(ctx, dev, &mut h))?;
        if l.0.is_null() {
            return Err(fail!(
                "listen returns a non-NULL listenComm on success (§1.5)",
                "listen succeeded with listenComm == NULL"
            ));
        }
        Ok((l, h))
    }

    /// Connects to the listen `handle` as NCCL does: connect gets **a fresh copy**
    /// of the handle (net.cc `sendConnect` copies the peer's connect info into its
    /// proxy request), the same copy on every retry (`sendProxyConnect`), and
    /// accept is called alternately until both return a comm.
    pub fn establish(&mut self, listen: RawComm, handle: &NetHandle) -> Res<(RawComm, RawComm)> {
        let mut copy: Box<NetHandle> = Box::new(*handle);
        self.establish_with_buffer(listen, &mut copy)
    }

    /// Like [`Cx::establish`] but connects with the caller's handle buffer itself
    /// (whatever an earlier connect left in it): only the advisory
    /// `conn.reuse_handle` does this; NCCL never does.
    pub fn establish_with_buffer(&mut self, listen: RawComm, handle: &mut NetHandle) -> Res<(RawComm, RawComm)> {
        let (ctx, dev) = (self.ctx, self.dev);
        let start = Instant::now();
        let (mut s, mut r) = (None, None);
        let mut calls = 0u64;
        while s.is_none() || r.is_none() {
            if s.is_none() {
                s = self.call(Call::Connect, "connect", |n| n.connect(ctx, dev, handle))?;
            }
            if r.is_none() {
                r = self.call(Call::Accept, "accept", |n| n.accept(listen))?;
            }
            calls += 1;
            if start.elapsed() > CONNECT_DEADLINE {
                return Err(fail!(
                    "connect and accept, called alternately (connect with the same handle copy each time), establish a connection (§1.5)",
                    "no connection after {} s and {calls} connect/accept rounds (sendComm {}, recvComm {})",
                    CONNECT_DEADLINE.as_secs(),
                    if s.is_some() { "returned" } else { "still NULL" },
                    if r.is_some() { "returned" } else { "still NULL" }
                ));
            }
            if calls > 1000 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok((
            s.unwrap_or(RawComm(std::ptr::null_mut())),
            r.unwrap_or(RawComm(std::ptr::null_mut())),
        ))
    }

    /// `listen` + [`Cx::establish`]; the listenComm stays open.
    pub fn pair(&mut self) -> Res<Pair> {
        let (l, h) = self.listen()?;
        let (send, recv) = self.establish(l, &h)?;
        Ok(Pair {
            listen: Some(l),
            send,
            recv,
        })
    }

    /// `closeListen` (nothing is outstanding on a listenComm).
    pub fn close_listen(&mut self, l: RawComm, what: &str) -> Res {
        self.call(Call::CloseListen, what, |n| n.close_listen(l))
    }

    /// `closeSend`; requests still queued on the comm are forgotten.
    pub fn close_send(&mut self, c: RawComm, what: &str) -> Res {
        self.forget(c);
        self.call(Call::CloseSend, what, |n| n.close_send(c))
    }

    /// `closeRecv`; requests still queued on the comm are forgotten.
    pub fn close_recv(&mut self, c: RawComm, what: &str) -> Res {
        self.forget(c);
        self.call(Call::CloseRecv, what, |n| n.close_recv(c))
    }

    /// Forgets the outstanding requests of `comm` (it is being closed).
    pub fn forget(&mut self, comm: RawComm) {
        if let Some(i) = self.queues.iter().position(|(c, _)| *c == comm) {
            let (_, q) = self.queues.remove(i);
            self.finished.retain(|(r, _)| !q.iter().any(|o| o.req == *r));
        }
    }

    /// Closes every comm of `p` (listen first, as NCCL does).
    pub fn close_pair(&mut self, p: Pair) -> Res {
        if let Some(l) = p.listen {
            self.close_listen(l, "closeListen")?;
        }
        self.close_send(p.send, "closeSend")?;
        self.close_recv(p.recv, "closeRecv")?;
        Ok(())
    }

    fn enqueue(&mut self, comm: RawComm, req: RawRequest, nsizes: usize, what: String) {
        let o = Outstanding { req, nsizes, what };
        match self.queues.iter_mut().find(|(c, _)| *c == comm) {
            Some((_, q)) => q.push_back(o),
            None => self.queues.push((comm, VecDeque::from([o]))),
        }
    }

    /// Requests posted on `comm` and not yet completed.
    pub fn outstanding(&self, comm: RawComm) -> usize {
        self.queues.iter().find(|(c, _)| *c == comm).map_or(0, |(_, q)| q.len())
    }

    /// `isend` of `buf` registered as `mr` on `comm`, once (`None` = back-pressure).
    pub fn isend(&mut self, comm: RawComm, buf: &mut [u8], tag: i32, mr: RawMr) -> Res<Option<RawRequest>> {
        self.isend_raw(comm, buf.as_mut_ptr(), buf.len(), tag, Some(mr))
    }

    /// `isend` with any mhandle, NULL included (only the advisory NULL-mhandle
    /// check passes `None`; NCCL always posts registered memory).
    pub fn isend_raw(
        &mut self,
        comm: RawComm,
        p: *mut u8,
        len: usize,
        tag: i32,
        mr: Option<RawMr>,
    ) -> Res<Option<RawRequest>> {
        let what = format!("isend of {}", human(len));
        let r = self.call(Call::Isend, &what, |n| n.isend(comm, p, len, tag, mr))?;
        if let Some(req) = r {
            self.enqueue(comm, req, 1, what);
        }
        Ok(r)
    }

    /// `irecv` of one buffer registered as `mr` on `comm`, once (`None` = back-pressure).
    pub fn irecv(&mut self, comm: RawComm, buf: &mut [u8], tag: i32, mr: RawMr) -> Res<Option<RawRequest>> {
        let slot = RecvSlot {
            data: buf.as_mut_ptr(),
            size: buf.len(),
            tag,
            mr: Some(mr),
        };
        self.irecv_slots(comm, &[slot], false)
    }

    /// `irecv` of `slots.len()` buffers (a grouped receive when more than one),
    /// optionally entered with the `NCCL_NET_OPTIONAL_RECV_COMPLETION` hint.
    pub fn irecv_slots(&mut self, comm: RawComm, slots: &[RecvSlot], hint: bool) -> Res<Option<RawRequest>> {
        let what = if slots.len() == 1 {
            format!("irecv of {}", human(slots[0].size))
        } else {
            format!(
                "grouped irecv of {} buffers ({})",
                slots.len(),
                slots.iter().map(|s| human(s.size)).collect::<Vec<_>>().join(", ")
            )
        };
        let r = self.call(Call::Irecv, &what, |n| n.irecv(comm, slots, hint))?;
        if let Some(req) = r {
            // A plugin that leaves NCCL_NET_OPTIONAL_RECV_COMPLETION (1) in *request
            // gets an error from the host adapter, so `req` is a real request here.
            self.enqueue(comm, req, slots.len(), what);
        }
        Ok(r)
    }

    fn locate(&self, req: RawRequest) -> Option<(usize, usize)> {
        self.queues
            .iter()
            .enumerate()
            .find_map(|(i, (_, q))| q.iter().position(|o| o.req == req).map(|p| (i, p)))
    }

    /// `test` of `req`, which must be the oldest outstanding request of its comm
    /// (NCCL never tests any other: see the module docs). Testing another one is a
    /// bug in the suite, not in the plugin, and panics (reported as such).
    pub fn test(&mut self, req: RawRequest, sizes: &mut [usize]) -> Res<bool> {
        let Some((qi, pos)) = self.locate(req) else {
            panic!(
                "conformance suite bug: test() of a request that is not outstanding (done already, or never posted)"
            );
        };
        assert_eq!(
            pos, 0,
            "conformance suite bug: test() of request #{pos} of its comm; NCCL only tests the oldest outstanding request"
        );
        self.test_at(qi, pos, sizes)
    }

    /// `test` of any outstanding request, out of posting order: only for the
    /// advisory out-of-order check (NCCL never does this).
    pub fn test_unordered(&mut self, req: RawRequest, sizes: &mut [usize]) -> Res<bool> {
        let Some((qi, pos)) = self.locate(req) else {
            panic!("conformance suite bug: test() of a request that is not outstanding");
        };
        self.test_at(qi, pos, sizes)
    }

    fn test_at(&mut self, qi: usize, pos: usize, sizes: &mut [usize]) -> Res<bool> {
        let (req, what) = {
            let o = &self.queues[qi].1[pos];
            (o.req, format!("test of the {}", o.what))
        };
        let r = self.call(Call::Test, &what, |n| n.test(req, sizes));
        if !matches!(r, Ok(false)) {
            // Done, or failed: either way the request is over.
            self.queues[qi].1.remove(pos);
        }
        r
    }

    /// One round of NCCL-style progress: `test` the oldest outstanding request of
    /// every comm once; completed ones are kept (with their sizes) for a wait.
    pub fn progress(&mut self) -> Res {
        let heads: Vec<(RawRequest, usize)> = self
            .queues
            .iter()
            .filter_map(|(_, q)| q.front().map(|o| (o.req, o.nsizes)))
            .collect();
        for (req, n) in heads {
            let mut sizes = vec![0usize; n.max(1)];
            if self.test(req, &mut sizes)? {
                self.finished.push((req, sizes));
            }
        }
        Ok(())
    }

    /// Posts with retries while the plugin answers NULL (back-pressure), running a
    /// progress round between retries as NCCL's proxy loop does; fails after
    /// [`REQUEST_DEADLINE`].
    pub fn post(&mut self, what: &str, f: impl FnMut(&mut Cx) -> Res<Option<RawRequest>>) -> Res<RawRequest> {
        self.try_post(REQUEST_DEADLINE, f)?.ok_or_else(|| {
            fail!(
                "a NULL request means 'try again later'; a retried post eventually succeeds (§1.5)",
                "{what} kept returning a NULL request for {} s",
                REQUEST_DEADLINE.as_secs()
            )
        })
    }

    /// Retries `f` while it returns a NULL request, for at most `wait`, with a
    /// progress round between tries; `None` when it was still NULL then (errors
    /// from `f` end the retries at once).
    pub fn try_post(
        &mut self,
        wait: Duration,
        mut f: impl FnMut(&mut Cx) -> Res<Option<RawRequest>>,
    ) -> Res<Option<RawRequest>> {
        let start = Instant::now();
        let mut tries = 0u64;
        loop {
            if let Some(r) = f(self)? {
                return Ok(Some(r));
            }
            if start.elapsed() > wait {
                return Ok(None);
            }
            self.progress()?;
            tries += 1;
            if tries > 1000 {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Waits until every request in `reqs` completed, progressing every comm in
    /// posting order; returns each one's `sizes[0]`.
    pub fn wait_all(&mut self, what: &str, reqs: &[RawRequest]) -> Res<Vec<usize>> {
        Ok(self
            .wait_sizes(what, reqs)?
            .into_iter()
            .map(|s| s.first().copied().unwrap_or(0))
            .collect())
    }

    /// Like [`Cx::wait_all`], with every size slot of each request (grouped receives).
    pub fn wait_sizes(&mut self, what: &str, reqs: &[RawRequest]) -> Res<Vec<Vec<usize>>> {
        let start = Instant::now();
        let mut rounds = 0u64;
        loop {
            let left: Vec<RawRequest> = reqs
                .iter()
                .copied()
                .filter(|r| !self.finished.iter().any(|(f, _)| f == r))
                .collect();
            if left.is_empty() {
                break;
            }
            if let Some(r) = left.iter().find(|r| self.locate(**r).is_none()) {
                panic!(
                    "conformance suite bug: waiting for request {:p}, which is not outstanding",
                    r.0
                );
            }
            self.progress()?;
            rounds += 1;
            if start.elapsed() > REQUEST_DEADLINE {
                return Err(fail!(
                    "posted requests complete when tested repeatedly (oldest first, per comm)",
                    "{what}: {} of {} requests still not done after {} s of test() calls",
                    left.len(),
                    reqs.len(),
                    REQUEST_DEADLINE.as_secs()
                ));
            }
            if rounds > 100_000 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        Ok(reqs
            .iter()
            .map(|r| {
                let i = self.finished.iter().position(|(f, _)| f == r).expect("finished");
                self.finished.remove(i).1
            })
            .collect())
    }

    /// One verified message over `p`: a receive buffer of `recv_len` bytes and a
    /// message of `len` bytes with pattern `seed`, both registered on their comm
    /// (as NCCL registers its buffers). Returns the size `test` reported on the
    /// receiver (0 when the plugin wrote none: NCCL zeroes the array first).
    pub fn roundtrip(&mut self, p: &Pair, len: usize, recv_len: usize, seed: u64) -> Res<usize> {
        let mut sbuf = vec![0u8; len.max(1)];
        fill(&mut sbuf[..len], seed);
        let mut rbuf = vec![0u8; recv_len.max(1)];
        let what = format!("message of {}", human(len));
        let smr = self.reg_mr(p.send, &mut sbuf)?;
        let rmr = self.reg_mr(p.recv, &mut rbuf)?;
        let rr = self.post(&what, |cx| cx.irecv(p.recv, &mut rbuf[..recv_len], 0, rmr))?;
        let sr = self.post(&what, |cx| cx.isend(p.send, &mut sbuf[..len], 0, smr))?;
        let sizes = self.wait_all(&what, &[sr, rr])?;
        if let Err(at) = verify(&rbuf[..len.min(recv_len)], seed) {
            return Err(fail!(
                "received bytes equal the sent bytes",
                "{what}: byte at offset {at} is {:#04x}, sent {:#04x}",
                rbuf[at],
                pattern_byte(seed, at)
            ));
        }
        self.dereg_mr(p.send, smr)?;
        self.dereg_mr(p.recv, rmr)?;
        Ok(sizes[1])
    }

    /// `regMr` of host memory.
    pub fn reg_mr(&mut self, comm: RawComm, buf: &mut [u8]) -> Res<RawMr> {
        let (p, len) = (buf.as_mut_ptr(), buf.len());
        let what = format!("regMr of {} of host memory", human(len));
        self.call(Call::RegMr, &what, |n| n.reg_mr(comm, p, len, PtrType::Host))
    }

    /// `deregMr`.
    pub fn dereg_mr(&mut self, comm: RawComm, mr: RawMr) -> Res {
        self.call(Call::DeregMr, "deregMr", |n| n.dereg_mr(comm, mr))
    }

    /// Skips unless the plugin's version is at least `v`.
    pub fn need_version(&self, v: u32, why: &str) -> Res {
        if self.version < v {
            return Err(skip!("needs ncclNet v{v} or newer ({why}); testing v{}", self.version));
        }
        Ok(())
    }
}

/// Open file descriptors of this process (`/proc/self/fd`); 0 when unreadable.
pub fn fd_count() -> usize {
    procfs::process::Process::myself()
        .and_then(|p| p.fd_count())
        .unwrap_or(0)
}

/// Threads of this process (`/proc/self/task`); 0 when unreadable.
pub fn thread_count() -> usize {
    procfs::process::Process::myself()
        .and_then(|p| p.tasks())
        .map(|t| t.count())
        .unwrap_or(0)
}

impl Cx {
    /// `count` messages of `len` bytes with up to `depth` in flight, from
    /// registered buffers, without verification (performance sweep); `depth = 1`
    /// measures latency.
    pub fn stream(&mut self, p: &Pair, len: usize, count: usize, depth: usize) -> Res {
        let mut sbuf = vec![0u8; len.max(1)];
        let mut rbufs: Vec<Vec<u8>> = (0..depth).map(|_| vec![0u8; len.max(1)]).collect();
        let smr = self.reg_mr(p.send, &mut sbuf)?;
        let mut rmrs = Vec::new();
        for b in rbufs.iter_mut() {
            rmrs.push(self.reg_mr(p.recv, b)?);
        }
        let mut q: VecDeque<(RawRequest, RawRequest)> = VecDeque::new();
        let (mut posted, mut done) = (0, 0);
        let start = Instant::now();
        while done < count {
            while q.len() < depth && posted < count {
                let slot = posted % depth;
                let (rb, rmr) = (&mut rbufs[slot], rmrs[slot]);
                let rr = self.post("irecv", |cx| cx.irecv(p.recv, &mut rb[..len], 0, rmr))?;
                let sr = self.post("isend", |cx| cx.isend(p.send, &mut sbuf[..len], 0, smr))?;
                q.push_back((sr, rr));
                posted += 1;
            }
            if let Some((sr, rr)) = q.pop_front() {
                self.wait_all("streamed message", &[sr, rr])?;
                done += 1;
            }
            if start.elapsed() > REQUEST_DEADLINE * 3 {
                return Err(fail!("streamed messages complete", "{done} of {count} done after 60 s"));
            }
        }
        self.dereg_mr(p.send, smr)?;
        for mr in rmrs {
            self.dereg_mr(p.recv, mr)?;
        }
        Ok(())
    }
}
