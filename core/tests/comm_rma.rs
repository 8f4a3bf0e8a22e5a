//! The one-sided API of `Comm` (NCCL 2.30.7's `ncclCommWindowRegister`,
//! `ncclPutSignal`, `ncclSignal`, `ncclWaitSignal`, `ncclCommWindowDeregister`) among
//! real ranks: threads of this process, each a communicator over the in-tree socket
//! plugin on loopback with `NCCL_SOCKET_RMA_ENABLE=1`, so the RMA plugin is the
//! socket library's `ncclRmaPlugin_v14` (found by NCCL's order: `NCCL_RMA_PLUGIN`
//! unset → `libnccl-rma.so`, absent → the net plugin's library). With
//! `FERROCCL_TEST_RMA_NET_PLUGIN` naming another net plugin (the IB one in the
//! soft-RoCE guest, `scripts/ib-vm-test.sh`), the plugin-neutral tests run over it.

mod plugin_common;

use std::sync::{Arc, Once};
use std::time::Duration;

use ferroccl::bootstrap::{BootstrapConfig, get_unique_id};
use ferroccl::{Comm, CommConfig, DataType, Error, PreloadedNet, Stream, WaitSignalDesc, Window};

const T: Duration = Duration::from_secs(60);

/// Test-only: a net plugin (path) to use instead of the socket plugin, whose library's
/// RMA table then serves the one-sided API. `scripts/ib-vm-test.sh` sets it to
/// `libnccl-net-ib.so` in the soft-RoCE guest (with `NCCL_IB_RMA_ENABLE=1`), so the
/// plugin-neutral tests here run over the IB plugin's RDMA WRITE/READ and atomics.
const NET_OVERRIDE: &str = "FERROCCL_TEST_RMA_NET_PLUGIN";

fn env() {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        let net = std::env::var(NET_OVERRIDE).ok().filter(|p| !p.is_empty());
        // SAFETY: set once, before any communicator (or other thread) reads them.
        unsafe {
            std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
            match &net {
                Some(p) => {
                    std::env::set_var("NCCL_NET_PLUGIN", p);
                    std::env::set_var("NCCL_IB_RMA_ENABLE", "1");
                }
                None => {
                    std::env::set_var("NCCL_NET_PLUGIN", "socket");
                    std::env::set_var("NCCL_SOCKET_RMA_ENABLE", "1");
                }
            }
        }
    });
}

fn config(timeout: Duration) -> CommConfig {
    CommConfig {
        timeout: Some(timeout),
        bootstrap: Some(BootstrapConfig::loopback(timeout)),
        ..Default::default()
    }
}

/// Runs `body(comm)` on `n` rank threads; `cfg` makes each rank's config.
fn ranks(n: usize, cfg: impl Fn() -> CommConfig + Sync, body: impl Fn(&Comm) + Sync) {
    env();
    let id = get_unique_id(&BootstrapConfig::loopback(T)).expect("unique id");
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (id, cfg, body) = (&id, &cfg, &body);
                std::thread::Builder::new()
                    .name(format!("rank{r}"))
                    .spawn_scoped(s, move || {
                        let comm = Comm::init_rank(n, id, r, cfg()).expect("init");
                        body(&comm);
                        comm.destroy().expect("destroy");
                    })
                    .expect("spawn")
            })
            .collect();
        for h in hs {
            h.join().expect("rank thread");
        }
    });
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + seed * 7 + 1) as u8).collect()
}

fn desc(peer: usize, op_cnt: u64) -> WaitSignalDesc {
    WaitSignalDesc {
        op_cnt,
        peer,
        sig_idx: 0,
        ctx: 0,
    }
}

/// Registers the whole of `src` and of `dst` as windows: `(source, destination)`.
///
/// # Safety
/// Both buffers must outlive the windows ([`deregister_pair`]).
unsafe fn register_pair(c: &Comm, src: &mut [u8], dst: &mut [u8]) -> (Window, Window) {
    // SAFETY: the caller's contract.
    unsafe {
        (
            c.window_register(src.as_mut_ptr(), src.len()).expect("register src"),
            c.window_register(dst.as_mut_ptr(), dst.len()).expect("register dst"),
        )
    }
}

/// Deregisters [`register_pair`]'s windows.
fn deregister_pair(c: &Comm, sw: Window, dw: Window) {
    c.window_deregister(sw).expect("deregister src");
    c.window_deregister(dw).expect("deregister dst");
}

/// Rank `r`'s AllReduce input (`count` f32, element `i` is `i + r`) and a zeroed output.
fn all_reduce_bufs(count: usize, r: usize) -> (Vec<f32>, Vec<f32>) {
    ((0..count).map(|i| (i + r) as f32).collect(), vec![0f32; count])
}

/// Enqueues the f32 Sum AllReduce of `send` into `recv` (as long) on `s`.
///
/// # Safety
/// Both buffers must live until `s` is synchronized.
unsafe fn all_reduce_f32(c: &Comm, send: &[f32], recv: &mut [f32], s: &Stream) -> Result<(), Error> {
    assert_eq!(send.len(), recv.len(), "AllReduce buffers");
    // SAFETY: the caller's contract; both hold `send.len()` elements.
    unsafe {
        c.all_reduce(
            send.as_ptr().cast(),
            recv.as_mut_ptr().cast(),
            send.len(),
            DataType::Float32,
            ferroccl::RedOp::Sum,
            s,
        )
    }
}

/// Each rank puts to the next rank with several sizes and offsets; the next rank
/// waits for the signal and finds the data.
fn put_sizes(n: usize) {
    const SIZES: [usize; 6] = [0, 1, 7, 4096, 65_537, 1 << 20];
    const OFFSETS: [usize; 3] = [0, 3, 4093];
    let cap = (1 << 20) + 4096;
    ranks(
        n,
        || config(T),
        |c| {
            let (r, n) = (c.rank(), c.nranks());
            let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
            let mut src = pattern(cap, r);
            let mut dst = vec![0u8; cap];
            // SAFETY: both buffers outlive the windows (deregistered below).
            let (sw, dw) = unsafe { register_pair(c, &mut src, &mut dst) };
            assert_eq!(dw.peer_size(next), Some(cap));
            let s = Stream::new();
            for size in SIZES {
                for off in OFFSETS {
                    // The source at an offset inside its window as well.
                    let soff = off / 2;
                    // SAFETY: `src` lives until the synchronize below.
                    unsafe {
                        c.put_signal(
                            src.as_ptr().add(soff),
                            size,
                            DataType::Uint8,
                            next,
                            &dw,
                            off,
                            0,
                            0,
                            0,
                            &s,
                        )
                        .expect("put_signal");
                    }
                    c.wait_signal(&[desc(prev, 1)], &s).expect("wait_signal");
                    s.synchronize().expect("synchronize");
                    let want = pattern(cap, prev);
                    assert_eq!(
                        &dst[off..off + size],
                        &want[soff..soff + size],
                        "rank {r}: {size} bytes at offset {off} from rank {prev}"
                    );
                    // Nobody overwrites a window another rank is still checking.
                    c.barrier().expect("barrier");
                }
            }
            deregister_pair(c, sw, dw);
        },
    );
}

#[test]
fn put_signal_sizes_offsets_2_ranks() {
    put_sizes(2);
}

#[test]
fn put_signal_sizes_offsets_4_ranks() {
    put_sizes(4);
}

/// Signals without data from every rank to every other (and itself), one wait
/// for all of them; a second round shows the first was consumed.
#[test]
fn signal_only_all_to_all() {
    ranks(
        4,
        || config(T),
        |c| {
            let (r, n) = (c.rank(), c.nranks());
            let mut b = vec![0u8; 64];
            // SAFETY: `b` outlives the window.
            let w = unsafe { c.window_register(b.as_mut_ptr(), b.len()) }.expect("register");
            let s = Stream::new();
            for round in 0..2 {
                for p in 0..n {
                    c.signal((r + p) % n, 0, 0, 0, &s).expect("signal");
                }
                let all: Vec<_> = (0..n).map(|p| desc(p, 1)).collect();
                c.wait_signal(&all, &s).expect("wait_signal");
                s.synchronize()
                    .unwrap_or_else(|e| panic!("rank {r} round {round}: {e}"));
            }
            c.window_deregister(w).expect("deregister");
        },
    );
}

/// Many puts (to the next rank, each into its own slice), then one wait for all.
#[test]
fn many_puts_then_one_wait() {
    const K: usize = 48;
    const CHUNK: usize = 1000;
    ranks(
        3,
        || config(T),
        |c| {
            let (r, n) = (c.rank(), c.nranks());
            let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
            let mut src = pattern(K * CHUNK, r + 10);
            let mut dst = vec![0u8; K * CHUNK];
            // SAFETY: both buffers outlive the windows (deregistered below).
            let (sw, dw) = unsafe { register_pair(c, &mut src, &mut dst) };
            let s = Stream::new();
            for k in 0..K {
                // SAFETY: `src` lives until the synchronize below.
                unsafe {
                    c.put_signal(
                        src.as_ptr().add(k * CHUNK),
                        CHUNK / 4,
                        DataType::Int32,
                        next,
                        &dw,
                        k * CHUNK,
                        0,
                        0,
                        0,
                        &s,
                    )
                    .expect("put_signal");
                }
            }
            c.wait_signal(&[desc(prev, K as u64)], &s).expect("wait_signal");
            s.synchronize().expect("synchronize");
            assert!(dst == pattern(K * CHUNK, prev + 10), "rank {r}: data from rank {prev}");
            c.barrier().expect("barrier");
            deregister_pair(c, sw, dw);
        },
    );
}

/// Bad arguments are refused at enqueue, naming what was wrong; a deregistered
/// window is refused.
#[test]
fn argument_checks_and_deregister() {
    ranks(
        2,
        || config(T),
        |c| {
            let peer = 1 - c.rank();
            let s = Stream::new();
            // Before any window: the plugin is not set up yet.
            let e = c.signal(peer, 0, 0, 0, &s).expect_err("signal before any window");
            assert!(
                matches!(&e, Error::InvalidUsage(m) if m.contains("register a window")),
                "{e}"
            );
            let mut b = vec![0u8; 256];
            let outside = [0u8; 16];
            // SAFETY: `b` outlives the window.
            let w = unsafe { c.window_register(b.as_mut_ptr(), b.len()) }.expect("register");
            let bp = b.as_ptr();
            let inval = |r: ferroccl::Result<()>, what: &str| match r {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(what), "{m} (expected '{what}')"),
                other => panic!("expected InvalidArgument '{what}', got {other:?}"),
            };
            // SAFETY: every call below is refused before anything is enqueued.
            unsafe {
                inval(c.put_signal(bp, 4, DataType::Uint8, peer, &w, 0, 0, 0, 1, &s), "flags");
                inval(
                    c.put_signal(bp, 4, DataType::Uint8, peer, &w, 0, 1, 0, 0, &s),
                    "signal index",
                );
                inval(
                    c.put_signal(bp, 4, DataType::Uint8, peer, &w, 0, 0, 1, 0, &s),
                    "context",
                );
                inval(c.put_signal(bp, 4, DataType::Uint8, 2, &w, 0, 0, 0, 0, &s), "peer 2");
                inval(
                    c.put_signal(bp, 4, DataType::Uint8, peer, &w, 253, 0, 0, 0, &s),
                    "do not fit",
                );
                inval(
                    c.put_signal(outside.as_ptr(), 4, DataType::Uint8, peer, &w, 0, 0, 0, 0, &s),
                    "not inside a window",
                );
            }
            inval(c.wait_signal(&[desc(5, 1)], &s), "peer 5");
            let kept = w.clone();
            c.window_deregister(w).expect("deregister");
            // SAFETY: refused before anything is enqueued.
            inval(
                unsafe { c.put_signal(bp, 4, DataType::Uint8, peer, &kept, 0, 0, 0, 0, &s) },
                "not registered",
            );
            inval(c.window_deregister(kept), "not registered");
            s.synchronize().expect("nothing was enqueued");
        },
    );
}

/// A peer that never signals (it left): the wait ends with a timeout naming it.
#[test]
fn wait_for_a_peer_that_left_times_out_naming_it() {
    let short = Duration::from_secs(8);
    ranks(
        2,
        || config(short),
        |c| {
            let mut b = vec![0u8; 64];
            // SAFETY: `b` outlives the window (released with the communicator).
            let _w = unsafe { c.window_register(b.as_mut_ptr(), b.len()) }.expect("register");
            c.barrier().expect("barrier");
            if c.rank() == 0 {
                let s = Stream::new();
                c.wait_signal(&[desc(1, 1)], &s).expect("enqueue");
                let e = s.synchronize().expect_err("no signal comes");
                let m = e.to_string();
                assert!(matches!(e, Error::Timeout(_)), "{m}");
                assert!(m.contains("rank 1") && m.contains("WaitSignal"), "{m}");
            }
        },
    );
}

/// `NCCL_RMA_EAGER_INIT=1` is read per communicator; here the plugin is set up at
/// the first registration instead, and a communicator whose net library has no RMA
/// table (the SDK test plugin) gets a clear error on every rank.
#[test]
fn no_rma_plugin_is_a_clear_error() {
    env();
    let lib = plugin_common::sdk_lib();
    let loaded = ferroccl::plugin::load_net_from(&lib, &plugin_common::opts()).expect("load the SDK plugin");
    let net = loaded.plugin.clone();
    ranks(
        2,
        || CommConfig {
            preloaded_net: Some(PreloadedNet(Arc::clone(&net))),
            ..config(T)
        },
        |c| {
            let mut b = vec![0u8; 64];
            // SAFETY: nothing is registered (the call fails).
            let e = unsafe { c.window_register(b.as_mut_ptr(), b.len()) }.expect_err("no RMA plugin");
            let m = e.to_string();
            assert!(matches!(e, Error::InvalidUsage(_)), "{m}");
            assert!(
                m.contains("no RMA plugin") && m.contains("NCCL_SOCKET_RMA_ENABLE=1") && m.contains("rank 0"),
                "{m}"
            );
            // The one-sided calls then answer as NCCL 2.30.7's rmaTaskAppend answers
            // !comm->hostRmaSupport: ncclInvalidArgument (registration: ncclInvalidUsage,
            // as its ncclRmaProxyConnectOnce without a plugin).
            let s = Stream::new();
            let e = c.signal(0, 0, 0, 0, &s).expect_err("still unavailable");
            assert!(
                matches!(&e, Error::InvalidArgument(m) if m.contains("host RMA is not supported") && m.contains("no RMA plugin")),
                "{e:?}"
            );
            let e = c
                .wait_signal(&[desc(1 - c.rank(), 1)], &s)
                .expect_err("still unavailable");
            assert!(
                matches!(&e, Error::InvalidArgument(m) if m.contains("no RMA plugin")),
                "{e:?}"
            );
            assert!(c.rma_status().is_err());
        },
    );
}

/// A put to a peer whose communicator is gone fails, naming the peer, instead of
/// hanging (the socket plugin fails operations on a lost connection).
#[test]
fn put_to_a_destroyed_peer_fails_naming_it() {
    env();
    let id = get_unique_id(&BootstrapConfig::loopback(T)).expect("unique id");
    let (gone_tx, gone_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let id = &id;
        let r1 = s.spawn(move || {
            let c = Comm::init_rank(2, id, 1, config(Duration::from_secs(20))).expect("init");
            let mut b = vec![0u8; 4096];
            // SAFETY: `b` outlives the communicator, which releases the window.
            let _w = unsafe { c.window_register(b.as_mut_ptr(), b.len()) }.expect("register");
            c.barrier().expect("barrier");
            c.destroy().expect("destroy");
            drop(b);
            gone_tx.send(()).expect("tell rank 0");
        });
        let r0 = s.spawn(move || {
            let c = Comm::init_rank(2, id, 0, config(Duration::from_secs(20))).expect("init");
            let mut b = vec![7u8; 4096];
            // SAFETY: `b` outlives the communicator, which releases the window.
            let w = unsafe { c.window_register(b.as_mut_ptr(), b.len()) }.expect("register");
            c.barrier().expect("barrier");
            gone_rx.recv_timeout(T).expect("rank 1 destroyed its communicator");
            let s = Stream::new();
            // SAFETY: `b` lives until the synchronize.
            unsafe { c.put_signal(b.as_ptr(), 1024, DataType::Uint8, 1, &w, 0, 0, 0, 0, &s) }.expect("enqueue");
            let e = s.synchronize().expect_err("the peer is gone");
            let m = e.to_string();
            assert!(m.contains("PutSignal") && m.contains("rank 1"), "{m}");
            c.abort();
        });
        r1.join().expect("rank 1");
        r0.join().expect("rank 0");
    });
}

/// `CommConfig::num_rma_ctx` (`ncclConfig_t.numRmaCtx`): with 2 contexts a signal on
/// context 1 is waited for on context 1 and context 2 is refused; with 0 the
/// one-sided calls are disabled, as NCCL's `NCCL_NUM_RMA_CTX=0`.
#[test]
fn num_rma_ctx_sets_the_contexts_and_zero_disables() {
    ranks(
        2,
        || CommConfig {
            num_rma_ctx: Some(2),
            ..config(T)
        },
        |c| {
            let (r, n) = (c.rank(), c.nranks());
            let mut b = vec![0u8; 64];
            // SAFETY: `b` outlives the window.
            let w = unsafe { c.window_register(b.as_mut_ptr(), b.len()) }.expect("register");
            let s = Stream::new();
            c.signal((r + 1) % n, 0, 1, 0, &s).expect("signal on context 1");
            let d = WaitSignalDesc {
                ctx: 1,
                ..desc((r + n - 1) % n, 1)
            };
            c.wait_signal(&[d], &s).expect("wait_signal on context 1");
            s.synchronize().unwrap_or_else(|e| panic!("rank {r}: {e}"));
            match c.signal((r + 1) % n, 0, 2, 0, &s) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains("context 2 is invalid"), "{m}"),
                other => panic!("context 2 of 2 accepted: {other:?}"),
            }
            c.window_deregister(w).expect("deregister");
        },
    );
    ranks(
        2,
        || CommConfig {
            num_rma_ctx: Some(0),
            ..config(T)
        },
        |c| {
            let mut b = vec![0u8; 64];
            // SAFETY: nothing is registered (the call fails).
            let e = unsafe { c.window_register(b.as_mut_ptr(), b.len()) }.expect_err("RMA disabled");
            assert!(e.to_string().contains("disabled"), "{e}");
            // ncclSignal with numRmaCtx 0: ctx 0 is out of range, ncclInvalidArgument.
            let e = c
                .signal(1 - c.rank(), 0, 0, 0, &Stream::new())
                .expect_err("RMA disabled");
            assert!(
                matches!(&e, Error::InvalidArgument(m) if m.contains("disabled")),
                "{e:?}"
            );
        },
    );
}

/// Inside a group, several put-with-signals to several peers and a wait for all of
/// them are checked at call time but handed to the RMA thread only at `group_end`
/// (NCCL 2.30.7 `rmaTaskAppend` / `scheduleRmaTasksToPlan`), then run in call order:
/// two puts to the same place leave the second one's data.
#[test]
fn group_defers_puts_to_group_end_in_call_order() {
    const CHUNK: usize = 4096;
    ranks(
        3,
        || config(T),
        |c| {
            let (r, n) = (c.rank(), c.nranks());
            // Two source patterns side by side: the first and the second put to a peer.
            let mut src = [pattern(CHUNK, 10 + r), pattern(CHUNK, 20 + r)].concat();
            let mut dst = vec![0u8; n * CHUNK];
            // SAFETY: both buffers outlive the windows (deregistered below).
            let (sw, dw) = unsafe { register_pair(c, &mut src, &mut dst) };
            let s = Stream::new();
            let before = c.rma_submitted();
            ferroccl::group_start();
            let peers: Vec<usize> = (1..n).map(|d| (r + d) % n).collect();
            for &p in &peers {
                for k in 0..2 {
                    // SAFETY: `src` lives until the synchronize below.
                    unsafe {
                        c.put_signal(
                            src.as_ptr().add(k * CHUNK),
                            CHUNK,
                            DataType::Uint8,
                            p,
                            &dw,
                            r * CHUNK,
                            0,
                            0,
                            0,
                            &s,
                        )
                    }
                    .expect("put_signal in a group");
                }
            }
            let all: Vec<_> = peers.iter().map(|&p| desc(p, 2)).collect();
            c.wait_signal(&all, &s).expect("wait_signal in a group");
            assert_eq!(
                c.rma_submitted(),
                before,
                "rank {r}: a one-sided call inside a group was issued before group_end"
            );
            ferroccl::group_end().expect("group_end");
            assert_eq!(
                c.rma_submitted(),
                before + 2 * peers.len() as u64 + 1,
                "rank {r}: group_end did not hand over every one-sided call"
            );
            s.synchronize().unwrap_or_else(|e| panic!("rank {r}: {e}"));
            for &p in &peers {
                assert_eq!(
                    &dst[p * CHUNK..(p + 1) * CHUNK],
                    &pattern(CHUNK, 20 + p)[..],
                    "rank {r}: the data from rank {p} is not its second (last called) put"
                );
            }
            c.barrier().expect("barrier");
            deregister_pair(c, sw, dw);
        },
    );
}

/// An argument error of a one-sided call inside a group is returned by the call
/// itself (NCCL checks in `rmaTaskAppend`); nothing of it is queued, and the group
/// still ends cleanly.
#[test]
fn group_reports_argument_errors_at_call_time() {
    ranks(
        2,
        || config(T),
        |c| {
            let (r, n) = (c.rank(), c.nranks());
            let mut b = vec![0u8; 64];
            // SAFETY: `b` outlives the window.
            let w = unsafe { c.window_register(b.as_mut_ptr(), b.len()) }.expect("register");
            let s = Stream::new();
            let before = c.rma_submitted();
            ferroccl::group_start();
            // SAFETY: `b` lives until the end of the closure (nothing runs anyway).
            let e = unsafe { c.put_signal(b.as_ptr(), 8, DataType::Uint8, (r + 1) % n, &w, 0, 0, 0, 1, &s) };
            assert!(matches!(e, Err(Error::InvalidArgument(_))), "flags 1: {e:?}");
            let e = c.signal((r + 1) % n, 0, 5, 0, &s);
            assert!(matches!(e, Err(Error::InvalidArgument(_))), "ctx 5: {e:?}");
            let e = c.wait_signal(&[desc(n, 1)], &s);
            assert!(matches!(e, Err(Error::InvalidArgument(_))), "peer {n}: {e:?}");
            ferroccl::group_end().expect("group_end");
            assert_eq!(c.rma_submitted(), before, "rank {r}: a rejected call was queued");
            s.synchronize().expect("synchronize");
            c.window_deregister(w).expect("deregister");
        },
    );
}

/// A group mixing an AllReduce with put-with-signals and a wait completes both.
#[test]
fn group_mixes_allreduce_and_puts() {
    const CHUNK: usize = 1024;
    const COUNT: usize = 4096;
    ranks(
        3,
        || config(T),
        |c| {
            let (r, n) = (c.rank(), c.nranks());
            let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
            let mut src = pattern(CHUNK, r);
            let mut dst = vec![0u8; CHUNK];
            // SAFETY: both buffers outlive the windows (deregistered below).
            let (sw, dw) = unsafe { register_pair(c, &mut src, &mut dst) };
            let (send, mut recv) = all_reduce_bufs(COUNT, r);
            let s = Stream::new();
            ferroccl::group_start();
            // SAFETY: the buffers live until the synchronize below.
            unsafe {
                all_reduce_f32(c, &send, &mut recv, &s).expect("all_reduce in a group");
                c.put_signal(src.as_ptr(), CHUNK, DataType::Uint8, next, &dw, 0, 0, 0, 0, &s)
                    .expect("put_signal in a group");
            }
            c.wait_signal(&[desc(prev, 1)], &s).expect("wait_signal in a group");
            ferroccl::group_end().expect("group_end");
            s.synchronize().unwrap_or_else(|e| panic!("rank {r}: {e}"));
            assert_eq!(dst, pattern(CHUNK, prev), "rank {r}: the put from rank {prev}");
            for (i, v) in recv.iter().enumerate() {
                let want = (0..n).map(|q| (i + q) as f32).sum::<f32>();
                assert_eq!(*v, want, "rank {r}: AllReduce element {i}");
            }
            c.barrier().expect("barrier");
            deregister_pair(c, sw, dw);
        },
    );
}

/// Inside a group, a communicator's operations are joined over the streams they
/// name, as NCCL 2.30.7's `ncclLaunchPrepare` (`src/enqueue.cc`) joins the planner's
/// streams: rank 0's group has a put on stream B and an AllReduce on stream A, and
/// stream B holds, from before the group, a wait for a signal that rank 1 sends only
/// after rank 0 has looked at stream A. So the AllReduce on A cannot have finished
/// then (without the join it ran at once, rank 1's AllReduce being there), and it
/// completes once the signal comes.
#[test]
fn group_joins_the_streams_of_a_communicators_operations() {
    const CHUNK: usize = 256;
    const COUNT: usize = 64;
    let looked = std::sync::Barrier::new(2);
    ranks(
        2,
        || config(T),
        |c| {
            let r = c.rank();
            let mut src = pattern(CHUNK, r);
            let mut dst = vec![0u8; CHUNK];
            // SAFETY: both buffers outlive the windows (deregistered below).
            let (sw, dw) = unsafe { register_pair(c, &mut src, &mut dst) };
            let (send, mut recv) = all_reduce_bufs(COUNT, r);
            let (a, b) = (Stream::new(), Stream::new());
            if r == 0 {
                c.wait_signal(&[desc(1, 1)], &b).expect("wait_signal on B");
                ferroccl::group_start();
                // SAFETY: the buffers live until the synchronizes below.
                unsafe {
                    c.put_signal(src.as_ptr(), CHUNK, DataType::Uint8, 1, &dw, 0, 0, 0, 0, &b)
                        .expect("put_signal in a group");
                    all_reduce_f32(c, &send, &mut recv, &a).expect("all_reduce in a group");
                }
                ferroccl::group_end().expect("group_end");
                // The AllReduce follows the wait on B, whose signal is not sent yet;
                // given time to finish if it (wrongly) could.
                let early = a.synchronize_timeout(Some(Duration::from_secs(2)));
                // Release rank 1 before judging, so that a failure here cannot leave
                // it waiting on the barrier.
                looked.wait();
                assert!(
                    matches!(early, Err(Error::Timeout(_))),
                    "rank 0: the group's AllReduce on stream A ran before the earlier wait on stream B: {early:?}"
                );
            } else {
                // SAFETY: the buffers live until the synchronizes below.
                unsafe { all_reduce_f32(c, &send, &mut recv, &a) }.expect("all_reduce");
                looked.wait();
                c.signal(0, 0, 0, 0, &b).expect("signal");
                c.wait_signal(&[desc(0, 1)], &b).expect("wait for rank 0's put");
            }
            a.synchronize().unwrap_or_else(|e| panic!("rank {r}: stream A: {e}"));
            b.synchronize().unwrap_or_else(|e| panic!("rank {r}: stream B: {e}"));
            for (i, v) in recv.iter().enumerate() {
                assert_eq!(*v, (2 * i + 1) as f32, "rank {r}: AllReduce element {i}");
            }
            if r == 1 {
                assert_eq!(dst, pattern(CHUNK, 0), "rank 1: the put from rank 0");
            }
            c.barrier().expect("barrier");
            deregister_pair(c, sw, dw);
        },
    );
}
