//! `ferroccl-perf`: measure and check collectives the way nccl-tests does.
//!
//! ```text
//! ferroccl-perf --ranks 4 all_reduce -b 8 -e 64M -f 2 -c 1
//! all_reduce_perf -b 8 -e 64M -f 2 -t 2 -d all -o all      # a link named like nccl-tests' binary
//! mpirun -np 4 -x NCCL_COMM_ID=127.0.0.1:29500 ferroccl-perf all_reduce -c 1
//! ferroccl-perf --plot sweep.svg a.json b.json
//! ferroccl-perf --render-trace trace.png /tmp/trc/*.json
//! ```
//!
//! Flags, defaults and output follow NVIDIA/nccl-tests (`src/common.cu`,
//! `src/util.cu`); see [`ferroccl_examples::perf`] for the command line and what
//! each flag maps to. Invoked under an nccl-tests binary name (`all_reduce_perf`,
//! … as `cargo xtask dist` links them in `target/dist/bin`), the collective comes
//! from the name.
//!
//! Ranks: every process runs `-t` x `-g` ranks, each on its own thread. Processes:
//! * `--ranks N`: this process is process 0; it creates the unique id and spawns
//!   N-1 copies of itself (id passed in hex through the environment, children
//!   print nothing on stdout). All output comes from rank 0.
//! * a launcher's environment (Open MPI `OMPI_COMM_WORLD_RANK/SIZE`, PMI
//!   `PMI_RANK/PMI_SIZE`, PMIx `PMIX_RANK` + a size variable, Slurm
//!   `SLURM_PROCID/SLURM_NTASKS`, torchrun `RANK/WORLD_SIZE`): every process is
//!   one process of the job; `NCCL_COMM_ID=<host>:<port>` must name an address
//!   process 0's host can listen on.
//! * neither: one process.
//!
//! Output: nccl-tests' header (`# nThread … nGpus …`, `# Using devices`, one
//! `#  Rank …` line per rank), its columns per size (size, count, type, redop,
//! root, then time/algbw/busbw/#wrong out of place and in place) for every
//! datatype and reduction asked for, `# Out of bounds values`, `# Avg bus
//! bandwidth`, plus the net plugin, transports and each rank's peak RSS.
//! `-J FILE` also writes nccl-tests' JSON layout; `--json` prints ferroccl's own
//! JSON document instead of the table; `--show-tuning` adds a `#  tuning:` line
//! per size. Exit status 1 when any value was wrong or an error occurred, 2 for
//! a bad command line.

use std::io::Write;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferroccl::check;
use ferroccl::{Comm, CommConfig, DataType, RedOp, Stream, TestOp, UniqueId, group_end, group_start};
use ferroccl_examples::perf::mem::PerfBuf;
use ferroccl_examples::perf::report::{self, JsonPerf, JsonRow, NcclTestsJson};
use ferroccl_examples::perf::{self, BindTo, MAX_SIZE, Plan};
use ferroccl_kernels::cuda::DeviceBuffer;

const ENV_RANK: &str = "FERROCCL_PERF_RANK";
const ENV_NRANKS: &str = "FERROCCL_PERF_NRANKS";
const ENV_ID: &str = "FERROCCL_PERF_ID";

/// The NCCL version whose behaviour ferroccl follows (2.30.7), as
/// `ncclGetVersion` codes it (`major*10000 + minor*100 + patch`).
const NCCL_VERSION_CODE: i64 = 23007;

/// Bytes of one rank's `#  Rank …` line when gathered.
const DEVICE_LINE: usize = 256;

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

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// nccl-tests' `getFloatStr`: `value` in `width` columns, with 2, 1 or 0
/// decimals as it grows, then C's `%.1e` style.
fn float_str(value: f64, width: usize) -> String {
    let mut power = 0usize;
    let mut val: u64 = 1;
    while value >= val as f64 && power < 40 {
        power += 1;
        val = val.saturating_mul(10);
    }
    if power + 2 < width {
        format!("{value:>width$.2}")
    } else if power + 1 < width {
        format!("{value:>width$.1}")
    } else if power < width + 1 {
        format!("{value:>width$.0}")
    } else {
        // C's %.1e: mantissa, `e`, sign, at least two exponent digits.
        let s = format!("{value:.1e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        let c = format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
        format!("{c:>width$}")
    }
}

/// C's `%g` (6 significant digits, trailing zeros dropped).
fn fmt_g(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_nan() { "nan".into() } else { format!("{v}") };
    }
    let exp = v.abs().log10().floor() as i32;
    if !(-4..6).contains(&exp) {
        let s = format!("{v:.5e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        let e: i32 = e.parse().unwrap_or(0);
        return format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The numbers of one variant of one size.
#[derive(Debug, Clone, Copy)]
struct Perf {
    time_us: f64,
    algbw: f64,
    busbw: f64,
    /// `None` without `-c`.
    wrong: Option<u64>,
}

struct Row {
    bytes: usize,
    count: usize,
    dtype: DataType,
    redop: &'static str,
    oop: Perf,
    ip: Option<Perf>,
    tuning: Option<ferroccl::tune::Decision>,
}

/// Output shared by the threads of process 0 (only global rank 0 writes).
struct Out {
    json_file: Option<(std::fs::File, std::path::PathBuf)>,
}

struct Bench<'a> {
    comm: &'a Comm,
    plan: &'a Plan,
    coll: TestOp,
    dtype: DataType,
    redop: RedOp,
    send: PerfBuf,
    recv: PerfBuf,
    stream: Stream,
    decision: Option<ferroccl::tune::Decision>,
    /// The paths (see [`Path`]) warmed up so far; a size
    /// whose decision is none of them is warmed up before it is timed.
    warmed: Vec<Path>,
}

/// Sizes up to this many bytes (latency-bound: a stall of a microsecond shows
/// in `-n 20`'s mean) run `-w` untimed operations between the barrier and the
/// clock's start, larger ones one ([`Bench::measure`]).
const ALIGN_MAX_BYTES: usize = 64 << 10;

/// What a size's operations run on: its tuning decision's algorithm,
/// protocol, channel count and whether an AllReduce runs as AllGather+Reduce
/// (`None` where the collective has no decision).
type Path = Option<(ferroccl::tune::Algorithm, ferroccl::tune::Protocol, usize, bool)>;

impl Bench<'_> {
    /// The path of the last operation this rank ran (see [`Path`]).
    fn last_path(&self) -> Path {
        let d = self.coll.func().and_then(|f| self.comm.tuning().last(f))?;
        Some((d.algo, d.proto, d.nchannels, d.allgather_reduce))
    }

    /// `iters` untimed operations on `count`, waited for; records (and with
    /// `--show-tuning` prints, rank 0) the path they ran on.
    fn warm_up(&mut self, count: usize, bytes: usize, iters: usize) -> Result<(), ferroccl::Error> {
        if iters == 0 {
            return Ok(());
        }
        for _ in 0..iters {
            self.launch(count, false)?;
        }
        self.stream.synchronize()?;
        let path = self.last_path();
        if !self.warmed.contains(&path) {
            self.warmed.push(path);
        }
        if self.plan.show_tuning && self.comm.rank() == 0 && !self.plan.json {
            let how = match path {
                Some((a, p, c, agr)) => format!(
                    "{}/{}{} channels {c}",
                    a.name(),
                    p.name(),
                    if agr { " (allgather+reduce)" } else { "" }
                ),
                None => "no tuning decision".to_string(),
            };
            println!("#  warm-up: {bytes} B x{iters}: {how}");
        }
        Ok(())
    }

    /// Enqueues one operation on `count` (per-rank parameter count).
    fn launch(&mut self, count: usize, in_place: bool) -> Result<(), ferroccl::Error> {
        let es = self.dtype.size();
        let (soff, roff) = self.coll.in_place_offsets(count, self.comm.rank());
        let rp = self.recv.as_mut_ptr();
        let (sp, rp): (*const u8, *mut u8) = if in_place {
            (rp.wrapping_add(soff * es), rp.wrapping_add(roff * es))
        } else {
            (self.send.as_ptr(), rp)
        };
        // SAFETY: the buffers are owned by `self`, sized for the largest count of
        // every datatype (in place: the receive buffer holds the send buffer too),
        // and not touched until the stream is synchronized.
        unsafe {
            self.coll
                .launch(self.comm, sp, rp, count, self.dtype, self.redop, &self.stream)
        }
    }

    /// One timed iteration: `-m` operations (in one group when more than one),
    /// then with `-z` a wait and a barrier.
    fn iteration(&mut self, count: usize, in_place: bool) -> Result<(), ferroccl::Error> {
        let agg = self.plan.agg_iters;
        if agg > 1 {
            group_start();
        }
        let mut res = Ok(());
        for _ in 0..agg {
            res = res.and(self.launch(count, in_place));
        }
        if agg > 1 {
            res = res.and(group_end());
        }
        res?;
        if self.plan.blocking {
            self.stream.synchronize()?;
            self.comm.barrier()?;
        }
        Ok(())
    }

    /// Writes this rank's input for a check and poisons the output (copies
    /// into device memory with `--mem device`).
    fn fill(&mut self, count: usize, in_place: bool, seed: u64) -> Result<(), ferroccl::Error> {
        let (n, r) = (self.comm.nranks(), self.comm.rank());
        let es = self.dtype.size();
        let (se, re) = self.coll.buffer_elems(count, n);
        let mut input = vec![0u8; se * es];
        check::fill(&mut input, self.dtype, &self.redop, r, seed);
        self.recv.fill(0, se.max(re) * es, 0xA5)?;
        if in_place {
            let (soff, _) = self.coll.in_place_offsets(count, r);
            self.recv.write(soff * es, &input)?;
        } else {
            self.send.write(0, &input)?;
        }
        Ok(())
    }

    /// Elements of this rank's output that differ from the expected result.
    fn wrong(&self, count: usize, in_place: bool, seed: u64) -> Result<u64, ferroccl::Error> {
        let (n, r) = (self.comm.nranks(), self.comm.rank());
        let es = self.dtype.size();
        let Some(want) = check::expected(self.coll, self.dtype, &self.redop, n, r, count, seed) else {
            return Ok(0);
        };
        let off = if in_place {
            self.coll.in_place_offsets(count, r).1 * es
        } else {
            0
        };
        let got = self.recv.read(off, want.len())?;
        Ok(check::count_wrong(self.dtype, &got, &want) as u64)
    }

    fn gather_f64(&self, v: f64) -> Result<Vec<f64>, ferroccl::Error> {
        let n = self.comm.nranks();
        let mut all = vec![0u8; 8 * n];
        side_coll(
            self.comm,
            self.recv.cuda_dev(),
            &v.to_ne_bytes(),
            &mut all,
            DataType::Float64,
            None,
        )?;
        Ok(all
            .chunks(8)
            .map(|c| f64::from_ne_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    fn sum_u64(&self, v: u64) -> Result<u64, ferroccl::Error> {
        let mut out = [0u8; 8];
        side_coll(
            self.comm,
            self.recv.cuda_dev(),
            &v.to_ne_bytes(),
            &mut out,
            DataType::Uint64,
            Some(RedOp::Sum),
        )?;
        Ok(u64::from_ne_bytes(out))
    }

    /// nccl-tests' `BenchTime`: one untimed run, `-n` timed iterations, the time
    /// combined over ranks by `-a`, then `-c` checked runs.
    ///
    /// Two steps of our own before the timing: a size whose path (algorithm,
    /// protocol, channels, see [`Path`]) no warm-up has run yet is warmed up with `-w`
    /// iterations first (its connections, plan and caches made before its
    /// clock starts); and after the barrier untimed operations of this size
    /// (one, or `-w` up to [`ALIGN_MAX_BYTES`]), so the ranks start the clock
    /// within one operation of each other rather than within the bootstrap
    /// barrier's skew (tens of µs on a loaded host, which `-n 20` operations
    /// of a microsecond each do not amortise), with this very operation's
    /// caches warm.
    fn measure(&mut self, count: usize, bytes: usize, in_place: bool, rep: u64) -> Result<Perf, ferroccl::Error> {
        let n = self.comm.nranks();
        self.launch(count, in_place)?;
        self.stream.synchronize()?;
        if !self.warmed.contains(&self.last_path()) {
            self.warm_up(count, bytes, self.plan.warmup)?;
        }
        self.comm.barrier()?;
        let align = if bytes <= ALIGN_MAX_BYTES {
            self.plan.warmup.max(1)
        } else {
            1
        };
        for _ in 0..align {
            self.launch(count, in_place)?;
        }
        self.stream.synchronize()?;
        let t0 = Instant::now();
        for _ in 0..self.plan.iters {
            self.iteration(count, in_place)?;
        }
        let ops = (self.plan.iters * self.plan.agg_iters).max(1) as f64;
        let cpu = t0.elapsed().as_secs_f64() / ops;
        self.stream.synchronize()?;
        let done = t0.elapsed().as_secs_f64() / ops;
        self.decision = self.coll.func().and_then(|f| self.comm.tuning().last(f));
        let mine = if self.plan.report_cputime { cpu } else { done };
        let secs = self.plan.average.combine(&self.gather_f64(mine)?);
        let algbw = if secs > 0.0 { bytes as f64 / 1e9 / secs } else { 0.0 };
        let busbw = algbw * self.coll.bus_factor(n);
        let wrong = if self.plan.check > 0 {
            let mut total = 0;
            for _ in 0..self.plan.check {
                self.fill(count, in_place, rep)?;
                self.launch(count, in_place)?;
                self.stream.synchronize()?;
                total = self.sum_u64(self.wrong(count, in_place, rep)?)?;
                if total != 0 {
                    break;
                }
            }
            Some(total)
        } else {
            None
        };
        Ok(Perf {
            time_us: secs * 1e6,
            algbw,
            busbw,
            wrong,
        })
    }
}

fn perf_cols(p: &Perf) -> String {
    let wrong = match p.wrong {
        Some(w) => format!("{:>6}", fmt_g(w as f64)),
        None => "   N/A".to_string(),
    };
    format!(
        "  {}  {}  {}  {wrong}",
        float_str(p.time_us, 7),
        float_str(p.algbw, 6),
        float_str(p.busbw, 6)
    )
}

fn json_perf(p: &Perf, cputime: bool) -> JsonPerf {
    JsonPerf {
        time: (!cputime).then_some(p.time_us),
        cpu_time: cputime.then_some(p.time_us),
        alg_bw: p.algbw,
        bus_bw: p.busbw,
        nwrong: p.wrong.map(|w| w as f64),
    }
}

/// Buffer sizes (send, receive) in bytes for the largest size of every datatype.
fn buffer_bytes(plan: &Plan, nranks: usize) -> Result<(usize, usize), String> {
    let (mut s, mut r) = (0usize, 0usize);
    for dtype in &plan.dtypes {
        let es = dtype.size();
        let (count, shown) = plan.coll.counts(plan.max_bytes, es, nranks);
        let (se, re) = plan.coll.buffer_elems(count, nranks);
        let bytes = |elems: usize| {
            elems
                .checked_mul(es)
                .filter(|&b| b <= MAX_SIZE)
                .ok_or_else(|| format!("-e {}: the buffers of {nranks} ranks overflow", plan.max_bytes))
        };
        s = s.max(bytes(se.max(shown))?);
        r = r.max(bytes(se.max(re).max(shown))?);
    }
    Ok((s, r))
}

/// One of the tool's own collectives (the device lines, times, error counts,
/// peak RSS): AllReduce with `op`, else AllGather, of the host bytes `send`
/// into `recv`. A communicator bound to GPU `dev` may keep its FIFOs in GPU
/// memory (the P2P transport), where, as in NCCL, only device buffers may go:
/// then the bytes travel through two small device buffers of that GPU.
///
/// Errors: the collective's, or a device allocation or copy that failed.
fn side_coll(
    comm: &Comm,
    dev: Option<usize>,
    send: &[u8],
    recv: &mut [u8],
    dtype: DataType,
    op: Option<RedOp>,
) -> Result<(), ferroccl::Error> {
    let Some(d) = dev else {
        return match op {
            Some(op) => comm.all_reduce_sync(send, recv, dtype, op),
            None => comm.all_gather_sync(send, recv, dtype),
        };
    };
    let mut s = DeviceBuffer::alloc(d, send.len())?;
    s.write(0, send)?;
    let r = DeviceBuffer::alloc(d, recv.len())?;
    let stream = Stream::new();
    let count = send.len() / dtype.size();
    // SAFETY: both device buffers hold the bytes the collective reads and
    // writes, and live until the synchronize below.
    unsafe {
        match op {
            Some(op) => comm.all_reduce(s.as_ptr(), r.as_ptr(), count, dtype, op, &stream),
            None => comm.all_gather(s.as_ptr(), r.as_ptr(), count, dtype, &stream),
        }
    }?;
    stream.synchronize()?;
    r.read(0, recv)?;
    Ok(())
}

/// One rank, on its own thread: init, header (rank 0), the sweeps, footer.
fn run_rank(
    plan: &Plan,
    nranks: usize,
    rank: usize,
    local: usize,
    id: &UniqueId,
    launcher: &str,
    out: &Mutex<Out>,
) -> Result<bool, String> {
    let (send_bytes, recv_bytes) = buffer_bytes(plan, nranks)?;
    // Allocate before joining, so a size this rank cannot hold fails fast.
    let send = PerfBuf::alloc(plan.mem, send_bytes, "send", local).map_err(|e| format!("rank {rank}: {e}"))?;
    let recv = PerfBuf::alloc(plan.mem, recv_bytes, "receive", local).map_err(|e| format!("rank {rank}: {e}"))?;
    let config = CommConfig {
        timeout: (plan.timeout_sec > 0).then(|| Duration::from_secs(plan.timeout_sec)),
        // `--mem device`: bind the buffers' GPU (NCCL binds the current device).
        cuda_dev: recv.cuda_dev(),
        ..CommConfig::default()
    };
    let side_dev = recv.cuda_dev();
    let comm = Comm::init_rank(nranks, id, rank, config).map_err(|e| format!("rank {rank}: init: {e}"))?;
    let lead = rank == 0;
    let table = lead && !plan.json;
    let program = plan.program_name();
    let start_time = report::format_now();

    // `#  Rank …` lines of every rank, gathered in rank order.
    let line = format!(
        "#  Rank {rank:>2} Group {:>2} Pid {:>6} on {:>10} device {local:>2} [0000:00:00] {}, net {}",
        0,
        std::process::id(),
        hostname(),
        recv.describe(),
        comm.net_info().name
    );
    let mut mine = [0u8; DEVICE_LINE];
    let n = line.len().min(DEVICE_LINE - 1);
    mine[..n].copy_from_slice(&line.as_bytes()[..n]);
    let mut all = vec![0u8; DEVICE_LINE * nranks];
    side_coll(&comm, side_dev, &mine, &mut all, DataType::Uint8, None)
        .map_err(|e| format!("rank {rank}: device lines: {e}"))?;
    let device_lines: Vec<String> = all
        .chunks(DEVICE_LINE)
        .map(|c| {
            let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
            String::from_utf8_lossy(&c[..end]).into_owned()
        })
        .collect();

    if table {
        let step = if plan.step_factor > 1 {
            format!("{}(factor)", plan.step_factor)
        } else {
            format!("{}(bytes)", plan.step_bytes)
        };
        println!(
            "# nccl-tests version ferroccl-perf-{} nccl-headers={NCCL_VERSION_CODE} nccl-library={NCCL_VERSION_CODE}",
            env!("CARGO_PKG_VERSION")
        );
        println!("# Collective test starting: {program}");
        println!(
            "# nThread {} nGpus {} minBytes {} maxBytes {} step: {step} warmup iters: {} iters: {} agg iters: {} validation: {} graph: 0",
            plan.nthreads,
            plan.ngpus,
            plan.min_bytes,
            plan.max_bytes,
            plan.warmup,
            plan.iters,
            plan.agg_iters,
            plan.check
        );
        if plan.blocking {
            println!("# Blocking Enabled: wait for completion and barrier after each collective ");
        }
        if plan.parallel_init {
            println!("# Parallel Init Enabled: threads call into NcclInitRank concurrently ");
        }
        if plan.local_register > 0 {
            println!(
                "# Registration (-R {}): host buffers need none in ferroccl; no effect",
                plan.local_register
            );
        }
        println!("#");
        println!("# Using devices");
        for l in &device_lines {
            println!("{l}");
        }
        let info = comm.net_info();
        println!(
            "# net plugin: {} (ncclNet v{}) from {}; nchannels {}; nranks {nranks} ({launcher})",
            info.name,
            info.version,
            info.path.display(),
            comm.nchannels()
        );
        let used: Vec<String> = comm.transports().iter().map(|(t, n)| format!("{t} x{n}")).collect();
        println!("# transports (rank 0's connections): {}", used.join(", "));
        if let Ok(g) = out.lock()
            && let Some((_, p)) = &g.json_file
        {
            println!("# Writing JSON output to {}", p.display());
        }
        let time = if plan.report_cputime { "cputime" } else { "time" };
        println!("#");
        println!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          ",
            "", "", "", "", ""
        );
        println!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} ",
            "size",
            "count",
            "type",
            "redop",
            "root",
            time,
            "algbw",
            "busbw",
            "#wrong",
            time,
            "algbw",
            "busbw",
            "#wrong"
        );
        println!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} ",
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""
        );
        let _ = std::io::stdout().flush();
    }

    let mut bench = Bench {
        comm: &comm,
        plan,
        coll: plan.coll,
        dtype: plan.dtypes[0],
        redop: RedOp::Sum,
        send,
        recv,
        stream: Stream::new(),
        decision: None,
        warmed: Vec::new(),
    };
    let root_col: i64 = plan.coll.root().map_or(-1, |r| r as i64);
    let mut rows: Vec<Row> = Vec::new();
    let mut rep = 0u64;
    let mut cycle = 0usize;
    while plan.run_cycles == 0 || cycle < plan.run_cycles {
        cycle += 1;
        for &dtype in &plan.dtypes {
            for &spec in &plan.ops {
                bench.dtype = dtype;
                bench.redop = spec.for_type(dtype);
                let redop_col = if plan.coll.reduces() { spec.name() } else { "none" };
                run_sweep(&mut bench, plan, dtype, redop_col, root_col, table, &mut rows, &mut rep)
                    .map_err(|e| format!("rank {rank}: {} {}: {e}", plan.coll.name(), dtype.name()))?;
            }
        }
    }

    // Peak RSS of every rank, gathered through the communicator.
    let mine = peak_rss_kib();
    let mut all = vec![0u8; 8 * nranks];
    side_coll(&comm, side_dev, &mine.to_ne_bytes(), &mut all, DataType::Uint64, None)
        .map_err(|e| format!("rank {rank}: {e}"))?;
    let rss: Vec<u64> = all
        .chunks(8)
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .collect();
    // nccl-tests counts the checks that found wrong values.
    let errors: u64 = rows
        .iter()
        .flat_map(|r| std::iter::once(r.oop.wrong).chain(r.ip.map(|i| i.wrong)))
        .filter(|w| w.is_some_and(|w| w > 0))
        .count() as u64;
    let wrong_total: u64 = rows
        .iter()
        .flat_map(|r| std::iter::once(r.oop.wrong).chain(r.ip.map(|i| i.wrong)))
        .map(|w| w.unwrap_or(0))
        .sum();
    let busbw: Vec<f64> = rows
        .iter()
        .flat_map(|r| std::iter::once(r.oop.busbw).chain(r.ip.map(|i| i.busbw)))
        .collect();
    let avg_bus = if busbw.is_empty() {
        0.0
    } else {
        busbw.iter().sum::<f64>() / busbw.len() as f64
    };
    let min_bw: Option<f64> = std::env::var("NCCL_TESTS_MIN_BW")
        .ok()
        .and_then(|v| v.trim().parse().ok());
    let bw_ok = min_bw.is_none_or(|m| avg_bus >= m * 0.9);
    comm.finalize().map_err(|e| format!("rank {rank}: finalize: {e}"))?;
    if lead {
        if plan.json {
            print_our_json(plan, &comm, nranks, launcher, &rows, wrong_total, avg_bus, &rss);
        } else {
            println!(
                "# {:<20} : {errors} {}",
                "Out of bounds values",
                if errors == 0 { "OK" } else { "FAILED" }
            );
            println!(
                "# {:<20} : {} {}",
                "Avg bus bandwidth",
                fmt_g(avg_bus),
                match min_bw {
                    None => "",
                    Some(_) if bw_ok => "OK",
                    Some(_) => "FAILED",
                }
            );
            let list: Vec<String> = rss
                .iter()
                .enumerate()
                .map(|(r, k)| format!("r{r} {:.1}", *k as f64 / 1024.0))
                .collect();
            println!("# Peak RSS per rank (MiB): {}", list.join(", "));
            println!("#");
            println!("# Collective test concluded: {program}");
            println!();
            println!("#");
        }
        let taken = out.lock().ok().and_then(|mut g| g.json_file.take());
        if let Some((file, path)) = taken {
            let doc = nccl_tests_json(
                plan,
                start_time,
                device_lines,
                &rows,
                errors,
                avg_bus,
                min_bw.map(|_| bw_ok),
            );
            let text = serde_json::to_string(&doc).map_err(|e| format!("-J: {e}"))?;
            let mut file = file;
            file.write_all(text.as_bytes())
                .and_then(|_| file.write_all(b"\n"))
                .map_err(|e| format!("-J {}: {e}", path.display()))?;
        }
    }
    drop(bench);
    comm.destroy().map_err(|e| format!("rank {rank}: destroy: {e}"))?;
    Ok(wrong_total == 0 && bw_ok)
}

/// nccl-tests' `TimeTest` for one datatype and reduction: warm up at the largest
/// and the smallest size, then every size out of place and in place.
///
/// nccl-tests (`src/common.cu`, `TimeTest`) runs `-w` warm-up iterations at
/// the largest size, then `-w` at the smallest (as here), then each size's
/// `BenchTime`, which runs one untimed operation before its timed ones. That
/// alone left the first rows here 10-60x slow (issue 35); [`Bench::measure`]
/// adds the per-path warm-up and the start-aligning operation.
#[allow(clippy::too_many_arguments)]
fn run_sweep(
    bench: &mut Bench<'_>,
    plan: &Plan,
    dtype: DataType,
    redop_col: &'static str,
    root_col: i64,
    table: bool,
    rows: &mut Vec<Row>,
    rep: &mut u64,
) -> Result<(), ferroccl::Error> {
    let n = bench.comm.nranks();
    let es = dtype.size();
    for b in [plan.max_bytes, plan.min_bytes] {
        let (count, shown) = plan.coll.counts(b, es, n);
        bench.warm_up(count, shown * es, plan.warmup)?;
    }
    for &size in &plan.sizes {
        let (count, shown) = plan.coll.counts(size, es, n);
        let bytes = shown * es;
        *rep += 1;
        let oop = bench.measure(count, bytes, false, *rep)?;
        let tuning = bench.decision;
        let ip = if plan.coll.has_in_place() {
            Some(bench.measure(count, bytes, true, *rep)?)
        } else {
            None
        };
        if table {
            let mut line = format!(
                "{bytes:>12}  {count:>12}  {:>8}  {redop_col:>6}  {root_col:>6}{}",
                dtype.name(),
                perf_cols(&oop)
            );
            match &ip {
                Some(ip) => line.push_str(&perf_cols(ip)),
                None => line.push_str(&format!("  {:>7}  {:>6}  {:>6}  {:>6}", "N/A", "N/A", "N/A", "N/A")),
            }
            println!("{line}");
            if plan.show_tuning
                && let Some(d) = &tuning
            {
                println!("#  tuning: {}", d.describe());
            }
            let _ = std::io::stdout().flush();
        }
        rows.push(Row {
            bytes,
            count,
            dtype,
            redop: redop_col,
            oop,
            ip,
            tuning,
        });
    }
    Ok(())
}

fn nccl_tests_json(
    plan: &Plan,
    start_time: String,
    device_lines: Vec<String>,
    rows: &[Row],
    errors: u64,
    avg_bus: f64,
    bw_ok: Option<bool>,
) -> NcclTestsJson {
    let root_col: i64 = plan.coll.root().map_or(-1, |r| r as i64);
    let devices = device_lines.iter().filter_map(|l| parse_device_line(l)).collect();
    let mut env: Vec<String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL_") || k.starts_with("FERROCCL_"))
        .filter(|(k, _)| k != ENV_ID)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.sort();
    NcclTestsJson {
        version: report::JSON_FILE_VERSION,
        start_time,
        args: std::env::args().collect(),
        env,
        nccl_version: NCCL_VERSION_CODE,
        config: report::JsonConfig {
            nthreads: plan.nthreads as i64,
            ngpus: plan.ngpus as i64,
            minimum_bytes: plan.min_bytes as u64,
            maximum_bytes: plan.max_bytes as u64,
            step_factor: (plan.step_factor > 1).then_some(plan.step_factor as i64),
            step_bytes: (plan.step_factor <= 1).then_some(plan.step_bytes as u64),
            warmup_iters: plan.warmup as i64,
            iterations: plan.iters as i64,
            aggregated_iterations: plan.agg_iters as i64,
            validation: plan.check as i64,
            graph: 0,
            blocking_collectives: report::json_bool(plan.blocking),
            parallel_init: report::json_bool(plan.parallel_init),
            devices,
        },
        results: rows
            .iter()
            .map(|r| JsonRow {
                size: r.bytes as u64,
                count: r.count as u64,
                dtype: r.dtype.name().to_string(),
                redop: r.redop.to_string(),
                root: format!("{root_col:>6}"),
                out_of_place: Some(json_perf(&r.oop, plan.report_cputime)),
                in_place: r.ip.as_ref().map(|p| json_perf(p, plan.report_cputime)),
                actual_iterations: (plan.iters * plan.agg_iters) as i64,
                experiment_name: plan.program_name(),
            })
            .collect(),
        out_of_bounds: report::JsonOutOfBounds {
            count: errors as i64,
            okay: report::json_bool(errors == 0),
        },
        average_bus_bandwidth: report::JsonAvgBw {
            bandwidth: avg_bus,
            okay: bw_ok.map_or_else(|| "unchecked".to_string(), report::json_bool),
        },
        errors: Vec::new(),
        end_time: report::format_now(),
    }
}

/// Parses one `#  Rank …` line (nccl-tests' `parseRankInfo`).
fn parse_device_line(l: &str) -> Option<report::JsonDevice> {
    let rest = l.strip_prefix("#  Rank ")?;
    let mut it = rest.split_whitespace();
    let rank = it.next()?.parse().ok()?;
    (it.next()? == "Group").then_some(())?;
    let group = it.next()?.parse().ok()?;
    (it.next()? == "Pid").then_some(())?;
    let pid = it.next()?.parse().ok()?;
    (it.next()? == "on").then_some(())?;
    let hostname = it.next()?.to_string();
    (it.next()? == "device").then_some(())?;
    let device = it.next()?.parse().ok()?;
    let tail = rest.split_once('[')?.1;
    let (hex, info) = tail.split_once(']')?;
    Some(report::JsonDevice {
        rank,
        group,
        pid,
        hostname,
        device,
        device_hex: hex.to_string(),
        device_info: info.trim().to_string(),
    })
}

#[allow(clippy::too_many_arguments)]
fn print_our_json(
    plan: &Plan,
    comm: &Comm,
    nranks: usize,
    launcher: &str,
    rows: &[Row],
    wrong_total: u64,
    avg_bus: f64,
    rss: &[u64],
) {
    let perf =
        |p: &Perf| serde_json::json!({ "time_us": p.time_us, "algbw": p.algbw, "busbw": p.busbw, "wrong": p.wrong });
    let first = rows.first();
    let j = serde_json::json!({
        "op": plan.coll.name(),
        "nranks": nranks,
        "launcher": launcher,
        "nthreads": plan.nthreads,
        "ngpus": plan.ngpus,
        "datatype": first.map_or(plan.dtypes[0].name(), |r| r.dtype.name()),
        "redop": first.map_or("none", |r| r.redop),
        "root": plan.coll.root().map_or(-1, |r| r as i64),
        "net": { "name": comm.net_info().name, "version": comm.net_info().version,
                 "path": comm.net_info().path.display().to_string() },
        "nchannels": comm.nchannels(),
        "transports": comm.transports().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        "check": plan.check != 0,
        "results": rows.iter().map(|r| serde_json::json!({
            "size": r.bytes, "count": r.count, "type": r.dtype.name(), "redop": r.redop,
            "out_of_place": perf(&r.oop),
            "in_place": r.ip.as_ref().map(perf),
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
}

/// Runs the `-t` x `-g` ranks of process `proc` of `nprocs`, each on a thread.
fn run_process(plan: &Plan, nprocs: usize, proc: usize, id: &UniqueId, launcher: &str) -> Result<bool, String> {
    // One rank per process only: the threads of `-t`/`-g` ranks must not share a core.
    if launcher.ends_with("--ranks") && plan.bind_to == BindTo::Core && nprocs > 1 && plan.ranks_per_process() == 1 {
        bind_to_core(proc, nprocs);
    }
    let per = plan.ranks_per_process();
    // The bootstrap checks the limit on ranks (and says so); only an overflow is caught here.
    let nranks = nprocs.checked_mul(per).ok_or_else(|| {
        format!(
            "{nprocs} processes x -t {} x -g {} ranks overflows",
            plan.nthreads, plan.ngpus
        )
    })?;
    // Checked before any rank thread starts, so no thread is left waiting in init
    // for a sibling that gave up.
    if let Some(root) = plan.coll.root()
        && root >= nranks
    {
        return Err(format!("-r {root}: root must be below the number of ranks ({nranks})"));
    }
    buffer_bytes(plan, nranks)?;
    let mut json_file = None;
    if proc == 0
        && let Some(p) = &plan.output_file
    {
        match report::create_new(p) {
            Ok(f) => json_file = Some(f),
            // As nccl-tests: the run goes on without the file.
            Err(e) => println!("# skipping json output; {e}"),
        }
    }
    let out = Mutex::new(Out { json_file });
    let results: Vec<Result<bool, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..per)
            .map(|i| {
                let out = &out;
                s.spawn(move || run_rank(plan, nranks, proc * per + i, i, id, launcher, out))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a rank thread panicked".into())))
            .collect()
    });
    let mut ok = true;
    let mut errs = Vec::new();
    for r in results {
        match r {
            Ok(b) => ok &= b,
            Err(e) => errs.push(e),
        }
    }
    if errs.is_empty() { Ok(ok) } else { Err(errs.join("\n")) }
}

fn main() -> ExitCode {
    let plan = match Plan::parse(std::env::args_os()) {
        Ok(p) => p,
        Err(e) => {
            if e.exit_code == 0 {
                print!("{e}");
            } else {
                eprint!("ferroccl-perf: {e}");
                if !e.message.ends_with('\n') {
                    eprintln!();
                }
            }
            return ExitCode::from(e.exit_code);
        }
    };
    if let Some((png, inputs)) = &plan.render_trace {
        return match ferroccl_examples::perf::timeline::render_files(png, inputs) {
            Ok(n) => {
                println!(
                    "# drew {n} rows from {} trace file(s) into {}",
                    inputs.len(),
                    png.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("ferroccl-perf: --render-trace: {e}");
                ExitCode::from(1)
            }
        };
    }
    if let Some((svg, inputs)) = &plan.plot {
        return match ferroccl_examples::perf::plot::plot_files(svg, inputs) {
            Ok(n) => {
                println!(
                    "# plotted {n} series from {} file(s) into {}",
                    inputs.len(),
                    svg.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("ferroccl-perf: --plot: {e}");
                ExitCode::from(1)
            }
        };
    }
    if let Some(dir) = &plan.trace {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("ferroccl-perf: --trace {}: {e}", dir.display());
            return ExitCode::from(2);
        }
        let file = dir.join("ferroccl-trace-%h-%p.json");
        // SAFETY: no other thread runs yet (before any rank, thread or child
        // starts); children of --ranks inherit the variables.
        unsafe {
            let profiler = ferroccl::config::params::PROFILER_PLUGIN.name;
            if std::env::var_os(profiler).is_none() {
                std::env::set_var(profiler, "trace");
            }
            // The trace plugin's own parameter (plugins/profiler-trace).
            std::env::set_var("NCCL_PROFILER_TRACE_FILE", &file);
        }
    }
    // A process of `--ranks N`.
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
        return finish(run_process(&plan, n, r, &id, "--ranks"));
    }
    if let Some(n) = plan.ranks {
        return spawn_local(&plan, n);
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
        if size > 1 && std::env::var(ferroccl::config::params::COMM_ID.name).map_or(true, |v| v.is_empty()) {
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
        return finish(run_process(&plan, size, rank, &id, who));
    }
    spawn_local(&plan, 1)
}

/// Bootstrap settings for the unique id this process creates: the same parameters
/// the ranks resolve (`NCCL_SOCKET_*`, `NCCL_COMM_ID`, `FERROCCL_TIMEOUT_SEC`), so a
/// root started here gives up on missing ranks after the ranks' own timeout.
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

/// Binds this process (and the threads it starts) to the `proc`-th CPU it may
/// run on, when the `nprocs` processes do not outnumber those CPUs (Open MPI's
/// default binding for as many ranks as cores). A rank's threads then share one
/// core, and two ranks never queue on the same core while another core idles
/// (the scheduler's placement can put two busy-polling ranks on one core).
/// Nothing happens when the affinity cannot be read or set.
fn bind_to_core(proc: usize, nprocs: usize) {
    // SAFETY: `cpu_set_t` is plain data, zero is a valid empty set; the calls
    // read and write only `set`, whose size is passed.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return;
        }
        let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect();
        if nprocs > allowed.len() {
            return;
        }
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(allowed[proc], &mut one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
    }
}

/// The namespaces of the first `k` hosts of `--cluster` (opened, shared with
/// the children's `pre_exec`), and their host names.
type OpenHosts = (Vec<std::sync::Arc<perf::cluster::HostNs>>, Vec<String>);

/// Opens the first `k` hosts of the simulated cluster `plan.cluster`.
fn open_hosts(plan: &Plan, k: usize) -> Result<OpenHosts, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("joining the cluster's network namespaces needs root (CAP_SYS_ADMIN)".into());
    }
    let cluster = perf::cluster::Cluster::load(plan.cluster.as_deref())?;
    if k > cluster.hosts.len() {
        return Err(format!(
            "cluster '{}' has {} host(s) ({}), fewer than {k}",
            cluster.name,
            cluster.hosts.len(),
            cluster.path.display()
        ));
    }
    let hosts = &cluster.hosts[..k];
    let ns = hosts
        .iter()
        .map(|h| perf::cluster::HostNs::open(h).map(std::sync::Arc::new))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((ns, hosts.iter().map(|h| h.hostname.clone()).collect()))
}

fn spawn_local(plan: &Plan, n: usize) -> ExitCode {
    if n > ferroccl::bootstrap::MAX_NRANKS {
        eprintln!(
            "ferroccl-perf: --ranks {n} is above the limit of {} ranks",
            ferroccl::bootstrap::MAX_NRANKS
        );
        return ExitCode::from(2);
    }
    // --hosts: every process runs on its host of the simulated cluster; this one
    // (process 0) moves to host 0 before it creates the unique id, so the
    // bootstrap root listens on host 0's address.
    let hosts = match plan.hosts.map(|k| open_hosts(plan, k)).transpose() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("ferroccl-perf: --hosts: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some((ns, _)) = &hosts
        && let Err(e) = ns[0].enter()
    {
        eprintln!("ferroccl-perf: --hosts: cannot enter host 0: {e}");
        return ExitCode::from(1);
    }
    let id = match bootstrap_config().and_then(|c| ferroccl::bootstrap::get_unique_id(&c).map_err(|e| e.to_string())) {
        Ok(id) => id,
        Err(e) => {
            eprintln!("ferroccl-perf: unique id: {e}");
            return ExitCode::from(1);
        }
    };
    let host_name = |r: usize| -> String {
        hosts.as_ref().map_or_else(String::new, |(ns, names)| {
            format!(", host {}", names[perf::cluster::host_of(r, n, ns.len())])
        })
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ferroccl-perf: cannot find my own executable: {e}");
            return ExitCode::from(1);
        }
    };
    // The children keep the name this process was invoked under (a copy named
    // `all_reduce_perf` runs all_reduce).
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let mut children: Vec<(usize, Child)> = Vec::new();
    for r in 1..n {
        let mut cmd = Command::new(&exe);
        {
            use std::os::unix::process::CommandExt;
            cmd.arg0(&argv0);
            if let Some((ns, _)) = &hosts {
                let ns = std::sync::Arc::clone(&ns[perf::cluster::host_of(r, n, ns.len())]);
                // SAFETY: the closure runs in the child between fork and exec; it
                // only makes system calls (setns, chdir) on data it owns.
                unsafe { cmd.pre_exec(move || ns.enter()) };
            }
        }
        let spawned = cmd
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
    let launcher = match plan.hosts {
        Some(k) => format!("--hosts {k} --ranks"),
        None if n > 1 => "--ranks".to_string(),
        None => "single process".to_string(),
    };
    let mine = run_process(plan, n, 0, &id, &launcher);
    let failed = mine.is_err();
    let mut ok = matches!(mine, Ok(true));
    if let Err(e) = &mine {
        eprintln!("ferroccl-perf: {e}");
    }
    for (r, c) in &mut children {
        let mut killed = false;
        if failed {
            // Give the others a moment to report their own error, then stop them.
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            killed = matches!(c.try_wait(), Ok(None));
            let _ = c.kill();
        }
        match c.wait() {
            Ok(s) if s.success() => {}
            Ok(_) if killed => ok = false,
            Ok(s) => {
                // A child that died on its own: name it and how.
                eprintln!(
                    "ferroccl-perf: process {r} (pid {}{}) {}",
                    c.id(),
                    host_name(*r),
                    describe_exit(s)
                );
                ok = false;
            }
            Err(e) => {
                eprintln!("ferroccl-perf: waiting for process {r}: {e}");
                ok = false;
            }
        }
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
