//! Loopback benchmark of the socket plugin against raw TCP, two processes,
//! through the plugin's Rust API.
//!
//! What it measures differently from `benchmarks/net_plugin_bw.c`, the
//! benchmark of the plugin as NCCL drives it (issue 36, BENCHMARKS.md): it calls
//! `SocketNet` directly in-process (no dlopen, no C vtable, no SDK shim, no
//! profiler handles); each process holds a send and a receive comm and also
//! runs ping-pongs between the throughput runs; receives are posted only once
//! the window has a free slot; and the throughput is one figure per size at 8
//! in flight, timed to an acknowledgement. Run in the same minutes as the C
//! host, its throughput ratios fall in the C host's range (plugins/net-socket/
//! BENCHMARKS.md). It is kept for what the C host does not measure: the round
//! trip (ping-pong) per size and the 8-byte ping-pong.
//!
//! ```text
//! cargo run --release -p ferroccl-net-socket --example socket_bench -- \
//!     [--quick] [--reps N] [--pings N] [--only sweep|pingpong] [--csv FILE] [--svg FILE]
//! ```
//!
//! The parent re-executes itself as the peer (`--peer`, same arguments). Measured
//! side by side in one run, plugin and raw TCP interleaved (the order alternates
//! between repetitions) so that load from other processes hits both alike:
//! * for every size 1 KiB … 64 MiB (×2 steps): throughput of one comm with up to 8
//!   messages in flight vs one raw TCP stream writing the same bytes (both timed
//!   from the first send to an 8-byte/1-byte acknowledgement from the receiver),
//!   and the ping-pong round trip of one message of that size;
//!
//! Raw TCP uses three connections, each in its best form: a one-way stream for the
//! throughput data (as the plugin's comms are one-way), a one-way connection back
//! for its acknowledgement, and one connection used in both directions for the
//! raw ping-pong (replies carry the ACKs, the fastest raw round trip for small
//! messages; the plugin, bound by NCCL's API, has one connection per direction).
//! * the 8-byte ping-pong round trip through isend/irecv/test vs raw TCP write/read.
//!
//! Every figure printed is the median over `--reps` repetitions (default 5); the
//! ratio is the median of the per-repetition ratios (plugin / raw for throughput,
//! plugin / raw for round trips). `--csv` writes the table, `--svg` a plot of
//! bandwidth vs size (log2 axis), both series.
//!
//! `NCCL_SOCKET_*` variables apply (e.g. `NCCL_SOCKET_NTHREADS`); `NCCL_SOCKET_IFNAME`
//! defaults to `=lo` here.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Instant;

use ferroccl_plugin_api::sdk::{Buf, CommConfig, Handle, Net, RecvBuf, TestStatus};
use nccl_net_socket::{ProfRequest as Request, RecvComm, SendComm, SocketNet};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const MEM_CAP: usize = 256 * MIB;
const WINDOW: usize = 8;

/// Which measurements run (`--only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Only {
    /// The size sweep (throughput and round trip per size).
    Sweep,
    /// The dedicated 8-byte ping-pong.
    Pingpong,
}

#[derive(Debug, Clone, clap::Parser)]
#[command(name = "socket_bench", about = "Socket plugin vs raw TCP on loopback, two processes")]
struct Cli {
    /// Shorter run (32 MiB per size, 3 reps, 5000 pings by default).
    #[arg(long)]
    quick: bool,
    /// Repetitions (medians are printed); default 5, 3 with --quick.
    #[arg(long, value_name = "N")]
    reps: Option<usize>,
    /// Round trips of the 8-byte ping-pong; default 20000, 5000 with --quick.
    #[arg(long, value_name = "N")]
    pings: Option<usize>,
    /// Run only one part.
    #[arg(long, value_enum)]
    only: Option<Only>,
    /// Write the table as CSV.
    #[arg(long, value_name = "FILE")]
    csv: Option<String>,
    /// Write a plot of bandwidth vs size as SVG.
    #[arg(long, value_name = "FILE")]
    svg: Option<String>,
    /// Run as the second process (internal).
    #[arg(long, hide = true)]
    peer: bool,
}

#[derive(Debug, Clone)]
struct Opts {
    quick: bool,
    reps: usize,
    pings: usize,
    sweep: bool,
    pingpong: bool,
    csv: Option<String>,
    svg: Option<String>,
    peer: bool,
}

fn opts() -> Opts {
    let c = <Cli as clap::Parser>::parse();
    Opts {
        quick: c.quick,
        reps: c.reps.unwrap_or(if c.quick { 3 } else { 5 }),
        pings: c.pings.unwrap_or(if c.quick { 5_000 } else { 20_000 }),
        sweep: c.only != Some(Only::Pingpong),
        pingpong: c.only != Some(Only::Sweep),
        csv: c.csv,
        svg: c.svg,
        peer: c.peer,
    }
}

/// One size of the sweep.
#[derive(Debug, Clone, Copy)]
struct Step {
    size: usize,
    /// Messages per throughput measurement.
    iters: usize,
    /// Messages in flight.
    window: usize,
    /// Round trips per ping-pong measurement.
    pings: usize,
}

fn schedule(o: &Opts) -> Vec<Step> {
    let total = if o.quick { 32 * MIB } else { 128 * MIB };
    let mut v = Vec::new();
    let mut size = KIB;
    while size <= 64 * MIB {
        v.push(Step {
            size,
            iters: (total / size).clamp(16, 20_000),
            window: WINDOW.min((MEM_CAP / size).max(1)),
            pings: (total / 8 / size).clamp(8, 2_000),
        });
        size *= 2;
    }
    v
}

/// Plugin first in even (rep + index) slots, raw first otherwise.
fn plugin_first(rep: usize, idx: usize) -> bool {
    (rep + idx).is_multiple_of(2)
}

fn hex(h: &Handle) -> String {
    hex::encode(h)
}

fn unhex(s: &str) -> Handle {
    let mut h = [0u8; 128];
    hex::decode_to_slice(s, &mut h).unwrap();
    h
}

fn wait(net: &SocketNet, r: &mut Request) {
    loop {
        if let TestStatus::Done { .. } = net.test(r).unwrap() {
            return;
        }
    }
}

fn post(mut f: impl FnMut() -> Option<Request>) -> Request {
    loop {
        if let Some(r) = f() {
            return r;
        }
    }
}

struct Comms {
    net: SocketNet,
    s: SendComm,
    r: RecvComm,
    /// Throughput data, parent → peer only.
    raw_data: TcpStream,
    /// Throughput acknowledgements, peer → parent only.
    raw_ack: TcpStream,
    /// Raw ping-pong, both directions.
    raw_pp: TcpStream,
}

/// Opens the three raw connections from the peer, in a fixed order.
fn raw_connect(port: u16) -> [TcpStream; 3] {
    [0, 1, 2].map(|_| {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nodelay(true).unwrap();
        s
    })
}

/// Sets up a send comm to `peer_handle` and accepts one from the peer on `listen`.
fn establish(
    net: &SocketNet,
    listen: &mut nccl_net_socket::Listener,
    peer_handle: &mut Handle,
) -> (SendComm, RecvComm) {
    let (mut s, mut r) = (None, None);
    while s.is_none() || r.is_none() {
        if s.is_none() {
            s = net.connect(&(), 0, peer_handle, &CommConfig::default()).unwrap();
        }
        if r.is_none() {
            r = net.accept(listen).unwrap();
        }
    }
    (s.unwrap(), r.unwrap())
}

impl Comms {
    fn send_stream(&mut self, src: &mut [u8], iters: usize, window: usize) {
        let mut q: VecDeque<Request> = VecDeque::new();
        for _ in 0..iters {
            if q.len() == window {
                wait(&self.net, q.front_mut().unwrap());
                q.pop_front();
            }
            let b = Buf::new(src.as_mut_ptr(), src.len());
            q.push_back(post(|| self.net.isend(&mut self.s, b, 0, None).unwrap()));
        }
        for mut r in q {
            wait(&self.net, &mut r);
        }
    }

    /// Receives `iters` messages of `size` bytes into `window` slots of `arena`.
    fn recv_stream(&mut self, arena: &mut [u8], size: usize, window: usize, iters: usize) {
        assert!(size * window <= arena.len());
        let mut q: VecDeque<Request> = VecDeque::new();
        for i in 0..iters {
            if q.len() == window {
                wait(&self.net, q.front_mut().unwrap());
                q.pop_front();
            }
            let b = &mut arena[(i % window) * size..][..size];
            let rb = [RecvBuf {
                buf: Buf::new(b.as_mut_ptr(), b.len()),
                tag: 0,
                mr: None,
            }];
            q.push_back(post(|| self.net.irecv(&mut self.r, &rb).unwrap()));
        }
        for mut r in q {
            wait(&self.net, &mut r);
        }
    }

    fn send1(&mut self, b: &mut [u8]) {
        let b = Buf::new(b.as_mut_ptr(), b.len());
        let mut r = post(|| self.net.isend(&mut self.s, b, 0, None).unwrap());
        wait(&self.net, &mut r);
    }

    fn recv1(&mut self, b: &mut [u8]) {
        let rb = [RecvBuf {
            buf: Buf::new(b.as_mut_ptr(), b.len()),
            tag: 0,
            mr: None,
        }];
        let mut r = post(|| self.net.irecv(&mut self.r, &rb).unwrap());
        wait(&self.net, &mut r);
    }

    /// Plugin ping-pong: `n` round trips of `b.len()` bytes; the initiator sends first.
    fn pingpong(&mut self, b: &mut [u8], n: usize, initiator: bool) -> f64 {
        let t0 = Instant::now();
        for _ in 0..n {
            if initiator {
                self.send1(b);
                self.recv1(b);
            } else {
                self.recv1(b);
                self.send1(b);
            }
        }
        t0.elapsed().as_secs_f64() / n as f64 * 1e6
    }

    fn raw_pingpong(&mut self, b: &mut [u8], n: usize, initiator: bool) -> f64 {
        let t0 = Instant::now();
        for _ in 0..n {
            if initiator {
                self.raw_pp.write_all(b).unwrap();
                self.raw_pp.read_exact(b).unwrap();
            } else {
                self.raw_pp.read_exact(b).unwrap();
                self.raw_pp.write_all(b).unwrap();
            }
        }
        t0.elapsed().as_secs_f64() / n as f64 * 1e6
    }

    /// Sender side of one throughput measurement; GB/s.
    fn plugin_tx(&mut self, src: &mut [u8], st: Step) -> f64 {
        let t0 = Instant::now();
        self.send_stream(src, st.iters, st.window);
        self.recv1(&mut [0u8; 8]);
        (st.size * st.iters) as f64 / t0.elapsed().as_secs_f64() / 1e9
    }

    fn raw_tx(&mut self, src: &[u8], st: Step) -> f64 {
        let t0 = Instant::now();
        for _ in 0..st.iters {
            self.raw_data.write_all(src).unwrap();
        }
        self.raw_ack.read_exact(&mut [0u8; 1]).unwrap();
        (st.size * st.iters) as f64 / t0.elapsed().as_secs_f64() / 1e9
    }

    fn plugin_rx(&mut self, arena: &mut [u8], st: Step) {
        self.recv_stream(arena, st.size, st.window, st.iters);
        self.send1(&mut [0u8; 8]);
    }

    fn raw_rx(&mut self, buf: &mut [u8], st: Step) {
        for _ in 0..st.iters {
            self.raw_data.read_exact(buf).unwrap();
        }
        self.raw_ack.write_all(&[1]).unwrap();
    }
}

/// Per-size results of all repetitions.
#[derive(Debug, Default, Clone)]
struct Samples {
    plugin_gbs: Vec<f64>,
    raw_gbs: Vec<f64>,
    plugin_us: Vec<f64>,
    raw_us: Vec<f64>,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

fn peer(o: &Opts) {
    let net = SocketNet::new().unwrap();
    let mut ph = unhex(&std::env::var("BENCH_HANDLE").unwrap());
    let raw_port: u16 = std::env::var("BENCH_RAWPORT").unwrap().parse().unwrap();
    let mut h: Handle = [0; 128];
    let mut l = net.listen(&(), 0, &mut h).unwrap();
    println!("HANDLE {}", hex(&h));
    std::io::stdout().flush().unwrap();
    let (s, r) = establish(&net, &mut l, &mut ph);
    let [raw_data, raw_ack, raw_pp] = raw_connect(raw_port);
    let mut c = Comms {
        net,
        s,
        r,
        raw_data,
        raw_ack,
        raw_pp,
    };
    if o.sweep {
        let steps = schedule(o);
        // Written once so that no page fault lands in a measurement.
        let mut arena = vec![1u8; MEM_CAP];
        for rep in 0..o.reps {
            for (idx, &st) in steps.iter().enumerate() {
                let order = if plugin_first(rep, idx) {
                    [true, false]
                } else {
                    [false, true]
                };
                for plugin in order {
                    if plugin {
                        c.plugin_rx(&mut arena, st);
                        c.pingpong(&mut arena[..st.size], st.pings, false);
                    } else {
                        c.raw_rx(&mut arena[..st.size], st);
                        c.raw_pingpong(&mut arena[..st.size], st.pings, false);
                    }
                }
            }
        }
    }
    if o.pingpong {
        let mut b = [0u8; 8];
        for rep in 0..o.reps {
            let order = if plugin_first(rep, 0) {
                [true, false]
            } else {
                [false, true]
            };
            for plugin in order {
                if plugin {
                    c.pingpong(&mut b, o.pings, false);
                } else {
                    c.raw_pingpong(&mut b, o.pings, false);
                }
            }
        }
    }
}

fn human(size: usize) -> String {
    if size >= MIB {
        format!("{}M", size / MIB)
    } else {
        format!("{}K", size / KIB)
    }
}

/// Draws bandwidth (GB/s, median) vs message size (log2 axis), both series, as SVG
/// into `path` (plotters' SVG backend).
fn svg(rows: &[(Step, Samples)], title: &str, path: &str) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;

    // Sizes are powers of two: the x axis is log2(size), one tick per size.
    let lx = |s: usize| s.ilog2() as i32;
    let (x0, x1) = (lx(rows[0].0.size), lx(rows[rows.len() - 1].0.size));
    let ymax_data = rows
        .iter()
        .flat_map(|(_, s)| [median(&s.plugin_gbs), median(&s.raw_gbs)])
        .fold(0.0f64, f64::max);
    let ymax = if ymax_data > 0.0 { ymax_data * 1.1 } else { 1.0 };
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 11))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes, log2 scale)")
        .y_desc("throughput (GB/s, median)")
        .x_labels(rows.len())
        .x_label_formatter(&|x| human(1usize << *x))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .draw()?;
    type Pick = fn(&Samples) -> &Vec<f64>;
    let series: [(&str, RGBColor, Pick); 2] = [
        (
            "ferroccl socket plugin (1 comm, 8 in flight)",
            RGBColor(0x1f, 0x77, 0xb4),
            |s| &s.plugin_gbs,
        ),
        ("raw TCP, one stream", RGBColor(0xff, 0x7f, 0x0e), |s| &s.raw_gbs),
    ];
    for (name, color, get) in series {
        let pts: Vec<(i32, f64)> = rows.iter().map(|(st, s)| (lx(st.size), median(get(s)))).collect();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Writes the table (and the 8-byte ping-pong row) as CSV into `path`.
fn write_csv(
    path: &str,
    o: &Opts,
    rows: &[(Step, Samples)],
    pp: &(Vec<f64>, Vec<f64>),
) -> Result<(), Box<dyn std::error::Error>> {
    let mut w = csv::Writer::from_path(path)?;
    w.write_record([
        "size_bytes",
        "iters",
        "window",
        "plugin_gbps",
        "raw_gbps",
        "ratio",
        "plugin_rtt_us",
        "raw_rtt_us",
        "rtt_ratio",
        "reps",
    ])?;
    if o.sweep {
        for (st, s) in rows {
            w.write_record([
                st.size.to_string(),
                st.iters.to_string(),
                st.window.to_string(),
                format!("{:.4}", median(&s.plugin_gbs)),
                format!("{:.4}", median(&s.raw_gbs)),
                format!("{:.4}", median(&ratios(&s.plugin_gbs, &s.raw_gbs))),
                format!("{:.2}", median(&s.plugin_us)),
                format!("{:.2}", median(&s.raw_us)),
                format!("{:.4}", median(&ratios(&s.plugin_us, &s.raw_us))),
                o.reps.to_string(),
            ])?;
        }
    }
    if o.pingpong {
        // The dedicated 8-byte ping-pong: no throughput figures.
        w.write_record([
            "8".to_string(),
            o.pings.to_string(),
            "1".to_string(),
            String::new(),
            String::new(),
            String::new(),
            format!("{:.2}", median(&pp.0)),
            format!("{:.2}", median(&pp.1)),
            format!("{:.4}", median(&ratios(&pp.0, &pp.1))),
            o.reps.to_string(),
        ])?;
    }
    w.flush()?;
    Ok(())
}

fn main() {
    let o = opts();
    if std::env::var_os("NCCL_SOCKET_IFNAME").is_none() {
        // SAFETY: single-threaded at this point; children inherit it.
        unsafe { std::env::set_var("NCCL_SOCKET_IFNAME", "=lo") };
    }
    if o.peer {
        peer(&o);
        return;
    }
    let net = SocketNet::new().unwrap();
    let cfg = net.config().clone();
    let setup = format!(
        "device {}, {} usable cores, {} data streams, {} helper threads, inline {} B, min task {} B, {} reps",
        net.interfaces()[0].name,
        cfg.cores,
        cfg.nstreams,
        cfg.nthreads,
        cfg.inline,
        cfg.min_task,
        o.reps
    );
    println!(
        "# socket_bench: {setup}; peer = second process; medians of {} interleaved repetitions",
        o.reps
    );
    let mut h: Handle = [0; 128];
    let mut l = net.listen(&(), 0, &mut h).unwrap();
    let raw_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--peer")
        .args(&args)
        .env("BENCH_HANDLE", hex(&h))
        .env("BENCH_RAWPORT", raw_l.local_addr().unwrap().port().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let mut ph = unhex(line.trim().strip_prefix("HANDLE ").expect("peer handle"));
    let (s, r) = establish(&net, &mut l, &mut ph);
    let [raw_data, raw_ack, raw_pp] = [0, 1, 2].map(|_| {
        let (s, _) = raw_l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        s
    });
    let mut c = Comms {
        net,
        s,
        r,
        raw_data,
        raw_ack,
        raw_pp,
    };

    let steps = schedule(&o);
    let mut rows: Vec<(Step, Samples)> = steps.iter().map(|&s| (s, Samples::default())).collect();
    if o.sweep {
        let mut src = vec![0x5Au8; 64 * MIB];
        for rep in 0..o.reps {
            for (idx, (st, smp)) in rows.iter_mut().enumerate() {
                let st = *st;
                let order = if plugin_first(rep, idx) {
                    [true, false]
                } else {
                    [false, true]
                };
                for plugin in order {
                    let b = &mut src[..st.size];
                    if plugin {
                        smp.plugin_gbs.push(c.plugin_tx(b, st));
                        smp.plugin_us.push(c.pingpong(b, st.pings, true));
                    } else {
                        smp.raw_gbs.push(c.raw_tx(b, st));
                        smp.raw_us.push(c.raw_pingpong(b, st.pings, true));
                    }
                }
            }
            eprintln!("# sweep repetition {} of {} done", rep + 1, o.reps);
        }
        println!(
            "{:>10} {:>6} {:>6} {:>12} {:>12} {:>7} {:>7} {:>7} | {:>11} {:>11} {:>7}",
            "size",
            "iters",
            "window",
            "plugin GB/s",
            "raw GB/s",
            "ratio",
            "min",
            "max",
            "plugin RTT",
            "raw RTT",
            "ratio"
        );
        for (st, s) in &rows {
            let r = ratios(&s.plugin_gbs, &s.raw_gbs);
            let (lo, hi) = r.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            println!(
                "{:>10} {:>6} {:>6} {:>12.3} {:>12.3} {:>7.2} {:>7.2} {:>7.2} | {:>9.1}us {:>9.1}us {:>7.2}",
                st.size,
                st.iters,
                st.window,
                median(&s.plugin_gbs),
                median(&s.raw_gbs),
                median(&r),
                lo,
                hi,
                median(&s.plugin_us),
                median(&s.raw_us),
                median(&ratios(&s.plugin_us, &s.raw_us))
            );
        }
    }
    let mut pp: (Vec<f64>, Vec<f64>) = Default::default();
    if o.pingpong {
        let mut b = [7u8; 8];
        for rep in 0..o.reps {
            let order = if plugin_first(rep, 0) {
                [true, false]
            } else {
                [false, true]
            };
            for plugin in order {
                if plugin {
                    pp.0.push(c.pingpong(&mut b, o.pings, true));
                } else {
                    pp.1.push(c.raw_pingpong(&mut b, o.pings, true));
                }
            }
        }
        let r = ratios(&pp.0, &pp.1);
        println!(
            "8-byte ping-pong round trip ({} x {} round trips): plugin {:.2} us, raw TCP {:.2} us, ratio {:.2} (per-rep ratios {})",
            o.reps,
            o.pings,
            median(&pp.0),
            median(&pp.1),
            median(&r),
            r.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" ")
        );
    }
    child.wait().unwrap();

    if let Some(path) = &o.csv {
        write_csv(path, &o, &rows, &pp).unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
        println!("# wrote {path}");
    }
    if let (Some(path), true) = (&o.svg, o.sweep) {
        let title = format!("socket plugin vs raw TCP on loopback ({setup})");
        svg(&rows, &title, path).unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
        println!("# wrote {path}");
    }
}
