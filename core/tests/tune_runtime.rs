//! Tuning in the running communicator, over real processes and the socket
//! plugin on loopback:
//!
//! * every collective × algorithm × protocol the runtime has, forced through
//!   `NCCL_ALGO` / `NCCL_PROTO` (1–8 ranks, odd sizes, in and out of place, data
//!   checked), with the choice read back from the communicator;
//! * what `NCCL_ALGO`/`NCCL_PROTO` cannot get (a protocol the runtime lacks, an
//!   algorithm a function does not have, a malformed value) is a clear error,
//!   not a silent ignore, and leaves the communicator healthy;
//! * tuner plugins (C tuners of every API version, the SDK tuner) change what
//!   runs — seen in `Comm::tuning()`, in the `NCCL_DEBUG_SUBSYS=TUNING` log, and in
//!   correct data — and a tuner that errs, writes out of bounds, asks for
//!   something impossible or fails `init` gets NCCL's behaviour with a warning.

mod coll_support;

use std::time::Duration;

use coll_support::{Out, assert_all_ok, join, launch, role, run_op};
use ferroccl::check::TestOp;
use ferroccl::tune::{Algorithm, Func, Protocol};
use ferroccl::{Comm, DataType, RedOp, Scalar};

const WORKER: &str = "tune_worker";
const LIMIT: Duration = Duration::from_secs(240);

fn func_of(top: TestOp) -> Option<Func> {
    Some(match top {
        TestOp::AllReduce => Func::AllReduce,
        TestOp::AllGather => Func::AllGather,
        TestOp::ReduceScatter => Func::ReduceScatter,
        TestOp::Broadcast { .. } => Func::Broadcast,
        TestOp::Reduce { .. } => Func::Reduce,
        _ => return None,
    })
}

/// Expected (algorithm, protocol) per function from `TUNE_EXPECT`
/// (`allreduce=Tree/Simple,*=Ring/Simple`).
fn expected(func: Func) -> Option<(Algorithm, Protocol)> {
    let spec = std::env::var("TUNE_EXPECT").ok()?;
    let mut fallback = None;
    for part in spec.split(',') {
        let (k, v) = part.split_once('=')?;
        let (a, p) = v.split_once('/')?;
        let algo = Algorithm::ALL.into_iter().find(|x| x.name().eq_ignore_ascii_case(a))?;
        let proto = Protocol::ALL.into_iter().find(|x| x.name().eq_ignore_ascii_case(p))?;
        if k == "*" {
            fallback = Some((algo, proto));
        } else if k.eq_ignore_ascii_case(func.name()) {
            return Some((algo, proto));
        }
    }
    fallback
}

/// Runs every collective on `counts` with checked data and the expected choice.
fn forced_matrix(comm: &Comm, counts: &[usize]) -> (Vec<String>, usize) {
    let n = comm.nranks();
    let mut fails = Vec::new();
    let mut ran = 0;
    let tops = [
        TestOp::AllReduce,
        TestOp::ReduceScatter,
        TestOp::Reduce { root: n - 1 },
        TestOp::AllGather,
        TestOp::Broadcast { root: n / 2 },
    ];
    for &count in counts {
        for dtype in [DataType::Int32, DataType::Float32, DataType::Bfloat16] {
            for top in tops {
                let ops: Vec<RedOp> = if matches!(top, TestOp::AllGather | TestOp::Broadcast { .. }) {
                    vec![RedOp::Sum]
                } else {
                    vec![RedOp::Sum, RedOp::Avg, RedOp::PreMulSum(Scalar::from_f64(dtype, 2.0))]
                };
                for op in ops {
                    for in_place in [false, true] {
                        ran += 1;
                        let what = format!(
                            "rank {}: {top:?} {dtype} {op} count {count} in_place {in_place}",
                            comm.rank()
                        );
                        match run_op(comm, top, dtype, op, count, in_place) {
                            Ok(0) => {}
                            Ok(w) => fails.push(format!("{what}: {w} wrong")),
                            Err(e) => {
                                fails.push(format!("{what}: error {e}"));
                                return (fails, ran);
                            }
                        }
                        let f = func_of(top).expect("tuned function");
                        if count > 0
                            && let Some(want) = expected(f)
                        {
                            let d = comm.tuning().last(f).expect("a decision was made");
                            if (d.algo, d.proto) != want {
                                fails.push(format!("{what}: ran {} where {want:?} was forced", d.describe()));
                            }
                        }
                    }
                }
            }
        }
    }
    (fails, ran)
}

fn allreduce_checked(comm: &Comm, count: usize) -> ferroccl::tune::Decision {
    let w = run_op(comm, TestOp::AllReduce, DataType::Float32, RedOp::Sum, count, false).expect("AllReduce");
    assert_eq!(w, 0, "AllReduce of {count} floats: {w} wrong");
    comm.tuning().last(Func::AllReduce).expect("decision")
}

/// Child entry point (does nothing when run as a normal test).
#[test]
fn tune_worker() {
    let Some(r) = role("tune") else { return };
    let case = std::env::var("TUNE_CASE").expect("TUNE_CASE");
    if case == "init_fails" {
        let e = Comm::init_rank(r.nranks, &r.id, r.rank, coll_support::config(Duration::from_secs(30)))
            .expect_err("init must fail");
        println!("init error: {e}");
        return;
    }
    let comm = join(&r, Duration::from_secs(60));
    match case.as_str() {
        "forced" => {
            let counts: Vec<usize> = std::env::var("TUNE_COUNTS")
                .unwrap()
                .split(',')
                .map(|c| c.parse().unwrap())
                .collect();
            let (fails, ran) = forced_matrix(&comm, &counts);
            println!("rank {}: {ran} operations, {} failures", r.rank, fails.len());
            assert!(fails.is_empty(), "{}", fails.join("\n"));
        }
        "ll_over_shm" => {
            // NCCL_PROTO=LL with every rank on this host: shared memory carries
            // every connection in LL, and the model chooses LL.
            let d = allreduce_checked(&comm, 1000);
            assert_eq!(d.proto, Protocol::Ll, "{}", d.describe());
            assert_eq!(allreduce_checked(&comm, 300_000).proto, Protocol::Ll);
            println!("rank {}: LL over shared memory", r.rank);
        }
        "impossible_proto" => {
            // NCCL_PROTO=LL over the network (NCCL_SHM_DISABLE=1): the network
            // transport runs Simple only, so nothing can run; each call fails
            // with NCCL's message, the communicator stays healthy.
            let e = run_op(&comm, TestOp::AllReduce, DataType::Float32, RedOp::Sum, 1000, false).unwrap_err();
            let m = e.to_string();
            assert!(matches!(e, ferroccl::Error::InvalidUsage(_)), "{e}");
            assert!(
                m.contains("No algorithm/protocol available for function AllReduce"),
                "{m}"
            );
            assert!(m.contains("NCCL_PROTO was set to LL"), "{m}");
            assert!(m.contains("this runtime runs Tree/Simple, Ring/Simple"), "{m}");
            assert!(comm.async_error().is_none());
            println!("rank {}: impossible proto refused", r.rank);
        }
        "impossible_algo" => {
            // NCCL_ALGO=tree: AllReduce runs the tree; Broadcast has no tree in
            // NCCL's model, so it fails (NCCL's behaviour), and AllReduce still works.
            let d = allreduce_checked(&comm, 5003);
            assert_eq!(d.algo, Algorithm::Tree);
            let e = run_op(
                &comm,
                TestOp::Broadcast { root: 0 },
                DataType::Int32,
                RedOp::Sum,
                17,
                false,
            )
            .unwrap_err();
            assert!(
                e.to_string().contains("function Broadcast") && e.to_string().contains("NCCL_ALGO was set to tree"),
                "{e}"
            );
            assert!(comm.async_error().is_none());
            assert_eq!(allreduce_checked(&comm, 77).algo, Algorithm::Tree);
            println!("rank {}: impossible algo refused", r.rank);
        }
        "tuner_force" => {
            // TUNE_FORCE_CHECK=<algo>,<nchannels>: what the tuner forces on AllReduce.
            let v = std::env::var("TUNE_FORCE_CHECK").unwrap();
            let (a, ch) = v.split_once(',').unwrap();
            let (want_algo, want_ch): (usize, usize) = (a.parse().unwrap(), ch.parse().unwrap());
            for count in [3, 2049, 262_147] {
                let d = allreduce_checked(&comm, count);
                assert_eq!(d.algo.index(), want_algo, "count {count}: {}", d.describe());
                assert_eq!(d.nchannels, want_ch, "count {count}: {}", d.describe());
                assert!(d.by_tuner, "{}", d.describe());
            }
            // Broadcast has no tree: a tuner forcing one leaves the ring (the entry is -1).
            let w = run_op(
                &comm,
                TestOp::Broadcast { root: 1 },
                DataType::Int8,
                RedOp::Sum,
                999,
                true,
            )
            .unwrap();
            assert_eq!(w, 0);
            assert_eq!(comm.tuning().last(Func::Broadcast).unwrap().algo, Algorithm::Ring);
            println!(
                "rank {}: tuner forced {}",
                r.rank,
                comm.tuning().tuner_name().unwrap_or("?")
            );
        }
        "tuner_chunk" => {
            let want: usize = std::env::var("TUNE_CHUNK_CHECK").unwrap().parse().unwrap();
            let d = allreduce_checked(&comm, 300_001);
            assert_eq!(d.chunk_bytes, want, "{}", d.describe());
            println!("rank {}: chunk {}", r.rank, d.chunk_bytes);
        }
        "tuner_constants" => {
            // A v5 tuner made Ring's base latency huge: the model now picks the tree.
            let d = allreduce_checked(&comm, 4096);
            assert_eq!(d.algo, Algorithm::Tree, "{}", d.describe());
            assert!(!d.by_tuner);
            assert!(comm.tuning().constants().base_latencies[1][2] >= 1e6);
            println!("rank {}: constants applied", r.rank);
        }
        "tuner_tolerated" => {
            // The tuner misbehaves (out-of-bounds writes, an impossible choice): warned
            // about, NCCL's choice runs, data is right.
            for count in [1, 4099, 100_003] {
                let d = allreduce_checked(&comm, count);
                assert_eq!(d.proto, Protocol::Simple, "{}", d.describe());
            }
            println!("rank {}: tuner tolerated", r.rank);
        }
        "tuner_error" => {
            let e = run_op(&comm, TestOp::AllReduce, DataType::Float32, RedOp::Sum, 100, false).unwrap_err();
            assert!(e.to_string().contains("getCollInfo returned"), "{e}");
            assert!(comm.async_error().is_none());
            println!("rank {}: tuner error surfaced: {e}", r.rank);
        }
        other => panic!("unknown TUNE_CASE {other}"),
    }
    comm.destroy().expect("destroy");
}

fn run_case(nranks: usize, case: &str, env: &[(&str, &str)]) -> Vec<Out> {
    let mut all = vec![("TUNE_CASE", case), ("NCCL_BUFFSIZE", "65536")];
    all.extend_from_slice(env);
    let ranks: Vec<usize> = (0..nranks).collect();
    let outs = launch(WORKER, "tune", nranks, &ranks, &all, |_| Vec::new(), LIMIT);
    assert_all_ok(&outs, &format!("{case} on {nranks} ranks {env:?}"));
    outs
}

fn forced(nranks: usize, counts: &str, env: &[(&str, &str)]) {
    let mut e = vec![("TUNE_COUNTS", counts)];
    e.extend_from_slice(env);
    let outs = run_case(nranks, "forced", &e);
    for o in &outs {
        assert!(o.stdout.contains("0 failures"), "rank {}:\n{}", o.rank, o.stdout);
    }
}

#[test]
fn forced_ring_simple_1_3_and_8_ranks() {
    let env = [
        ("NCCL_ALGO", "ring"),
        ("NCCL_PROTO", "simple"),
        ("TUNE_EXPECT", "*=Ring/Simple"),
    ];
    forced(1, "1,1031,40009", &env);
    forced(3, "1,13,1031,40009", &env);
    forced(8, "7,3001", &env);
}

#[test]
fn forced_tree_allreduce_2_5_and_8_ranks() {
    // Only AllReduce has a tree; the other functions keep the ring.
    let env = [
        ("NCCL_ALGO", "allreduce:tree;broadcast:ring"),
        ("NCCL_PROTO", "^LL,LL128"),
        ("TUNE_EXPECT", "AllReduce=Tree/Simple,*=Ring/Simple"),
    ];
    forced(2, "1,13,1031,40009", &env);
    forced(5, "1,1031,40009", &env);
    forced(8, "7,3001", &env);
}

#[test]
fn channels_and_the_allgather_reduce_variant_are_obeyed() {
    // Many channels for small sizes, and the all-gather + reduce AllReduce allowed
    // at every size (the model then decides) or at none: every combination gives
    // correct data.
    for (min_ch, small) in [("64", "1073741824"), ("64", "0"), ("1048576", "1073741824")] {
        forced(
            3,
            "1,1031,40009",
            &[
                ("FERROCCL_MIN_CHANNEL_BYTES", min_ch),
                ("FERROCCL_SMALL_ALLREDUCE_BYTES", small),
                ("NCCL_ALGO", "ring"),
                ("TUNE_EXPECT", "*=Ring/Simple"),
            ],
        );
    }
}

#[test]
fn impossible_requests_are_clear_errors() {
    run_case(2, "ll_over_shm", &[("NCCL_PROTO", "LL")]);
    run_case(
        2,
        "impossible_proto",
        &[("NCCL_PROTO", "LL"), ("NCCL_SHM_DISABLE", "1")],
    );
    run_case(3, "impossible_algo", &[("NCCL_ALGO", "tree")]);
    // A malformed value fails communicator creation with NCCL's message.
    let outs = run_case(2, "init_fails", &[("NCCL_ALGO", "ring;tree")]);
    for o in &outs {
        assert!(
            o.stdout.contains(
                "init error: invalid usage: NCCL_ALGO=\"ring;tree\": all entries except the first must have a prefix"
            ),
            "{}",
            o.stdout
        );
    }
    let outs = run_case(2, "init_fails", &[("NCCL_PROTO", "LL,Fast")]);
    assert!(
        outs[0].stdout.contains("unrecognized element token \"Fast\""),
        "{}",
        outs[0].stdout
    );
}

fn tuner_env<'a>(plugin: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = vec![
        ("NCCL_TUNER_PLUGIN", plugin),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "TUNING"),
    ];
    v.extend_from_slice(extra);
    v
}

#[test]
fn c_tuners_of_every_version_force_what_runs() {
    for v in 2..=6 {
        let plugin = format!("cv{v}");
        // Tree/Simple on one channel, where the model would pick the ring.
        let outs = run_case(
            3,
            "tuner_force",
            &tuner_env(&plugin, &[("CTUNER_FORCE", "0,2,1"), ("TUNE_FORCE_CHECK", "0,1")]),
        );
        let log = &outs.iter().find(|o| o.rank == 0).unwrap().stdout;
        assert!(
            log.contains(&format!("TUNER/Plugin: Using CTunerV{v} (v{v})")),
            "v{v}:\n{log}"
        );
        assert!(
            log.contains("AllReduce: 1048588 Bytes -> Algo Tree proto Simple channel{Lo..Hi}={0..0}"),
            "v{v}:\n{log}"
        );
        assert!(log.contains("TUNER/Plugin: Closing tuner: 'CTunerV"), "v{v}:\n{log}");
    }
}

#[test]
fn sdk_tuner_forces_channels_and_chunk() {
    // The ring on 2 channels even for 3 floats (the model would use 1).
    let outs = run_case(
        2,
        "tuner_force",
        &tuner_env("sdktest", &[("SDK_TUNER_FORCE", "1,2,2"), ("TUNE_FORCE_CHECK", "1,2")]),
    );
    let log = &outs.iter().find(|o| o.rank == 0).unwrap().stdout;
    assert!(
        log.contains("AllReduce: 12 Bytes -> Algo Ring proto Simple channel{Lo..Hi}={0..1}"),
        "{log}"
    );
    // v6 getChunkSize: 4 KiB chunks; a chunk below the grain is refused with a warning.
    run_case(
        2,
        "tuner_chunk",
        &tuner_env("sdktest", &[("SDK_TUNER_CHUNK", "4096"), ("TUNE_CHUNK_CHECK", "4096")]),
    );
    let outs = run_case(
        2,
        "tuner_chunk",
        // The model's own chunk for this size stays (it follows from the
        // Simple step, which leaves room for the 32-byte operation header).
        &tuner_env("cv6", &[("CTUNER_CHUNK", "8"), ("TUNE_CHUNK_CHECK", "16320")]),
    );
    assert!(outs[0].stdout.contains("below the Simple grain"), "{}", outs[0].stdout);
}

#[test]
fn v5_tuner_constants_reach_the_model() {
    run_case(
        2,
        "tuner_constants",
        &tuner_env("cv5", &[("CTUNER_RING_BASE", "1000000")]),
    );
}

#[test]
fn misbehaving_tuners_get_warnings_and_nccls_behaviour() {
    // Writes outside the table: ignored for that call, with a warning naming where.
    let outs = run_case(2, "tuner_tolerated", &tuner_env("coob", &[]));
    assert!(
        outs[0]
            .stdout
            .contains("wrote outside the 7x3 cost table: float index -1"),
        "{}",
        outs[0].stdout
    );
    // Forces Ring/LL, which the runtime cannot run: warned once, Simple runs.
    let outs = run_case(
        2,
        "tuner_tolerated",
        &tuner_env("cv6", &[("CTUNER_FORCE", "1,0"), ("CTUNER_OVERWRITE", "1")]),
    );
    assert!(
        outs[0].stdout.contains("which this runtime cannot run"),
        "{}",
        outs[0].stdout
    );
    // getCollInfo errors: the collective fails with the tuner's error (NCCL propagates it).
    run_case(2, "tuner_error", &tuner_env("cerror", &[]));
    // init fails: communicator creation fails naming the tuner.
    let outs = run_case(2, "init_fails", &tuner_env("cinitfail", &[]));
    assert!(
        outs[0].stdout.contains("tuner 'CTunerV6' (ncclTuner v6) init returned"),
        "{}",
        outs[0].stdout
    );
}

#[test]
fn rules_tuner_pins_choices_from_toml_and_nccl_csv() {
    let dir = std::env::temp_dir().join(format!("ferroccl-tune-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let toml = dir.join("rules.toml");
    std::fs::write(
        &toml,
        "[[rule]]\ncollective = \"allreduce\"\nranks = 3\nalgorithm = \"tree\"\nprotocol = \"simple\"\nchannels = 1\n",
    )
    .unwrap();
    let outs = run_case(
        3,
        "tuner_force",
        &tuner_env(
            "rules",
            &[
                ("NCCL_TUNER_CONFIG_FILE", toml.to_str().unwrap()),
                ("TUNE_FORCE_CHECK", "0,1"),
            ],
        ),
    );
    assert!(
        outs[0].stdout.contains("TUNER/Plugin: Using Rules (v6)"),
        "{}",
        outs[0].stdout
    );
    // A rule file in the CSV format of NCCL's example tuner carries over unchanged.
    let csv = dir.join("nccl_tuner.conf");
    std::fs::write(
        &csv,
        "# NCCL example format\nallreduce,0,4294967295,ring,simple,2,-1,2\n",
    )
    .unwrap();
    run_case(
        2,
        "tuner_force",
        &tuner_env(
            "rules",
            &[
                ("NCCL_TUNER_CONFIG_FILE", csv.to_str().unwrap()),
                ("TUNE_FORCE_CHECK", "1,2"),
            ],
        ),
    );
    // A malformed file fails communicator creation, naming the line.
    std::fs::write(&csv, "allreduce,0,10,fastest,simple,2,-1,2\n").unwrap();
    let outs = run_case(
        2,
        "init_fails",
        &tuner_env("rules", &[("NCCL_TUNER_CONFIG_FILE", csv.to_str().unwrap())]),
    );
    assert!(
        outs[0]
            .stdout
            .contains("nccl_tuner.conf:1: unknown algorithm \"fastest\""),
        "{}",
        outs[0].stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}
