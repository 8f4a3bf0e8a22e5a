//! A profiler plugin that expects `cudaEvent*` from the host (shaped like NCCL's
//! example profiler, linked without libcudart: testing/profiler-cuda-events)
//! cannot be opened as NCCL opens it in a process without a CUDA runtime; the
//! host's profiler loader provides the symbols (core/src/plugin/cuda_stub.rs) and
//! the plugin then loads and runs, its CUDA calls answering cudaErrorNoDevice.
//!
//! One test function: loading the stand-in changes the process's global symbol
//! scope, so the "before" checks must run first, in this process.

use std::ffi::{c_int, c_void};
use std::path::PathBuf;

use ferroccl::plugin::LoadOptions;
use ferroccl::plugin::cuda_stub::{CUDA_ERROR_NO_DEVICE, cuda_runtime_loaded, needs_stub};
use ferroccl::plugin::library::PluginLibrary;
use ferroccl::plugin::tuner_profiler::{AuxKind, AuxLoader};
use ferroccl_plugin_api::abi::{ncclProfileCeColl, ncclProfileColl, ncclProfiler_v6_t, ncclResult_t};

fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// `ncclProfilerEventDescr_v6_t`, 112 bytes; the test profiler reads only `type`.
#[repr(C, align(8))]
struct Descr {
    ty: u64,
    rest: [u8; 104],
}

#[test]
fn a_profiler_expecting_cuda_events_from_the_host_loads_and_runs() {
    let so = profile_dir().join("libnccl-profiler-cudaevents.so");
    assert!(so.exists(), "{} not built (testing/profiler-cuda-events)", so.display());
    let file = so.to_str().expect("utf-8").to_owned();

    // Before: no CUDA runtime, and NCCL's dlopen(RTLD_NOW | RTLD_LOCAL) fails.
    assert!(
        !cuda_runtime_loaded(),
        "this test needs a process without a CUDA runtime"
    );
    let err = PluginLibrary::open(&file).expect_err("the plugin needs cudaEvent* from the host");
    assert!(needs_stub(&err), "{err}");

    // Through the host's profiler loader (NCCL_PROFILER_PLUGIN=<path>): it loads.
    let opts = LoadOptions {
        profiler_plugin: Some(file.clone()),
        in_tree: false,
        ..LoadOptions::default()
    };
    let p = AuxLoader::new(AuxKind::Profiler)
        .load(&opts, None)
        .unwrap_or_else(|e| panic!("the profiler did not load: {e}"));
    assert_eq!((p.version, p.name.as_str()), (6, "CudaEvents"));
    assert!(cuda_runtime_loaded(), "the stand-in is in the global scope now");

    // And runs: init, a CPU-timed collective event, a CUDA-timed copy-engine event, finalize.
    p.library().pin();
    // SAFETY: `vtable()` is the address of the exported ncclProfiler_v6_t of a
    // library kept open by `p` (and pinned).
    let t: ncclProfiler_v6_t = unsafe { std::ptr::read(p.vtable().cast()) };
    let mut ctx: *mut c_void = std::ptr::null_mut();
    let mut mask: c_int = 0;
    // SAFETY: calling the plugin's v6 entry points with valid arguments; the
    // logger is NULL (allowed: the plugin checks it).
    unsafe {
        let r = (t.init.expect("init"))(&mut ctx, 42, &mut mask, c"comm".as_ptr(), 1, 1, 0, None);
        assert_eq!(r, ncclResult_t::ncclSuccess);
        assert!(!ctx.is_null());
        assert_ne!(mask as u64 & ncclProfileCeColl, 0);
        for ty in [ncclProfileColl, ncclProfileCeColl] {
            let mut d = Descr { ty, rest: [0; 104] };
            let mut h: *mut c_void = std::ptr::null_mut();
            let r = (t.startEvent.expect("startEvent"))(ctx, &mut h, (&mut d as *mut Descr).cast());
            assert_eq!(r, ncclResult_t::ncclSuccess);
            assert!(!h.is_null(), "event type {ty:#x} accepted");
            assert_eq!((t.stopEvent.expect("stopEvent"))(h), ncclResult_t::ncclSuccess);
        }
        assert_eq!((t.finalize.expect("finalize"))(ctx), ncclResult_t::ncclSuccess);
    }
    // The CUDA calls got what a machine without a GPU answers, and no GPU timing
    // ever completed.
    let hook = std::ffi::CString::new("ferroccl_test_profiler_cuda").expect("no NUL");
    let f = p.library().symbol(&hook).expect("the test hook is exported");
    // SAFETY: the hook's C signature is `int (int* results, int n)`.
    let f: extern "C" fn(*mut c_int, c_int) -> c_int = unsafe { std::mem::transmute(f) };
    let mut results = [0 as c_int; 6];
    let created = f(results.as_mut_ptr(), 6);
    assert_eq!(created, 0, "no CUDA event exists without a CUDA runtime");
    assert_eq!(
        results, [CUDA_ERROR_NO_DEVICE; 6],
        "create, record, record, query, elapsed, destroy"
    );
}
