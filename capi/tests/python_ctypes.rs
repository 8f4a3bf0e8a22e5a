//! A Python program driving libnccl.so.2 through ctypes, as a framework binds
//! NCCL (`tests/py/nccl_ctypes.py`): 3 ranks as processes, every collective, a
//! group, split, a non-blocking communicator, an error code and abort.

mod support;

use std::time::Duration;

#[test]
fn python_ctypes_program_on_three_ranks() {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/nccl_ctypes.py");
    let lib = support::lib_dir().join("libnccl.so.2");
    let r = support::run(
        std::path::Path::new(&python),
        &[script.to_str().unwrap(), lib.to_str().unwrap(), "3"],
        &[],
        Duration::from_secs(240),
    );
    assert!(r.ok(), "{}", r.dump());
    for rank in 0..3 {
        assert!(r.stdout.contains(&format!("ok python rank {rank}")), "{}", r.dump());
    }
}
