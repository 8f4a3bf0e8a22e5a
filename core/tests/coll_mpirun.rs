//! `mpirun --oversubscribe -np 4` of the perf tool with `-c 1`: Open MPI only
//! launches the processes (rank and size from `OMPI_COMM_WORLD_*`, the bootstrap
//! root at `NCCL_COMM_ID`); every collective must report `#wrong` 0.
//! Skipped, with the reason printed, only when `mpirun` is not installed.

#[path = "coll_support/mod.rs"]
mod coll_support;

#[path = "port_support/mod.rs"]
mod port_support;

use std::process::Command;
use std::time::{Duration, Instant};

fn mpirun() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join("mpirun"))
        .find(|p| p.exists())
}

#[test]
fn mpirun_np4_perf_tool_reports_no_wrong_values() {
    let Some(mpirun) = mpirun() else {
        println!("SKIPPED: mpirun is not installed (Debian: apt-get install openmpi-bin)");
        return;
    };
    coll_support::require_socket_plugin();
    let perf = coll_support::target_dir().join("ferroccl-perf");
    assert!(
        perf.exists(),
        "{} is not built: run `cargo build --workspace` first",
        perf.display()
    );
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    for op in [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "sendrecv",
        "alltoall",
    ] {
        let t = Instant::now();
        // The root binds the port named in NCCL_COMM_ID; should another process take
        // it between our pick and that bind, pick again (at most twice).
        let mut attempt = 0;
        let out = loop {
            let mut c = Command::new(&mpirun);
            if root {
                c.arg("--allow-run-as-root");
            }
            let comm_id = format!("NCCL_COMM_ID=127.0.0.1:{}", port_support::unused_port());
            c.args([
                "--oversubscribe",
                "-np",
                "4",
                "-x",
                &comm_id,
                "-x",
                "NCCL_NET_PLUGIN=socket",
                "-x",
                "NCCL_SOCKET_IFNAME=lo",
            ])
            .args(["-x", "FERROCCL_TIMEOUT_SEC=60", "--mca", "btl", "self,tcp"])
            .arg(&perf)
            .args([
                op, "-b", "8", "-e", "1M", "-f", "32", "-n", "2", "-w", "1", "-c", "1", "-r", "1",
            ]);
            let out = c.output().expect("run mpirun");
            attempt += 1;
            if !out.status.success()
                && attempt < 3
                && String::from_utf8_lossy(&out.stderr).contains("Address already in use")
            {
                println!("{op}: the NCCL_COMM_ID port was taken meanwhile; picking another");
                continue;
            }
            break out;
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("{op} ({:?}):\n{stdout}", t.elapsed());
        assert!(
            out.status.success(),
            "mpirun {op} failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        assert!(
            stdout.contains("# Out of bounds values : 0 OK"),
            "{op}: no clean summary:\n{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains("nranks 4 (Open MPI)"),
            "{op}: not launched through Open MPI's environment:\n{stdout}"
        );
        // Every data row ends with #wrong columns that must all be 0 (or N/A).
        let rows: Vec<&str> = stdout
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .collect();
        assert!(rows.len() >= 2, "{op}: expected size rows:\n{stdout}");
        for row in rows {
            let cols: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cols.len(), 13, "{op}: malformed row {row:?}");
            assert_eq!(cols[8], "0", "{op}: out-of-place #wrong in {row:?}");
            assert!(cols[12] == "0" || cols[12] == "N/A", "{op}: in-place #wrong in {row:?}");
        }
        assert!(t.elapsed() < Duration::from_secs(120));
    }
}
