//! Steps on device memory run on the GPU's kernels, reading and writing the
//! connectors' FIFOs directly (NCCL's `prims_simple.h` with host FIFOs,
//! `src/transport/net.cc` with `useGdr = 0`), on a host without a GPU: two
//! real processes over shared memory or the network (socket plugin on
//! loopback), their buffers in **mock** device memory (`ferroccl::mockdev`,
//! pages mapped `PROT_NONE`), served by a mock GPU whose "kernels" compute with
//! the CPU reference on bytes reached through `/proc/self/mem` — and refuse any
//! host memory that was not page-locked through `ferroccl_kernels::hostreg`
//! (whose driver calls a hook of this test stands in for).
//!
//! Checked: every collective (AllReduce, ReduceScatter, AllGather, Broadcast,
//! Reduce; in and out of place) equals the CPU reference, its steps ran on the
//! mock GPU and none staged through a bounce buffer (the small AllReduce, which
//! gathers into pageable host scratch and stages, is turned off with
//! `FERROCCL_SMALL_ALLREDUCE_BYTES=0`); each FIFO region was registered once
//! and unregistered while still mapped, all before the communicator was gone;
//! FIFOs that cannot be registered keep every step on the staging path, still
//! correct.

#[path = "coll_support/mod.rs"]
mod coll_support;
#[path = "coll_support/mock_gpu.rs"]
mod mock_gpu;

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use coll_support::{assert_all_ok, join, launch, role};
use ferroccl::{DataType, RedOp, Scalar, TestOp};
use ferroccl_kernels::hostreg::{self, HostRegHook};
use mock_gpu::{CALLS, ProcMem, QUEUED, STAGING_OK, WAITS, gpu0, run_device};

const WORKER: &str = "device_steps_worker";
const LIMIT: Duration = Duration::from_secs(240);
/// The two paths the multi-step tests run over, with the setting that picks
/// each: the network (socket plugin, shared memory off) and shared memory
/// (Simple protocol: its slots are the segment itself).
const OVER: [(&str, (&str, &str)); 2] = [
    ("network", ("NCCL_SHM_DISABLE", "1")),
    ("shm", ("NCCL_PROTO", "Simple")),
];

/// Stands in for `cuMemHostRegister`/`cuMemHostUnregister`: remembers what is
/// registered, and records misuse (a region registered twice, an
/// unregistration of something not registered or no longer mapped).
#[derive(Default)]
struct Hook {
    alive: Mutex<Vec<(usize, usize)>>,
    registered: AtomicU64,
    unregistered: AtomicU64,
    misuse: Mutex<Vec<String>>,
    fail: AtomicBool,
}

impl HostRegHook for Hook {
    fn register(&self, base: usize, len: usize, ordinal: usize) -> Result<(), String> {
        if self.fail.load(Ordering::Relaxed) {
            return Err("the test refuses every registration".into());
        }
        let mut a = self.alive.lock().unwrap();
        if a.iter().any(|&(b, l)| base < b + l && b < base + len) {
            self.misuse
                .lock()
                .unwrap()
                .push(format!("{base:#x}+{len} registered again (GPU {ordinal})"));
            return Err("already registered".into());
        }
        if !base.is_multiple_of(4096) || !len.is_multiple_of(4096) {
            self.misuse
                .lock()
                .unwrap()
                .push(format!("{base:#x}+{len} is not page-aligned"));
        }
        a.push((base, len));
        self.registered.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn unregister(&self, base: usize, len: usize) {
        let mut a = self.alive.lock().unwrap();
        match a.iter().position(|&(b, l)| (b, l) == (base, len)) {
            Some(i) => {
                a.swap_remove(i);
            }
            None => self
                .misuse
                .lock()
                .unwrap()
                .push(format!("{base:#x}+{len} unregistered but not registered")),
        }
        // Still mapped: `/proc/self/mem` reads fail (EIO) on unmapped memory.
        let mut b = [0u8; 1];
        if ProcMem::file().read_exact_at(&mut b, base as u64).is_err() {
            self.misuse
                .lock()
                .unwrap()
                .push(format!("{base:#x}+{len} unregistered after it was freed"));
        }
        self.unregistered.fetch_add(1, Ordering::Relaxed);
    }
}

static HOOK: OnceLock<Hook> = OnceLock::new();

fn hook() -> &'static Hook {
    HOOK.get_or_init(Hook::default)
}

/// Child entry point. `DEVICE_STEPS_MODE=kernels`: the FIFOs register and
/// every step on device memory runs on the mock GPU; `=refused`: no FIFO
/// registers and every such step stages; `=ahead`: as `kernels`, one
/// AllReduce of many steps only, which must wait for its launches fewer
/// times than it has device steps (a lane keeps several steps pending per
/// wait, issue 28).
#[test]
fn device_steps_worker() {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm("coll_device_steps::worker", LIMIT, String::new);
    let Some(r) = role("devsteps") else { return };
    let refused = std::env::var("DEVICE_STEPS_MODE").as_deref() == Ok("refused");
    let ahead = std::env::var("DEVICE_STEPS_MODE").as_deref() == Ok("ahead");
    let h = hook();
    h.fail.store(refused, Ordering::Relaxed);
    hostreg::set_hook(Some(h));
    let comm = join(&r, Duration::from_secs(60));
    let (n, me) = (r.nranks, r.rank);
    let mut bad: Vec<String> = Vec::new();
    // The first operation registers the FIFOs the connections announced.
    STAGING_OK.store(true, Ordering::Relaxed);
    if std::env::var("DEVICE_STEPS_MODE").as_deref() == Ok("panic") {
        return panic_worker(comm, me);
    }
    // A float32 sum AllReduce of `count` elements on GPU 0, inputs from `seed`;
    // the number of wrong elements.
    let allreduce_f32 = |count: usize, in_place: bool, seed: u64| {
        run_device(
            &comm,
            &gpu0(),
            TestOp::AllReduce,
            DataType::Float32,
            RedOp::Sum,
            count,
            in_place,
            seed,
        )
    };
    let w = allreduce_f32(1031, false, 1);
    if w > 0 {
        bad.push(format!("warm-up AllReduce: {w} wrong"));
    }
    if ahead {
        // Several steps per lane pending per wait: 1 MiB per rank in steps of
        // NCCL_BUFFSIZE / NCCL_STEPS (the caller sets a small NCCL_BUFFSIZE).
        STAGING_OK.store(false, Ordering::Relaxed);
        for in_place in [false, true] {
            let (d0, s0) = ferroccl::device_step_counts();
            let w0 = WAITS.load(Ordering::Relaxed);
            let w = allreduce_f32(1 << 18, in_place, 3);
            let (d1, s1) = ferroccl::device_step_counts();
            let (steps, waits) = (d1 - d0, WAITS.load(Ordering::Relaxed) - w0);
            println!("rank {me}: ahead in_place {in_place}: {steps} device steps, {waits} waits");
            if w > 0 {
                bad.push(format!("ahead AllReduce in_place {in_place}: {w} wrong"));
            }
            if s1 != s0 || steps < 16 || waits == 0 || waits * 4 > steps * 3 {
                bad.push(format!(
                    "ahead AllReduce in_place {in_place}: {steps} device steps ({} staged) took {waits} waits (want \
                     at most 3/4 of the steps: several pending per wait; one each without look-ahead)",
                    s1 - s0
                ));
            }
        }
    }
    let reductions = [TestOp::AllReduce, TestOp::ReduceScatter, TestOp::Reduce { root: 0 }];
    let copies = [TestOp::AllGather, TestOp::Broadcast { root: 1 }];
    // 1031 elements: one step; 70_000: several steps and FIFO rounds, not a
    // multiple of the step.
    for count in if ahead { &[][..] } else { &[1031usize, 70_000][..] } {
        let count = *count;
        for dtype in [DataType::Float32, DataType::Int32, DataType::Float16] {
            let ops = [RedOp::Sum, RedOp::Avg, RedOp::PreMulSum(Scalar::from_f64(dtype, 2.0))];
            let cases = reductions
                .iter()
                .flat_map(|&t| ops.iter().map(move |&o| (t, o)))
                .chain(copies.iter().map(|&t| (t, RedOp::Sum)));
            for (top, op) in cases {
                STAGING_OK.store(refused, Ordering::Relaxed);
                for in_place in [false, true] {
                    let (d0, s0) = ferroccl::device_step_counts();
                    let c0 = CALLS.load(Ordering::Relaxed);
                    let (q0, w0) = (QUEUED.load(Ordering::Relaxed), WAITS.load(Ordering::Relaxed));
                    if std::env::var_os("DEVICE_STEPS_DEBUG").is_some() {
                        eprintln!("case {top:?} {dtype} {op} count {count} in_place {in_place}");
                    }
                    let w = run_device(&comm, &gpu0(), top, dtype, op, count, in_place, 1);
                    let (d1, s1) = ferroccl::device_step_counts();
                    let calls = CALLS.load(Ordering::Relaxed) - c0;
                    let queued = QUEUED.load(Ordering::Relaxed) - q0;
                    let waits = WAITS.load(Ordering::Relaxed) - w0;
                    let what = format!("{top:?} {dtype} {op} count {count} in_place {in_place}");
                    if w > 0 {
                        bad.push(format!("{what}: {w} wrong"));
                    }
                    // A device step's launches are enqueued (run only when the
                    // step waits, so a step that pushed its slots first would
                    // have sent stale bytes) and waited for once per step.
                    if !refused && (queued == 0 || waits == 0 || waits > d1 - d0) {
                        bad.push(format!(
                            "{what}: {queued} launches enqueued, {waits} waits for {} device steps",
                            d1 - d0
                        ));
                    }
                    if refused {
                        if d1 != d0 || calls != 0 || s1 == s0 {
                            bad.push(format!(
                                "{what}: FIFOs refused, yet {} device steps, {calls} GPU calls, {} staged",
                                d1 - d0,
                                s1 - s0
                            ));
                        }
                    } else if d1 == d0 || calls == 0 || s1 != s0 {
                        bad.push(format!(
                            "{what}: {} device steps, {calls} GPU calls, {} staged steps",
                            d1 - d0,
                            s1 - s0
                        ));
                    }
                }
            }
        }
    }
    let alive_before = h.alive.lock().unwrap().len();
    comm.destroy().expect("destroy");
    let (reg, unreg) = (
        h.registered.load(Ordering::Relaxed),
        h.unregistered.load(Ordering::Relaxed),
    );
    let alive = h.alive.lock().unwrap().len();
    let misuse = h.misuse.lock().unwrap().clone();
    println!(
        "rank {me}/{n}: {} device steps, {} staged, {reg} registered, {unreg} unregistered, {alive_before} alive before destroy",
        ferroccl::device_step_counts().0,
        ferroccl::device_step_counts().1
    );
    if !misuse.is_empty() {
        bad.push(format!("registration misuse: {misuse:?}"));
    }
    if refused {
        if reg != 0 {
            bad.push(format!("{reg} registrations although every one was refused"));
        }
    } else {
        if reg == 0 || alive_before == 0 {
            bad.push(format!(
                "{reg} FIFO registrations ({alive_before} alive before destroy)"
            ));
        }
        if alive != 0 || unreg != reg {
            bad.push(format!(
                "{alive} registrations left after destroy ({reg} made, {unreg} undone)"
            ));
        }
    }
    hostreg::set_hook(None);
    assert!(bad.is_empty(), "rank {me}:\n{}", bad.join("\n"));
    println!("rank {me}: all correct");
}

/// `DEVICE_STEPS_MODE=panic`: the mock GPU of the rank given
/// `MOCK_GPU_PANIC_AT` panics in the middle of an AllReduce, on whichever
/// thread runs its steps. That rank's AllReduce must fail with an internal
/// error naming the panic, the other's with an error too (told through the
/// failure agreement, not by its timeout), and a second AllReduce must fail on
/// both at once: nothing waits on a dead thread.
fn panic_worker(comm: ferroccl::Comm, me: usize) {
    let count = 1usize << 18;
    let buf = mock_gpu::MockBuf::new(count * 4, gpu0());
    ProcMem::write(buf.ptr, &vec![0u8; count * 4]);
    let allreduce = || {
        let s = ferroccl::stream::Stream::new();
        // SAFETY: `buf` holds `count` float32 elements and outlives the
        // synchronize below.
        unsafe { TestOp::AllReduce.launch(&comm, buf.ptr, buf.ptr, count, DataType::Float32, RedOp::Sum, &s) }
            .and_then(|()| s.synchronize())
    };
    let injected = std::env::var_os(mock_gpu::PANIC_AT_ENV).is_some();
    let first = allreduce().expect_err("an AllReduce whose data path panicked on one rank succeeded");
    println!("rank {me}: first AllReduce failed: {first}");
    if injected {
        let text = first.to_string();
        assert!(
            matches!(first, ferroccl::Error::Internal(_))
                && text.contains("panicked")
                && text.contains("fault injected"),
            "rank {me}: want an internal error naming the panic, got: {text}"
        );
    }
    let second = allreduce().expect_err("an AllReduce after a failed one succeeded");
    println!("rank {me}: second AllReduce failed: {second}");
    drop(comm);
    println!("rank {me}: all correct");
}

/// Runs the worker on 2 processes with `env` (and `NCCL_DEBUG=INFO`); each
/// rank's log must hold every text of `info`.
fn run(what: &str, env: &[(&str, &str)], info: &[&str]) {
    run_n(2, what, env, info)
}

/// [`run`] on `n` processes.
fn run_n(n: usize, what: &str, env: &[(&str, &str)], info: &[&str]) {
    let mut all = vec![("NCCL_DEBUG", "INFO")];
    all.extend_from_slice(env);
    let ranks: Vec<usize> = (0..n).collect();
    let outs = launch(WORKER, "devsteps", n, &ranks, &all, |_| Vec::new(), LIMIT);
    assert_all_ok(&outs, what);
    for o in &outs {
        for l in o.stdout.lines().filter(|l| l.contains(" device steps, ")) {
            println!("{l}");
        }
        // NCCL's log goes to stdout unless NCCL_DEBUG_FILE says otherwise.
        let log = format!("{}{}", o.stdout, o.stderr);
        for line in info {
            assert!(log.contains(line), "{what}: rank {} logged no `{line}`:\n{log}", o.rank);
        }
    }
}

/// Shared memory (Simple protocol: its slots are the segment itself).
#[test]
fn device_steps_over_shm_run_on_the_gpu() {
    if role("devsteps").is_some() {
        return;
    }
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm("device_steps_over_shm_run_on_the_gpu", LIMIT, String::new);
    run(
        "device steps over shm",
        &[
            ("DEVICE_STEPS_MODE", "kernels"),
            ("FERROCCL_SMALL_ALLREDUCE_BYTES", "0"),
            ("NCCL_PROTO", "Simple"),
            ("NCCL_ALGO", "Ring"),
        ],
        &["device buffers: steps reduce on GPU 0 (FIFO registered)"],
    );
}

/// The network (socket plugin on loopback; its FIFOs are host buffers).
#[test]
fn device_steps_over_the_network_run_on_the_gpu() {
    if role("devsteps").is_some() {
        return;
    }
    let _watchdog =
        ferroccl_test_watchdog::Watchdog::arm("device_steps_over_the_network_run_on_the_gpu", LIMIT, String::new);
    run(
        "device steps over the network",
        &[
            ("DEVICE_STEPS_MODE", "kernels"),
            ("FERROCCL_SMALL_ALLREDUCE_BYTES", "0"),
            ("NCCL_SHM_DISABLE", "1"),
            ("NCCL_ALGO", "Ring"),
        ],
        &["device buffers: steps reduce on GPU 0 (FIFO registered)"],
    );
}

/// Several device steps of a lane pending per wait (issue 28), over the
/// network and over shared memory, with small steps (NCCL_BUFFSIZE 256 KiB:
/// 32 KiB steps) so that one AllReduce has many.
#[test]
fn device_steps_run_ahead_of_the_wait() {
    if role("devsteps").is_some() {
        return;
    }
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm("device_steps_run_ahead_of_the_wait", LIMIT, String::new);
    for (what, transport) in OVER {
        run(
            &format!("device steps ahead over the {what}"),
            &[
                ("DEVICE_STEPS_MODE", "ahead"),
                ("FERROCCL_SMALL_ALLREDUCE_BYTES", "0"),
                ("NCCL_BUFFSIZE", "262144"),
                ("NCCL_ALGO", "Ring"),
                transport,
            ],
            &["device buffers: steps reduce on GPU 0 (FIFO registered)"],
        );
    }
}

/// A panic in one rank's data path (here its mock GPU's, standing in for any
/// bug there) fails the operation on every rank with an error, and later
/// operations too; it never leaves a thread waiting on the dead one.
#[test]
fn a_panic_in_the_data_path_fails_every_rank() {
    if role("devsteps").is_some() {
        return;
    }
    let _watchdog =
        ferroccl_test_watchdog::Watchdog::arm("a_panic_in_the_data_path_fails_every_rank", LIMIT, String::new);
    // The work runs on the enqueuing thread first (the proxy's spin window)
    // or, with no window, on the proxy thread from the start: a panic on
    // either must fail it.
    let threads = [("", "enqueuing thread first"), ("0", "proxy thread")];
    for ((over, transport), (spin, on)) in OVER.into_iter().flat_map(|o| threads.map(|t| (o, t))) {
        let what = format!("{over}, {on}");
        let mut env = vec![
            ("DEVICE_STEPS_MODE", "panic"),
            ("FERROCCL_SMALL_ALLREDUCE_BYTES", "0"),
            ("NCCL_BUFFSIZE", "262144"),
            ("NCCL_ALGO", "Ring"),
            transport,
        ];
        if !spin.is_empty() {
            env.push(("FERROCCL_PROXY_SPIN_US", spin));
        }
        let per_rank = |r: usize| {
            if r == 0 {
                vec![(mock_gpu::PANIC_AT_ENV.to_string(), "5".to_string())]
            } else {
                Vec::new()
            }
        };
        let outs = launch(WORKER, "devsteps", 2, &[0, 1], &env, per_rank, LIMIT);
        assert_all_ok(&outs, &format!("a panic over the {what}"));
        for o in &outs {
            for l in o.stdout.lines().filter(|l| l.contains("AllReduce failed")) {
                println!("{what}: {l}");
            }
            assert!(
                o.stdout.contains("all correct"),
                "{what}: rank {}:\n{}",
                o.rank,
                o.stdout
            );
        }
    }
}

/// FIFOs that cannot be registered: every step stages, results still right.
#[test]
fn unregistrable_fifos_fall_back_to_staging() {
    if role("devsteps").is_some() {
        return;
    }
    let _watchdog =
        ferroccl_test_watchdog::Watchdog::arm("unregistrable_fifos_fall_back_to_staging", LIMIT, String::new);
    run(
        "refused registrations",
        &[
            ("DEVICE_STEPS_MODE", "refused"),
            ("FERROCCL_SMALL_ALLREDUCE_BYTES", "0"),
            ("NCCL_SHM_DISABLE", "1"),
            ("NCCL_ALGO", "Ring"),
        ],
        &[
            "cannot be registered for GPU 0 (the test refuses every registration): its steps stage through host memory",
            "device buffers: steps stage through host memory (a FIFO is not registered for the GPU)",
        ],
    );
}

/// Three processes, AllReduce on the tree (a step reducing two children's
/// data, and sending to two peers) over the network: every step on the GPU
/// once the tree, connected by the warm-up, has its FIFOs registered.
#[test]
fn device_steps_on_a_tree_run_on_the_gpu() {
    if role("devsteps").is_some() {
        return;
    }
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm("device_steps_on_a_tree_run_on_the_gpu", LIMIT, String::new);
    run_n(
        3,
        "device steps on a tree",
        &[
            ("DEVICE_STEPS_MODE", "kernels"),
            ("FERROCCL_SMALL_ALLREDUCE_BYTES", "0"),
            ("NCCL_SHM_DISABLE", "1"),
            ("NCCL_ALGO", "allreduce:tree"),
        ],
        &["device buffers: steps reduce on GPU 0 (FIFO registered)"],
    );
}
