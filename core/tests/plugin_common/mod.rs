//! Helpers shared by the `plugin_*` integration tests: locating the plugin `.so`
//! files cargo built next to the test binaries, and driving a plugin end to end.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferroccl::plugin::LoadOptions;
use ferroccl::plugin::net::{CommConfig, NetHandle, NetPlugin, PtrType, RawComm, RawRequest, RecvSlot};

/// `target/<profile>/`: the test binary lives in `target/<profile>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// Path of a built plugin library; panics with the fix if it is missing.
pub fn lib(file: &str) -> String {
    let p = profile_dir().join(file);
    assert!(
        p.is_file(),
        "{} is missing: build the test plugins first with `cargo build --workspace --all-targets`",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

/// The SDK test plugin (`testing/net-sdk-test`).
pub fn sdk_lib() -> String {
    lib("libferroccl_test_net_sdk.so")
}

/// Options independent of the in-tree plugins and of the environment.
pub fn opts() -> LoadOptions {
    LoadOptions {
        in_tree: false,
        ..LoadOptions::default()
    }
}

/// Generous bound for every poll loop (in-process loopback completes at once).
const BOUND: Duration = Duration::from_secs(10);

/// Calls `f` until it yields `Some`, bounded.
pub fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < BOUND, "{what}: not done within {BOUND:?}");
        std::thread::yield_now();
    }
}

/// Tests `req` until done; returns the sizes.
pub fn wait(net: &dyn NetPlugin, req: RawRequest, n: usize) -> Vec<usize> {
    let mut sizes = vec![0usize; n];
    until("test", || net.test(req, &mut sizes).expect("test").then_some(()));
    sizes
}

/// A connected pair on device 0.
pub struct Pair {
    pub ctx: ferroccl::plugin::net::RawCtx,
    pub listen: RawComm,
    pub send: RawComm,
    pub recv: RawComm,
}

/// listen → connect (retried with the same handle) / accept.
pub fn connect_pair(net: &dyn NetPlugin, comm_id: u64) -> Pair {
    let ctx = net.init_ctx(comm_id, &CommConfig::default()).expect("init_ctx");
    let mut handle: NetHandle = [0; 128];
    let listen = net.listen(ctx, 0, &mut handle).expect("listen");
    let mut send = None;
    let mut recv = None;
    until("connect/accept", || {
        if send.is_none() {
            send = net.connect(ctx, 0, &mut handle).expect("connect");
        }
        if recv.is_none() {
            recv = net.accept(listen).expect("accept");
        }
        (send.is_some() && recv.is_some()).then_some(())
    });
    Pair {
        ctx,
        listen,
        send: send.unwrap(),
        recv: recv.unwrap(),
    }
}

/// A byte pattern that differs per `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Drives init/devices/getProperties/listen/connect/accept/regMr/isend/irecv/test/
/// deregMr/close*/finalize through `net`, verifying the bytes received.
pub fn drive_roundtrip(net: &dyn NetPlugin, comm_id: u64) {
    assert!(net.devices().expect("devices") >= 1);
    let props = net.properties(0).expect("properties");
    assert!(!props.name.is_empty());
    let p = connect_pair(net, comm_id);
    let mut src = pattern(4096, 7);
    let mut dst = vec![0u8; 8192];
    let smr = net
        .reg_mr(p.send, src.as_mut_ptr(), src.len(), PtrType::Host)
        .expect("regMr send");
    let rmr = net
        .reg_mr(p.recv, dst.as_mut_ptr(), dst.len(), PtrType::Host)
        .expect("regMr recv");
    // Two messages in flight: the n-th send lands in the n-th receive.
    let mut src2 = pattern(100, 99);
    let s1 = until("isend", || {
        net.isend(p.send, src.as_mut_ptr(), src.len(), 5, Some(smr))
            .expect("isend")
    });
    let s2 = until("isend", || {
        net.isend(p.send, src2.as_mut_ptr(), src2.len(), 5, None)
            .expect("isend")
    });
    let slot = RecvSlot {
        data: dst.as_mut_ptr(),
        size: dst.len(),
        tag: 5,
        mr: Some(rmr),
    };
    let r1 = until("irecv", || net.irecv(p.recv, &[slot], false).expect("irecv"));
    let mut dst2 = vec![0u8; 100];
    let slot2 = RecvSlot {
        data: dst2.as_mut_ptr(),
        size: 100,
        tag: 5,
        mr: None,
    };
    // The optional-completion hint must be harmless for every version.
    let r2 = until("irecv", || net.irecv(p.recv, &[slot2], true).expect("irecv hint"));
    assert_eq!(wait(net, s1, 1), vec![4096]);
    assert_eq!(wait(net, s2, 1), vec![100]);
    assert_eq!(wait(net, r1, 1), vec![4096]);
    assert_eq!(wait(net, r2, 1), vec![100]);
    assert_eq!(&dst[..4096], &src[..], "data of message 1");
    assert_eq!(dst2, src2, "data of message 2");
    // iflush on host memory: nothing to do.
    let f = net.iflush(p.recv, &[slot]).expect("iflush");
    if let Some(f) = f {
        wait(net, f, 0);
    }
    net.dereg_mr(p.send, smr).expect("deregMr");
    net.dereg_mr(p.recv, rmr).expect("deregMr");
    net.close_send(p.send).expect("closeSend");
    net.close_recv(p.recv).expect("closeRecv");
    net.close_listen(p.listen).expect("closeListen");
    net.finalize_ctx(p.ctx).expect("finalize");
}
