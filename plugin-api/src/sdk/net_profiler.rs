//! Profiler events from a net plugin (net API v10+; reference `docs/reference/nccl-plugin-abi.md`
//! §3.2 "Net-plugin-defined events and the callback", `docs/reference/nccl-graph-tuning.md` §6.6).
//!
//! The host hands its `ncclProfilerCallback_t` to the plugin's `init`; the SDK
//! keeps it. While the SDK runs a plugin's `isend`/`irecv`, the step handle
//! (`phandle`) the host passed for each buffer is available through
//! [`step_handle`]; a plugin keeps it and later starts events under it with
//! [`StepHandle::start`] (the host parents them to its ProxyStep event, or
//! ignores them when NetPlugin events are not wanted), updates and stops them.
//! Everything is a no-op when the host gave no callback or no step handle.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::abi;

/// The host's callback (0: none).
static CALLBACK: AtomicUsize = AtomicUsize::new(0);

/// Most buffers of one grouped `irecv` whose step handles are kept.
const MAX_HANDLES: usize = 8;

thread_local! {
    static CURRENT: Cell<[*mut c_void; MAX_HANDLES]> = const { Cell::new([null_mut(); MAX_HANDLES]) };
}

/// Stores the host's callback (net `init` v10+).
pub(crate) fn set_callback(cb: abi::ncclProfilerCallback_t) {
    CALLBACK.store(cb.map_or(0, |f| f as usize), Ordering::Release);
}

fn callback() -> abi::ncclProfilerCallback_t {
    let p = CALLBACK.load(Ordering::Acquire);
    if p == 0 {
        return None;
    }
    // SAFETY: `p` was stored from a non-NULL `ncclProfilerCallback_t` in `set_callback`.
    Some(unsafe {
        std::mem::transmute::<
            usize,
            unsafe extern "C" fn(*mut *mut c_void, i32, *mut c_void, i64, *mut c_void) -> abi::ncclResult_t,
        >(p)
    })
}

/// Runs `f` with `handles` as the current step handles (the SDK's isend/irecv shims).
pub(crate) fn with_step_handles<R>(handles: &[*mut c_void], f: impl FnOnce() -> R) -> R {
    let mut a = [null_mut(); MAX_HANDLES];
    for (d, s) in a.iter_mut().zip(handles) {
        *d = *s;
    }
    let prev = CURRENT.with(|c| c.replace(a));
    let r = f();
    CURRENT.with(|c| c.set(prev));
    r
}

/// The host's record of one network step (`phandle`), opaque.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepHandle(*mut c_void);

// SAFETY: an opaque token of the host; the host's callback accepts it from any thread.
unsafe impl Send for StepHandle {}
// SAFETY: as above.
unsafe impl Sync for StepHandle {}

/// The step handle the host passed for buffer `i` of the `isend` (0) or
/// `irecv` being served on this thread; `None` outside those calls, for
/// hosts older than net v10, or when the host profiles nothing.
pub fn step_handle(i: usize) -> Option<StepHandle> {
    let p = CURRENT.with(|c| c.get()).get(i).copied().unwrap_or(null_mut());
    (!p.is_null()).then_some(StepHandle(p))
}

/// A started net-plugin event (possibly untracked by the host).
#[derive(Debug)]
pub struct NetEvent(*mut c_void);

// SAFETY: an opaque profiler handle; the callback accepts it from any thread.
unsafe impl Send for NetEvent {}

impl StepHandle {
    /// Starts a net-plugin event under this step: `plugin_id` is the network
    /// type in bits 16–31 (`NCCL_PROFILER_NET_TYPE_*`) and the descriptor version
    /// in bits 0–15; `ext_data` the descriptor (e.g. `ncclProfilerNetSockDescr_v1_t`).
    ///
    /// # Safety
    /// `ext_data` must stay valid and unchanged until the event is stopped (the
    /// profiler may read it until then), and the step must still be in flight.
    pub unsafe fn start(self, plugin_id: i64, ext_data: *mut c_void) -> NetEvent {
        let mut h: *mut c_void = null_mut();
        if let Some(cb) = callback() {
            // SAFETY: the host's callback with its own step handle; `h` is ours.
            unsafe { cb(&mut h, 0, self.0, plugin_id, ext_data) };
        }
        NetEvent(h)
    }
}

impl NetEvent {
    /// Records `NetPluginUpdate` with `ext_data`.
    ///
    /// # Safety
    /// As [`StepHandle::start`] for `ext_data`.
    pub unsafe fn update(&mut self, ext_data: *mut c_void) {
        if let (Some(cb), false) = (callback(), self.0.is_null()) {
            // SAFETY: the host's callback with the handle it gave.
            unsafe { cb(&mut self.0, 2, null_mut(), 0, ext_data) };
        }
    }

    /// Stops the event.
    pub fn stop(mut self) {
        if let (Some(cb), false) = (callback(), self.0.is_null()) {
            // SAFETY: the host's callback with the handle it gave.
            unsafe { cb(&mut self.0, 1, null_mut(), 0, null_mut()) };
        }
    }
}
