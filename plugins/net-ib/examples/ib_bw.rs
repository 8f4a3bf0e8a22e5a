//! `ib_bw` — the IB plugin's own isend/irecv bandwidth, to hold against
//! perftest's `ib_write_bw` (issue 6 "Performance").
//!
//! Two processes on one host: this process is the receiver; it re-executes
//! itself as the sender (`--send HEXHANDLE`). The receiver keeps `--inflight`
//! receives of `--size` bytes posted (each one CTS FIFO entry, like NCCL's
//! proxy keeps several steps in flight), the sender keeps as many sends
//! outstanding; after `--warmup` messages the receiver times `--iters` more
//! and prints
//!
//! ```text
//! IB_BW size=1048576 inflight=8 iters=200 poll=sleep_us:100 qps=1 dev=rxe0 bytes=209715200 secs=S MB/s=X (MB = 2^20, as perftest)
//! ```
//!
//! Every message's first and last 8 bytes are checked (they carry the message
//! number), and the first and last timed messages byte for byte, so a
//! benchmark that moves garbage fails. Exit status 0 on success, 1 on any
//! error (printed), 2 on a usage error.
//!
//! Usage (inside the soft-RoCE VM, see `scripts/ib-vm-test.sh`):
//! `ib_bw [--size BYTES] [--inflight N] [--iters N] [--warmup N] [--dev N] [--poll-sleep-us US] [--poll-yield]`
//! (default 1 MiB, 8 in flight, 200 timed after 16 warm-up, device 0, sleep
//! 100 µs between polls that found nothing: soft-RoCE's kernel threads share the
//! vCPUs with both processes; `0` spins; `--poll-yield` calls `sched_yield()`
//! between polls that found nothing, as NCCL's proxy progress thread does when
//! no operation progressed — it overrides `--poll-sleep-us`);
//! `NCCL_IB_*` variables apply as in the plugin.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use ferroccl_plugin_api::sdk::{Buf, CommConfig, CommMut, Net, PtrType, RecvBuf, TestStatus};
use nccl_net_ib::IbNet;

/// Tag every message carries.
const TAG: i32 = 0x1b;
/// Bound on any single wait (connect, one message).
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// Command line (exit status 2 on a usage error).
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "ib_bw",
    about = "The IB plugin's isend/irecv bandwidth between two processes"
)]
struct Cli {
    #[command(flatten)]
    opts: Opts,
    /// Run as the sender of the receiver whose handle (hex) is given (internal).
    #[arg(long, hide = true, value_name = "HEXHANDLE")]
    send: Option<String>,
}

#[derive(Debug, Clone, Copy, clap::Args)]
struct Opts {
    /// Message size in bytes (at least 16).
    #[arg(long, default_value_t = 1 << 20, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(16..))]
    size: usize,
    /// Messages in flight.
    #[arg(long, default_value_t = 8, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=32))]
    inflight: usize,
    /// Timed messages (at least 1).
    #[arg(long, default_value_t = 200, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    iters: usize,
    /// Untimed messages first.
    #[arg(long, default_value_t = 16)]
    warmup: usize,
    /// Plugin device index.
    #[arg(long, default_value_t = 0)]
    dev: usize,
    /// Microseconds to sleep between polls that found nothing (0 spins).
    #[arg(long, default_value_t = 100, value_name = "US")]
    poll_sleep_us: u64,
    /// sched_yield() between polls that found nothing (overrides --poll-sleep-us).
    #[arg(long)]
    poll_yield: bool,
}

fn hex(b: &[u8]) -> String {
    hex::encode(b)
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() != 256 {
        return Err(format!("handle: expected 256 hex digits, found {}", s.len()));
    }
    hex::decode(s).map_err(|e| format!("handle: {e}"))
}

/// Byte `i` of a message body (independent of the message number).
fn body(i: usize) -> u8 {
    (i.wrapping_mul(131) >> 2) as u8
}

/// Stamps message number `m` into the first and last 8 bytes of `buf`.
fn stamp(buf: &mut [u8], m: u64) {
    let n = buf.len();
    buf[..8].copy_from_slice(&m.to_le_bytes());
    buf[n - 8..].copy_from_slice(&(!m).to_le_bytes());
}

fn check_stamp(buf: &[u8], m: u64) -> Result<(), String> {
    let n = buf.len();
    let head = u64::from_le_bytes(buf[..8].try_into().expect("8"));
    let tail = u64::from_le_bytes(buf[n - 8..].try_into().expect("8"));
    if head != m || tail != !m {
        return Err(format!(
            "message {m}: header/trailer {head:#x}/{tail:#x}, expected {m:#x}/{:#x}",
            !m
        ));
    }
    Ok(())
}

fn check_body(buf: &[u8], m: u64) -> Result<(), String> {
    let n = buf.len();
    if let Some(i) = (8..n - 8).find(|&i| buf[i] != body(i)) {
        return Err(format!(
            "message {m}: byte {i} is {:#x}, expected {:#x}",
            buf[i],
            body(i)
        ));
    }
    Ok(())
}

/// An `inflight × size` page-aligned buffer (one registration covers all slots).
fn slots(o: &Opts) -> Vec<u8> {
    let mut v = vec![0u8; o.inflight * o.size];
    for s in 0..o.inflight {
        for (i, b) in v[s * o.size..(s + 1) * o.size].iter_mut().enumerate() {
            *b = body(i);
        }
    }
    v
}

/// Between polls that found nothing to do: `sched_yield()` with `--poll-yield`
/// (NCCL's proxy thread yields when no operation progressed), else sleep
/// `--poll-sleep-us` (0 = spin). soft-RoCE does its protocol work in kernel
/// context on the same vCPUs; a real NIC does not need this.
fn idle(o: &Opts) {
    if o.poll_yield {
        std::thread::yield_now();
    } else if o.poll_sleep_us == 0 {
        std::hint::spin_loop();
    } else {
        std::thread::sleep(Duration::from_micros(o.poll_sleep_us));
    }
}

fn sender(o: Opts, handle_hex: &str) -> Result<(), String> {
    let net = IbNet::new().map_err(|e| format!("sender: {e}"))?;
    let ctx = net.init(0, &CommConfig::default()).map_err(|e| e.to_string())?;
    let mut handle = [0u8; 128];
    handle.copy_from_slice(&unhex(handle_hex)?);
    let deadline = Instant::now() + STEP_TIMEOUT;
    let mut comm = loop {
        if let Some(c) = net
            .connect(&ctx, o.dev, &mut handle, &CommConfig::default())
            .map_err(|e| format!("connect: {e}"))?
        {
            break c;
        }
        if Instant::now() > deadline {
            return Err("connect did not complete within 120 s".into());
        }
    };
    let mut data = slots(&o);
    let mr = net
        .reg_mr(
            CommMut::Send(&mut comm),
            Buf::new(data.as_mut_ptr(), data.len()),
            PtrType::Host,
        )
        .map_err(|e| format!("regMr: {e}"))?;
    let total = (o.warmup + o.iters) as u64;
    let mut reqs: Vec<Option<<IbNet as Net>::Request>> = (0..o.inflight).map(|_| None).collect();
    let (mut next, mut done) = (0u64, 0u64);
    let deadline = Instant::now() + STEP_TIMEOUT * 4;
    while done < total {
        if Instant::now() > deadline {
            return Err(format!("sender: {done}/{total} messages after {:?}", STEP_TIMEOUT * 4));
        }
        let progress = (next, done);
        // Post the next message into its slot once the slot is free.
        let s = (next % o.inflight as u64) as usize;
        if next < total && reqs[s].is_none() {
            let buf = &mut data[s * o.size..(s + 1) * o.size];
            stamp(buf, next);
            if let Some(r) = net
                .isend(&mut comm, Buf::new(buf.as_mut_ptr(), o.size), TAG, Some(&mr))
                .map_err(|e| format!("isend {next}: {e}"))?
            {
                reqs[s] = Some(r);
                next += 1;
            }
        }
        // Complete the oldest outstanding send.
        let s = (done % o.inflight as u64) as usize;
        if let Some(r) = reqs[s].as_mut() {
            match net.test(r).map_err(|e| format!("test isend {done}: {e}"))? {
                TestStatus::Pending => {}
                st => {
                    if st != TestStatus::done1(o.size) {
                        return Err(format!("isend {done} completed with {st:?}"));
                    }
                    reqs[s] = None;
                    done += 1;
                }
            }
        }
        if (next, done) == progress {
            idle(&o);
        }
    }
    net.dereg_mr(CommMut::Send(&mut comm), mr).map_err(|e| e.to_string())?;
    net.close_send(comm).map_err(|e| e.to_string())?;
    Ok(())
}

fn receiver(o: Opts) -> Result<(), String> {
    let net = IbNet::new().map_err(|e| format!("receiver: {e}"))?;
    let props = net.properties(o.dev).map_err(|e| e.to_string())?;
    let ctx = net.init(0, &CommConfig::default()).map_err(|e| e.to_string())?;
    let mut handle = [0u8; 128];
    let mut listen = net
        .listen(&ctx, o.dev, &mut handle)
        .map_err(|e| format!("listen: {e}"))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut args: Vec<String> = if o.poll_yield {
        vec!["--poll-yield".into()]
    } else {
        Vec::new()
    };
    args.extend(
        [
            "--size",
            &o.size.to_string(),
            "--inflight",
            &o.inflight.to_string(),
            "--iters",
            &o.iters.to_string(),
            "--warmup",
            &o.warmup.to_string(),
            "--dev",
            &o.dev.to_string(),
            "--poll-sleep-us",
            &o.poll_sleep_us.to_string(),
            "--send",
            &hex(&handle),
        ]
        .map(String::from),
    );
    let mut child = Command::new(exe)
        .args(&args)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn sender: {e}"))?;
    let out = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            eprintln!("[sender] {l}");
        }
    });
    let res = (|| -> Result<(), String> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        let mut comm = loop {
            if let Some(c) = net.accept(&mut listen).map_err(|e| format!("accept: {e}"))? {
                break c;
            }
            if Instant::now() > deadline {
                return Err("accept did not complete within 120 s".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let mut data = vec![0u8; o.inflight * o.size];
        let mr = net
            .reg_mr(
                CommMut::Recv(&mut comm),
                Buf::new(data.as_mut_ptr(), data.len()),
                PtrType::Host,
            )
            .map_err(|e| format!("regMr: {e}"))?;
        let total = (o.warmup + o.iters) as u64;
        let mut reqs: Vec<Option<<IbNet as Net>::Request>> = (0..o.inflight).map(|_| None).collect();
        let (mut next, mut done) = (0u64, 0u64);
        let mut t0 = Instant::now();
        let mut t_last = t0;
        let overall = Instant::now() + STEP_TIMEOUT * 4;
        while done < total {
            if Instant::now() > overall {
                return Err(format!(
                    "receiver: {done}/{total} messages after {:?}",
                    STEP_TIMEOUT * 4
                ));
            }
            while next < total && next < done + o.inflight as u64 {
                let s = (next % o.inflight as u64) as usize;
                let rb = [RecvBuf {
                    buf: Buf::new(data[s * o.size..].as_mut_ptr(), o.size),
                    tag: TAG,
                    mr: Some(&mr),
                }];
                match net.irecv(&mut comm, &rb).map_err(|e| format!("irecv {next}: {e}"))? {
                    Some(r) => {
                        reqs[s] = Some(r);
                        next += 1;
                    }
                    None => break,
                }
            }
            let s = (done % o.inflight as u64) as usize;
            let Some(r) = reqs[s].as_mut() else {
                continue;
            };
            match net.test(r).map_err(|e| format!("test irecv {done}: {e}"))? {
                TestStatus::Pending => {
                    idle(&o);
                    continue;
                }
                st if st != TestStatus::done1(o.size) => {
                    return Err(format!("irecv {done} completed with {st:?}"));
                }
                _ => {}
            }
            reqs[s] = None;
            let msg = &data[s * o.size..(s + 1) * o.size];
            check_stamp(msg, done)?;
            let timed_first = done == o.warmup as u64;
            if timed_first || done + 1 == total {
                check_body(msg, done)?;
            }
            done += 1;
            t_last = Instant::now();
            if done == o.warmup as u64 {
                t0 = t_last;
            }
        }
        let secs = t_last.duration_since(t0).as_secs_f64();
        let timed = if o.warmup == 0 { total } else { o.iters as u64 };
        let bytes = timed * o.size as u64;
        let mbs = bytes as f64 / secs / (1u64 << 20) as f64;
        println!(
            "IB_BW size={} inflight={} iters={} poll={} qps={} dev={} bytes={bytes} secs={secs:.3} MB/s={mbs:.2} (MB = 2^20, as perftest)",
            o.size,
            o.inflight,
            o.iters,
            if o.poll_yield {
                "yield".to_string()
            } else {
                format!("sleep_us:{}", o.poll_sleep_us)
            },
            net.params().qps_per_conn,
            props.name
        );
        let _ = std::io::stdout().flush();
        net.dereg_mr(CommMut::Recv(&mut comm), mr).map_err(|e| e.to_string())?;
        net.close_recv(comm).map_err(|e| e.to_string())?;
        Ok(())
    })();
    let _ = net.close_listen(listen);
    match res {
        Ok(()) => {
            let deadline = Instant::now() + STEP_TIMEOUT;
            loop {
                match child.try_wait() {
                    Ok(Some(st)) if st.success() => return Ok(()),
                    Ok(Some(st)) => return Err(format!("sender exited with {st}")),
                    Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                    Ok(None) => {
                        let _ = child.kill();
                        return Err("sender did not exit within 120 s".into());
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

fn main() -> ExitCode {
    let (o, send) = match <Cli as clap::Parser>::try_parse() {
        Ok(c) => (c.opts, c.send),
        Err(e) if !e.use_stderr() => {
            // --help: printed to stdout.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ib_bw: {e}");
            return ExitCode::from(2);
        }
    };
    let r = match send {
        Some(h) => sender(o, &h),
        None => receiver(o),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ib_bw: {e}");
            ExitCode::FAILURE
        }
    }
}
