//! Teardown and faults: close orders, close with requests in flight, leaks, a
//! killed peer process, a stray client on the listen port; and the stress run.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ferroccl::plugin::net::{RawComm, RawMr, RawRequest};

use super::conn::context;
use super::transfer::Region;
use crate::cx::{Cx, Pair, fd_count, fill, thread_count, verify};
use crate::outcome::Res;
use crate::peer::{Peer, Role, from_hex, to_hex};
use crate::registry::Registry;
use crate::watch::Call;
use crate::{ensure, fail, skip};

/// How long after a peer's death an error must show up.
const DEAD_PEER_DEADLINE: Duration = Duration::from_secs(15);

pub(crate) fn register(r: &mut Registry) {
    r.add(
        "teardown.close_order",
        "checklist",
        "comms can be closed in any order (listen first, send first, recv first), with the peer comm still open",
        close_order,
    )
    .nccl("src/transport/net.cc sendProxyFree/recvProxyFree: each side is freed on its own, in any order across ranks");
    r.add(
        "teardown.close_inflight",
        "checklist",
        "deregMr and close with 32 requests of 1 MiB in flight neither crash nor hang, and the plugin works afterwards (aws inflight_close; NCCL's abort path: net.cc sendProxyFree/recvProxyFree)",
        close_inflight,
    )
    .nccl("src/transport/net.cc sendProxyFree/recvProxyFree: deregMr then close, without draining (ncclCommAbort)");
    r.add(
        "teardown.no_leaks",
        "checklist",
        "20 connect/transfer/close cycles leave no file descriptors and no threads behind",
        no_leaks,
    )
    .nccl("src/plugin/net.cc: communicators come and go in one process (init per communicator, close at destroy)");
    r.add(
        "fault.peer_killed_recv",
        "checklist",
        "a pending receive gets an error within 15 s when the sending process is killed mid-transfer",
        peer_killed_recv,
    )
    .timeout(90)
    .nccl("src/transport/net.cc recvProxyProgress: NCCLCHECK(test(...)) is the only way a dead peer surfaces");
    r.add(
        "fault.peer_killed_send",
        "checklist",
        "a pending send gets an error within 15 s when the receiving process is killed",
        peer_killed_send,
    )
    .timeout(90)
    .nccl("src/transport/net.cc sendProxyProgress: NCCLCHECK(test(...)) is the only way a dead peer surfaces");
    r.add(
        "fault.close_after_error",
        "checklist",
        "after test() returned an error mid-transfer, deregMr, closeRecv and closeListen succeed and new connections work (NCCL's teardown checks every call: net.cc recvProxyFree)",
        close_after_error,
    )
    .timeout(90)
    .nccl("src/transport/net.cc recvProxyFree: NCCLCHECK(deregMr), NCCLCHECK(closeRecv) after the failed operation");
    r.add(
        "fault.peer_stalled",
        "§1.5",
        "with the peer process stopped (SIGSTOP) mid-transfer, each test() returns within 1 s and deregMr/close return within 2 s, both directions (NCCL's proxy thread must keep running and abort must close)",
        peer_stalled,
    )
    .timeout(120)
    .nccl("src/proxy.cc: the progress thread calls test in a loop for every communicator; ncclCommAbort then frees the connections");
    r.add(
        "fault.stray_client",
        "§6.1",
        "garbage from a stray client on the listen port is dropped; real connections still work",
        stray_client,
    )
    .nccl("src/transport/net_socket.cc / src/misc/socket.cc: a connection whose magic is wrong is dropped");
    r.add(
        "stress.random",
        "checklist",
        "100 000 messages of random sizes over 4 comms arrive intact; no fds or threads leak",
        stress,
    )
    .full()
    .timeout(600)
    .nccl("src/transport/net.cc: long runs of steps of random sizes over many connections");
}

fn close_order(cx: &mut Cx, _: u64) -> Res {
    // (listen, send, recv) orders, by index: 0 = listen, 1 = send, 2 = recv.
    for order in [[0, 1, 2], [2, 1, 0], [1, 0, 2], [0, 2, 1]] {
        let p = cx.pair()?;
        cx.roundtrip(&p, 2048, 2048, 1)?;
        let what = format!(
            "close order {}",
            order
                .iter()
                .map(|i| ["closeListen", "closeSend", "closeRecv"][*i])
                .collect::<Vec<_>>()
                .join(", ")
        );
        for i in order {
            match i {
                0 => cx.close_listen(p.listen.expect("open"), &what)?,
                1 => cx.close_send(p.send, &what)?,
                _ => cx.close_recv(p.recv, &what)?,
            }
        }
    }
    Ok(())
}

/// Requests in flight at close (aws-ofi-nccl `inflight_close`: 32 × 1 MiB).
const INFLIGHT: usize = 32;

fn close_inflight(cx: &mut Cx, _: u64) -> Res {
    let n = INFLIGHT;
    let p = cx.pair()?;
    let mut sbuf = vec![0u8; 1 << 20];
    let mut rbufs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; 1 << 20]).collect();
    let smr = cx.reg_mr(p.send, &mut sbuf)?;
    let mut rmrs = Vec::new();
    for b in rbufs.iter_mut() {
        rmrs.push(cx.reg_mr(p.recv, b)?);
    }
    // Post what the plugin takes (a NULL request past its limit is fine: v6 allows 8).
    let (mut recvs, mut sends) = (0, 0);
    for (b, mr) in rbufs.iter_mut().zip(&rmrs) {
        if cx.irecv(p.recv, b, 0, *mr)?.is_some() {
            recvs += 1;
        }
    }
    for _ in 0..n {
        if cx.isend(p.send, &mut sbuf, 0, smr)?.is_some() {
            sends += 1;
        }
    }
    cx.notes.push(format!(
        "{recvs} receives and {sends} sends of 1 MiB in flight at deregMr/close"
    ));
    // Teardown without waiting, in NCCL's order (deregMr, then close); errors
    // are allowed, crashes and hangs are not.
    let _ = cx.dereg_mr(p.send, smr);
    for mr in rmrs {
        let _ = cx.dereg_mr(p.recv, mr);
    }
    if let Some(l) = p.listen {
        cx.close_listen(l, "closeListen with requests in flight")?;
    }
    let _ = cx.close_send(p.send, "closeSend with requests in flight");
    let _ = cx.close_recv(p.recv, "closeRecv with requests in flight");
    // The plugin must still work afterwards.
    let p = cx.pair()?;
    cx.roundtrip(&p, 4096, 4096, 3)
        .map_err(|e| context(e, "a new connection after closing one with requests in flight"))?;
    cx.close_pair(p)
}

fn cycle(cx: &mut Cx, i: u64) -> Res {
    let p = cx.pair()?;
    cx.roundtrip(&p, 100_000, 100_000, i)?;
    cx.close_pair(p)
}

fn no_leaks(cx: &mut Cx, _: u64) -> Res {
    cycle(cx, 0)?; // warm-up: lazily created plugin state may stay
    let (fds, threads) = (fd_count(), thread_count());
    for i in 1..=20 {
        cycle(cx, i)?;
    }
    // Give exiting helper threads a moment to be reaped.
    let end = Instant::now() + Duration::from_secs(2);
    while thread_count() > threads && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (fds2, threads2) = (fd_count(), thread_count());
    ensure!(
        fds2 <= fds,
        "closeSend/closeRecv/closeListen release every file descriptor",
        "{} file descriptors more after 20 connect/close cycles ({fds} -> {fds2})",
        fds2 - fds
    );
    ensure!(
        threads2 <= threads,
        "closing comms ends the threads they started",
        "{} threads more after 20 connect/close cycles ({threads} -> {threads2})",
        threads2 - threads
    );
    Ok(())
}

/// One retry turn after the peer was killed at `killed`: fails once
/// [`DEAD_PEER_DEADLINE`] has passed (`still` says what kept happening), else
/// pauses 200 µs.
fn dead_peer_wait(killed: Instant, still: &str) -> Res {
    ensure!(
        killed.elapsed() < DEAD_PEER_DEADLINE,
        "a dead peer gives an error within a bounded time, never a hang (checklist: teardown and errors)",
        "{still} for {} s after the peer process was killed",
        DEAD_PEER_DEADLINE.as_secs()
    );
    std::thread::sleep(Duration::from_micros(200));
    Ok(())
}

/// Tests `r` until it errors (pass), completes (fail) or the deadline passes (fail).
fn expect_error(cx: &mut Cx, r: RawRequest, what: &str) -> Res {
    let start = Instant::now();
    loop {
        let mut s = [0usize];
        match cx.test(r, &mut s) {
            Err(crate::outcome::Stop::Fail { observed, .. }) => {
                cx.notes
                    .push(format!("error after {:.0?}: {observed}", start.elapsed()));
                return Ok(());
            }
            Err(e) => return Err(e),
            Ok(true) => {
                return Err(fail!(
                    format!("{what} fails once the peer process is dead"),
                    "{what} completed (size {}) although the peer was killed before finishing it",
                    s[0]
                ));
            }
            Ok(false) => {}
        }
        dead_peer_wait(start, &format!("{what}: test kept returning 'not done'"))?;
    }
}

/// Accepts the connection of a peer process.
fn accept_from(cx: &mut Cx, l: RawComm) -> Res<RawComm> {
    let start = Instant::now();
    loop {
        if let Some(c) = cx.call(Call::Accept, "accept from the peer process", |n| n.accept(l))? {
            return Ok(c);
        }
        ensure!(
            start.elapsed() < crate::cx::CONNECT_DEADLINE,
            "accept completes",
            "accept still NULL after 10 s"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Connects to the peer process's handle (a fresh buffer, as NCCL).
fn connect_to(cx: &mut Cx, hex: &str) -> Res<RawComm> {
    let mut h = from_hex(hex).ok_or_else(|| fail!("the peer prints its handle", "bad handle {hex:?}"))?;
    let (ctx, dev) = (cx.ctx, cx.dev);
    let start = Instant::now();
    loop {
        if let Some(c) = cx.call(Call::Connect, "connect to the peer process", |n| {
            n.connect(ctx, dev, &mut h)
        })? {
            return Ok(c);
        }
        ensure!(
            start.elapsed() < crate::cx::CONNECT_DEADLINE,
            "connect completes",
            "connect still NULL after 10 s"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// A receive of 64 MiB from a [`Role::StallSender`] peer that sent 4 KiB and then
/// part of the 64 MiB message: everything the receiving checks need.
struct StalledReceive {
    peer: Peer,
    listen: RawComm,
    recv: RawComm,
    req: RawRequest,
    mr: RawMr,
    first_mr: RawMr,
    big: Vec<u8>,
    _first: Vec<u8>,
}

/// Sets up a [`StalledReceive`] (`Ok(None)`: the message completed too early to test).
fn stalled_receive(cx: &mut Cx) -> Res<Option<StalledReceive>> {
    let (l, h) = cx.listen()?;
    let mut peer = Peer::spawn(cx, Role::StallSender, &[])?;
    peer.send_line(&to_hex(&h))?;
    let recv = accept_from(cx, l)?;
    let mut first = vec![0u8; 4096];
    let first_mr = cx.reg_mr(recv, &mut first)?;
    let r = cx.post("irecv", |cx| cx.irecv(recv, &mut first, 0, first_mr))?;
    cx.wait_all("first message from the peer", &[r])?;
    peer.expect("sent", Duration::from_secs(30))?;
    let mut big = vec![0u8; 64 << 20];
    let mr = cx.reg_mr(recv, &mut big)?;
    let req = cx.post("irecv of 64 MiB", |cx| cx.irecv(recv, &mut big, 0, mr))?;
    peer.expect("partial", Duration::from_secs(30))?;
    for _ in 0..3 {
        if cx.test(req, &mut [0])? {
            return Ok(None);
        }
    }
    Ok(Some(StalledReceive {
        peer,
        listen: l,
        recv,
        req,
        mr,
        first_mr,
        big,
        _first: first,
    }))
}

/// Kills the sender of `st` and expects the pending receive to fail.
fn kill_and_expect_error(cx: &mut Cx, st: &mut StalledReceive) -> Res {
    st.peer.kill();
    if let Err(e) = expect_error(cx, st.req, "a 64 MiB irecv from the killed sender") {
        // A plugin that progresses in the background may have moved the whole message
        // before the kill took effect: fine if the data is intact.
        if matches!(&e, crate::outcome::Stop::Fail { observed, .. } if observed.contains("completed (size")) {
            return match verify(&st.big, 1) {
                Ok(()) => Err(skip!(
                    "the whole 64 MiB message arrived intact before the peer's death took effect (background progress); no pending receive to check"
                )),
                Err(at) => Err(fail!(
                    "a receive the dead peer never finished fails instead of completing",
                    "the 64 MiB irecv completed after the peer was killed, with wrong data at offset {at}"
                )),
            };
        }
        return Err(e);
    }
    Ok(())
}

fn peer_killed_recv(cx: &mut Cx, _: u64) -> Res {
    let Some(mut st) = stalled_receive(cx)? else {
        return Err(skip!(
            "the peer's 64 MiB message completed before the peer could be killed"
        ));
    };
    kill_and_expect_error(cx, &mut st)?;
    let _ = cx.dereg_mr(st.recv, st.mr);
    let _ = cx.dereg_mr(st.recv, st.first_mr);
    let _ = cx.close_recv(st.recv, "closeRecv after the peer died");
    let _ = cx.close_listen(st.listen, "closeListen");
    Ok(())
}

fn close_after_error(cx: &mut Cx, _: u64) -> Res {
    let Some(mut st) = stalled_receive(cx)? else {
        return Err(skip!(
            "the peer's 64 MiB message completed before the peer could be killed"
        ));
    };
    kill_and_expect_error(cx, &mut st)?;
    // Teardown as NCCL's recvProxyFree does it after a failed test: deregMr, then
    // closeRecv; the listenComm of this connection is still open here.
    let after = "after test() returned an error";
    cx.dereg_mr(st.recv, st.mr).map_err(|e| context(e, after))?;
    cx.dereg_mr(st.recv, st.first_mr).map_err(|e| context(e, after))?;
    cx.close_recv(st.recv, "closeRecv after test() returned an error")?;
    cx.close_listen(st.listen, "closeListen after test() returned an error")?;
    let p = cx.pair()?;
    cx.roundtrip(&p, 65536, 65536, 4)
        .map_err(|e| context(e, "a new connection after a test() error"))?;
    cx.close_pair(p)
}

/// How long `peer_killed_send` retries a NULL isend before it treats the plugin as
/// receiver-driven and kills the stalled receiver with the send unposted.
const UNPOSTED_SEND_WAIT: Duration = Duration::from_secs(2);

/// A sendComm to a [`Role::StallReceiver`] peer that received one 4 KiB message.
fn stalled_send(cx: &mut Cx) -> Res<(Peer, RawComm)> {
    let mut peer = Peer::spawn(cx, Role::StallReceiver, &[])?;
    let hex = peer.expect("handle ", Duration::from_secs(30))?;
    let send = connect_to(cx, &hex)?;
    let mut first = vec![0u8; 4096];
    fill(&mut first, 0);
    let mr = cx.reg_mr(send, &mut first)?;
    let r = cx.post("isend", |cx| cx.isend(send, &mut first, 0, mr))?;
    cx.wait_all("first message to the peer", &[r])?;
    cx.dereg_mr(send, mr)?;
    peer.expect("received", Duration::from_secs(30))?;
    Ok((peer, send))
}

fn peer_killed_send(cx: &mut Cx, _: u64) -> Res {
    let (mut peer, send) = stalled_send(cx)?;
    let mut big = vec![0u8; 64 << 20];
    let mr = cx.reg_mr(send, &mut big)?;
    // A receiver-driven plugin (NCCL's IB transport) returns NULL from isend until
    // the receiver posts its matching irecv (clear-to-send), which the stalled
    // peer never does: after a short bounded try, kill the peer with the send
    // still unposted; retried isends must then fail, not stay NULL forever.
    let Some(r) = cx.try_post(UNPOSTED_SEND_WAIT, |cx| cx.isend(send, &mut big, 0, mr))? else {
        peer.kill();
        cx.notes.push(format!(
            "isend stayed NULL for {:?} while the receiver posted nothing (receiver-driven plugin); \
             peer killed with the send unposted",
            UNPOSTED_SEND_WAIT
        ));
        let killed = Instant::now();
        loop {
            match cx.isend(send, &mut big, 0, mr) {
                Err(crate::outcome::Stop::Fail { observed, .. }) => {
                    cx.notes
                        .push(format!("isend error after {:.0?}: {observed}", killed.elapsed()));
                    break;
                }
                Err(e) => return Err(e),
                Ok(Some(r)) => {
                    expect_error(cx, r, "a 64 MiB isend to the killed receiver")?;
                    break;
                }
                Ok(None) => {}
            }
            dead_peer_wait(killed, "isend to the killed receiver kept returning NULL")?;
        }
        let _ = cx.dereg_mr(send, mr);
        let _ = cx.close_send(send, "closeSend after the peer died");
        return Ok(());
    };
    for _ in 0..20 {
        if cx.test(r, &mut [0])? {
            return Err(skip!(
                "the 64 MiB send completed into socket buffers before the peer could be killed"
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    peer.kill();
    expect_error(cx, r, "a 64 MiB isend to the killed receiver")?;
    let _ = cx.dereg_mr(send, mr);
    let _ = cx.close_send(send, "closeSend after the peer died");
    Ok(())
}

/// Longest a single test() may take while the peer is stopped.
const STALLED_CALL: Duration = Duration::from_secs(1);
/// Longest deregMr/close may take while the peer is stopped.
const STALLED_CLOSE: Duration = Duration::from_secs(2);
/// How long the stopped peer's request is tested.
const STALLED_FOR: Duration = Duration::from_millis(500);

/// Tests `r` for [`STALLED_FOR`]: every call must return within [`STALLED_CALL`].
/// Completion or an error are both acceptable outcomes (a plugin may time out).
fn test_while_stalled(cx: &mut Cx, r: RawRequest, what: &str) -> Res<&'static str> {
    let start = Instant::now();
    while start.elapsed() < STALLED_FOR {
        let t = Instant::now();
        let res = cx.test(r, &mut [0]);
        let took = t.elapsed();
        ensure!(
            took < STALLED_CALL,
            "test returns promptly while the peer is stopped: a blocked call stops NCCL's proxy thread",
            "{what}: one test() took {took:.1?} while the peer process was stopped"
        );
        match res {
            Ok(false) => std::thread::sleep(Duration::from_millis(1)),
            Ok(true) => return Ok("completed"),
            Err(_) => return Ok("failed"),
        }
    }
    Ok("still pending")
}

/// Runs `f` and fails if it took [`STALLED_CLOSE`] or longer.
fn bounded(cx: &mut Cx, what: &str, f: impl FnOnce(&mut Cx) -> Res) -> Res {
    let t = Instant::now();
    let r = f(cx);
    let took = t.elapsed();
    ensure!(
        took < STALLED_CLOSE,
        "deregMr and close return promptly while the peer is stopped (ncclCommAbort must be able to tear down)",
        "{what} took {took:.1?} while the peer process was stopped"
    );
    r
}

fn peer_stalled(cx: &mut Cx, _: u64) -> Res {
    // Receiving side: the sender stops in the middle of a 64 MiB message.
    match stalled_receive(cx)? {
        None => cx
            .notes
            .push("receive side: the 64 MiB message completed before the peer could be stopped".into()),
        Some(mut st) => {
            st.peer.stop()?;
            let how = test_while_stalled(cx, st.req, "a 64 MiB irecv from a stopped sender")?;
            cx.notes.push(format!(
                "receive side: the pending irecv {how} while the sender was stopped"
            ));
            let (recv, listen, mr, fmr) = (st.recv, st.listen, st.mr, st.first_mr);
            bounded(cx, "deregMr + closeRecv + closeListen", |cx| {
                let _ = cx.dereg_mr(recv, mr);
                let _ = cx.dereg_mr(recv, fmr);
                let _ = cx.close_recv(recv, "closeRecv with the sender stopped");
                let _ = cx.close_listen(listen, "closeListen with the sender stopped");
                Ok(())
            })?;
            st.peer.kill();
        }
    }
    // Sending side: the receiver stops after one message; a 64 MiB send is pending.
    let (mut peer, send) = stalled_send(cx)?;
    peer.stop()?;
    let mut big = vec![0u8; 64 << 20];
    let mr = cx.reg_mr(send, &mut big)?;
    match cx.try_post(STALLED_FOR, |cx| cx.isend(send, &mut big, 0, mr))? {
        None => cx
            .notes
            .push("send side: isend stayed NULL while the receiver was stopped (receiver-driven)".into()),
        Some(r) => {
            let how = test_while_stalled(cx, r, "a 64 MiB isend to a stopped receiver")?;
            cx.notes.push(format!(
                "send side: the pending isend {how} while the receiver was stopped"
            ));
        }
    }
    bounded(cx, "deregMr + closeSend", |cx| {
        let _ = cx.dereg_mr(send, mr);
        let _ = cx.close_send(send, "closeSend with the receiver stopped");
        Ok(())
    })?;
    peer.kill();
    Ok(())
}

/// The listening address in a handle, when its first bytes are a sockaddr_in/in6
/// (as in NCCL's socket and IB plugins).
fn handle_addr(h: &[u8; 128]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes([h[0], h[1]]);
    let port = u16::from_be_bytes([h[2], h[3]]);
    if port == 0 {
        return None;
    }
    match family as i32 {
        libc::AF_INET => {
            let ip = std::net::Ipv4Addr::new(h[4], h[5], h[6], h[7]);
            (!ip.is_unspecified()).then_some(SocketAddr::from((ip, port)))
        }
        libc::AF_INET6 => {
            let b: [u8; 16] = h[8..24].try_into().ok()?;
            let ip = std::net::Ipv6Addr::from(b);
            (!ip.is_unspecified()).then_some(SocketAddr::from((ip, port)))
        }
        _ => None,
    }
}

/// Inodes of this process's sockets (`/proc/self/fd/*` -> `socket:[inode]`).
fn own_socket_inodes() -> Vec<u64> {
    let Ok(fds) = procfs::process::Process::myself().and_then(|p| p.fd()) else {
        return Vec::new();
    };
    fds.filter_map(|fd| match fd.ok()?.target {
        procfs::process::FDTarget::Socket(inode) => Some(inode),
        _ => None,
    })
    .collect()
}

/// Local addresses of this process's listening TCP sockets (`/proc/net/tcp{,6}`,
/// state LISTEN); an unspecified address becomes loopback.
fn own_listen_ports() -> Vec<SocketAddr> {
    let mine = own_socket_inodes();
    let entries = [procfs::net::tcp(), procfs::net::tcp6()];
    entries
        .into_iter()
        .flat_map(|t| t.unwrap_or_default())
        .filter(|e| e.state == procfs::net::TcpState::Listen && mine.contains(&e.inode))
        .map(|e| {
            let mut a = e.local_address;
            if a.ip().is_unspecified() {
                a.set_ip(match a {
                    SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                    SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                });
            }
            a
        })
        .collect()
}

fn stray_client(cx: &mut Cx, _: u64) -> Res {
    let before = own_listen_ports();
    let (l, h) = cx.listen()?;
    let addr = match handle_addr(&h) {
        Some(a) => a,
        None => {
            // Not a sockaddr: find the TCP port this listen opened.
            let new: Vec<SocketAddr> = own_listen_ports().into_iter().filter(|p| !before.contains(p)).collect();
            match new.as_slice() {
                [a] => *a,
                _ => {
                    let _ = cx.close_listen(l, "closeListen");
                    return Err(skip!(
                        "the handle does not start with a sockaddr_in/sockaddr_in6 and listen opened {} new TCP listening sockets, so the listen port is unknown",
                        new.len()
                    ));
                }
            }
        }
    };
    cx.notes.push(format!("stray clients sent garbage to {addr}"));
    // Three strays: garbage then close, connect-and-close, a burst of 0xff.
    for garbage in [
        &b"GET / HTTP/1.0\r\n\r\nthis is not a ferroccl peer"[..],
        &[][..],
        &[0xffu8; 4096][..],
    ] {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .map_err(|e| skip!("could not connect to the handle's address {addr}: {e}"))?;
        let _ = s.write_all(garbage);
        drop(s);
    }
    // Give the plugin a chance to see them before the real peer.
    for _ in 0..20 {
        let r = cx.call(Call::Accept, "accept with only stray clients pending", |n| n.accept(l))?;
        if let Some(c) = r {
            let _ = cx.close_recv(c, "closeRecv");
            return Err(fail!(
                "connections that fail the plugin's handshake are dropped, never returned by accept",
                "accept returned a recvComm for a stray client that sent garbage to {addr}"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (send, recv) = cx
        .establish(l, &h)
        .map_err(|e| context(e, &format!("after three stray clients on {addr}")))?;
    let p = Pair {
        listen: Some(l),
        send,
        recv,
    };
    cx.roundtrip(&p, 4096, 4096, 1)
        .map_err(|e| context(e, "after stray clients"))?;
    cx.roundtrip(&p, 1 << 20, 1 << 20, 2)
        .map_err(|e| context(e, "after stray clients"))?;
    cx.close_pair(p)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn size(&mut self) -> usize {
        let r = self.next();
        match r % 100 {
            0..=69 => (r >> 8) as usize % 4096,
            70..=94 => 4096 + (r >> 8) as usize % (60 << 10),
            _ => (64 << 10) + (r >> 8) as usize % (192 << 10),
        }
    }
}

fn stress(cx: &mut Cx, _: u64) -> Res {
    const TOTAL: usize = 100_000;
    const COMMS: usize = 4;
    const DEPTH: usize = 8;
    const CAP: usize = 256 << 10;
    let (fds, threads) = (fd_count(), thread_count());
    let mut pairs = Vec::new();
    for _ in 0..COMMS {
        pairs.push(cx.pair()?);
    }
    // Per comm: DEPTH send slots and DEPTH receive slots in one registered region each.
    let mut sregs = Vec::new();
    let mut rregs = Vec::new();
    for p in &pairs {
        sregs.push(Region::new(cx, p.send, DEPTH, CAP)?);
        rregs.push(Region::new(cx, p.recv, DEPTH, CAP)?);
    }
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    // (seed, len, slot, send request, receive request), oldest first.
    type Flight = (u64, usize, usize, RawRequest, RawRequest);
    let mut inflight: Vec<std::collections::VecDeque<Flight>> = (0..COMMS).map(|_| Default::default()).collect();
    let mut next_slot = [0usize; COMMS];
    let (mut sent, mut verified, mut bytes) = (0usize, 0usize, 0u64);
    let start = Instant::now();
    let mut last_progress = Instant::now();
    while verified < TOTAL {
        for c in 0..COMMS {
            let p = pairs[c];
            while inflight[c].len() < DEPTH && sent < TOTAL {
                let len = rng.size();
                let seed = sent as u64;
                let slot = next_slot[c];
                next_slot[c] = (slot + 1) % DEPTH;
                fill(sregs[c].slot(slot, len), seed);
                let (rmr, smr) = (rregs[c].mr, sregs[c].mr);
                let rb = rregs[c].slot(slot, CAP);
                let rreq = cx.post("stress irecv", |cx| cx.irecv(p.recv, rb, 0, rmr))?;
                let sb = sregs[c].slot(slot, len);
                let sreq = cx.post("stress isend", |cx| cx.isend(p.send, sb, 0, smr))?;
                inflight[c].push_back((seed, len, slot, sreq, rreq));
                sent += 1;
            }
            // Retire this comm's oldest message (progress tests every comm's oldest).
            if let Some((seed, len, slot, sreq, rreq)) = inflight[c].pop_front() {
                cx.wait_all("stress message", &[sreq, rreq])?;
                if let Err(at) = verify(&rregs[c].slot(slot, CAP)[..len], seed) {
                    return Err(fail!(
                        "received bytes equal the sent bytes",
                        "stress message {seed} ({len} bytes) on comm {c}: wrong byte at offset {at}"
                    ));
                }
                verified += 1;
                bytes += len as u64;
                last_progress = Instant::now();
            }
        }
        ensure!(
            last_progress.elapsed() < crate::cx::REQUEST_DEADLINE,
            "stress traffic keeps completing",
            "no message completed for 20 s ({verified} of {TOTAL} verified)"
        );
    }
    for r in sregs.into_iter().chain(rregs) {
        r.free(cx)?;
    }
    for p in pairs {
        cx.close_pair(p)?;
    }
    let end = Instant::now() + Duration::from_secs(2);
    while thread_count() > threads && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (fds2, threads2) = (fd_count(), thread_count());
    ensure!(
        fds2 <= fds,
        "no file descriptors leak",
        "{fds} fds before, {fds2} after the stress run"
    );
    ensure!(
        threads2 <= threads,
        "no threads leak",
        "{threads} threads before, {threads2} after the stress run"
    );
    let secs = start.elapsed().as_secs_f64();
    cx.notes.push(format!(
        "{TOTAL} messages, {:.1} MiB in {secs:.1} s over {COMMS} comms",
        bytes as f64 / (1 << 20) as f64
    ));
    Ok(())
}
