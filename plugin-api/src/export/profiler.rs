//! Generic shims behind [`export_profiler_plugin!`](crate::export_profiler_plugin):
//! `ncclProfiler_v6` from one [`sdk::Profiler`](crate::sdk::Profiler).

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
/// ([`Profiler::RETAIN_STOPPED`](crate::sdk::Profiler::RETAIN_STOPPED)).
///
/// # Safety
/// `p` must be NULL or a handle this profiler returned (live or retained), or
/// at least readable for a `u64`; the reference must not outlive the event
/// (use it within the `startEvent` call that received the handle).
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
    if p.is_null() {
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

fn g<P: Profiler>(what: &str, f: impl FnOnce() -> NetResult<()>) -> ncclResult_t {
    guard(P::NAME, what, f)
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
                    if q.len() > P::RETAIN_STOPPED { q.pop_front() } else { None }
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
