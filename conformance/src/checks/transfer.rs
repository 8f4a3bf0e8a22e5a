//! Data transfer: sizes, true sizes, order, grouped receives, request limits,
//! test(NULL), and the advisory checks of behaviour NCCL never exercises
//! (out-of-order test, posting past the request limit, iflush of host memory).
//!
//! Messages go from and to registered memory, posted as NCCL posts its FIFO
//! slots: sub-ranges of one registered region, each with the region's mhandle
//! (net.cc `sendProxyProgress`: `isend(comm, localBuff + buffSlot*stepSize, size,
//! tpRank, sub->sendMhandle, ...)`).

use std::time::Duration;

use ferroccl::plugin::net::{RawComm, RawMr, RawRequest, RecvSlot};

use crate::cx::{Cx, Pair, fill, max_requests, pattern_byte, size_str, verify};
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
                "a {} message between registered buffers arrives intact (net.cc sendProxyProgress isend / recvProxyProgress irecv)",
                size_str(size as usize)
            ),
            size_check,
            size,
        )
        .nccl("src/transport/net.cc sendProxyProgress: isend(sendComm, buff, size, tpRank, sendMhandle, ...); recvProxyProgress: irecv(recvComm, n, ptrs, sizes, tags, mhandles, ...)");
    }
    r.add(
        "transfer.size.max_p2p",
        "§1.2",
        "a message of maxP2pBytes arrives intact (where feasible: <= 256 MiB)",
        max_p2p,
    )
    .full()
    .timeout(180)
    .nccl("src/transport/net.cc sendProxySetup: resources->maxP2pBytes = props.maxP2pBytes bounds one p2p message");
    r.add(
        "transfer.recv_larger",
        "§1.5",
        "test reports the true (sent) size of a receive, also into a larger buffer (net.cc recvProxyProgress: totalSize += sizes[i], sub->transSize = sizes[i])",
        recv_larger,
    )
    .nccl("src/transport/net.cc recvProxyProgress: test(request, &done, sizes); totalSize += sizes[i] decides the flush, sub->transSize = sizes[i]");
    r.add(
        "transfer.order",
        "§1.5",
        "sends match receives in posting order (tags only pick buffers inside a grouped receive)",
        order,
    )
    .nccl("src/transport/net.cc: step k of a connection is isend/irecv of requests[k % NCCL_STEPS]; they match in posting order");
    r.add(
        "transfer.grouped",
        "§1.5",
        "a grouped irecv of maxRecvs buffers matches sends to buffers by tag and reports each size (net.cc recvProxyProgress: irecv(comm, subCount, ptrs, sizes, tags, ...))",
        grouped,
    )
    .since(9)
    .nccl("src/transport/net.cc recvProxyProgress: irecv(recvComm, subCount, ptrs, sizes, tags = tpRemoteRank, mhandles, ...)");
    r.add(
        "transfer.grouped_mixed",
        "§1.5",
        "grouped irecvs of 1..maxRecvs buffers, interleaved, with sends in permuted tag order and per-buffer sizes (0, eager, 16 KiB) all land in the right buffer with the right size",
        grouped_mixed,
    )
    .since(9)
    .nccl("src/transport/net.cc recvProxyProgress: groups of 1..maxRecvs subs, tags = tpRemoteRank, test fills sizes[i] per sub");
    r.add(
        "transfer.recv_hint",
        "§1.5",
        "irecv entered with *request == NCCL_NET_OPTIONAL_RECV_COMPLETION (1) overwrites it with a real request or NULL (net.cc recvProxyProgress ignoreCompletion)",
        recv_hint,
    )
    .since(9)
    .nccl("src/transport/net.cc recvProxyProgress: *requestPtr = NCCL_NET_OPTIONAL_RECV_COMPLETION for a single LL/LL128 receive");
    r.add(
        "transfer.max_requests",
        "§4.1",
        "NCCL_NET_MAX_REQUESTS (8 for v6, 32 from v7) receives and sends can be outstanding on one comm, posted as FIFO slots of one registered region",
        max_requests_check,
    )
    .nccl("src/transport/net.cc: static_assert(NCCL_STEPS <= NCCL_NET_MAX_REQUESTS); up to NCCL_STEPS requests per connection");
    r.add(
        "transfer.backpressure",
        "§1.5",
        "posting past NCCL_NET_MAX_REQUESTS gives a NULL request (or an error), never a crash; everything accepted is delivered in order (NCCL keeps at most NCCL_STEPS = 8 per connection)",
        backpressure,
    )
    .advisory()
    .nccl("NCCL never: it keeps at most NCCL_STEPS (8) requests per connection; a NULL request is retried");
    r.add(
        "transfer.threads",
        "checklist",
        "4 threads, each with its own context and comms on one plugin instance, transfer at once (NCCL runs one proxy thread per communicator; aws runs every test with 4 threads)",
        threads,
    )
    .timeout(120)
    .nccl("src/proxy.cc: every communicator's proxy progress thread drives the one loaded plugin");
    r.add(
        "transfer.test_null_sizes",
        "§1.5",
        "test(request, &done, NULL) works (net.cc recvProxyProgress tests flush requests with NULL sizes; NCCL's bootstrap does too)",
        test_null_sizes,
    )
    .nccl("src/transport/net.cc recvProxyProgress: test(request, &done, NULL) for flush requests");
    r.add(
        "transfer.test_out_of_order",
        "checklist",
        "a request other than the oldest of its comm can be tested (NCCL never does: it tests the oldest only)",
        test_out_of_order,
    )
    .advisory()
    .nccl("NCCL never: sendProxyProgress/recvProxyProgress test only the oldest outstanding request");
    r.add(
        "transfer.iflush_host",
        "§1.2",
        "with forceFlush set, iflush of host memory returns NULL or a request that completes (NCCL never flushes host memory: recvProxyProgress needs useGdr)",
        iflush_host,
    )
    .advisory()
    .nccl("NCCL never: recvProxyProgress calls iflush only when useGdr && needFlush (GPU memory)");
}

/// A registered host region of `slots` × `slot` bytes on one comm: NCCL's FIFO.
pub(crate) struct Region {
    /// The bytes.
    pub buf: Vec<u8>,
    /// Bytes per slot.
    pub slot: usize,
    /// The registration on [`Region::comm`].
    pub mr: RawMr,
    /// The comm it is registered on.
    pub comm: RawComm,
}

impl Region {
    /// Allocates and registers `slots` slots of `slot` bytes on `comm`.
    pub fn new(cx: &mut Cx, comm: RawComm, slots: usize, slot: usize) -> Res<Region> {
        let mut buf = vec![0u8; (slots * slot).max(1)];
        let mr = cx.reg_mr(comm, &mut buf)?;
        Ok(Region { buf, slot, mr, comm })
    }

    /// Slot `i`, the first `len` bytes.
    pub fn slot(&mut self, i: usize, len: usize) -> &mut [u8] {
        let at = i * self.slot;
        &mut self.buf[at..at + len]
    }

    /// `deregMr`.
    pub fn free(self, cx: &mut Cx) -> Res {
        cx.dereg_mr(self.comm, self.mr)
    }
}

fn size_check(cx: &mut Cx, size: u64) -> Res {
    let len = size as usize;
    let p = cx.pair()?;
    cx.roundtrip(&p, len, len, 42 + size)?;
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
    cx.roundtrip(&p, m, m, 9)?;
    cx.close_pair(p)
}

fn recv_larger(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    for (len, cap) in [
        (4097usize, 16384usize),
        ((1 << 20) + 1, 2 << 20),
        (4096, 4096),
        (1000, 1000),
        (0, 4096),
    ] {
        let got = cx.roundtrip(&p, len, cap, len as u64)?;
        ensure!(
            got == len,
            "test reports the true size of the message, not the size of the receive buffer (NCCL reads sizes[i] in recvProxyProgress)",
            "a {len}-byte message into a {cap}-byte buffer completed with size {got}{}",
            if got == 0 && len > 0 {
                " (sizes[0] left as NCCL initialises it: test did not write the received size)"
            } else {
                ""
            }
        );
    }
    cx.close_pair(p)
}

/// Which message's pattern `buf` holds, among `seeds` with lengths `lens`.
fn whose(buf: &[u8], seeds: &[(u64, usize)]) -> Option<usize> {
    seeds
        .iter()
        .position(|&(seed, len)| len > 0 && len <= buf.len() && verify(&buf[..len], seed).is_ok())
}

fn order(cx: &mut Cx, _: u64) -> Res {
    let n = max_requests(cx.version).min(16);
    let slot = 32 << 10;
    let p = cx.pair()?;
    let lens: Vec<usize> = (0..n).map(|i| 3000 + 977 * i).collect();
    let seeds: Vec<(u64, usize)> = (0..n).map(|i| (500 + i as u64, lens[i])).collect();
    let mut rreg = Region::new(cx, p.recv, n, slot)?;
    let mut sreg = Region::new(cx, p.send, n, slot)?;
    for i in 0..n {
        fill(sreg.slot(i, lens[i]), seeds[i].0);
    }
    let mut reqs = Vec::new();
    for i in 0..n {
        let mr = rreg.mr;
        let b = rreg.slot(i, slot);
        reqs.push(cx.post("irecv", |cx| cx.irecv(p.recv, b, 0, mr))?);
    }
    for (i, &len) in lens.iter().enumerate() {
        let mr = sreg.mr;
        let b = sreg.slot(i, len);
        reqs.push(cx.post("isend", |cx| cx.isend(p.send, b, 0, mr))?);
    }
    cx.wait_all(&format!("{n} messages in flight"), &reqs)?;
    for i in 0..n {
        let b = rreg.slot(i, slot);
        if verify(&b[..lens[i]], seeds[i].0).is_err() {
            return Err(match whose(b, &seeds) {
                Some(j) => fail!(
                    "receive i gets the data of send i (sends match receives in posting order)",
                    "receive {i} holds the data of send {j}"
                ),
                None => fail!(
                    "receive i gets the data of send i",
                    "receive {i} holds none of the {n} messages sent"
                ),
            });
        }
    }
    rreg.free(cx)?;
    sreg.free(cx)?;
    cx.close_pair(p)
}

fn grouped(cx: &mut Cx, _: u64) -> Res {
    let n = cx.props.max_recvs as usize;
    if n <= 1 {
        return Err(skip!("maxRecvs = {n}: the plugin does not support grouped receives"));
    }
    let p = cx.pair()?;
    let mut rreg = Region::new(cx, p.recv, n, 8192)?;
    let slots: Vec<RecvSlot> = (0..n)
        .map(|k| RecvSlot {
            data: rreg.slot(k, 8192).as_mut_ptr(),
            size: 8192,
            tag: 100 + k as i32,
            mr: Some(rreg.mr),
        })
        .collect();
    let rr = cx.post("grouped irecv", |cx| cx.irecv_slots(p.recv, &slots, false))?;
    // Sends in reverse tag order, each size different.
    let mut sreg = Region::new(cx, p.send, n, 8192)?;
    let mut sreqs = Vec::new();
    for k in (0..n).rev() {
        let len = 1000 + 100 * k;
        fill(sreg.slot(k, len), 700 + k as u64);
        let mr = sreg.mr;
        let b = sreg.slot(k, len);
        sreqs.push(cx.post("isend", |cx| cx.isend(p.send, b, 100 + k as i32, mr))?);
    }
    let mut all = sreqs;
    all.push(rr);
    let sizes = cx.wait_sizes("sends of a grouped receive", &all)?;
    let sizes = sizes.last().cloned().unwrap_or_default();
    for k in 0..n {
        ensure!(
            sizes.get(k) == Some(&(1000 + 100 * k)),
            "sizes[k] is the size of the send tagged with buffer k's tag",
            "buffer {k}: size {:?}, expected {}",
            sizes.get(k),
            1000 + 100 * k
        );
        if let Err(at) = verify(&rreg.slot(k, 8192)[..1000 + 100 * k], 700 + k as u64) {
            return Err(fail!(
                "buffer k gets the send with its tag",
                "buffer {k}: wrong byte at offset {at}"
            ));
        }
    }
    rreg.free(cx)?;
    sreg.free(cx)?;
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
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn grouped_mixed(cx: &mut Cx, _: u64) -> Res {
    let max = cx.props.max_recvs as usize;
    if max <= 1 {
        return Err(skip!("maxRecvs = {max}: the plugin does not support grouped receives"));
    }
    // Group sizes 1..=max interleaved (small after large and back), twice.
    let mut groups: Vec<usize> = Vec::new();
    for round in 0..2 {
        for i in 0..max {
            groups.push(if (i + round) % 2 == 0 { i + 1 } else { max - i });
        }
    }
    let slot = 16 << 10;
    let total: usize = groups.iter().sum();
    let p = cx.pair()?;
    let mut rreg = Region::new(cx, p.recv, total, slot)?;
    let mut sreg = Region::new(cx, p.send, total, slot)?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Per buffer: (tag, len, seed, region slot).
    let mut plan: Vec<Vec<(i32, usize, u64, usize)>> = Vec::new();
    let mut next_slot = 0;
    for (g, &n) in groups.iter().enumerate() {
        let mut bufs = Vec::new();
        for k in 0..n {
            let len = match rng.below(4) {
                0 => 0,
                1 => 1 + rng.below(1024), // eager-sized (aws eager_multirecv: <= 1 KiB)
                2 => slot,                // 16 KiB
                _ => rng.below(slot + 1),
            };
            let seed = 10_000 + (g * 16 + k) as u64;
            bufs.push((7 + k as i32 * 3, len, seed, next_slot));
            next_slot += 1;
        }
        plan.push(bufs);
    }
    // Two groups in flight at a time: post the receives of group g and g+1, then
    // group g's sends in a permuted tag order, then wait for group g.
    let window = 2;
    let mut rreqs: Vec<Option<RawRequest>> = vec![None; groups.len()];
    let post_recv = |cx: &mut Cx, g: usize, rreg: &mut Region| -> Res<RawRequest> {
        let slots: Vec<RecvSlot> = plan[g]
            .iter()
            .map(|&(tag, _, _, s)| RecvSlot {
                data: rreg.slot(s, slot).as_mut_ptr(),
                size: slot,
                tag,
                mr: Some(rreg.mr),
            })
            .collect();
        cx.post("grouped irecv", |cx| cx.irecv_slots(p.recv, &slots, false))
    };
    for (g, r) in rreqs.iter_mut().enumerate().take(window) {
        *r = Some(post_recv(cx, g, &mut rreg)?);
    }
    for g in 0..groups.len() {
        let n = groups[g];
        let mut perm: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            perm.swap(i, rng.below(i + 1));
        }
        let mut sreqs = Vec::new();
        for &k in &perm {
            let (tag, len, seed, s) = plan[g][k];
            fill(sreg.slot(s, len), seed);
            let mr = sreg.mr;
            let b = sreg.slot(s, len);
            sreqs.push(cx.post("isend", |cx| cx.isend(p.send, b, tag, mr))?);
        }
        let rr = rreqs[g].take().expect("posted");
        let mut all = sreqs;
        all.push(rr);
        let what = format!("grouped receive {g} of {n} buffers");
        let sizes = cx.wait_sizes(&what, &all)?.pop().unwrap_or_default();
        for (k, &(tag, len, seed, s)) in plan[g].iter().enumerate() {
            ensure!(
                sizes.get(k) == Some(&len),
                "sizes[k] of a grouped receive is the size of the send with buffer k's tag (net.cc recvProxyProgress: sub->transSize = sizes[i])",
                "{what}: buffer {k} (tag {tag}) reported size {:?}, its send had {len} bytes",
                sizes.get(k)
            );
            if let Err(at) = verify(&rreg.slot(s, slot)[..len], seed) {
                return Err(fail!(
                    "each buffer of a grouped receive gets the send with its tag",
                    "{what}: buffer {k} (tag {tag}, {len} bytes): wrong byte at offset {at}"
                ));
            }
        }
        if g + window < groups.len() {
            rreqs[g + window] = Some(post_recv(cx, g + window, &mut rreg)?);
        }
    }
    cx.notes.push(format!("group sizes {groups:?}"));
    rreg.free(cx)?;
    sreg.free(cx)?;
    cx.close_pair(p)
}

fn recv_hint(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    let mut rreg = Region::new(cx, p.recv, 1, 4096)?;
    let mut sreg = Region::new(cx, p.send, 1, 4096)?;
    fill(sreg.slot(0, 4096), 3);
    let slot = RecvSlot {
        data: rreg.slot(0, 4096).as_mut_ptr(),
        size: 4096,
        tag: 0,
        mr: Some(rreg.mr),
    };
    let rr = cx.post("irecv with the optional-completion hint", |cx| {
        cx.irecv_slots(p.recv, &[slot], true)
    })?;
    ensure!(
        rr.0 as usize != 1,
        "irecv overwrites *request (it may not leave NCCL_NET_OPTIONAL_RECV_COMPLETION = 1 there; NCCL would treat 1 as a request)",
        "irecv returned success and left *request == 1"
    );
    let mr = sreg.mr;
    let b = sreg.slot(0, 4096);
    let sr = cx.post("isend", |cx| cx.isend(p.send, b, 0, mr))?;
    cx.wait_all("message received with the hint", &[sr, rr])?;
    if let Err(at) = verify(rreg.slot(0, 4096), 3) {
        return Err(fail!(
            "received bytes equal the sent bytes",
            "wrong byte at offset {at}"
        ));
    }
    rreg.free(cx)?;
    sreg.free(cx)?;
    cx.close_pair(p)
}

/// Posts without testing anything, for at most `limit` (the plugin must accept
/// this many outstanding requests without needing a test first).
fn post_within(
    cx: &mut Cx,
    what: &str,
    limit: Duration,
    mut f: impl FnMut(&mut Cx) -> Res<Option<RawRequest>>,
) -> Res<RawRequest> {
    let start = std::time::Instant::now();
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
    let mut rreg = Region::new(cx, p.recv, n, 2048)?;
    let mut sreg = Region::new(cx, p.send, n, 2048)?;
    for i in 0..n {
        fill(sreg.slot(i, 1024 + i), 900 + i as u64);
    }
    let mut rreqs = Vec::new();
    for i in 0..n {
        let mr = rreg.mr;
        let b = rreg.slot(i, 2048);
        rreqs.push(post_within(
            cx,
            &format!("irecv {} of {n}", i + 1),
            Duration::from_secs(2),
            |cx| cx.irecv(p.recv, b, 0, mr),
        )?);
    }
    let mut sreqs = Vec::new();
    for i in 0..n {
        let mr = sreg.mr;
        let b = sreg.slot(i, 1024 + i);
        sreqs.push(post_within(
            cx,
            &format!("isend {} of {n}", i + 1),
            Duration::from_secs(2),
            |cx| cx.isend(p.send, b, 0, mr),
        )?);
    }
    let mut all = sreqs;
    all.extend(&rreqs);
    cx.wait_all(&format!("{n} + {n} outstanding requests"), &all)?;
    for i in 0..n {
        if let Err(at) = verify(&rreg.slot(i, 2048)[..1024 + i], 900 + i as u64) {
            return Err(fail!(
                "receive i gets the data of send i",
                "receive {i}: wrong byte at offset {at}"
            ));
        }
    }
    cx.notes.push(format!("{n} receives and {n} sends outstanding"));
    rreg.free(cx)?;
    sreg.free(cx)?;
    cx.close_pair(p)
}

fn backpressure(cx: &mut Cx, _: u64) -> Res {
    let limit = 4 * max_requests(cx.version);
    let p = cx.pair()?;
    let mut sreg = Region::new(cx, p.send, limit, 4096)?;
    for i in 0..limit {
        fill(sreg.slot(i, 4096), 2000 + i as u64);
    }
    let mut sreqs = Vec::new();
    let mut stopped = String::from("never refused");
    for i in 0..limit {
        let mr = sreg.mr;
        let b = sreg.slot(i, 4096);
        match cx.isend(p.send, b, 0, mr) {
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
    // Drain: post receives (within the limit) and wait, oldest first.
    let n = sreqs.len();
    let window = max_requests(cx.version);
    let mut rreg = Region::new(cx, p.recv, window, 4096)?;
    let mut next_send = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(window) {
        let mut rreqs = Vec::new();
        for (k, _) in chunk.iter().enumerate() {
            let mr = rreg.mr;
            let b = rreg.slot(k, 4096);
            rreqs.push(cx.post("irecv", |cx| cx.irecv(p.recv, b, 0, mr))?);
        }
        let upto = (next_send + chunk.len()).min(n);
        let mut all: Vec<RawRequest> = sreqs[next_send..upto].to_vec();
        next_send = upto;
        all.extend(&rreqs);
        cx.wait_all("draining after back-pressure", &all)?;
        for (k, &i) in chunk.iter().enumerate() {
            let b = rreg.slot(k, 4096);
            if let Err(at) = verify(b, 2000 + i as u64) {
                return Err(fail!(
                    "every accepted send is delivered in order",
                    "message {i}: wrong byte at offset {at} ({:#04x} instead of {:#04x})",
                    b[at],
                    pattern_byte(2000 + i as u64, at)
                ));
            }
        }
    }
    rreg.free(cx)?;
    sreg.free(cx)?;
    cx.close_pair(p)
}

/// Threads of `transfer.threads`.
const THREADS: usize = 4;
/// Messages each thread sends on each of its 2 connections.
const THREAD_MESSAGES: usize = 40;

/// One thread of `transfer.threads`: its own context, 2 connections, messages of
/// varied sizes on both in turn, then close and finalize.
fn thread_body(cx: &mut Cx, t: usize) -> Res {
    let pairs = [cx.pair()?, cx.pair()?];
    let mut rng = Rng(0x1234_5678 + t as u64);
    for i in 0..THREAD_MESSAGES {
        for (k, p) in pairs.iter().enumerate() {
            let len = match rng.below(3) {
                0 => rng.below(4096),
                1 => 4096 + rng.below(60 << 10),
                _ => (64 << 10) + rng.below(192 << 10),
            };
            let seed = ((t * 1000 + i) * 2 + k) as u64;
            cx.roundtrip(p, len, 256 << 10, seed)
                .map_err(|e| super::conn::context(e, &format!("thread {t}, connection {k}, message {i}")))?;
        }
    }
    for p in pairs {
        cx.close_pair(p)?;
    }
    Ok(())
}

fn threads(cx: &mut Cx, _: u64) -> Res {
    let mut forks = Vec::new();
    for t in 0..THREADS {
        let ctx = cx.call(Call::Init, &format!("init of thread {t}'s context"), |n| {
            n.init_ctx(0x7000 + t as u64, &ferroccl::plugin::net::CommConfig::default())
        })?;
        forks.push(cx.fork(ctx));
    }
    let start = std::sync::Arc::new(std::sync::Barrier::new(THREADS));
    let handles: Vec<_> = forks
        .into_iter()
        .enumerate()
        .map(|(t, mut f)| {
            let start = start.clone();
            std::thread::Builder::new()
                .name(format!("conformance-thread-{t}"))
                .spawn(move || {
                    start.wait();
                    let r = thread_body(&mut f, t);
                    let ctx = f.ctx;
                    let fin = f.call(Call::Finalize, &format!("finalize of thread {t}'s context"), |n| {
                        n.finalize_ctx(ctx)
                    });
                    (r.and(fin), f.slowest)
                })
                .expect("spawn a test thread")
        })
        .collect();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok((r, slowest)) => {
                for (name, d) in slowest {
                    match cx.slowest.iter_mut().find(|(n, _)| *n == name) {
                        Some((_, x)) => *x = (*x).max(d),
                        None => cx.slowest.push((name, d)),
                    }
                }
                if let Err(e) = r {
                    first_err.get_or_insert(e);
                }
            }
            Err(_) => {
                first_err.get_or_insert(fail!(
                    "the check's threads run to completion",
                    "a test thread panicked (a suite bug)"
                ));
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    cx.notes.push(format!(
        "{THREADS} threads x 2 connections x {THREAD_MESSAGES} messages, concurrently"
    ));
    Ok(())
}

fn test_null_sizes(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    let mut rreg = Region::new(cx, p.recv, 1, 5000)?;
    let mut sreg = Region::new(cx, p.send, 1, 5000)?;
    fill(sreg.slot(0, 5000), 11);
    let mr = rreg.mr;
    let b = rreg.slot(0, 5000);
    let rr = cx.post("irecv", |cx| cx.irecv(p.recv, b, 0, mr))?;
    let mr = sreg.mr;
    let b = sreg.slot(0, 5000);
    let sr = cx.post("isend", |cx| cx.isend(p.send, b, 0, mr))?;
    let start = std::time::Instant::now();
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
    if let Err(at) = verify(rreg.slot(0, 5000), 11) {
        return Err(fail!(
            "received bytes equal the sent bytes",
            "wrong byte at offset {at}"
        ));
    }
    rreg.free(cx)?;
    sreg.free(cx)?;
    cx.close_pair(p)
}

fn test_out_of_order(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    let mut rreg = Region::new(cx, p.recv, 2, 4096)?;
    let mut sreg = Region::new(cx, p.send, 2, 4096)?;
    let mut rreqs = Vec::new();
    for i in 0..2 {
        let mr = rreg.mr;
        let b = rreg.slot(i, 4096);
        rreqs.push(cx.post("irecv", |cx| cx.irecv(p.recv, b, 0, mr))?);
    }
    let mut sreqs = Vec::new();
    for i in 0..2 {
        fill(sreg.slot(i, 4096), 60 + i as u64);
        let mr = sreg.mr;
        let b = sreg.slot(i, 4096);
        sreqs.push(cx.post("isend", |cx| cx.isend(p.send, b, 0, mr))?);
    }
    // Newest first, on both comms, until each is done.
    let start = std::time::Instant::now();
    let mut done = [false; 4];
    let order = [rreqs[1], sreqs[1], rreqs[0], sreqs[0]];
    while done.iter().any(|d| !d) {
        for (i, r) in order.iter().enumerate() {
            if !done[i] {
                done[i] = cx.test_unordered(*r, &mut [0])?;
            }
        }
        ensure!(
            start.elapsed() < crate::cx::REQUEST_DEADLINE,
            "requests tested newest first complete",
            "not done after 20 s"
        );
    }
    for i in 0..2 {
        if let Err(at) = verify(rreg.slot(i, 4096), 60 + i as u64) {
            return Err(fail!(
                "receive i gets send i, whatever the test order",
                "receive {i}: wrong byte at offset {at}"
            ));
        }
    }
    rreg.free(cx)?;
    sreg.free(cx)?;
    cx.close_pair(p)
}

fn iflush_host(cx: &mut Cx, _: u64) -> Res {
    if !cx.props.force_flush {
        return Err(skip!(
            "forceFlush is not set: NCCL only calls iflush for CUDA buffers (and must not for host memory)"
        ));
    }
    let p: Pair = cx.pair()?;
    cx.roundtrip(&p, 4096, 4096, 5)?;
    let mut rreg = Region::new(cx, p.recv, 1, 4096)?;
    let slot = RecvSlot {
        data: rreg.slot(0, 4096).as_mut_ptr(),
        size: 4096,
        tag: 0,
        mr: Some(rreg.mr),
    };
    let comm = p.recv;
    if let Some(r) = cx.call(Call::Iflush, "iflush of host memory", |n| n.iflush(comm, &[slot]))? {
        // Not queued as a posted request: tested alone until done, sizes NULL (as NCCL).
        let start = std::time::Instant::now();
        loop {
            let done = cx.call(Call::Test, "test of the iflush request", |n| n.test(r, &mut []))?;
            if done {
                break;
            }
            ensure!(
                start.elapsed() < crate::cx::REQUEST_DEADLINE,
                "the iflush request completes",
                "not done after 20 s"
            );
        }
    }
    rreg.free(cx)?;
    cx.close_pair(p)
}
