//! Page-locking host memory for the GPUs (`cuMemHostRegister`), once per
//! region, for the whole process.
//!
//! The executor of `ferroccl` runs a step that touches device memory as kernels
//! on that GPU, reading and writing the connectors' FIFO slots directly; a
//! kernel may dereference host memory only once it is page-locked and mapped
//! (`cuMemHostRegister(PORTABLE | DEVICEMAP)`). NCCL does the same for its
//! host FIFOs (`src/transport/shm.cc` registers the shared segment with
//! `cudaHostRegister`; `src/transport/net.cc` allocates with `cudaHostAlloc`
//! when `useGdr = 0`).
//!
//! The regions are *announced* by their owners when created ([`announce`]:
//! no CUDA call), registered later by a thread that may make CUDA calls that
//! synchronize (the enqueuing thread: [`register_announced`]; `cuMemHostRegister`
//! may wait for other work of the context, so never the proxy in the middle of
//! an operation a caller's stream waits on), looked up on every step
//! ([`registered`]), and unregistered by their owner before the memory is freed
//! or unmapped ([`forget`]). A region whose registration failed stays failed:
//! its steps keep staging through host memory.
//!
//! Tests without a GPU install a [`HostRegHook`] ([`set_hook`]) that stands in
//! for the driver and sees every registration.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

/// What stands in for the driver's `cuMemHostRegister`/`cuMemHostUnregister`
/// (tests on machines without a GPU).
pub trait HostRegHook: Send + Sync {
    /// Page-locks `[base, base + len)` for GPU `ordinal`; `Err`: why not.
    fn register(&self, base: usize, len: usize, ordinal: usize) -> Result<(), String>;
    /// Undoes a successful [`HostRegHook::register`] of the region at `base`.
    fn unregister(&self, base: usize, len: usize);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Announced, not yet tried.
    Announced,
    /// Being registered (by [`register_announced`], outside the table's lock).
    InProgress,
    /// Registered while GPU `.0`'s context was current.
    Registered(usize),
    /// A registration was tried and failed.
    Failed,
}

#[derive(Debug, Clone, Copy)]
struct Region {
    base: usize,
    len: usize,
    state: State,
}

/// Whether any region is known (the owners' drops look no further otherwise).
static ANY: AtomicBool = AtomicBool::new(false);
/// Regions announced and not yet tried.
static PENDING: AtomicUsize = AtomicUsize::new(0);
static REGIONS: RwLock<Vec<Region>> = RwLock::new(Vec::new());
/// Serializes the driver calls: held by [`register_announced`] while it
/// registers (without holding [`REGIONS`], so the proxy's lookups never wait
/// for a driver call), and by [`forget`] before it removes a region (so a
/// region is never freed while it is being registered).
static DRIVER_CALLS: Mutex<()> = Mutex::new(());
static HOOK: Mutex<Option<&'static dyn HostRegHook>> = Mutex::new(None);

/// Installs (or with `None` removes) the stand-in for the driver. Regions
/// registered through a hook are unregistered through it.
pub fn set_hook(hook: Option<&'static dyn HostRegHook>) {
    *HOOK.lock().unwrap_or_else(|e| e.into_inner()) = hook;
}

fn hook() -> Option<&'static dyn HostRegHook> {
    *HOOK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Announces `[base, base + len)`, host memory its owner keeps mapped until it
/// calls [`forget`], as memory a GPU kernel may be given once registered
/// ([`register_announced`]). `base` and `len` should be page-aligned (the driver
/// page-locks whole pages: a page shared with other memory would be locked with
/// it, and a second region in the same page could not be registered).
pub fn announce(base: usize, len: usize) {
    if len == 0 {
        return;
    }
    let mut g = REGIONS.write().unwrap_or_else(|e| e.into_inner());
    if g.iter().any(|r| r.base == base) {
        return;
    }
    g.push(Region {
        base,
        len,
        state: State::Announced,
    });
    ANY.store(true, Ordering::Release);
    PENDING.fetch_add(1, Ordering::AcqRel);
}

/// Forgets the region at `base` (call before freeing or unmapping it): it is
/// unregistered first when it was registered. Costs one atomic load when no
/// region is known.
pub fn forget(base: usize) {
    if !ANY.load(Ordering::Acquire) {
        return;
    }
    if !REGIONS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|r| r.base == base)
    {
        return;
    }
    let _calls = DRIVER_CALLS.lock().unwrap_or_else(|e| e.into_inner());
    let mut g = REGIONS.write().unwrap_or_else(|e| e.into_inner());
    let Some(i) = g.iter().position(|r| r.base == base) else {
        return;
    };
    let r = g.swap_remove(i);
    if r.state == State::Announced {
        PENDING.fetch_sub(1, Ordering::AcqRel);
    }
    if g.is_empty() {
        ANY.store(false, Ordering::Release);
    }
    drop(g);
    if let State::Registered(ordinal) = r.state {
        unregister(r.base, r.len, ordinal);
    }
}

/// A region whose registration failed: `(base, len, why)`.
pub type RegFailure = (usize, usize, String);

/// Registers every announced region not tried yet for GPU `ordinal` (page-locked
/// for every context: `PORTABLE`; mapped: `DEVICEMAP`). Call from a thread that
/// may wait for the context (it may synchronize): the enqueuing thread. Costs
/// one atomic load when nothing is pending. Returns the regions that could not
/// be registered (they stay on the staging path).
pub fn register_announced(ordinal: usize) -> Vec<RegFailure> {
    let mut failed = Vec::new();
    if PENDING.load(Ordering::Acquire) == 0 {
        return failed;
    }
    let _calls = DRIVER_CALLS.lock().unwrap_or_else(|e| e.into_inner());
    let todo: Vec<(usize, usize)> = {
        let mut g = REGIONS.write().unwrap_or_else(|e| e.into_inner());
        g.iter_mut()
            .filter(|r| r.state == State::Announced)
            .map(|r| {
                PENDING.fetch_sub(1, Ordering::AcqRel);
                r.state = State::InProgress;
                (r.base, r.len)
            })
            .collect()
    };
    for (base, len) in todo {
        // The region stays mapped meanwhile: `forget` waits for DRIVER_CALLS.
        let state = match register(base, len, ordinal) {
            Ok(()) => State::Registered(ordinal),
            Err(why) => {
                failed.push((base, len, why));
                State::Failed
            }
        };
        let mut g = REGIONS.write().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = g.iter_mut().find(|r| r.base == base) {
            r.state = state;
        }
    }
    failed
}

/// Whether `[ptr, ptr + len)` lies inside a registered region (a kernel of any
/// GPU may then access it at the same address: unified addressing, checked at
/// registration).
pub fn registered(ptr: usize, len: usize) -> bool {
    if !ANY.load(Ordering::Acquire) {
        return false;
    }
    let g = REGIONS.read().unwrap_or_else(|e| e.into_inner());
    g.iter()
        .any(|r| matches!(r.state, State::Registered(_)) && r.base <= ptr && ptr.saturating_add(len) <= r.base + r.len)
}

fn register(base: usize, len: usize, ordinal: usize) -> Result<(), String> {
    if let Some(h) = hook() {
        return h.register(base, len, ordinal);
    }
    driver_register(base, len, ordinal)
}

fn unregister(base: usize, len: usize, ordinal: usize) {
    if let Some(h) = hook() {
        return h.unregister(base, len);
    }
    driver_unregister(base, ordinal);
}

#[cfg(feature = "cuda")]
fn driver_register(base: usize, len: usize, ordinal: usize) -> Result<(), String> {
    use cudarc::driver::sys::{self, CUdevice_attribute};

    use crate::cuda::{ctx_guard, device_attribute};
    // A kernel is handed the host address itself, so the device must be able
    // to use it (true with unified addressing on 64-bit Linux; otherwise the
    // device address would differ: `cuMemHostGetDevicePointer`, not done here).
    let same = device_attribute(
        ordinal,
        CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
    )
    .map_err(|e| e.to_string())?;
    if same != 1 {
        return Err(format!(
            "GPU {ordinal} cannot use host pointers of registered memory (CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = {same})"
        ));
    }
    let _cx = ctx_guard(ordinal).map_err(|e| e.to_string())?;
    // SAFETY: the region is host memory its owner keeps mapped until `forget`
    // (the contract of `announce`); the driver only page-locks and maps it.
    let r = unsafe {
        sys::cuMemHostRegister_v2(
            base as *mut std::ffi::c_void,
            len,
            sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP,
        )
    };
    r.result().map_err(|e| format!("cuMemHostRegister: {e:?}"))
}

#[cfg(feature = "cuda")]
fn driver_unregister(base: usize, ordinal: usize) {
    use cudarc::driver::sys;
    if let Ok(_cx) = crate::cuda::ctx_guard(ordinal) {
        // SAFETY: `base` was registered by `driver_register` and is still mapped
        // (its owner calls `forget` before unmapping it).
        let _ = unsafe { sys::cuMemHostUnregister(base as *mut std::ffi::c_void) };
    }
}

#[cfg(not(feature = "cuda"))]
fn driver_register(_base: usize, _len: usize, ordinal: usize) -> Result<(), String> {
    Err(format!(
        "registering host memory for GPU {ordinal} needs the `cuda` feature of ferroccl-kernels"
    ))
}

#[cfg(not(feature = "cuda"))]
fn driver_unregister(_base: usize, _ordinal: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log(Mutex<Vec<(bool, usize)>>);

    impl HostRegHook for Log {
        fn register(&self, base: usize, _len: usize, _ordinal: usize) -> Result<(), String> {
            if !base.is_multiple_of(2) {
                return Err("odd".into());
            }
            self.0.lock().unwrap().push((true, base));
            Ok(())
        }
        fn unregister(&self, base: usize, _len: usize) {
            self.0.lock().unwrap().push((false, base));
        }
    }

    /// Registration once per region, failures remembered, unregistration on
    /// forget only for what was registered.
    #[test]
    fn registers_once_and_unregisters_on_forget() {
        static LOG: std::sync::OnceLock<Log> = std::sync::OnceLock::new();
        let log = LOG.get_or_init(Log::default);
        set_hook(Some(log));
        // Addresses no real region uses (this test binary announces nothing else).
        let (a, b) = (0x7000_0000_0000usize, 0x7000_0000_1001usize);
        announce(a, 4096);
        announce(a, 4096);
        announce(b, 4096);
        assert!(!registered(a, 16));
        let failed = register_announced(0);
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].0, b);
        assert!(register_announced(0).is_empty(), "nothing pending: nothing tried again");
        assert!(registered(a + 100, 16) && !registered(a + 4090, 16) && !registered(b, 1));
        forget(a);
        forget(b);
        assert!(!registered(a, 16));
        assert_eq!(*log.0.lock().unwrap(), vec![(true, a), (false, a)]);
        set_hook(None);
    }
}
