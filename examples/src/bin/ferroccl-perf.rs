//! `ferroccl-perf`: measure and check collectives the way nccl-tests does.
//!
//! ```text
//! ferroccl-perf --ranks 4 all_reduce -b 8 -e 64M -f 2 -c 1
//! mpirun -np 4 -x NCCL_COMM_ID=127.0.0.1:29500 ferroccl-perf all_reduce -c 1
//! ```
//!
//! Launch modes:
//! * `--ranks N`: this process is rank 0; it creates the unique id and spawns N-1
//!   copies of itself as ranks 1..N (id passed in hex through the environment,
//!   children print nothing on stdout). All output comes from rank 0.
//! * a launcher's environment (Open MPI `OMPI_COMM_WORLD_RANK/SIZE`, PMI
//!   `PMI_RANK/PMI_SIZE`, PMIx `PMIX_RANK` + a size variable, Slurm
//!   `SLURM_PROCID/SLURM_NTASKS`, torchrun `RANK/WORLD_SIZE`): every process is one
//!   rank; `NCCL_COMM_ID=<host>:<port>` must name an address rank 0's host can
//!   listen on (rank 0 starts the bootstrap root there), so the ranks need no other
//!   way to share the unique id.
//! * neither: a single rank.
//!
//! Per size it prints nccl-tests' columns (size, count, type, redop, root, then
//! time/algbw/busbw/#wrong out of place and in place), then "Out of bounds values"
//! and "Avg bus bandwidth", plus each rank's peak RSS; `--json` prints one JSON
//! document instead. `--show-tuning` adds a `#  tuning:` line per size with the
//! algorithm, protocol, channels and chunk size the tuning chose. Exit status 1 when any value was wrong or an error occurred.

use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Instant;

use clap::Parser;
use ferroccl::coll::check::{self, TestOp};
use ferroccl::{Comm, CommConfig, DataType, RedOp, Scalar, Stream, UniqueId, group_end, group_start};

const ENV_RANK: &str = "FERROCCL_PERF_RANK";
const ENV_NRANKS: &str = "FERROCCL_PERF_NRANKS";
const ENV_ID: &str = "FERROCCL_PERF_ID";

#[derive(Parser, Debug, Clone)]
#[command(
    name = "ferroccl-perf",
    about = "nccl-tests style benchmark and checker for ferroccl collectives"
)]
struct Args {
    /// Operation: all_reduce, all_gather, reduce_scatter, broadcast, reduce, sendrecv, alltoall.
    #[arg(value_name = "OP")]
    op_pos: Option<String>,
    /// Operation (same as the positional argument).
    #[arg(long = "op")]
    op_flag: Option<String>,
    /// Minimum size in bytes (suffixes K, M, G).
    #[arg(short = 'b', long = "minbytes", default_value = "32M")]
    minbytes: String,
    /// Maximum size in bytes (suffixes K, M, G).
    #[arg(short = 'e', long = "maxbytes", default_value = "32M")]
    maxbytes: String,
    /// Multiplication factor between sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    stepfactor: usize,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    iters: usize,
    /// Warmup iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    warmup: usize,
    /// Check results (1) or not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    check: u32,
    /// Datatype: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16.
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    datatype: String,
    /// Reduction: sum prod max min avg premulsum.
    #[arg(short = 'o', long = "op_type", default_value = "sum")]
    redop: String,
    /// Root rank for broadcast/reduce.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    root: usize,
    /// Spawn this many local ranks (processes); default: launcher environment or 1.
    #[arg(long = "ranks")]
    ranks: Option<usize>,
    /// Print one JSON document instead of the table.
    #[arg(long = "json")]
    json: bool,
    /// After each size, print the algorithm, protocol, channels and chunk size the
    /// tuning chose for it (a `#  tuning:` line; always present in `--json`).
    #[arg(long = "show-tuning")]
    show_tuning: bool,
}

/// Largest buffer size accepted (bytes): no allocation can be larger (`isize::MAX`).
const MAX_SIZE: usize = isize::MAX as usize;

/// A size with an optional `K`/`M`/`G` suffix (powers of 1024, as nccl-tests'
/// `parsesize`), checked for overflow.
fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mul) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1usize << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n = num
        .parse::<usize>()
        .map_err(|_| format!("bad size {s:?} (expected e.g. 8, 128K, 64M, 1G)"))?;
    n.checked_mul(mul)
        .filter(|&b| b <= MAX_SIZE)
        .ok_or_else(|| format!("size {s:?} is too large (at most {MAX_SIZE} bytes)"))
}

/// A zeroed buffer of `bytes`, or an error saying the allocation failed (never an abort).
fn buffer(bytes: usize, what: &str) -> Result<Vec<u8>, String> {
    let mut v: Vec<u8> = Vec::new();
    v.try_reserve_exact(bytes)
        .map_err(|e| format!("cannot allocate the {what} buffer of {bytes} bytes: {e}"))?;
    v.resize(bytes, 0);
    Ok(v)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    Reduce,
    SendRecv,
    AllToAll,
}

impl Op {
    fn parse(s: &str) -> Result<Op, String> {
        Ok(match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "all_reduce" | "allreduce" => Op::AllReduce,
            "all_gather" | "allgather" => Op::AllGather,
            "reduce_scatter" | "reducescatter" => Op::ReduceScatter,
            "broadcast" | "bcast" => Op::Broadcast,
            "reduce" => Op::Reduce,
            "sendrecv" | "send_recv" => Op::SendRecv,
            "alltoall" | "all_to_all" => Op::AllToAll,
            _ => {
                return Err(format!(
                    "unknown operation {s:?} (expected all_reduce, all_gather, reduce_scatter, broadcast, reduce, sendrecv, alltoall)"
                ));
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Op::AllReduce => "all_reduce",
            Op::AllGather => "all_gather",
            Op::ReduceScatter => "reduce_scatter",
            Op::Broadcast => "broadcast",
            Op::Reduce => "reduce",
            Op::SendRecv => "sendrecv",
            Op::AllToAll => "alltoall",
        }
    }

    /// The tuned function (`None` for send/receive patterns).
    fn func(self) -> Option<ferroccl::tune::Func> {
        use ferroccl::tune::Func;
        match self {
            Op::AllReduce => Some(Func::AllReduce),
            Op::AllGather => Some(Func::AllGather),
            Op::ReduceScatter => Some(Func::ReduceScatter),
            Op::Broadcast => Some(Func::Broadcast),
            Op::Reduce => Some(Func::Reduce),
            Op::SendRecv | Op::AllToAll => None,
        }
    }

    /// nccl-tests' bus bandwidth factor.
    fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Op::AllReduce => 2.0 * (n - 1.0) / n,
            Op::AllGather | Op::ReduceScatter | Op::AllToAll => (n - 1.0) / n,
            Op::Broadcast | Op::Reduce | Op::SendRecv => 1.0,
        }
    }

    fn reduces(self) -> bool {
        matches!(self, Op::AllReduce | Op::ReduceScatter | Op::Reduce)
    }

    fn has_root(self) -> bool {
        matches!(self, Op::Broadcast | Op::Reduce)
    }

    fn in_place_supported(self) -> bool {
        !matches!(self, Op::SendRecv | Op::AllToAll)
    }

    fn test_op(self, root: usize) -> TestOp {
        match self {
            Op::AllReduce => TestOp::AllReduce,
            Op::AllGather => TestOp::AllGather,
            Op::ReduceScatter => TestOp::ReduceScatter,
            Op::Broadcast => TestOp::Broadcast { root },
            Op::Reduce => TestOp::Reduce { root },
            Op::SendRecv => TestOp::SendRecv,
            Op::AllToAll => TestOp::AllToAll,
        }
    }

    /// (per-rank parameter count, total elements shown in the `count` column) for `bytes`.
    fn counts(self, bytes: usize, es: usize, n: usize) -> (usize, usize) {
        let total = bytes / es;
        match self {
            Op::AllGather | Op::ReduceScatter | Op::AllToAll => (total / n, total / n * n),
            _ => (total, total),
        }
    }
}

/// Rank and size from a launcher's environment, if any: the first pair whose two
/// variables are both set. A set variable that is not a number is an error naming it
/// (not a silent fall-back to a single rank).
fn launcher_env() -> Result<Option<(usize, usize, &'static str)>, String> {
    let pairs: [(&str, &str, &'static str); 6] = [
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"),
        ("PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "PMIx"),
        ("PMI_RANK", "PMI_SIZE", "PMI"),
        ("PMIX_RANK", "PMIX_SIZE", "PMIx"),
        ("SLURM_PROCID", "SLURM_NTASKS", "Slurm"),
        ("RANK", "WORLD_SIZE", "torchrun"),
    ];
    for (r, s, who) in pairs {
        let (Ok(rv), Ok(sv)) = (std::env::var(r), std::env::var(s)) else {
            continue;
        };
        let num = |k: &str, v: &str| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| format!("{who} environment: {k}={v:?} is not a non-negative integer"))
        };
        return Ok(Some((num(r, &rv)?, num(s, &sv)?, who)));
    }
    Ok(None)
}

fn peak_rss_kib() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) == 0 {
            ru.ru_maxrss.max(0) as u64
        } else {
            0
        }
    }
}

struct Row {
    bytes: usize,
    count: usize,
    /// (time us, algbw, busbw, wrong) out of place / in place.
    oop: (f64, f64, f64, Option<u64>),
    ip: Option<(f64, f64, f64, Option<u64>)>,
    /// The tuning decision the timed operations ran with.
    tuning: Option<ferroccl::tune::Decision>,
}

struct Bench<'a> {
    comm: &'a Comm,
    op: Op,
    dtype: DataType,
    redop: RedOp,
    root: usize,
    args: &'a Args,
    send: Vec<u8>,
    recv: Vec<u8>,
    stream: Stream,
    /// The decision of the last timed loop (read before the checks' own AllReduces).
    decision: Option<ferroccl::tune::Decision>,
}

impl Bench<'_> {
    /// Enqueues one operation on `count` (per-rank parameter count).
    fn launch(&mut self, count: usize, in_place: bool) -> Result<(), ferroccl::Error> {
        let (n, r) = (self.comm.nranks(), self.comm.rank());
        let es = self.dtype.size();
        let rp = self.recv.as_mut_ptr();
        let sp: *const u8 = if in_place {
            match self.op {
                Op::AllGather => rp.wrapping_add(r * count * es),
                _ => rp,
            }
        } else {
            self.send.as_ptr()
        };
        let rp = if in_place && self.op == Op::ReduceScatter {
            rp.wrapping_add(r * count * es)
        } else {
            rp
        };
        let (c, d, o, s) = (self.comm, self.dtype, self.redop, &self.stream);
        // SAFETY: the buffers are owned by `self`, sized for the largest count, and
        // not touched until the stream is synchronized.
        unsafe {
            match self.op {
                Op::AllReduce => c.all_reduce(sp, rp, count, d, o, s),
                Op::AllGather => c.all_gather(sp, rp, count, d, s),
                Op::ReduceScatter => c.reduce_scatter(sp, rp, count, d, o, s),
                Op::Broadcast => c.broadcast(sp, rp, count, d, self.root, s),
                Op::Reduce => c.reduce(sp, rp, count, d, o, self.root, s),
                Op::SendRecv => {
                    group_start();
                    let a = c.send(sp, count, d, (r + 1) % n, s);
                    let b = c.recv(rp, count, d, (r + n - 1) % n, s);
                    let g = group_end();
                    a.and(b).and(g)
                }
                Op::AllToAll => {
                    group_start();
                    let mut res = Ok(());
                    for p in 0..n {
                        let a = c.send(sp.wrapping_add(p * count * es), count, d, p, s);
                        let b = c.recv(rp.wrapping_add(p * count * es), count, d, p, s);
                        res = res.and(a).and(b);
                    }
                    let g = group_end();
                    res.and(g)
                }
            }
        }
    }

    fn fill(&mut self, count: usize, in_place: bool) {
        let (n, r) = (self.comm.nranks(), self.comm.rank());
        let es = self.dtype.size();
        let (se, re) = self.op.test_op(self.root).buffer_elems(count, n);
        let mut input = vec![0u8; se * es];
        check::fill(&mut input, self.dtype, &self.redop, r, 7);
        self.recv[..re * es].fill(0xA5);
        if in_place {
            match self.op {
                Op::AllGather => self.recv[r * count * es..(r + 1) * count * es].copy_from_slice(&input),
                _ => self.recv[..se * es].copy_from_slice(&input),
            }
        } else {
            self.send[..se * es].copy_from_slice(&input);
        }
    }

    fn wrong(&self, count: usize, in_place: bool) -> u64 {
        let (n, r) = (self.comm.nranks(), self.comm.rank());
        let es = self.dtype.size();
        let top = self.op.test_op(self.root);
        let Some(want) = check::expected(top, self.dtype, &self.redop, n, r, count, 7) else {
            return 0;
        };
        let got = match self.op {
            Op::ReduceScatter if in_place => &self.recv[r * count * es..(r + 1) * count * es],
            _ => &self.recv[..want.len()],
        };
        check::count_wrong(self.dtype, got, &want) as u64
    }

    /// Sum of a value over all ranks (through the communicator itself).
    fn sum_u64(&self, v: u64) -> Result<u64, ferroccl::Error> {
        let mut out = [0u8; 8];
        self.comm
            .all_reduce_sync(&v.to_ne_bytes(), &mut out, DataType::Uint64, RedOp::Sum)?;
        Ok(u64::from_ne_bytes(out))
    }

    fn sum_f64(&self, v: f64) -> Result<f64, ferroccl::Error> {
        let mut out = [0u8; 8];
        self.comm
            .all_reduce_sync(&v.to_ne_bytes(), &mut out, DataType::Float64, RedOp::Sum)?;
        Ok(f64::from_ne_bytes(out))
    }

    fn measure(
        &mut self,
        count: usize,
        bytes: usize,
        in_place: bool,
    ) -> Result<(f64, f64, f64, Option<u64>), ferroccl::Error> {
        let n = self.comm.nranks();
        for _ in 0..self.args.warmup {
            self.launch(count, in_place)?;
        }
        self.stream.synchronize()?;
        self.comm.barrier()?;
        let t0 = Instant::now();
        for _ in 0..self.args.iters {
            self.launch(count, in_place)?;
        }
        self.stream.synchronize()?;
        self.decision = self.op.func().and_then(|f| self.comm.tuning().last(f));
        let secs = t0.elapsed().as_secs_f64() / self.args.iters.max(1) as f64;
        let secs = self.sum_f64(secs)? / n as f64;
        let algbw = bytes as f64 / 1e9 / secs;
        let busbw = algbw * self.op.bus_factor(n);
        let wrong = if self.args.check != 0 {
            self.fill(count, in_place);
            self.launch(count, in_place)?;
            self.stream.synchronize()?;
            let w = self.wrong(count, in_place);
            Some(self.sum_u64(w)?)
        } else {
            None
        };
        Ok((secs * 1e6, algbw, busbw, wrong))
    }
}

fn fmt_time(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{us:7.0}")
    } else {
        format!("{us:7.2}")
    }
}

fn run_rank(args: &Args, op: Op, nranks: usize, rank: usize, id: &UniqueId, launcher: &str) -> Result<bool, String> {
    let dtype: DataType = args
        .datatype
        .parse()
        .map_err(|e| format!("-d {}: {e}", args.datatype))?;
    let mut redop: RedOp = args.redop.parse().map_err(|e| format!("-o {}: {e}", args.redop))?;
    if let RedOp::PreMulSum(_) = redop {
        redop = RedOp::PreMulSum(Scalar::from_f64(dtype, 2.0));
    }
    if op.has_root() && args.root >= nranks {
        return Err(format!(
            "-r {}: root must be below the number of ranks ({nranks})",
            args.root
        ));
    }
    let (minb, maxb) = sizes(args)?;
    let es = dtype.size();
    let (_, max_total) = op.counts(maxb, es, nranks);
    let (se, re) = op
        .test_op(args.root)
        .buffer_elems(op.counts(maxb, es, nranks).0, nranks);
    let bytes = |elems: usize| {
        elems
            .checked_mul(es)
            .filter(|&b| b <= MAX_SIZE)
            .ok_or_else(|| format!("-e {}: the buffers of {nranks} ranks overflow", args.maxbytes))
    };
    let (send_bytes, recv_bytes) = (bytes(se.max(max_total))?, bytes(re.max(max_total))?);
    // Allocate before joining, so a size this rank cannot hold fails fast.
    let send = buffer(send_bytes, "send")?;
    let recv = buffer(recv_bytes, "receive")?;
    let comm =
        Comm::init_rank(nranks, id, rank, CommConfig::default()).map_err(|e| format!("rank {rank}: init: {e}"))?;
    let mut bench = Bench {
        comm: &comm,
        op,
        dtype,
        redop,
        root: args.root,
        args,
        send,
        recv,
        stream: Stream::new(),
        decision: None,
    };
    let lead = rank == 0;
    let root_col: i64 = if op.has_root() { args.root as i64 } else { -1 };
    let redop_col = if op.reduces() { redop.name() } else { "none" };
    if lead && !args.json {
        println!(
            "# ferroccl-perf {}: nranks {nranks} ({launcher}) minBytes {minb} maxBytes {maxb} step: {}(factor) warmup iters: {} iters: {} validation: {}",
            op.name(),
            args.stepfactor,
            args.warmup,
            args.iters,
            args.check
        );
        let info = comm.net_info();
        println!(
            "# net plugin: {} (ncclNet v{}) from {}; nchannels {}",
            info.name,
            info.version,
            info.path.display(),
            comm.nchannels()
        );
        let used: Vec<String> = comm.transports().iter().map(|(t, n)| format!("{t} x{n}")).collect();
        println!("# transports (rank 0's connections): {}", used.join(", "));
        println!("#");
        println!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          ",
            "", "", "", "", ""
        );
        println!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
            "size",
            "count",
            "type",
            "redop",
            "root",
            "time",
            "algbw",
            "busbw",
            "#wrong",
            "time",
            "algbw",
            "busbw",
            "#wrong"
        );
        println!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""
        );
    }
    let mut rows = Vec::new();
    let mut bytes = minb;
    loop {
        let (count, total) = op.counts(bytes, es, nranks);
        let shown = total * es;
        let oop = bench
            .measure(count, shown, false)
            .map_err(|e| format!("rank {rank}: {} {shown} B: {e}", op.name()))?;
        let tuning = bench.decision;
        let ip = if op.in_place_supported() {
            Some(
                bench
                    .measure(count, shown, true)
                    .map_err(|e| format!("rank {rank}: {} {shown} B in place: {e}", op.name()))?,
            )
        } else {
            None
        };
        if lead && !args.json {
            let w = |x: Option<u64>| x.map_or("N/A".to_string(), |v| v.to_string());
            let mut line = format!(
                "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}  {}  {:6.2}  {:6.2}  {:>6}",
                shown,
                total,
                dtype.name(),
                redop_col,
                root_col,
                fmt_time(oop.0),
                oop.1,
                oop.2,
                w(oop.3)
            );
            match ip {
                Some(ip) => line.push_str(&format!(
                    "  {}  {:6.2}  {:6.2}  {:>6}",
                    fmt_time(ip.0),
                    ip.1,
                    ip.2,
                    w(ip.3)
                )),
                None => line.push_str(&format!("  {:>7}  {:>6}  {:>6}  {:>6}", "N/A", "N/A", "N/A", "N/A")),
            }
            println!("{line}");
            if args.show_tuning
                && let Some(d) = &tuning
            {
                println!("#  tuning: {}", d.describe());
            }
        }
        rows.push(Row {
            bytes: shown,
            count: total,
            oop,
            ip,
            tuning,
        });
        if bytes >= maxb {
            break;
        }
        bytes = bytes.saturating_mul(args.stepfactor.max(2)).min(maxb);
    }
    // Peak RSS of every rank, gathered through the communicator.
    let mine = peak_rss_kib();
    let mut all = vec![0u8; 8 * nranks];
    comm.all_gather_sync(&mine.to_ne_bytes(), &mut all, DataType::Uint64)
        .map_err(|e| format!("rank {rank}: {e}"))?;
    let rss: Vec<u64> = all
        .chunks(8)
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let wrong_total: u64 = rows
        .iter()
        .map(|r| r.oop.3.unwrap_or(0) + r.ip.and_then(|i| i.3).unwrap_or(0))
        .sum();
    let busbw: Vec<f64> = rows
        .iter()
        .flat_map(|r| std::iter::once(r.oop.2).chain(r.ip.map(|i| i.2)))
        .collect();
    let avg_bus = if busbw.is_empty() {
        0.0
    } else {
        busbw.iter().sum::<f64>() / busbw.len() as f64
    };
    comm.finalize().map_err(|e| format!("rank {rank}: finalize: {e}"))?;
    if lead {
        if args.json {
            let j = serde_json::json!({
                "op": op.name(),
                "nranks": nranks,
                "launcher": launcher,
                "datatype": dtype.name(),
                "redop": redop_col,
                "root": root_col,
                "net": { "name": comm.net_info().name, "version": comm.net_info().version,
                         "path": comm.net_info().path.display().to_string() },
                "nchannels": comm.nchannels(),
                "transports": comm.transports().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
                "check": args.check != 0,
                "results": rows.iter().map(|r| serde_json::json!({
                    "size": r.bytes, "count": r.count,
                    "out_of_place": { "time_us": r.oop.0, "algbw": r.oop.1, "busbw": r.oop.2, "wrong": r.oop.3 },
                    "in_place": r.ip.map(|i| serde_json::json!({ "time_us": i.0, "algbw": i.1, "busbw": i.2, "wrong": i.3 })),
                    "tuning": r.tuning.map(|d| serde_json::json!({
                        "algo": d.algo.name(), "proto": d.proto.name(), "nchannels": d.nchannels,
                        "chunk_bytes": d.chunk_bytes, "allgather_reduce": d.allgather_reduce,
                        "model_time_us": d.time_us, "by_tuner": d.by_tuner })),
                })).collect::<Vec<_>>(),
                "out_of_bounds": wrong_total,
                "avg_busbw": avg_bus,
                "peak_rss_kib": rss,
            });
            println!("{}", serde_json::to_string_pretty(&j).expect("json"));
        } else {
            println!(
                "# Out of bounds values : {wrong_total} {}",
                if wrong_total == 0 { "OK" } else { "FAILED" }
            );
            println!("# Avg bus bandwidth    : {avg_bus:.4} ");
            let list: Vec<String> = rss
                .iter()
                .enumerate()
                .map(|(r, k)| format!("r{r} {:.1}", *k as f64 / 1024.0))
                .collect();
            println!("# Peak RSS per rank (MiB): {}", list.join(", "));
            println!("#");
        }
    }
    drop(bench);
    comm.destroy().map_err(|e| format!("rank {rank}: destroy: {e}"))?;
    Ok(wrong_total == 0)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let op_name = args
        .op_flag
        .clone()
        .or(args.op_pos.clone())
        .unwrap_or_else(|| "all_reduce".into());
    let op = match Op::parse(&op_name) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ferroccl-perf: {e}");
            return ExitCode::from(2);
        }
    };
    // Bad sizes fail before any rank starts.
    if let Err(e) = sizes(&args) {
        eprintln!("ferroccl-perf: {e}");
        return ExitCode::from(2);
    }
    // Child of `--ranks N`.
    if let (Ok(r), Ok(n), Ok(id)) = (
        std::env::var(ENV_RANK),
        std::env::var(ENV_NRANKS),
        std::env::var(ENV_ID),
    ) {
        let (Ok(r), Ok(n)) = (r.parse::<usize>(), n.parse::<usize>()) else {
            eprintln!("ferroccl-perf: bad {ENV_RANK}/{ENV_NRANKS}");
            return ExitCode::from(2);
        };
        let id = match UniqueId::from_hex(&id) {
            Ok(id) => id,
            Err(e) => {
                eprintln!("ferroccl-perf: {ENV_ID}: {e}");
                return ExitCode::from(2);
            }
        };
        return finish(run_rank(&args, op, n, r, &id, "--ranks"));
    }
    if let Some(n) = args.ranks {
        if n == 0 {
            eprintln!("ferroccl-perf: --ranks must be at least 1");
            return ExitCode::from(2);
        }
        return spawn_local(&args, op, n);
    }
    let launched = match launcher_env() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ferroccl-perf: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some((rank, size, who)) = launched {
        if size == 0 || rank >= size {
            eprintln!("ferroccl-perf: {who} environment gives rank {rank} of {size}");
            return ExitCode::from(2);
        }
        if size > 1 && std::env::var("NCCL_COMM_ID").map_or(true, |v| v.is_empty()) {
            eprintln!(
                "ferroccl-perf: {who} launched {size} ranks but NCCL_COMM_ID is not set; export it to an address \
                 rank 0 can listen on, e.g. `mpirun -x NCCL_COMM_ID=<rank0-host>:29500 ...`"
            );
            return ExitCode::from(2);
        }
        let id =
            match bootstrap_config().and_then(|c| ferroccl::bootstrap::get_unique_id(&c).map_err(|e| e.to_string())) {
                Ok(id) => id,
                Err(e) => {
                    eprintln!("ferroccl-perf: rank {rank}: unique id: {e}");
                    return ExitCode::from(1);
                }
            };
        return finish(run_rank(&args, op, size, rank, &id, who));
    }
    spawn_local(&args, op, 1)
}

/// Bootstrap settings for the unique id this process creates: the same parameters
/// the ranks resolve (`NCCL_SOCKET_*`, `NCCL_COMM_ID`, `FERROCCL_TIMEOUT_SEC`), so a
/// root started here gives up on missing ranks after the ranks' own timeout.
/// `-b`/`-e` in bytes, checked: both parse, `-b` <= `-e`, `-f` >= 2 for a sweep.
fn sizes(args: &Args) -> Result<(usize, usize), String> {
    let minb = parse_size(&args.minbytes).map_err(|e| format!("-b: {e}"))?;
    let maxb = parse_size(&args.maxbytes).map_err(|e| format!("-e: {e}"))?;
    if minb > maxb {
        return Err(format!(
            "-b {} ({minb} bytes) is larger than -e {} ({maxb} bytes)",
            args.minbytes, args.maxbytes
        ));
    }
    if args.stepfactor < 2 && minb != maxb {
        return Err("-f must be at least 2".into());
    }
    Ok((minb, maxb))
}

fn bootstrap_config() -> Result<ferroccl::bootstrap::BootstrapConfig, String> {
    ferroccl::bootstrap::BootstrapConfig::from_params(ferroccl::config::Config::global())
}

fn finish(r: Result<bool, String>) -> ExitCode {
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("ferroccl-perf: {e}");
            ExitCode::from(1)
        }
    }
}

/// How a child ended, in words: `exited with status 1`, `was killed by signal 9 (SIGKILL)`.
fn describe_exit(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = s.code() {
        return format!("exited with status {code}");
    }
    match s.signal() {
        Some(sig) => {
            let name = match sig {
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGBUS => " (SIGBUS)",
                libc::SIGINT => " (SIGINT)",
                _ => "",
            };
            format!(
                "was killed by signal {sig}{name}{}",
                if s.core_dumped() { ", core dumped" } else { "" }
            )
        }
        None => format!("ended with {s}"),
    }
}

fn spawn_local(args: &Args, op: Op, n: usize) -> ExitCode {
    if n > ferroccl::bootstrap::MAX_NRANKS {
        eprintln!(
            "ferroccl-perf: --ranks {n} is above the limit of {} ranks",
            ferroccl::bootstrap::MAX_NRANKS
        );
        return ExitCode::from(2);
    }
    let id = match bootstrap_config().and_then(|c| ferroccl::bootstrap::get_unique_id(&c).map_err(|e| e.to_string())) {
        Ok(id) => id,
        Err(e) => {
            eprintln!("ferroccl-perf: unique id: {e}");
            return ExitCode::from(1);
        }
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ferroccl-perf: cannot find my own executable: {e}");
            return ExitCode::from(1);
        }
    };
    let mut children: Vec<(usize, Child)> = Vec::new();
    for r in 1..n {
        let spawned = Command::new(&exe)
            .args(std::env::args_os().skip(1))
            .env(ENV_RANK, r.to_string())
            .env(ENV_NRANKS, n.to_string())
            .env(ENV_ID, id.to_hex())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn();
        match spawned {
            Ok(c) => children.push((r, c)),
            Err(e) => {
                eprintln!("ferroccl-perf: spawning rank {r}: {e}");
                for (_, c) in &mut children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return ExitCode::from(1);
            }
        }
    }
    let launcher = if n > 1 { "--ranks" } else { "single process" };
    let mine = run_rank(args, op, n, 0, &id, launcher);
    let failed = mine.is_err();
    let mut ok = matches!(mine, Ok(true));
    if let Err(e) = &mine {
        eprintln!("ferroccl-perf: {e}");
    }
    for (r, c) in &mut children {
        let mut killed = false;
        if failed {
            // Give the others a moment to report their own error, then stop them.
            let deadline = Instant::now() + std::time::Duration::from_secs(10);
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            killed = matches!(c.try_wait(), Ok(None));
            let _ = c.kill();
        }
        match c.wait() {
            Ok(s) if s.success() => {}
            Ok(_) if killed => ok = false,
            Ok(s) => {
                // A child that died on its own: name it and how.
                eprintln!("ferroccl-perf: rank {r} (pid {}) {}", c.id(), describe_exit(s));
                ok = false;
            }
            Err(e) => {
                eprintln!("ferroccl-perf: waiting for rank {r}: {e}");
                ok = false;
            }
        }
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
