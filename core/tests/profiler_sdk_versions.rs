//! The SDK exports a profiler as every `ncclProfiler_v1` … `_v6` from one trait
//! impl, and the host's adapter drives each: the trace plugin
//! (`libnccl_profiler_trace.so`, built with the SDK) is opened for real, each
//! version's symbol is initialised through [`Profiler::from_raw`] as a
//! communicator of rank `v`, a small event tree is emitted through the adapter
//! (which converts to the version's layout, and the SDK back to v6), and the
//! trace written at `finalize` must show the same collective, with NCCL's
//! spellings, under every version — v1's enum codes included. The net-plugin
//! callback ([`net_callback`]) is exercised too: a NetPlugin event started
//! through a step's `phandle` lands under that step (v3+).
//!
//! One test function: it sets `NCCL_PROFILER_TRACE_FILE` (process environment).

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::Arc;

use ferroccl::plugin::library::PluginLibrary;
use ferroccl::profiler::{CommFacts, Event, EventHandle, PHandle, Profiler, StateArgs, net_callback, state};

fn trace_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("profile dir");
    let p = dir.join("libnccl_profiler_trace.so");
    assert!(
        p.exists(),
        "{} missing: cargo build -p ferroccl-profiler-trace",
        p.display()
    );
    p
}

#[test]
fn sdk_profiler_of_every_version_receives_the_same_tree() {
    let file = std::env::temp_dir().join(format!("ferroccl-sdkvers-{}.json", std::process::id()));
    // SAFETY: this test binary has one test function, so no other thread reads the environment.
    unsafe { std::env::set_var("NCCL_PROFILER_TRACE_FILE", &file) };
    let lib = Arc::new(PluginLibrary::open(&trace_lib().to_string_lossy()).expect("dlopen trace plugin"));
    for v in 1..=6u32 {
        let sym = lib
            .symbol(&std::ffi::CString::new(format!("ncclProfiler_v{v}")).unwrap())
            .unwrap_or_else(|| panic!("ncclProfiler_v{v} is exported"));
        let facts = CommFacts {
            comm_id: 0x1234,
            comm_name: None,
            nnodes: 1,
            nranks: 8,
            rank: v as i32,
        };
        // SAFETY: `sym` is `ncclProfiler_v<v>` in `lib`.
        let p = unsafe { Profiler::from_raw(lib.clone(), sym, v, "FerrocclTrace", &facts) }.expect("init");
        let group = p.start(EventHandle::NULL, &Event::Group);
        let coll = p.start(
            EventHandle::NULL,
            &Event::Coll {
                seq: 41,
                func: c"AllReduce",
                send: std::ptr::null(),
                recv: std::ptr::null_mut(),
                count: 1000,
                root: 0,
                dtype: c"ncclFloat32",
                nchannels: 2,
                nwarps: 0,
                algo: c"RING",
                proto: c"SIMPLE",
                parent_group: group,
            },
        );
        assert!(!coll.is_null(), "v{v}: Coll tracked");
        let op = p.start(
            coll,
            &Event::ProxyOp {
                channel: 1,
                peer: 3,
                nsteps: 1,
                chunk: 4096,
                is_send: true,
            },
        );
        let step = p.start(op, &Event::ProxyStep { step: 0 });
        p.record(step, state::SEND_GPU_WAIT, StateArgs::TransSize(4000));
        p.record(step, state::SEND_WAIT, StateArgs::TransSize(4000));
        // The net plugin's callback under this step (v3+ know NetPlugin events).
        let ph = PHandle {
            step,
            prof: &p as *const Profiler,
            mask: u64::MAX,
        };
        let mut eh: *mut c_void = std::ptr::null_mut();
        let php = (&ph as *const PHandle).cast_mut().cast();
        // SAFETY: `eh` is ours; `php` is a live PHandle whose profiler outlives the calls.
        unsafe {
            net_callback(&mut eh, 0, php, (2 << 16) | 1, std::ptr::null_mut());
            assert_eq!(eh.is_null(), v < 3, "v{v}: NetPlugin event started iff v3+");
            net_callback(&mut eh, 3, php, 0, std::ptr::null_mut());
        }
        p.stop(step);
        p.stop(coll);
        p.stop(op);
        p.stop(group);
        drop(p); // finalize: the trace file is rewritten with everything so far
        let v_json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("trace")).unwrap();
        let evs: Vec<&serde_json::Value> = v_json["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["pid"] == v && e["ph"] == "X")
            .collect();
        let c = evs
            .iter()
            .find(|e| e["cat"] == "coll")
            .unwrap_or_else(|| panic!("v{v}: coll in {evs:?}"));
        assert_eq!(c["name"], "AllReduce", "v{v}");
        assert_eq!(c["args"]["algorithm"], "RING", "v{v}");
        assert_eq!(c["args"]["protocol"], "SIMPLE", "v{v}");
        assert_eq!(c["args"]["datatype"], "ncclFloat32", "v{v}");
        assert_eq!(c["args"]["seqNumber"], 41, "v{v}");
        assert_eq!(c["args"]["count"], 1000, "v{v}");
        let o = evs.iter().find(|e| e["cat"] == "proxyOp").expect("proxyOp");
        assert_eq!(o["args"]["parent"], c["args"]["id"], "v{v}: ProxyOp under the Coll");
        assert_eq!(o["args"]["channel"], 1);
        assert_eq!(o["args"]["peer"], 3);
        let s = evs.iter().find(|e| e["cat"] == "proxyStep").expect("proxyStep");
        assert_eq!(s["args"]["parent"], o["args"]["id"], "v{v}: step under the op");
        assert_eq!(s["args"]["transSize"], 4000, "v{v}: step state args");
        let net = evs.iter().find(|e| e["cat"] == "net");
        if v >= 3 {
            let n = net.unwrap_or_else(|| panic!("v{v}: NetPlugin event"));
            assert_eq!(n["args"]["parent"], s["args"]["id"], "v{v}: NetPlugin under the step");
            assert_eq!(n["args"]["pluginId"], "0x20001");
        } else {
            assert!(net.is_none(), "v{v} knows no NetPlugin events");
        }
    }
    let _ = std::fs::remove_file(&file);
}
