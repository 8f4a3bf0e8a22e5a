//! `ferroccl-perf`'s command line and plan, with nccl-tests' flags and semantics
//! (NVIDIA/nccl-tests `src/common.cu`, `main` and `run`; `src/util.cu` for the
//! output), so scripts written for `all_reduce_perf` & co. run unchanged.
//!
//! [`Plan::parse`] turns an argument vector (with `argv[0]`: invoked as
//! `all_reduce_perf`, the collective is AllReduce, as nccl-tests' one binary per
//! collective) into a [`Plan`]: what the ranks run, and how it is reported.
//! [`report`] holds nccl-tests' JSON layout (`-J`) and ours (`--json`);
//! [`plot`] draws result files; [`timeline`] draws trace files.

pub mod cluster;
pub mod mem;
pub mod plot;
pub mod report;
pub mod timeline;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, Parser};
use ferroccl::{DataType, RedOp, TestOp};

/// nccl-tests' binary names this tool answers to (`<coll>_perf`), in
/// [`TestOp::NAMES`] order.
pub const PERF_BINARIES: [&str; 7] = [
    "all_reduce_perf",
    "all_gather_perf",
    "reduce_scatter_perf",
    "broadcast_perf",
    "reduce_perf",
    "sendrecv_perf",
    "alltoall_perf",
];

/// Largest buffer size accepted (bytes): no allocation can be larger (`isize::MAX`).
pub const MAX_SIZE: usize = isize::MAX as usize;

/// The command line: nccl-tests' flags (same letters, long names and value
/// grammar) plus ferroccl's own (`--ranks`, `--json`, `--show-tuning`, `--plot`).
#[derive(Parser, Debug, Clone)]
#[command(
    name = "ferroccl-perf",
    about = "nccl-tests style benchmark and checker for ferroccl collectives (also runs as all_reduce_perf, all_gather_perf, reduce_scatter_perf, broadcast_perf, reduce_perf, sendrecv_perf, alltoall_perf)"
)]
pub struct Args {
    /// Collective: all_reduce, all_gather, reduce_scatter, broadcast, reduce, sendrecv, alltoall
    /// (default: from the program name `<coll>_perf`, else all_reduce).
    #[arg(value_name = "COLL")]
    pub coll: Option<String>,
    /// Threads per process, each owning ranks (nccl-tests -t).
    #[arg(short = 't', long = "nthreads", default_value_t = 1)]
    pub nthreads: usize,
    /// Ranks per thread (nccl-tests -g: GPUs per thread; here each rank gets its own
    /// host thread, as a rank needs one to drive its blocking host collectives).
    #[arg(short = 'g', long = "ngpus", default_value_t = 1)]
    pub ngpus: usize,
    /// Minimum size in bytes (suffixes K, M, G).
    #[arg(short = 'b', long = "minbytes", default_value = "32M")]
    pub minbytes: String,
    /// Maximum size in bytes (suffixes K, M, G).
    #[arg(short = 'e', long = "maxbytes", default_value = "32M")]
    pub maxbytes: String,
    /// Increment between sizes when -f is 1 (suffixes K, M, G).
    #[arg(short = 'i', long = "stepbytes", default_value = "1M")]
    pub stepbytes: String,
    /// Multiplication factor between sizes (1: add -i instead).
    #[arg(short = 'f', long = "stepfactor", default_value_t = 1)]
    pub stepfactor: usize,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Operations aggregated in one group per iteration.
    #[arg(short = 'm', long = "agg_iters", default_value_t = 1)]
    pub agg_iters: usize,
    /// Warmup iterations: at the largest size, then the smallest (as
    /// nccl-tests), then before any size whose path none of those ran.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: usize,
    /// Run the whole sweep this many times, printing each (0: until interrupted).
    #[arg(short = 'N', long = "run_cycles", default_value_t = 1)]
    pub run_cycles: usize,
    /// Parallel init (0/1). Every rank of a process initialises on its own thread
    /// concurrently in any case; 1 adds nccl-tests' header line.
    #[arg(short = 'p', long = "parallel_init", default_value_t = 0)]
    pub parallel_init: u32,
    /// Check results: number of checked runs per size (0: none).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u32,
    /// Reduction: sum prod max min avg mulsum (premulsum) or all.
    #[arg(short = 'o', long = "op", alias = "op_type", default_value = "sum")]
    pub op: String,
    /// Datatype: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16, or all.
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub datatype: String,
    /// Root rank for broadcast/reduce.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// Blocking collectives (0/1): wait for completion and barrier after each.
    #[arg(short = 'z', long = "blocking", default_value_t = 0)]
    pub blocking: u32,
    /// Use the null stream (0/1): accepted; host streams here have no null stream.
    #[arg(short = 'y', long = "stream_null", default_value_t = 0)]
    pub stream_null: u32,
    /// Timeout in seconds for a stalled operation (0: the runtime's own, FERROCCL_TIMEOUT_SEC).
    #[arg(short = 'T', long = "timeout", default_value_t = 0)]
    pub timeout: u64,
    /// CUDA graph launches: only 0 (this runtime has no graphs).
    #[arg(short = 'G', long = "cudagraph", default_value_t = 0)]
    pub cudagraph: u32,
    /// Report CPU time (time to enqueue) instead of completion time (0/1).
    #[arg(short = 'C', long = "report_cputime", default_value_t = 0)]
    pub report_cputime: u32,
    /// Time reported across ranks: 0 rank 0, 1 average, 2 minimum, 3 maximum.
    #[arg(short = 'a', long = "average", default_value_t = 1)]
    pub average: u32,
    /// Buffer registration (0/1/2): accepted; host buffers need no registration here.
    #[arg(short = 'R', long = "local_register", default_value_t = 0)]
    pub local_register: u32,
    /// Write results in nccl-tests' JSON layout to this file (nccl-tests -J; an
    /// existing file is kept and `FILE.0`, `FILE.1`, … is tried instead).
    #[arg(short = 'J', long = "output_file", value_name = "FILE")]
    pub output_file: Option<PathBuf>,
    /// Spawn this many local processes (ranks x -t x -g); default: launcher environment or 1.
    #[arg(long = "ranks")]
    pub ranks: Option<usize>,
    /// With `--ranks`: bind process i to the i-th CPU this process may use
    /// (`core`, the default, when the processes do not outnumber those CPUs and
    /// each runs one rank, as Open MPI's `mpirun` binds its ranks) or leave them
    /// to the scheduler (`none`).
    #[arg(long = "bind-to", value_enum, default_value_t = BindTo::Core)]
    pub bind_to: BindTo,
    /// Where the send and receive buffers live: `host` (the default: pageable
    /// host memory) or `device` (CUDA device memory, `cuMemAlloc` on device
    /// `local rank mod device count`, as nccl-tests allocates; filled and checked
    /// through copies). `device` needs a CUDA driver and fails with a message
    /// naming what is missing otherwise.
    #[arg(long = "mem", value_enum, default_value_t = MemKind::Host)]
    pub mem: MemKind,
    /// Run the `--ranks` processes on the first K hosts of a simulated cluster
    /// (`scripts/netns-cluster.sh up K`: network namespaces as hosts), in blocks of
    /// N/K processes per host (process 0, this one, moves to host 0 first, so
    /// the bootstrap root listens on host 0's address). Needs root. Without
    /// `--ranks`: one process per host.
    #[arg(long = "hosts", value_name = "K")]
    pub hosts: Option<usize>,
    /// The cluster `--hosts` runs on (the script's `--name`; default
    /// `$FERROCCL_NETNS_CLUSTER`, else `fcc`).
    #[arg(long = "cluster", value_name = "NAME", requires = "hosts")]
    pub cluster: Option<String>,
    /// Print one JSON document (ferroccl's layout) instead of the table.
    #[arg(long = "json")]
    pub json: bool,
    /// After each size, print the algorithm, protocol, channels and chunk size the
    /// tuning chose for it (a `#  tuning:` line; always present in `--json`).
    #[arg(long = "show-tuning")]
    pub show_tuning: bool,
    /// Draw busbw and time against size into SVG from one or more result files
    /// (ours or nccl-tests' JSON) and exit: `--plot OUT.svg A.json [B.json …]`.
    #[arg(long = "plot", num_args = 2.., value_names = ["SVG", "JSON"])]
    pub plot: Vec<PathBuf>,
    /// Draw a PNG timeline (per-rank and per-channel rows, collectives over
    /// their proxy ops and step states) of trace files written with `--trace`
    /// and exit: `--render-trace OUT.png TRACE.json [TRACE.json …]`.
    #[arg(long = "render-trace", num_args = 2.., value_names = ["PNG", "TRACE"])]
    pub render_trace: Vec<PathBuf>,
    /// Record a timeline of every rank with the in-tree trace profiler
    /// (`libnccl-profiler-trace.so`): one Chrome/Perfetto trace JSON per process
    /// in DIR (sets `NCCL_PROFILER_PLUGIN=trace` unless already set, and
    /// `NCCL_PROFILER_TRACE_FILE=DIR/ferroccl-trace-%h-%p.json`).
    #[arg(long = "trace", value_name = "DIR")]
    pub trace: Option<PathBuf>,
}

/// How the time of one size is combined over ranks (nccl-tests `-a`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Average {
    /// Rank 0's time.
    Rank0,
    /// Mean over ranks.
    Mean,
    /// Minimum over ranks.
    Min,
    /// Maximum over ranks.
    Max,
}

impl Average {
    /// Combines per-rank times (`times[r]` of rank `r`).
    pub fn combine(self, times: &[f64]) -> f64 {
        match self {
            Average::Rank0 => times.first().copied().unwrap_or(0.0),
            Average::Mean => times.iter().sum::<f64>() / times.len().max(1) as f64,
            Average::Min => times.iter().copied().fold(f64::INFINITY, f64::min),
            Average::Max => times.iter().copied().fold(0.0, f64::max),
        }
    }
}

/// A reduction as nccl-tests names it on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedOpSpec {
    /// A built-in op (`sum prod max min avg`).
    Builtin(RedOp),
    /// `mulsum`: PreMulSum by a per-type scalar (2, exact in every type).
    MulSum,
}

impl RedOpSpec {
    /// nccl-tests' list for `-o all` (`test_opnames`).
    pub const ALL: [RedOpSpec; 6] = [
        RedOpSpec::Builtin(RedOp::Sum),
        RedOpSpec::Builtin(RedOp::Prod),
        RedOpSpec::Builtin(RedOp::Max),
        RedOpSpec::Builtin(RedOp::Min),
        RedOpSpec::Builtin(RedOp::Avg),
        RedOpSpec::MulSum,
    ];

    /// nccl-tests' name (`sum` … `mulsum`).
    pub fn name(self) -> &'static str {
        match self {
            RedOpSpec::Builtin(o) => o.name(),
            RedOpSpec::MulSum => "mulsum",
        }
    }

    /// The op for `dtype` (PreMulSum gets its scalar in that type).
    pub fn for_type(self, dtype: DataType) -> RedOp {
        match self {
            RedOpSpec::Builtin(o) => o,
            RedOpSpec::MulSum => RedOp::PreMulSum(ferroccl::Scalar::from_f64(dtype, 2.0)),
        }
    }
}

/// What one invocation does: the parsed, checked command line.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The collective (with its root).
    pub coll: TestOp,
    /// Datatypes, in order (`-d all`: every type).
    pub dtypes: Vec<DataType>,
    /// Reductions, in order (`-o all`: every op; one `sum` entry for
    /// non-reducing collectives, whose redop column reads `none`).
    pub ops: Vec<RedOpSpec>,
    /// Sizes of the sweep in bytes, before rounding to the element size.
    pub sizes: Vec<usize>,
    /// `-b` and `-e` in bytes.
    pub min_bytes: usize,
    /// `-e` in bytes.
    pub max_bytes: usize,
    /// `-f` (1: additive steps of [`step_bytes`](Self::step_bytes)).
    pub step_factor: usize,
    /// `-i` in bytes.
    pub step_bytes: usize,
    /// Threads per process (`-t`).
    pub nthreads: usize,
    /// Ranks per thread (`-g`).
    pub ngpus: usize,
    /// Timed iterations (`-n`).
    pub iters: usize,
    /// Warmup iterations (`-w`).
    pub warmup: usize,
    /// Operations per group (`-m`).
    pub agg_iters: usize,
    /// Sweeps (`-N`; 0 = forever).
    pub run_cycles: usize,
    /// Checked runs per size (`-c`).
    pub check: u32,
    /// `-z`.
    pub blocking: bool,
    /// `-p`.
    pub parallel_init: bool,
    /// `-C`.
    pub report_cputime: bool,
    /// `-a`.
    pub average: Average,
    /// `-R` (no effect on host buffers).
    pub local_register: u32,
    /// `-T` in seconds (0: the runtime's default).
    pub timeout_sec: u64,
    /// `-J`.
    pub output_file: Option<PathBuf>,
    /// `--json`.
    pub json: bool,
    /// `--show-tuning`.
    pub show_tuning: bool,
    /// `--ranks`.
    pub ranks: Option<usize>,
    /// `--bind-to`.
    pub bind_to: BindTo,
    /// `--mem`.
    pub mem: MemKind,
    /// `--hosts` (then [`ranks`](Self::ranks) is set, a multiple of it).
    pub hosts: Option<usize>,
    /// `--cluster`.
    pub cluster: Option<String>,
    /// The program name the collective came from (`all_reduce_perf`), if any.
    pub invoked_as: Option<String>,
    /// `--plot SVG JSON…`: draw these result files instead of running.
    pub plot: Option<(PathBuf, Vec<PathBuf>)>,
    /// `--render-trace PNG TRACE…`: draw these trace files instead of running.
    pub render_trace: Option<(PathBuf, Vec<PathBuf>)>,
    /// `--trace DIR`: where the trace profiler writes its files.
    pub trace: Option<PathBuf>,
}

/// Where the benchmark's buffers live (`--mem`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MemKind {
    /// Pageable host memory.
    Host,
    /// CUDA device memory.
    Device,
}

/// Where `--ranks` processes run (`--bind-to`, `mpirun`'s grammar).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BindTo {
    /// Process i on the i-th allowed CPU, when there are enough of them.
    Core,
    /// No binding.
    None,
}

/// A command line that cannot run: the message, and whether it is a usage error
/// (exit status 2) or a request for help/version (printed on stdout, status 0).
#[derive(Debug, Clone)]
pub struct PlanError {
    /// What to print.
    pub message: String,
    /// 0 for `--help`/`--version`, else 2.
    pub exit_code: u8,
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

fn usage(message: String) -> PlanError {
    PlanError { message, exit_code: 2 }
}

/// Every flag the tool accepts, `-b, --minbytes` style, for error messages.
pub fn accepted_flags() -> String {
    let cmd = Args::command();
    let mut v: Vec<String> = cmd
        .get_arguments()
        .filter(|a| !a.is_positional())
        .map(|a| match (a.get_short(), a.get_long()) {
            (Some(s), Some(l)) => format!("-{s}/--{l}"),
            (None, Some(l)) => format!("--{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, None) => a.get_id().to_string(),
        })
        .collect();
    v.push("-h/--help".into());
    v.join(" ")
}

/// The collective named by a program name (`all_reduce_perf`, `/x/y/alltoall_perf`).
pub fn coll_from_program(argv0: &str) -> Option<&'static str> {
    let base = std::path::Path::new(argv0).file_name()?.to_str()?;
    PERF_BINARIES.iter().position(|b| *b == base).map(|i| TestOp::NAMES[i])
}

/// A size with an optional `K`/`M`/`G` suffix (powers of 1024, as nccl-tests'
/// `parsesize`), checked for overflow.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mul) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1usize << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n = num
        .trim()
        .parse::<usize>()
        .map_err(|_| format!("bad size {s:?} (expected e.g. 8, 128K, 64M, 1G)"))?;
    n.checked_mul(mul)
        .filter(|&b| b <= MAX_SIZE)
        .ok_or_else(|| format!("size {s:?} is too large (at most {MAX_SIZE} bytes)"))
}

/// nccl-tests' sweep: from `min` while `<= max`, times `factor` when `factor > 1`,
/// else plus `step`. A sweep that would never end (`step` 0 or an overflow that
/// stays below `max`) is cut at the overflow; `step` 0 with `min < max` is refused
/// by [`Plan::parse`].
pub fn sweep(min: usize, max: usize, factor: usize, step: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut size = min;
    while size <= max {
        v.push(size);
        let next = if factor > 1 {
            size.checked_mul(factor)
        } else {
            size.checked_add(step)
        };
        match next {
            Some(n) if n > size => size = n,
            _ => break,
        }
    }
    v
}

impl Plan {
    /// Parses `argv` (including `argv[0]`), as the binary does.
    pub fn parse<I, T>(argv: I) -> Result<Plan, PlanError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
        let args = match Args::try_parse_from(&argv) {
            Ok(a) => a,
            Err(e) => {
                use clap::error::ErrorKind;
                let code = match e.kind() {
                    ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                    _ => 2,
                };
                let mut message = e.render().to_string();
                if matches!(e.kind(), ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand) {
                    message.push_str(&format!("\naccepted flags: {}\n", accepted_flags()));
                }
                return Err(PlanError {
                    message,
                    exit_code: code,
                });
            }
        };
        let argv0 = argv
            .first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default();
        Plan::from_args(&args, &argv0)
    }

    /// Checks `args` and builds the plan; `argv0` names the collective when it is
    /// one of [`PERF_BINARIES`].
    pub fn from_args(args: &Args, argv0: &str) -> Result<Plan, PlanError> {
        let from_name = coll_from_program(argv0);
        let coll_name = match (&args.coll, from_name) {
            (Some(c), Some(n)) => {
                let given = TestOp::parse(c, args.root).map_err(usage)?;
                if given.name() != n {
                    return Err(usage(format!(
                        "invoked as {n}_perf, but the collective argument says {c:?}"
                    )));
                }
                n.to_string()
            }
            (Some(c), None) => c.clone(),
            (None, Some(n)) => n.to_string(),
            (None, None) => "all_reduce".to_string(),
        };
        let coll = TestOp::parse(&coll_name, args.root).map_err(usage)?;
        let dtypes = if args.datatype.eq_ignore_ascii_case("all") {
            DataType::ALL.to_vec()
        } else {
            vec![
                args.datatype
                    .parse::<DataType>()
                    .map_err(|e| usage(format!("-d {}: {e} (or all)", args.datatype)))?,
            ]
        };
        let ops = if !coll.reduces() {
            if !args.op.eq_ignore_ascii_case("all") {
                // Still validated, as nccl-tests parses it for every collective.
                parse_redop(&args.op)?;
            }
            vec![RedOpSpec::Builtin(RedOp::Sum)]
        } else if args.op.eq_ignore_ascii_case("all") {
            RedOpSpec::ALL.to_vec()
        } else {
            vec![parse_redop(&args.op)?]
        };
        let min_bytes = parse_size(&args.minbytes).map_err(|e| usage(format!("-b: {e}")))?;
        let max_bytes = parse_size(&args.maxbytes).map_err(|e| usage(format!("-e: {e}")))?;
        let step_bytes = parse_size(&args.stepbytes).map_err(|e| usage(format!("-i: {e}")))?;
        if min_bytes > max_bytes {
            return Err(usage(format!(
                "-b {} ({min_bytes} bytes) is larger than -e {} ({max_bytes} bytes)",
                args.minbytes, args.maxbytes
            )));
        }
        if args.stepfactor == 0 {
            return Err(usage("-f must be at least 1".into()));
        }
        if args.stepfactor == 1 && step_bytes == 0 && min_bytes < max_bytes {
            return Err(usage("-i 0 with -f 1 never reaches -e; give -i > 0 or -f > 1".into()));
        }
        let positive = |v: usize, flag: &str| {
            if v == 0 {
                Err(usage(format!("{flag} must be at least 1")))
            } else {
                Ok(v)
            }
        };
        let nthreads = positive(args.nthreads, "-t")?;
        let ngpus = positive(args.ngpus, "-g")?;
        let agg_iters = positive(args.agg_iters, "-m")?;
        let average = match args.average {
            0 => Average::Rank0,
            1 => Average::Mean,
            2 => Average::Min,
            3 => Average::Max,
            v => {
                return Err(usage(format!(
                    "-a {v}: expected 0 (rank 0), 1 (average), 2 (min) or 3 (max)"
                )));
            }
        };
        if args.cudagraph != 0 {
            return Err(usage(format!(
                "-G {}: CUDA graphs do not exist in this runtime (host collectives); only -G 0",
                args.cudagraph
            )));
        }
        if args.local_register > 2 {
            return Err(usage(format!(
                "-R {}: expected 0 (none), 1 (local) or 2 (symmetric)",
                args.local_register
            )));
        }
        if args.ranks == Some(0) {
            return Err(usage("--ranks must be at least 1".into()));
        }
        let ranks = match (args.hosts, args.ranks) {
            (Some(0), _) => return Err(usage("--hosts must be at least 1".into())),
            (Some(k), Some(n)) if n % k != 0 => {
                return Err(usage(format!(
                    "--ranks {n} is not a multiple of --hosts {k}: every host runs the same number of processes"
                )));
            }
            (Some(k), None) => Some(k),
            (_, n) => n,
        };
        let sizes = sweep(min_bytes, max_bytes, args.stepfactor, step_bytes);
        Ok(Plan {
            coll,
            dtypes,
            ops,
            sizes,
            min_bytes,
            max_bytes,
            step_factor: args.stepfactor,
            step_bytes,
            nthreads,
            ngpus,
            iters: args.iters,
            warmup: args.warmup,
            agg_iters,
            run_cycles: args.run_cycles,
            check: args.check,
            blocking: args.blocking != 0,
            parallel_init: args.parallel_init != 0,
            report_cputime: args.report_cputime != 0,
            average,
            local_register: args.local_register,
            timeout_sec: args.timeout,
            output_file: args.output_file.clone(),
            json: args.json,
            show_tuning: args.show_tuning,
            ranks,
            bind_to: args.bind_to,
            mem: args.mem,
            hosts: args.hosts,
            cluster: args.cluster.clone(),
            invoked_as: from_name.map(|n| format!("{n}_perf")),
            plot: args
                .plot
                .split_first()
                .map(|(svg, inputs)| (svg.clone(), inputs.to_vec())),
            render_trace: args
                .render_trace
                .split_first()
                .map(|(png, inputs)| (png.clone(), inputs.to_vec())),
            trace: args.trace.clone(),
        })
    }

    /// Ranks each process runs (`-t` x `-g`).
    pub fn ranks_per_process(&self) -> usize {
        self.nthreads * self.ngpus
    }

    /// The name nccl-tests' header and JSON give the program (`all_reduce_perf`).
    pub fn program_name(&self) -> String {
        self.invoked_as
            .clone()
            .unwrap_or_else(|| format!("{}_perf", self.coll.name()))
    }
}

fn parse_redop(s: &str) -> Result<RedOpSpec, PlanError> {
    match s.parse::<RedOp>() {
        Ok(RedOp::PreMulSum(_)) => Ok(RedOpSpec::MulSum),
        Ok(o) => Ok(RedOpSpec::Builtin(o)),
        Err(e) => Err(usage(format!(
            "-o {s}: {e} (expected sum, prod, max, min, avg, mulsum or all)"
        ))),
    }
}
