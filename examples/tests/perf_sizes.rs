//! The perf tool rejects impossible sizes with a clear message and reports an
//! allocation it cannot make as an error (exit status, never an abort): sizes
//! that overflow, `-b` larger than `-e`, and a buffer over the process's memory
//! limit. None of these cases reaches communicator init.

use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

fn perf(args: &[&str], as_limit: Option<u64>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferroccl-perf"));
    c.args(args).env("NCCL_NET_PLUGIN", "socket");
    if let Some(limit) = as_limit {
        // SAFETY: setrlimit is async-signal-safe and only touches this child.
        unsafe {
            c.pre_exec(move || {
                let r = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    c.output().expect("run ferroccl-perf")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn impossible_sizes_are_refused_before_anything_runs() {
    let cases: &[(&[&str], &str)] = &[
        (&["all_reduce", "-b", "1M", "-e", "8"], "is larger than -e 8"),
        (&["all_reduce", "-b", "99999999999999999G"], "is too large"),
        (&["all_reduce", "-e", "18446744073709551616"], "bad size"),
        (&["all_reduce", "-b", "12Q"], "bad size"),
    ];
    for (args, want) in cases {
        let o = perf(args, None);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: expected {want:?} in {e}");
    }
}

#[test]
fn an_allocation_over_the_memory_limit_is_an_error() {
    // 1 GiB of address space cannot hold a 4 GiB send buffer.
    let o = perf(&["all_reduce", "-b", "4G", "-e", "4G"], Some(1 << 30));
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("cannot allocate the send buffer of 4294967296 bytes"), "{e}");
}
