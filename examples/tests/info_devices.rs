//! `ferroccl-info plugins PATH` queries devices with a plugin context open, so a
//! v12 plugin that tears itself down when its last context is finalized
//! (testing/zoo-quirky's `libnccl-net-zoo-ctx-teardown.so`) still shows its
//! devices and properties.

use std::path::PathBuf;
use std::process::Command;

fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

#[test]
fn info_shows_devices_of_a_plugin_that_tears_down_on_last_finalize() {
    let so = profile_dir().join("libnccl-net-zoo-ctx-teardown.so");
    assert!(so.exists(), "{} not built (testing/zoo-quirky)", so.display());
    let out = Command::new(env!("CARGO_BIN_EXE_ferroccl-info"))
        .arg("plugins")
        .arg(&so)
        .output()
        .expect("run ferroccl-info");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "exit {:?}\n{text}", out.status);
    assert!(text.contains("ncclNet v12"), "{text}");
    assert!(text.contains("devices: 1"), "{text}");
    assert!(!text.contains("devices: failed"), "{text}");
    assert!(text.contains("maxP2pBytes        2147483648"), "{text}");
}
