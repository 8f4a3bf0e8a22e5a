//! The communicator's traffic class reaches the wire: the built
//! `libnccl_net_socket.so`, dlopen'd and initialised through `ncclNetPlugin_v12`
//! with `ncclNetCommConfig_t.trafficClass`, marks every socket of a connection
//! with `IP_TOS` (and leaves the kernel's default when the class is
//! `NCCL_NET_TRAFFIC_CLASS_UNDEF`). The plugin's sockets are internal, so the
//! test finds them as NCCL's host cannot: the file descriptors of this process
//! (`/proc/self/fd`) whose peer is the listener, read with `getsockopt(IP_TOS)`.
//! One test per binary: it sets `NCCL_SOCKET_IFNAME` before the library reads it.

use std::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use ferroccl_plugin_api::abi::{ncclNet_v12_t, ncclNetCommConfig_v10_t};
use nccl_net_socket::proto::HandleInfo;
use socket2::SockRef;

const BOUND: Duration = Duration::from_secs(60);

fn so_path() -> std::path::PathBuf {
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

/// `IP_TOS` of every socket of this process connected to `peer`.
fn tos_of_sockets_to(peer: SocketAddr) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<c_int>().ok()) else {
            continue;
        };
        if std::fs::read_link(e.path()).map_or(true, |l| !l.to_string_lossy().starts_with("socket:")) {
            continue;
        }
        // SAFETY: `fd` is open in this process for the duration of this loop
        // iteration (the plugin's comms stay open until the test closes them).
        let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
        let s = SockRef::from(&bfd);
        if s.peer_addr().ok().and_then(|a| a.as_socket()) == Some(peer) {
            out.push(
                s.tos_v4()
                    .unwrap_or_else(|e| panic!("getsockopt(IP_TOS) on fd {}: {e}", bfd.as_raw_fd())),
            );
        }
    }
    out
}

/// Connects one send/recv pair in a context made with `trafficClass = tc`, moves
/// one message, and returns the TOS of the sender's sockets (one per stream plus
/// the control socket).
fn connect_with(net: &ncclNet_v12_t, tc: c_int) -> Vec<u32> {
    let mut ctx: *mut c_void = null_mut();
    let mut cfg = ncclNetCommConfig_v10_t { trafficClass: tc };
    ok(call!(net, init(&mut ctx, 7, &mut cfg, None, None)), "init");
    let mut handle = [0u8; 128];
    let mut lc: *mut c_void = null_mut();
    ok(
        call!(net, listen(ctx, 0, handle.as_mut_ptr().cast(), &mut lc)),
        "listen",
    );
    let info = HandleInfo::decode(&handle).expect("the plugin's own handle");
    let (mut sc, mut rc): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
    let t0 = Instant::now();
    while sc.is_null() || rc.is_null() {
        assert!(t0.elapsed() < BOUND, "connect/accept did not finish");
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

    // Data flows over the marked sockets.
    let mut src: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
    let mut dst = vec![0u8; src.len()];
    let mut data: [*mut c_void; 1] = [dst.as_mut_ptr().cast()];
    let mut sizes = [dst.len()];
    let mut tags: [c_int; 1] = [3];
    let mut mh: [*mut c_void; 1] = [null_mut()];
    let mut rreq: *mut c_void = null_mut();
    ok(
        call!(
            net,
            irecv(
                rc,
                1,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                tags.as_mut_ptr(),
                mh.as_mut_ptr(),
                null_mut(),
                &mut rreq
            )
        ),
        "irecv",
    );
    let mut sreq: *mut c_void = null_mut();
    ok(
        call!(
            net,
            isend(
                sc,
                src.as_mut_ptr().cast(),
                src.len(),
                3,
                null_mut(),
                null_mut(),
                &mut sreq
            )
        ),
        "isend",
    );
    let t0 = Instant::now();
    let (mut sdone, mut rdone) = (0, 0);
    let mut got = [0 as c_int; 8];
    while sdone == 0 || rdone == 0 {
        assert!(t0.elapsed() < BOUND, "the message did not arrive");
        if sdone == 0 {
            ok(call!(net, test(sreq, &mut sdone, got.as_mut_ptr())), "test(send)");
        }
        if rdone == 0 {
            ok(call!(net, test(rreq, &mut rdone, got.as_mut_ptr())), "test(recv)");
        }
    }
    assert!(dst == src, "data intact");

    let tos = tos_of_sockets_to(info.addr);
    ok(call!(net, closeSend(sc)), "closeSend");
    ok(call!(net, closeRecv(rc)), "closeRecv");
    ok(call!(net, finalize(ctx)), "finalize");
    assert_eq!(
        tos.len(),
        info.nstreams as usize + 1,
        "one control socket and {} data sockets to {}",
        info.nstreams,
        info.addr
    );
    tos
}

#[test]
fn traffic_class_sets_ip_tos_on_every_socket() {
    // SAFETY: this binary has this one test; nothing else reads the environment concurrently.
    unsafe {
        std::env::set_var("NCCL_SOCKET_IFNAME", "=lo");
        std::env::set_var("NCCL_SOCKET_FAMILY", "AF_INET");
        std::env::set_var("NCCL_SOCKET_NTHREADS", "2");
    }
    // SAFETY: loading our own plugin; its initialisers only set up statics.
    let lib = unsafe { libloading::Library::new(so_path()) }.expect("dlopen libnccl_net_socket.so");
    // SAFETY: the symbol is an `ncclNet_v12_t` static living as long as `lib`.
    let net: &ncclNet_v12_t = unsafe { &**lib.get::<*const ncclNet_v12_t>(b"ncclNetPlugin_v12").unwrap() };

    let marked = connect_with(net, 0x60);
    assert!(
        marked.iter().all(|&t| t == 0x60),
        "trafficClass 0x60 → IP_TOS {marked:x?}"
    );
    let unmarked = connect_with(net, -1);
    assert!(
        unmarked.iter().all(|&t| t == 0),
        "NCCL_NET_TRAFFIC_CLASS_UNDEF leaves the default TOS: {unmarked:x?}"
    );

    // A class that is no TOS byte is refused at connect, with a message.
    let mut ctx: *mut c_void = null_mut();
    let mut cfg = ncclNetCommConfig_v10_t { trafficClass: 300 };
    ok(call!(net, init(&mut ctx, 8, &mut cfg, None, None)), "init");
    let mut handle = [0u8; 128];
    let mut lc: *mut c_void = null_mut();
    ok(
        call!(net, listen(ctx, 0, handle.as_mut_ptr().cast(), &mut lc)),
        "listen",
    );
    let mut sc: *mut c_void = null_mut();
    let r = call!(net, connect(ctx, 0, handle.as_mut_ptr().cast(), &mut sc, null_mut()));
    assert!(!r.is_success() && sc.is_null(), "trafficClass 300 refused");
    ok(call!(net, closeListen(lc)), "closeListen");
    ok(call!(net, finalize(ctx)), "finalize");
}
