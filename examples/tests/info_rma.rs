//! `ferroccl-info plugins PATH` lists the RMA tables a library exports, with their
//! versions and the one NCCL 2.30.7 would use (the socket plugin exports
//! `ncclRmaPlugin_v14` and `_v13` through `export_rma_plugin!`), and says "none" for a
//! library without one (testing/gin-c's `libnccl-gin-fake.so` exports GIN tables only:
//! its `ncclGinPlugin_v13` is not listed as an RMA table).

use std::path::PathBuf;
use std::process::Command;

fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

fn info(file: &str) -> String {
    let so = profile_dir().join(file);
    assert!(so.exists(), "{} not built", so.display());
    let out = Command::new(env!("CARGO_BIN_EXE_ferroccl-info"))
        .arg("plugins")
        .arg(&so)
        .output()
        .expect("run ferroccl-info");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn info_lists_rma_tables_with_their_versions() {
    let text = info("libnccl_net_socket.so");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("rma "))
        .unwrap_or_else(|| panic!("no rma line: {text}"));
    assert!(line.contains("v14 v13"), "{text}");
    assert!(line.contains("NCCL 2.30.7 would use ncclRmaPlugin_v14"), "{text}");
    let text = info("libnccl-gin-fake.so");
    assert!(text.contains("rma       none"), "{text}");
    assert!(text.contains("gin       v14 v13"), "{text}");
}
