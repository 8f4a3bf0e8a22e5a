//! Connection establishment: listen, non-blocking connect/accept, reuse, many comms, two processes.

use std::time::Duration;

use crate::cx::{Cx, Pair};
use crate::outcome::Res;
use crate::peer::{Peer, Role, from_hex, to_hex};
use crate::registry::Registry;
use crate::watch::Call;
use crate::{ensure, fail};

pub(crate) fn register(r: &mut Registry) {
    r.add(
        "conn.listen",
        "§1.5",
        "listen returns a non-NULL listenComm and writes at most NCCL_NET_HANDLE_MAXSIZE (128) bytes of handle",
        listen,
    )
    .nccl("src/transport/net.cc recvProxySetup: listen(netContext, netDev, respBuff, &netListenComm), respSize == sizeof(ncclNetHandle_t)");
    r.add(
        "conn.nonblocking",
        "§1.5",
        "connect and accept never block: no single call takes 1 s or more (net.cc sendProxyConnect/recvProxyConnect: NULL comm = ncclInProgress, called again)",
        nonblocking,
    )
    .nccl("src/transport/net.cc sendProxyConnect/recvProxyConnect: a NULL comm returns ncclInProgress and the proxy calls again");
    r.add(
        "conn.fast_calls",
        "checklist",
        "no single listen/connect/accept call takes 100 ms or more",
        fast_calls,
    )
    .advisory()
    .nccl("src/transport/net.cc sendProxyConnect/recvProxyConnect: called from the proxy thread, which serves every connection");
    r.add(
        "conn.reuse_listen",
        "checklist",
        "one listenComm accepts several connections, each delivering to its own recvComm (NCCL listens once per connection: net.cc recvProxySetup)",
        reuse_listen,
    )
    .advisory()
    .nccl("NCCL never: recvProxySetup listens once per connection and recvProxyConnect closes it after accept");
    r.add(
        "conn.reuse_handle",
        "checklist",
        "connect works again with a handle buffer an earlier connect already used (NCCL gives each connection a fresh copy: net.cc sendConnect)",
        reuse_handle,
    )
    .advisory()
    .nccl("NCCL never: sendConnect copies the peer's handle into each connection's netSendConnectArgs");
    r.add(
        "conn.close_listen_early",
        "checklist",
        "closeListen right after accept leaves the connected comms working (net.cc recvProxyConnect closes the listenComm once accept returns)",
        close_listen_early,
    )
    .nccl("src/transport/net.cc recvProxyConnect: closeListen(netListenComm) right after accept returns the recvComm");
    r.add(
        "conn.many_comms",
        "checklist",
        "min(maxComms, 64) connections at once on one device all work, each from its own listen (net.cc recvProxySetup/recvProxyConnect)",
        many_comms,
    )
    .nccl("src/transport/net.cc: one listen/connect/accept per channel and peer, all on one device");
    r.add(
        "conn.cross_process",
        "§1.5",
        "connections work across two processes with the handle passed out of band, both directions (net.cc sendConnect: the handle travels in ncclConnect)",
        cross_process,
    )
    .nccl("src/transport/net.cc recvSetup/sendConnect: the listen handle travels to the peer inside ncclConnect");
    r.add(
        "conn.traffic_class",
        "§1.5",
        "a context made with a defined trafficClass (ncclNetCommConfig_t, v11+ init / v10 connect) connects and moves data like one without",
        traffic_class,
    )
    .since(10)
    .nccl("src/plugin/net.cc ncclNetPluginInit: init(&netContext, commHash, &commConfig) with commConfig.trafficClass = ncclConfig_t.trafficClass (v10: net_v10.cc passes it to connect)");
}

/// The class the traffic-class check asks for: a DSCP-style TOS byte (AF31, 0x68)
/// every transport can carry (IB GRH traffic class, IP TOS).
pub(crate) const TRAFFIC_CLASS: i32 = 0x68;

fn traffic_class(cx: &mut Cx, _: u64) -> Res {
    let config = ferroccl::plugin::net::CommConfig {
        traffic_class: TRAFFIC_CLASS,
    };
    let what = format!("init with trafficClass {TRAFFIC_CLASS:#x}");
    let ctx = cx.call(crate::watch::Call::Init, &what, |n| n.init_ctx(0x7C00, &config))?;
    let saved = cx.ctx;
    cx.ctx = ctx;
    let r = cx.pair().and_then(|p| {
        for (i, len) in [1usize, 4096, 1 << 20].into_iter().enumerate() {
            cx.roundtrip(&p, len, len, 0x7C + i as u64)?;
        }
        cx.close_pair(p)
    });
    cx.ctx = saved;
    r.map_err(|e| context(e, &format!("in a context made with trafficClass {TRAFFIC_CLASS:#x}")))?;
    cx.call(crate::watch::Call::Finalize, "finalize", |n| n.finalize_ctx(ctx))?;
    Ok(())
}

fn listen(cx: &mut Cx, _: u64) -> Res {
    let mut buf = [0xA5u8; 256];
    let (ctx, dev) = (cx.ctx, cx.dev);
    let l = {
        let h: &mut [u8; 128] = (&mut buf[..128]).try_into().expect("128 bytes");
        cx.call(Call::Listen, "listen", |n| n.listen(ctx, dev, h))?
    };
    ensure!(
        !l.0.is_null(),
        "listen returns a non-NULL listenComm on success (§1.5)",
        "listen succeeded with listenComm == NULL"
    );
    if let Some(at) = buf[128..].iter().position(|b| *b != 0xA5) {
        return Err(fail!(
            "the handle fits NCCL_NET_HANDLE_MAXSIZE = 128 bytes",
            "listen wrote past the 128-byte handle buffer (byte {} changed)",
            128 + at
        ));
    }
    cx.close_listen(l, "closeListen")?;
    Ok(())
}

fn nonblocking(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    cx.roundtrip(&p, 64, 64, 1)?;
    cx.close_pair(p)?;
    for (name, d) in cx.slowest.clone() {
        if matches!(name, "connect" | "accept") {
            ensure!(
                d < Duration::from_secs(1),
                format!("{name} never blocks: each call returns promptly, NULL meaning 'call again' (§1.5)"),
                "one {name} call took {d:.1?}"
            );
        }
    }
    Ok(())
}

fn fast_calls(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    cx.close_pair(p)?;
    for (name, d) in cx.slowest.clone() {
        ensure!(
            d < crate::cx::SLOW_CALL,
            format!("each {name} call takes < 100 ms"),
            "one {name} call took {d:.1?}"
        );
    }
    Ok(())
}

fn reuse_listen(cx: &mut Cx, _: u64) -> Res {
    let (l, h) = cx.listen()?;
    let mut pairs = Vec::new();
    for _ in 0..4 {
        let (send, recv) = cx.establish(l, &h)?;
        pairs.push(Pair {
            listen: None,
            send,
            recv,
        });
    }
    for (i, p) in pairs.iter().enumerate() {
        cx.roundtrip(p, 1000 + i, 4096, 100 + i as u64)
            .map_err(|e| context(e, &format!("connection {i} of 4 on one listenComm")))?;
    }
    cx.close_listen(l, "closeListen")?;
    for p in pairs {
        cx.close_pair(p)?;
    }
    Ok(())
}

fn reuse_handle(cx: &mut Cx, _: u64) -> Res {
    let (l, h) = cx.listen()?;
    let mut buf: Box<ferroccl::plugin::net::NetHandle> = Box::new(*h);
    let mut pairs = Vec::new();
    for i in 0..2 {
        let (send, recv) = cx
            .establish_with_buffer(l, &mut buf)
            .map_err(|e| context(e, &format!("connection {} with the same handle buffer", i + 1)))?;
        pairs.push(Pair {
            listen: None,
            send,
            recv,
        });
    }
    for (i, p) in pairs.iter().enumerate() {
        cx.roundtrip(p, 777 + i, 1024, 300 + i as u64)?;
    }
    cx.close_listen(l, "closeListen")?;
    for p in pairs {
        cx.close_pair(p)?;
    }
    Ok(())
}

fn close_listen_early(cx: &mut Cx, _: u64) -> Res {
    let mut p = cx.pair()?;
    if let Some(l) = p.listen.take() {
        cx.close_listen(l, "closeListen right after accept")?;
    }
    cx.roundtrip(&p, 4096, 4096, 1)
        .map_err(|e| context(e, "after closeListen"))?;
    cx.roundtrip(&p, 1 << 20, 1 << 20, 2)
        .map_err(|e| context(e, "after closeListen"))?;
    cx.close_pair(p)
}

fn many_comms(cx: &mut Cx, _: u64) -> Res {
    let n = (cx.props.max_comms.max(1) as usize).min(64);
    let mut pairs = Vec::new();
    for i in 0..n {
        // One listen per connection, closed once accept returned (as NCCL does).
        let (l, h) = cx.listen()?;
        let (send, recv) = cx
            .establish(l, &h)
            .map_err(|e| context(e, &format!("connection {} of {n}", i + 1)))?;
        cx.close_listen(l, "closeListen after accept")?;
        pairs.push(Pair {
            listen: None,
            send,
            recv,
        });
    }
    for (i, p) in pairs.iter().enumerate() {
        cx.roundtrip(p, 512 + i, 1024, i as u64)
            .map_err(|e| context(e, &format!("connection {} of {n}", i + 1)))?;
    }
    for p in pairs {
        cx.close_pair(p)?;
    }
    cx.notes.push(format!("{n} connections"));
    Ok(())
}

/// Prefixes a failure's observation with where it happened.
pub(crate) fn context(e: crate::outcome::Stop, what: &str) -> crate::outcome::Stop {
    match e {
        crate::outcome::Stop::Fail { expected, observed } => crate::outcome::Stop::Fail {
            expected,
            observed: format!("{what}: {observed}"),
        },
        s => s,
    }
}

const XSIZES: [usize; 5] = [0, 1, 4096, 65537, 1 << 20];

fn cross_process(cx: &mut Cx, _: u64) -> Res {
    // This process sends, the peer receives.
    let mut peer = Peer::spawn(cx, Role::Receiver, &XSIZES)?;
    let hex = peer.expect("handle ", Duration::from_secs(30))?;
    let mut h = from_hex(&hex).ok_or_else(|| fail!("the peer prints its handle", "bad handle line {hex:?}"))?;
    let (ctx, dev) = (cx.ctx, cx.dev);
    let start = std::time::Instant::now();
    let send = loop {
        if let Some(c) = cx.call(Call::Connect, "connect to the peer process", |n| {
            n.connect(ctx, dev, &mut h)
        })? {
            break c;
        }
        ensure!(
            start.elapsed() < crate::cx::CONNECT_DEADLINE,
            "connect to another process completes",
            "connect still NULL after 10 s"
        );
        std::thread::sleep(Duration::from_micros(100));
    };
    for (i, &len) in XSIZES.iter().enumerate() {
        let mut buf = vec![0u8; len.max(1)];
        crate::cx::fill(&mut buf[..len], i as u64);
        let mr = cx.reg_mr(send, &mut buf)?;
        let r = cx.post("isend to the peer process", |cx| cx.isend(send, &mut buf[..len], 0, mr))?;
        cx.wait_all("isend to the peer process", &[r])?;
        cx.dereg_mr(send, mr)?;
    }
    let verdict = peer.expect("", Duration::from_secs(30))?;
    ensure!(
        verdict == "ok",
        "the peer process receives every message intact",
        "peer (receiver) says: {verdict}"
    );
    drop(peer);
    cx.close_send(send, "closeSend")?;

    // The peer sends, this process receives.
    let (l, h) = cx.listen()?;
    let mut peer = Peer::spawn(cx, Role::Sender, &XSIZES)?;
    peer.send_line(&to_hex(&h))?;
    let start = std::time::Instant::now();
    let recv = loop {
        if let Some(c) = cx.call(Call::Accept, "accept from the peer process", |n| n.accept(l))? {
            break c;
        }
        ensure!(
            start.elapsed() < crate::cx::CONNECT_DEADLINE,
            "accept of another process's connection completes",
            "accept still NULL after 10 s"
        );
        std::thread::sleep(Duration::from_micros(100));
    };
    for (i, &len) in XSIZES.iter().enumerate() {
        let mut buf = vec![0u8; len.max(1)];
        let mr = cx.reg_mr(recv, &mut buf)?;
        let r = cx.post("irecv from the peer process", |cx| cx.irecv(recv, &mut buf, 0, mr))?;
        cx.wait_all("irecv from the peer process", &[r])?;
        cx.dereg_mr(recv, mr)?;
        if let Err(at) = crate::cx::verify(&buf[..len], i as u64) {
            return Err(fail!(
                "received bytes equal the sent bytes",
                "message {i} ({len} bytes) from the peer: wrong byte at offset {at}"
            ));
        }
    }
    peer.expect("done", Duration::from_secs(30))?;
    drop(peer);
    cx.close_recv(recv, "closeRecv")?;
    cx.close_listen(l, "closeListen")?;
    Ok(())
}
