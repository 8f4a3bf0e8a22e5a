//! NCCL's tuner fallback at communicator init: with `NCCL_TUNER_PLUGIN` unset and
//! no `libnccl-tuner.so`, the tuner comes from the external net plugin's own
//! library. Ranks are threads over the SDK loopback net plugin
//! (`testing/net-sdk-test`, which also exports `SdkLoopTuner`). Its own test
//! binary, because the tuner loader's outcome is sticky for the process.

mod plugin_common;

use std::sync::Arc;
use std::time::Duration;

use ferroccl::bootstrap::{BootstrapConfig, get_unique_id};
use ferroccl::plugin::LoadOptions;
use ferroccl::{Comm, CommConfig, DataType, RedOp};
use plugin_common::sdk_lib;

#[test]
fn tuner_found_in_the_net_plugin_library_and_consulted() {
    let n = 3;
    let timeout = Duration::from_secs(30);
    let id = get_unique_id(&BootstrapConfig::loopback(timeout)).expect("unique id");
    let lib = Arc::new(sdk_lib());
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let lib = lib.clone();
            std::thread::spawn(move || {
                let cfg = CommConfig {
                    timeout: Some(timeout),
                    bootstrap: Some(BootstrapConfig::loopback(timeout)),
                    net: Some(LoadOptions {
                        net_plugin: Some((*lib).clone()),
                        in_tree: false,
                        ..LoadOptions::default()
                    }),
                    ..Default::default()
                };
                let comm = Comm::init_rank(n, &id, r, cfg).expect("init");
                assert_eq!(comm.tuning().tuner_name(), Some("SdkLoopTuner"));
                let send: Vec<u8> = (0..4096u32).flat_map(|i| (i + r as u32).to_ne_bytes()).collect();
                let mut recv = vec![0u8; send.len()];
                comm.all_reduce_sync(&send, &mut recv, DataType::Uint32, RedOp::Sum)
                    .expect("all_reduce");
                for (i, c) in recv.chunks(4).enumerate() {
                    let got = u32::from_ne_bytes(c.try_into().unwrap());
                    assert_eq!(got, 3 * i as u32 + 3, "element {i}");
                }
                // The do-nothing tuner leaves the model's choice in place.
                assert!(!comm.tuning().last(ferroccl::tune::Func::AllReduce).unwrap().by_tuner);
                comm.destroy().expect("destroy");
            })
        })
        .collect();
    for h in handles {
        h.join().expect("rank");
    }
}
