//! The CollNet checks (`collnet.*`) and the harness they share: a group of ranks
//! formed as NCCL's `src/transport/coll_net.cc` forms one (every rank `listen`s, the
//! handles are exchanged, every rank calls `connect` with all of them at once, then
//! `closeListen`), each rank a thread of the worker, every wait bounded.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use ferroccl::plugin::NetPlugin;
use ferroccl::plugin::collnet::{CollNetAdapter, Sge};
use ferroccl::plugin::net::{NetHandle, NetResult, PtrType, RawComm, RawCtx, RawMr, RawRequest};
use ferroccl_kernels::reference::reduce_ranks;
use ferroccl_kernels::{DataType, DevRedOp, RedOp, Scalar};
use ferroccl_plugin_api::abi::{ncclDataType_t, ncclRedOp_t};

use crate::outcome::Res;
use crate::registry::Level;
use crate::section::SectionCheck;
use crate::{ensure, fail, skip};

use super::worker::phase;

/// The longest one collective, `connect` or a group of per-rank work may take
/// before the check fails (generous: the suite must never hang, and never judge speed).
pub const WAIT: Duration = Duration::from_secs(30);

/// What a CollNet check works with: the loaded table, through the host's adapter.
pub struct CollNetCx {
    /// The table, as the runtime drives it.
    pub adapter: Arc<CollNetAdapter>,
    /// The net plugin of the same library (kept loaded while the check runs).
    pub net: Arc<dyn NetPlugin>,
    /// The `ncclCollNetPlugin_vN` under test.
    pub version: u32,
    /// The plugin as named on the command line (for the peer process).
    pub plugin: String,
    /// Extra facts for the report.
    pub notes: Vec<String>,
}

/// One rank of a formed group.
#[derive(Clone)]
pub struct Rank {
    /// The table.
    pub a: Arc<CollNetAdapter>,
    /// Its context (`init_ctx`).
    pub ctx: RawCtx,
    /// Its collComm.
    pub coll: RawComm,
    /// Rank in the group.
    pub rank: usize,
    /// Ranks in the group.
    pub nranks: usize,
}

/// Per-rank work running in threads; [`Pending::join`] collects it, bounded.
pub struct Pending<T> {
    rx: Receiver<(usize, Result<T, String>)>,
    n: usize,
    what: String,
}

impl<T> Pending<T> {
    /// Waits (at most `limit`) for every rank; the first error or a rank that did
    /// not finish fails the check.
    pub fn join(self, limit: Duration) -> Res<Vec<T>> {
        let end = Instant::now() + limit;
        let mut out: Vec<Option<T>> = (0..self.n).map(|_| None).collect();
        let mut errs = Vec::new();
        for _ in 0..self.n {
            let left = end.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok((r, Ok(v))) => out[r] = Some(v),
                Ok((r, Err(e))) => errs.push(format!("rank {r}: {e}")),
                Err(_) => {
                    let missing: Vec<usize> = (0..self.n).filter(|&r| out[r].is_none()).collect();
                    return Err(fail!(
                        format!("{} completes on every rank within {} s", self.what, limit.as_secs()),
                        "{} did not complete within {} s on rank(s) {missing:?}{}",
                        self.what,
                        limit.as_secs(),
                        if errs.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", errs.join("; "))
                        }
                    ));
                }
            }
        }
        if !errs.is_empty() {
            return Err(fail!(
                format!("{} succeeds on every rank", self.what),
                "{}",
                errs.join("; ")
            ));
        }
        Ok(out.into_iter().map(|v| v.expect("every rank answered")).collect())
    }
}

/// Runs `f` for each of `ranks` in its own thread.
pub fn spawn_ranks<T: Send + 'static>(
    ranks: &[Rank],
    what: &str,
    f: impl Fn(&Rank) -> Result<T, String> + Send + Sync + 'static,
) -> Pending<T> {
    let (tx, rx) = channel();
    let f = Arc::new(f);
    for (i, rk) in ranks.iter().enumerate() {
        let (tx, f, rk) = (tx.clone(), f.clone(), rk.clone());
        std::thread::spawn(move || {
            let _ = tx.send((i, f(&rk)));
        });
    }
    Pending {
        rx,
        n: ranks.len(),
        what: what.to_owned(),
    }
}

/// [`spawn_ranks`] then [`Pending::join`] with [`WAIT`] plus a margin per rank.
pub fn on_ranks<T: Send + 'static>(
    ranks: &[Rank],
    what: &str,
    f: impl Fn(&Rank) -> Result<T, String> + Send + Sync + 'static,
) -> Res<Vec<T>> {
    spawn_ranks(ranks, what, f).join(WAIT * 2)
}

/// Contexts, listen comms and handles of the ranks of this process (`local`).
pub struct Listening {
    /// (rank, ctx, listenComm) of each local rank.
    pub local: Vec<(usize, RawCtx, RawComm)>,
    /// Every rank's handle (remote ones filled by the caller).
    pub handles: Vec<NetHandle>,
}

/// `init_ctx` and `listen` on device 0 for each rank in `local` of an `n`-rank group.
pub fn listen_ranks(cx: &CollNetCx, n: usize, local: &[usize]) -> Res<Listening> {
    let mut l = Listening {
        local: Vec::new(),
        handles: vec![[0u8; 128]; n],
    };
    for &r in local {
        phase(&format!("init of rank {r}"));
        let ctx = cx
            .adapter
            .init_ctx(0xC011_0000 + r as u64)
            .map_err(|e| fail!("init succeeds for every communicator", "{e}"))?;
        phase(&format!("listen of rank {r}"));
        let lc = cx
            .adapter
            .listen(ctx, 0, &mut l.handles[r])
            .map_err(|e| fail!("listen succeeds", "{e}"))?;
        l.local.push((r, ctx, lc));
    }
    Ok(l)
}

/// Starts `connect` with every handle on each local rank (threads); join the result
/// with [`finish_connect`].
pub fn start_connect(cx: &CollNetCx, l: &Listening) -> Pending<(RawCtx, RawComm, RawComm)> {
    let n = l.handles.len();
    let (tx, rx) = channel();
    for (i, &(r, ctx, lc)) in l.local.iter().enumerate() {
        let (tx, a, hs) = (tx.clone(), cx.adapter.clone(), l.handles.clone());
        std::thread::spawn(move || {
            let res = a.connect(&hs, r, lc).map(|cc| (ctx, lc, cc)).map_err(|e| e.to_string());
            let _ = tx.send((i, res));
        });
    }
    Pending {
        rx,
        n: l.local.len(),
        what: format!("connect of a {n}-rank group"),
    }
}

/// Joins `connect`, closes the listen comms (as NCCL does right after it) and
/// returns the local ranks.
pub fn finish_connect(cx: &CollNetCx, l: &Listening, p: Pending<(RawCtx, RawComm, RawComm)>) -> Res<Vec<Rank>> {
    phase("connect");
    let n = l.handles.len();
    let got = p.join(WAIT)?;
    let mut ranks = Vec::new();
    for (i, (ctx, lc, cc)) in got.into_iter().enumerate() {
        phase("closeListen");
        cx.adapter
            .close_listen(lc)
            .map_err(|e| fail!("closeListen right after connect succeeds", "{e}"))?;
        ranks.push(Rank {
            a: cx.adapter.clone(),
            ctx,
            coll: cc,
            rank: l.local[i].0,
            nranks: n,
        });
    }
    Ok(ranks)
}

/// Forms an `n`-rank group with every rank in this process.
pub fn group(cx: &CollNetCx, n: usize) -> Res<Vec<Rank>> {
    let all: Vec<usize> = (0..n).collect();
    let l = listen_ranks(cx, n, &all)?;
    let p = start_connect(cx, &l);
    finish_connect(cx, &l, p)
}

/// Closes every collComm and gives the contexts back.
pub fn close(ranks: Vec<Rank>) -> Res {
    phase("closeColl");
    let closing = spawn_ranks(&ranks, "closeColl", |rk| {
        rk.a.close_coll(rk.coll).map_err(|e| e.to_string())
    });
    closing.join(WAIT)?;
    for rk in &ranks {
        rk.a.finalize_ctx(rk.ctx)
            .map_err(|e| fail!("finalize of a context succeeds", "{e}"))?;
    }
    Ok(())
}

/// Posts with `post`, retrying while the plugin says "busy" (NULL request), bounded.
pub fn post_retry(call: &str, mut post: impl FnMut() -> NetResult<Option<RawRequest>>) -> Result<RawRequest, String> {
    let end = Instant::now() + WAIT;
    loop {
        match post() {
            Ok(Some(r)) => return Ok(r),
            Ok(None) if Instant::now() < end => std::thread::yield_now(),
            Ok(None) => return Err(format!("{call} returned a NULL request for {} s", WAIT.as_secs())),
            Err(e) => return Err(format!("{call}: {e}")),
        }
    }
}

/// Tests `req` until done (its size), an error, or `limit`.
pub fn wait(a: &CollNetAdapter, req: RawRequest, call: &str, limit: Duration) -> Result<usize, String> {
    let end = Instant::now() + limit;
    loop {
        match a.test(req) {
            Ok(Some(n)) => return Ok(n),
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_micros(50)),
            Ok(None) => return Err(format!("{call} did not complete within {} s", limit.as_secs())),
            Err(e) => return Err(format!("test of {call}: {e}")),
        }
    }
}

/// A host buffer with a chosen misalignment from a 64-byte boundary.
pub struct Area {
    mem: Vec<u8>,
    off: usize,
    len: usize,
}

impl Area {
    /// `len` bytes at `off` bytes past a 64-byte boundary, filled from `data` (or zeros).
    pub fn new(len: usize, off: usize, data: Option<&[u8]>) -> Area {
        let mut mem = vec![0u8; len + off + 128];
        let base = mem.as_ptr() as usize;
        let off = (64 - base % 64) % 64 + off;
        if let Some(d) = data {
            mem[off..off + len].copy_from_slice(d);
        }
        Area { mem, off, len }
    }
    /// The start.
    pub fn ptr(&mut self) -> *mut u8 {
        // SAFETY: `off + len` is within `mem`.
        unsafe { self.mem.as_mut_ptr().add(self.off) }
    }
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.mem[self.off..self.off + self.len]
    }
}

/// An `(op, type)` pair as NCCL numbers them (`ncclRedOp_t`, `ncclDataType_t`).
pub type Pair = (i32, i32);

/// Every `(op, type)` of NCCL's CollNet matrix (4 ops × 12 types, `ncclCollNetSetup`).
pub fn matrix() -> Vec<(i32, i32)> {
    (0..4).flat_map(|op| (0..12).map(move |t| (op, t))).collect()
}

/// NCCL's names of ops and types, for messages.
pub fn pair_name(op: i32, ty: i32) -> String {
    const OPS: [&str; 4] = ["sum", "prod", "max", "min"];
    const TYS: [&str; 12] = [
        "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "fp8e4m3",
        "fp8e5m2",
    ];
    format!("{}/{}", OPS[op as usize], TYS[ty as usize])
}

/// The pairs `reduceSupport` claims that the suite can verify (the ten types with a
/// CPU reference), and those claimed for fp8 (no reference: not verified).
pub fn claimed(cx: &CollNetCx) -> Res<(Vec<Pair>, Vec<Pair>)> {
    phase("reduceSupport");
    let mut yes = Vec::new();
    let mut fp8 = Vec::new();
    for (op, ty) in matrix() {
        let s = cx
            .adapter
            .reduce_support(ncclDataType_t(ty), ncclRedOp_t(op))
            .map_err(|e| {
                fail!(
                    "reduceSupport answers for every (type, op)",
                    "{} : {e}",
                    pair_name(op, ty)
                )
            })?;
        if s {
            if ty < 10 {
                yes.push((op, ty))
            } else {
                fp8.push((op, ty))
            }
        }
    }
    Ok((yes, fp8))
}

/// Rank `r`'s input element `i` for `op` (small integers, so every reduction is
/// exact in every type, also half and bfloat16, with up to 8 ranks).
fn input_value(op: i32, r: usize, i: usize) -> i64 {
    if op == 1 {
        i64::from((i + r).is_multiple_of(4)) + 1
    } else {
        ((i * 7 + r * 3 + 1) % 11) as i64
    }
}

/// `count` elements of rank `r`'s input.
pub fn input(op: i32, ty: i32, r: usize, count: usize) -> Vec<u8> {
    let dt = DataType::from_nccl(ty).expect("a type with a reference");
    let mut out = Vec::with_capacity(count * dt.size());
    for i in 0..count {
        out.extend_from_slice(Scalar::from_i64(dt, input_value(op, r, i)).bytes(dt));
    }
    out
}

/// The reduction of every rank's [`input`], in rank order.
pub fn expected(op: i32, ty: i32, nranks: usize, count: usize) -> Vec<u8> {
    let dt = DataType::from_nccl(ty).expect("a type with a reference");
    let ins: Vec<Vec<u8>> = (0..nranks).map(|r| input(op, ty, r, count)).collect();
    let refs: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
    let mut out = vec![0u8; count * dt.size()];
    if count > 0 {
        let rop = DevRedOp::new(dt, RedOp::from_nccl(op).expect("a built-in op"), nranks as u32).expect("op");
        reduce_ranks(&mut out, &refs, &rop);
    }
    out
}

/// The first differing element, as a message.
pub fn first_diff(got: &[u8], want: &[u8], esize: usize) -> Option<String> {
    let i = got.iter().zip(want).position(|(a, b)| a != b)?;
    let e = i / esize;
    Some(format!(
        "element {e} (byte {i}) is {} instead of {}",
        hex::encode(&got[e * esize..(e + 1) * esize]),
        hex::encode(&want[e * esize..(e + 1) * esize])
    ))
}

/// One allreduce of `count` elements per pair in `pairs` on this rank, buffers at
/// `off` bytes from alignment, registered on the collComm; the results verified.
pub fn allreduce_pairs(rk: &Rank, pairs: &[(i32, i32)], count: usize, off: usize) -> Result<(), String> {
    for &(op, ty) in pairs {
        let dt = DataType::from_nccl(ty).map_err(|e| e.to_string())?;
        let len = count * dt.size();
        let mut send = Area::new(len, off, Some(&input(op, ty, rk.rank, count)));
        let mut recv = Area::new(len, off, None);
        let name = pair_name(op, ty);
        let smr =
            rk.a.reg_mr(rk.coll, send.ptr(), len, PtrType::Host)
                .map_err(|e| format!("regMr: {e}"))?;
        let rmr =
            rk.a.reg_mr(rk.coll, recv.ptr(), len, PtrType::Host)
                .map_err(|e| format!("regMr: {e}"))?;
        let call = format!("iallreduce of {count} × {name}");
        let (sp, rp) = (send.ptr(), recv.ptr());
        let req = post_retry(&call, || {
            rk.a.iallreduce(
                rk.coll,
                sp,
                rp,
                count,
                ncclDataType_t(ty),
                ncclRedOp_t(op),
                Some(smr),
                Some(rmr),
            )
        })?;
        wait(&rk.a, req, &call, WAIT)?;
        rk.a.dereg_mr(rk.coll, smr).map_err(|e| format!("deregMr: {e}"))?;
        rk.a.dereg_mr(rk.coll, rmr).map_err(|e| format!("deregMr: {e}"))?;
        if let Some(d) = first_diff(recv.bytes(), &expected(op, ty, rk.nranks, count), dt.size()) {
            return Err(format!("{call} ({} ranks): {d}", rk.nranks));
        }
    }
    Ok(())
}

fn need_pairs(cx: &CollNetCx) -> Res<Vec<(i32, i32)>> {
    let (yes, _) = claimed(cx)?;
    if yes.is_empty() {
        return Err(skip!("reduceSupport claims no (type, op) pair with a CPU reference"));
    }
    Ok(yes)
}

/// One pair to move data with: float sum when claimed, else the first claimed.
fn one_pair(cx: &CollNetCx) -> Res<(i32, i32)> {
    let yes = need_pairs(cx)?;
    Ok(if yes.contains(&(0, 7)) { (0, 7) } else { yes[0] })
}

fn load(cx: &mut CollNetCx) -> Res {
    let info = cx.adapter.info().clone();
    ensure!(
        !info.name.is_empty() && !info.name.contains(' '),
        "a non-empty name without spaces",
        "name {:?}",
        info.name
    );
    ensure!(
        cx.adapter.is_enabled(),
        "init and devices() succeed (NCCL disables CollNet otherwise)",
        "{}",
        cx.adapter.state()
    );
    let n = cx.adapter.devices().map_err(|e| fail!("devices() succeeds", "{e}"))?;
    ensure!(n >= 1, "devices() ≥ 1", "devices() = {n}");
    // A communicator's own context (v11+ init per communicator), given back.
    let ctx = cx
        .adapter
        .init_ctx(7)
        .map_err(|e| fail!("a second init succeeds", "{e}"))?;
    cx.adapter
        .finalize_ctx(ctx)
        .map_err(|e| fail!("finalize succeeds", "{e}"))?;
    let _ = cx.net.info();
    Ok(())
}

fn props(cx: &mut CollNetCx) -> Res {
    let n = cx.adapter.devices().map_err(|e| fail!("devices() succeeds", "{e}"))?;
    for d in 0..n {
        phase("getProperties");
        let p = cx.adapter.properties(d).map_err(|e| {
            fail!(
                "getProperties succeeds with maxCollBytes in 1 ..= 2^40",
                "device {d}: {e}"
            )
        })?;
        ensure!(!p.name.is_empty(), "a device name", "device {d}: empty name");
        ensure!(p.speed > 0, "speed > 0", "device {d}: speed {}", p.speed);
        ensure!(
            p.ptr_support & 1 != 0,
            "ptrSupport includes NCCL_PTR_HOST",
            "device {d}: ptrSupport {:#x}",
            p.ptr_support
        );
        ensure!(p.max_comms >= 1, "maxComms ≥ 1", "device {d}: maxComms {}", p.max_comms);
    }
    Ok(())
}

fn reduce_support(cx: &mut CollNetCx) -> Res {
    let (yes, fp8) = claimed(cx)?;
    if !fp8.is_empty() {
        let names: Vec<String> = fp8.iter().map(|&(o, t)| pair_name(o, t)).collect();
        cx.notes.push(format!(
            "claimed but not verified (no fp8 reference): {}",
            names.join(", ")
        ));
    }
    if !yes.is_empty() {
        let ranks = group(cx, 2)?;
        phase("iallreduce of every claimed pair");
        let y = yes.clone();
        on_ranks(&ranks, "iallreduce of every claimed (type, op)", move |rk| {
            allreduce_pairs(rk, &y, 1031, 0)
        })?;
        close(ranks)?;
    }
    // Unclaimed pairs (NCCL never posts them): refused with an error, at the post or
    // by test, never a crash, a hang or a silent success.
    let no: Vec<(i32, i32)> = matrix()
        .into_iter()
        .filter(|p| !yes.contains(p) && !fp8.contains(p))
        .collect();
    if no.is_empty() {
        return Ok(());
    }
    let ranks = group(cx, 2)?;
    phase("iallreduce of unclaimed pairs");
    on_ranks(&ranks, "refusal of every unclaimed (type, op)", move |rk| {
        for &(op, ty) in &no {
            let len = 64 * 8;
            let (mut s, mut r) = (Area::new(len, 0, None), Area::new(len, 0, None));
            let smr =
                rk.a.reg_mr(rk.coll, s.ptr(), len, PtrType::Host)
                    .map_err(|e| format!("regMr: {e}"))?;
            let rmr =
                rk.a.reg_mr(rk.coll, r.ptr(), len, PtrType::Host)
                    .map_err(|e| format!("regMr: {e}"))?;
            let posted = rk.a.iallreduce(
                rk.coll,
                s.ptr(),
                r.ptr(),
                64,
                ncclDataType_t(ty),
                ncclRedOp_t(op),
                Some(smr),
                Some(rmr),
            );
            let name = pair_name(op, ty);
            match posted {
                Err(_) => {}
                Ok(None) => {
                    return Err(format!(
                        "iallreduce of unclaimed {name} returned a NULL request (\"busy\") instead of an error"
                    ));
                }
                Ok(Some(req)) => {
                    if let Ok(n) = wait(&rk.a, req, "iallreduce", WAIT) {
                        return Err(format!(
                            "iallreduce of {name}, which reduceSupport does not claim, completed ({n} bytes) instead of being refused"
                        ));
                    }
                }
            }
            let _ = rk.a.dereg_mr(rk.coll, smr);
            let _ = rk.a.dereg_mr(rk.coll, rmr);
        }
        Ok(())
    })?;
    close(ranks)
}

fn connect(cx: &mut CollNetCx) -> Res {
    let pair = one_pair(cx).ok();
    for n in [2, 3, 5, 8] {
        let ranks = group(cx, n)?;
        if let Some(p) = pair {
            phase(&format!("iallreduce on {n} ranks"));
            on_ranks(&ranks, &format!("iallreduce on a {n}-rank group"), move |rk| {
                allreduce_pairs(rk, &[p], 4099, 0)
            })?;
        }
        close(ranks)?;
    }
    Ok(())
}

fn sized(cx: &mut CollNetCx, count: impl Fn(usize) -> usize + Send + Sync + 'static, off: usize) -> Res {
    let pairs = need_pairs(cx)?;
    let ranks = group(cx, 3)?;
    phase("iallreduce of every claimed pair");
    on_ranks(&ranks, "iallreduce of every claimed (type, op)", move |rk| {
        for &p in &pairs {
            let esize = DataType::from_nccl(p.1).map_err(|e| e.to_string())?.size();
            allreduce_pairs(rk, &[p], count(esize), off)?;
        }
        Ok(())
    })?;
    close(ranks)
}

fn size_empty(cx: &mut CollNetCx) -> Res {
    sized(cx, |_| 0, 0)
}
fn size_one(cx: &mut CollNetCx) -> Res {
    sized(cx, |_| 1, 0)
}
fn size_misaligned(cx: &mut CollNetCx) -> Res {
    sized(cx, |_| 4099, 3)
}
fn size_1mib(cx: &mut CollNetCx) -> Res {
    sized(cx, |e| (1 << 20) / e, 0)
}

/// SGE parts over `area`: `k` parts at element boundaries, uneven.
fn parts(area: &mut Area, len: usize, esize: usize, k: usize, mr: Option<RawMr>) -> Vec<Sge> {
    let elems = len / esize;
    let mut cuts = vec![0];
    for i in 1..k {
        cuts.push((elems * i / k + i).min(elems) * esize);
    }
    cuts.push(len);
    let base = area.ptr();
    cuts.windows(2)
        .map(|w| Sge {
            // SAFETY: w[0] ≤ len, within the area.
            data: unsafe { base.add(w[0]) },
            size: w[1] - w[0],
            mr,
        })
        .collect()
}

/// The windows tested: the whole collective, and one that cuts the first and the last rank's regions.
fn windows(bpr: usize, nranks: usize, esize: usize) -> [(usize, usize); 2] {
    let full = bpr * nranks;
    [(0, full), (1000 * esize, full - 2000 * esize)]
}

/// `(start in window, len)` of rank `r`'s region inside window `(off, bytes)`.
fn rank_part(r: usize, bpr: usize, off: usize, bytes: usize) -> (usize, usize) {
    let s = (r * bpr).max(off);
    let e = ((r + 1) * bpr).min(off + bytes);
    if e <= s { (0, 0) } else { (s - off, e - s) }
}

fn sge_parts_for(version: u32) -> usize {
    if version == 8 { 1 } else { 3 }
}

fn iallgather(cx: &mut CollNetCx) -> Res {
    if !cx.adapter.has_iallgather() {
        return Err(skip!(
            "the iallgather slot is NULL (NCCL then runs no AllGather over CollNet)"
        ));
    }
    let k = sge_parts_for(cx.version);
    let ranks = group(cx, 3)?;
    phase("iallgather");
    on_ranks(&ranks, &format!("iallgather into {k} SGE parts"), move |rk| {
        let n = rk.nranks;
        let bpr = 3000 * 4;
        let full_in = |r: usize| input(0, 1, r, bpr);
        for (off, bytes) in windows(bpr, n, 4) {
            let (_, mine) = rank_part(rk.rank, bpr, off, bytes);
            let start_in_region = (rk.rank * bpr).max(off) - rk.rank * bpr;
            let src = full_in(rk.rank)[start_in_region..start_in_region + mine].to_vec();
            let mut send = Area::new(mine.max(1), 0, None);
            if mine > 0 {
                let p = send.ptr();
                // SAFETY: `mine` bytes fit the area.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, mine) };
            }
            let mut recv = Area::new(bytes, 1, None);
            let smr =
                rk.a.reg_mr(rk.coll, send.ptr(), mine.max(1), PtrType::Host)
                    .map_err(|e| format!("regMr: {e}"))?;
            let rmr =
                rk.a.reg_mr(rk.coll, recv.ptr(), bytes, PtrType::Host)
                    .map_err(|e| format!("regMr: {e}"))?;
            let sg = parts(&mut recv, bytes, 4, k, Some(rmr));
            let sp = send.ptr();
            let call = format!("iallgather of window [{off}, {}) into {k} parts", off + bytes);
            let req = post_retry(&call, || rk.a.iallgather(rk.coll, sp, Some(smr), &sg, bpr, off, bytes))?;
            wait(&rk.a, req, &call, WAIT)?;
            let mut want = Vec::new();
            for r in 0..n {
                want.extend_from_slice(&full_in(r));
            }
            if let Some(d) = first_diff(recv.bytes(), &want[off..off + bytes], 1) {
                return Err(format!("{call}: {d}"));
            }
            rk.a.dereg_mr(rk.coll, smr).map_err(|e| format!("deregMr: {e}"))?;
            rk.a.dereg_mr(rk.coll, rmr).map_err(|e| format!("deregMr: {e}"))?;
        }
        Ok(())
    })?;
    close(ranks)
}

fn ireducescatter(cx: &mut CollNetCx) -> Res {
    if !cx.adapter.has_ireducescatter() {
        return Err(skip!(
            "the ireducescatter slot is NULL (NCCL then runs no ReduceScatter over CollNet)"
        ));
    }
    let (op, ty) = one_pair(cx)?;
    let k = sge_parts_for(cx.version);
    let ranks = group(cx, 3)?;
    phase("ireducescatter");
    on_ranks(&ranks, &format!("ireducescatter from {k} SGE parts"), move |rk| {
        let n = rk.nranks;
        let esize = DataType::from_nccl(ty).map_err(|e| e.to_string())?.size();
        let bpr = 3000 * esize;
        let count = bpr * n / esize;
        let want_all = expected(op, ty, n, count);
        for (off, bytes) in windows(bpr, n, esize) {
            let full = input(op, ty, rk.rank, count);
            let mut send = Area::new(bytes, 2, Some(&full[off..off + bytes]));
            let (pos, mine) = rank_part(rk.rank, bpr, off, bytes);
            let mut recv = Area::new(mine.max(1), 0, None);
            let smr =
                rk.a.reg_mr(rk.coll, send.ptr(), bytes, PtrType::Host)
                    .map_err(|e| format!("regMr: {e}"))?;
            let rmr =
                rk.a.reg_mr(rk.coll, recv.ptr(), mine.max(1), PtrType::Host)
                    .map_err(|e| format!("regMr: {e}"))?;
            let sg = parts(&mut send, bytes, esize, k, Some(smr));
            let rp = recv.ptr();
            let call = format!(
                "ireducescatter ({}) of window [{off}, {}) from {k} parts",
                pair_name(op, ty),
                off + bytes
            );
            let req = post_retry(&call, || {
                rk.a.ireducescatter(
                    rk.coll,
                    &sg,
                    rp,
                    Some(rmr),
                    bpr,
                    off,
                    bytes,
                    ncclDataType_t(ty),
                    ncclRedOp_t(op),
                )
            })?;
            wait(&rk.a, req, &call, WAIT)?;
            let want = &want_all[off + pos..off + pos + mine];
            if let Some(d) = first_diff(&recv.bytes()[..mine], want, esize) {
                return Err(format!("{call}: {d}"));
            }
            rk.a.dereg_mr(rk.coll, smr).map_err(|e| format!("deregMr: {e}"))?;
            rk.a.dereg_mr(rk.coll, rmr).map_err(|e| format!("deregMr: {e}"))?;
        }
        Ok(())
    })?;
    close(ranks)
}

fn memory(cx: &mut CollNetCx) -> Res {
    let p = one_pair(cx)?;
    let ranks = group(cx, 2)?;
    phase("regMr/deregMr");
    on_ranks(&ranks, "regMr/deregMr of host memory", move |rk| {
        // Many registrations of several sizes, released in another order.
        let mut areas: Vec<Area> = [1usize, 4096, 1 << 20, 3 << 20]
            .iter()
            .map(|&n| Area::new(n, 0, None))
            .collect();
        for round in 0..20 {
            let mut mrs = Vec::new();
            for a in &mut areas {
                let len = a.len;
                mrs.push(
                    rk.a.reg_mr(rk.coll, a.ptr(), len, PtrType::Host)
                        .map_err(|e| format!("regMr of {len} bytes (round {round}): {e}"))?,
                );
            }
            for mr in mrs.into_iter().rev() {
                rk.a.dereg_mr(rk.coll, mr)
                    .map_err(|e| format!("deregMr (round {round}): {e}"))?;
            }
        }
        // Data still moves through fresh registrations afterwards.
        allreduce_pairs(rk, &[p], 65536, 0)
    })?;
    close(ranks)
}

fn iflush(cx: &mut CollNetCx) -> Res {
    let ranks = group(cx, 2)?;
    phase("iflush");
    on_ranks(&ranks, "iflush of registered host memory", |rk| {
        let mut a = Area::new(1 << 16, 0, None);
        let mr =
            rk.a.reg_mr(rk.coll, a.ptr(), 1 << 16, PtrType::Host)
                .map_err(|e| format!("regMr: {e}"))?;
        match rk.a.iflush(rk.coll, a.ptr(), 1 << 16, Some(mr)) {
            Ok(None) => {}
            Ok(Some(req)) => {
                wait(&rk.a, req, "iflush", WAIT)?;
            }
            Err(e) => return Err(format!("iflush: {e}")),
        }
        rk.a.dereg_mr(rk.coll, mr).map_err(|e| format!("deregMr: {e}"))
    })?;
    close(ranks)
}

/// Requests posted on every rank before the first is tested.
pub const IN_FLIGHT: usize = 32;

fn in_flight(cx: &mut CollNetCx) -> Res {
    let (op, ty) = one_pair(cx)?;
    let ranks = group(cx, 3)?;
    phase("iallreduce in flight");
    on_ranks(&ranks, &format!("{IN_FLIGHT} iallreduce in flight"), move |rk| {
        let esize = DataType::from_nccl(ty).map_err(|e| e.to_string())?.size();
        let counts: Vec<usize> = (0..IN_FLIGHT).map(|i| 1 + (i * 7919) % 20000).collect();
        let mut bufs = Vec::new();
        let mut reqs = Vec::new();
        for (i, &c) in counts.iter().enumerate() {
            let mut s = Area::new(c * esize, i % 4, Some(&input(op, ty, rk.rank + i, c)));
            let mut r = Area::new(c * esize, 0, None);
            let smr =
                rk.a.reg_mr(rk.coll, s.ptr(), c * esize, PtrType::Host)
                    .map_err(|e| format!("regMr: {e}"))?;
            let rmr =
                rk.a.reg_mr(rk.coll, r.ptr(), c * esize, PtrType::Host)
                    .map_err(|e| format!("regMr: {e}"))?;
            let (sp, rp) = (s.ptr(), r.ptr());
            let call = format!("iallreduce #{i}");
            reqs.push(post_retry(&call, || {
                rk.a.iallreduce(
                    rk.coll,
                    sp,
                    rp,
                    c,
                    ncclDataType_t(ty),
                    ncclRedOp_t(op),
                    Some(smr),
                    Some(rmr),
                )
            })?);
            bufs.push((s, r, smr, rmr));
        }
        for (i, req) in reqs.into_iter().enumerate() {
            wait(&rk.a, req, &format!("iallreduce #{i} of {IN_FLIGHT} in flight"), WAIT)?;
        }
        for (i, (_, r, smr, rmr)) in bufs.iter().enumerate() {
            let c = counts[i];
            // Rank r's input for request i is input(rank + i): the reference shifts too.
            let ins: Vec<Vec<u8>> = (0..rk.nranks).map(|q| input(op, ty, q + i, c)).collect();
            let refs: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
            let dt = DataType::from_nccl(ty).map_err(|e| e.to_string())?;
            let mut want = vec![0u8; c * esize];
            let rop = DevRedOp::new(dt, RedOp::from_nccl(op).map_err(|e| e.to_string())?, rk.nranks as u32)
                .map_err(|e| e.to_string())?;
            reduce_ranks(&mut want, &refs, &rop);
            if let Some(d) = first_diff(r.bytes(), &want, esize) {
                return Err(format!(
                    "iallreduce #{i} of {IN_FLIGHT} in flight ({c} × {}): {d}",
                    pair_name(op, ty)
                ));
            }
            rk.a.dereg_mr(rk.coll, *smr).map_err(|e| format!("deregMr: {e}"))?;
            rk.a.dereg_mr(rk.coll, *rmr).map_err(|e| format!("deregMr: {e}"))?;
        }
        Ok(())
    })?;
    close(ranks)
}

fn test_size(cx: &mut CollNetCx) -> Res {
    let (op, ty) = one_pair(cx)?;
    let ranks = group(cx, 2)?;
    phase("test sizes");
    on_ranks(&ranks, "iallreduce sizes reported by test", move |rk| {
        let esize = DataType::from_nccl(ty).map_err(|e| e.to_string())?.size();
        for count in [1usize, 1000, 65537] {
            let len = count * esize;
            let (mut s, mut r) = (
                Area::new(len, 0, Some(&input(op, ty, rk.rank, count))),
                Area::new(len, 0, None),
            );
            let smr =
                rk.a.reg_mr(rk.coll, s.ptr(), len, PtrType::Host)
                    .map_err(|e| format!("regMr: {e}"))?;
            let rmr =
                rk.a.reg_mr(rk.coll, r.ptr(), len, PtrType::Host)
                    .map_err(|e| format!("regMr: {e}"))?;
            let (sp, rp) = (s.ptr(), r.ptr());
            let req = post_retry("iallreduce", || {
                rk.a.iallreduce(
                    rk.coll,
                    sp,
                    rp,
                    count,
                    ncclDataType_t(ty),
                    ncclRedOp_t(op),
                    Some(smr),
                    Some(rmr),
                )
            })?;
            let n = wait(&rk.a, req, "iallreduce", WAIT)?;
            if n != len {
                return Err(format!(
                    "test of an iallreduce of {count} × {} reported {n} bytes, not {len}",
                    pair_name(op, ty)
                ));
            }
            let _ = rk.a.dereg_mr(rk.coll, smr);
            let _ = rk.a.dereg_mr(rk.coll, rmr);
        }
        Ok(())
    })?;
    close(ranks)
}

fn peer_killed(cx: &mut CollNetCx) -> Res {
    let pair = one_pair(cx)?;
    // The killed rank as a leaf (the last rank), then as rank 0.
    for victim in [2usize, 0] {
        super::worker::peer_killed_round(cx, pair, 3, victim)?;
    }
    Ok(())
}

/// Every CollNet check, in run order.
pub fn all() -> Vec<SectionCheck<CollNetCx>> {
    let c = |id, section, rule, level, min_version, body| SectionCheck {
        id,
        section,
        rule,
        level,
        min_version,
        max_version: 12,
        body,
    };
    use Level::{Advisory, Required};
    vec![
        c(
            "collnet.load",
            "§5.1",
            "the CollNet table loads beside the net table, init and devices() ≥ 1 succeed, its name has no spaces, a second context works",
            Required,
            6,
            load as fn(&mut CollNetCx) -> Res,
        ),
        c(
            "collnet.props",
            "§2",
            "getProperties of every device succeeds: a name, speed > 0, ptrSupport has HOST, maxComms ≥ 1, maxCollBytes in 1 ..= 2^40",
            Required,
            6,
            props,
        ),
        c(
            "collnet.reduce_support",
            "§2",
            "every (type, op) reduceSupport claims reduces correctly on 2 ranks; every unclaimed one is refused with an error (never a hang or a silent success)",
            Required,
            6,
            reduce_support,
        ),
        c(
            "collnet.connect",
            "§2",
            "connect with every rank's handle forms groups of 2, 3, 5 and 8 ranks that reduce correctly; closeListen, closeColl and finalize succeed",
            Required,
            6,
            connect,
        ),
        c(
            "collnet.iallreduce.empty",
            "§2",
            "iallreduce of 0 elements completes, for every claimed (type, op), 3 ranks",
            Required,
            6,
            size_empty,
        ),
        c(
            "collnet.iallreduce.one",
            "§2",
            "iallreduce of 1 element is correct for every claimed (type, op), 3 ranks",
            Required,
            6,
            size_one,
        ),
        c(
            "collnet.iallreduce.misaligned",
            "§2",
            "iallreduce of 4099 elements at 3 bytes past alignment is correct for every claimed (type, op), 3 ranks",
            Required,
            6,
            size_misaligned,
        ),
        c(
            "collnet.iallreduce.1MiB",
            "§2",
            "iallreduce of 1 MiB is correct for every claimed (type, op), 3 ranks",
            Required,
            6,
            size_1mib,
        ),
        c(
            "collnet.iallgather.sge",
            "§2",
            "iallgather of a whole and a partial window into 3 SGE parts (1 for v8) gives every rank the window's bytes (v8+, when the slot is set)",
            Required,
            8,
            iallgather,
        ),
        c(
            "collnet.ireducescatter.sge",
            "§2",
            "ireducescatter of a whole and a partial window from 3 SGE parts (1 for v8) gives each rank its reduced part (v8+, when the slot is set)",
            Required,
            8,
            ireducescatter,
        ),
        c(
            "collnet.memory.reg",
            "§2",
            "regMr/deregMr of host memory (1 B … 3 MiB) on a collComm, 20 rounds, then data moves through fresh registrations",
            Required,
            6,
            memory,
        ),
        c(
            "collnet.in_flight",
            "§2",
            "32 iallreduce posted on every rank before the first test complete in posting order with correct results",
            Required,
            6,
            in_flight,
        ),
        c(
            "collnet.iflush",
            "§2",
            "iflush of registered host memory returns no request or one that completes (NCCL flushes only GPU memory)",
            Advisory,
            6,
            iflush,
        ),
        c(
            "collnet.test_size",
            "§2",
            "test of an iallreduce reports count × type size bytes (NCCL does not read it)",
            Advisory,
            6,
            test_size,
        ),
        c(
            "collnet.fault.peer_killed",
            "§2.fault",
            "a rank process killed mid-reduction (a leaf, then rank 0): every surviving rank's pending iallreduce fails within 30 s, and closeColl returns",
            Required,
            6,
            peer_killed,
        ),
    ]
}
