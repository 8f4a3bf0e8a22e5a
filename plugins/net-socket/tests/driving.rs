//! The plugin driven as NCCL's proxy drives it (`src/transport/net.cc`,
//! `sendProxyProgress` / `recvProxyProgress`): each progress call of an op posts
//! one request while fewer than `WINDOW` are in flight, else tests the oldest;
//! each thread owns its comms. These are the patterns under which `test` may
//! sleep (`nccl_net_socket::wait`) and the receiver raises `SO_RCVLOWAT`: a
//! thread that only receives large messages, and one thread driving a send and
//! a receive op in turn. Correctness only: every byte and size is checked.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use common::{BOUND, buf, net_with, pattern, rb};
use ferroccl_plugin_api::sdk::{CommConfig, Handle, Net, TestStatus};
use nccl_net_socket::{ProfRequest as Request, RecvComm, SendComm, SocketNet};

const WINDOW: usize = 8;

/// Message sizes: large ones (the receiver may wait for most of them at
/// once), odd ones, and small ones between them (spinning, inline).
/// The last ones are large, so the last message is one after which nothing
/// more comes (a reader waiting for more than is owed would wait for ever).
fn sizes() -> Vec<usize> {
    let shapes = [(1 << 20) + 13, 300 << 10, 8, 70 << 10, 3 << 20, 100, 2 << 20, 65 << 10];
    let mut v: Vec<usize> = (0..24).map(|i| shapes[i % shapes.len()]).collect();
    v.extend([MAX, MAX - 1000, MAX, (1 << 20) + 4097]);
    v
}

const MAX: usize = 3 << 20;

/// One op's state: its messages, buffers and requests in flight (oldest first).
struct Op {
    bufs: Vec<Vec<u8>>,
    reqs: std::collections::VecDeque<(usize, Request)>,
    posted: usize,
    done: usize,
}

impl Op {
    fn new(n: usize, len: impl Fn(usize) -> usize) -> Op {
        Op {
            bufs: (0..n).map(|i| vec![0u8; len(i)]).collect(),
            reqs: Default::default(),
            posted: 0,
            done: 0,
        }
    }
}

/// One call of `sendProxyProgress` for one op.
fn send_step(net: &SocketNet, s: &mut SendComm, op: &mut Op, sizes: &[usize]) {
    if op.posted < sizes.len() && op.reqs.len() < WINDOW {
        let i = op.posted;
        if let Some(r) = net.isend(s, buf(&mut op.bufs[i]), 0, None).unwrap() {
            op.reqs.push_back((i, r));
            op.posted += 1;
            return;
        }
    }
    if let Some((i, r)) = op.reqs.front_mut()
        && let TestStatus::Done { n, sizes: got } = net.test(r).unwrap()
    {
        assert_eq!((n, got[0]), (1, sizes[*i]), "send {i}: size reported by test");
        op.reqs.pop_front();
        op.done += 1;
    }
}

/// One call of `recvProxyProgress` for one op (buffers of `MAX` bytes, as NCCL
/// posts whole slots); checks each message against `seed`'s pattern.
fn recv_step(net: &SocketNet, r: &mut RecvComm, op: &mut Op, sizes: &[usize], seed: u64) {
    if op.posted < sizes.len() && op.reqs.len() < WINDOW {
        let i = op.posted;
        let b = [rb(&mut op.bufs[i], 0)];
        if let Some(q) = net.irecv(r, &b).unwrap() {
            op.reqs.push_back((i, q));
            op.posted += 1;
            return;
        }
    }
    if let Some((i, q)) = op.reqs.front_mut()
        && let TestStatus::Done { n, sizes: got } = net.test(q).unwrap()
    {
        let i = *i;
        assert_eq!((n, got[0]), (1, sizes[i]), "receive {i}: size");
        assert!(
            op.bufs[i][..sizes[i]] == pattern(seed + i as u64, sizes[i])[..],
            "receive {i}: {} bytes differ from what was sent",
            sizes[i]
        );
        op.reqs.pop_front();
        op.done += 1;
    }
}

/// Connects a send comm to `peer` and accepts one on `listen`, interleaved.
fn connect_accept(net: &SocketNet, listen: &mut nccl_net_socket::Listener, peer: &mut Handle) -> (SendComm, RecvComm) {
    let (mut s, mut r) = (None, None);
    let t0 = Instant::now();
    while s.is_none() || r.is_none() {
        assert!(t0.elapsed() < BOUND, "connect/accept did not finish");
        if s.is_none() {
            s = net.connect(&(), 0, peer, &CommConfig::default()).unwrap();
        }
        if r.is_none() {
            r = net.accept(listen).unwrap();
        }
    }
    (s.unwrap(), r.unwrap())
}

/// One helper thread with one data stream per comm: large messages go through
/// it, and `test` sleeps on the comm's eventfd while it works. A receive buffer
/// large enough that the helper's `SO_RCVLOWAT` is not held down by it.
const HELPER: &[(&str, &str)] = &[
    ("NCCL_SOCKET_NTHREADS", "1"),
    ("NCCL_NSOCKS_PERTHREAD", "1"),
    ("NCCL_SOCKET_RCVBUF", "8388608"),
];

#[test]
fn a_thread_that_only_receives_gets_every_byte() {
    only_receives(&[]);
}

/// The helper thread's reads raise `SO_RCVLOWAT` too; a read that waited for
/// more than the sender still owes would hang at the last large message.
#[test]
fn a_thread_that_only_receives_gets_every_byte_through_a_helper_thread() {
    only_receives(HELPER);
}

fn only_receives(vars: &'static [(&'static str, &'static str)]) {
    let net = || net_with(vars);
    let sizes = sizes();
    let (htx, hrx) = mpsc::channel::<Handle>();
    let sz = sizes.clone();
    let receiver = thread::spawn(move || {
        let net = net();
        let mut h: Handle = [0; 128];
        let mut l = net.listen(&(), 0, &mut h).unwrap();
        htx.send(h).unwrap();
        let t0 = Instant::now();
        let mut r = loop {
            assert!(t0.elapsed() < BOUND, "accept did not finish");
            if let Some(r) = net.accept(&mut l).unwrap() {
                break r;
            }
        };
        let mut op = Op::new(sz.len(), |_| MAX);
        while op.done < sz.len() {
            assert!(t0.elapsed() < BOUND, "receives did not complete");
            recv_step(&net, &mut r, &mut op, &sz, 7);
        }
    });
    let net = net();
    let mut h = hrx.recv().unwrap();
    let t0 = Instant::now();
    let mut s = loop {
        assert!(t0.elapsed() < BOUND, "connect did not finish");
        if let Some(s) = net.connect(&(), 0, &mut h, &CommConfig::default()).unwrap() {
            break s;
        }
    };
    let mut op = Op::new(sizes.len(), |i| sizes[i]);
    for (i, b) in op.bufs.iter_mut().enumerate() {
        *b = pattern(7 + i as u64, sizes[i]);
    }
    while op.done < sizes.len() {
        assert!(t0.elapsed() < BOUND, "sends did not complete");
        send_step(&net, &mut s, &mut op, &sizes);
    }
    receiver.join().expect("the receiving thread checked every message");
}

#[test]
fn one_thread_driving_a_send_and_a_receive_op_in_turn_moves_every_byte() {
    send_and_receive(&[]);
}

#[test]
fn one_thread_driving_a_send_and_a_receive_op_in_turn_through_helper_threads() {
    send_and_receive(HELPER);
}

fn send_and_receive(vars: &'static [(&'static str, &'static str)]) {
    let net = move || net_with(vars);
    let sizes = sizes();
    // Each side: a send comm to the other and a receive comm from it, both ops
    // progressed in turn by its one thread (a 2-rank ring's proxy).
    let side = |me: u64, tx: mpsc::Sender<Handle>, rx: mpsc::Receiver<Handle>, sizes: Vec<usize>| {
        move || {
            let net = net();
            let mut h: Handle = [0; 128];
            let mut l = net.listen(&(), 0, &mut h).unwrap();
            tx.send(h).unwrap();
            let mut peer = rx.recv().unwrap();
            let (mut s, mut r) = connect_accept(&net, &mut l, &mut peer);
            let mut so = Op::new(sizes.len(), |i| sizes[i]);
            for (i, b) in so.bufs.iter_mut().enumerate() {
                *b = pattern(100 * me + i as u64, sizes[i]);
            }
            let mut ro = Op::new(sizes.len(), |_| MAX);
            let t0 = Instant::now();
            while so.done < sizes.len() || ro.done < sizes.len() {
                assert!(t0.elapsed() < BOUND, "side {me}: ops did not complete");
                if so.done < sizes.len() {
                    send_step(&net, &mut s, &mut so, &sizes);
                }
                if ro.done < sizes.len() {
                    recv_step(&net, &mut r, &mut ro, &sizes, 100 * (1 - me));
                }
            }
        }
    };
    let (a_tx, b_rx) = mpsc::channel();
    let (b_tx, a_rx) = mpsc::channel();
    let a = thread::spawn(side(0, a_tx, a_rx, sizes.clone()));
    let b = thread::spawn(side(1, b_tx, b_rx, sizes));
    a.join().expect("side 0 checked every message");
    b.join().expect("side 1 checked every message");
}
