//! `ferroccl-rma-bench`: one-sided put against two-sided send through the same plugin
//! (issue 33's Performance rows: the socket plugin; and the IB plugin in the soft-RoCE
//! guest with `--plugin …/libnccl_net_ib.so` and `NCCL_IB_RMA_ENABLE=1`, its put figure
//! set beside `ib_write_bw` by `scripts/ib-vm-test.sh`).
//!
//! ```text
//! NCCL_SOCKET_IFNAME=lo NCCL_SOCKET_RMA_ENABLE=1 \
//!   ferroccl-rma-bench [--plugin socket] [--sizes 64K,256K,1M,4M,16M,64M] [--rounds 5] [--window 8] [--bytes 256M] [--put-only]
//! ```
//!
//! Two ranks, threads of this process, on the plugin's device 0. In every round, for
//! every size, the two methods run back to back in alternating order (put first in
//! even rounds), moving the same bytes from rank 0 to rank 1:
//!
//! * **send**: the library's net table through the host (`ferroccl::plugin::NetPlugin`,
//!   as the runtime's net transport drives it): one send comm and one recv comm
//!   (listen/connect/accept), buffers registered once; rank 0 keeps `window` `isend`s
//!   in flight, rank 1 `window` `irecv`s, each tested until done; the clock runs from
//!   the start barrier until both ranks have completed every message.
//! * **put**: the library's RMA table through the host's `RmaAdapter` (NCCL's connect
//!   sequence, `createContext`, `regMrSym` of a source window on rank 0 and a
//!   destination window on rank 1); rank 0 keeps `window` `iput`s in flight into rank
//!   1's window and tests each until done (a put completes when the target has
//!   written it); the clock runs until the last put completes.
//!
//! Both pollers yield the CPU after a `test` that found the oldest request not done
//! (on a machine with few cores the plugin's own threads need it).
//!
//! `iters = clamp(bytes / size, 4, 4096)` messages per measurement. Output: per size the
//! median GB/s (1e9 B/s) of each method over the rounds, the median of the per-round
//! put/send ratios, the median CPU seconds per GB moved of each (the whole process:
//! both ranks and the plugin's threads, getrusage), and the per-round ratios. The last put's and the last message's
//! first and last bytes are checked.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ferroccl::plugin::library::PluginLibrary;
use ferroccl::plugin::net::{CommConfig, NetHandle, NetPlugin, PtrType, RawComm, RawCtx, RawMr, RecvSlot};
use ferroccl::plugin::rma::{RmaAdapter, RmaConfig, RmaCtx, RmaXfer};
use ferroccl::plugin::{LoadOptions, load_net_from};

fn parse_size(s: &str) -> usize {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().unwrap_or_else(|_| panic!("bad size {s:?}")) * mul
}

fn human(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

struct Args {
    plugin: String,
    sizes: Vec<usize>,
    rounds: usize,
    window: usize,
    bytes: usize,
    /// `--put-only`: time only the puts (the send columns print 0; the IB guest's
    /// comparison against `ib_write_bw` needs no two-sided figure).
    put_only: bool,
}

fn args() -> Args {
    let mut a = Args {
        plugin: "socket".into(),
        sizes: [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20].to_vec(),
        rounds: 5,
        window: 8,
        bytes: 256 << 20,
        put_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--plugin" => a.plugin = v(),
            "--sizes" => a.sizes = v().split(',').map(parse_size).collect(),
            "--rounds" => a.rounds = v().parse().expect("--rounds N"),
            "--window" => a.window = v().parse().expect("--window N"),
            "--bytes" => a.bytes = parse_size(&v()),
            "--put-only" => a.put_only = true,
            "-h" | "--help" => {
                println!(
                    "ferroccl-rma-bench [--plugin socket] [--sizes 64K,...,64M] [--rounds 5] [--window 8] [--bytes 256M] [--put-only]"
                );
                std::process::exit(0);
            }
            _ => panic!("unknown argument {k}"),
        }
    }
    a
}

/// The two-sided side: a send comm (rank 0) and a recv comm (rank 1), buffers registered.
struct NetPair {
    net: Arc<dyn NetPlugin>,
    ctx: RawCtx,
    send: RawComm,
    recv: RawComm,
    listen: RawComm,
}

fn net_pair(net: Arc<dyn NetPlugin>) -> NetPair {
    let ctx = net.init_ctx(0x0b0b, &CommConfig::default()).expect("net init");
    let mut h: NetHandle = [0; 128];
    let listen = net.listen(ctx, 0, &mut h).expect("listen");
    let (send, recv) = std::thread::scope(|s| {
        let n2 = net.clone();
        let acc = s.spawn(move || {
            loop {
                if let Some(c) = n2.accept(listen).expect("accept") {
                    return c;
                }
                std::thread::yield_now();
            }
        });
        let send = loop {
            if let Some(c) = net.connect(ctx, 0, &mut h).expect("connect") {
                break c;
            }
            std::thread::yield_now();
        };
        (send, acc.join().expect("accept thread"))
    });
    NetPair {
        net,
        ctx,
        send,
        recv,
        listen,
    }
}

/// One send measurement: `iters` messages of `size`, `w` in flight. Returns seconds.
fn run_send(p: &NetPair, bufs: &mut [Vec<u8>; 2], mrs: [RawMr; 2], size: usize, iters: usize, w: usize) -> f64 {
    let bar = Barrier::new(2);
    let (sp, rp) = (bufs[0].as_mut_ptr() as usize, bufs[1].as_mut_ptr() as usize);
    std::thread::scope(|s| {
        let (net, bar) = (&p.net, &bar);
        let recv = s.spawn(move || {
            bar.wait();
            let mut pending = std::collections::VecDeque::new();
            let (mut posted, mut done) = (0, 0);
            while done < iters {
                if posted < iters && pending.len() < w {
                    let slot = RecvSlot {
                        data: rp as *mut u8,
                        size,
                        tag: 0,
                        mr: Some(mrs[1]),
                    };
                    if let Some(r) = net.irecv(p.recv, &[slot], false).expect("irecv") {
                        pending.push_back(r);
                        posted += 1;
                        continue;
                    }
                }
                if let Some(&r) = pending.front() {
                    let mut sz = [0usize; 1];
                    if net.test(r, &mut sz).expect("test recv") {
                        assert_eq!(sz[0], size);
                        pending.pop_front();
                        done += 1;
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        });
        bar.wait();
        let t = Instant::now();
        let mut pending = std::collections::VecDeque::new();
        let (mut posted, mut done) = (0, 0);
        while done < iters {
            if posted < iters
                && pending.len() < w
                && let Some(r) = net.isend(p.send, sp as *mut u8, size, 0, Some(mrs[0])).expect("isend")
            {
                pending.push_back(r);
                posted += 1;
                continue;
            }
            if let Some(&r) = pending.front() {
                let mut sz = [0usize; 1];
                if net.test(r, &mut sz).expect("test send") {
                    pending.pop_front();
                    done += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        }
        recv.join().expect("recv thread");
        t.elapsed().as_secs_f64()
    })
}

/// The one-sided side: two ranks connected, a window on each.
struct RmaPair {
    a: Arc<RmaAdapter>,
    ranks: Vec<(RawCtx, RawComm, RmaCtx)>,
}

fn rma_pair(a: Arc<RmaAdapter>) -> RmaPair {
    let handles = std::sync::Mutex::new(vec![[0u8; 128]; 2]);
    let bar = Barrier::new(2);
    let ranks = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|rank| {
                let (a, handles, bar) = (a.clone(), &handles, &bar);
                s.spawn(move || {
                    let ctx = a
                        .init_ctx(0x0c0c)
                        .expect("rma init (NCCL_SOCKET_RMA_ENABLE=1 / NCCL_IB_RMA_ENABLE=1?)");
                    let mut h: NetHandle = [0; 128];
                    let l = a.listen(ctx, 0, &mut h).expect("rma listen");
                    handles.lock().expect("lock")[rank] = h;
                    bar.wait();
                    let mut all = handles.lock().expect("lock").clone();
                    let coll = a.connect(ctx, &mut all, rank, l).expect("rma connect");
                    a.close_listen(l).expect("closeListen");
                    let rctx = a.create_context(coll, &RmaConfig::default()).expect("createContext");
                    (ctx, coll, rctx)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    });
    RmaPair { a, ranks }
}

/// One put measurement: `iters` puts of `size` from rank 0 into rank 1's window.
fn run_put(p: &RmaPair, mrs: [RawMr; 2], size: usize, iters: usize, w: usize) -> f64 {
    let (_, coll, rctx) = p.ranks[0];
    let x = RmaXfer {
        context: 0,
        local_off: 0,
        local_mr: mrs[0],
        size,
        remote_off: 0,
        remote_mr: mrs[1],
        rank: 1,
    };
    let t = Instant::now();
    let mut pending = std::collections::VecDeque::new();
    let (mut posted, mut done) = (0, 0);
    while done < iters {
        if posted < iters && pending.len() < w {
            pending.push_back(p.a.iput(rctx, &x).expect("iput"));
            posted += 1;
            continue;
        }
        if let Some(&r) = pending.front() {
            if p.a.test(coll, r).expect("test put") {
                pending.pop_front();
                done += 1;
            } else {
                if p.a.has_progress() {
                    p.a.progress(rctx).expect("rmaProgress");
                }
                std::thread::yield_now();
            }
        }
    }
    t.elapsed().as_secs_f64()
}

/// CPU seconds this process (every thread: both ranks and the plugin's) has used.
fn cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn stamp(buf: &mut [u8], size: usize, v: u8) {
    buf[0] = v;
    buf[size - 1] = v ^ 0xff;
}

fn check(buf: &[u8], size: usize, v: u8, what: &str) {
    // SAFETY: reads of a buffer the plugin wrote before the completed requests.
    let (a, b) = unsafe {
        (
            std::ptr::read_volatile(buf.as_ptr()),
            std::ptr::read_volatile(buf.as_ptr().add(size - 1)),
        )
    };
    assert!(
        a == v && b == v ^ 0xff,
        "{what}: the data did not arrive ({a:#x} {b:#x})"
    );
}

fn main() {
    let a = args();
    let loaded = load_net_from(&a.plugin, &LoadOptions::default()).expect("load the net plugin");
    let net = loaded.plugin;
    let path = net.info().path.clone();
    let lib = Arc::new(PluginLibrary::open(&path.to_string_lossy()).expect("dlopen for RMA"));
    let rma = Arc::new(RmaAdapter::probe(lib).expect("an RMA table in the net plugin's library"));
    let max = *a.sizes.iter().max().expect("a size");
    println!(
        "# {} (net v{}, rma {} v{}), 2 ranks (threads), window {}, {} rounds, {} per measurement",
        path.display(),
        net.info().version,
        rma.info().symbol,
        rma.info().version,
        a.window,
        a.rounds,
        human(a.bytes)
    );
    let np = net_pair(net.clone());
    let rp = rma_pair(rma.clone());
    // Buffers: net source/destination, RMA source (rank 0) and window (rank 1).
    // Every buffer is written through before use: an untouched zeroed allocation maps
    // the shared zero page, which a copy reads from cache (whichever method got such a
    // source would look cheaper per byte).
    let mut nb = [vec![0x11u8; max], vec![0x22u8; max]];
    let nmr = [
        np.net
            .reg_mr(np.send, nb[0].as_mut_ptr(), max, PtrType::Host)
            .expect("regMr send"),
        np.net
            .reg_mr(np.recv, nb[1].as_mut_ptr(), max, PtrType::Host)
            .expect("regMr recv"),
    ];
    let mut rsrc = vec![0x33u8; max];
    let mut rdst = vec![0x44u8; max];
    // Symmetric registration: every rank registers its windows in the same order.
    let mut r1_src = vec![0x55u8; max];
    let mut r0_dst = vec![0x66u8; max];
    let (c0, c1) = (rp.ranks[0].1, rp.ranks[1].1);
    let m0s = rma
        .reg_mr_sym(c0, rsrc.as_mut_ptr(), max, PtrType::Host, 0)
        .expect("regMrSym");
    let m1s = rma
        .reg_mr_sym(c1, r1_src.as_mut_ptr(), max, PtrType::Host, 0)
        .expect("regMrSym");
    let m0d = rma
        .reg_mr_sym(c0, r0_dst.as_mut_ptr(), max, PtrType::Host, 0)
        .expect("regMrSym");
    let m1d = rma
        .reg_mr_sym(c1, rdst.as_mut_ptr(), max, PtrType::Host, 0)
        .expect("regMrSym");
    let _ = (m1s, m0d);
    // Warm-up: one of each at the largest size.
    if !a.put_only {
        run_send(&np, &mut nb, nmr, max, 2, a.window);
    }
    run_put(&rp, [m0s, m1d], max, 2, a.window);
    let mut rows = Vec::new();
    for &size in &a.sizes {
        rows.push((size, Vec::new(), Vec::new(), Vec::new(), Vec::new()));
    }
    for round in 0..a.rounds {
        for (i, &size) in a.sizes.iter().enumerate() {
            let iters = (a.bytes / size).clamp(4, 4096);
            let v = (round * 31 + i * 7 + 1) as u8;
            stamp(&mut nb[0], size, v);
            stamp(&mut rsrc, size, v);
            let gb = (size * iters) as f64 / 1e9;
            let mut do_send = || {
                if a.put_only {
                    return (0.0, 0.0);
                }
                let c = cpu_s();
                let s = run_send(&np, &mut nb, nmr, size, iters, a.window);
                let c = cpu_s() - c;
                check(&nb[1], size, v, "send");
                (gb / s, c / gb)
            };
            let do_put = || {
                let c = cpu_s();
                let s = run_put(&rp, [m0s, m1d], size, iters, a.window);
                let c = cpu_s() - c;
                check(&rdst, size, v, "put");
                (gb / s, c / gb)
            };
            let (s, p) = if round % 2 == 0 {
                let p = do_put();
                (do_send(), p)
            } else {
                let s = do_send();
                (s, do_put())
            };
            rows[i].1.push(s.0);
            rows[i].2.push(p.0);
            rows[i].3.push(s.1);
            rows[i].4.push(p.1);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "{:>8} {:>10} {:>10} {:>9} {:>10} {:>10}  per-round put/send",
        "size", "send GB/s", "put GB/s", "put/send", "send CPU", "put CPU"
    );
    for (size, s, p, sc, pc) in &mut rows {
        let ratios: Vec<f64> = p.iter().zip(s.iter()).map(|(p, s)| p / s).collect();
        let mut r = ratios.clone();
        let list: Vec<String> = ratios.iter().map(|x| format!("{x:.2}")).collect();
        println!(
            "{:>8} {:>10.4} {:>10.4} {:>9.2} {:>10.3} {:>10.3}  {}",
            human(*size),
            median(s),
            median(p),
            median(&mut r),
            median(sc),
            median(pc),
            list.join(" ")
        );
    }
    // Teardown.
    for m in [m0s, m0d] {
        let _ = rma.dereg_mr_sym(c0, m);
    }
    for m in [m1s, m1d] {
        let _ = rma.dereg_mr_sym(c1, m);
    }
    for (ctx, coll, rctx) in &rp.ranks {
        let _ = rma.destroy_context(*rctx);
        let _ = rma.close_coll(*coll);
        let _ = rma.finalize_ctx(*ctx);
    }
    let _ = np.net.dereg_mr(np.send, nmr[0]);
    let _ = np.net.dereg_mr(np.recv, nmr[1]);
    let _ = np.net.close_send(np.send);
    let _ = np.net.close_recv(np.recv);
    let _ = np.net.close_listen(np.listen);
    let _ = np.net.finalize_ctx(np.ctx);
}
