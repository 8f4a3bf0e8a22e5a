//! The perf tool run for real (processes or threads as ranks, the socket plugin
//! and shared memory on this host): every datatype and every reduction over two
//! ranks with the data checked, threads (`-t`, `-g`) equivalent to processes
//! (`--ranks`), nccl-tests' JSON layout (`-J`) parsed back, the program run
//! under an nccl-tests binary name, and `--plot` drawing two result files.
//! Sizes are tiny and iterations few: nothing here depends on timing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ferroccl_examples::perf::report::NcclTestsJson;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferroccl-perf-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn perf_at(exe: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(exe);
    c.args(args).env("NCCL_NET_PLUGIN", "socket");
    // A value from the caller's environment must not change what is measured.
    for (k, _) in std::env::vars() {
        if (k.starts_with("NCCL_") && k != "NCCL_NET_PLUGIN") || k.starts_with("FERROCCL_") {
            c.env_remove(k);
        }
    }
    c.output().expect("run ferroccl-perf")
}

fn perf(args: &[&str]) -> Output {
    perf_at(Path::new(env!("CARGO_BIN_EXE_ferroccl-perf")), args)
}

fn ok(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{out}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Result rows of the table (lines that are not comments).
fn rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn read_json(p: &Path) -> NcclTestsJson {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", p.display()))
}

#[test]
fn every_datatype_and_reduction_over_two_ranks_is_checked() {
    let dir = scratch("all");
    let json = dir.join("all.json");
    let j = json.to_str().unwrap();
    let o = perf(&[
        "--ranks",
        "2",
        "all_reduce",
        "-b",
        "64",
        "-e",
        "128",
        "-f",
        "2",
        "-d",
        "all",
        "-o",
        "all",
        "-n",
        "1",
        "-w",
        "0",
        "-c",
        "1",
        "-J",
        j,
    ]);
    let out = ok(&o);
    let table = rows(&out);
    // 10 datatypes x 6 reductions x 2 sizes.
    assert_eq!(table.len(), 120, "{out}");
    for r in &table {
        // size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
        assert_eq!(r.len(), 13, "{r:?}");
        assert_eq!((r[8].as_str(), r[12].as_str()), ("0", "0"), "{r:?}");
    }
    assert!(out.contains("# Out of bounds values : 0 OK"), "{out}");
    assert!(out.contains("#  Rank  0 Group  0 Pid"), "{out}");
    assert!(out.contains("#  Rank  1 Group  0 Pid"), "{out}");
    assert!(out.contains(&format!("# Writing JSON output to {j}")), "{out}");

    let doc = read_json(&json);
    assert_eq!(doc.version, 1);
    assert_eq!(doc.results.len(), 120);
    assert_eq!(doc.config.devices.len(), 2);
    assert_eq!(doc.config.validation, 1);
    assert_eq!(doc.config.step_factor, Some(2));
    assert_eq!(doc.config.step_bytes, None);
    assert_eq!(doc.out_of_bounds.count, 0);
    assert_eq!(doc.out_of_bounds.okay, "true");
    assert_eq!(doc.average_bus_bandwidth.okay, "unchecked");
    assert_eq!(doc.args.first().map(|a| a.ends_with("ferroccl-perf")), Some(true));
    let mut combos = std::collections::BTreeSet::new();
    for (row, line) in doc.results.iter().zip(&table) {
        // The file says what the table says.
        assert_eq!(row.size.to_string(), line[0]);
        assert_eq!(row.count.to_string(), line[1]);
        assert_eq!(
            (row.dtype.as_str(), row.redop.as_str()),
            (line[2].as_str(), line[3].as_str())
        );
        assert_eq!(row.root, "    -1");
        assert_eq!(row.experiment_name, "all_reduce_perf");
        for p in [row.out_of_place.as_ref(), row.in_place.as_ref()] {
            let p = p.expect("both variants");
            assert_eq!(p.nwrong, Some(0.0), "{row:?}");
            assert!(p.time.is_some() && p.cpu_time.is_none(), "{row:?}");
        }
        combos.insert((row.dtype.clone(), row.redop.clone()));
    }
    assert_eq!(combos.len(), 60, "{combos:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// (size, count, type, redop, root, #wrong out of place, #wrong in place) of one row.
type Shape = (u64, u64, String, String, String, Option<f64>, Option<f64>);

/// The [`Shape`] of every row.
fn shape(doc: &NcclTestsJson) -> Vec<Shape> {
    doc.results
        .iter()
        .map(|r| {
            (
                r.size,
                r.count,
                r.dtype.clone(),
                r.redop.clone(),
                r.root.clone(),
                r.out_of_place.as_ref().and_then(|p| p.nwrong),
                r.in_place.as_ref().and_then(|p| p.nwrong),
            )
        })
        .collect()
}

#[test]
fn threads_owning_ranks_run_what_processes_run() {
    let dir = scratch("threads");
    let common = [
        "reduce_scatter",
        "-b",
        "1K",
        "-e",
        "4K",
        "-f",
        "2",
        "-d",
        "int32",
        "-n",
        "1",
        "-w",
        "0",
        "-c",
        "1",
    ];
    let mut docs = Vec::new();
    for (name, extra) in [
        ("procs", &["--ranks", "2"][..]),
        ("threads", &["-t", "2", "-g", "1"][..]),
        ("gpus", &["-t", "1", "-g", "2"][..]),
    ] {
        let json = dir.join(format!("{name}.json"));
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(common);
        args.extend(["-J", json.to_str().unwrap()]);
        let out = ok(&perf(&args));
        assert!(out.contains("nranks 2 ("), "{name}: {out}");
        docs.push((name, read_json(&json)));
    }
    let (_, procs) = &docs[0];
    assert_eq!(procs.results.len(), 3);
    for (name, d) in &docs {
        assert_eq!(shape(d), shape(procs), "{name} differs from --ranks 2");
        assert_eq!(d.config.devices.len(), 2, "{name}");
        let ranks: Vec<i64> = d.config.devices.iter().map(|x| x.rank).collect();
        assert_eq!(ranks, [0, 1], "{name}");
    }
    // Processes: two pids; threads: one pid, devices 0 and 1 of that process.
    let pids = |d: &NcclTestsJson| d.config.devices.iter().map(|x| x.pid).collect::<Vec<_>>();
    assert_ne!(pids(procs)[0], pids(procs)[1]);
    let threads = &docs[1].1;
    assert_eq!(pids(threads)[0], pids(threads)[1]);
    assert_eq!(threads.config.devices[1].device, 1);
    assert_eq!((threads.config.nthreads, threads.config.ngpus), (2, 1));
    assert_eq!((docs[2].1.config.nthreads, docs[2].1.config.ngpus), (1, 2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn under_an_nccl_tests_name_the_collective_comes_from_the_name() {
    let dir = scratch("name");
    let link = dir.join("sendrecv_perf");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ferroccl-perf"), &link).expect("symlink");
    let out = ok(&perf_at(
        &link,
        &["-t", "2", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "-c", "1"],
    ));
    assert!(out.contains("# Collective test starting: sendrecv_perf"), "{out}");
    let table = rows(&out);
    assert_eq!(table.len(), 1, "{out}");
    // sendrecv: no reduction, no root; checked out of place (no in-place run:
    // a receive would overwrite the buffer being sent).
    assert_eq!(&table[0][..5], ["1024", "256", "float", "none", "-1"], "{out}");
    assert_eq!((table[0][8].as_str(), table[0][12].as_str()), ("0", "N/A"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plot_draws_an_nccl_tests_file_and_a_ferroccl_file() {
    let dir = scratch("plot");
    let nccl = dir.join("nccl_layout.json");
    ok(&perf(&[
        "all_gather",
        "-t",
        "2",
        "-b",
        "256",
        "-e",
        "4K",
        "-f",
        "4",
        "-n",
        "1",
        "-w",
        "0",
        "-J",
        nccl.to_str().unwrap(),
    ]));
    let ours = dir.join("ferroccl_layout.json");
    let out = ok(&perf(&[
        "all_gather",
        "-b",
        "256",
        "-e",
        "4K",
        "-f",
        "4",
        "-n",
        "1",
        "-w",
        "0",
        "--json",
    ]));
    std::fs::write(&ours, out).expect("write");
    let svg = dir.join("sweep.svg");
    let o = perf(&[
        "--plot",
        svg.to_str().unwrap(),
        nccl.to_str().unwrap(),
        ours.to_str().unwrap(),
    ]);
    let out = ok(&o);
    assert!(out.contains("plotted 2 series from 2 file(s)"), "{out}");
    let text = std::fs::read_to_string(&svg).expect("svg written");
    assert!(text.starts_with("<svg"), "{}", &text[..text.len().min(200)]);
    for want in [
        "nccl_layout",
        "ferroccl_layout",
        "bus bandwidth",
        "time per operation",
        "<polyline",
    ] {
        assert!(text.contains(want), "{want} missing from the SVG");
    }
    // A file that is not a result file is named in the error.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"x\": 1}").expect("write");
    let o = perf(&["--plot", svg.to_str().unwrap(), bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("bad.json") && err.contains("no \"results\" list"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--trace DIR`: every process of `--ranks 2` writes one Chrome trace through
/// the in-tree trace profiler, holding that rank's AllReduce with its proxy steps
/// inside it. Over the network (`NCCL_SHM_DISABLE=1`): shared memory has no
/// proxy, hence no ProxyOp/ProxyStep events, as in NCCL.
#[test]
fn trace_writes_one_timeline_per_process() {
    let dir = scratch("trace");
    let d = dir.to_str().unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferroccl-perf"));
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_") || k.starts_with("FERROCCL_") {
            c.env_remove(k);
        }
    }
    c.env("NCCL_NET_PLUGIN", "socket").env("NCCL_SHM_DISABLE", "1");
    c.args([
        "--ranks",
        "2",
        "-b",
        "1K",
        "-e",
        "1K",
        "-n",
        "2",
        "-w",
        "0",
        "--trace",
        d,
        "all_reduce",
    ]);
    ok(&c.output().expect("run ferroccl-perf"));
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(files.len(), 2, "one trace per process: {files:?}");
    let mut ranks = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let events = v["traceEvents"].as_array().expect("traceEvents");
        let complete: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        let colls: Vec<_> = complete
            .iter()
            .filter(|e| e["name"] == "AllReduce" && e["cat"] == "coll")
            .collect();
        assert!(!colls.is_empty(), "{}: no AllReduce event", f.display());
        let span = |e: &serde_json::Value| {
            let ts = e["ts"].as_f64().unwrap();
            (ts, ts + e["dur"].as_f64().unwrap())
        };
        // Every step interval lies inside some collective of its rank (the tool
        // runs its own collectives too, e.g. to gather the ranks' device lines).
        let all_colls: Vec<_> = complete.iter().filter(|e| e["cat"] == "coll").collect();
        let steps: Vec<_> = complete.iter().filter(|e| e["cat"] == "proxyStep").collect();
        assert!(!steps.is_empty(), "{}: no proxy step events", f.display());
        for s in &steps {
            let (a, b) = span(s);
            assert!(a <= b, "{s}");
            assert!(
                all_colls.iter().any(|c| {
                    let (ca, cb) = span(c);
                    c["pid"] == s["pid"] && ca <= a && b <= cb
                }),
                "{}: step outside every collective: {s}",
                f.display()
            );
        }
        ranks.push(colls[0]["pid"].as_u64().unwrap());
    }
    ranks.sort();
    assert_eq!(ranks, [0, 1]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--mem device`: with a CUDA driver and device, the checked sweep runs on
/// device buffers and every `#  Rank` line says so; without one, the run fails
/// at once with a message naming `--mem device` and what is missing (never a
/// silent fall-back to host memory).
#[test]
fn mem_device_runs_on_device_buffers_or_says_why_not() {
    let o = perf(&[
        "--ranks",
        "2",
        "all_reduce",
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "8",
        "-c",
        "1",
        "--mem",
        "device",
    ]);
    match ferroccl_kernels::cuda::device_count() {
        Ok(_) => {
            let out = ok(&o);
            let ranks: Vec<&str> = out.lines().filter(|l| l.starts_with("#  Rank ")).collect();
            assert_eq!(ranks.len(), 2, "{out}");
            assert!(ranks.iter().all(|l| l.contains("device memory (CUDA device")), "{out}");
            for r in rows(&out) {
                assert_eq!(r[r.len() - 1], "0", "wrong values in {r:?}\n{out}");
            }
        }
        Err(e) => {
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "ran without a CUDA driver ({e})");
            assert!(err.contains("--mem device:"), "no reason given:\n{err}");
            assert!(
                !String::from_utf8_lossy(&o.stdout).contains("#  Rank "),
                "ran on something"
            );
        }
    }
}

/// `NCCL_COLLNET_ENABLE=1` with a net plugin that has no CollNet table: the
/// communicator says CollNet is off and why (NCCL_DEBUG=INFO), and the
/// collectives run, checked, on the other algorithms.
#[test]
fn collnet_enable_without_a_collnet_table_says_so_and_runs() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferroccl-perf"));
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_") || k.starts_with("FERROCCL_") {
            c.env_remove(k);
        }
    }
    let o = c
        .args([
            "--ranks",
            "2",
            "all_reduce",
            "-b",
            "8",
            "-e",
            "1M",
            "-f",
            "32",
            "-c",
            "1",
        ])
        .env("NCCL_NET_PLUGIN", "socket")
        .env("NCCL_COLLNET_ENABLE", "1")
        .env("NCCL_DEBUG", "INFO")
        .output()
        .expect("run ferroccl-perf");
    let out = ok(&o);
    let all = format!("{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        all.contains("CollNet disabled: the net plugin FerrocclSocket has no ncclCollNet table"),
        "{all}"
    );
    assert!(all.contains("NCCL_COLLNET_ENABLE set by environment to 1."), "{all}");
    let results: Vec<Vec<String>> = rows(&out).into_iter().filter(|r| r[0].parse::<u64>().is_ok()).collect();
    assert_eq!(results.len(), 4, "rows of 8 B, 256 B, 8 KiB and 256 KiB\n{out}");
    for r in results {
        assert_eq!(r[r.len() - 1], "0", "wrong values in {r:?}\n{out}");
    }
}
