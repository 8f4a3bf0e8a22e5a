//! The perf tool's command line against nccl-tests invocations: each line of the
//! table is parsed as the binary parses it (argv[0] included) and the resulting
//! plan is compared field by field with what nccl-tests (NVIDIA/nccl-tests
//! `src/common.cu`) would run. Also: unknown flags and bad values are usage
//! errors (status 2) that say what is accepted.

use std::process::Command;

use ferroccl::{DataType, RedOp, TestOp};
use ferroccl_examples::perf::{Average, Plan, RedOpSpec, sweep};

fn plan(line: &str) -> Plan {
    let argv: Vec<&str> = line.split_whitespace().collect();
    Plan::parse(&argv).unwrap_or_else(|e| panic!("{line}: {e}"))
}

#[test]
fn nccl_tests_invocations_give_nccl_tests_plans() {
    const MB: usize = 1 << 20;
    // nccl-tests' defaults: -b 32M -e 32M -f 1 -i 1M -n 20 -w 5 -c 1 -o sum -d float -a 1.
    let p = plan("all_reduce_perf");
    assert_eq!(p.coll, TestOp::AllReduce);
    assert_eq!(p.sizes, vec![32 * MB]);
    assert_eq!(
        (p.iters, p.warmup, p.agg_iters, p.check, p.run_cycles),
        (20, 5, 1, 1, 1)
    );
    assert_eq!((p.nthreads, p.ngpus), (1, 1));
    assert_eq!(p.dtypes, vec![DataType::Float32]);
    assert_eq!(p.ops, vec![RedOpSpec::Builtin(RedOp::Sum)]);
    assert_eq!(p.average, Average::Mean);
    assert!(!p.blocking && !p.parallel_init && !p.report_cputime);

    // The README's sweep: factor 4 from 8 bytes while <= 64M.
    let p = plan("/opt/nccl-tests/build/all_reduce_perf -b 8 -e 64M -f 4 -g 1");
    assert_eq!(p.sizes.first(), Some(&8));
    assert_eq!(p.sizes.last(), Some(&(32 * MB)));
    assert_eq!(p.sizes.len(), 12);

    // Additive steps with -f 1 (nccl-tests' default) and -i.
    let p = plan("all_gather_perf -b 1M -e 4M -i 1M");
    assert_eq!(p.coll, TestOp::AllGather);
    assert_eq!(p.sizes, vec![MB, 2 * MB, 3 * MB, 4 * MB]);
    assert_eq!(p.program_name(), "all_gather_perf");

    // Long options, -o as the reduction, rooted collectives, every datatype.
    let p = plan("reduce_perf --minbytes 1K --maxbytes 1K --op max --datatype all --root 3 --iters 7 --warmup_iters 2");
    assert_eq!(p.coll, TestOp::Reduce { root: 3 });
    assert_eq!(p.ops, vec![RedOpSpec::Builtin(RedOp::Max)]);
    assert_eq!(p.dtypes, DataType::ALL.to_vec());
    assert_eq!((p.iters, p.warmup), (7, 2));

    // -o all: nccl-tests' six ops, mulsum last.
    let p = plan("reduce_scatter_perf -o all -d bfloat16");
    assert_eq!(p.coll, TestOp::ReduceScatter);
    assert_eq!(p.ops.len(), 6);
    assert_eq!(p.ops.last(), Some(&RedOpSpec::MulSum));
    assert_eq!(p.dtypes, vec![DataType::Bfloat16]);
    // A non-reducing collective runs once, whatever -o says.
    let p = plan("broadcast_perf -o all -r 1");
    assert_eq!(p.coll, TestOp::Broadcast { root: 1 });
    assert_eq!(p.ops.len(), 1);

    // Threads, aggregation, cycles, blocking, parallel init, CPU time, averaging.
    let p = plan("sendrecv_perf -t 2 -g 2 -m 4 -N 3 -z 1 -p 1 -C 1 -a 3 -R 1 -y 0 -T 60 -G 0 -J out.json");
    assert_eq!(p.coll, TestOp::SendRecv);
    assert_eq!((p.nthreads, p.ngpus, p.ranks_per_process()), (2, 2, 4));
    assert_eq!((p.agg_iters, p.run_cycles), (4, 3));
    assert!(p.blocking && p.parallel_init && p.report_cputime);
    assert_eq!(p.average, Average::Max);
    assert_eq!(p.local_register, 1);
    assert_eq!(p.timeout_sec, 60);
    assert_eq!(p.output_file.as_deref(), Some(std::path::Path::new("out.json")));
    for (a, want) in [("0", Average::Rank0), ("1", Average::Mean), ("2", Average::Min)] {
        assert_eq!(plan(&format!("alltoall_perf -a {a}")).average, want);
    }

    // ferroccl-perf: the collective as the first argument, anywhere among the flags.
    let p = plan("ferroccl-perf --ranks 4 all_reduce -b 8 -e 64M -f 4 -c 1");
    assert_eq!((p.coll, p.ranks, p.check), (TestOp::AllReduce, Some(4), 1));
    let p = plan("ferroccl-perf -o prod alltoall -d int32");
    assert_eq!(p.coll, TestOp::AllToAll);
    assert_eq!(p.program_name(), "alltoall_perf");
    // The same name as the program is accepted.
    assert_eq!(plan("broadcast_perf broadcast").coll, TestOp::Broadcast { root: 0 });
}

#[test]
fn averaging_combines_rank_times_as_nccl_tests() {
    let t = [4.0, 1.0, 7.0];
    assert_eq!(Average::Rank0.combine(&t), 4.0);
    assert_eq!(Average::Mean.combine(&t), 4.0);
    assert_eq!(Average::Min.combine(&t), 1.0);
    assert_eq!(Average::Max.combine(&t), 7.0);
    assert_eq!(sweep(8, 100, 2, 0), vec![8, 16, 32, 64]);
    assert_eq!(sweep(5, 5, 1, 0), vec![5]);
}

#[test]
fn bad_command_lines_are_usage_errors_that_say_what_is_accepted() {
    let cases: &[(&str, &str)] = &[
        ("all_reduce_perf -b 1M -e 8", "is larger than -e 8"),
        ("all_reduce_perf -d complex", "-d complex"),
        (
            "all_reduce_perf -o xor",
            "expected sum, prod, max, min, avg, mulsum or all",
        ),
        (
            "all_reduce_perf -a 4",
            "expected 0 (rank 0), 1 (average), 2 (min) or 3 (max)",
        ),
        ("all_reduce_perf -G 2", "only -G 0"),
        ("all_reduce_perf -t 0", "-t must be at least 1"),
        ("all_reduce_perf -b 1 -e 8 -i 0", "never reaches -e"),
        ("all_reduce_perf broadcast", "invoked as all_reduce_perf"),
        ("ferroccl-perf gather", "unknown operation \"gather\""),
    ];
    for (line, want) in cases {
        let argv: Vec<&str> = line.split_whitespace().collect();
        let e = Plan::parse(&argv).expect_err(line);
        assert_eq!(e.exit_code, 2, "{line}");
        assert!(e.message.contains(want), "{line}: expected {want:?} in {}", e.message);
    }
    // Help is not an error.
    let h = Plan::parse(["all_reduce_perf", "-h"]).expect_err("help");
    assert_eq!(h.exit_code, 0);
    assert!(h.message.contains("--agg_iters"), "{}", h.message);
    // The binary itself: an unknown flag fails before anything runs and lists the flags.
    let o = Command::new(env!("CARGO_BIN_EXE_ferroccl-perf"))
        .args(["all_reduce", "-q", "1"])
        .output()
        .expect("run ferroccl-perf");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("'-q'"), "{err}");
    for flag in [
        "-o/--op",
        "-d/--datatype",
        "-t/--nthreads",
        "-J/--output_file",
        "-a/--average",
        "--ranks",
    ] {
        assert!(err.contains(flag), "{flag} missing from {err}");
    }
}

#[test]
fn hosts_spread_whole_blocks_of_processes() {
    // --hosts alone: one process per host.
    let p = plan("ferroccl-perf --hosts 4 all_reduce");
    assert_eq!((p.hosts, p.ranks, p.cluster.as_deref()), (Some(4), Some(4), None));
    let p = plan("ferroccl-perf --hosts 2 --ranks 4 --cluster lab all_reduce");
    assert_eq!(
        (p.hosts, p.ranks, p.cluster.as_deref()),
        (Some(2), Some(4), Some("lab"))
    );
    for (line, want) in [
        (
            "ferroccl-perf --hosts 2 --ranks 3 all_reduce",
            "not a multiple of --hosts 2",
        ),
        ("ferroccl-perf --hosts 0 all_reduce", "--hosts must be at least 1"),
    ] {
        let argv: Vec<&str> = line.split_whitespace().collect();
        let e = Plan::parse(&argv).expect_err(line);
        assert_eq!(e.exit_code, 2, "{line}: {e}");
        assert!(e.message.contains(want), "{line}: {e}");
    }
    // --cluster means nothing without --hosts.
    let e = Plan::parse(["ferroccl-perf", "--cluster", "lab", "all_reduce"]).expect_err("--cluster alone");
    assert_eq!(e.exit_code, 2, "{e}");
}
