//! The RMA checks (`rma.*`) and the harness they share: a group of ranks formed as
//! NCCL 2.30.7's `src/rma/rma_proxy.cc` forms one (every rank `listen`s on device 0,
//! the handles are all-gathered, every rank calls `connect` with all of them, then
//! `closeListen` and `createContext`), each rank a thread of the worker, every wait
//! bounded by [`WAIT`]; a failing rank poisons the group's barrier so the others stop
//! instead of waiting for it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ferroccl::plugin::library::PluginLibrary;
use ferroccl::plugin::net::{NetHandle, PtrType, RawComm, RawCtx, RawMr, RawRequest};
use ferroccl::plugin::rma::{RmaAdapter, RmaConfig, RmaCtx, RmaSignal, RmaState, RmaXfer, SignalOp};
use ferroccl_plugin_api::abi::NCCL_NET_MR_FLAG_FORCE_SO;

use crate::outcome::Res;
use crate::registry::Level;
use crate::section::SectionCheck;
use crate::{ensure, fail, skip};

use super::worker::phase;

/// The longest one operation, `connect` or a group's per-rank work step may take
/// before the check fails (generous: the suite must never hang, and never judge speed).
pub const WAIT: Duration = Duration::from_secs(20);

/// What an RMA check works with: the table, through the host's adapter.
pub struct RmaCx {
    /// The table, as the runtime drives it.
    pub adapter: Arc<RmaAdapter>,
    /// The library (kept open while the check runs).
    pub lib: Arc<PluginLibrary>,
    /// The `ncclRmaPlugin_vN` under test.
    pub version: u32,
    /// The plugin as named on the command line (for the peer process).
    pub plugin: String,
    /// Extra facts for the report.
    pub notes: Vec<String>,
}

/// A barrier of the rank threads whose wait is bounded by [`WAIT`] and which a
/// failing rank poisons.
pub struct Barrier {
    n: usize,
    st: Mutex<(usize, u64, bool)>,
    cv: Condvar,
}

impl Barrier {
    /// A barrier of `n` parties.
    pub fn new(n: usize) -> Barrier {
        Barrier {
            n,
            st: Mutex::new((0, 0, false)),
            cv: Condvar::new(),
        }
    }

    /// Waits for every party (at most [`WAIT`]).
    pub fn wait(&self) -> Result<(), String> {
        let mut g = self.st.lock().unwrap_or_else(|e| e.into_inner());
        let gen_ = g.1;
        g.0 += 1;
        if g.0 == self.n {
            g.0 = 0;
            g.1 += 1;
            self.cv.notify_all();
            return Ok(());
        }
        let start = Instant::now();
        while g.1 == gen_ {
            if g.2 {
                return Err("another rank failed".into());
            }
            if start.elapsed() > WAIT {
                return Err(format!("the other ranks did not arrive within {} s", WAIT.as_secs()));
            }
            g = self
                .cv
                .wait_timeout(g, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(())
    }

    /// Makes every present and later wait fail.
    pub fn poison(&self) {
        self.st.lock().unwrap_or_else(|e| e.into_inner()).2 = true;
        self.cv.notify_all();
    }
}

/// Where the ranks of a group meet: the handles (the bootstrap all-gather) and a barrier.
pub struct Meet {
    /// Every rank's listen handle.
    pub handles: Mutex<Vec<NetHandle>>,
    /// The barrier of the group's threads (plus any extra party, see [`run_group_with`]).
    pub bar: Barrier,
}

/// One connected rank.
pub struct Rank {
    /// The table.
    pub a: Arc<RmaAdapter>,
    /// Rank in the group.
    pub rank: usize,
    /// Ranks in the group.
    pub n: usize,
    /// Its `init` context.
    pub ctx: RawCtx,
    /// Its collComm (`connect`).
    pub coll: RawComm,
    /// Its RMA context (`createContext`).
    pub rctx: RmaCtx,
}

impl Rank {
    /// `regMrSym` of host memory.
    pub fn reg(&self, buf: &mut [u8], flags: u64) -> Result<RawMr, String> {
        self.a
            .reg_mr_sym(self.coll, buf.as_mut_ptr(), buf.len(), PtrType::Host, flags)
            .map_err(|e| format!("regMrSym of {} B: {e}", buf.len()))
    }

    /// `deregMrSym` of each window.
    pub fn dereg(&self, mrs: &[RawMr]) -> Result<(), String> {
        for m in mrs {
            self.a
                .dereg_mr_sym(self.coll, *m)
                .map_err(|e| format!("deregMrSym: {e}"))?;
        }
        Ok(())
    }

    /// Tests `req` (calling `rmaProgress` between tests) until done, at most [`WAIT`].
    pub fn wait(&self, req: RawRequest, what: &str) -> Result<(), String> {
        let start = Instant::now();
        loop {
            match self.a.test(self.coll, req) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(format!("{what}: {e}")),
            }
            if start.elapsed() > WAIT {
                return Err(format!(
                    "{what}: not done within {} s (test kept returning done = 0)",
                    WAIT.as_secs()
                ));
            }
            self.a.progress(self.rctx).map_err(|e| format!("rmaProgress: {e}"))?;
            std::thread::yield_now();
        }
    }
}

/// An [`RmaXfer`] on context 0.
pub fn xfer(
    local_off: usize,
    local_mr: RawMr,
    size: usize,
    remote_off: usize,
    remote_mr: RawMr,
    rank: usize,
) -> RmaXfer {
    RmaXfer {
        context: 0,
        local_off: local_off as u64,
        local_mr,
        size,
        remote_off: remote_off as u64,
        remote_mr,
        rank: rank as u32,
    }
}

/// A recognisable byte pattern (distinct per `seed`, not periodic in small powers of two).
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8 ^ seed)
        .collect()
}

/// A copy of a buffer the plugin writes from its own threads (a completed request or
/// a barrier ordered those writes before this read).
pub fn view(v: &[u8]) -> Vec<u8> {
    // SAFETY: `v` is valid; the volatile reads keep the compiler from assuming the
    // bytes did not change since the last Rust write.
    (0..v.len())
        .map(|i| unsafe { std::ptr::read_volatile(v.as_ptr().add(i)) })
        .collect()
}

/// The first differing byte of `got` against `want`, described.
pub fn first_diff(got: &[u8], want: &[u8]) -> Option<String> {
    got.iter().zip(want).position(|(g, w)| g != w).map(|i| {
        format!(
            "byte {i} of {} is {:#04x}, expected {:#04x}",
            want.len(),
            got[i],
            want[i]
        )
    })
}

/// Rank `rank` of an `n`-rank group joins it: `init`, `listen` on device 0, the
/// handle published in `meet`, the all-gather (the barrier), `connect`,
/// `closeListen`, `createContext`.
pub fn join(a: &Arc<RmaAdapter>, n: usize, rank: usize, comm_id: u64, meet: &Meet) -> Result<Rank, String> {
    let ctx = a.init_ctx(comm_id).map_err(|e| format!("init: {e}"))?;
    let mut h: NetHandle = [0; 128];
    let listen = a.listen(ctx, 0, &mut h).map_err(|e| format!("listen: {e}"))?;
    meet.handles.lock().unwrap_or_else(|e| e.into_inner())[rank] = h;
    meet.bar.wait()?;
    let mut all = meet.handles.lock().unwrap_or_else(|e| e.into_inner()).clone();
    connect_rest(a, n, rank, ctx, listen, &mut all)
}

/// `connect` with every handle, `closeListen`, `createContext` (NCCL's config: one
/// context, no traffic class).
pub fn connect_rest(
    a: &Arc<RmaAdapter>,
    n: usize,
    rank: usize,
    ctx: RawCtx,
    listen: RawComm,
    all: &mut [NetHandle],
) -> Result<Rank, String> {
    let coll = a.connect(ctx, all, rank, listen).map_err(|e| format!("connect: {e}"))?;
    a.close_listen(listen).map_err(|e| format!("closeListen: {e}"))?;
    let rctx = a
        .create_context(coll, &RmaConfig::default())
        .map_err(|e| format!("createContext: {e}"))?;
    Ok(Rank {
        a: a.clone(),
        rank,
        n,
        ctx,
        coll,
        rctx,
    })
}

/// `destroyContext`, `closeColl`, `finalize`.
pub fn leave(r: &Rank) -> Result<(), String> {
    r.a.destroy_context(r.rctx)
        .map_err(|e| format!("destroyContext: {e}"))?;
    r.a.close_coll(r.coll).map_err(|e| format!("closeColl: {e}"))?;
    r.a.finalize_ctx(r.ctx).map_err(|e| format!("finalize: {e}"))
}

/// The body a rank runs once connected.
pub type Body = Arc<dyn Fn(&Rank, &Barrier) -> Result<(), String> + Send + Sync>;

/// Runs `body` on the `local` ranks (threads) of an `n`-rank group meeting at `meet`
/// (whose barrier may count more parties: the caller's thread, for a peer process),
/// then leaves the group (`destroyContext`, `closeColl`, `finalize`; their errors
/// count only with `judge_leave`). Returns a receiver of each rank's result.
pub fn run_group_with(
    a: &Arc<RmaAdapter>,
    n: usize,
    local: &[usize],
    judge_leave: bool,
    comm_id: u64,
    meet: Arc<Meet>,
    body: Body,
) -> std::sync::mpsc::Receiver<(usize, Result<(), String>)> {
    let (tx, rx) = channel();
    for &rank in local {
        let (a, meet, body, tx) = (a.clone(), meet.clone(), body.clone(), tx.clone());
        let _ = std::thread::Builder::new()
            .name(format!("rma-rank{rank}"))
            .spawn(move || {
                let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let r = join(&a, n, rank, comm_id, &meet)?;
                    body(&r, &meet.bar)?;
                    let left = leave(&r);
                    if judge_leave { left } else { Ok(()) }
                }))
                .unwrap_or_else(|_| Err("the rank's thread panicked".into()));
                if res.is_err() {
                    meet.bar.poison();
                }
                let _ = tx.send((rank, res));
            });
    }
    rx
}

/// Collects `count` rank results within `limit`; the first error, or a rank that did
/// not finish, fails the check with `rule` as the expectation.
pub fn collect(
    rx: &std::sync::mpsc::Receiver<(usize, Result<(), String>)>,
    count: usize,
    limit: Duration,
    rule: &str,
) -> Res {
    let end = Instant::now() + limit;
    let mut errs = Vec::new();
    let mut done = Vec::new();
    for _ in 0..count {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok((r, Ok(()))) => done.push(r),
            Ok((r, Err(e))) => {
                done.push(r);
                errs.push(format!("rank {r}: {e}"));
            }
            Err(_) => {
                return Err(fail!(
                    rule,
                    "a rank did not finish within {} s (finished: {done:?}){}",
                    limit.as_secs(),
                    if errs.is_empty() {
                        String::new()
                    } else {
                        format!("; {}", errs.join("; "))
                    }
                ));
            }
        }
    }
    // A rank that failed poisons the others: report the root cause first.
    errs.sort_by_key(|e| e.contains("another rank failed"));
    if let Some(first) = errs.first() {
        return Err(fail!(rule, "{first}"));
    }
    Ok(())
}

/// Runs `body` on every rank of an `n`-rank group of threads; every rank must succeed.
pub fn group(cx: &RmaCx, n: usize, comm_id: u64, rule: &str, body: Body) -> Res {
    let meet = Arc::new(Meet {
        handles: Mutex::new(vec![[0u8; 128]; n]),
        bar: Barrier::new(n),
    });
    phase(rule);
    let local: Vec<usize> = (0..n).collect();
    let rx = run_group_with(&cx.adapter, n, &local, true, comm_id, meet, body);
    collect(&rx, n, WAIT * 4, rule)
}

/// Skips when the table offers no device: the host adapter's `init` runs `devices()`
/// after the first successful `init` and disables a table that reports 0, as NCCL
/// 2.30.7's `src/plugin/rma.cc` (`ncclRmaInit`) moves on to the next library.
fn need_devices(cx: &RmaCx) -> Res<usize> {
    let ctx = match cx.adapter.init_ctx(0x524d_0001) {
        Ok(ctx) => ctx,
        Err(e) => {
            if let RmaState::Disabled(why) = cx.adapter.state()
                && why.contains("reported 0 devices")
            {
                return Err(skip!(
                    "devices() reported 0: the table is not usable (NCCL 2.30.7's src/plugin/rma.cc moves on to the next library); the in-tree socket plugin offers RMA devices only with NCCL_SOCKET_RMA_ENABLE=1"
                ));
            }
            return Err(fail!("init (and, the first time, devices) succeeds", "{e}"));
        }
    };
    let n = cx.adapter.devices().map_err(|e| fail!("devices succeeds", "{e}"));
    let _ = cx.adapter.finalize_ctx(ctx);
    n
}

/// Slots the host adapter requires after `init` (as NCCL 2.30.7's RMA path calls
/// them); only `rmaProgress` (18) may be NULL.
const REQUIRED: [(usize, &str); 19] = [
    (1, "init"),
    (2, "devices"),
    (3, "getProperties"),
    (4, "listen"),
    (5, "connect"),
    (6, "createContext"),
    (7, "regMrSym"),
    (8, "regMrSymDmaBuf"),
    (9, "deregMrSym"),
    (10, "destroyContext"),
    (11, "closeColl"),
    (12, "closeListen"),
    (13, "iput"),
    (14, "iputSignal"),
    (15, "iget"),
    (16, "iflush"),
    (17, "test"),
    (19, "queryLastError"),
    (20, "finalize"),
];

fn load(cx: &mut RmaCx) -> Res {
    let sym = std::ffi::CString::new(format!("{}{}", super::SECTION.symbol, cx.version)).expect("no NUL");
    let Some(t) = cx.lib.symbol(&sym) else {
        return Err(fail!(format!("the library exports {sym:?}"), "not found"));
    };
    // SAFETY: the table is 21 pointer-sized slots (168 bytes, v13 and v14 alike).
    let slots: [*const c_void; 21] = unsafe { std::ptr::read_unaligned(t.cast()) };
    let null: Vec<&str> = REQUIRED
        .iter()
        .filter(|(i, _)| slots[*i].is_null())
        .map(|(_, n)| *n)
        .collect();
    ensure!(
        null.is_empty(),
        "every slot NCCL's RMA path calls is non-NULL",
        "NULL: {}",
        null.join(", ")
    );
    if slots[18].is_null() {
        cx.notes
            .push("rmaProgress is NULL (the plugin progresses on its own)".into());
    }
    let name = &cx.adapter.info().name;
    ensure!(
        !name.is_empty(),
        "the table has a name (slot 0)",
        "name is NULL or empty"
    );
    cx.notes.push(format!("name '{name}'"));
    Ok(())
}

fn init(cx: &mut RmaCx) -> Res {
    let ndev = need_devices(cx)?;
    let ctx = cx
        .adapter
        .init_ctx(0x524d_0002)
        .map_err(|e| fail!("init succeeds", "{e}"))?;
    for d in 0..ndev {
        let p = cx
            .adapter
            .properties(d)
            .map_err(|e| fail!("getProperties succeeds for every device", "device {d}: {e}"))?;
        ensure!(
            p.ptr_support != 0,
            "every device supports some memory type (ptrSupport)",
            "device {d}: ptrSupport {:#x}",
            p.ptr_support
        );
        cx.notes.push(format!("device {d}: '{}', {} Mb/s", p.name, p.speed));
    }
    cx.adapter
        .finalize_ctx(ctx)
        .map_err(|e| fail!("finalize succeeds", "{e}"))
}

fn connect(cx: &mut RmaCx) -> Res {
    need_devices(cx)?;
    for n in [2usize, 3, 8] {
        phase(&format!("a group of {n} ranks"));
        // Each rank puts its rank number into its slot of every peer's window.
        group(
            cx,
            n,
            0x524d_1000 + n as u64,
            &format!("a group of {n} ranks connects, and a put reaches every peer"),
            Arc::new(move |r: &Rank, bar: &Barrier| {
                let mut src = vec![r.rank as u8 + 1; 8];
                let mut dst = vec![0u8; 8 * r.n];
                let smr = r.reg(&mut src, 0)?;
                let dmr = r.reg(&mut dst, 0)?;
                bar.wait()?;
                let mut reqs = Vec::new();
                for p in (0..r.n).filter(|&p| p != r.rank) {
                    reqs.push(
                        r.a.iput(r.rctx, &xfer(0, smr, 8, 8 * r.rank, dmr, p))
                            .map_err(|e| format!("iput to rank {p}: {e}"))?,
                    );
                }
                for q in reqs {
                    r.wait(q, "iput")?;
                }
                bar.wait()?;
                let got = view(&dst);
                for p in (0..r.n).filter(|&p| p != r.rank) {
                    if got[8 * p..8 * p + 8].iter().any(|&b| b != p as u8 + 1) {
                        return Err(format!("the put of rank {p} is not in rank {}'s window", r.rank));
                    }
                }
                bar.wait()?;
                r.dereg(&[smr, dmr])
            }),
        )?;
    }
    Ok(())
}

/// Sizes of the put/get checks (0, 1, odd, around a page, 1 MiB).
pub const SIZES: [usize; 9] = [0, 1, 7, 8, 63, 4095, 4096, 65_537, 1 << 20];
/// Offsets (alignments) of the put/get checks.
pub const OFFSETS: [usize; 4] = [0, 1, 3, 61];
const CAP: usize = (1 << 20) + 128;

fn put_sizes(cx: &mut RmaCx) -> Res {
    need_devices(cx)?;
    group(
        cx,
        2,
        0x524d_2000,
        "iput of every size and alignment writes exactly those bytes into the peer's window",
        Arc::new(|r: &Rank, bar: &Barrier| {
            let peer = 1 - r.rank;
            let mut src = pattern(CAP, 17 + r.rank as u8);
            let mut dst = vec![0u8; CAP];
            let smr = r.reg(&mut src, 0)?;
            let dmr = r.reg(&mut dst, 0)?;
            let want = pattern(CAP, 17 + peer as u8);
            bar.wait()?;
            for &size in &SIZES {
                for &off in &OFFSETS {
                    let doff = 127 - off;
                    let q =
                        r.a.iput(r.rctx, &xfer(off, smr, size, doff, dmr, peer))
                            .map_err(|e| format!("iput of {size} B: {e}"))?;
                    r.wait(q, &format!("iput of {size} B from offset {off}"))?;
                    bar.wait()?; // both puts done
                    let got = view(&dst[doff..doff + size + 1]);
                    if let Some(d) = first_diff(&got[..size], &want[off..off + size]) {
                        return Err(format!("put of {size} B from offset {off} to offset {doff}: {d}"));
                    }
                    if got[size] != 0 {
                        return Err(format!("put of {size} B to offset {doff} wrote past its end"));
                    }
                    // The peer's put completed (barrier above); its next starts after the one below.
                    dst[doff..doff + size].fill(0);
                    bar.wait()?;
                }
            }
            bar.wait()?;
            r.dereg(&[smr, dmr])
        }),
    )
}

fn get_sizes(cx: &mut RmaCx) -> Res {
    need_devices(cx)?;
    group(
        cx,
        2,
        0x524d_3000,
        "iget of every size and alignment reads exactly those bytes of the peer's window",
        Arc::new(|r: &Rank, bar: &Barrier| {
            let peer = 1 - r.rank;
            let mut src = pattern(CAP, 41 + r.rank as u8);
            let mut dst = vec![0u8; CAP];
            let smr = r.reg(&mut src, 0)?;
            let dmr = r.reg(&mut dst, 0)?;
            let want = pattern(CAP, 41 + peer as u8);
            bar.wait()?;
            for &size in &SIZES {
                for &off in &OFFSETS {
                    let loff = (off * 7) % 64;
                    // Only this rank's gets write `dst`, and none is pending.
                    dst[..loff + size].fill(0xee);
                    let q =
                        r.a.iget(r.rctx, &xfer(loff, dmr, size, off, smr, peer))
                            .map_err(|e| format!("iget of {size} B: {e}"))?;
                    r.wait(q, &format!("iget of {size} B from offset {off}"))?;
                    let got = view(&dst[loff..loff + size]);
                    if let Some(d) = first_diff(&got, &want[off..off + size]) {
                        return Err(format!(
                            "get of {size} B from the peer's offset {off} to offset {loff}: {d}"
                        ));
                    }
                }
            }
            bar.wait()?;
            r.dereg(&[smr, dmr])
        }),
    )
}

fn signal_order(cx: &mut RmaCx) -> Res {
    need_devices(cx)?;
    const PUTS: usize = 200;
    const SLOT: usize = 4096;
    const WINDOW: usize = 8;
    group(
        cx,
        2,
        0x524d_4000,
        "when iputSignal's signal is visible, the put's data is (the target reads the signal with acquire)",
        Arc::new(|r: &Rank, bar: &Barrier| {
            let mut src = vec![0u8; PUTS * SLOT];
            for k in 0..PUTS {
                src[k * SLOT..(k + 1) * SLOT].fill(k as u8 ^ 0x5a);
            }
            let mut dst = vec![0u8; PUTS * SLOT];
            let mut sig = [0u64; 2];
            let smr = r.reg(&mut src, 0)?;
            let dmr = r.reg(&mut dst, 0)?;
            // SAFETY: the u64 words viewed as bytes for registration.
            let sig_bytes = unsafe { std::slice::from_raw_parts_mut(sig.as_mut_ptr().cast::<u8>(), 16) };
            let sgmr = r.reg(sig_bytes, u64::from(NCCL_NET_MR_FLAG_FORCE_SO))?;
            bar.wait()?;
            if r.rank == 0 {
                // At most WINDOW in flight; INC and ADD(1) alternate.
                let mut pending = std::collections::VecDeque::new();
                for k in 0..PUTS {
                    if pending.len() == WINDOW {
                        r.wait(pending.pop_front().expect("non-empty"), "iputSignal")?;
                    }
                    let s = RmaSignal {
                        off: 8,
                        mr: sgmr,
                        value: 1,
                        op: if k % 2 == 0 { SignalOp::Inc } else { SignalOp::Add },
                    };
                    let size = SLOT - (k % 17);
                    pending.push_back(
                        r.a.iput_signal(r.rctx, &xfer(k * SLOT, smr, size, k * SLOT, dmr, 1), &s, true)
                            .map_err(|e| format!("iputSignal #{k}: {e}"))?,
                    );
                }
                for q in pending {
                    r.wait(q, "iputSignal")?;
                }
            } else {
                // SAFETY: the aligned signal word, updated atomically by the plugin.
                let word = unsafe { AtomicU64::from_ptr(sig.as_mut_ptr().add(1)) };
                let start = Instant::now();
                let mut seen = 0u64;
                while seen < PUTS as u64 {
                    let now = word.load(Ordering::Acquire);
                    if now < seen {
                        return Err(format!("the signal went backwards: {seen} then {now}"));
                    }
                    for k in seen as usize..(now as usize).min(PUTS) {
                        let size = SLOT - (k % 17);
                        // SAFETY: the acquire load orders the plugin's data writes before these reads.
                        let got = unsafe { std::slice::from_raw_parts(dst.as_ptr().add(k * SLOT), size) };
                        if let Some(i) = got.iter().position(|&b| b != k as u8 ^ 0x5a) {
                            return Err(format!(
                                "the signal read {now}, but put #{k}'s byte {i} of {size} was not there yet"
                            ));
                        }
                    }
                    seen = now;
                    if start.elapsed() > WAIT {
                        return Err(format!("the signal stuck at {seen} of {PUTS}"));
                    }
                    std::hint::spin_loop();
                }
                if word.load(Ordering::Acquire) != PUTS as u64 {
                    return Err(format!("the signal overshot: {}", word.load(Ordering::Acquire)));
                }
            }
            bar.wait()?;
            r.dereg(&[smr, dmr, sgmr])
        }),
    )
}

/// Operations each rank has in flight to each peer in `rma.in_flight`.
pub const IN_FLIGHT: usize = 64;

fn in_flight(cx: &mut RmaCx) -> Res {
    need_devices(cx)?;
    const N: usize = 3;
    const CHUNK: usize = 1000;
    group(
        cx,
        N,
        0x524d_5000,
        "64 iputs in flight to each peer, tested in any order, all complete with their data",
        Arc::new(|r: &Rank, bar: &Barrier| {
            let mut src = pattern(N * IN_FLIGHT * CHUNK, 3 + r.rank as u8);
            let mut dst = vec![0u8; N * IN_FLIGHT * CHUNK];
            let smr = r.reg(&mut src, 0)?;
            let dmr = r.reg(&mut dst, 0)?;
            bar.wait()?;
            let mut reqs = Vec::new();
            for k in 0..IN_FLIGHT {
                for p in (0..N).filter(|&p| p != r.rank) {
                    let off = (r.rank * IN_FLIGHT + k) * CHUNK;
                    reqs.push(
                        r.a.iput(r.rctx, &xfer(off, smr, CHUNK, off, dmr, p))
                            .map_err(|e| format!("iput #{k} to rank {p}: {e}"))?,
                    );
                }
            }
            // Tested newest first: completion does not depend on test order.
            let total = reqs.len();
            for (i, q) in reqs.into_iter().rev().enumerate() {
                r.wait(q, &format!("iput {} of {total} in flight", total - i))?;
            }
            bar.wait()?;
            let got = view(&dst);
            for p in (0..N).filter(|&p| p != r.rank) {
                let want = pattern(N * IN_FLIGHT * CHUNK, 3 + p as u8);
                let reg = p * IN_FLIGHT * CHUNK..(p + 1) * IN_FLIGHT * CHUNK;
                if let Some(d) = first_diff(&got[reg.clone()], &want[reg]) {
                    return Err(format!("the region rank {p} put: {d}"));
                }
            }
            bar.wait()?;
            r.dereg(&[smr, dmr])
        }),
    )
}

fn peer_killed(cx: &mut RmaCx) -> Res {
    need_devices(cx)?;
    super::worker::peer_killed_round(cx, 3, 2)
}

/// Every RMA check, in run order.
pub fn all() -> Vec<SectionCheck<RmaCx>> {
    let c = |id, section, rule, body: fn(&mut RmaCx) -> Res| SectionCheck {
        id,
        section,
        rule,
        level: Level::Required,
        min_version: 13,
        max_version: 14,
        body,
    };
    vec![
        c(
            "rma.load",
            "§RMA",
            "every slot NCCL's RMA path calls is non-NULL and the table has a name",
            load,
        ),
        c(
            "rma.init",
            "§RMA",
            "init, devices and getProperties of every device succeed (0 devices: the table is unusable, the other checks skip)",
            init,
        ),
        c(
            "rma.connect",
            "§RMA",
            "groups of 2, 3 and 8 ranks connect, createContext, and a put reaches every peer",
            connect,
        ),
        c(
            "rma.put.sizes",
            "§RMA",
            "iput of 0, 1, odd sizes and 1 MiB from offsets 0, 1, 3, 61 writes exactly those bytes",
            put_sizes,
        ),
        c(
            "rma.get.sizes",
            "§RMA",
            "iget of 0, 1, odd sizes and 1 MiB from offsets 0, 1, 3, 61 reads exactly those bytes",
            get_sizes,
        ),
        c(
            "rma.signal.order",
            "§RMA.signal",
            "iputSignal: the data is visible when the signal is",
            signal_order,
        ),
        c(
            "rma.in_flight",
            "§RMA",
            "64 operations in flight per peer among 3 ranks all complete, tested in any order",
            in_flight,
        ),
        c(
            "rma.fault.peer_killed",
            "§RMA.fault",
            "when a peer process dies, operations to it fail with an error within 20 s instead of hanging",
            peer_killed,
        ),
    ]
}
