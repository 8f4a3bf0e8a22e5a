//! Shared by the dlopen tests: find and load the built cdylib, form collComms of
//! ranks (threads of this process) through its `ncclCollNetPlugin_v12` table, and
//! wait on requests with a bound.
#![allow(dead_code)]

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use ferroccl_plugin_api::abi::{ncclCollNet_v8_t, ncclCollNet_v12_t, ncclResult_t};
use ferroccl_plugin_api::export::Exported;

/// The v12 table, shareable across rank threads.
pub type T12 = &'static Exported<ncclCollNet_v12_t>;
/// The v8 table.
pub type T8 = &'static Exported<ncclCollNet_v8_t>;

/// Bound of every wait in these tests (generous: a loaded 2-core CI machine).
pub const BOUND: Duration = Duration::from_secs(120);

/// The loaded library and its tables.
pub struct Lib {
    _lib: &'static libloading::Library,
    /// `ncclCollNetPlugin_v12`.
    pub v12: T12,
    /// `ncclCollNetPlugin_v8`.
    pub v8: T8,
}

/// target/<profile>/deps/<test> -> target/<profile>/libnccl_net_collnet_socket.so
pub fn so_path() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libnccl_net_collnet_socket.so");
    assert!(
        p.exists(),
        "{} missing: run `cargo build -p ferroccl-net-collnet-socket` first",
        p.display()
    );
    p
}

/// Loads the library (call after setting the environment it reads).
pub fn load() -> Lib {
    // SAFETY: loading our own plugin; its initialisers only set up statics.
    let lib = unsafe { libloading::Library::new(so_path()) }.expect("dlopen");
    // SAFETY: the symbols are `ncclCollNet_vN_t` statics living as long as the library,
    // which is leaked below.
    let (v12, v8) = unsafe {
        let v12: libloading::Symbol<*const Exported<ncclCollNet_v12_t>> = lib.get(b"ncclCollNetPlugin_v12").unwrap();
        let v8: libloading::Symbol<*const Exported<ncclCollNet_v8_t>> = lib.get(b"ncclCollNetPlugin_v8").unwrap();
        (&**v12, &**v8)
    };
    let lib = Box::leak(Box::new(lib));
    Lib { _lib: lib, v12, v8 }
}

/// Asserts `r` is `ncclSuccess`.
pub fn ok(r: ncclResult_t, what: &str) {
    assert!(r.is_success(), "{what} returned {}", r.name());
}

/// Calls a slot of a vtable.
macro_rules! call {
    ($t:expr, $f:ident ( $($a:expr),* )) => {
        // SAFETY: the slot comes from the plugin's vtable and the arguments follow its C signature.
        unsafe { ($t.$f.expect(concat!(stringify!($f), " slot")))($($a),*) }
    };
}

/// A raw pointer that may cross threads (the plugin's objects are used by one thread at a time).
#[derive(Clone, Copy, Debug)]
pub struct P(pub *mut c_void);
// SAFETY: only an address; NCCL's threading contract is kept by the tests.
unsafe impl Send for P {}
// SAFETY: as above.
unsafe impl Sync for P {}

impl P {
    /// The address (a method, so closures capture the whole `P`).
    pub fn get(self) -> *mut c_void {
        self.0
    }
}

/// One rank's context and collComm.
#[derive(Clone, Copy, Debug)]
pub struct Rank {
    /// v12 ctx.
    pub ctx: P,
    /// collComm.
    pub coll: P,
}

/// Forms a collComm of `n` ranks (threads), each with its own context, as NCCL does:
/// every rank listens, the handles are exchanged, every rank connects with all of
/// them, then closes its listen comm.
pub fn group(t: T12, n: usize) -> Vec<Rank> {
    group_with(t, n, None)
}

/// [`group`] with a logger passed to every `init`.
pub fn group_with(t: T12, n: usize, logger: ferroccl_plugin_api::abi::ncclDebugLogger_t) -> Vec<Rank> {
    let mut ctxs = Vec::new();
    let mut listens = Vec::new();
    let mut handles = vec![[0u8; 128]; n];
    for h in handles.iter_mut() {
        let mut ctx = null_mut();
        ok(call!(t, init(&mut ctx, 7, logger)), "init");
        let mut l = null_mut();
        ok(call!(t, listen(ctx, 0, h.as_mut_ptr().cast(), &mut l)), "listen");
        ctxs.push(P(ctx));
        listens.push(P(l));
    }
    let handles = std::sync::Arc::new(handles);
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let handles = handles.clone();
            let l = listens[r];
            std::thread::spawn(move || {
                let mut hs = (*handles).clone();
                let mut ptrs: Vec<*mut c_void> = hs.iter_mut().map(|h| h.as_mut_ptr().cast()).collect();
                let mut coll = null_mut();
                ok(
                    call!(
                        t,
                        connect(ptrs.as_mut_ptr(), n as c_int, r as c_int, l.get(), &mut coll)
                    ),
                    "connect",
                );
                assert!(!coll.is_null());
                ok(call!(t, closeListen(l.get())), "closeListen");
                P(coll)
            })
        })
        .collect();
    threads
        .into_iter()
        .zip(ctxs)
        .map(|(th, ctx)| Rank {
            ctx,
            coll: th.join().unwrap(),
        })
        .collect()
}

/// Closes every rank's collComm and context.
pub fn close(t: T12, ranks: Vec<Rank>) {
    for r in ranks {
        ok(call!(t, closeColl(r.coll.0)), "closeColl");
        ok(call!(t, finalize(r.ctx.0)), "finalize");
    }
}

/// Tests `req` until done (bounded); returns the size or the error code.
pub fn wait(
    test: unsafe extern "C" fn(*mut c_void, *mut c_int, *mut c_int) -> ncclResult_t,
    req: *mut c_void,
) -> Result<c_int, ncclResult_t> {
    if req.is_null() {
        return Ok(0);
    }
    let t0 = Instant::now();
    loop {
        let (mut done, mut size) = (0, -1);
        // SAFETY: `req` is a live request of the plugin.
        let r = unsafe { test(req, &mut done, &mut size) };
        if !r.is_success() {
            return Err(r);
        }
        if done == 1 {
            return Ok(size);
        }
        assert!(t0.elapsed() < BOUND, "request not done within {BOUND:?}");
    }
}

/// Runs `f(rank)` on one thread per rank and returns the results in rank order.
pub fn on_ranks<T: Send + 'static>(n: usize, f: impl Fn(usize) -> T + Send + Sync + 'static) -> Vec<T> {
    let f = std::sync::Arc::new(f);
    let th: Vec<_> = (0..n)
        .map(|r| {
            let f = f.clone();
            std::thread::spawn(move || f(r))
        })
        .collect();
    th.into_iter().map(|t| t.join().unwrap()).collect()
}
