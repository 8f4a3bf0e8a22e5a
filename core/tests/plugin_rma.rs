//! The RMA host adapter (`ferroccl::plugin::rma`) driving the socket plugin's RMA
//! tables (`libnccl-net-socket.so`: `ncclRmaPlugin_v14` and `_v13`) through a real
//! `dlopen`: NCCL's connect sequence (listen, handle all-gather, connect, closeListen,
//! createContext), symmetric windows, `iput`/`iget` per size and alignment,
//! put-with-signal (the data is visible when the signal is), many operations in
//! flight among 4 ranks, `iflush`, argument checks, and a peer that goes away.
//!
//! Ranks are threads of this process on loopback (`NCCL_SOCKET_IFNAME=lo`).

mod plugin_common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::time::{Duration, Instant};

use ferroccl::plugin::library::PluginLibrary;
use ferroccl::plugin::net::{NetError, NetHandle, PtrType, RawComm, RawCtx, RawMr, RawRequest};
use ferroccl::plugin::rma::{
    RmaAdapter, RmaConfig, RmaCtx, RmaSignal, RmaSource, RmaState, RmaXfer, SignalOp, load_rma,
};
use ferroccl_plugin_api::abi::NCCL_NET_MR_FLAG_FORCE_SO;
use plugin_common::{lib, pattern};

const BOUND: Duration = Duration::from_secs(30);

fn socket_lib() -> String {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        // SAFETY: set once, before any plugin (or other thread of this test) reads it.
        unsafe { std::env::set_var("NCCL_SOCKET_IFNAME", "lo") };
        // SAFETY: as above. The socket plugin offers RMA devices only when asked.
        unsafe { std::env::set_var("NCCL_SOCKET_RMA_ENABLE", "1") };
    });
    lib("libnccl_net_socket.so")
}

/// The adapter for the socket library's table of `version` (14: what NCCL picks; 13:
/// the v13 table, found by skipping `ncclRmaPlugin_v14`).
fn adapter(version: u32) -> Arc<RmaAdapter> {
    let l = Arc::new(PluginLibrary::open(&socket_lib()).expect("dlopen the socket plugin"));
    let a = RmaAdapter::probe_from(l, if version == 14 { 0 } else { 1 }).expect("an RMA table");
    assert_eq!(a.info().version, version);
    Arc::new(a)
}

/// One rank's connected group.
struct Rank {
    a: Arc<RmaAdapter>,
    rank: usize,
    ctx: RawCtx,
    coll: RawComm,
    rctx: RmaCtx,
}

impl Rank {
    fn reg(&self, buf: &mut [u8], flags: u64) -> RawMr {
        self.a
            .reg_mr_sym(self.coll, buf.as_mut_ptr(), buf.len(), PtrType::Host, flags)
            .expect("regMrSym")
    }

    fn wait(&self, req: RawRequest) -> Result<(), NetError> {
        let start = Instant::now();
        loop {
            if self.a.test(self.coll, req)? {
                return Ok(());
            }
            assert!(
                start.elapsed() < BOUND,
                "rank {}: request not done within {BOUND:?}",
                self.rank
            );
            self.a.progress(self.rctx)?;
            std::thread::yield_now();
        }
    }

    fn close(self, mrs: &[RawMr]) {
        self.a.destroy_context(self.rctx).expect("destroyContext");
        for m in mrs {
            self.a.dereg_mr_sym(self.coll, *m).expect("deregMrSym");
        }
        self.a.close_coll(self.coll).expect("closeColl");
        self.a.finalize_ctx(self.ctx).expect("finalize");
    }
}

/// A barrier of the rank threads whose wait is bounded and which a failing rank
/// poisons, so one rank's failed assertion fails the others instead of hanging them.
struct Barrier {
    n: usize,
    st: Mutex<(usize, u64, bool)>,
    cv: Condvar,
}

impl Barrier {
    fn new(n: usize) -> Barrier {
        Barrier {
            n,
            st: Mutex::new((0, 0, false)),
            cv: Condvar::new(),
        }
    }

    fn wait(&self) {
        let mut g = self.st.lock().unwrap_or_else(|e| e.into_inner());
        assert!(!g.2, "another rank failed");
        let gen_ = g.1;
        g.0 += 1;
        if g.0 == self.n {
            g.0 = 0;
            g.1 += 1;
            self.cv.notify_all();
            return;
        }
        let start = Instant::now();
        while g.1 == gen_ {
            assert!(!g.2, "another rank failed");
            assert!(
                start.elapsed() < BOUND,
                "barrier: the other ranks did not arrive within {BOUND:?}"
            );
            g = self
                .cv
                .wait_timeout(g, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn poison(&self) {
        self.st.lock().unwrap_or_else(|e| e.into_inner()).2 = true;
        self.cv.notify_all();
    }
}

/// Runs `body` on `n` ranks (threads), each connected as NCCL's
/// `ncclRmaProxyConnectOnce` does; `body` gets its rank and a barrier of all ranks.
fn run_ranks(a: &Arc<RmaAdapter>, n: usize, comm_id: u64, body: impl Fn(Rank, &Barrier) + Send + Sync) {
    let handles = Mutex::new(vec![[0u8; 128]; n]);
    let bar = Barrier::new(n);
    std::thread::scope(|s| {
        for rank in 0..n {
            let (a, handles, bar, body) = (a.clone(), &handles, &bar, &body);
            std::thread::Builder::new()
                .name(format!("rank{rank}"))
                .spawn_scoped(s, move || {
                    let ctx = a.init_ctx(comm_id).expect("init");
                    assert!(a.devices().expect("devices") >= 1);
                    let mut h: NetHandle = [0; 128];
                    let listen = a.listen(ctx, 0, &mut h).expect("listen");
                    handles.lock().unwrap_or_else(|e| e.into_inner())[rank] = h;
                    bar.wait(); // the bootstrap all-gather of the handles
                    let mut all = handles.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let coll = a.connect(ctx, &mut all, rank, listen).expect("connect");
                    let p = a.properties(0).expect("getProperties");
                    assert!(p.ptr_support & ferroccl_plugin_api::abi::NCCL_PTR_HOST != 0);
                    a.close_listen(listen).expect("closeListen");
                    let rctx = a.create_context(coll, &RmaConfig::default()).expect("createContext");
                    let r = Rank {
                        a: a.clone(),
                        rank,
                        ctx,
                        coll,
                        rctx,
                    };
                    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(r, bar)));
                    if let Err(p) = res {
                        bar.poison();
                        std::panic::resume_unwind(p);
                    }
                })
                .expect("spawn");
        }
    });
}

fn xfer(local_off: usize, local_mr: RawMr, size: usize, remote_off: usize, remote_mr: RawMr, rank: usize) -> RmaXfer {
    RmaXfer {
        context: 0,
        local_off: local_off as u64,
        local_mr,
        size,
        remote_off: remote_off as u64,
        remote_mr,
        rank: rank as u32,
    }
}

const SIZES: [usize; 9] = [0, 1, 7, 8, 63, 4095, 4096, 65_537, 1 << 20];
const OFFSETS: [usize; 4] = [0, 1, 3, 61];

fn put_get_sizes(version: u32) {
    let a = adapter(version);
    let cap = (1 << 20) + 64;
    run_ranks(&a, 2, 0x5eed_0000 + u64::from(version), |r, bar| {
        let mut src = pattern(cap, 17 + r.rank as u8);
        let mut dst = vec![0u8; cap];
        let src_mr = r.reg(&mut src, 0);
        let dst_mr = r.reg(&mut dst, 0);
        let peer = 1 - r.rank;
        let expect = pattern(cap, 17 + peer as u8);
        bar.wait(); // both windows registered
        for &size in &SIZES {
            for &off in &OFFSETS {
                // Each rank puts [off, off+size) of its source at (63-off) in the peer's destination.
                let doff = 63 - off;
                let req =
                    r.a.iput(r.rctx, &xfer(off, src_mr, size, doff, dst_mr, peer))
                        .expect("iput");
                r.wait(req).expect("iput completes");
                bar.wait(); // both puts completed: the data is in place
                let dst_now = unsafe_view(&dst);
                assert_eq!(
                    &dst_now[doff..doff + size],
                    &expect[off..off + size],
                    "v{version} rank {}: put of {size} B from offset {off} to {doff}",
                    r.rank
                );
                bar.wait(); // before the next round overwrites
            }
        }
        // Gets: read the peer's source window into our destination.
        for &size in &SIZES {
            for &off in &OFFSETS {
                let loff = (off * 7) % 64;
                let req =
                    r.a.iget(r.rctx, &xfer(loff, dst_mr, size, off, src_mr, peer))
                        .expect("iget");
                r.wait(req).expect("iget completes");
                assert_eq!(
                    &unsafe_view(&dst)[loff..loff + size],
                    &expect[off..off + size],
                    "v{version} rank {}: get of {size} B from offset {off}",
                    r.rank
                );
            }
        }
        // A flush after the operations completes.
        let f = r.a.iflush(r.rctx, 0, dst_mr, peer as u32).expect("iflush");
        r.wait(f).expect("iflush completes");
        assert!(!r.a.query_last_error(r.rctx).expect("queryLastError"));
        bar.wait();
        r.close(&[src_mr, dst_mr]);
    });
    assert_eq!(a.live_contexts(), 0);
    assert_eq!(
        a.state(),
        RmaState::Enabled {
            devices: a.devices().unwrap()
        }
    );
}

/// Reads a buffer the plugin writes from its threads (the completed request or the
/// barrier ordered those writes before this read).
fn unsafe_view(v: &[u8]) -> Vec<u8> {
    // SAFETY: `v` is valid; the volatile copy keeps the compiler from assuming the
    // bytes did not change since the last Rust write.
    (0..v.len())
        .map(|i| unsafe { std::ptr::read_volatile(v.as_ptr().add(i)) })
        .collect()
}

#[test]
fn put_and_get_every_size_and_alignment_v14() {
    put_get_sizes(14);
}

#[test]
fn put_and_get_every_size_and_alignment_v13() {
    put_get_sizes(13);
}

#[test]
fn put_with_signal_makes_the_data_visible_with_the_signal() {
    for version in [14, 13] {
        let a = adapter(version);
        const PUTS: usize = 200;
        const SLOT: usize = 4096;
        run_ranks(&a, 2, 0x5160_0000 + u64::from(version), |r, bar| {
            let mut src = vec![0u8; PUTS * SLOT];
            for k in 0..PUTS {
                src[k * SLOT..(k + 1) * SLOT].fill(k as u8 ^ 0x5a);
            }
            let mut dst = vec![0u8; PUTS * SLOT];
            let mut sig = vec![0u64; 2];
            let src_mr = r.reg(&mut src, 0);
            let dst_mr = r.reg(&mut dst, 0);
            // SAFETY: the u64 buffer viewed as bytes for registration.
            let sig_bytes = unsafe { std::slice::from_raw_parts_mut(sig.as_mut_ptr().cast::<u8>(), 16) };
            let sig_mr = r.reg(sig_bytes, u64::from(NCCL_NET_MR_FLAG_FORCE_SO));
            bar.wait();
            if r.rank == 0 {
                // Many puts in flight, each followed by its signal; alternate INC and ADD(1).
                let mut reqs = Vec::new();
                for k in 0..PUTS {
                    let size = SLOT - (k % 17);
                    let s = RmaSignal {
                        off: 8,
                        mr: sig_mr,
                        value: 1,
                        op: if k % 2 == 0 { SignalOp::Inc } else { SignalOp::Add },
                    };
                    reqs.push(
                        r.a.iput_signal(r.rctx, &xfer(k * SLOT, src_mr, size, k * SLOT, dst_mr, 1), &s, true)
                            .expect("iputSignal"),
                    );
                }
                for q in reqs {
                    r.wait(q).expect("iputSignal completes");
                }
            } else {
                // SAFETY: the signal word, aligned, updated atomically by the plugin.
                let word = unsafe { AtomicU64::from_ptr(sig.as_mut_ptr().add(1)) };
                let start = Instant::now();
                let mut seen = 0u64;
                while seen < PUTS as u64 {
                    let now = word.load(Ordering::Acquire);
                    assert!(now >= seen, "the signal went backwards: {seen} then {now}");
                    for k in seen as usize..now as usize {
                        let size = SLOT - (k % 17);
                        // SAFETY: the acquire load above orders the plugin's data writes
                        // before these reads.
                        let got = unsafe { std::slice::from_raw_parts(dst.as_ptr().add(k * SLOT), size) };
                        assert!(
                            got.iter().all(|&b| b == k as u8 ^ 0x5a),
                            "v{version}: signal {now} seen but put {k}'s data is not all there"
                        );
                    }
                    seen = now;
                    assert!(start.elapsed() < BOUND, "v{version}: signal stuck at {seen}");
                    std::thread::yield_now();
                }
                assert_eq!(word.load(Ordering::Acquire), PUTS as u64);
            }
            bar.wait();
            r.close(&[src_mr, dst_mr, sig_mr]);
        });
    }
}

#[test]
fn many_operations_in_flight_among_four_ranks() {
    let a = adapter(14);
    const N: usize = 4;
    const OPS: usize = 64;
    const CHUNK: usize = 1000;
    run_ranks(&a, N, 0x4444, |r, bar| {
        let mut src = pattern(N * OPS * CHUNK, 3 + r.rank as u8);
        let mut dst = vec![0u8; N * OPS * CHUNK];
        let src_mr = r.reg(&mut src, 0);
        let dst_mr = r.reg(&mut dst, 0);
        bar.wait();
        // Every rank puts OPS chunks to every peer, all posted before any test:
        // chunk k for peer p lands in the peer's region of this rank.
        let mut reqs = Vec::new();
        for k in 0..OPS {
            for p in (0..N).filter(|&p| p != r.rank) {
                let off = (r.rank * OPS + k) * CHUNK;
                reqs.push(
                    r.a.iput(r.rctx, &xfer(off, src_mr, CHUNK, off, dst_mr, p))
                        .expect("iput"),
                );
            }
        }
        for p in (0..N).filter(|&p| p != r.rank) {
            reqs.push(r.a.iflush(r.rctx, 0, dst_mr, p as u32).expect("iflush"));
        }
        // Tested in reverse posting order: completion does not depend on test order.
        for q in reqs.into_iter().rev() {
            r.wait(q).expect("completes");
        }
        bar.wait();
        let view = unsafe_view(&dst);
        for p in (0..N).filter(|&p| p != r.rank) {
            let exp = pattern(N * OPS * CHUNK, 3 + p as u8);
            let reg = p * OPS * CHUNK..(p + 1) * OPS * CHUNK;
            assert_eq!(&view[reg.clone()], &exp[reg], "rank {}: region of peer {p}", r.rank);
        }
        bar.wait();
        r.close(&[src_mr, dst_mr]);
    });
}

#[test]
fn out_of_window_and_bad_arguments_are_refused_with_the_call_named() {
    let a = adapter(14);
    run_ranks(&a, 2, 0xbad, |r, bar| {
        let mut buf = vec![0u8; 256];
        let mr = r.reg(&mut buf, 0);
        bar.wait();
        let peer = 1 - r.rank;
        let e = r.a.iput(r.rctx, &xfer(200, mr, 100, 0, mr, peer)).unwrap_err();
        assert!(matches!(e, NetError::InvalidArgument(_)), "{e}");
        assert!(e.to_string().contains("iput"), "{e}");
        let e = r.a.iget(r.rctx, &xfer(0, mr, 8, 250, mr, peer)).unwrap_err();
        assert!(e.to_string().contains("iget"), "{e}");
        let bad_rank = RmaXfer {
            rank: 7,
            ..xfer(0, mr, 8, 0, mr, peer)
        };
        assert!(r.a.iput(r.rctx, &bad_rank).is_err());
        let bad_ctx = RmaXfer {
            context: 1,
            ..xfer(0, mr, 8, 0, mr, peer)
        };
        assert!(
            r.a.iput(r.rctx, &bad_ctx).is_err(),
            "context 1 of a 1-context RMA context"
        );
        let sig = RmaSignal {
            off: 4,
            mr,
            value: 1,
            op: SignalOp::Add,
        };
        let e =
            r.a.iput_signal(r.rctx, &xfer(0, mr, 8, 0, mr, peer), &sig, true)
                .unwrap_err();
        assert!(e.to_string().contains("iputSignal"), "{e}");
        bar.wait();
        r.close(&[mr]);
    });
}

#[test]
fn a_peer_that_goes_away_fails_the_operations_to_it() {
    let cap = ferroccl::plugin::logger::LogCapture::start();
    let a = adapter(14);
    run_ranks(&a, 2, 0xdead, |r, bar| {
        let mut buf = vec![1u8; 1 << 16];
        let mr = r.reg(&mut buf, 0);
        bar.wait();
        if r.rank == 1 {
            // Rank 1 leaves without a word: its group is closed under rank 0.
            r.a.close_coll(r.coll).expect("closeColl");
            bar.wait();
            return;
        }
        bar.wait();
        let start = Instant::now();
        let err = loop {
            let res =
                r.a.iput(r.rctx, &xfer(0, mr, 1 << 16, 0, mr, 1))
                    .and_then(|q| r.wait(q));
            if let Err(e) = res {
                break e;
            }
            assert!(start.elapsed() < BOUND, "puts to a closed peer kept succeeding");
            std::thread::sleep(Duration::from_millis(10));
        };
        // The host's error is the plugin's code with the call named; the plugin's WARN
        // (through NCCL's logger) names the peer.
        assert!(matches!(err, NetError::Remote(_)), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("iput") || msg.contains("test"), "{msg}");
        assert!(
            !cap.lines_containing("peer rank 1").is_empty(),
            "no plugin log line names the lost peer: {:?}",
            cap.lines()
        );
        r.close(&[mr]);
    });
}

#[test]
fn load_rma_takes_nccl_rma_plugin_then_the_net_library() {
    let path = socket_lib();
    // NCCL_RMA_PLUGIN names a missing library, then the socket one: the second wins.
    let (a, ctx, src) = load_rma(Some(&format!("/nonexistent/libnccl-rma-x.so,{path}")), &[], None, 1).expect("loaded");
    assert_eq!(src, RmaSource::External(path.clone()));
    assert_eq!(a.info().version, 14);
    assert_eq!(a.info().symbol, "ncclRmaPlugin_v14");
    a.finalize_ctx(ctx).unwrap();
    // `none`: only the net library is tried.
    let net = Arc::new(PluginLibrary::open(&path).unwrap());
    let (b, ctx, src) = load_rma(Some("none"), &[], Some(net), 2).expect("loaded from the net library");
    assert_eq!(src, RmaSource::NetLibrary);
    assert!(Arc::ptr_eq(&a, &b), "one adapter per table in the process");
    b.finalize_ctx(ctx).unwrap();
    assert!(load_rma(Some("none"), &[], None, 3).is_none());
}
