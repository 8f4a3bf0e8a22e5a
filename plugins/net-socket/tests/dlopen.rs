//! The built `libnccl_net_socket.so` loaded with dlopen and driven through its C
//! vtables (`ncclNetPlugin_v12` and `ncclNetPlugin_v6`), as NCCL would.
//! One test per binary: it sets `NCCL_SOCKET_IFNAME` before the library reads it.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use ferroccl_plugin_api::abi::{ncclNet_v6_t, ncclNet_v12_t, ncclNetCommConfig_v10_t, ncclNetProperties_v12_t};

const BOUND: Duration = Duration::from_secs(60);

fn so_path() -> std::path::PathBuf {
    // target/<profile>/deps/dlopen-xxxx -> target/<profile>/libnccl_net_socket.so
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap().join("libnccl_net_socket.so");
    assert!(
        p.exists(),
        "{} missing: run `cargo build -p ferroccl-net-socket` first",
        p.display()
    );
    p
}

fn ok(r: ferroccl_plugin_api::abi::ncclResult_t, what: &str) {
    assert!(r.is_success(), "{what} returned {}", r.name());
}

macro_rules! call {
    ($net:expr, $f:ident ( $($a:expr),* )) => {
        // SAFETY: the slot comes from the plugin's vtable and the arguments follow its C signature.
        unsafe { ($net.$f.expect(concat!(stringify!($f), " slot")))($($a),*) }
    };
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn v12(net: &ncclNet_v12_t) {
    // SAFETY: `name` is a static C string of the plugin.
    assert_eq!(unsafe { CStr::from_ptr(net.name) }, c"FerrocclSocket");
    let mut ctx: *mut c_void = null_mut();
    let mut cfg = ncclNetCommConfig_v10_t { trafficClass: -1 };
    ok(call!(net, init(&mut ctx, 1, &mut cfg, None, None)), "init");
    let mut ndev: c_int = 0;
    ok(call!(net, devices(&mut ndev)), "devices");
    assert_eq!(ndev, 1);
    // SAFETY: all-zero is a valid bit pattern for this plain C struct.
    let mut props: ncclNetProperties_v12_t = unsafe { std::mem::zeroed() };
    ok(call!(net, getProperties(0, &mut props)), "getProperties");
    // SAFETY: the plugin fills `name` with a C string it keeps alive.
    assert_eq!(unsafe { CStr::from_ptr(props.name) }.to_str().unwrap(), "lo");
    assert!(props.pciPath.is_null());
    assert_eq!((props.maxRecvs, props.ptrSupport, props.speed), (8, 1, 10_000));

    let mut handle = [0u8; 128];
    let mut lc: *mut c_void = null_mut();
    ok(
        call!(net, listen(ctx, 0, handle.as_mut_ptr().cast(), &mut lc)),
        "listen",
    );
    assert!(!lc.is_null());
    let (mut sc, mut rc): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
    let t0 = Instant::now();
    while sc.is_null() || rc.is_null() {
        assert!(t0.elapsed() < BOUND);
        if sc.is_null() {
            ok(
                call!(net, connect(ctx, 0, handle.as_mut_ptr().cast(), &mut sc, null_mut())),
                "connect",
            );
        }
        if rc.is_null() {
            ok(call!(net, accept(lc, &mut rc, null_mut())), "accept");
        }
    }
    ok(call!(net, closeListen(lc)), "closeListen");

    // Grouped receive of 2 buffers, sends in reverse tag order, sizes across the inline/data split.
    let sizes = [129usize, 3 << 20];
    let mut srcs: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &s)| pattern(i as u8, s)).collect();
    let mut dsts: Vec<Vec<u8>> = sizes.iter().map(|&s| vec![0u8; s + 7]).collect();
    let mut data: Vec<*mut c_void> = dsts.iter_mut().map(|d| d.as_mut_ptr().cast()).collect();
    let mut rsizes: Vec<usize> = dsts.iter().map(|d| d.len()).collect();
    let mut tags: Vec<c_int> = vec![10, 20];
    let mut mh: Vec<*mut c_void> = vec![null_mut(); 2];
    // NCCL_NET_OPTIONAL_RECV_COMPLETION hint (the value 1, never dereferenced).
    let mut rreq: *mut c_void = std::ptr::without_provenance_mut(1);
    ok(
        call!(
            net,
            irecv(
                rc,
                2,
                data.as_mut_ptr(),
                rsizes.as_mut_ptr(),
                tags.as_mut_ptr(),
                mh.as_mut_ptr(),
                null_mut(),
                &mut rreq
            )
        ),
        "irecv",
    );
    assert!(
        !rreq.is_null() && rreq as usize != 1,
        "irecv overwrites the hint with a real request"
    );
    let mut sreqs = Vec::new();
    for i in [1usize, 0] {
        let mut r: *mut c_void = null_mut();
        ok(
            call!(
                net,
                isend(
                    sc,
                    srcs[i].as_mut_ptr().cast(),
                    sizes[i],
                    tags[i],
                    null_mut(),
                    null_mut(),
                    &mut r
                )
            ),
            "isend",
        );
        assert!(!r.is_null());
        sreqs.push(r);
    }
    let mut done_sizes = [0 as c_int; 8];
    let t0 = Instant::now();
    loop {
        let mut done: c_int = 0;
        ok(call!(net, test(rreq, &mut done, done_sizes.as_mut_ptr())), "test(recv)");
        if done != 0 {
            break;
        }
        assert!(t0.elapsed() < BOUND);
    }
    assert_eq!(&done_sizes[..2], &[sizes[0] as c_int, sizes[1] as c_int]);
    for r in sreqs {
        loop {
            let mut done: c_int = 0;
            ok(call!(net, test(r, &mut done, null_mut())), "test(send) with NULL sizes");
            if done != 0 {
                break;
            }
            assert!(t0.elapsed() < BOUND);
        }
    }
    for i in 0..2 {
        assert!(dsts[i][..sizes[i]] == srcs[i][..], "buffer {i}");
    }
    // CUDA memory is refused with an error, not accepted.
    let mut mhandle: *mut c_void = null_mut();
    let r = call!(net, regMr(sc, srcs[0].as_mut_ptr().cast(), 16, 2, &mut mhandle));
    assert!(!r.is_success());
    ok(call!(net, closeSend(sc)), "closeSend");
    ok(call!(net, closeRecv(rc)), "closeRecv");
    ok(call!(net, finalize(ctx)), "finalize");
}

fn v6(net: &ncclNet_v6_t) {
    // SAFETY: `name` is a static C string of the plugin.
    assert_eq!(unsafe { CStr::from_ptr(net.name as *const c_char) }, c"FerrocclSocket");
    ok(call!(net, init(None)), "init");
    let mut handle = [0u8; 128];
    let mut lc: *mut c_void = null_mut();
    ok(call!(net, listen(0, handle.as_mut_ptr().cast(), &mut lc)), "listen");
    let (mut sc, mut rc): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
    let t0 = Instant::now();
    while sc.is_null() || rc.is_null() {
        assert!(t0.elapsed() < BOUND);
        if sc.is_null() {
            ok(call!(net, connect(0, handle.as_mut_ptr().cast(), &mut sc)), "connect");
        }
        if rc.is_null() {
            ok(call!(net, accept(lc, &mut rc)), "accept");
        }
    }
    let mut src = pattern(3, 100_000);
    let mut dst = vec![0u8; 100_000];
    let mut d: *mut c_void = dst.as_mut_ptr().cast();
    let mut sz: c_int = dst.len() as c_int;
    let mut tag: c_int = 0;
    let mut mh: *mut c_void = null_mut();
    let (mut rr, mut sr): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
    ok(
        call!(net, irecv(rc, 1, &mut d, &mut sz, &mut tag, &mut mh, &mut rr)),
        "irecv",
    );
    ok(
        call!(
            net,
            isend(sc, src.as_mut_ptr().cast(), src.len() as c_int, 0, null_mut(), &mut sr)
        ),
        "isend",
    );
    for r in [rr, sr] {
        loop {
            let (mut done, mut size) = (0 as c_int, 0 as c_int);
            ok(call!(net, test(r, &mut done, &mut size)), "test");
            if done != 0 {
                assert_eq!(size, 100_000);
                break;
            }
            assert!(t0.elapsed() < BOUND);
        }
    }
    assert!(dst == src);
    ok(call!(net, closeSend(sc)), "closeSend");
    ok(call!(net, closeRecv(rc)), "closeRecv");
    ok(call!(net, closeListen(lc)), "closeListen");
}

#[test]
fn dlopen_v12_and_v6() {
    // SAFETY: this binary has this one test; nothing else reads the environment concurrently.
    unsafe {
        std::env::set_var("NCCL_SOCKET_IFNAME", "=lo");
        std::env::set_var("NCCL_SOCKET_FAMILY", "AF_INET");
    }
    // SAFETY: loading our own plugin; its initialisers only set up statics.
    let lib = unsafe { libloading::Library::new(so_path()) }.expect("dlopen libnccl_net_socket.so");
    for sym in [
        "ncclNetPlugin_v6",
        "ncclNetPlugin_v7",
        "ncclNetPlugin_v8",
        "ncclNetPlugin_v9",
        "ncclNetPlugin_v10",
        "ncclNetPlugin_v11",
        "ncclNetPlugin_v12",
    ] {
        // SAFETY: only checks that the data symbol exists; nothing is called.
        let found = unsafe { lib.get::<*const c_void>(sym.as_bytes()) }.is_ok();
        assert!(found, "{sym} exported");
    }
    // SAFETY: the symbols are `ncclNet_v12_t` / `ncclNet_v6_t` statics living as long as `lib`.
    let n12: &ncclNet_v12_t = unsafe { &**lib.get::<*const ncclNet_v12_t>(b"ncclNetPlugin_v12").unwrap() };
    v12(n12);
    // SAFETY: as above.
    let n6: &ncclNet_v6_t = unsafe { &**lib.get::<*const ncclNet_v6_t>(b"ncclNetPlugin_v6").unwrap() };
    v6(n6);
}
