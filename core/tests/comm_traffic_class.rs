//! `CommConfig::traffic_class` reaches the net plugin as NCCL 2.30.7 hands it over
//! (`src/plugin/net.cc`): in `ncclNetCommConfig_t` at `init` for v11+, and through
//! the v10 shim at `connect` (v10's `init` is process-wide). Two ranks on threads
//! over the SDK test plugin (`testing/net-sdk-test`, which records what it received),
//! loaded at v10 and at v12; shared memory is off so the ranks connect through
//! the plugin. One test per binary: it sets `NCCL_SHM_DISABLE` before the runtime
//! reads its parameters.

mod plugin_common;

use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

use ferroccl::bootstrap::{BootstrapConfig, get_unique_id};
use ferroccl::plugin::load_net_from;
use ferroccl::{Comm, CommConfig, DataType, PreloadedNet, RedOp, TestOp};
use plugin_common::*;

fn capped(v: u32) -> ferroccl::plugin::LoadOptions {
    ferroccl::plugin::LoadOptions {
        max_net_version: v,
        ..opts()
    }
}

/// Two ranks with `traffic_class`, one AllReduce checked.
fn run_comm(v: u32, traffic_class: Option<i32>) {
    let loaded = load_net_from(&sdk_lib(), &capped(v)).unwrap_or_else(|e| panic!("v{v}: {e}"));
    assert_eq!(loaded.plugin.info().version, v);
    let net = loaded.plugin.clone();
    let id = get_unique_id(&BootstrapConfig::loopback(Duration::from_secs(30))).expect("unique id");
    let ranks: Vec<_> = (0..2)
        .map(|r| {
            let net = net.clone();
            std::thread::spawn(move || {
                let config = CommConfig {
                    timeout: Some(Duration::from_secs(30)),
                    bootstrap: Some(BootstrapConfig::loopback(Duration::from_secs(30))),
                    preloaded_net: Some(PreloadedNet(Arc::clone(&net))),
                    traffic_class,
                    ..Default::default()
                };
                let comm = Comm::init_rank(2, &id, r, config).expect("init");
                let wrong = TestOp::AllReduce
                    .run_checked(&comm, DataType::Float32, RedOp::Sum, 4099, false, 1)
                    .expect("all_reduce");
                assert_eq!(wrong, 0, "rank {r}: wrong elements");
                comm.destroy().expect("destroy");
            })
        })
        .collect();
    for h in ranks {
        h.join().expect("rank thread");
    }
}

#[test]
fn traffic_class_reaches_v10_connect_and_v12_init() {
    // SAFETY: this binary has this one test; nothing reads the environment concurrently.
    unsafe { std::env::set_var("NCCL_SHM_DISABLE", "1") };
    // SAFETY: the SDK test plugin's initialisers only set up statics; the runtime
    // loads the same file, so this handle sees the same library.
    let lib = unsafe { libloading::Library::new(sdk_lib()) }.expect("dlopen the SDK test plugin");
    // SAFETY: the test export's C signature.
    let seen = unsafe {
        lib.get::<extern "C" fn(c_int) -> c_int>(b"ferrocclTestSdkLoopTrafficClass")
            .expect("ferrocclTestSdkLoopTrafficClass")
    };

    // v12: the class is in init's config, and connect (from the context) sees it too.
    run_comm(12, Some(0x68));
    assert_eq!((seen(0), seen(1)), (0x68, 0x68), "v12 init / connect traffic class");
    run_comm(12, None);
    assert_eq!((seen(0), seen(1)), (-1, -1), "undefined: NCCL_NET_TRAFFIC_CLASS_UNDEF");

    // v10: init is process-wide (no config); the class arrives at connect.
    run_comm(10, Some(41));
    assert_eq!(seen(1), 41, "v10 connect traffic class");
}
