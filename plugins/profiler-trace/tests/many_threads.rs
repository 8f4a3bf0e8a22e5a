//! Many threads recording through the exported `ncclProfiler_v6` vtable at
//! once, then as many again (new threads may reuse the first ones' control
//! blocks, so their entries in the thread-pointer table and their logs):
//! every thread's events come back, in the records and in the Chrome trace
//! `finalize` writes, with their own ids, their parents (across threads),
//! their states with transfer sizes, and their stops. A separate process
//! (an integration test): the records of the whole process are read.

use std::ffi::c_void;
use std::ptr::null_mut;

use ferroccl_plugin_api::abi;
use nccl_profiler_trace::collect;

const THREADS: i32 = 24;
const STEPS: i32 = 40;

/// An event handle passed between threads (the trace plugin's handles are
/// plain ids).
#[derive(Clone, Copy)]
struct H(*mut c_void);
// SAFETY: the handle is an integer id the plugin made, valid on any thread.
unsafe impl Send for H {}
// SAFETY: as above; never dereferenced here.
unsafe impl Sync for H {}

impl H {
    /// The handle (a method, so that closures capture the whole `H`).
    fn p(self) -> *mut c_void {
        self.0
    }
}

#[test]
fn many_threads_keep_their_own_events() {
    let t = &nccl_profiler_trace::ncclProfiler_v6.0;
    let dir = std::env::temp_dir().join(format!("trace-many-threads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("trace.json");
    let ok = abi::ncclResult_t::ncclSuccess;
    // SAFETY: (whole test) the vtable is called as its ABI says, with
    // descriptors and arguments that live across each call; the environment
    // is set before any other thread of this test binary starts.
    unsafe {
        std::env::set_var("NCCL_PROFILER_TRACE_FILE", &file);
        std::env::set_var("NCCL_PROFILE_EVENT_MASK", "32767");
        let (init, start, record, stop) = (
            t.init.unwrap(),
            t.startEvent.unwrap(),
            t.recordEventState.unwrap(),
            t.stopEvent.unwrap(),
        );
        let (mut ctx, mut mask) = (null_mut(), 0);
        assert_eq!(init(&mut ctx, 1, &mut mask, c"many".as_ptr(), 1, 1, 900, None), ok);
        assert_eq!(mask, 32767);
        let ctx = H(ctx);
        let mut d = abi::ncclProfilerEventDescr_v6_t::zeroed();
        d.r#type = abi::ncclProfileColl;
        d.rank = 900;
        d.u.coll.func = c"AllGather".as_ptr();
        d.u.coll.datatype = c"ncclInt8".as_ptr();
        let mut coll = null_mut();
        assert_eq!(start(ctx.p(), &mut coll, &mut d), ok);
        let coll = H(coll);
        for batch in [1000, 2000] {
            let go = std::sync::Barrier::new(THREADS as usize);
            std::thread::scope(|s| {
                for k in 0..THREADS {
                    let go = &go;
                    s.spawn(move || {
                        go.wait();
                        let mut d = abi::ncclProfilerEventDescr_v6_t::zeroed();
                        d.r#type = abi::ncclProfileProxyOp;
                        d.parentObj = coll.p();
                        d.rank = batch + k;
                        d.u.proxyOp.channelId = k as u8;
                        d.u.proxyOp.nSteps = STEPS;
                        let mut op = null_mut();
                        assert_eq!(start(ctx.p(), &mut op, &mut d), ok);
                        assert!(!op.is_null());
                        for step in 0..STEPS {
                            let mut d = abi::ncclProfilerEventDescr_v6_t::zeroed();
                            d.r#type = abi::ncclProfileProxyStep;
                            d.parentObj = op;
                            d.rank = batch + k;
                            d.u.proxyStep.step = step;
                            let mut h = null_mut();
                            assert_eq!(start(ctx.p(), &mut h, &mut d), ok);
                            let mut a = abi::ncclProfilerEventStateArgs_v6_t::zeroed();
                            a.proxyStep.transSize = (step as usize + 1) * 8;
                            assert_eq!(record(h, abi::ncclProfilerProxyStepRecvWait, &mut a), ok);
                            assert_eq!(record(h, abi::ncclProfilerProxyStepRecvGPUWait, null_mut()), ok);
                            assert_eq!(stop(h), ok);
                        }
                        assert_eq!(stop(op), ok);
                    });
                }
            });
        }
        assert_eq!(stop(coll.p()), ok);

        let recs = collect();
        let c = recs
            .iter()
            .position(|r| r.rank == 900 && r.name == "AllGather")
            .expect("the collective");
        for batch in [1000, 2000] {
            for k in 0..THREADS {
                let mine: Vec<usize> = (0..recs.len()).filter(|&i| recs[i].rank == batch + k).collect();
                assert_eq!(mine.len(), 1 + STEPS as usize, "rank {}", batch + k);
                let op = mine[0];
                assert_eq!(recs[op].name, "ProxyOp recv");
                assert_eq!(recs[op].parent, Some(c));
                assert_eq!(recs[op].args["nSteps"], STEPS);
                assert_eq!(recs[op].args["channel"], k);
                for (n, &i) in mine[1..].iter().enumerate() {
                    let r = &recs[i];
                    assert_eq!(r.name, format!("step {n}"));
                    assert_eq!(r.parent, Some(op));
                    let states: Vec<(i32, Option<u64>)> = r.states.iter().map(|s| (s.0, s.2)).collect();
                    let (recv, gpu) = (
                        abi::ncclProfilerProxyStepRecvWait,
                        abi::ncclProfilerProxyStepRecvGPUWait,
                    );
                    assert_eq!(states, [(recv, Some((n as u64 + 1) * 8)), (gpu, None)]);
                    assert!(r.stop.is_some_and(|t| t >= r.start), "{r:?}");
                }
            }
        }

        // finalize writes every event into the Chrome trace.
        assert_eq!(t.finalize.unwrap()(ctx.p()), ok);
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        let count = |cat: &str| ev.iter().filter(|e| e["cat"] == cat).count();
        let n = 2 * THREADS as usize;
        assert_eq!(count("proxyOp"), n);
        assert_eq!(count("proxyStep"), n * STEPS as usize);
        assert_eq!(count("state"), 2 * n * STEPS as usize);
        assert!(
            ev.iter().all(|e| e["args"].get("notStopped").is_none()),
            "every event stopped"
        );
        let with_size = ev
            .iter()
            .filter(|e| e["cat"] == "proxyStep" && e["args"]["transSize"].as_u64().is_some())
            .count();
        assert_eq!(with_size, n * STEPS as usize);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
