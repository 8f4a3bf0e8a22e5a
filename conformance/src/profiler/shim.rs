//! The recording shim between the host's profiler adapter and the plugin under
//! test.
//!
//! The suite drives the plugin through the runtime's own adapter
//! ([`ferroccl::profiler::Profiler`], which builds each version's descriptors and
//! init arguments exactly as the runtime does), but that adapter, like NCCL
//! (`src/plugin/profiler.cc`), ignores what `startEvent`, `stopEvent`,
//! `recordEventState` and `finalize` return. So the adapter is handed this
//! shim's vtable instead of the plugin's: every slot forwards to the plugin's
//! function under the worker's watchdog ([`super::worker::enter`]) and records
//! any result other than `ncclSuccess`, with the call and the event type, for the
//! check to report. One plugin per worker process.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use ferroccl_plugin_api::abi::ncclResult_t;

use super::worker::{Call, enter};

/// Every profiler vtable version has this layout (48 bytes: `name`, `init`,
/// `startEvent`, `stopEvent`, `recordEventState`, `finalize`; reference
/// `docs/reference/nccl-plugin-abi.md` §3.2); only `init`'s parameters and the descriptor and
/// state-argument types behind the pointers differ.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RawVtable {
    /// `const char* name`.
    pub name: *const c_char,
    /// `init`.
    pub init: *const c_void,
    /// `startEvent`.
    pub start: *const c_void,
    /// `stopEvent`.
    pub stop: *const c_void,
    /// `recordEventState`.
    pub record: *const c_void,
    /// `finalize`.
    pub finalize: *const c_void,
}

struct Shared(RawVtable, u32);
// SAFETY: function pointers and a name pointer into a pinned library, never mutated.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

static REAL: OnceLock<Shared> = OnceLock::new();
static SHIM: OnceLock<Shared> = OnceLock::new();

/// A call that did not return `ncclSuccess`.
#[derive(Debug, Clone)]
pub struct Finding {
    /// `startEvent of a ProxyStep event`, `finalize`, …
    pub call: String,
    /// The result code.
    pub code: i32,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = ncclResult_t(self.code).name();
        write!(f, "{} returned {name} ({})", self.call, self.code)
    }
}

static FINDINGS: Mutex<Vec<Finding>> = Mutex::new(Vec::new());
/// Event type of every handle `startEvent` gave (for messages about later calls).
static HANDLES: Mutex<Option<HashMap<usize, u64>>> = Mutex::new(None);
/// Calls forwarded: init, start, stop, record, finalize.
static COUNTS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

/// Names of the event types by bit index (`ncclProfile*`, `nccl_profiler.h`).
pub const TYPE_NAMES: [&str; 15] = [
    "Group",
    "Coll",
    "P2p",
    "ProxyOp",
    "ProxyStep",
    "ProxyCtrl",
    "KernelCh",
    "NetPlugin",
    "GroupApi",
    "CollApi",
    "P2pApi",
    "KernelLaunch",
    "CeColl",
    "CeSync",
    "CeBatch",
];

/// Bit index of event type `ty` (a single bit), 15 when unknown.
pub fn type_index(ty: u64) -> usize {
    if ty.is_power_of_two() && ty.trailing_zeros() < 15 {
        ty.trailing_zeros() as usize
    } else {
        15
    }
}

fn type_name(ty: u64) -> String {
    TYPE_NAMES
        .get(type_index(ty))
        .map_or_else(|| format!("type-0x{ty:x}"), |s| (*s).to_owned())
}

fn note(call: impl FnOnce() -> String, r: ncclResult_t) -> ncclResult_t {
    if !r.is_success() {
        let mut f = FINDINGS.lock().unwrap_or_else(|e| e.into_inner());
        if f.len() < 1000 {
            f.push(Finding {
                call: call(),
                code: r.0,
            });
        }
    }
    r
}

fn real() -> &'static Shared {
    REAL.get().expect("shim used before install")
}

fn handle_type(h: *mut c_void) -> Option<u64> {
    HANDLES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(&(h as usize)).copied())
}

fn about(h: *mut c_void) -> String {
    if h.is_null() {
        "NULL".into()
    } else {
        match handle_type(h) {
            Some(t) => format!("a {} event's handle", type_name(t)),
            None => "a handle".into(),
        }
    }
}

type InitV1 = unsafe extern "C" fn(*mut *mut c_void, *mut c_int) -> ncclResult_t;
type InitV4 = unsafe extern "C" fn(
    *mut *mut c_void,
    *mut c_int,
    *const c_char,
    u64,
    c_int,
    c_int,
    c_int,
    *const c_void,
) -> ncclResult_t;
type InitV5 = unsafe extern "C" fn(
    *mut *mut c_void,
    u64,
    *mut c_int,
    *const c_char,
    c_int,
    c_int,
    c_int,
    *const c_void,
) -> ncclResult_t;
type StartFn = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut c_void) -> ncclResult_t;
type StopFn = unsafe extern "C" fn(*mut c_void) -> ncclResult_t;
type RecordFn = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> ncclResult_t;
type FinalizeFn = unsafe extern "C" fn(*mut c_void) -> ncclResult_t;

unsafe extern "C" fn init_v1(ctx: *mut *mut c_void, mask: *mut c_int) -> ncclResult_t {
    COUNTS[0].fetch_add(1, Ordering::Relaxed);
    let _g = enter(Call::Init, 0);
    // SAFETY: `init` of a v1–v3 table (checked at install) with the adapter's arguments.
    let r = unsafe { std::mem::transmute::<*const c_void, InitV1>(real().0.init)(ctx, mask) };
    note(|| "init".into(), r)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init_v4(
    ctx: *mut *mut c_void,
    mask: *mut c_int,
    name: *const c_char,
    hash: u64,
    nn: c_int,
    nr: c_int,
    rank: c_int,
    log: *const c_void,
) -> ncclResult_t {
    COUNTS[0].fetch_add(1, Ordering::Relaxed);
    let _g = enter(Call::Init, 0);
    // SAFETY: `init` of a v4 table with the adapter's arguments.
    let r = unsafe {
        std::mem::transmute::<*const c_void, InitV4>(real().0.init)(ctx, mask, name, hash, nn, nr, rank, log)
    };
    note(|| "init".into(), r)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init_v5(
    ctx: *mut *mut c_void,
    id: u64,
    mask: *mut c_int,
    name: *const c_char,
    nn: c_int,
    nr: c_int,
    rank: c_int,
    log: *const c_void,
) -> ncclResult_t {
    COUNTS[0].fetch_add(1, Ordering::Relaxed);
    let _g = enter(Call::Init, 0);
    // SAFETY: `init` of a v5/v6 table with the adapter's arguments.
    let r =
        unsafe { std::mem::transmute::<*const c_void, InitV5>(real().0.init)(ctx, id, mask, name, nn, nr, rank, log) };
    note(|| "init".into(), r)
}

unsafe extern "C" fn start(ctx: *mut c_void, h: *mut *mut c_void, d: *mut c_void) -> ncclResult_t {
    COUNTS[1].fetch_add(1, Ordering::Relaxed);
    // SAFETY: `d` is the adapter's descriptor of the plugin's version: `type` is a
    // `uint8_t` up to v4 and a `uint64_t` from v5, at offset 0 in both.
    let ty = unsafe {
        if real().1 <= 4 {
            *(d as *const u8) as u64
        } else {
            *(d as *const u64)
        }
    };
    let r = {
        let _g = enter(Call::Start, ty);
        // SAFETY: the plugin's `startEvent` with the adapter's arguments.
        unsafe { std::mem::transmute::<*const c_void, StartFn>(real().0.start)(ctx, h, d) }
    };
    if r.is_success() {
        // SAFETY: `h` is the adapter's out-parameter.
        let eh = unsafe { *h };
        if !eh.is_null() {
            HANDLES
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(HashMap::new)
                .insert(eh as usize, ty);
        }
    }
    note(|| format!("startEvent of a {} event", type_name(ty)), r)
}

unsafe extern "C" fn stop(h: *mut c_void) -> ncclResult_t {
    COUNTS[2].fetch_add(1, Ordering::Relaxed);
    let ty = if h.is_null() { 0 } else { handle_type(h).unwrap_or(0) };
    let r = {
        let _g = enter(Call::Stop, ty);
        // SAFETY: the plugin's `stopEvent` with the handle the adapter passes.
        unsafe { std::mem::transmute::<*const c_void, StopFn>(real().0.stop)(h) }
    };
    note(|| format!("stopEvent of {}", about(h)), r)
}

unsafe extern "C" fn record(h: *mut c_void, st: c_int, args: *mut c_void) -> ncclResult_t {
    COUNTS[3].fetch_add(1, Ordering::Relaxed);
    let ty = handle_type(h).unwrap_or(0);
    let r = {
        let _g = enter(Call::Record, ty);
        // SAFETY: the plugin's `recordEventState` with the adapter's arguments.
        unsafe { std::mem::transmute::<*const c_void, RecordFn>(real().0.record)(h, st, args) }
    };
    note(|| format!("recordEventState(state {st}) of {}", about(h)), r)
}

unsafe extern "C" fn finalize(ctx: *mut c_void) -> ncclResult_t {
    COUNTS[4].fetch_add(1, Ordering::Relaxed);
    let r = {
        let _g = enter(Call::Finalize, 0);
        // SAFETY: the plugin's `finalize` with the context its `init` gave.
        unsafe { std::mem::transmute::<*const c_void, FinalizeFn>(real().0.finalize)(ctx) }
    };
    note(|| "finalize".into(), r)
}

/// Installs the plugin's vtable `real` (version `version`) behind the shim and
/// returns the shim's vtable, to be handed to the adapter as the plugin's.
/// Once per process; later calls return the first shim.
pub fn install(real_vt: RawVtable, version: u32) -> *const c_void {
    let _ = REAL.set(Shared(real_vt, version));
    let init: *const c_void = match version {
        1..=3 => init_v1 as *const c_void,
        4 => init_v4 as *const c_void,
        _ => init_v5 as *const c_void,
    };
    let shim = SHIM.get_or_init(|| {
        Shared(
            RawVtable {
                name: real_vt.name,
                init,
                start: start as *const c_void,
                stop: stop as *const c_void,
                record: record as *const c_void,
                finalize: finalize as *const c_void,
            },
            version,
        )
    });
    &shim.0 as *const RawVtable as *const c_void
}

/// Takes the findings recorded so far.
pub fn take_findings() -> Vec<Finding> {
    std::mem::take(&mut *FINDINGS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Calls forwarded so far: (init, startEvent, stopEvent, recordEventState, finalize).
pub fn counts() -> [u64; 5] {
    std::array::from_fn(|i| COUNTS[i].load(Ordering::Relaxed))
}
