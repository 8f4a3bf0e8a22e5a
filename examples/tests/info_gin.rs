//! `ferroccl-info plugins PATH` lists the GIN tables a library exports, with their
//! versions and the one NCCL 2.30.7 would use (testing/gin-c's
//! `libnccl-gin-fake.so`, `ncclGinPlugin_v13` and `_v14`), and says "none" for a
//! library without one.

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
fn info_lists_gin_tables_with_their_versions() {
    let text = info("libnccl-gin-fake.so");
    assert!(
        text.contains("gin       v14 v13 (name 'FakeGin'; NCCL 2.30.7 would use ncclGinPlugin_v14)"),
        "{text}"
    );
    assert!(text.contains("net       none"), "{text}");
    let text = info("libnccl-net-zoo-ctx-teardown.so");
    assert!(text.contains("gin       none"), "{text}");
}
