//! The IB plugin's RMA table with a group of one rank: a put, a put-with-signal and a
//! get to the rank itself go over its loopback QP pair (`plugins/net-ib/src/rma.rs`;
//! the conformance RMA section never targets the rank itself). Loaded through the
//! host's `RmaAdapter` from the built `libnccl_net_ib.so` with `NCCL_IB_RMA_ENABLE=1`.
//! Skips (passes) without RDMA devices unless `IB_VM_REQUIRE=1`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferroccl::plugin::library::PluginLibrary;
use ferroccl::plugin::net::{NetHandle, PtrType, RawComm, RawRequest};
use ferroccl::plugin::rma::{RmaAdapter, RmaConfig, RmaSignal, RmaXfer, SignalOp};

fn so_path() -> String {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libnccl_net_ib.so")
        .to_string_lossy()
        .into_owned()
}

fn wait(a: &RmaAdapter, coll: RawComm, req: RawRequest, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !a.test(coll, req).unwrap_or_else(|e| panic!("{what}: {e}")) {
        assert!(Instant::now() < deadline, "{what}: pending after 60 s");
        std::thread::yield_now();
    }
}

#[test]
fn put_signal_and_get_to_the_rank_itself() {
    // SAFETY: set before the plugin is loaded; this test binary has one test.
    unsafe { std::env::set_var("NCCL_IB_RMA_ENABLE", "1") };
    let require = std::env::var("IB_VM_REQUIRE").is_ok_and(|v| v == "1");
    let lib = Arc::new(PluginLibrary::open(&so_path()).expect("dlopen libnccl_net_ib.so"));
    let a = RmaAdapter::probe(lib).expect("an RMA table in libnccl_net_ib.so");
    let ctx = match a.init_ctx(0x5e1f) {
        Ok(c) => c,
        Err(e) if !require => {
            println!("skipping: RMA init failed (no RDMA device?): {e}");
            return;
        }
        Err(e) => panic!("RMA init with IB_VM_REQUIRE=1: {e}"),
    };
    let mut h: NetHandle = [0; 128];
    let listen = a.listen(ctx, 0, &mut h).expect("listen");
    let mut all = [h];
    let coll = a.connect(ctx, &mut all, 0, listen).expect("connect a group of one");
    a.close_listen(listen).expect("closeListen");
    let rctx = a.create_context(coll, &RmaConfig::default()).expect("createContext");

    const N: usize = 65_537;
    let mut src: Vec<u8> = (0..N).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; N + 64];
    let mut sig = [0u64; 2];
    let smr = a
        .reg_mr_sym(coll, src.as_mut_ptr(), N, PtrType::Host, 0)
        .expect("regMrSym src");
    let dmr = a
        .reg_mr_sym(coll, dst.as_mut_ptr(), dst.len(), PtrType::Host, 0)
        .expect("regMrSym dst");
    let gmr = a
        .reg_mr_sym(coll, sig.as_mut_ptr().cast(), 16, PtrType::Host, 0)
        .expect("regMrSym signal");
    let x = |local_off: usize, local_mr, size, remote_off: usize, remote_mr| RmaXfer {
        context: 0,
        local_off: local_off as u64,
        local_mr,
        size,
        remote_off: remote_off as u64,
        remote_mr,
        rank: 0,
    };

    // A put to this rank, then a put-with-signal of the rest: the signal counts 5.
    let q = a.iput(rctx, &x(0, smr, 1000, 3, dmr)).expect("iput to self");
    wait(&a, coll, q, "iput to self");
    let s = RmaSignal {
        off: 8,
        mr: gmr,
        value: 5,
        op: SignalOp::Add,
    };
    let q = a
        .iput_signal(rctx, &x(1000, smr, N - 1000, 1003, dmr), &s, true)
        .expect("iputSignal to self");
    wait(&a, coll, q, "iputSignal to self");
    // SAFETY: the aligned signal word, updated by the NIC's atomic.
    let word = unsafe { AtomicU64::from_ptr(sig.as_mut_ptr().add(1)) };
    assert_eq!(word.load(Ordering::Acquire), 5, "the signal word after one ADD(5)");
    // SAFETY: the completed requests ordered the NIC's writes before these reads.
    let got: Vec<u8> = (0..dst.len())
        .map(|i| unsafe { std::ptr::read_volatile(dst.as_ptr().add(i)) })
        .collect();
    assert_eq!(&got[..3], &[0, 0, 0], "bytes before the put");
    assert!(got[3..3 + N] == src[..], "the two puts' bytes");
    assert!(got[3 + N..].iter().all(|&b| b == 0), "bytes after the put");

    // A get from this rank's own window back into the source window's start.
    src[..100].fill(0xee);
    let q = a.iget(rctx, &x(0, smr, 100, 3, dmr)).expect("iget from self");
    wait(&a, coll, q, "iget from self");
    let back: Vec<u8> = (0..100)
        // SAFETY: as above.
        .map(|i| unsafe { std::ptr::read_volatile(src.as_ptr().add(i)) })
        .collect();
    let want: Vec<u8> = (0..100).map(|i| (i * 7 + 3) as u8).collect();
    assert_eq!(back, want, "the get's bytes");

    // A flush after all of it completes.
    let q = a.iflush(rctx, 0, dmr, 0).expect("iflush");
    wait(&a, coll, q, "iflush");
    for m in [smr, dmr, gmr] {
        a.dereg_mr_sym(coll, m).expect("deregMrSym");
    }
    a.destroy_context(rctx).expect("destroyContext");
    a.close_coll(coll).expect("closeColl");
    a.finalize_ctx(ctx).expect("finalize");
}
