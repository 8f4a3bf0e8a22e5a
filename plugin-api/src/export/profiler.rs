//! Generic shims behind [`export_profiler_plugin!`](crate::export_profiler_plugin):
//! `ncclProfiler_v6` … `_v1` from one [`sdk::Profiler`](crate::sdk::Profiler)
//! (older versions' descriptors are converted to the v6 layout the trait sees).

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr::null_mut;

use super::guard;
use crate::abi::{self, ncclResult_t};
use crate::sdk::{NetError, NetResult, Profiler, ProfilerInit};

const MAGIC: u64 = 0x4652_4343_4c50_5246; // "FRCCLPRF"
const EVENT_MAGIC: u64 = 0x4652_4343_4c45_5654; // "FRCCLEVT"

#[repr(C)]
struct ProfBox<P: Profiler> {
    magic: u64,
    prof: Option<P>,
    /// Stopped events kept for their later children (`Profiler::RETAIN_STOPPED`),
    /// oldest first; freed when evicted or at finalize.
    retired: std::sync::Mutex<std::collections::VecDeque<usize>>,
}

#[repr(C)]
struct EventBox<P: Profiler> {
    magic: u64,
    prof: *const P,
    event: Option<P::Event>,
    /// The profiler's box (for the retired list).
    owner: *const ProfBox<P>,
}

/// A stopped event whose box is kept (its `event` is the retained copy).
const RETIRED_MAGIC: u64 = 0x4652_4343_4c52_4554; // "FRCCLRET"

/// The event an event handle names (a descriptor's `parentObj`, or another
/// handle NCCL passes such as `coll.parentGroup`), if it is one of `P`'s live
/// events or one of the stopped ones it retains
/// ([`Profiler::RETAIN_STOPPED`]).
///
/// # Safety
/// `p` must be NULL or a handle this profiler returned (live or retained), or
/// at least readable for a `u64`; the reference must not outlive the event
/// (use it within the `startEvent` call that received the handle).
///
/// Always `None` for [`Profiler::UNBOXED`]
/// profilers, whose events are their handles: they call their own
/// [`Profiler::event_of_handle`].
pub unsafe fn event_of<'a, P: Profiler>(p: *mut c_void) -> Option<&'a P::Event> {
    // SAFETY: per the caller.
    unsafe { parent_of::<P>(p) }
}

/// The event a descriptor's `parentObj` names, if it is one of ours (live or retained).
///
/// # Safety
/// `p` must be NULL or a handle this profiler returned (live or retained), or
/// at least readable for a `u64`.
unsafe fn parent_of<'a, P: Profiler>(p: *mut c_void) -> Option<&'a P::Event> {
    if P::UNBOXED || p.is_null() {
        return None;
    }
    // SAFETY: readable per the caller's contract.
    let m = unsafe { *(p as *const u64) };
    if m != EVENT_MAGIC && m != RETIRED_MAGIC {
        return None;
    }
    // SAFETY: the magic identifies an `EventBox<P>` created here.
    unsafe { (*(p as *const EventBox<P>)).event.as_ref() }
}

/// # Safety
/// `p` must be NULL or readable for a `u64`.
unsafe fn boxed<'a, T>(p: *mut c_void, magic: u64, what: &str) -> NetResult<&'a mut T> {
    if p.is_null() {
        return Err(NetError::InvalidArgument(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL, readable per the caller's contract.
    if unsafe { *(p as *const u64) } != magic {
        return Err(NetError::Internal(format!(
            "{p:p} is not a live {what} of this profiler"
        )));
    }
    // SAFETY: the magic identifies a box of type `T` created in this module.
    Ok(unsafe { &mut *(p as *mut T) })
}

/// The event an [`Profiler::UNBOXED`] handle names.
fn unboxed<P: Profiler>(handle: *mut c_void) -> NetResult<P::Event> {
    if handle.is_null() {
        return Err(NetError::InvalidArgument("event is NULL".into()));
    }
    P::event_of_handle(handle as usize)
        .ok_or_else(|| NetError::Internal(format!("{handle:p} is not an event of this profiler")))
}

/// [`guard`] with its success path inlined into the shim: the body runs under
/// `catch_unwind` here and comes back as a result code (a small value: no
/// `Result` with an error in it is copied through memory per call); only an
/// error or a panic goes to [`guard`] (out of line), which logs it and
/// returns its code exactly as when the body runs inside it (a panic is
/// resumed there and caught again). The profiler's per-event shims are
/// called tens of times per operation.
#[inline(always)]
fn g<P: Profiler>(what: &str, f: impl FnOnce() -> NetResult<()>) -> ncclResult_t {
    let body = std::panic::AssertUnwindSafe(|| match f() {
        Ok(()) => ncclResult_t::ncclSuccess,
        Err(e) => g_failed::<P>(what, e),
    });
    match std::panic::catch_unwind(body) {
        Ok(code) => code,
        Err(payload) => g_panicked::<P>(what, payload),
    }
}

/// An error of [`g`]'s body, reported through [`guard`].
#[cold]
#[inline(never)]
fn g_failed<P: Profiler>(what: &str, e: NetError) -> ncclResult_t {
    guard(P::NAME, what, move || Err(e))
}

/// A panic of [`g`]'s body, reported through [`guard`].
#[cold]
#[inline(never)]
fn g_panicked<P: Profiler>(what: &str, payload: Box<dyn std::any::Any + Send>) -> ncclResult_t {
    guard(P::NAME, what, move || std::panic::resume_unwind(payload))
}

/// `init` of v5/v6.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn init_v5<P: Profiler>(
    ctx: *mut *mut c_void,
    comm_id: u64,
    mask: *mut c_int,
    comm_name: *const c_char,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    logger: abi::ncclDebugLogger_t,
) -> ncclResult_t {
    g::<P>("init", || {
        crate::log::set_logger(logger);
        if ctx.is_null() || mask.is_null() {
            return Err(NetError::InvalidArgument(
                "init: context or eActivationMask is NULL".into(),
            ));
        }
        // SAFETY: `comm_name` is NULL or a C string NCCL keeps alive for the call; `ctx`/`mask`
        // are non-NULL out-pointers.
        unsafe {
            ctx.write(null_mut());
            let comm_name = (!comm_name.is_null()).then(|| CStr::from_ptr(comm_name));
            let info = ProfilerInit {
                comm_id,
                comm_name,
                n_nodes,
                n_ranks,
                rank,
            };
            let p = P::init(info, &mut *mask)?;
            ctx.write(Box::into_raw(Box::new(ProfBox {
                magic: MAGIC,
                prof: Some(p),
                retired: Default::default(),
            })) as *mut c_void);
        }
        Ok(())
    })
}

/// `init` of v4: `(ctx, mask, commName, commHash, nNodes, nranks, rank, logfn)`.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn init_v4<P: Profiler>(
    ctx: *mut *mut c_void,
    mask: *mut c_int,
    comm_name: *const c_char,
    comm_hash: u64,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    logger: abi::ncclDebugLogger_t,
) -> ncclResult_t {
    // SAFETY: same arguments as v5, reordered.
    unsafe { init_v5::<P>(ctx, comm_hash, mask, comm_name, n_nodes, n_ranks, rank, logger) }
}

/// `init` of v1–v3: `(ctx, mask)` only; the trait sees commId 0, no name, and
/// -1 for the node and rank counts and the rank (unknown to these versions).
#[doc(hidden)]
pub unsafe extern "C" fn init_v1<P: Profiler>(ctx: *mut *mut c_void, mask: *mut c_int) -> ncclResult_t {
    // SAFETY: forwarded pointers; the rest are plain values.
    unsafe { init_v5::<P>(ctx, 0, mask, std::ptr::null(), -1, -1, -1, None) }
}

/// `ncclFuncToString` of an `ncclFunc_t` code (v1 descriptors).
fn func_str(code: u8) -> *const c_char {
    const F: [&CStr; 8] = [
        c"Broadcast",
        c"Reduce",
        c"AllGather",
        c"ReduceScatter",
        c"AllReduce",
        c"SendRecv",
        c"Send",
        c"Recv",
    ];
    F.get(code as usize).map_or(c"Invalid".as_ptr(), |s| s.as_ptr())
}

/// `ncclDatatypeToString` of a datatype code (v1 descriptors; `ncclUint8` → `Unknown` as NCCL).
fn dtype_str(code: u8) -> *const c_char {
    const D: [&CStr; 10] = [
        c"ncclInt8",
        c"Unknown",
        c"ncclInt32",
        c"ncclUint32",
        c"ncclInt64",
        c"ncclUint64",
        c"ncclFloat16",
        c"ncclFloat32",
        c"ncclFloat64",
        c"ncclBfloat16",
    ];
    D.get(code as usize).map_or(c"Unknown".as_ptr(), |s| s.as_ptr())
}

fn algo_str(code: u8) -> *const c_char {
    const A: [&CStr; 7] = [
        c"TREE",
        c"RING",
        c"COLLNET_DIRECT",
        c"COLLNET_CHAIN",
        c"NVLS",
        c"NVLS_TREE",
        c"PAT",
    ];
    A.get(code as usize).map_or(c"Unknown".as_ptr(), |s| s.as_ptr())
}

fn proto_str(code: u8) -> *const c_char {
    const P: [&CStr; 3] = [c"LL", c"LL128", c"SIMPLE"];
    P.get(code as usize).map_or(c"Unknown".as_ptr(), |s| s.as_ptr())
}

/// A v6 descriptor with the common header of an older one.
fn header(ty: u8, parent: *mut c_void, rank: c_int) -> abi::ncclProfilerEventDescr_v6_t {
    let mut d = abi::ncclProfilerEventDescr_v6_t::zeroed();
    d.r#type = ty as u64;
    d.parentObj = parent;
    d.rank = rank;
    d
}

/// Copies the members every version shares (proxyOp, proxyStep; v3+ kernelCh
/// channel and netPlugin) from an old descriptor's union.
///
/// # Safety
/// `u` must point to the union of a descriptor of type `ty`.
unsafe fn shared_members(d: &mut abi::ncclProfilerEventDescr_v6_t, ty: u64, u: *const u8, v3plus: bool) {
    // SAFETY: per the caller; these members have the same layout in every version.
    unsafe {
        match ty {
            abi::ncclProfileProxyOp => d.u.proxyOp = std::ptr::read_unaligned(u.cast()),
            abi::ncclProfileProxyStep => d.u.proxyStep = std::ptr::read_unaligned(u.cast()),
            abi::ncclProfileKernelCh if v3plus => d.u.kernelCh.channelId = *u,
            abi::ncclProfileNetPlugin if v3plus => d.u.netPlugin = std::ptr::read_unaligned(u.cast()),
            _ => {}
        }
    }
}

/// `startEvent` of v5 (the v6 layout without the CE members).
#[doc(hidden)]
pub unsafe extern "C" fn start_event_v5<P: Profiler>(
    ctx: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut abi::ncclProfilerEventDescr_v5_t,
) -> ncclResult_t {
    // SAFETY: v5 and v6 descriptors have one layout for every v5 member (same size).
    unsafe { start_event_v6::<P>(ctx, handle, descr.cast()) }
}

/// `startEvent` of v4 (8-bit type; no API events; no `parentGroup`).
#[doc(hidden)]
pub unsafe extern "C" fn start_event_v4<P: Profiler>(
    ctx: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut abi::ncclProfilerEventDescr_v4_t,
) -> ncclResult_t {
    // SAFETY: NULL checked; the fields read are the descriptor's.
    let Some(o) = (unsafe { descr.as_ref() }) else {
        // SAFETY: forwarded for the NULL diagnosis.
        return unsafe { start_event_v6::<P>(ctx, handle, std::ptr::null_mut()) };
    };
    let mut d = header(o.r#type, o.parentObj, o.rank);
    let ty = d.r#type;
    // SAFETY: the type selects the union member; the rest share layouts.
    unsafe {
        match ty {
            abi::ncclProfileColl => {
                let c = o.u.coll;
                let mut n = abi::ncclProfilerCollDescr_v5_t::zeroed();
                (n.seqNumber, n.func, n.sendBuff, n.recvBuff, n.count, n.root) =
                    (c.seqNumber, c.func, c.sendBuff, c.recvBuff, c.count, c.root);
                (n.datatype, n.nChannels, n.nWarps, n.algo, n.proto) =
                    (c.datatype, c.nChannels, c.nWarps, c.algo, c.proto);
                d.u.coll = n;
            }
            abi::ncclProfileP2p => {
                let c = o.u.p2p;
                let mut n = abi::ncclProfilerP2pDescr_v5_t::zeroed();
                (n.func, n.buff, n.datatype, n.count, n.peer, n.nChannels) =
                    (c.func, c.buff, c.datatype, c.count, c.peer, c.nChannels);
                d.u.p2p = n;
            }
            abi::ncclProfileKernelCh => d.u.kernelCh = o.u.kernelCh,
            _ => shared_members(&mut d, ty, (&raw const o.u).cast(), true),
        }
        start_event_v6::<P>(ctx, handle, &mut d)
    }
}

/// Converts a v2/v3 coll member (same fields up to `datatype`).
macro_rules! coll_v2 {
    ($c:expr) => {{
        let c = $c;
        let mut n = abi::ncclProfilerCollDescr_v5_t::zeroed();
        (n.seqNumber, n.func, n.sendBuff, n.recvBuff, n.count, n.root) =
            (c.seqNumber, c.func, c.sendBuff, c.recvBuff, c.count, c.root);
        (n.datatype, n.nChannels, n.nWarps, n.algo, n.proto) = (c.datatype, c.nMaxChannels, c.nWarps, c.algo, c.proto);
        n
    }};
}

fn p2p_v2(c: &abi::ncclProfilerP2pDescr_v2_t) -> abi::ncclProfilerP2pDescr_v5_t {
    let mut n = abi::ncclProfilerP2pDescr_v5_t::zeroed();
    (n.func, n.buff, n.datatype, n.count, n.peer) = (c.func, c.buff, c.datatype, c.count, c.peer);
    n
}

/// `startEvent` of v3.
#[doc(hidden)]
pub unsafe extern "C" fn start_event_v3<P: Profiler>(
    ctx: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut abi::ncclProfilerEventDescr_v3_t,
) -> ncclResult_t {
    // SAFETY: NULL checked; the type selects the union member.
    unsafe {
        let Some(o) = descr.as_ref() else {
            return start_event_v6::<P>(ctx, handle, std::ptr::null_mut());
        };
        let mut d = header(o.r#type, o.parentObj, o.rank);
        match d.r#type {
            abi::ncclProfileColl => d.u.coll = coll_v2!(o.u.coll),
            abi::ncclProfileP2p => d.u.p2p = p2p_v2(&o.u.p2p),
            ty => shared_members(&mut d, ty, (&raw const o.u).cast(), true),
        }
        start_event_v6::<P>(ctx, handle, &mut d)
    }
}

/// `startEvent` of v2.
#[doc(hidden)]
pub unsafe extern "C" fn start_event_v2<P: Profiler>(
    ctx: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut abi::ncclProfilerEventDescr_v2_t,
) -> ncclResult_t {
    // SAFETY: as v3.
    unsafe {
        let Some(o) = descr.as_ref() else {
            return start_event_v6::<P>(ctx, handle, std::ptr::null_mut());
        };
        let mut d = header(o.r#type, o.parentObj, o.rank);
        match d.r#type {
            abi::ncclProfileColl => d.u.coll = coll_v2!(o.u.coll),
            abi::ncclProfileP2p => d.u.p2p = p2p_v2(&o.u.p2p),
            ty => shared_members(&mut d, ty, (&raw const o.u).cast(), false),
        }
        start_event_v6::<P>(ctx, handle, &mut d)
    }
}

/// `startEvent` of v1 (enum codes become NCCL's strings).
#[doc(hidden)]
pub unsafe extern "C" fn start_event_v1<P: Profiler>(
    ctx: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut abi::ncclProfilerEventDescr_v1_t,
) -> ncclResult_t {
    // SAFETY: as v3.
    unsafe {
        let Some(o) = descr.as_ref() else {
            return start_event_v6::<P>(ctx, handle, std::ptr::null_mut());
        };
        let mut d = header(o.r#type, o.parentObj, o.rank);
        match d.r#type {
            abi::ncclProfileColl => {
                let c = o.u.coll;
                let mut n = abi::ncclProfilerCollDescr_v5_t::zeroed();
                (n.seqNumber, n.sendBuff, n.recvBuff, n.count, n.root) =
                    (c.seqNumber, c.sendBuff, c.recvBuff, c.count, c.root);
                (n.func, n.datatype, n.algo, n.proto) = (
                    func_str(c.func),
                    dtype_str(c.datatype),
                    algo_str(c.algo),
                    proto_str(c.proto),
                );
                (n.nChannels, n.nWarps) = (c.nMaxChannels, c.nWarps);
                d.u.coll = n;
            }
            abi::ncclProfileP2p => {
                let c = o.u.p2p;
                let mut n = abi::ncclProfilerP2pDescr_v5_t::zeroed();
                (n.func, n.buff, n.datatype, n.count, n.peer) =
                    (func_str(c.func), c.buff, dtype_str(c.datatype), c.count, c.peer);
                d.u.p2p = n;
            }
            ty => shared_members(&mut d, ty, (&raw const o.u).cast(), false),
        }
        start_event_v6::<P>(ctx, handle, &mut d)
    }
}

/// `recordEventState` of v1–v3: their union keeps `transSize` and
/// `appendedProxyOps` at offset 0 like v6's, so it is read as the v6 union.
#[doc(hidden)]
pub unsafe extern "C" fn record_state_v1<P: Profiler>(
    handle: *mut c_void,
    state: abi::ncclProfilerEventState_t,
    args: *mut abi::ncclProfilerEventStateArgs_v1_t,
) -> ncclResult_t {
    // SAFETY: the v1 union (16 bytes) holds the v6 union's first 8 bytes at offset 0.
    unsafe { record_state_v6::<P>(handle, state, args.cast()) }
}

/// `startEvent` of v6.
#[doc(hidden)]
pub unsafe extern "C" fn start_event_v6<P: Profiler>(
    ctx: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut abi::ncclProfilerEventDescr_v6_t,
) -> ncclResult_t {
    g::<P>("startEvent", || {
        // SAFETY: pointers per the C API (validated for NULL; ctx by magic).
        unsafe {
            let handle = handle
                .as_mut()
                .ok_or_else(|| NetError::InvalidArgument("eHandle is NULL".into()))?;
            *handle = null_mut();
            let b: &mut ProfBox<P> = boxed(ctx, MAGIC, "profiler context")?;
            let prof = b
                .prof
                .as_ref()
                .ok_or_else(|| NetError::Internal("profiler finalized".into()))?;
            let descr = descr
                .as_ref()
                .ok_or_else(|| NetError::InvalidArgument("eDescr is NULL".into()))?;
            if P::UNBOXED {
                // The event is its own handle: nothing to box, nothing to retain.
                let parent = P::event_of_handle(descr.parentObj as usize);
                if let Some(ev) = prof.start_child(descr, parent.as_ref())? {
                    *handle = P::handle_of(&ev) as *mut c_void;
                }
                return Ok(());
            }
            let parent = parent_of::<P>(descr.parentObj);
            if let Some(ev) = prof.start_child(descr, parent)? {
                let e = EventBox::<P> {
                    magic: EVENT_MAGIC,
                    prof: prof as *const P,
                    event: Some(ev),
                    owner: b as *const ProfBox<P>,
                };
                *handle = Box::into_raw(Box::new(e)) as *mut c_void;
            }
        }
        Ok(())
    })
}

/// `stopEvent`.
#[doc(hidden)]
pub unsafe extern "C" fn stop_event<P: Profiler>(handle: *mut c_void) -> ncclResult_t {
    g::<P>("stopEvent", || {
        // SAFETY: `handle` comes from our startEvent; the profiler outlives its events.
        unsafe {
            if handle.is_null() {
                // NCCL forwards a net plugin's Stop of an untracked event as NULL.
                return Ok(());
            }
            if P::UNBOXED {
                return P::stop_unboxed(unboxed::<P>(handle)?);
            }
            let e: &mut EventBox<P> = boxed(handle, EVENT_MAGIC, "event")?;
            let prof = &*e.prof;
            let Some(ev) = e.event.take() else { return Ok(()) };
            if P::RETAIN_STOPPED > 0
                && let Some(copy) = prof.retain(&ev)
            {
                e.event = Some(copy);
                e.magic = RETIRED_MAGIC;
                let owner = &*e.owner;
                let evicted = {
                    let mut q = owner.retired.lock().unwrap_or_else(|x| x.into_inner());
                    q.push_back(e as *mut EventBox<P> as usize);
                    if q.len() > P::RETAIN_STOPPED {
                        q.pop_front()
                    } else {
                        None
                    }
                };
                if let Some(old) = evicted {
                    let old = old as *mut EventBox<P>;
                    (*old).magic = 0;
                    drop(Box::from_raw(old));
                }
                return prof.stop_event(ev);
            }
            e.magic = 0;
            drop(Box::from_raw(e as *mut EventBox<P>));
            prof.stop_event(ev)
        }
    })
}

/// `recordEventState` of v6.
#[doc(hidden)]
pub unsafe extern "C" fn record_state_v6<P: Profiler>(
    handle: *mut c_void,
    state: abi::ncclProfilerEventState_t,
    args: *mut abi::ncclProfilerEventStateArgs_v6_t,
) -> ncclResult_t {
    g::<P>("recordEventState", || {
        // SAFETY: `handle` comes from our startEvent; `args` is NULL or valid.
        unsafe {
            if P::UNBOXED {
                let mut ev = unboxed::<P>(handle)?;
                return P::record_unboxed(&mut ev, state, args.as_ref());
            }
            let e: &mut EventBox<P> = boxed(handle, EVENT_MAGIC, "event")?;
            let prof = &*e.prof;
            match e.event.as_mut() {
                Some(ev) => prof.record_event_state(ev, state, args.as_ref()),
                None => Ok(()),
            }
        }
    })
}

/// `finalize`.
#[doc(hidden)]
pub unsafe extern "C" fn finalize<P: Profiler>(ctx: *mut c_void) -> ncclResult_t {
    g::<P>("finalize", || {
        // SAFETY: `ctx` comes from our init; freed only here.
        unsafe {
            let b: &mut ProfBox<P> = boxed(ctx, MAGIC, "profiler context")?;
            b.magic = 0;
            let mut b = Box::from_raw(b as *mut ProfBox<P>);
            let retired = std::mem::take(&mut *b.retired.lock().unwrap_or_else(|x| x.into_inner()));
            for old in retired {
                let old = old as *mut EventBox<P>;
                (*old).magic = 0;
                drop(Box::from_raw(old));
            }
            b.prof.take().map_or(Ok(()), P::finalize)
        }
    })
}

/// The `ncclProfiler_v5_t` of `P`.
pub const fn profiler_v5<P: Profiler>() -> abi::ncclProfiler_v5_t {
    abi::ncclProfiler_v5_t {
        name: P::NAME.as_ptr(),
        init: Some(init_v5::<P>),
        startEvent: Some(start_event_v5::<P>),
        stopEvent: Some(stop_event::<P>),
        recordEventState: Some(record_state_v6::<P>),
        finalize: Some(finalize::<P>),
    }
}

/// The `ncclProfiler_v4_t` of `P`.
pub const fn profiler_v4<P: Profiler>() -> abi::ncclProfiler_v4_t {
    abi::ncclProfiler_v4_t {
        name: P::NAME.as_ptr(),
        init: Some(init_v4::<P>),
        startEvent: Some(start_event_v4::<P>),
        stopEvent: Some(stop_event::<P>),
        recordEventState: Some(record_state_v6::<P>),
        finalize: Some(finalize::<P>),
    }
}

/// The `ncclProfiler_v3_t` of `P`.
pub const fn profiler_v3<P: Profiler>() -> abi::ncclProfiler_v3_t {
    abi::ncclProfiler_v3_t {
        name: P::NAME.as_ptr(),
        init: Some(init_v1::<P>),
        startEvent: Some(start_event_v3::<P>),
        stopEvent: Some(stop_event::<P>),
        recordEventState: Some(record_state_v1::<P>),
        finalize: Some(finalize::<P>),
    }
}

/// The `ncclProfiler_v2_t` of `P`.
pub const fn profiler_v2<P: Profiler>() -> abi::ncclProfiler_v2_t {
    abi::ncclProfiler_v2_t {
        name: P::NAME.as_ptr(),
        init: Some(init_v1::<P>),
        startEvent: Some(start_event_v2::<P>),
        stopEvent: Some(stop_event::<P>),
        recordEventState: Some(record_state_v1::<P>),
        finalize: Some(finalize::<P>),
    }
}

/// The `ncclProfiler_v1_t` of `P`.
pub const fn profiler_v1<P: Profiler>() -> abi::ncclProfiler_v1_t {
    abi::ncclProfiler_v1_t {
        name: P::NAME.as_ptr(),
        init: Some(init_v1::<P>),
        startEvent: Some(start_event_v1::<P>),
        stopEvent: Some(stop_event::<P>),
        recordEventState: Some(record_state_v1::<P>),
        finalize: Some(finalize::<P>),
    }
}

/// The `ncclProfiler_v6_t` of `P`.
pub const fn profiler_v6<P: Profiler>() -> abi::ncclProfiler_v6_t {
    abi::ncclProfiler_v6_t {
        name: P::NAME.as_ptr(),
        init: Some(init_v5::<P>),
        startEvent: Some(start_event_v6::<P>),
        stopEvent: Some(stop_event::<P>),
        recordEventState: Some(record_state_v6::<P>),
        finalize: Some(finalize::<P>),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::c_ulong;
    use std::sync::Mutex;

    static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

    /// Receives what `crate::log::log` passes: fixed arguments, then `"%s", text`.
    extern "C" fn capture(
        _l: c_int,
        _f: c_ulong,
        _file: *const c_char,
        _line: c_int,
        _fmt: *const c_char,
        text: *const c_char,
    ) {
        // SAFETY: the SDK's logger always passes a NUL-terminated string as the 6th argument.
        let s = unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned();
        LOG.lock().unwrap().push(s);
    }

    fn logged(needle: &str) -> bool {
        LOG.lock().unwrap().iter().any(|l| l.contains(needle))
    }

    /// Events are their handles; a stop panics, a state fails, for the
    /// failure paths of the shims' inlined guard.
    struct Failing;
    impl Profiler for Failing {
        const NAME: &'static CStr = c"Failing";
        type Event = u64;
        const UNBOXED: bool = true;
        fn init(_info: ProfilerInit<'_>, mask: &mut i32) -> NetResult<Self> {
            *mask = 0x7fff;
            Ok(Failing)
        }
        fn start_event(&self, d: &abi::ncclProfilerEventDescr_v6_t) -> NetResult<Option<u64>> {
            if d.rank < 0 {
                return Err(NetError::InvalidUsage("negative rank in descriptor".into()));
            }
            Ok(Some(d.r#type))
        }
        fn record_event_state(
            &self,
            e: &mut u64,
            s: abi::ncclProfilerEventState_t,
            a: Option<&abi::ncclProfilerEventStateArgs_v6_t>,
        ) -> NetResult<()> {
            Self::record_unboxed(e, s, a)
        }
        fn stop_event(&self, e: u64) -> NetResult<()> {
            Self::stop_unboxed(e)
        }
        fn handle_of(e: &u64) -> usize {
            *e as usize
        }
        fn event_of_handle(h: usize) -> Option<u64> {
            (h != 0).then_some(h as u64)
        }
        fn record_unboxed(
            _e: &mut u64,
            s: abi::ncclProfilerEventState_t,
            _a: Option<&abi::ncclProfilerEventStateArgs_v6_t>,
        ) -> NetResult<()> {
            Err(NetError::InvalidArgument(format!("state {s} refused")))
        }
        fn stop_unboxed(e: u64) -> NetResult<()> {
            panic!("boom in stop of {e}")
        }
    }

    /// Success returns `ncclSuccess`; an error returns its code and a panic
    /// `ncclInternalError`, each logged at WARN with the call's name and the
    /// message, as `guard` does when the body runs inside it.
    #[test]
    fn shim_failures_are_logged_with_their_codes() {
        let v = profiler_v6::<Failing>();
        // SAFETY: the logger is called as `capture` expects (see plugin-api/tests/net_export.rs).
        let logger = unsafe {
            std::mem::transmute::<
                extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char, *const c_char),
                crate::log::DebugLogger,
            >(capture)
        };
        // SAFETY: (whole test) the vtable is called with valid pointers, as NCCL does.
        unsafe {
            let mut ctx = null_mut();
            let mut mask = 0;
            let ok = ncclResult_t::ncclSuccess;
            assert_eq!(
                v.init.unwrap()(&mut ctx, 1, &mut mask, c"c".as_ptr(), 1, 1, 0, Some(logger)),
                ok
            );
            let mut d = abi::ncclProfilerEventDescr_v6_t::zeroed();
            d.r#type = abi::ncclProfileProxyStep;
            let mut h = null_mut();
            assert_eq!(v.startEvent.unwrap()(ctx, &mut h, &mut d), ok);
            assert_eq!(h as u64, abi::ncclProfileProxyStep);
            d.rank = -1;
            assert_eq!(
                v.startEvent.unwrap()(ctx, &mut h, &mut d),
                ncclResult_t::ncclInvalidUsage
            );
            assert!(h.is_null());
            assert!(logged("NET/Failing : startEvent failed: "), "{:?}", LOG.lock().unwrap());
            assert!(logged("negative rank in descriptor"));
            let h = abi::ncclProfileProxyStep as usize as *mut c_void;
            assert_eq!(
                v.recordEventState.unwrap()(h, 9, null_mut()),
                ncclResult_t::ncclInvalidArgument
            );
            assert!(logged("NET/Failing : recordEventState failed: "));
            assert!(logged("state 9 refused"));
            assert_eq!(v.stopEvent.unwrap()(h), ncclResult_t::ncclInternalError);
            assert!(logged("NET/Failing : stopEvent panicked: boom in stop of 16"));
            assert_eq!(v.stopEvent.unwrap()(null_mut()), ok);
            assert_eq!(v.finalize.unwrap()(ctx), ok);
        }
    }
}
