//! The context a check runs in: the loaded plugin, and checked, timed, watched
//! wrappers around every plugin call (each returns [`Res`], so a plugin error
//! becomes a failure naming the call).

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

    /// Drives `connect` and `accept` alternately (same handle buffer each time, as
    /// NCCL does) until both return a comm.
    pub fn establish(&mut self, listen: RawComm, handle: &mut NetHandle) -> Res<(RawComm, RawComm)> {
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
                    "connect and accept, called alternately with the same handle, establish a connection (§1.5)",
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
        let (l, mut h) = self.listen()?;
        let (send, recv) = self.establish(l, &mut h)?;
        Ok(Pair {
            listen: Some(l),
            send,
            recv,
        })
    }

    /// Closes every comm of `p` (listen first, as NCCL does).
    pub fn close_pair(&mut self, p: Pair) -> Res {
        if let Some(l) = p.listen {
            self.call(Call::CloseListen, "closeListen", |n| n.close_listen(l))?;
        }
        self.call(Call::CloseSend, "closeSend", |n| n.close_send(p.send))?;
        self.call(Call::CloseRecv, "closeRecv", |n| n.close_recv(p.recv))?;
        Ok(())
    }

    /// `isend` once (`None` = back-pressure).
    pub fn isend(&mut self, comm: RawComm, buf: &mut [u8], tag: i32, mr: Option<RawMr>) -> Res<Option<RawRequest>> {
        let (p, len) = (buf.as_mut_ptr(), buf.len());
        let what = format!("isend of {}", human(len));
        self.call(Call::Isend, &what, |n| n.isend(comm, p, len, tag, mr))
    }

    /// `irecv` of one buffer once (`None` = back-pressure).
    pub fn irecv(&mut self, comm: RawComm, buf: &mut [u8], tag: i32, mr: Option<RawMr>) -> Res<Option<RawRequest>> {
        let slot = RecvSlot {
            data: buf.as_mut_ptr(),
            size: buf.len(),
            tag,
            mr,
        };
        let what = format!("irecv of {}", human(buf.len()));
        self.call(Call::Irecv, &what, |n| n.irecv(comm, &[slot], false))
    }

    /// `test` once.
    pub fn test(&mut self, req: RawRequest, sizes: &mut [usize]) -> Res<bool> {
        self.call(Call::Test, "test", |n| n.test(req, sizes))
    }

    /// Posts with retries while the plugin answers NULL (back-pressure), testing
    /// nothing in between; fails after [`REQUEST_DEADLINE`].
    pub fn post(&mut self, what: &str, f: impl FnMut(&mut Cx) -> Res<Option<RawRequest>>) -> Res<RawRequest> {
        self.try_post(REQUEST_DEADLINE, f)?.ok_or_else(|| {
            fail!(
                "a NULL request means 'try again later'; a retried post eventually succeeds (§1.5)",
                "{what} kept returning a NULL request for {} s",
                REQUEST_DEADLINE.as_secs()
            )
        })
    }

    /// Retries `f` while it returns a NULL request, for at most `wait`; `None` when
    /// it was still NULL then (errors from `f` end the retries at once).
    pub fn try_post(
        &mut self,
        wait: Duration,
        mut f: impl FnMut(&mut Cx) -> Res<Option<RawRequest>>,
    ) -> Res<Option<RawRequest>> {
        let start = Instant::now();
        loop {
            if let Some(r) = f(self)? {
                return Ok(Some(r));
            }
            if start.elapsed() > wait {
                return Ok(None);
            }
            std::thread::yield_now();
        }
    }

    /// Tests `reqs` round-robin until all are done; returns each one's sizes[0].
    pub fn wait_all(&mut self, what: &str, reqs: &[RawRequest]) -> Res<Vec<usize>> {
        let mut sizes = vec![usize::MAX; reqs.len()];
        let mut done = vec![false; reqs.len()];
        let start = Instant::now();
        let mut spins = 0u64;
        while done.iter().any(|d| !d) {
            // Test in posting order; once a request is done it is never tested again.
            for i in 0..reqs.len() {
                if done[i] {
                    continue;
                }
                let mut s = [usize::MAX];
                if self.test(reqs[i], &mut s)? {
                    done[i] = true;
                    sizes[i] = s[0];
                }
            }
            spins += 1;
            if start.elapsed() > REQUEST_DEADLINE {
                let left = done.iter().filter(|d| !**d).count();
                return Err(fail!(
                    "posted requests complete when tested repeatedly",
                    "{what}: {left} of {} requests still not done after {} s of test() calls",
                    reqs.len(),
                    REQUEST_DEADLINE.as_secs()
                ));
            }
            if spins > 100_000 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        Ok(sizes)
    }

    /// One verified message over `p`: receive buffer of `recv_len`, message of
    /// `len` bytes with pattern `seed`. Returns the size `test` reported on the receiver.
    pub fn roundtrip(&mut self, p: &Pair, len: usize, recv_len: usize, seed: u64) -> Res<usize> {
        let mut sbuf = vec![0u8; len];
        fill(&mut sbuf, seed);
        let mut rbuf = vec![0u8; recv_len];
        let what = format!("message of {}", human(len));
        let rr = self.post(&what, |cx| cx.irecv(p.recv, &mut rbuf, 0, None))?;
        let sr = self.post(&what, |cx| cx.isend(p.send, &mut sbuf, 0, None))?;
        let sizes = self.wait_all(&what, &[sr, rr])?;
        if let Err(at) = verify(&rbuf[..len.min(recv_len)], seed) {
            return Err(fail!(
                "received bytes equal the sent bytes",
                "{what}: byte at offset {at} is {:#04x}, sent {:#04x}",
                rbuf[at],
                pattern_byte(seed, at)
            ));
        }
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

/// Open file descriptors of this process (`/proc/self/fd`).
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// Threads of this process (`/proc/self/task`).
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0)
}

impl Cx {
    /// One message without data verification (performance sweep).
    pub fn roundtrip_unverified(&mut self, p: &Pair, len: usize, _seed: u64) -> Res {
        let mut sbuf = vec![0u8; len];
        let mut rbuf = vec![0u8; len];
        let rr = self.post("irecv", |cx| cx.irecv(p.recv, &mut rbuf, 0, None))?;
        let sr = self.post("isend", |cx| cx.isend(p.send, &mut sbuf, 0, None))?;
        self.wait_all("message", &[sr, rr])?;
        Ok(())
    }

    /// `count` messages of `len` bytes with up to `depth` in flight (performance sweep).
    pub fn stream(&mut self, p: &Pair, len: usize, count: usize, depth: usize) -> Res {
        let mut sbuf = vec![0u8; len];
        let mut rbufs: Vec<Vec<u8>> = (0..depth).map(|_| vec![0u8; len]).collect();
        let mut q: std::collections::VecDeque<(RawRequest, RawRequest, usize)> = Default::default();
        let (mut posted, mut done) = (0, 0);
        let start = Instant::now();
        while done < count {
            while q.len() < depth && posted < count {
                let slot = posted % depth;
                let rb = &mut rbufs[slot];
                let rr = self.post("irecv", |cx| cx.irecv(p.recv, rb, 0, None))?;
                let sr = self.post("isend", |cx| cx.isend(p.send, &mut sbuf, 0, None))?;
                q.push_back((sr, rr, slot));
                posted += 1;
            }
            if let Some((sr, rr, _)) = q.pop_front() {
                self.wait_all("streamed message", &[sr, rr])?;
                done += 1;
            }
            if start.elapsed() > REQUEST_DEADLINE * 3 {
                return Err(fail!("streamed messages complete", "{done} of {count} done after 60 s"));
            }
        }
        Ok(())
    }
}
