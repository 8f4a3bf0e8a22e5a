//! `ferroccl-info ib` asks the built IB plugin (`libnccl_net_ib.so` in
//! `target/<profile>/`, found as `NCCL_NET_PLUGIN=ib` would be) through its
//! `ferrocclIbInventory_v1` export, and says plainly why it cannot list anything:
//! no plugin, a library that is not the IB plugin, no usable libibverbs, bad
//! `NCCL_IB_*` values. Real processes, real dlopen. Build the plugins first
//! (`cargo build --workspace`, as scripts/test.sh does).

use std::path::PathBuf;
use std::process::Command;

fn info() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferroccl-info"));
    for k in [
        "NCCL_IBVERBS_LIB",
        "NCCL_IB_VERBS_LIB",
        "NCCL_IB_TIMEOUT",
        "NCCL_IB_HCA",
        "LD_LIBRARY_PATH",
    ] {
        c.env_remove(k);
    }
    c.arg("ib");
    c
}

fn profile_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ferroccl-info"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn built(file: &str) -> PathBuf {
    let p = profile_dir().join(file);
    assert!(
        p.exists(),
        "{} is not built: run `cargo build --workspace` (scripts/test.sh does) before these tests",
        p.display()
    );
    p
}

fn run(c: &mut Command) -> (bool, String) {
    let out = c.output().expect("run ferroccl-info");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn missing_plugin_is_named_with_how_to_build_it() {
    let (ok, out) = run(info().args(["--plugin", "/nonexistent/libnccl-net-ib.so"]));
    assert!(!ok, "{out}");
    assert!(out.contains("cannot inventory RDMA devices"), "{out}");
    assert!(out.contains("/nonexistent/libnccl-net-ib.so (not found)"), "{out}");
    assert!(
        out.contains("cargo xtask dist") && out.contains("libibverbs-dev"),
        "{out}"
    );
}

#[test]
fn a_library_that_is_not_the_ib_plugin_is_refused() {
    let socket = built("libnccl_net_socket.so");
    let (ok, out) = run(info().arg("--plugin").arg(&socket));
    assert!(!ok, "{out}");
    assert!(out.contains("does not export ferrocclIbInventory_v1"), "{out}");
}

#[test]
fn unusable_libibverbs_is_reported_by_the_plugin() {
    built("libnccl_net_ib.so");
    // libm opens but has no verbs: NCCL (and the plugin) stop at the first
    // library that opens.
    let (ok, out) = run(info().env("NCCL_IBVERBS_LIB", "libm.so.6"));
    assert!(!ok, "{out}");
    assert!(
        out.contains("cannot inventory RDMA devices: libm.so.6 has no symbol ibv_get_device_list"),
        "{out}"
    );
}

#[test]
fn deprecated_variable_still_works_with_a_warning() {
    built("libnccl_net_ib.so");
    let (ok, out) = run(info().env("NCCL_IB_VERBS_LIB", "libm.so.6"));
    assert!(!ok, "{out}");
    assert!(
        out.contains("warning: NCCL_IB_VERBS_LIB is deprecated: use NCCL_IBVERBS_LIB"),
        "{out}"
    );
    assert!(out.contains("libm.so.6 has no symbol"), "{out}");
}

#[test]
fn rejected_parameters_are_named() {
    built("libnccl_net_ib.so");
    let (ok, out) = run(info().env("NCCL_IB_TIMEOUT", "32"));
    assert!(!ok, "{out}");
    assert!(
        out.contains("IB plugin parameters rejected") && out.contains("NCCL_IB_TIMEOUT"),
        "{out}"
    );
}

#[test]
fn system_libibverbs_gives_a_listing_or_a_clear_reason() {
    built("libnccl_net_ib.so");
    let (ok, out) = run(&mut info());
    if ok {
        assert!(
            out.contains("port(s) usable by the IB plugin") && out.contains("HCA "),
            "{out}"
        );
    } else {
        // No libibverbs on this machine, or no RDMA device: either is said as such.
        assert!(
            out.contains("cannot inventory RDMA devices: cannot load libibverbs")
                || (out.contains("libibverbs: ") && out.contains("no RDMA devices"))
                || out.contains("0 port(s) usable"),
            "{out}"
        );
    }
}
