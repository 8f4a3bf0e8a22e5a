//! Data transfer: sizes, true sizes, order, grouped receives, request limits, test(NULL), iflush.

use std::time::{Duration, Instant};

use ferroccl::plugin::net::{RawRequest, RecvSlot};

use crate::cx::{Cx, fill, max_requests, pattern_byte, size_str, verify};
use crate::outcome::Res;
use crate::registry::Registry;
use crate::watch::Call;
use crate::{ensure, fail, skip};

const SIZES: [(&str, u64); 6] = [
    ("0", 0),
    ("1", 1),
    ("4095", 4095),
    ("4096", 4096),
    ("1MiB", 1 << 20),
    ("64MiB", 64 << 20),
];

pub(crate) fn register(r: &mut Registry) {
    for (name, size) in SIZES {
        r.add_arg(
            format!("transfer.size.{name}"),
            "§1.5",
            format!(
                "a {} message arrives intact and test reports its size",
                size_str(size as usize)
            ),
            size_check,
            size,
        );
    }
    r.add(
        "transfer.size.max_p2p",
        "§1.2",
        "a message of maxP2pBytes arrives intact (where feasible: <= 256 MiB)",
        max_p2p,
    )
    .full()
    .timeout(180);
    r.add(
        "transfer.recv_larger",
        "§1.5",
        "a receive buffer larger than the message gets the message, and test reports the true (sent) size",
        recv_larger,
    );
    r.add("transfer.order", "§1.5", "sends match receives in posting order", order);
    r.add(
        "transfer.grouped",
        "§1.5",
        "a grouped irecv of maxRecvs buffers matches sends to buffers by tag and reports each size",
        grouped,
    )
    .since(9);
    r.add("transfer.recv_hint", "§1.5", "irecv entered with *request == NCCL_NET_OPTIONAL_RECV_COMPLETION (1) overwrites it with a real request or NULL", recv_hint).since(9);
    r.add(
        "transfer.max_requests",
        "§4.1",
        "NCCL_NET_MAX_REQUESTS (8 for v6, 32 from v7) receives and sends can be outstanding on one comm",
        max_requests_check,
    );
    r.add("transfer.backpressure", "§1.5", "posting past the limit gives a NULL request (or an error), never a crash; everything posted is delivered in order", backpressure);
    r.add(
        "transfer.test_null_sizes",
        "§1.5",
        "test(request, &done, NULL) works (NCCL's bootstrap passes NULL sizes)",
        test_null_sizes,
    );
    r.add(
        "transfer.iflush_host",
        "§1.2",
        "with forceFlush set, iflush of host memory returns NULL or a request that completes",
        iflush_host,
    );
}

fn size_check(cx: &mut Cx, size: u64) -> Res {
    let len = size as usize;
    let p = cx.pair()?;
    let got = cx.roundtrip(&p, len, len, 42 + size)?;
    ensure!(
        got == len,
        "test reports the received size",
        "a {} message completed with size {got}",
        size_str(len)
    );
    cx.close_pair(p)
}

fn max_p2p(cx: &mut Cx, _: u64) -> Res {
    let m = cx.props.max_p2p_bytes;
    if m > 256 << 20 {
        return Err(skip!(
            "maxP2pBytes = {m} is above the 256 MiB this check allocates (twice); sizes up to 64 MiB are covered by transfer.size.*"
        ));
    }
    let p = cx.pair()?;
    let got = cx.roundtrip(&p, m, m, 9)?;
    ensure!(
        got == m,
        "test reports the received size",
        "a {m}-byte message completed with size {got}"
    );
    cx.close_pair(p)
}

fn recv_larger(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    for (len, cap) in [(4097usize, 16384usize), ((1 << 20) + 1, 2 << 20), (0, 4096)] {
        let got = cx.roundtrip(&p, len, cap, len as u64)?;
        ensure!(
            got == len,
            "test reports the true size of the message, not the size of the receive buffer",
            "a {len}-byte message into a {cap}-byte buffer completed with size {got}"
        );
    }
    cx.close_pair(p)
}

fn order(cx: &mut Cx, _: u64) -> Res {
    let n = max_requests(cx.version).min(16);
    let p = cx.pair()?;
    let lens: Vec<usize> = (0..n).map(|i| 3000 + 977 * i).collect();
    let mut rbufs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; 32 << 10]).collect();
    let mut sbufs: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| {
            let mut b = vec![0u8; l];
            fill(&mut b, 500 + i as u64);
            b
        })
        .collect();
    let mut rreqs = Vec::new();
    for b in rbufs.iter_mut() {
        rreqs.push(cx.post("irecv", |cx| cx.irecv(p.recv, b, 0, None))?);
    }
    let mut sreqs = Vec::new();
    for b in sbufs.iter_mut() {
        sreqs.push(cx.post("isend", |cx| cx.isend(p.send, b, 0, None))?);
    }
    let mut all = sreqs.clone();
    all.extend(&rreqs);
    let sizes = cx.wait_all(&format!("{n} messages in flight"), &all)?;
    for i in 0..n {
        let got = sizes[n + i];
        ensure!(
            got == lens[i],
            "receive i gets send i (posting order)",
            "receive {i} completed with size {got}; send {i} had {} bytes",
            lens[i]
        );
        if let Err(at) = verify(&rbufs[i][..lens[i]], 500 + i as u64) {
            return Err(fail!(
                "receive i gets the data of send i (posting order)",
                "receive {i}: wrong byte at offset {at}"
            ));
        }
    }
    cx.close_pair(p)
}

fn grouped(cx: &mut Cx, _: u64) -> Res {
    let n = cx.props.max_recvs as usize;
    if n <= 1 {
        return Err(skip!("maxRecvs = {n}: the plugin does not support grouped receives"));
    }
    let p = cx.pair()?;
    let mut rbufs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; 8192]).collect();
    let slots: Vec<RecvSlot> = rbufs
        .iter_mut()
        .enumerate()
        .map(|(k, b)| RecvSlot {
            data: b.as_mut_ptr(),
            size: b.len(),
            tag: 100 + k as i32,
            mr: None,
        })
        .collect();
    let comm = p.recv;
    let rr = cx.post("grouped irecv", |cx| {
        cx.call(Call::Irecv, "grouped irecv", |net| net.irecv(comm, &slots, false))
    })?;
    // Sends in reverse tag order, each size different.
    let mut sbufs = Vec::new();
    let mut sreqs = Vec::new();
    for k in (0..n).rev() {
        let mut b = vec![0u8; 1000 + 100 * k];
        fill(&mut b, 700 + k as u64);
        sbufs.push(b);
        let b = sbufs.last_mut().expect("pushed");
        sreqs.push(cx.post("isend", |cx| cx.isend(p.send, b, 100 + k as i32, None))?);
    }
    cx.wait_all("sends of a grouped receive", &sreqs)?;
    let mut sizes = vec![usize::MAX; n];
    let start = Instant::now();
    while !cx.test(rr, &mut sizes)? {
        ensure!(
            start.elapsed() < crate::cx::REQUEST_DEADLINE,
            "the grouped receive completes",
            "not done after 20 s"
        );
    }
    for k in 0..n {
        ensure!(
            sizes[k] == 1000 + 100 * k,
            "sizes[k] is the size of the send tagged with buffer k's tag",
            "buffer {k}: size {}, expected {}",
            sizes[k],
            1000 + 100 * k
        );
        if let Err(at) = verify(&rbufs[k][..sizes[k]], 700 + k as u64) {
            return Err(fail!(
                "buffer k gets the send with its tag",
                "buffer {k}: wrong byte at offset {at}"
            ));
        }
    }
    cx.close_pair(p)
}

fn recv_hint(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    let mut rbuf = vec![0u8; 4096];
    let mut sbuf = vec![0u8; 4096];
    fill(&mut sbuf, 3);
    let slot = RecvSlot {
        data: rbuf.as_mut_ptr(),
        size: rbuf.len(),
        tag: 0,
        mr: None,
    };
    let comm = p.recv;
    let rr = cx.post("irecv with the optional-completion hint", |cx| {
        cx.call(Call::Irecv, "irecv with *request == 1", |n| {
            n.irecv(comm, &[slot], true)
        })
    })?;
    ensure!(
        rr.0 as usize != 1,
        "irecv overwrites *request (it may not leave NCCL_NET_OPTIONAL_RECV_COMPLETION = 1 there; NCCL would treat 1 as a request)",
        "irecv returned success and left *request == 1"
    );
    let sr = cx.post("isend", |cx| cx.isend(p.send, &mut sbuf, 0, None))?;
    cx.wait_all("message received with the hint", &[sr, rr])?;
    if let Err(at) = verify(&rbuf, 3) {
        return Err(fail!(
            "received bytes equal the sent bytes",
            "wrong byte at offset {at}"
        ));
    }
    cx.close_pair(p)
}

/// Posts with retries for at most `limit`, testing nothing.
fn post_within(
    cx: &mut Cx,
    what: &str,
    limit: Duration,
    mut f: impl FnMut(&mut Cx) -> Res<Option<RawRequest>>,
) -> Res<RawRequest> {
    let start = Instant::now();
    loop {
        if let Some(r) = f(cx)? {
            return Ok(r);
        }
        ensure!(
            start.elapsed() < limit,
            "the plugin accepts NCCL_NET_MAX_REQUESTS outstanding requests per comm (§4.1)",
            "{what} returned NULL for {limit:?} with nothing tested"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn max_requests_check(cx: &mut Cx, _: u64) -> Res {
    let n = max_requests(cx.version);
    let p = cx.pair()?;
    let mut rbufs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; 2048]).collect();
    let mut sbufs: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut b = vec![0u8; 1024 + i];
            fill(&mut b, 900 + i as u64);
            b
        })
        .collect();
    let mut rreqs = Vec::new();
    for (i, b) in rbufs.iter_mut().enumerate() {
        rreqs.push(post_within(
            cx,
            &format!("irecv {} of {n}", i + 1),
            Duration::from_secs(2),
            |cx| cx.irecv(p.recv, b, 0, None),
        )?);
    }
    let mut sreqs = Vec::new();
    for (i, b) in sbufs.iter_mut().enumerate() {
        sreqs.push(post_within(
            cx,
            &format!("isend {} of {n}", i + 1),
            Duration::from_secs(2),
            |cx| cx.isend(p.send, b, 0, None),
        )?);
    }
    let mut all = sreqs;
    all.extend(&rreqs);
    let sizes = cx.wait_all(&format!("{n} + {n} outstanding requests"), &all)?;
    for i in 0..n {
        ensure!(
            sizes[n + i] == 1024 + i,
            "receive i gets send i",
            "receive {i}: size {}",
            sizes[n + i]
        );
        if let Err(at) = verify(&rbufs[i][..1024 + i], 900 + i as u64) {
            return Err(fail!(
                "receive i gets the data of send i",
                "receive {i}: wrong byte at offset {at}"
            ));
        }
    }
    cx.notes.push(format!("{n} receives and {n} sends outstanding"));
    cx.close_pair(p)
}

fn backpressure(cx: &mut Cx, _: u64) -> Res {
    let limit = 4 * max_requests(cx.version);
    let p = cx.pair()?;
    let mut sbufs: Vec<Vec<u8>> = (0..limit)
        .map(|i| {
            let mut b = vec![0u8; 4096];
            fill(&mut b, 2000 + i as u64);
            b
        })
        .collect();
    let mut sreqs = Vec::new();
    let mut stopped = String::from("never refused");
    for (i, b) in sbufs.iter_mut().enumerate() {
        match cx.isend(p.send, b, 0, None) {
            Ok(Some(r)) => sreqs.push(r),
            Ok(None) => {
                stopped = format!("NULL request at isend {}", i + 1);
                break;
            }
            Err(_) => {
                stopped = format!("error at isend {} (misuse reported as an error)", i + 1);
                break;
            }
        }
    }
    cx.notes
        .push(format!("{} isends accepted without receives; {stopped}", sreqs.len()));
    // Drain: post receives (within the limit) and test everything in order.
    let n = sreqs.len();
    let mut rbufs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; 4096]).collect();
    let window = max_requests(cx.version);
    let mut next_send = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(window) {
        let mut rreqs = Vec::new();
        for &i in chunk {
            let b = &mut rbufs[i];
            rreqs.push(cx.post("irecv", |cx| cx.irecv(p.recv, b, 0, None))?);
        }
        let upto = (next_send + chunk.len()).min(n);
        let mut all: Vec<RawRequest> = sreqs[next_send..upto].to_vec();
        next_send = upto;
        all.extend(&rreqs);
        cx.wait_all("draining after back-pressure", &all)?;
        for &i in chunk {
            if let Err(at) = verify(&rbufs[i], 2000 + i as u64) {
                return Err(fail!(
                    "every accepted send is delivered in order",
                    "message {i}: wrong byte at offset {at} ({:#04x} instead of {:#04x})",
                    rbufs[i][at],
                    pattern_byte(2000 + i as u64, at)
                ));
            }
        }
    }
    cx.close_pair(p)
}

fn test_null_sizes(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    let mut rbuf = vec![0u8; 5000];
    let mut sbuf = vec![0u8; 5000];
    fill(&mut sbuf, 11);
    let rr = cx.post("irecv", |cx| cx.irecv(p.recv, &mut rbuf, 0, None))?;
    let sr = cx.post("isend", |cx| cx.isend(p.send, &mut sbuf, 0, None))?;
    let start = Instant::now();
    let (mut sd, mut rd) = (false, false);
    while !(sd && rd) {
        if !sd {
            sd = cx.test(sr, &mut [])?;
        }
        if !rd {
            rd = cx.test(rr, &mut [])?;
        }
        ensure!(
            start.elapsed() < crate::cx::REQUEST_DEADLINE,
            "requests complete when tested with sizes == NULL",
            "not done after 20 s"
        );
    }
    if let Err(at) = verify(&rbuf, 11) {
        return Err(fail!(
            "received bytes equal the sent bytes",
            "wrong byte at offset {at}"
        ));
    }
    cx.close_pair(p)
}

fn iflush_host(cx: &mut Cx, _: u64) -> Res {
    if !cx.props.force_flush {
        return Err(skip!(
            "forceFlush is not set: NCCL only calls iflush for CUDA buffers (and must not for host memory)"
        ));
    }
    let p = cx.pair()?;
    let mut rbuf = vec![0u8; 4096];
    cx.roundtrip(&p, 4096, 4096, 5)?;
    let slot = RecvSlot {
        data: rbuf.as_mut_ptr(),
        size: rbuf.len(),
        tag: 0,
        mr: None,
    };
    let comm = p.recv;
    if let Some(r) = cx.call(Call::Iflush, "iflush of host memory", |n| n.iflush(comm, &[slot]))? {
        cx.wait_all("iflush", &[r])?;
    }
    cx.close_pair(p)
}
