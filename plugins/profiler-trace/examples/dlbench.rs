//! The trace profiler's CPU cost per 2-rank 8-byte AllReduce and rank, as
//! ferroccl calls it over the socket plugin with every event on, through a
//! `dlopen`ed `libnccl-profiler-trace.so` (so thread-local storage costs what
//! it costs in NCCL or ferroccl): the same ~30 calls per operation (GroupApi,
//! CollApi, Group, Coll, two ProxyOps with their InProgress state, two
//! ProxySteps with three states each, two NetPlugin events, their stops),
//! from one thread. Prints the thread's CPU time per operation
//! (`CLOCK_THREAD_CPUTIME_ID`: other load on a shared machine does not count) for each
//! library given, interleaved over rounds.
//!
//! With `--evict KIB` first, the thread writes a KIB-sized buffer (one store
//! per cache line) three times per operation: before its API calls, before
//! its proxy events and between its two steps, as the network stack runs
//! between a rank's profiler calls in a real run. The plugin's code, its
//! per-thread state and its log lines are then cold at each of those calls,
//! as they are in whole runs (BENCHMARKS.md §8.10: there a call costs 1.5 to
//! 2 times what it costs back to back). A line `(evict only)` gives the
//! eviction's own time, to subtract.
//!
//! ```sh
//! cargo run --release -p ferroccl-profiler-trace --example dlbench -- N [--evict KIB] LIB.so [LIB.so ...]
//! ```

use std::ffi::{CString, c_void};
use std::ptr::null_mut;

use ferroccl_plugin_api::abi;

fn cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-parameter; the clock always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One library's vtable and context.
struct Lib {
    t: &'static abi::ncclProfiler_v6_t,
    ctx: *mut c_void,
}

fn open(path: &str) -> Lib {
    let c = CString::new(path).expect("path");
    // SAFETY: dlopen/dlsym with valid C strings; the library stays loaded.
    unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null(), "dlopen {path} failed");
        let sym = libc::dlsym(h, c"ncclProfiler_v6".as_ptr());
        assert!(!sym.is_null(), "no ncclProfiler_v6 in {path}");
        let t = &*(sym as *const abi::ncclProfiler_v6_t);
        let mut ctx = null_mut();
        let mut mask = 0;
        (t.init.expect("init"))(&mut ctx, 1, &mut mask, c"bench".as_ptr(), 1, 2, 0, None);
        Lib { t, ctx }
    }
}

/// Writes one byte per cache line of `buf` (nothing when it is empty).
fn evict(buf: &mut [u8], seq: u64) {
    for i in (0..buf.len()).step_by(64) {
        // SAFETY: in bounds; volatile so that the stores are not elided.
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i), seq as u8) };
    }
}

/// One operation's calls, the cache evicted at three points (`buf`, see the
/// module's docs); returns nothing (the events go to the library's log).
/// With no library (`l` is `None`), the evictions alone.
///
/// # Safety
/// `l` is an initialised profiler.
unsafe fn one_op(l: Option<&Lib>, seq: u64, buf: &mut [u8]) {
    evict(buf, seq);
    let Some(l) = l else {
        evict(buf, seq);
        evict(buf, seq);
        return;
    };
    let t = l.t;
    let (start, record, stop) = (
        t.startEvent.expect("startEvent"),
        t.recordEventState.expect("recordEventState"),
        t.stopEvent.expect("stopEvent"),
    );
    // SAFETY: descriptors live across each call, as the ABI requires.
    unsafe {
        let ev = |ty: u64, parent: *mut c_void, f: &dyn Fn(&mut abi::ncclProfilerEventDescr_v6_t)| {
            let mut d = abi::ncclProfilerEventDescr_v6_t::zeroed();
            d.r#type = ty;
            d.parentObj = parent;
            d.rank = 0;
            f(&mut d);
            let mut h = null_mut();
            start(l.ctx, &mut h, &mut d);
            h
        };
        let gapi = ev(abi::ncclProfileGroupApi, null_mut(), &|d| d.u.groupApi.groupDepth = 1);
        let capi = ev(abi::ncclProfileCollApi, gapi, &|d| {
            d.u.collApi.func = c"AllReduce".as_ptr();
            d.u.collApi.count = 2;
            d.u.collApi.datatype = c"ncclFloat32".as_ptr();
        });
        stop(capi);
        stop(gapi);
        evict(buf, seq);
        let group = ev(abi::ncclProfileGroup, null_mut(), &|_| {});
        let coll = ev(abi::ncclProfileColl, capi, &|d| {
            d.u.coll.seqNumber = seq;
            d.u.coll.func = c"AllReduce".as_ptr();
            d.u.coll.count = 2;
            d.u.coll.datatype = c"ncclFloat32".as_ptr();
            d.u.coll.algo = c"RING".as_ptr();
            d.u.coll.proto = c"SIMPLE".as_ptr();
            d.u.coll.nChannels = 1;
            d.u.coll.parentGroup = group;
        });
        let mut ops = [null_mut(); 2];
        for (i, op) in ops.iter_mut().enumerate() {
            *op = ev(abi::ncclProfileProxyOp, coll, &|d| {
                d.u.proxyOp.channelId = 0;
                d.u.proxyOp.peer = 1;
                d.u.proxyOp.nSteps = 1;
                d.u.proxyOp.chunkSize = 8;
                d.u.proxyOp.isSend = i as i32;
            });
            record(*op, abi::ncclProfilerProxyOpInProgress_v4, null_mut());
        }
        stop(coll);
        stop(group);
        let mut a = abi::ncclProfilerEventStateArgs_v6_t::zeroed();
        a.proxyStep.transSize = 8;
        for (i, &op) in ops.iter().enumerate() {
            if i == 1 {
                evict(buf, seq);
            }
            let step = ev(abi::ncclProfileProxyStep, op, &|d| d.u.proxyStep.step = seq as i32);
            let states = if i == 1 { [8, 20, 9] } else { [10, 11, 12] };
            record(step, states[0], &mut a);
            let net = ev(abi::ncclProfileNetPlugin, step, &|d| d.u.netPlugin.id = 0x10001);
            record(step, states[1], &mut a);
            stop(net);
            record(step, states[2], &mut a);
            stop(step);
        }
        for op in ops {
            stop(op);
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let kib: usize = if args.peek().is_some_and(|a| a == "--evict") {
        args.next();
        args.next().and_then(|a| a.parse().ok()).expect("--evict KIB")
    } else {
        0
    };
    let mut buf = vec![0u8; kib << 10];
    let file = std::env::temp_dir().join(format!("trace-dlbench-{}.json", std::process::id()));
    // SAFETY: single-threaded so far.
    unsafe { std::env::set_var("NCCL_PROFILER_TRACE_FILE", &file) };
    let mut libs: Vec<(String, Option<Lib>)> = args.map(|p| (p.clone(), Some(open(&p)))).collect();
    if kib > 0 {
        libs.insert(0, ("(evict only)".to_string(), None));
    }
    let mut per_round = vec![Vec::new(); libs.len()];
    for _round in 0..5 {
        for (i, (_, l)) in libs.iter().enumerate() {
            let c0 = cpu_ns();
            for s in 0..n {
                // SAFETY: `l` was initialised by `open`.
                unsafe { one_op(l.as_ref(), s, &mut buf) };
            }
            per_round[i].push((cpu_ns() - c0) as f64 / n as f64);
        }
    }
    for ((p, _), r) in libs.iter().zip(&mut per_round) {
        r.sort_by(f64::total_cmp);
        println!(
            "{:7.0} ns CPU per op (best of 5 rounds of {n}; median {:.0})  {p}",
            r[0], r[2]
        );
    }
}
