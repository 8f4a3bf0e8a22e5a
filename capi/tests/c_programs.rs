//! Real C programs against libnccl.so.2 and the generated nccl.h: the header's
//! layout (C and C++), and multi-process runs (ranks as processes, TCP on
//! loopback, the socket plugin and shared memory) of every collective, groups,
//! split, non-blocking init, abort and NCCL's error codes; then the swap test:
//! the same binary, found libnccl.so.2 through LD_LIBRARY_PATH, with the network
//! chosen by NCCL_NET_PLUGIN and NCCL_DEBUG=INFO lines.

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use support::{compile, lib_dir, run};

const LIMIT: Duration = Duration::from_secs(240);

fn ranks_bin() -> &'static std::path::Path {
    static BIN: OnceLock<std::path::PathBuf> = OnceLock::new();
    BIN.get_or_init(|| compile("nccl_ranks.c", None, &["-std=gnu11", "-O1"]))
}

fn ranks(mode: &str, n: usize, env: &[(&str, &str)]) -> support::Run {
    let r = run(ranks_bin(), &[mode, &n.to_string()], env, LIMIT);
    assert!(r.ok(), "{mode} on {n} ranks failed:\n{}", r.dump());
    for rank in 0..n {
        assert!(
            r.stdout.contains(&format!("ok {mode} rank {rank}\n")),
            "rank {rank} did not finish:\n{}",
            r.dump()
        );
    }
    r
}

#[test]
fn header_layout_in_c_and_cpp() {
    let bin = compile("layout.c", None, &["-std=c11"]);
    let r = run(&bin, &[], &[], LIMIT);
    assert!(r.ok() && r.stdout.contains("layout ok"), "{}", r.dump());
    // C++ too, where a C++ compiler is installed (cpp_compat: extern "C").
    if std::process::Command::new("c++")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let bin = compile("layout.c", Some("c++"), &["-x", "c++", "-std=c++17"]);
        let r = run(&bin, &[], &[], LIMIT);
        assert!(r.ok(), "{}", r.dump());
    }
}

#[test]
fn collectives_groups_split_on_four_ranks() {
    ranks("colls", 4, &[]);
}

/// The one-sided calls among 3 processes over the socket plugin's RMA table.
#[test]
fn one_sided_put_signal_wait_signal_on_three_ranks() {
    ranks("rma", 3, &[("NCCL_SOCKET_RMA_ENABLE", "1")]);
}

/// Without an RMA plugin the one-sided calls give NCCL 2.30.7's codes: window
/// registration `ncclInvalidUsage`, then `ncclSignal` / `ncclWaitSignal`
/// `ncclInvalidArgument` (the communicator's collectives still run).
#[test]
fn one_sided_calls_without_an_rma_plugin_give_nccls_codes() {
    ranks("rmanone", 2, &[("NCCL_SOCKET_RMA_ENABLE", "0")]);
}

#[test]
fn one_thread_drives_every_rank() {
    let r = run(ranks_bin(), &["onethread", "3"], &[], LIMIT);
    assert!(r.ok() && r.stdout.contains("ok onethread rank 0"), "{}", r.dump());
}

#[test]
fn non_blocking_init_split_and_finalize() {
    ranks("nonblocking", 3, &[]);
}

#[test]
fn abort_with_an_operation_in_flight() {
    let r = ranks("abort", 2, &[]);
    assert!(r.stdout.contains("abort took"), "{}", r.dump());
}

#[test]
fn errors_return_nccls_codes() {
    let r = ranks("errors", 2, &[("NCCL_DEBUG", "WARN")]);
    // Every rank reports the mismatch, and the WARN lines are NCCL's shape.
    assert!(
        r.stdout.contains("mismatch: rank 0") && r.stdout.contains("mismatch: rank 1"),
        "{}",
        r.dump()
    );
    assert!(
        r.stdout.contains("NCCL WARN AllReduce : invalid type 42"),
        "{}",
        r.dump()
    );
}

/// The swap test: the same unmodified binary, libnccl.so.2 found through
/// LD_LIBRARY_PATH, shared memory off so every byte crosses the network that
/// NCCL_NET_PLUGIN chose, NCCL_DEBUG=INFO printing NCCL's lines.
#[test]
fn swap_same_binary_over_the_socket_plugin() {
    let r = ranks(
        "colls",
        3,
        &[
            ("NCCL_SHM_DISABLE", "1"),
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_DEBUG_SUBSYS", "INIT,NET,ENV"),
        ],
    );
    let lib = lib_dir().join("libnccl.so.2");
    assert!(
        r.stdout.contains(&format!("libnccl: {}\n", lib.display())),
        "not our library:\n{}",
        r.dump()
    );
    for want in [
        "NCCL INFO NCCL version 2.30.7+ferroccl",
        "NCCL INFO NET/Plugin: using",
        "[send] via NET/",
        "Init COMPLETE",
    ] {
        assert!(r.stdout.contains(want), "no '{want}' line:\n{}", r.dump());
    }
    assert!(
        !r.stdout.contains("via SHM"),
        "shared memory was disabled:\n{}",
        r.dump()
    );
}
