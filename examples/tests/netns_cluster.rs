//! Several hosts on one machine (issue 30): `scripts/netns-cluster.sh up 2`
//! makes two network namespaces with their own host names (so their ranks have
//! different host hashes, as on two nodes), and `ferroccl-perf --hosts 2
//! --ranks 4` runs two ranks on each. Checked, with real processes, the socket
//! plugin over veth pairs and a bridge, and shared memory inside a host:
//!
//! * every collective (sizes 8 B … 2 MiB, every result checked), AllReduce
//!   over every datatype and reduction, with `NCCL_ALGO` forcing Ring and
//!   Tree across the nodes, and with a tuner plugin rule for `nNodes = 2`;
//! * the `NCCL_DEBUG=INFO` lines of every rank: each connection between hosts
//!   goes `via NET/…`, each inside a host `via SHM/…`; each ring enters and
//!   leaves every host once; the `Channel` and `Trees` lines equal what
//!   `ferroccl-topo --nodes 2` computes offline from the same host's topology
//!   (`NCCL_TOPO_DUMP_FILE`);
//! * a host's link set down in the middle of a stream of AllReduces: every rank
//!   on both sides fails (none hangs) within the bound (the watchdog
//!   `FERROCCL_TIMEOUT_SEC` plus the bounded exchange of failure reports), and
//!   its diagnosis names exactly the ranks of the other host;
//! * a host's ranks killed (SIGKILL) in the middle of the stream: the
//!   survivors fail with one diagnosis, word for word, naming the dead ranks,
//!   and the launcher names the killed processes and their host.
//!
//! * with `FERROCCL_NETNS_IB_PLUGIN` (set by `scripts/ib-vm-test.sh` inside the
//!   soft-RoCE guest), the `ib_*` tests: the same matrix over the IB plugin on
//!   2 hosts x 2 ranks and 4 hosts x 1 rank, each host with its own soft-RoCE
//!   NIC (`.ci/rxe-vm/netns-rxe.sh`), every rank using exactly its host's HCA,
//!   RoCE packets counted on every NIC.
//!
//! Needs root and network namespaces (iproute2, util-linux): without them the
//! tests print `SKIPPED:` and the reason and pass, unless
//! `FERROCCL_REQUIRE_NETNS=1` (set by `.ci/run`), where they fail. Nothing
//! here depends on timing except generous bounds on waits.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/netns-cluster.sh")
}

fn have_cmd(name: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|d| d.join(name).is_file())
}

/// Why a cluster cannot be made here, if it cannot.
fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: network, UTS and mount namespaces need CAP_SYS_ADMIN".into());
    }
    for (cmd, pkg) in [("ip", "iproute2"), ("unshare", "util-linux"), ("nsenter", "util-linux")] {
        if !have_cmd(cmd) {
            return Some(format!("`{cmd}` is not installed (Debian package {pkg})"));
        }
    }
    match Command::new("unshare").args(["--net", "--uts", "true"]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "network namespaces are not available: `unshare --net --uts true`: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("cannot run unshare: {e}")),
    }
}

/// `true` when the test may run; else prints why and returns `false`, or panics
/// under `FERROCCL_REQUIRE_NETNS=1`.
fn netns_available() -> bool {
    let Some(why) = unavailable() else {
        return true;
    };
    assert!(
        std::env::var("FERROCCL_REQUIRE_NETNS").as_deref() != Ok("1"),
        "FERROCCL_REQUIRE_NETNS=1 but {why}"
    );
    println!("SKIPPED: {why}");
    false
}

/// Serializes the tests' `up` and `down` (the first `ip netns add` on a fresh
/// machine sets up `/run/netns`; two at once need not race there).
static SCRIPT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn script_lock() -> std::sync::MutexGuard<'static, ()> {
    SCRIPT_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A cluster made for one test (`t<pid><tag>`), removed on drop.
struct Cluster {
    name: String,
}

impl Cluster {
    fn up(tag: &str, hosts: usize) -> Cluster {
        Cluster::up_with(tag, hosts, &[])
    }

    /// [`Cluster::up`] with more `up` options (e.g. `--two-nics`).
    fn up_with(tag: &str, hosts: usize, opts: &[&str]) -> Cluster {
        remove_stale_test_clusters();
        let _serial = script_lock();
        let name = format!("t{}{tag}", std::process::id());
        let o = Command::new(script())
            .args(["--name", &name, "up", &hosts.to_string()])
            .args(opts)
            .output()
            .expect("run netns-cluster.sh");
        assert!(
            o.status.success(),
            "netns-cluster.sh up {hosts} failed ({}):\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        Cluster { name }
    }

    fn host(&self, i: usize) -> String {
        format!("{}-h{i}", self.name)
    }

    fn script(&self, args: &[&str]) -> Output {
        let o = Command::new(script())
            .args(["--name", &self.name])
            .args(args)
            .output()
            .expect("run netns-cluster.sh");
        assert!(
            o.status.success(),
            "netns-cluster.sh {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _serial = script_lock();
        let o = Command::new(script()).args(["--name", &self.name, "down"]).output();
        if let Ok(o) = o
            && !o.status.success()
        {
            eprintln!("netns-cluster.sh down: {}", String::from_utf8_lossy(&o.stderr));
        }
    }
}

/// Removes clusters of earlier runs of these tests whose process is gone (a
/// test killed before its drop ran): names `t<pid><letters>` only.
fn remove_stale_test_clusters() {
    let _serial = script_lock();
    let Ok(o) = Command::new(script()).arg("list").output() else {
        return;
    };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(rest) = name.strip_prefix('t') else {
            continue;
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(pid) = digits.parse::<u32>() else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new(script()).args(["--name", name, "down"]).output();
        }
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferroccl-netns-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// `ferroccl-perf --hosts 2 --ranks 4 --cluster <c>` with `args`, every rank's
/// INFO log in `debug_dir`, the caller's NCCL_*/FERROCCL_* left out.
fn perf_command(c: &Cluster, debug_dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Command {
    perf_command_on(c, 2, 4, debug_dir, env, args)
}

/// [`perf_command`] on `hosts` hosts with `ranks` ranks in all.
fn perf_command_on(
    c: &Cluster,
    hosts: usize,
    ranks: usize,
    debug_dir: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferroccl-perf"));
    cmd.args([
        "--hosts",
        &hosts.to_string(),
        "--ranks",
        &ranks.to_string(),
        "--cluster",
        &c.name,
    ])
    .args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_") || k.starts_with("FERROCCL_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("NCCL_NET_PLUGIN", "socket")
        .env("NCCL_DEBUG", "INFO")
        .env("NCCL_DEBUG_SUBSYS", "INIT")
        .env("NCCL_DEBUG_FILE", debug_dir.join("%h.%p.log"))
        .env("FERROCCL_TIMEOUT_SEC", "60");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Result rows of the table.
fn rows(out: &str) -> Vec<Vec<&str>> {
    out.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// Host name of every rank, from the `#  Rank r … on HOST device …` lines.
fn rank_hosts(out: &str) -> BTreeMap<usize, String> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.strip_prefix("#  Rank ")?.split_whitespace().collect();
            let on = f.iter().position(|w| *w == "on")?;
            Some((f[0].parse().ok()?, f.get(on + 1)?.to_string()))
        })
        .collect()
}

/// Every rank's INFO lines (the text after `NCCL INFO `), by rank.
fn info_lines(dir: &Path) -> BTreeMap<usize, Vec<String>> {
    let mut by_rank: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("debug dir").flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for l in text.lines() {
            // `host:pid:tid [rank] NCCL INFO text`
            let Some((head, msg)) = l.split_once(" NCCL INFO ") else {
                continue;
            };
            let Some(rank) = head
                .rsplit_once('[')
                .and_then(|(_, r)| r.strip_suffix(']'))
                .and_then(|r| r.parse().ok())
            else {
                continue;
            };
            by_rank.entry(rank).or_default().push(msg.to_string());
        }
    }
    by_rank
}

/// `Channel 00/0 : 0[0] -> 2[0] [send] via NET/FerrocclSocket/0` -> (0, 2, "NET").
fn connection(line: &str) -> Option<(usize, usize, String)> {
    let rest = line.strip_prefix("Channel ")?;
    let (_, rest) = rest.split_once(" : ")?;
    let (a, rest) = rest.split_once(" -> ")?;
    let a = a.split('[').next()?.trim().parse().ok()?;
    let b = rest.split('[').next()?.trim().parse().ok()?;
    let via = rest.split(" via ").nth(1)?.split('/').next()?.to_string();
    Some((a, b, via))
}

/// Checks one run: success, a clean summary, `#wrong` 0 in every row, ranks 0
/// and 1 on host 0 and ranks 2 and 3 on host 1, NET exactly between hosts, SHM
/// exactly inside them. Returns stdout and the INFO lines.
fn check_run(c: &Cluster, what: &str, o: &Output, debug_dir: &Path) -> (String, BTreeMap<usize, Vec<String>>) {
    check_run_on(c, 2, 4, what, o, debug_dir)
}

/// [`check_run`] of a run on `hosts` hosts with `ranks` ranks in all (in
/// blocks of `ranks / hosts` per host); with one rank per host there is no SHM.
fn check_run_on(
    c: &Cluster,
    hosts: usize,
    ranks: usize,
    what: &str,
    o: &Output,
    debug_dir: &Path,
) -> (String, BTreeMap<usize, Vec<String>>) {
    let per = ranks / hosts;
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{what}: exit {}\n{out}\n{err}", o.status);
    assert!(
        out.contains("# Out of bounds values : 0 OK"),
        "{what}: no clean summary:\n{out}\n{err}"
    );
    assert!(
        out.contains(&format!("nranks {ranks} (--hosts {hosts} --ranks)")),
        "{what}: not a --hosts run:\n{out}"
    );
    let rows = rows(&out);
    assert!(rows.len() >= 2, "{what}: expected size rows:\n{out}");
    for r in &rows {
        assert_eq!(r.len(), 13, "{what}: malformed row {r:?}");
        assert_eq!(r[8], "0", "{what}: out-of-place #wrong in {r:?}");
        assert!(r[12] == "0" || r[12] == "N/A", "{what}: in-place #wrong in {r:?}");
    }
    let hosts = rank_hosts(&out);
    let want: BTreeMap<usize, String> = (0..ranks).map(|r| (r, c.host(r / per))).collect();
    assert_eq!(hosts, want, "{what}: ranks not on their hosts:\n{out}");
    let info = info_lines(debug_dir);
    assert_eq!(
        info.keys().copied().collect::<Vec<_>>(),
        (0..ranks).collect::<Vec<_>>(),
        "{what}: INFO lines of every rank expected in {}",
        debug_dir.display()
    );
    let (mut net, mut shm) = (0, 0);
    for (rank, lines) in &info {
        for l in lines {
            let Some((a, b, via)) = connection(l) else {
                continue;
            };
            let same_host = a / per == b / per;
            match via.as_str() {
                "NET" => {
                    assert!(
                        !same_host,
                        "{what}: rank {rank}: ranks on one host connected by the network: {l}"
                    );
                    net += 1;
                }
                "SHM" => {
                    assert!(
                        same_host,
                        "{what}: rank {rank}: ranks on two hosts connected by shm: {l}"
                    );
                    shm += 1;
                }
                other => panic!("{what}: rank {rank}: unexpected transport {other}: {l}"),
            }
        }
    }
    assert!(
        net > 0 && (per == 1 || shm > 0),
        "{what}: expected NET{} connections, found {net} and {shm} SHM",
        if per > 1 { " and SHM" } else { "" }
    );
    (out, info)
}

const COLLECTIVES: [&str; 7] = [
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "sendrecv",
    "alltoall",
];

#[test]
fn two_hosts_two_ranks_each_run_every_collective_over_net_and_shm() {
    if !netns_available() {
        return;
    }
    let c = Cluster::up("m", 2);
    let t = Instant::now();
    let sizes = ["-b", "8", "-e", "2M", "-f", "16", "-n", "2", "-w", "1", "-c", "1"];
    for op in COLLECTIVES {
        let dir = scratch(op);
        let topo = dir.join("topo.xml");
        let topo_env = topo.display().to_string();
        let mut env = vec![];
        if op == "all_reduce" {
            env.push(("NCCL_TOPO_DUMP_FILE", topo_env.as_str()));
        }
        let dbg = dir.join("debug");
        std::fs::create_dir_all(&dbg).unwrap();
        // Root on the second host for broadcast and reduce.
        let o = perf_command(&c, &dbg, &env, &[op])
            .args(sizes)
            .args(["-r", "3"])
            .output()
            .expect("run ferroccl-perf");
        let (_, info) = check_run(&c, op, &o, &dbg);
        if op == "all_reduce" {
            compare_with_topo_explorer(&info, &topo);
        }
        println!("{op}: ok ({:?} so far)", t.elapsed());
        let _ = std::fs::remove_dir_all(&dir);
    }
    // Every datatype and reduction of AllReduce across the hosts.
    let dir = scratch("all");
    let o = perf_command(&c, &dir, &[], &["all_reduce", "-b", "64", "-e", "64K", "-f", "1024"])
        .args(["-d", "all", "-o", "all", "-n", "1", "-w", "1", "-c", "1"])
        .output()
        .expect("run ferroccl-perf");
    let (out, _) = check_run(&c, "all_reduce -d all -o all", &o, &dir);
    assert_eq!(rows(&out).len(), 2 * 10 * 6, "2 sizes x 10 types x 6 ops:\n{out}");
    let _ = std::fs::remove_dir_all(&dir);
    // Ring and Tree forced across the nodes (NCCL_ALGO's grammar): the tuning
    // line of every size shows the algorithm asked for.
    for (algo, name) in [("allreduce:ring", "Ring"), ("allreduce:tree", "Tree")] {
        let dir = scratch(name);
        let o = perf_command(&c, &dir, &[("NCCL_ALGO", algo)], &["all_reduce", "--show-tuning"])
            .args(["-b", "8", "-e", "1M", "-f", "64", "-n", "1", "-w", "1", "-c", "1"])
            .output()
            .expect("run ferroccl-perf");
        let (out, _) = check_run(&c, algo, &o, &dir);
        let tuning: Vec<&str> = out.lines().filter(|l| l.starts_with("#  tuning:")).collect();
        assert_eq!(tuning.len(), rows(&out).len(), "{algo}: a tuning line per size:\n{out}");
        for l in tuning {
            assert!(l.contains(name), "{algo}: tuning chose something else: {l}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    // A tuner plugin sees nNodes = 2: NCCL's example-tuner CSV rules, Ring on one
    // node and Tree on two; every size here must be Tree, chosen by the tuner.
    let dir = scratch("tuner");
    let rules = dir.join("rules.csv");
    std::fs::write(
        &rules,
        "allreduce,0,1073741824,ring,simple,-1,1,-1\nallreduce,0,1073741824,tree,simple,-1,2,-1\n",
    )
    .unwrap();
    let rules_env = rules.display().to_string();
    let dbg = dir.join("debug");
    std::fs::create_dir_all(&dbg).unwrap();
    let o = perf_command(
        &c,
        &dbg,
        &[("NCCL_TUNER_PLUGIN", "rules"), ("NCCL_TUNER_CONFIG_FILE", &rules_env)],
        &["all_reduce", "--show-tuning"],
    )
    .args(["-b", "8", "-e", "1M", "-f", "64", "-n", "1", "-w", "1", "-c", "1"])
    .output()
    .expect("run ferroccl-perf");
    let (out, _) = check_run(&c, "tuner rules", &o, &dbg);
    let tuning: Vec<&str> = out.lines().filter(|l| l.starts_with("#  tuning:")).collect();
    assert_eq!(tuning.len(), rows(&out).len(), "a tuning line per size:\n{out}");
    for l in tuning {
        assert!(
            l.contains("Tree/") && l.contains("(tuner)"),
            "the nNodes = 2 rule did not apply: {l}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("matrix on 2 hosts x 2 ranks: {:?}", t.elapsed());
}

/// One `ferroccl-perf` run over CollNet across hosts, as the CollNet tests
/// make it: `coll` with `--show-tuning` on `ranks` ranks of `hosts` hosts of
/// `c` with `env` (64 B and 256 KiB, every datatype and `-o all`, one
/// iteration; debug files in `dir`). Checks the run ([`check_run_on`]),
/// `2 x 10 x nops` result rows (sizes x datatypes x reductions) and a tuning
/// line per row naming `algo` on the Simple protocol; `what` names the run in
/// the messages. Returns every rank's INFO lines.
#[allow(clippy::too_many_arguments)]
fn check_collnet_run(
    c: &Cluster,
    hosts: usize,
    ranks: usize,
    dir: &Path,
    env: &[(&str, &str)],
    coll: &str,
    nops: usize,
    algo: &str,
    what: &str,
) -> BTreeMap<usize, Vec<String>> {
    let o = perf_command_on(c, hosts, ranks, dir, env, &[coll, "--show-tuning"])
        .args(["-b", "64", "-e", "256K", "-f", "4096", "-d", "all", "-o", "all"])
        .args(["-n", "1", "-w", "1", "-c", "1"])
        .output()
        .expect("run ferroccl-perf");
    let (out, info) = check_run_on(c, hosts, ranks, what, &o, dir);
    assert_eq!(
        rows(&out).len(),
        2 * 10 * nops,
        "{what}: 2 sizes x 10 types x {nops} ops:\n{out}"
    );
    let tuning: Vec<&str> = out.lines().filter(|l| l.starts_with("#  tuning:")).collect();
    assert_eq!(tuning.len(), rows(&out).len(), "{what}: a tuning line per row:\n{out}");
    for l in tuning {
        assert!(l.contains(&format!("{algo}/Simple")), "{what}: not {algo}: {l}");
    }
    info
}

/// CollNet across hosts (issue 32): the in-tree CollNet plugin
/// (`libnccl-net-collnet-socket.so`, its own aggregation over TCP) with
/// `NCCL_COLLNET_ENABLE=1` and CollNetChain forced for AllReduce. On 2 hosts x 2
/// ranks each channel's chain is two ranks (shared memory up to the head, the
/// plugin's `iallreduce` between the heads, shared memory down) over every
/// datatype and reduction; on 4 hosts x 1 rank every rank is a head. Every
/// result checked; every rank logs its collComm per channel (`via COLLNET`)
/// and `CollNet enabled`; every tuning line says CollNetChain.
#[test]
fn collnet_chain_allreduce_across_hosts_over_the_collnet_socket_plugin() {
    if !netns_available() {
        return;
    }
    let env = [
        ("NCCL_NET_PLUGIN", "collnet-socket"),
        ("NCCL_COLLNET_ENABLE", "1"),
        ("NCCL_ALGO", "allreduce:collnetchain"),
    ];
    for (hosts, ranks, tag) in [(2, 4, "cn"), (4, 4, "cq")] {
        let c = Cluster::up(tag, hosts);
        let dir = scratch(tag);
        let what = format!("CollNetChain on {hosts} hosts x {} ranks", ranks / hosts);
        let info = check_collnet_run(&c, hosts, ranks, &dir, &env, "all_reduce", 6, "CollNetChain", &what);
        for (rank, lines) in &info {
            assert!(
                lines
                    .iter()
                    .any(|l| l.starts_with("CollNet enabled: plugin FerrocclCollNetSocket")),
                "{what}: rank {rank} did not enable CollNet:\n{}",
                lines.join("\n")
            );
            // A head per host and channel: with one rank per host, every channel.
            let heads = lines
                .iter()
                .filter(|l| l.starts_with("CollNet ") && l.contains("[send] via COLLNET/FerrocclCollNetSocket"))
                .count();
            if ranks == hosts {
                assert!(heads >= 1, "{what}: rank {rank} heads no channel");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// AllGather and ReduceScatter over CollNet (CollNetDirect, the plugin's
/// `iallgather` / `ireducescatter` with one SGE part per rank) across hosts
/// over the in-tree CollNet plugin, forced by `NCCL_ALGO`: on 2 hosts x 2
/// ranks and 4 hosts x 1, every datatype (ReduceScatter: every reduction),
/// every result checked by the perf tool; every `--show-tuning` line says
/// CollNetDirect/Simple; every rank logs which of the two run over CollNet.
#[test]
fn collnet_allgather_reducescatter_across_hosts_over_the_collnet_socket_plugin() {
    if !netns_available() {
        return;
    }
    let env = [
        ("NCCL_NET_PLUGIN", "collnet-socket"),
        ("NCCL_COLLNET_ENABLE", "1"),
        ("NCCL_ALGO", "allgather:collnetdirect;reducescatter:collnetdirect"),
    ];
    for (hosts, ranks, tag) in [(2, 4, "ag"), (4, 4, "aq")] {
        let c = Cluster::up(tag, hosts);
        for (coll, nops) in [("all_gather", 1), ("reduce_scatter", 6)] {
            let dir = scratch(&format!("{tag}{coll}"));
            let what = format!("{coll} over CollNet on {hosts} hosts x {} ranks", ranks / hosts);
            let info = check_collnet_run(&c, hosts, ranks, &dir, &env, coll, nops, "CollNetDirect", &what);
            for (rank, lines) in &info {
                assert!(
                    lines
                        .iter()
                        .any(|l| l.starts_with("CollNet AllGather on ReduceScatter on (CollNetDirect")),
                    "{what}: rank {rank} did not log CollNet AllGather/ReduceScatter:\n{}",
                    lines.join("\n")
                );
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// The rings and trees the ranks built equal `ferroccl-topo --nodes 2` on
/// rank 0's dumped topology; and each ring enters and leaves each host once.
fn compare_with_topo_explorer(info: &BTreeMap<usize, Vec<String>>, topo: &Path) {
    assert!(topo.exists(), "NCCL_TOPO_DUMP_FILE {} was not written", topo.display());
    let o = Command::new(env!("CARGO_BIN_EXE_ferroccl-topo"))
        .arg(topo)
        .args(["--nodes", "2"])
        .output()
        .expect("run ferroccl-topo");
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "ferroccl-topo: {}\n{report}",
        String::from_utf8_lossy(&o.stderr)
    );
    let offline_rings: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("Channel ") && !l.contains("->"))
        .collect();
    let live_rings: Vec<&str> = info[&0]
        .iter()
        .map(String::as_str)
        .filter(|l| l.starts_with("Channel ") && !l.contains("->"))
        .collect();
    assert!(
        !live_rings.is_empty(),
        "rank 0 logged no ring (Channel xx/yy : …) lines"
    );
    assert_eq!(
        live_rings, offline_rings,
        "rings of the run vs ferroccl-topo --nodes 2:\n{report}"
    );
    for ring in &live_rings {
        let ranks: Vec<usize> = ring
            .split(" : ")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .map(|r| r.parse().unwrap())
            .collect();
        let crossings = (0..ranks.len())
            .filter(|&i| ranks[i] / 2 != ranks[(i + 1) % ranks.len()] / 2)
            .count();
        assert_eq!(
            crossings, 2,
            "{ring}: a ring must leave each of the 2 hosts exactly once"
        );
    }
    for (rank, lines) in info {
        let live: Vec<&str> = lines
            .iter()
            .map(String::as_str)
            .filter(|l| l.starts_with("Trees "))
            .collect();
        let offline: Vec<&str> = report
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("rank {rank:>3}: ")))
            .filter(|l| l.starts_with("Trees "))
            .collect();
        assert_eq!(live.len(), 1, "rank {rank}: one Trees line expected, found {live:?}");
        assert_eq!(
            live, offline,
            "rank {rank}: trees of the run vs ferroccl-topo --nodes 2:\n{report}"
        );
    }
}

/// Ranks named in a `diagnosis: rank(s) A, B stopped responding` line.
fn stopped_ranks(line: &str) -> Option<BTreeSet<usize>> {
    let rest = line.split("diagnosis: ").nth(1)?;
    let (list, _) = rest.split_once(" stopped responding")?;
    let list = list.strip_prefix("ranks ").or_else(|| list.strip_prefix("rank "))?;
    list.split(", ").map(|r| r.trim().parse().ok()).collect()
}

/// How a run that only a fault ends, ended.
struct Faulted {
    status: std::process::ExitStatus,
    /// From the fault to the exit of process 0 (which waits for its children).
    took: Duration,
    err: String,
}

/// The watchdog of the fault runs (`FERROCCL_TIMEOUT_SEC`).
const FAULT_TIMEOUT_SEC: u64 = 10;

/// Starts AllReduces of 1 MiB on 2 hosts x 2 ranks in a loop that only a
/// failure ends (`-N 0`), applies `fault` once results are printed (the
/// collectives are running), and waits, bounded, for the run to end.
fn fault_mid_collective(c: &Cluster, fault: &[&str]) -> Faulted {
    let dir = scratch(&format!("fault-{}", c.name));
    let mut child = perf_command(
        c,
        &dir,
        &[("FERROCCL_TIMEOUT_SEC", &FAULT_TIMEOUT_SEC.to_string())],
        &["all_reduce"],
    )
    .args(["-b", "1M", "-e", "1M", "-N", "0", "-n", "5", "-w", "1", "-c", "0"])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn ferroccl-perf");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if !line.starts_with('#') && !line.trim().is_empty() {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
        s
    });
    if rx.recv_timeout(Duration::from_secs(120)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "no result row within 120 s:\n{}\n{}",
            reader.join().unwrap(),
            err_reader.join().unwrap()
        );
    }
    c.script(fault);
    let t0 = Instant::now();
    // The watchdog, then the failure reports' exchange (at most min(timeout, 10 s)),
    // with a generous margin for a loaded machine.
    let bound = Duration::from_secs(2 * FAULT_TIMEOUT_SEC + 60);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{fault:?}: the ranks did not fail within {bound:?} (a hang):\n{}",
                err_reader.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let took = t0.elapsed();
    let out = reader.join().unwrap();
    let err = err_reader.join().unwrap();
    println!("{fault:?} -> the run ended in {took:?} (FERROCCL_TIMEOUT_SEC={FAULT_TIMEOUT_SEC}):\n{err}");
    assert!(!status.success(), "{fault:?}: the run succeeded:\n{out}\n{err}");
    let _ = std::fs::remove_dir_all(&dir);
    Faulted { status, took, err }
}

/// Rank `rank`'s error and the ranks its diagnosis says stopped responding.
fn diagnosis_of(err: &str, rank: usize) -> (String, BTreeSet<usize>) {
    let prefix = format!("ferroccl-perf: rank {rank}: ");
    let at = err
        .find(&prefix)
        .unwrap_or_else(|| panic!("rank {rank} printed no error:\n{err}"));
    let diag = err[at..]
        .lines()
        .take(3)
        .find(|l| l.contains("diagnosis: "))
        .unwrap_or_else(|| panic!("rank {rank}'s error has no diagnosis:\n{err}"));
    let named = stopped_ranks(diag).unwrap_or_else(|| panic!("rank {rank}: diagnosis names no stopped rank: {diag}"));
    (diag.trim().to_string(), named)
}

#[test]
fn a_host_link_down_mid_collective_fails_every_rank_naming_the_other_host() {
    if !netns_available() {
        return;
    }
    let c = Cluster::up("l", 2);
    let f = fault_mid_collective(&c, &["link", "1", "down"]);
    // Every rank on both sides of the cut: exactly the other host's ranks are named.
    for rank in 0..4usize {
        let (diag, named) = diagnosis_of(&f.err, rank);
        let other: BTreeSet<usize> = if rank < 2 { [2, 3].into() } else { [0, 1].into() };
        assert_eq!(
            named, other,
            "rank {rank}: diagnosis should name the other host's ranks: {diag}"
        );
        assert!(diag.contains("unreachable"), "rank {rank}: {diag}");
    }
    assert!(f.took < Duration::from_secs(2 * FAULT_TIMEOUT_SEC + 60), "{:?}", f.took);
}

#[test]
fn a_host_killed_mid_collective_fails_the_survivors_with_one_diagnosis() {
    if !netns_available() {
        return;
    }
    let c = Cluster::up("k", 2);
    let f = fault_mid_collective(&c, &["kill", "1", "KILL"]);
    assert_eq!(f.status.code(), Some(1), "{:?}", f.status);
    // The survivors (host 0) agree, word for word, that host 1's ranks are gone.
    let (d0, n0) = diagnosis_of(&f.err, 0);
    let (d1, n1) = diagnosis_of(&f.err, 1);
    assert_eq!(n1, n0, "{d1}");
    assert_eq!(n0, BTreeSet::from([2, 3]), "{d0}");
    assert_eq!(d0, d1, "the survivors' diagnoses differ");
    // The launcher names the killed processes and their host.
    for p in [2, 3] {
        assert!(
            f.err
                .lines()
                .any(|l| l.contains(&format!("process {p} (")) && l.contains(&c.host(1)) && l.contains("SIGKILL")),
            "process {p} on {} not reported killed:\n{}",
            c.host(1),
            f.err
        );
    }
}

/// The IB plugin for the `ib_*` tests, or `None` (and why, printed) where they
/// cannot run: they need RDMA verbs, so they run inside the soft-RoCE guest,
/// where `scripts/ib-vm-test.sh` sets `FERROCCL_NETNS_IB_PLUGIN` to
/// `libnccl_net_ib.so`; anywhere else they print `SKIPPED:` and pass.
fn ib_plugin() -> Option<String> {
    if !netns_available() {
        return None;
    }
    match std::env::var("FERROCCL_NETNS_IB_PLUGIN") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            println!(
                "SKIPPED: FERROCCL_NETNS_IB_PLUGIN is unset (the IB tests run in the soft-RoCE guest: scripts/ib-vm-test.sh)"
            );
            None
        }
    }
}

/// One soft-RoCE NIC per host of a cluster (`.ci/rxe-vm/netns-rxe.sh up`),
/// removed on drop; declare it after its [`Cluster`] so it goes first.
struct RxeNics {
    cluster: String,
    hosts: usize,
}

impl RxeNics {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/rxe-vm/netns-rxe.sh")
    }

    fn up(c: &Cluster, hosts: usize) -> RxeNics {
        let _serial = script_lock();
        let o = Command::new(Self::script())
            .args(["--name", &c.name, "up"])
            .output()
            .expect("run netns-rxe.sh");
        assert!(
            o.status.success(),
            "netns-rxe.sh up failed ({}):\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        print!("{}", String::from_utf8_lossy(&o.stdout));
        RxeNics {
            cluster: c.name.clone(),
            hosts,
        }
    }

    /// Host `i`'s RDMA device.
    fn device(&self, i: usize) -> String {
        format!("{}-h{i}-rxe", self.cluster)
    }

    /// Port counter `name` of host `i`'s device (rxe's `hw_counters`).
    fn counter(&self, i: usize, name: &str) -> u64 {
        let p = format!("/sys/class/infiniband/{}/ports/1/hw_counters/{name}", self.device(i));
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{p}: {e}"))
            .trim()
            .parse::<u64>()
            .unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    /// RoCE packets host `i`'s device has sent and received.
    fn packets(&self, i: usize) -> (u64, u64) {
        (self.counter(i, "sent_pkts"), self.counter(i, "rcvd_pkts"))
    }
}

impl Drop for RxeNics {
    fn drop(&mut self) {
        let _serial = script_lock();
        let o = Command::new(Self::script())
            .args(["--name", &self.cluster, "down"])
            .output();
        if let Ok(o) = o
            && !o.status.success()
        {
            eprintln!("netns-rxe.sh down: {}", String::from_utf8_lossy(&o.stderr));
        }
    }
}

/// The IB plugin's part of a run's INFO lines: every rank uses exactly one
/// HCA, its own host's; every connection between hosts goes
/// `via NET/FerrocclIB/0`; the side channel is on the host's own eth0.
fn check_ib_lines(what: &str, nics: &RxeNics, per: usize, info: &BTreeMap<usize, Vec<String>>) {
    for (rank, lines) in info {
        let host = rank / per;
        let ports: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("NET/FerrocclIB: ") && l.contains(" RoCE GID index "))
            .collect();
        let mine = format!("NET/FerrocclIB: {}:1 RoCE", nics.device(host));
        assert!(
            ports.len() == 1 && ports[0].starts_with(&mine),
            "{what}: rank {rank} should use exactly {}: {ports:?}",
            nics.device(host)
        );
        for l in lines {
            if let Some((_, _, via)) = connection(l)
                && via == "NET"
            {
                assert!(l.contains("via NET/FerrocclIB/0"), "{what}: rank {rank}: {l}");
            }
        }
        // A rank that receives over the network listened: on its host's eth0.
        let receives = lines
            .iter()
            .any(|l| l.contains("[receive] via NET/") && connection(l).is_some());
        let side = format!("side channel on eth0 198.18.0.{}", host + 1);
        assert!(
            !receives || lines.iter().any(|l| l.contains(&side)),
            "{what}: rank {rank}: no `{side}` line (the GID's address is not in the host's namespace)"
        );
    }
}

/// The collective matrix over the IB plugin on `hosts` hosts with `ranks`
/// ranks: every collective (8 B … 256 KiB, root on the last rank), with
/// `dtypes` AllReduce over every datatype and reduction, Ring and Tree forced;
/// every result checked, NET/FerrocclIB exactly between hosts and SHM inside
/// them, and RoCE packets sent and received by every host's NIC.
fn ib_matrix(so: &str, hosts: usize, ranks: usize, tag: &str, dtypes: bool) {
    let c = Cluster::up(tag, hosts);
    let nics = RxeNics::up(&c, hosts);
    let per = ranks / hosts;
    let t = Instant::now();
    let before: Vec<(u64, u64)> = (0..nics.hosts).map(|i| nics.packets(i)).collect();
    let env = [("NCCL_NET_PLUGIN", so), ("FERROCCL_NET_STRICT", "1")];
    let run = |what: &str, extra_env: &[(&str, &str)], args: &[&str]| {
        let dir = scratch(&format!("ib{tag}-{what}"));
        let mut all_env = env.to_vec();
        all_env.extend_from_slice(extra_env);
        let o = perf_command_on(&c, hosts, ranks, &dir, &all_env, args)
            .output()
            .expect("run ferroccl-perf");
        let (out, info) = check_run_on(&c, hosts, ranks, what, &o, &dir);
        check_ib_lines(what, &nics, per, &info);
        let _ = std::fs::remove_dir_all(&dir);
        println!("{what}: ok ({:?} so far)", t.elapsed());
        out
    };
    let root = (ranks - 1).to_string();
    for op in COLLECTIVES {
        run(
            op,
            &[],
            &[
                op, "-b", "8", "-e", "256K", "-f", "32", "-n", "1", "-w", "1", "-c", "1", "-r", &root,
            ],
        );
    }
    if dtypes {
        let out = run(
            "all_reduce -d all -o all",
            &[],
            &[
                "all_reduce",
                "-b",
                "1K",
                "-e",
                "1K",
                "-d",
                "all",
                "-o",
                "all",
                "-n",
                "1",
                "-w",
                "1",
                "-c",
                "1",
            ],
        );
        assert_eq!(rows(&out).len(), 10 * 6, "10 types x 6 ops:\n{out}");
    }
    for (algo, name) in [("allreduce:ring", "Ring"), ("allreduce:tree", "Tree")] {
        let out = run(
            algo,
            &[("NCCL_ALGO", algo)],
            &[
                "all_reduce",
                "--show-tuning",
                "-b",
                "8",
                "-e",
                "64K",
                "-f",
                "32",
                "-n",
                "1",
                "-w",
                "1",
                "-c",
                "1",
            ],
        );
        let tuning: Vec<&str> = out.lines().filter(|l| l.starts_with("#  tuning:")).collect();
        assert_eq!(tuning.len(), rows(&out).len(), "{algo}: a tuning line per size:\n{out}");
        for l in tuning {
            assert!(l.contains(name), "{algo}: tuning chose something else: {l}");
        }
    }
    for (i, (s0, r0)) in before.iter().enumerate() {
        let (s1, r1) = nics.packets(i);
        assert!(
            s1 > *s0 && r1 > *r0,
            "host {i}'s NIC {} moved no RoCE packets (sent {s0} -> {s1}, received {r0} -> {r1})",
            nics.device(i)
        );
        println!(
            "{}: {} RoCE packets sent, {} received; retransmissions: {}",
            nics.device(i),
            s1 - s0,
            r1 - r0,
            nics.counter(i, "completer_retry_err")
        );
    }
    println!("IB matrix on {hosts} hosts x {per} rank(s): {:?}", t.elapsed());
}

/// Issue 30, IB across hosts: the collective matrix over `libnccl-net-ib.so`
/// on 2 hosts x 2 ranks, each host with its own soft-RoCE NIC.
#[test]
fn ib_two_hosts_two_ranks_each_run_every_collective_over_net_ib_and_shm() {
    let Some(so) = ib_plugin() else {
        return;
    };
    ib_matrix(&so, 2, 4, "ib", true);
}

/// The same on 4 hosts x 1 rank (every connection over the IB plugin), but
/// for the datatype matrix (which the host layout does not change).
#[test]
fn ib_four_hosts_one_rank_each_run_every_collective_over_net_ib() {
    let Some(so) = ib_plugin() else {
        return;
    };
    ib_matrix(&so, 4, 4, "ib4", false);
}

fn netns_exists(name: &str) -> bool {
    let o = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .any(|l| l.split_whitespace().next() == Some(name))
}

/// The script's own promises: a failed `up` leaves nothing behind; it refuses
/// a name that is taken by a namespace it did not make, and `down` leaves
/// alone a namespace whose mark is not the cluster's (and keeps its journal,
/// so a later `down` finishes once the mark is right again).
#[test]
fn the_script_cleans_up_a_failed_up_and_touches_nothing_it_did_not_make() {
    if !netns_available() {
        return;
    }
    remove_stale_test_clusters();
    let _serial = script_lock();
    let name = format!("t{}s", std::process::id());
    let run = |args: &[&str]| {
        Command::new(script())
            .args(["--name", &name])
            .args(args)
            .output()
            .expect("run netns-cluster.sh")
    };
    let state = std::env::var_os("FERROCCL_NETNS_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/run/ferroccl-netns"), PathBuf::from)
        .join(&name);
    // 1. An MTU no veth takes: `up` fails after the switch namespace is made.
    let o = run(&["up", "2", "--mtu", "70000"]);
    assert!(!o.status.success(), "up with MTU 70000 succeeded");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("removing what it made"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for ns in ["sw", "h0", "h1"] {
        assert!(
            !netns_exists(&format!("{name}-{ns}")),
            "{name}-{ns} left behind by a failed up"
        );
    }
    assert!(!state.exists(), "{} left behind by a failed up", state.display());
    // 2. A namespace with one of the names `up` would use, made by someone else.
    let foreign = format!("{name}-h1");
    assert!(
        Command::new("ip")
            .args(["netns", "add", &foreign])
            .status()
            .unwrap()
            .success()
    );
    let o = run(&["up", "2"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(netns_exists(&foreign), "up removed a namespace it did not make");
    let _ = Command::new("ip").args(["netns", "del", &foreign]).status();
    assert!(
        !o.status.success() && err.contains("not made for this cluster"),
        "{err}"
    );
    assert!(!netns_exists(&format!("{name}-sw")) && !state.exists());
    // 3. A namespace whose mark changed: `down` leaves it and fails; with the mark
    // restored, `down` removes the rest.
    assert!(run(&["up", "1"]).status.success());
    let h0 = format!("{name}-h0");
    let mark = |m: &str| {
        assert!(
            Command::new("ip")
                .args(["-n", &h0, "link", "set", "lo", "alias", m])
                .status()
                .unwrap()
                .success()
        )
    };
    let first = std::fs::read_to_string(state.join("state")).expect("state file");
    let ours = {
        let f: Vec<&str> = first.lines().next().unwrap().split_whitespace().collect();
        format!("ferroccl-netns:{}:{}", f[1], f[2])
    };
    mark("someone-else");
    let o = run(&["down"]);
    assert!(!o.status.success(), "down succeeded though it left a namespace");
    assert!(String::from_utf8_lossy(&o.stderr).contains("left alone"));
    assert!(
        netns_exists(&h0),
        "down removed a namespace whose mark is not the cluster's"
    );
    mark(&ours);
    let o = run(&["down"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!netns_exists(&h0) && !netns_exists(&format!("{name}-sw")) && !state.exists());
}

/// Bytes sent and received so far by `nic` (`eth0`, `eth1`) of host `h`
/// (`/sys/class/net/<nic>/statistics`, read inside the host).
fn nic_bytes(c: &Cluster, h: usize, nic: &str) -> u64 {
    ["tx_bytes", "rx_bytes"]
        .iter()
        .map(|f| {
            let path = format!("/sys/class/net/{nic}/statistics/{f}");
            let o = c.script(&["exec", &h.to_string(), "--", "cat", &path]);
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<u64>()
                .unwrap_or_else(|e| panic!("{path} on host {h}: {e}"))
        })
        .sum()
}

/// The net device of every NET connection line (`… via NET/FerrocclSocket/2` → 2).
fn net_devs(info: &BTreeMap<usize, Vec<String>>) -> BTreeSet<usize> {
    info.values()
        .flatten()
        .filter(|l| matches!(connection(l), Some((_, _, ref via)) if via == "NET"))
        .filter_map(|l| l.rsplit('/').next()?.split_whitespace().next()?.parse().ok())
        .collect()
}

/// NIC fusion (issue 33) over two hosts with two NICs each (`eth0`, `eth1` on two
/// bridges): with `NCCL_NET_FORCE_MERGE=eth0,eth1` (automatic fusion off) every rank
/// makes the virtual device `eth0+eth1` (index 2), every NET connection uses it, and
/// both member interfaces of each host carry a fair share of the bytes (their
/// counters in `/sys/class/net/*/statistics`); by default (`NCCL_NET_MERGE_LEVEL`
/// PORT) the two virtual interfaces, ports of one made-up NIC, fuse alike; with
/// `NCCL_NET_MERGE_LEVEL=LOC` nothing is fused and the channels use devices 0 and 1.
#[test]
fn nic_fusion_stripes_each_connection_over_both_interfaces() {
    if !netns_available() {
        return;
    }
    let c = Cluster::up_with("f", 2, &["--two-nics"]);
    let args = [
        "all_reduce",
        "-b",
        "1M",
        "-e",
        "16M",
        "-f",
        "4",
        "-n",
        "4",
        "-w",
        "1",
        "-c",
        "1",
    ];
    let subsys = ("NCCL_DEBUG_SUBSYS", "INIT,GRAPH,ENV,NET");
    let runs: [(&str, Vec<(&str, &str)>); 3] = [
        (
            "forced",
            vec![
                subsys,
                ("NCCL_NET_FORCE_MERGE", "eth0,eth1"),
                ("NCCL_NET_MERGE_LEVEL", "LOC"),
            ],
        ),
        ("default", vec![subsys]),
        ("loc", vec![subsys, ("NCCL_NET_MERGE_LEVEL", "LOC")]),
    ];
    for (what, env) in runs {
        let dir = scratch(what);
        let before: Vec<u64> = (0..2)
            .flat_map(|h| ["eth0", "eth1"].map(|n| (h, n)))
            .map(|(h, n)| nic_bytes(&c, h, n))
            .collect();
        let o = perf_command_on(&c, 2, 2, &dir, &env, &args)
            .output()
            .expect("run ferroccl-perf");
        let (_, info) = check_run_on(&c, 2, 2, what, &o, &dir);
        let after: Vec<u64> = (0..2)
            .flat_map(|h| ["eth0", "eth1"].map(|n| (h, n)))
            .map(|(h, n)| nic_bytes(&c, h, n))
            .collect();
        let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        println!("{what}: bytes moved (h0 eth0, h0 eth1, h1 eth0, h1 eth1): {delta:?}");
        let made = |r: usize| info[&r].iter().any(|l| l == "TOPO/NET : Made vNic 2");
        let devs = net_devs(&info);
        if what == "loc" {
            assert!(!made(0) && !made(1), "{what}: no fusion expected");
            assert!(
                devs.iter().all(|&d| d < 2),
                "{what}: physical devices only, got {devs:?}"
            );
            continue;
        }
        for r in 0..2 {
            assert!(made(r), "{what}: rank {r} made no vNic:\n{}", info[&r].join("\n"));
        }
        if what == "forced" {
            assert!(
                info[&0]
                    .iter()
                    .any(|l| l == "TOPO/NET : Force-fusing NICs using NCCL_NET_FORCE_MERGE=eth0,eth1"),
                "{what}: no force-merge line"
            );
        }
        assert_eq!(
            devs,
            BTreeSet::from([2]),
            "{what}: every NET connection on the fused device"
        );
        // Each rank moves at least 2 x 16 MiB x 5 iterations; each member of each host
        // carries at least a quarter of its host's bytes.
        for h in 0..2 {
            let (e0, e1) = (delta[2 * h], delta[2 * h + 1]);
            assert!(e0 + e1 > 100 << 20, "{what}: host {h} moved only {e0} + {e1} bytes");
            assert!(
                e0.min(e1) * 4 >= e0 + e1,
                "{what}: host {h} did not stripe: eth0 {e0} bytes, eth1 {e1} bytes"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
