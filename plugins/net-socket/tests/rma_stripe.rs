//! The socket plugin's RMA emulation with puts striped over data streams
//! (`NCCL_SOCKET_NTHREADS` × `NCCL_NSOCKS_PERTHREAD`): two ranks as threads on
//! loopback, driving the plugin's `Rma` table directly.
//!
//! What must hold with striping: a put-with-signal's signal is applied only after
//! every byte of that put (and of every put before it) is in the window; puts to the
//! same bytes land in posting order (whether or not they wait for each other); a get
//! after puts sees them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use ferroccl_plugin_api::sdk::rma::{Rma, RmaConfig, Signal, SignalOp, Xfer};
use ferroccl_plugin_api::sdk::{Buf, Handle, PtrType};
use nccl_net_socket::Config;
use nccl_net_socket::rma::{Group, RmaRequest, SocketRma, Window};

/// Bound on every wait of these tests (never reached when the plugin works).
const BOUND: Duration = Duration::from_secs(120);

/// 2 threads × 2 sockets = 4 data streams; 4 KiB tasks, so a put of ≥ 16 KiB uses
/// all four streams and a put under 4 KiB stays on the control stream.
fn striped_config() -> Config {
    Config::from_lookup_cores(
        |n| match n {
            "NCCL_SOCKET_IFNAME" => Some("lo".into()),
            "NCCL_SOCKET_NTHREADS" => Some("2".into()),
            "NCCL_NSOCKS_PERTHREAD" => Some("2".into()),
            "NCCL_SOCKET_MIN_TASKSIZE" => Some("4096".into()),
            _ => None,
        },
        16,
    )
}

struct Rank {
    rank: usize,
    rma: SocketRma,
    group: Arc<Group>,
    ctx: Arc<Group>,
    /// To the other rank's thread (end-of-test hand-shake, bounded).
    tx: Sender<()>,
    rx: Receiver<()>,
}

impl Rank {
    fn reg(&self, b: &mut [u8]) -> Window {
        let buf = Buf {
            ptr: b.as_mut_ptr(),
            len: b.len(),
        };
        self.rma.reg_mr_sym(&self.group, buf, PtrType::Host, 0).unwrap()
    }

    fn wait(&self, mut r: RmaRequest, what: &str) {
        let t0 = Instant::now();
        while !self
            .rma
            .test(&self.group, &mut r)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
        {
            assert!(t0.elapsed() < BOUND, "{what} did not complete within {BOUND:?}");
            std::thread::yield_now();
        }
    }

    fn sync(&self) {
        self.tx.send(()).unwrap();
        self.rx
            .recv_timeout(BOUND)
            .unwrap_or_else(|e| panic!("rank {}: the other rank did not arrive: {e}", self.rank));
    }
}

/// Runs `body` on two connected ranks (threads), each with its own plugin instance.
fn two_ranks(body: impl Fn(&Rank) + Send + Sync + 'static) {
    let body = Arc::new(body);
    let (t01, r01) = channel();
    let (t10, r10) = channel();
    let (h0tx, h0rx) = channel::<Handle>();
    let (h1tx, h1rx) = channel::<Handle>();
    let ends = [(t01, r10, h0tx, h1rx), (t10, r01, h1tx, h0rx)];
    let mut joins = Vec::new();
    for (rank, (tx, rx, htx, hrx)) in ends.into_iter().enumerate() {
        let body = body.clone();
        joins.push(std::thread::spawn(move || {
            let rma = SocketRma::with_config(striped_config());
            let ctx = rma.init(7).unwrap();
            let mut h: Handle = [0; 128];
            let mut l = rma.listen(&ctx, 0, &mut h).unwrap();
            htx.send(h).unwrap();
            let other = hrx.recv_timeout(BOUND).expect("the other rank's handle");
            let hs = if rank == 0 { [h, other] } else { [other, h] };
            let group = rma.connect(&ctx, &hs, rank, &mut l).unwrap();
            let cfg = RmaConfig {
                n_contexts: 1,
                traffic_class: -1,
            };
            let rctx = rma.create_context(&group, &cfg).unwrap();
            let r = Rank {
                rank,
                rma,
                group: group.clone(),
                ctx: rctx,
                tx,
                rx,
            };
            body(&r);
            r.sync();
            r.rma.close_coll(group).unwrap();
        }));
    }
    for j in joins {
        j.join().expect("a rank failed");
    }
}

fn xfer<'a>(local: &'a Window, loff: usize, remote: &'a Window, roff: usize, size: usize) -> Xfer<'a, Window> {
    Xfer {
        context: 0,
        local,
        local_off: loff,
        remote,
        remote_off: roff,
        size,
        rank: 1,
    }
}

/// The buffers of the ordering tests: `versions` source versions of `len` bytes
/// (version v filled with v + 1), a destination, a get-back buffer and a signal word.
fn versioned_buffers(versions: usize, len: usize) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u64>) {
    let mut src = vec![0u8; versions * len];
    for v in 0..versions {
        src[v * len..(v + 1) * len].fill(v as u8 + 1);
    }
    (src, vec![0u8; len], vec![0u8; len], vec![0u64; 1])
}

/// Registers `src`, `dst`, `back` and the signal word (as bytes) as windows.
fn register_all(r: &Rank, src: &[u8], dst: &[u8], back: &[u8], sig: &mut [u64]) -> [Window; 4] {
    let reg = |p: *const u8, n: usize| {
        // SAFETY: the buffer lives for the whole test and is viewed as bytes for
        // registration only; the plugin writes it only through the window.
        r.reg(unsafe { std::slice::from_raw_parts_mut(p.cast_mut(), n) })
    };
    [
        reg(src.as_ptr(), src.len()),
        reg(dst.as_ptr(), dst.len()),
        reg(back.as_ptr(), back.len()),
        reg(sig.as_mut_ptr().cast::<u8>(), 8),
    ]
}

/// After the puts `reqs` from rank 0: a put with signal (0 bytes, `Inc` 1 on
/// `sig`), then a get of `len` bytes of `dst` into `back`, and waits for all.
/// `[src, dst, back, sig]` are the registered windows.
fn signal_get_and_wait(r: &Rank, mut reqs: Vec<RmaRequest>, [src, dst, back, sig]: [&Window; 4], len: usize) {
    let s = Signal {
        window: sig,
        off: 0,
        op: SignalOp::Inc,
        value: 1,
        strong: true,
    };
    reqs.push(r.rma.iput(&r.ctx, xfer(src, 0, dst, 0, 0), Some(s)).unwrap());
    let g = Xfer {
        context: 0,
        local: back,
        local_off: 0,
        remote: dst,
        remote_off: 0,
        size: len,
        rank: 1,
    };
    reqs.push(r.rma.iget(&r.ctx, g).unwrap());
    for q in reqs {
        r.wait(q, "put/get");
    }
}

/// Many put-with-signal of sizes that split over all four streams (and some that
/// stay on the control stream), 8 in flight; the target watches the signal and
/// checks every byte of every put the signal counts. A signal applied when a put's
/// first chunk (or an earlier put's last chunk) had not landed yet is caught as a
/// missing byte.
#[test]
fn signal_never_overtakes_striped_data() {
    const PUTS: usize = 300;
    const SLOT: usize = 96 * 1024;
    const INFLIGHT: usize = 8;
    let size_of = |k: usize| match k % 5 {
        0 => 1000 + k,          // control stream
        1 => SLOT - (k % 4093), // 4 streams of ~24 KiB
        2 => 16 * 1024 + k % 7, // 4 streams, the last one short
        3 => 5000 + k % 3000,   // 2 streams (task 4 KiB)
        _ => 64 * 1024 + 13 * k % 32 * 1024,
    };
    let pattern = |k: usize, i: usize| ((k * 131 + i / 4096) as u8) | 1;
    two_ranks(move |r| {
        let mut src = vec![0u8; PUTS * SLOT];
        let mut dst = vec![0u8; PUTS * SLOT];
        let mut sig = vec![0u64; 2];
        // SAFETY: the words viewed as bytes for registration only.
        let sig_bytes = unsafe { std::slice::from_raw_parts_mut(sig.as_mut_ptr().cast::<u8>(), 16) };
        if r.rank == 0 {
            for k in 0..PUTS {
                for (i, b) in src[k * SLOT..k * SLOT + size_of(k)].iter_mut().enumerate() {
                    *b = pattern(k, i);
                }
            }
        }
        let smr = r.reg(&mut src);
        let dmr = r.reg(&mut dst);
        let sgmr = r.reg(sig_bytes);
        if r.rank == 0 {
            let mut pending = std::collections::VecDeque::new();
            for k in 0..PUTS {
                if pending.len() == INFLIGHT {
                    r.wait(pending.pop_front().unwrap(), "iputSignal");
                }
                let s = Signal {
                    window: &sgmr,
                    off: 8,
                    op: if k % 2 == 0 { SignalOp::Inc } else { SignalOp::Add },
                    value: 1,
                    strong: true,
                };
                let x = xfer(&smr, k * SLOT, &dmr, k * SLOT, size_of(k));
                pending.push_back(r.rma.iput(&r.ctx, x, Some(s)).unwrap());
            }
            for q in pending {
                r.wait(q, "iputSignal");
            }
        } else {
            // SAFETY: the aligned signal word, updated atomically by the plugin.
            let word = unsafe { AtomicU64::from_ptr(sig.as_mut_ptr().add(1)) };
            let t0 = Instant::now();
            let mut seen = 0usize;
            while seen < PUTS {
                let now = word.load(Ordering::Acquire) as usize;
                assert!(now >= seen && now <= PUTS, "signal went from {seen} to {now}");
                for k in seen..now {
                    // SAFETY: the acquire load orders the plugin's writes before these reads.
                    let got = unsafe { std::slice::from_raw_parts(dst.as_ptr().add(k * SLOT), size_of(k)) };
                    if let Some(i) = got.iter().enumerate().position(|(i, &b)| b != pattern(k, i)) {
                        panic!(
                            "signal read {now}, but byte {i} of put #{k} ({} bytes) was {} not {}",
                            size_of(k),
                            got[i],
                            pattern(k, i)
                        );
                    }
                }
                seen = now;
                assert!(t0.elapsed() < BOUND, "the signal stuck at {seen} of {PUTS}");
                std::hint::spin_loop();
            }
        }
        r.sync();
        r.rma.dereg_mr_sym(&r.group, smr).unwrap();
        r.rma.dereg_mr_sym(&r.group, dmr).unwrap();
        r.rma.dereg_mr_sym(&r.group, sgmr).unwrap();
    });
}

/// Striped puts to the same bytes, posted back to back, land in posting order; a
/// 0-byte put-with-signal (control stream) after them is applied after all of them,
/// and a get after them reads the last one's bytes.
#[test]
fn overlapping_striped_puts_land_in_order() {
    const LEN: usize = 256 * 1024;
    const VERSIONS: usize = 24;
    const ROUNDS: usize = 20;
    two_ranks(move |r| {
        let (src, dst, back, mut sig) = versioned_buffers(VERSIONS, LEN);
        let [smr, dmr, bmr, sgmr] = register_all(r, &src, &dst, &back, &mut sig);
        for round in 0..ROUNDS {
            if r.rank == 0 {
                // Each version shifted by a few bytes, so chunk boundaries differ and
                // chunks of different puts cover the same bytes on different streams.
                let mut reqs = Vec::new();
                for v in 0..VERSIONS {
                    let shift = (v * 7 + round) % 64;
                    let x = xfer(&smr, v * LEN, &dmr, shift, LEN - 64);
                    reqs.push(r.rma.iput(&r.ctx, x, None).unwrap());
                }
                signal_get_and_wait(r, reqs, [&smr, &dmr, &bmr, &sgmr], LEN);
                let last = (VERSIONS * 7 + round - 7) % 64;
                let want = VERSIONS as u8;
                // SAFETY: the get completed: its bytes are in `back`.
                let got = unsafe { std::slice::from_raw_parts(back.as_ptr(), LEN) };
                for (i, &b) in got.iter().enumerate().take(last + LEN - 64).skip(last) {
                    assert_eq!(b, want, "round {round}: the get read byte {i} of an earlier put");
                }
            } else {
                // SAFETY: the aligned signal word, updated atomically by the plugin.
                let word = unsafe { AtomicU64::from_ptr(sig.as_mut_ptr()) };
                let t0 = Instant::now();
                while word.load(Ordering::Acquire) < round as u64 + 1 {
                    assert!(t0.elapsed() < BOUND, "round {round}: no signal");
                    std::hint::spin_loop();
                }
                let last = (VERSIONS * 7 + round - 7) % 64;
                // SAFETY: the acquire load orders the plugin's writes before these reads.
                let got = unsafe { std::slice::from_raw_parts(dst.as_ptr(), LEN) };
                for (i, &b) in got.iter().enumerate().take(last + LEN - 64).skip(last) {
                    assert_eq!(
                        b, VERSIONS as u8,
                        "round {round}: byte {i} holds an earlier put after the signal"
                    );
                }
            }
            r.sync();
        }
        for w in [smr, dmr, bmr, sgmr] {
            r.rma.dereg_mr_sym(&r.group, w).unwrap();
        }
    });
}

/// Puts of one size to the same place, posted back to back (a buffer put again and
/// again): cut the same way onto the same streams, they stream on without waiting
/// for each other, and still land in posting order. Every fifth is a shorter put
/// of three chunks, which shifts the streams of the puts after it (those then wait
/// for the puts before them). A 0-byte put-with-signal after them is applied after
/// all of them, and a get after them reads the last one's bytes.
#[test]
fn repeated_striped_puts_to_one_place_land_in_order() {
    const LEN: usize = 256 * 1024;
    const SHORT: usize = 12 * 1024;
    const VERSIONS: usize = 25;
    const ROUNDS: usize = 20;
    two_ranks(move |r| {
        let (src, dst, back, mut sig) = versioned_buffers(VERSIONS, LEN);
        let [smr, dmr, bmr, sgmr] = register_all(r, &src, &dst, &back, &mut sig);
        let want = VERSIONS as u8;
        for round in 0..ROUNDS {
            if r.rank == 0 {
                let mut reqs = Vec::new();
                for v in 0..VERSIONS {
                    let size = if v % 5 == 3 { SHORT } else { LEN };
                    reqs.push(r.rma.iput(&r.ctx, xfer(&smr, v * LEN, &dmr, 0, size), None).unwrap());
                }
                signal_get_and_wait(r, reqs, [&smr, &dmr, &bmr, &sgmr], LEN);
                // SAFETY: the get completed: its bytes are in `back`.
                let got = unsafe { std::slice::from_raw_parts(back.as_ptr(), LEN) };
                if let Some(i) = got.iter().position(|&b| b != want) {
                    panic!("round {round}: the get read byte {i} = {} of an earlier put", got[i]);
                }
            } else {
                // SAFETY: the aligned signal word, updated atomically by the plugin.
                let word = unsafe { AtomicU64::from_ptr(sig.as_mut_ptr()) };
                let t0 = Instant::now();
                while word.load(Ordering::Acquire) < round as u64 + 1 {
                    assert!(t0.elapsed() < BOUND, "round {round}: no signal");
                    std::hint::spin_loop();
                }
                // SAFETY: the acquire load orders the plugin's writes before these reads.
                let got = unsafe { std::slice::from_raw_parts(dst.as_ptr(), LEN) };
                if let Some(i) = got.iter().position(|&b| b != want) {
                    panic!(
                        "round {round}: byte {i} = {} holds an earlier put after the signal",
                        got[i]
                    );
                }
            }
            r.sync();
        }
        for w in [smr, dmr, bmr, sgmr] {
            r.rma.dereg_mr_sym(&r.group, w).unwrap();
        }
    });
}
