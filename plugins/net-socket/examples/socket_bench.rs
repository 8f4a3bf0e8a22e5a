//! Loopback benchmark of the socket plugin against raw TCP, two processes.
//!
//! ```text
//! cargo run --release -p ferroccl-net-socket --example socket_bench [-- --quick]
//! ```
//!
//! The parent re-executes itself as the peer (`--peer`). Printed, side by side:
//! * throughput sweep 1 KiB … 64 MiB, one comm, up to 8 messages in flight, vs one
//!   raw TCP stream writing the same bytes (both timed from the first send to a
//!   1-byte/8-byte acknowledgement from the receiver);
//! * 8-byte ping-pong round trip through isend/irecv/test vs raw TCP write/read.
//!
//! `NCCL_SOCKET_*` variables apply (e.g. `NCCL_SOCKET_NTHREADS`); `NCCL_SOCKET_IFNAME`
//! defaults to `lo` here.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferroccl_plugin_api::sdk::{Buf, CommConfig, Handle, Net, RecvBuf, TestStatus};
use nccl_net_socket::{RecvComm, Request, SendComm, SocketNet};

const MIB: usize = 1 << 20;
const MEM_CAP: usize = 256 * MIB;

fn schedule(quick: bool) -> Vec<(usize, usize, usize)> {
    // (size, iterations, window)
    let total = if quick { 64 * MIB } else { 512 * MIB };
    let mut v = Vec::new();
    let mut size = 1024;
    while size <= 64 * MIB {
        let iters = (total / size).clamp(16, if quick { 5_000 } else { 40_000 });
        let window = 8.min((MEM_CAP / size).max(1));
        v.push((size, iters, window));
        size *= 4;
    }
    v
}

fn hex(h: &Handle) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Handle {
    let mut h = [0u8; 128];
    for (i, b) in h.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
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
    s: SendComm,
    r: RecvComm,
}

/// Sets up a send comm to `peer_handle` and accepts one from the peer on `listen`.
fn establish(net: &SocketNet, listen: &mut nccl_net_socket::Listener, peer_handle: &mut Handle) -> Comms {
    let (mut s, mut r) = (None, None);
    while s.is_none() || r.is_none() {
        if s.is_none() {
            s = net.connect(&(), 0, peer_handle, &CommConfig::default()).unwrap();
        }
        if r.is_none() {
            r = net.accept(listen).unwrap();
        }
    }
    Comms {
        s: s.unwrap(),
        r: r.unwrap(),
    }
}

fn send_stream(net: &SocketNet, c: &mut Comms, src: &mut [u8], iters: usize, window: usize) {
    let mut q: std::collections::VecDeque<Request> = Default::default();
    for _ in 0..iters {
        if q.len() == window {
            wait(net, q.front_mut().unwrap());
            q.pop_front();
        }
        q.push_back(post(|| {
            net.isend(&mut c.s, Buf::new(src.as_mut_ptr(), src.len()), 0, None)
                .unwrap()
        }));
    }
    for mut r in q {
        wait(net, &mut r);
    }
}

fn recv_stream(net: &SocketNet, c: &mut Comms, bufs: &mut [Vec<u8>], iters: usize) {
    let window = bufs.len();
    let mut q: std::collections::VecDeque<Request> = Default::default();
    for i in 0..iters {
        if q.len() == window {
            wait(net, q.front_mut().unwrap());
            q.pop_front();
        }
        let b = &mut bufs[i % window];
        let rb = [RecvBuf {
            buf: Buf::new(b.as_mut_ptr(), b.len()),
            tag: 0,
            mr: None,
        }];
        q.push_back(post(|| net.irecv(&mut c.r, &rb).unwrap()));
    }
    for mut r in q {
        wait(net, &mut r);
    }
}

fn small(net: &SocketNet, c: &mut Comms, send: bool) {
    let mut b = [0u8; 8];
    if send {
        let mut r = post(|| net.isend(&mut c.s, Buf::new(b.as_mut_ptr(), 8), 0, None).unwrap());
        wait(net, &mut r);
    } else {
        let rb = [RecvBuf {
            buf: Buf::new(b.as_mut_ptr(), 8),
            tag: 0,
            mr: None,
        }];
        let mut r = post(|| net.irecv(&mut c.r, &rb).unwrap());
        wait(net, &mut r);
    }
}

const PINGS: usize = 20_000;

fn peer(quick: bool) {
    let net = SocketNet::new().unwrap();
    let mut ph = unhex(&std::env::var("BENCH_HANDLE").unwrap());
    let raw_port: u16 = std::env::var("BENCH_RAWPORT").unwrap().parse().unwrap();
    let mut h: Handle = [0; 128];
    let mut l = net.listen(&(), 0, &mut h).unwrap();
    println!("HANDLE {}", hex(&h));
    std::io::stdout().flush().unwrap();
    let mut c = establish(&net, &mut l, &mut ph);
    let mut raw = TcpStream::connect(("127.0.0.1", raw_port)).unwrap();
    raw.set_nodelay(true).unwrap();
    for (size, iters, window) in schedule(quick) {
        let mut bufs: Vec<Vec<u8>> = (0..window).map(|_| vec![0u8; size]).collect();
        // plugin
        recv_stream(&net, &mut c, &mut bufs, iters);
        small(&net, &mut c, true);
        // raw
        let mut left = size * iters;
        while left > 0 {
            let k = left.min(size);
            raw.read_exact(&mut bufs[0][..k]).unwrap();
            left -= k;
        }
        raw.write_all(&[1]).unwrap();
    }
    for _ in 0..PINGS {
        small(&net, &mut c, false);
        small(&net, &mut c, true);
    }
    let mut b = [0u8; 8];
    for _ in 0..PINGS {
        raw.read_exact(&mut b).unwrap();
        raw.write_all(&b).unwrap();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    if std::env::var_os("NCCL_SOCKET_IFNAME").is_none() {
        // SAFETY: single-threaded at this point; children inherit it.
        unsafe { std::env::set_var("NCCL_SOCKET_IFNAME", "=lo") };
    }
    if args.iter().any(|a| a == "--peer") {
        peer(quick);
        return;
    }
    let net = SocketNet::new().unwrap();
    let cfg = net.config();
    println!(
        "# socket_bench: device {} ({} data streams, {} helper threads, inline {} B, min task {} B); peer = second process",
        net.interfaces()[0].name,
        cfg.nstreams,
        cfg.nthreads,
        cfg.inline,
        cfg.min_task
    );
    let mut h: Handle = [0; 128];
    let mut l = net.listen(&(), 0, &mut h).unwrap();
    let raw_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--peer")
        .args(quick.then_some("--quick"))
        .env("BENCH_HANDLE", hex(&h))
        .env("BENCH_RAWPORT", raw_l.local_addr().unwrap().port().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let mut ph = unhex(line.trim().strip_prefix("HANDLE ").expect("peer handle"));
    let mut c = establish(&net, &mut l, &mut ph);
    let (mut raw, _) = raw_l.accept().unwrap();
    raw.set_nodelay(true).unwrap();

    println!(
        "{:>10} {:>7} {:>6} {:>14} {:>14} {:>7}",
        "size", "iters", "window", "plugin GB/s", "raw TCP GB/s", "ratio"
    );
    for (size, iters, window) in schedule(quick) {
        let mut src = vec![0x5Au8; size];
        let t0 = Instant::now();
        send_stream(&net, &mut c, &mut src, iters, window);
        small(&net, &mut c, false);
        let tp = t0.elapsed();
        let t0 = Instant::now();
        for _ in 0..iters {
            raw.write_all(&src).unwrap();
        }
        let mut ack = [0u8; 1];
        raw.read_exact(&mut ack).unwrap();
        let tr = t0.elapsed();
        let gbs = |d: Duration| (size * iters) as f64 / d.as_secs_f64() / 1e9;
        println!(
            "{:>10} {:>7} {:>6} {:>14.3} {:>14.3} {:>7.2}",
            size,
            iters,
            window,
            gbs(tp),
            gbs(tr),
            gbs(tp) / gbs(tr)
        );
    }
    let t0 = Instant::now();
    for _ in 0..PINGS {
        small(&net, &mut c, true);
        small(&net, &mut c, false);
    }
    let pp = t0.elapsed().as_secs_f64() / PINGS as f64 * 1e6;
    let mut b = [7u8; 8];
    let t0 = Instant::now();
    for _ in 0..PINGS {
        raw.write_all(&b).unwrap();
        raw.read_exact(&mut b).unwrap();
    }
    let rp = t0.elapsed().as_secs_f64() / PINGS as f64 * 1e6;
    println!(
        "8-byte ping-pong round trip: plugin {pp:.2} us, raw TCP {rp:.2} us, ratio {:.2}",
        pp / rp
    );
    child.wait().unwrap();
}
