//! Multi-process harness for the collective tests: the test binary re-executes
//! itself once per rank (`<exe> <worker test> --exact`) with the rank, the rank
//! count and the unique id in the environment; each child joins a communicator
//! over the real socket plugin (found by the host's in-tree search next to the
//! test binary, `target/<profile>/libnccl_net_socket.so`) on loopback.
#![allow(dead_code)]

pub mod mock_mem;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferroccl::bootstrap::{BootstrapConfig, get_unique_id};
use ferroccl::{Comm, CommConfig, UniqueId};

pub const ENV_ROLE: &str = "FERROCCL_TEST_ROLE";
pub const ENV_RANK: &str = "FERROCCL_TEST_RANK";
pub const ENV_NRANKS: &str = "FERROCCL_TEST_NRANKS";
pub const ENV_ID: &str = "FERROCCL_TEST_ID";

/// What a child process was started as.
#[derive(Debug, Clone)]
pub struct Role {
    pub role: String,
    pub rank: usize,
    pub nranks: usize,
    pub id: UniqueId,
}

/// The role of this process when it is a child started by [`launch`] for `role`.
pub fn role(role: &str) -> Option<Role> {
    let r = std::env::var(ENV_ROLE).ok()?;
    if r != role {
        return None;
    }
    let rank = std::env::var(ENV_RANK).ok()?.parse().ok()?;
    let nranks = std::env::var(ENV_NRANKS).ok()?.parse().ok()?;
    let id = UniqueId::from_hex(&std::env::var(ENV_ID).ok()?).ok()?;
    Some(Role {
        role: r,
        rank,
        nranks,
        id,
    })
}

/// The directory holding the plugin `.so` files (`target/<profile>/`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// Fails with a clear message when the socket plugin has not been built.
pub fn require_socket_plugin() {
    let d = target_dir();
    let found = ["libnccl_net_socket.so", "libnccl-net-socket.so"]
        .iter()
        .any(|f| d.join(f).exists());
    assert!(
        found,
        "the socket plugin is not built in {}: run `cargo build --workspace` (scripts/test.sh does) first",
        d.display()
    );
}

/// Communicator config for tests: loopback bootstrap, bounded waits.
pub fn config(timeout: Duration) -> CommConfig {
    CommConfig {
        timeout: Some(timeout),
        bootstrap: Some(BootstrapConfig::loopback(timeout)),
        ..Default::default()
    }
}

/// Joins the communicator of `role`.
pub fn join(role: &Role, timeout: Duration) -> Comm {
    Comm::init_rank(role.nranks, &role.id, role.rank, config(timeout))
        .unwrap_or_else(|e| panic!("rank {}: init failed: {e}", role.rank))
}

/// Output of one child.
#[derive(Debug)]
pub struct Out {
    pub rank: usize,
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Starts `ranks` (a subset of `0..nranks`) as children running `test` in role
/// `role`, with `env` for all and `per_rank(rank)` extra variables each; waits
/// up to `limit` (then kills them) and returns their outputs.
pub fn launch(
    test: &str,
    role: &str,
    nranks: usize,
    ranks: &[usize],
    env: &[(&str, &str)],
    per_rank: impl Fn(usize) -> Vec<(String, String)>,
    limit: Duration,
) -> Vec<Out> {
    let id = get_unique_id(&BootstrapConfig::loopback(limit)).expect("unique id");
    launch_with_id(&id, test, role, nranks, ranks, env, per_rank, limit)
}

/// [`launch`] with a unique id made by the caller (e.g. whose root, living in this
/// process, has a short timeout).
#[allow(clippy::too_many_arguments)]
pub fn launch_with_id(
    id: &UniqueId,
    test: &str,
    role: &str,
    nranks: usize,
    ranks: &[usize],
    env: &[(&str, &str)],
    per_rank: impl Fn(usize) -> Vec<(String, String)>,
    limit: Duration,
) -> Vec<Out> {
    require_socket_plugin();
    let exe = std::env::current_exe().expect("current exe");
    let start = Instant::now();
    let mut children: Vec<(usize, Child)> = ranks
        .iter()
        .map(|&r| {
            let mut c = Command::new(&exe);
            c.args([test, "--exact", "--nocapture", "--test-threads=1"])
                .env(ENV_ROLE, role)
                .env(ENV_RANK, r.to_string())
                .env(ENV_NRANKS, nranks.to_string())
                .env(ENV_ID, id.to_hex())
                .env("NCCL_SOCKET_IFNAME", "lo")
                .env("NCCL_NET_PLUGIN", "socket")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in env {
                c.env(k, v);
            }
            for (k, v) in per_rank(r) {
                c.env(k, v);
            }
            (r, c.spawn().expect("spawn rank"))
        })
        .collect();
    // Drain pipes on threads so children never block on a full pipe.
    let mut readers = HashMap::new();
    for (r, c) in &mut children {
        let mut so = c.stdout.take().expect("stdout");
        let mut se = c.stderr.take().expect("stderr");
        let a = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut so, &mut s);
            s
        });
        let b = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut se, &mut s);
            s
        });
        readers.insert(*r, (a, b));
    }
    let mut outs = Vec::new();
    let mut done: HashMap<usize, (Option<std::process::ExitStatus>, Duration)> = HashMap::new();
    let mut hung: HashMap<usize, String> = HashMap::new();
    while done.len() < children.len() {
        for (r, c) in &mut children {
            if done.contains_key(r) {
                continue;
            }
            if let Ok(Some(s)) = c.try_wait() {
                done.insert(*r, (Some(s), start.elapsed()));
            } else if start.elapsed() > limit {
                // What the child was waiting on, before it is killed (never a
                // silent hang: issue 28).
                let report = ferroccl_test_watchdog::process_report(c.id());
                eprintln!("rank {r} overran {limit:?}; killing it. {report}");
                hung.insert(*r, report);
                let _ = c.kill();
                let _ = c.wait();
                done.insert(*r, (None, start.elapsed()));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for (r, _) in &children {
        let (a, b) = readers.remove(r).expect("reader");
        let (status, elapsed) = done[r];
        outs.push(Out {
            rank: *r,
            success: status.is_some_and(|s| s.success()),
            code: status.and_then(|s| s.code()),
            stdout: a.join().unwrap_or_default(),
            stderr: b.join().unwrap_or_default() + hung.get(r).map_or("", |h| h.as_str()),
            elapsed,
        });
    }
    outs
}

/// Every child's rank, time, success, stdout and stderr, for a failure message.
pub fn dump(outs: &[Out]) -> String {
    outs.iter()
        .map(|o| {
            format!(
                "--- rank {} ({:?}, success {})\n{}\n{}",
                o.rank, o.elapsed, o.success, o.stdout, o.stderr
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Panics with every child's output unless all succeeded.
pub fn assert_all_ok(outs: &[Out], what: &str) {
    if outs.iter().all(|o| o.success) {
        return;
    }
    let mut msg = format!("{what}: some ranks failed\n");
    for o in outs {
        msg.push_str(&format!(
            "--- rank {} (success {}, code {:?}, {:?})\nstdout:\n{}\nstderr:\n{}\n",
            o.rank, o.success, o.code, o.elapsed, o.stdout, o.stderr
        ));
    }
    panic!("{msg}");
}

use ferroccl::check::TestOp;
use ferroccl::{DataType, RedOp};

/// Runs one operation on this rank with checked data (seed 1); returns `#wrong`
/// (0 on ranks whose output is unspecified) or the operation's error
/// ([`TestOp::run_checked`], the launch code the perf tool shares).
pub fn run_op(
    comm: &Comm,
    top: TestOp,
    dtype: DataType,
    op: RedOp,
    count: usize,
    in_place: bool,
) -> Result<usize, ferroccl::Error> {
    top.run_checked(comm, dtype, op, count, in_place, 1)
}

/// Every op for `dtype` (the five built-ins and a PreMulSum by 2).
pub fn all_ops(dtype: DataType) -> Vec<RedOp> {
    vec![
        RedOp::Sum,
        RedOp::Prod,
        RedOp::Max,
        RedOp::Min,
        RedOp::Avg,
        RedOp::PreMulSum(ferroccl::Scalar::from_f64(dtype, 2.0)),
    ]
}

/// Runs the matrix `tops × dtypes × ops × {out, in place} × counts` on `comm`;
/// returns a list of failures (empty when all passed) and how many ops ran.
pub fn run_matrix(comm: &Comm, dtypes: &[DataType], ops: Option<&[RedOp]>, counts: &[usize]) -> (Vec<String>, usize) {
    let n = comm.nranks();
    let mut fails = Vec::new();
    let mut ran = 0;
    let reducing = [TestOp::AllReduce, TestOp::ReduceScatter, TestOp::Reduce { root: n - 1 }];
    let moving = [
        TestOp::AllGather,
        TestOp::Broadcast { root: n / 2 },
        TestOp::SendRecv,
        TestOp::AllToAll,
    ];
    for &count in counts {
        for &dtype in dtypes {
            // A PreMulSum in `ops` is re-encoded as "by 2" in each datatype.
            let list: Vec<RedOp> = ops
                .map(|o| {
                    o.iter()
                        .map(|op| match op {
                            RedOp::PreMulSum(_) => RedOp::PreMulSum(ferroccl::Scalar::from_f64(dtype, 2.0)),
                            other => *other,
                        })
                        .collect()
                })
                .unwrap_or_else(|| all_ops(dtype));
            let mut cases: Vec<(TestOp, RedOp)> = Vec::new();
            for &top in &reducing {
                for &op in &list {
                    cases.push((top, op));
                }
            }
            for &top in &moving {
                cases.push((top, RedOp::Sum));
            }
            for (top, op) in cases {
                for in_place in [false, true] {
                    // Send/receive in place would overlap the buffer being sent.
                    if in_place && matches!(top, TestOp::SendRecv | TestOp::AllToAll) {
                        continue;
                    }
                    ran += 1;
                    match run_op(comm, top, dtype, op, count, in_place) {
                        Ok(0) => {}
                        Ok(w) => fails.push(format!(
                            "rank {}: {top:?} {dtype} {op} count {count} in_place {in_place}: {w} wrong",
                            comm.rank()
                        )),
                        Err(e) => {
                            fails.push(format!(
                                "rank {}: {top:?} {dtype} {op} count {count} in_place {in_place}: error {e}",
                                comm.rank()
                            ));
                            return (fails, ran);
                        }
                    }
                }
            }
        }
    }
    (fails, ran)
}

/// A fresh, empty directory `<tmp>/ferroccl-<tag>-<pid>` for a test's output
/// (what an earlier run left there is removed first). Panics when it cannot be made.
pub fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferroccl-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

/// The send buffer of [`all_reduce_checked`] on rank `role.rank`: `i % ar_mod + rank`
/// at element `i` (f32).
pub fn ar_input(role: &Role, count: usize, ar_mod: usize) -> Vec<f32> {
    (0..count).map(|i| (i % ar_mod) as f32 + role.rank as f32).collect()
}

/// Runs on `comm` one AllReduce (sum, f32) of `send` (made by [`ar_input`] with
/// `ar_mod`) into `recv`, waits for it on `s`, and asserts every element of
/// `recv` (panics naming the first wrong one).
pub fn all_reduce_checked(
    comm: &Comm,
    role: &Role,
    send: &[f32],
    recv: &mut [f32],
    ar_mod: usize,
    s: &ferroccl::Stream,
) {
    use ferroccl::{DataType, RedOp};
    assert_eq!(send.len(), recv.len(), "AllReduce buffers of one length");
    // SAFETY: both buffers outlive the synchronize below.
    unsafe {
        comm.all_reduce(
            send.as_ptr().cast(),
            recv.as_mut_ptr().cast(),
            send.len(),
            DataType::Float32,
            RedOp::Sum,
            s,
        )
    }
    .expect("AllReduce");
    s.synchronize().expect("AllReduce completes");
    let n = role.nranks;
    let rank_sum: f32 = (0..n).map(|x| x as f32).sum();
    for (i, v) in recv.iter().enumerate() {
        assert_eq!(*v, (i % ar_mod) as f32 * n as f32 + rank_sum, "element {i}");
    }
}

/// Runs on `comm` one AllReduce (sum) of `ar_count` f32, rank `r` sending
/// `i % ar_mod + rank` at element `i`, then a group of one send to the next
/// rank and one receive from the previous rank around the ring of `p2p_count`
/// i32, rank `r` sending `i * p2p_mul + rank`; waits for each on a stream and
/// asserts every element received (panics naming the first wrong element).
pub fn all_reduce_then_ring_exchange(
    comm: &Comm,
    role: &Role,
    ar_count: usize,
    ar_mod: usize,
    p2p_count: usize,
    p2p_mul: i32,
) {
    use ferroccl::{DataType, Stream};
    let n = role.nranks;
    let send = ar_input(role, ar_count, ar_mod);
    let mut recv = vec![0f32; ar_count];
    let s = Stream::new();
    all_reduce_checked(comm, role, &send, &mut recv, ar_mod, &s);
    let out: Vec<i32> = (0..p2p_count as i32).map(|i| i * p2p_mul + role.rank as i32).collect();
    let mut inb = vec![0i32; p2p_count];
    let (to, from) = ((role.rank + 1) % n, (role.rank + n - 1) % n);
    ferroccl::group_start();
    // SAFETY: both buffers outlive the synchronize below.
    unsafe {
        comm.send(out.as_ptr().cast(), p2p_count, DataType::Int32, to, &s)
            .expect("send");
        comm.recv(inb.as_mut_ptr().cast(), p2p_count, DataType::Int32, from, &s)
            .expect("recv");
    }
    ferroccl::group_end().expect("group end");
    s.synchronize().expect("send/recv complete");
    for (i, v) in inb.iter().enumerate() {
        assert_eq!(*v, i as i32 * p2p_mul + from as i32, "element {i}");
    }
}

/// Runs AllReduce (sum) of `count` f32 on `comm` over and over, each waited
/// for on a stream, until one fails, calling `after_each` with the number of
/// iterations done after every one that succeeded; returns the error and that
/// number. Panics when 60 s pass without an error (a generous bound: the tests
/// using it kill a peer, so an error must come).
pub fn all_reduce_until_error(
    comm: &Comm,
    count: usize,
    mut after_each: impl FnMut(usize),
) -> (ferroccl::Error, usize) {
    use ferroccl::{DataType, RedOp, Stream};
    let send = vec![0u8; count * 4];
    let mut recv = vec![0u8; count * 4];
    let s = Stream::new();
    let start = Instant::now();
    let mut iters = 0;
    let err = loop {
        // SAFETY: the buffers outlive the synchronize.
        let r1 = unsafe {
            comm.all_reduce(
                send.as_ptr(),
                recv.as_mut_ptr(),
                count,
                DataType::Float32,
                RedOp::Sum,
                &s,
            )
        };
        if let Err(e) = r1.and_then(|_| s.synchronize()) {
            break e;
        }
        iters += 1;
        after_each(iters);
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no error after {iters} iterations"
        );
    };
    (err, iters)
}
