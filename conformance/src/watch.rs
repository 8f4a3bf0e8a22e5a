//! The in-worker watchdog: every plugin call is announced here, and a thread
//! checks that it returns within its limit. A call that does not return gets the
//! check failed with a message naming the call ("connect did not return within
//! 5 s: …"), printed as the worker's result line, and the worker exits; the
//! parent's deadline is only the backstop for a worker too wedged to do even that.
//! Fatal signals (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL) print the call that
//! was running to stderr before the default action kills the worker.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::outcome::CheckOutcome;

/// A plugin entry point, as the watchdog names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Call {
    /// Loading the library and `init` (or `init(ctx)` for v11+).
    Init = 1,
    /// `finalize`.
    Finalize,
    /// `devices`.
    Devices,
    /// `getProperties`.
    GetProperties,
    /// `listen`.
    Listen,
    /// `connect`.
    Connect,
    /// `accept`.
    Accept,
    /// `regMr`.
    RegMr,
    /// `deregMr`.
    DeregMr,
    /// `isend`.
    Isend,
    /// `irecv`.
    Irecv,
    /// `iflush`.
    Iflush,
    /// `test`.
    Test,
    /// `closeSend`.
    CloseSend,
    /// `closeRecv`.
    CloseRecv,
    /// `closeListen`.
    CloseListen,
    /// `makeVDevice` (v9+).
    MakeVDevice,
}

const NAMES: [&str; 18] = [
    "",
    "init",
    "finalize",
    "devices",
    "getProperties",
    "listen",
    "connect",
    "accept",
    "regMr",
    "deregMr",
    "isend",
    "irecv",
    "iflush",
    "test",
    "closeSend",
    "closeRecv",
    "closeListen",
    "makeVDevice",
];

/// Every [`Call`], by discriminant - 1.
const CALLS: [Call; 17] = [
    Call::Init,
    Call::Finalize,
    Call::Devices,
    Call::GetProperties,
    Call::Listen,
    Call::Connect,
    Call::Accept,
    Call::RegMr,
    Call::DeregMr,
    Call::Isend,
    Call::Irecv,
    Call::Iflush,
    Call::Test,
    Call::CloseSend,
    Call::CloseRecv,
    Call::CloseListen,
    Call::MakeVDevice,
];

impl Call {
    /// The vtable slot name.
    pub fn name(self) -> &'static str {
        NAMES[self as usize]
    }

    /// How long one call may take before the watchdog fails the check, and the
    /// rule it breaks.
    pub fn limit(self) -> (Duration, &'static str) {
        match self {
            Call::Connect | Call::Accept | Call::Listen => (
                Duration::from_secs(5),
                "must never block: return with a NULL comm and be called again (§1.5)",
            ),
            Call::Isend | Call::Irecv | Call::Test | Call::Iflush => (
                Duration::from_secs(10),
                "must not block: progress happens across repeated calls, and a dead peer must give an error (§1.5)",
            ),
            _ => (
                Duration::from_secs(20),
                "must return (a plugin call that never returns hangs NCCL)",
            ),
        }
    }
}

static EPOCH: OnceLock<Instant> = OnceLock::new();
static CHECK_ID: OnceLock<String> = OnceLock::new();

/// Threads that can drive the plugin at once (the multi-thread checks use a few;
/// a thread beyond this many shares the last slot).
const SLOTS: usize = 16;

/// One watched thread: the call it is in (0 = none) and when that call started.
struct Slot {
    call: AtomicUsize,
    started_ns: AtomicU64,
}

static WATCHED: [Slot; SLOTS] = [const {
    Slot {
        call: AtomicUsize::new(0),
        started_ns: AtomicU64::new(0),
    }
}; SLOTS];
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MY_SLOT: usize = NEXT_SLOT.fetch_add(1, Ordering::Relaxed).min(SLOTS - 1);
}

fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

fn my_slot() -> &'static Slot {
    &WATCHED[MY_SLOT.with(|s| *s)]
}

/// Marks `call` as running on this thread until the returned guard is dropped.
/// Each thread that calls into the plugin is watched on its own.
pub fn enter(call: Call) -> CallGuard {
    let slot = my_slot();
    slot.started_ns.store(now_ns(), Ordering::Release);
    slot.call.store(call as usize, Ordering::Release);
    CallGuard {
        start: Instant::now(),
        slot,
    }
}

/// A running plugin call (see [`enter`]).
#[derive(Debug)]
pub struct CallGuard {
    start: Instant,
    slot: &'static Slot,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("call", &self.call.load(Ordering::Relaxed))
            .finish()
    }
}

impl CallGuard {
    /// Time since the call started.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.slot.call.store(0, Ordering::Release);
    }
}

/// Name of the plugin call running now on the calling thread, if any.
pub fn current_call() -> Option<&'static str> {
    match my_slot().call.load(Ordering::Acquire) {
        0 => None,
        i => NAMES.get(i).copied(),
    }
}

/// Marker that starts the worker's result line on stdout (plugins may print too).
pub const RESULT_MARKER: &str = "@@ferroccl-conformance-result ";

/// Prints `outcome` as the worker's result line with raw `write(2)`s (usable from
/// the watchdog thread while the main thread is stuck inside the plugin).
pub fn emit_result(outcome: &CheckOutcome) {
    let line = format!(
        "\n{RESULT_MARKER}{}\n",
        serde_json::to_string(outcome).unwrap_or_default()
    );
    write_all_fd(1, line.as_bytes());
}

fn write_all_fd(fd: i32, mut b: &[u8]) {
    while !b.is_empty() {
        // SAFETY: writing from a valid buffer of `b.len()` bytes to an open fd.
        let n = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
        if n <= 0 {
            return;
        }
        b = &b[n as usize..];
    }
}

/// Starts the watchdog thread for the check `check_id` and installs the fatal
/// signal reporter. Call once per worker process.
pub fn start(check_id: &str) {
    let _ = CHECK_ID.set(check_id.to_owned());
    EPOCH.get_or_init(Instant::now);
    install_crash_reporter();
    std::thread::Builder::new()
        .name("conformance-watchdog".into())
        .spawn(|| {
            loop {
                std::thread::sleep(Duration::from_millis(20));
                for slot in &WATCHED {
                    let cur = slot.call.load(Ordering::Acquire);
                    if cur == 0 || cur >= NAMES.len() {
                        continue;
                    }
                    let started = slot.started_ns.load(Ordering::Acquire);
                    let elapsed = Duration::from_nanos(now_ns().saturating_sub(started));
                    let call = CALLS[cur - 1];
                    let (limit, rule) = call.limit();
                    if elapsed > limit && slot.call.load(Ordering::Acquire) == cur {
                        let name = call.name();
                        let out = CheckOutcome::fail(
                            format!("{name} returns within {} s: {name} {rule}", limit.as_secs()),
                            format!(
                                "{name} did not return within {} s (the worker was stopped)",
                                limit.as_secs()
                            ),
                        );
                        emit_result(&out);
                        // SAFETY: terminating the worker without running destructors is
                        // intended: a thread is stuck inside the plugin.
                        unsafe { libc::_exit(0) };
                    }
                }
            }
        })
        .expect("spawn the watchdog thread");
}

extern "C" fn on_fatal_signal(sig: libc::c_int) {
    let name = current_call().unwrap_or("no plugin call");
    write_all_fd(2, b"\n@@ferroccl-conformance-crash signal during ");
    write_all_fd(2, name.as_bytes());
    write_all_fd(2, b"\n");
    // SAFETY: restoring the default action and re-raising is async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

fn install_crash_reporter() {
    for sig in [libc::SIGSEGV, libc::SIGBUS, libc::SIGABRT, libc::SIGFPE, libc::SIGILL] {
        // SAFETY: installing a handler that only calls async-signal-safe functions.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fatal_signal as *const () as usize;
            sa.sa_flags = libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Marker the crash reporter writes to stderr.
pub const CRASH_MARKER: &str = "@@ferroccl-conformance-crash ";
