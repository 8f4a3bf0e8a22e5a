//! The trace profiler's cost per call, through its exported `ncclProfiler_v6`
//! vtable as NCCL or ferroccl call it: one ProxyStep started under a ProxyOp,
//! one state recorded, stopped; N times. Prints the thread's CPU time per call
//! (`RUSAGE_THREAD`, so other load on a shared machine does not count) and the
//! wall time.
//!
//! ```sh
//! cargo run --release -p ferroccl-profiler-trace --example microbench [N]
//! ```

use std::ptr::null_mut;

use ferroccl_plugin_api::abi;

fn cpu_ns() -> u64 {
    // SAFETY: `ru` is a valid out-parameter.
    let ru = unsafe {
        let mut ru = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() {
    let n: i32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let t = &nccl_profiler_trace::ncclProfiler_v6.0;
    let file = std::env::temp_dir().join(format!("trace-microbench-{}.json", std::process::id()));
    // SAFETY: single-threaded so far; the vtable is called as its ABI says, with
    // descriptors that live across each call.
    unsafe {
        std::env::set_var("NCCL_PROFILER_TRACE_FILE", &file);
        let (init, start, record, stop) = (
            t.init.expect("init"),
            t.startEvent.expect("startEvent"),
            t.recordEventState.expect("recordEventState"),
            t.stopEvent.expect("stopEvent"),
        );
        let mut ctx = null_mut();
        let mut mask = 0;
        init(&mut ctx, 1, &mut mask, c"bench".as_ptr(), 1, 1, 0, None);
        let mut d = abi::ncclProfilerEventDescr_v6_t::zeroed();
        d.r#type = abi::ncclProfileProxyOp;
        let mut op = null_mut();
        start(ctx, &mut op, &mut d);
        let mut a = abi::ncclProfilerEventStateArgs_v6_t::zeroed();
        let (w0, c0) = (std::time::Instant::now(), cpu_ns());
        for i in 0..n {
            let mut d = abi::ncclProfilerEventDescr_v6_t::zeroed();
            d.r#type = abi::ncclProfileProxyStep;
            d.parentObj = op;
            d.u.proxyStep.step = i;
            let mut h = null_mut();
            start(ctx, &mut h, &mut d);
            a.proxyStep.transSize = 8;
            record(h, abi::ncclProfilerProxyStepSendWait, &mut a);
            stop(h);
        }
        let (wall, cpu) = (w0.elapsed().as_nanos() as f64, (cpu_ns() - c0) as f64);
        let calls = 3.0 * f64::from(n);
        println!(
            "{:.1} ns CPU, {:.1} ns wall per call ({n} x startEvent + recordEventState + stopEvent)",
            cpu / calls,
            wall / calls
        );
        stop(op);
        (t.finalize.expect("finalize"))(ctx);
    }
    let _ = std::fs::remove_file(&file);
}
