//! The worker side of the profiler section: one check on one API version in
//! this process (`--profiler --worker ID`); the symbol probe
//! (`--profiler --probe`) is [`crate::section::Section::probe_main`].
//!
//! Every plugin call goes through the [`super::shim`] and is announced with
//! [`enter`] in a per-thread slot (checks call the plugin from several threads
//! at once). A watchdog thread fails the check when a call has not returned
//! within [`LIMIT`], naming the call and the event type, and a fatal signal
//! prints the call that was running on the crashing thread (the parent turns
//! that into the failure message).

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ferroccl::plugin::symbols::PluginType;

use super::SECTION;
use super::checks::ProfCx;
use super::shim::{self, RawVtable, TYPE_NAMES, type_index};
use crate::outcome::CheckOutcome;
use crate::section::{die_with_parent, judge_body, on_fatal_signals};
use crate::watch::{CRASH_MARKER, emit_result};

/// Longest a profiler call may take. Profiler calls sit on NCCL's critical
/// path (`startEvent` runs inside `ncclAllReduce`, `stopEvent` in the proxy's
/// progress loop), so any call near this long is a defect.
pub const LIMIT: Duration = Duration::from_secs(10);

/// Profiler entry points the watchdog names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Call {
    /// `init`.
    Init = 1,
    /// `startEvent`.
    Start = 2,
    /// `stopEvent`.
    Stop = 3,
    /// `recordEventState`.
    Record = 4,
    /// `finalize`.
    Finalize = 5,
}

const CALL_NAMES: [&str; 6] = ["", "init", "startEvent", "stopEvent", "recordEventState", "finalize"];
const SLOTS: usize = 64;
/// Per thread: `start_ms << 16 | call << 8 | type index` while a call runs, 0 otherwise.
static SLOT: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);
static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

thread_local! {
    static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn now_ms() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

fn my_slot() -> usize {
    MY_SLOT.with(|s| {
        if s.get() == usize::MAX {
            s.set(NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % SLOTS);
        }
        s.get()
    })
}

/// A running profiler call; the watchdog stops watching when it drops.
#[derive(Debug)]
pub struct Guard(usize);

impl Drop for Guard {
    fn drop(&mut self) {
        SLOT[self.0].store(0, Ordering::Release);
    }
}

/// Marks the profiler call `call` on an event of type `ty` (0: none) as running
/// on this thread.
pub fn enter(call: Call, ty: u64) -> Guard {
    let i = my_slot();
    let t = if ty == 0 { 0xff } else { type_index(ty) as u64 };
    SLOT[i].store(now_ms() << 16 | (call as u64) << 8 | t, Ordering::Release);
    Guard(i)
}

fn describe(v: u64) -> (&'static str, &'static str) {
    let call = CALL_NAMES.get(((v >> 8) & 0xff) as usize).copied().unwrap_or("");
    let ty = TYPE_NAMES.get((v & 0xff) as usize).copied().unwrap_or("");
    (call, ty)
}

extern "C" fn on_fatal_signal(sig: libc::c_int) {
    let i = MY_SLOT.with(|s| s.get());
    let v = if i < SLOTS { SLOT[i].load(Ordering::Acquire) } else { 0 };
    let (call, ty) = describe(v);
    let parts: [&[u8]; 7] = [
        b"\n",
        CRASH_MARKER.as_bytes(),
        b"signal during ",
        if call.is_empty() {
            b"no profiler call"
        } else {
            call.as_bytes()
        },
        if ty.is_empty() { b"" } else { b" of a " },
        ty.as_bytes(),
        if ty.is_empty() { b"\n" } else { b" event\n" },
    ];
    for p in parts {
        // SAFETY: write(2) on stderr from a valid buffer (async-signal-safe).
        unsafe { libc::write(2, p.as_ptr().cast(), p.len()) };
    }
    // SAFETY: restoring the default action and re-raising; async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

fn start_watch() {
    EPOCH.get_or_init(Instant::now);
    // The handler only calls async-signal-safe functions and reads a
    // const-initialised thread-local.
    on_fatal_signals(on_fatal_signal);
    let _ = std::thread::Builder::new()
        .name("profiler-watchdog".into())
        .spawn(|| {
            loop {
                std::thread::sleep(Duration::from_millis(20));
                let now = now_ms();
                for s in &SLOT {
                    let v = s.load(Ordering::Acquire);
                    if v == 0 || now.saturating_sub(v >> 16) <= LIMIT.as_millis() as u64 {
                        continue;
                    }
                    let (call, ty) = describe(v);
                    let what = if ty.is_empty() {
                        call.to_owned()
                    } else {
                        format!("{call} of a {ty} event")
                    };
                    emit_result(&CheckOutcome::fail(
                        format!(
                            "{call} returns within {} s (profiler calls run on NCCL's critical path: one that never returns hangs the collective)",
                            LIMIT.as_secs()
                        ),
                        format!("{what} did not return within {} s (the worker was stopped)", LIMIT.as_secs()),
                    ));
                    // SAFETY: ending the worker while a thread is stuck in the plugin.
                    unsafe { libc::_exit(0) };
                }
            }
        });
}

/// Runs profiler check `id` on version `version` of `plugin` (never panics).
pub fn run_check(id: &str, plugin: &str, version: u32) -> CheckOutcome {
    let check = match SECTION.find(id) {
        Ok(c) => c,
        Err(out) => return *out,
    };
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let lib = match SECTION.open(plugin) {
            Ok(l) => std::sync::Arc::new(l),
            Err(e) => return CheckOutcome::fail("the plugin library opens", e),
        };
        let Some((sym_name, _)) = PluginType::Profiler.symbols().iter().find(|(_, v)| *v == version) else {
            return CheckOutcome::fail("a profiler version 1 ..= 6", format!("v{version}"));
        };
        let Some(sym) = lib.symbol(sym_name) else {
            return CheckOutcome::fail(
                format!("{} is exported", sym_name.to_string_lossy()),
                format!("{} does not export it", lib.opened_as()),
            );
        };
        // SAFETY: `sym` is `ncclProfiler_v<version>`, whose 48-byte layout is `RawVtable`'s.
        let real = unsafe { std::ptr::read_unaligned(sym as *const RawVtable) };
        let mut cx = ProfCx {
            lib,
            real,
            shim: shim::install(real, version),
            version,
            notes: Vec::new(),
        };
        let mut out = judge_body(check.body, &mut cx, || match shim::take_findings().as_slice() {
            [] => CheckOutcome::pass(),
            [first, rest @ ..] => CheckOutcome::fail(
                "every profiler call returns ncclSuccess (NCCL ignores the result: an error means the plugin lost track of an event)",
                if rest.is_empty() {
                    first.to_string()
                } else {
                    format!("{first} (and {} more failed call(s))", rest.len())
                },
            ),
        });
        let [i, s, t, r, f] = shim::counts();
        cx.notes.push(format!(
            "calls made: init {i}, startEvent {s}, stopEvent {t}, recordEventState {r}, finalize {f}"
        ));
        out.notes.append(&mut cx.notes);
        out
    }));
    r.unwrap_or_else(|_| CheckOutcome::fail("the check runs to completion", "the conformance suite itself panicked"))
}

/// Body of `--profiler --worker ID`.
pub fn worker_main(id: &str, plugin: &str, version: u32) -> i32 {
    die_with_parent();
    start_watch();
    let out = run_check(id, plugin, version);
    emit_result(&out);
    0
}
