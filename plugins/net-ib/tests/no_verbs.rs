//! Without a usable libibverbs the plugin `.so` still loads and `init` fails
//! cleanly with the reason; the same holds on a machine with libibverbs but no
//! RDMA device. Simulated with `NCCL_IBVERBS_LIB` naming a library that opens
//! but is not libibverbs (`libm.so.6`): like NCCL 2.30.7 (`buildIbvSymbols`) the
//! plugin uses the first library that opens, so a *missing* file would only fall
//! back to the system's libibverbs.
//! This test binary is separate because the verbs table is loaded once per
//! process.

use ferroccl_plugin_api::abi::{self, ncclResult_t};
use ferroccl_plugin_api::sdk::Net;
use nccl_net_ib::IbNet;

fn so_path() -> std::path::PathBuf {
    // target/<profile>/deps/no_verbs-… → target/<profile>/libnccl_net_ib.so
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("libnccl_net_ib.so")
}

#[test]
fn init_fails_cleanly_without_libibverbs() {
    // SAFETY: set before any thread of this test binary reads the environment
    // (single test in this binary).
    unsafe { std::env::set_var("NCCL_IBVERBS_LIB", "libm.so.6") };
    let err = IbNet::new().expect_err("init must fail without libibverbs");
    let msg = err.to_string();
    assert!(msg.contains("libm.so.6 has no symbol ibv_get_device_list"), "{msg}");

    // The built cdylib: dlopen succeeds (no link-time libibverbs dependency),
    // ncclNetPlugin_v12.init fails with an error code.
    let path = so_path();
    if !path.exists() {
        panic!("{} not built (cargo builds the cdylib with the tests)", path.display());
    }
    // SAFETY: loading our own plugin; its constructors do nothing.
    let lib = unsafe { libloading::Library::new(&path) }.expect("plugin must load without libibverbs");
    // SAFETY: symbol type from plugin-api's ABI definitions.
    let v12: libloading::Symbol<'_, *const abi::ncclNet_v12_t> = unsafe { lib.get(b"ncclNetPlugin_v12\0") }.unwrap();
    // SAFETY: the symbol is the exported vtable.
    let vt = unsafe { &**v12 };
    // SAFETY: `name` is a static C string.
    assert_eq!(unsafe { std::ffi::CStr::from_ptr(vt.name) }, c"FerrocclIB");
    let mut ctx = std::ptr::null_mut();
    let cfg = abi::ncclNetCommConfig_v12_t { trafficClass: -1 };
    // SAFETY: valid out pointer and config; NULL logger and profiler callback are allowed.
    let rc = unsafe { (vt.init.unwrap())(&mut ctx, 1, &cfg as *const _ as *mut _, None, None) };
    assert_ne!(rc, ncclResult_t::ncclSuccess, "init must fail without libibverbs");
}
