//! Real TCP on loopback through the `Net` trait (rlib API).

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use ferroccl_plugin_api::sdk::{Buf, CommConfig, CommMut, Handle, Net, NetError, PtrType, TestStatus};
use nccl_net_socket::proto::{self, HandleInfo};

const SIZES: &[usize] = &[0, 1, 127, 128, 129, 4095, 65535, 65536, 65537, 4 << 20, 64 << 20];

fn sizes_roundtrip(vars: &[(&str, &str)], sizes: &[usize]) {
    let net = net_with(vars);
    let (mut s, mut r) = pair(&net);
    for (i, &size) in sizes.iter().enumerate() {
        let mut src = pattern(i as u64 + 1, size);
        // A receive buffer larger than the message: the true size is reported.
        let mut dst = vec![0u8; size + 3];
        let rr = post(|| net.irecv(&mut r, &[rb(&mut dst, 7)]));
        let sr = post(|| net.isend(&mut s, buf(&mut src), 7, None));
        let got = wait_all(&net, &mut [sr, rr]);
        assert_eq!(got[0], vec![size], "send size");
        assert_eq!(got[1], vec![size], "received size for {size}");
        assert!(dst[..size] == src[..], "data mismatch for size {size}");
        assert_eq!(&dst[size..], &[0, 0, 0], "bytes past the message untouched");
    }
    net.close_send(s).unwrap();
    net.close_recv(r).unwrap();
}

#[test]
fn sizes_default_streams() {
    sizes_roundtrip(&[], SIZES);
}

/// The automatic choice on machines with more than 2 cores: 2 helper threads × 1
/// socket (`NCCL_NSOCKS_PERTHREAD` left automatic), whatever this machine has.
#[test]
fn sizes_two_helper_threads() {
    let net = common::net_with(&[("NCCL_SOCKET_NTHREADS", "2")]);
    assert_eq!((net.config().nthreads, net.config().nstreams), (2, 2));
    sizes_roundtrip(&[("NCCL_SOCKET_NTHREADS", "2")], SIZES);
}

#[test]
fn sizes_control_stream_only() {
    sizes_roundtrip(&[("NCCL_SOCKET_NTHREADS", "0")], SIZES);
}

#[test]
fn sizes_many_streams_small_tasks_no_inline() {
    sizes_roundtrip(
        &[
            ("NCCL_SOCKET_NTHREADS", "3"),
            ("NCCL_NSOCKS_PERTHREAD", "2"),
            ("NCCL_SOCKET_MIN_TASKSIZE", "1000"),
            ("NCCL_SOCKET_INLINE", "0"),
        ],
        &[0, 1, 129, 4095, 65537, 4 << 20],
    );
}

#[test]
fn grouped_receive_with_permuted_tags() {
    let net = net();
    let (mut s, mut r) = pair(&net);
    for round in 0..4u64 {
        let n = 8;
        let sizes: Vec<usize> = (0..n)
            .map(|i| [0, 5, 128, 129, 70_000, 300_000, 1, 4096][(i + round as usize) % 8])
            .collect();
        let tags: Vec<i32> = (0..n as i32).map(|i| 100 + i * 3).collect();
        let mut srcs: Vec<Vec<u8>> = (0..n).map(|i| pattern(round * 100 + i as u64, sizes[i])).collect();
        let mut dsts: Vec<Vec<u8>> = sizes.iter().map(|&sz| vec![0u8; sz + 10]).collect();
        let rbs: Vec<_> = dsts.iter_mut().zip(&tags).map(|(d, &t)| rb(d, t)).collect();
        let mut reqs = vec![post(|| net.irecv(&mut r, &rbs))];
        // Send in a permuted order.
        let order: Vec<usize> = (0..n).map(|i| (i * 5 + round as usize) % n).collect();
        for &i in &order {
            reqs.push(post(|| net.isend(&mut s, buf(&mut srcs[i]), tags[i], None)));
        }
        let got = wait_all(&net, &mut reqs);
        assert_eq!(got[0], sizes, "grouped receive reports per-buffer sizes");
        for i in 0..n {
            assert!(
                dsts[i][..sizes[i]] == srcs[i][..],
                "round {round} buffer {i} (tag {})",
                tags[i]
            );
        }
    }
}

#[test]
fn thirty_two_requests_in_flight_tested_in_any_order() {
    let net = net();
    let (mut s, mut r) = pair(&net);
    let size = 100_000;
    let mut srcs: Vec<Vec<u8>> = (0..32).map(|i| pattern(i, size + i as usize)).collect();
    let mut dsts: Vec<Vec<u8>> = (0..32).map(|i| vec![0u8; size + i as usize]).collect();
    let mut rreqs = Vec::new();
    for d in dsts.iter_mut() {
        rreqs.push(
            net.irecv(&mut r, &[rb(d, 0)])
                .unwrap()
                .expect("32 receives are accepted"),
        );
    }
    let mut extra = vec![0u8; 8];
    assert!(
        net.irecv(&mut r, &[rb(&mut extra, 0)]).unwrap().is_none(),
        "33rd receive gets a NULL request"
    );
    let mut sreqs = Vec::new();
    for src in srcs.iter_mut() {
        sreqs.push(
            net.isend(&mut s, buf(src), 0, None)
                .unwrap()
                .expect("32 sends are accepted"),
        );
    }
    // Test in reverse posting order.
    rreqs.reverse();
    sreqs.reverse();
    let got = wait_all(&net, &mut rreqs);
    wait_all(&net, &mut sreqs);
    for (i, g) in got.iter().rev().enumerate() {
        assert_eq!(g, &vec![size + i]);
        assert!(dsts[i] == srcs[i], "message {i}");
    }
}

#[test]
fn send_side_accepts_32_times_max_recvs() {
    let net = net();
    let (mut s, _r) = pair(&net);
    let mut b = [1u8; 4];
    let mut reqs = Vec::new();
    for _ in 0..256 {
        reqs.push(
            net.isend(&mut s, buf(&mut b), 0, None)
                .unwrap()
                .expect("256 sends are accepted"),
        );
    }
    assert!(
        net.isend(&mut s, buf(&mut b), 0, None).unwrap().is_none(),
        "257th send gets a NULL request"
    );
    net.close_send(s).unwrap();
}

#[test]
fn truncation_is_invalid_usage() {
    let net = net();
    let (mut s, mut r) = pair(&net);
    let mut src = pattern(1, 1000);
    let mut dst = vec![0u8; 999];
    let mut rr = post(|| net.irecv(&mut r, &[rb(&mut dst, 0)]));
    let _sr = post(|| net.isend(&mut s, buf(&mut src), 0, None));
    let e = wait(&net, &mut rr).unwrap_err();
    assert!(
        matches!(e, NetError::InvalidUsage(ref m) if m.contains("truncated")),
        "{e}"
    );
}

#[test]
fn stray_connections_do_not_disturb_the_real_one() {
    let net = net();
    let mut handle: Handle = [0; 128];
    let mut l = net.listen(&(), 0, &mut handle).unwrap();
    let addr = HandleInfo::decode(&handle).unwrap().addr;
    // Garbage, a silent connection, one that closes mid-handshake, and a wrong magic.
    let mut garbage = TcpStream::connect(addr).unwrap();
    garbage.write_all(&[0xEE; 100]).unwrap();
    let _silent = TcpStream::connect(addr).unwrap();
    let mut short = TcpStream::connect(addr).unwrap();
    short.write_all(b"hello").unwrap();
    drop(short);
    let mut wrong = TcpStream::connect(addr).unwrap();
    let hello = proto::Hello {
        magic: 0x1234,
        sock_type: proto::SOCKET_TYPE_NET,
        version: proto::PROTO_VERSION,
        conn_id: 1,
        index: 0,
        nstreams: 2,
    };
    wrong.write_all(&hello.encode()).unwrap();
    assert!(net.accept(&mut l).unwrap().is_none(), "strays alone never make a comm");
    let (mut s, mut r) = (None, None);
    let t0 = Instant::now();
    while s.is_none() || r.is_none() {
        assert!(t0.elapsed() < BOUND);
        if s.is_none() {
            s = net.connect(&(), 0, &mut handle, &CommConfig::default()).unwrap();
        }
        if r.is_none() {
            r = net.accept(&mut l).unwrap();
        }
    }
    let (mut s, mut r) = (s.unwrap(), r.unwrap());
    let mut src = pattern(9, 1 << 20);
    let mut dst = vec![0u8; 1 << 20];
    let mut reqs = vec![
        post(|| net.irecv(&mut r, &[rb(&mut dst, 0)])),
        post(|| net.isend(&mut s, buf(&mut src), 0, None)),
    ];
    wait_all(&net, &mut reqs);
    assert!(dst == src);
    assert!(net.accept(&mut l).unwrap().is_none());
}

#[test]
fn concurrent_connects_on_one_listen_comm() {
    let net = net();
    let mut handle: Handle = [0; 128];
    let mut l = net.listen(&(), 0, &mut handle).unwrap();
    let mut handles = vec![handle; 4];
    let mut sends: Vec<Option<_>> = (0..4).map(|_| None).collect();
    let mut recvs = Vec::new();
    let t0 = Instant::now();
    while sends.iter().any(|s| s.is_none()) || recvs.len() < 4 {
        assert!(t0.elapsed() < BOUND);
        for (i, h) in handles.iter_mut().enumerate() {
            if sends[i].is_none() {
                sends[i] = net.connect(&(), 0, h, &CommConfig::default()).unwrap();
            }
        }
        if let Some(r) = net.accept(&mut l).unwrap() {
            recvs.push(r);
        }
    }
    // Each send comm reaches exactly one receive comm: send a distinct byte on each.
    let mut seen = Vec::new();
    for (i, s) in sends.iter_mut().enumerate() {
        let mut b = [i as u8; 1];
        let mut req = post(|| net.isend(s.as_mut().unwrap(), buf(&mut b), 0, None));
        wait(&net, &mut req).unwrap();
    }
    for r in recvs.iter_mut() {
        let mut b = [0xFFu8; 1];
        let mut req = post(|| net.irecv(r, &[rb(&mut b, 0)]));
        wait(&net, &mut req).unwrap();
        seen.push(b[0]);
    }
    seen.sort();
    assert_eq!(seen, [0, 1, 2, 3]);
}

#[test]
fn sixty_four_comms_at_once() {
    let net = net();
    let mut pairs: Vec<_> = (0..64).map(|_| pair(&net)).collect();
    let size = 300_000;
    let mut srcs: Vec<Vec<u8>> = (0..64).map(|i| pattern(i, size)).collect();
    let mut dsts: Vec<Vec<u8>> = (0..64).map(|_| vec![0u8; size]).collect();
    let mut reqs = Vec::new();
    for (i, (s, r)) in pairs.iter_mut().enumerate() {
        reqs.push(post(|| net.irecv(r, &[rb(&mut dsts[i], 0)])));
        reqs.push(post(|| net.isend(s, buf(&mut srcs[i]), 0, None)));
    }
    wait_all(&net, &mut reqs);
    assert!(srcs == dsts);
    drop(reqs);
    for (s, r) in pairs {
        net.close_send(s).unwrap();
        net.close_recv(r).unwrap();
    }
}

#[test]
fn close_with_requests_in_flight_frees_everything() {
    let net = net();
    let (mut s, mut r) = pair(&net);
    let mut srcs: Vec<Vec<u8>> = (0..32).map(|i| pattern(i, 1 << 20)).collect();
    let mut dsts: Vec<Vec<u8>> = (0..16).map(|_| vec![0u8; 1 << 20]).collect();
    let mut sreqs: Vec<_> = srcs
        .iter_mut()
        .map(|b| post(|| net.isend(&mut s, buf(b), 0, None)))
        .collect();
    let rreqs: Vec<_> = dsts
        .iter_mut()
        .map(|b| post(|| net.irecv(&mut r, &[rb(b, 0)])))
        .collect();
    let _ = net.test(&mut sreqs[0]);
    let t0 = Instant::now();
    net.close_recv(r).unwrap();
    net.close_send(s).unwrap();
    assert!(t0.elapsed() < BOUND);
    // Abandoned requests fail cleanly instead of touching freed resources.
    let e = net.test(&mut sreqs[31]).unwrap_err();
    assert!(
        matches!(e, NetError::Internal(_) | NetError::Remote(_) | NetError::System(_)),
        "{e}"
    );
    drop(rreqs);
}

#[test]
fn receiver_closing_makes_sender_fail_not_hang() {
    let net = net();
    let (mut s, r) = pair(&net);
    net.close_recv(r).unwrap();
    let mut src = pattern(3, 64 << 20);
    let t0 = Instant::now();
    let res = net.isend(&mut s, buf(&mut src), 0, None).and_then(|req| match req {
        Some(mut req) => wait(&net, &mut req).map(|_| ()),
        None => Ok(()),
    });
    assert!(res.is_err(), "a 64 MiB send to a closed peer must fail");
    assert!(t0.elapsed() < BOUND);
}

#[test]
fn properties_and_registration() {
    let net = net();
    let p = net.properties(0).unwrap();
    assert_eq!(p.name, "lo");
    assert_eq!(p.pci_path, None);
    assert_eq!(p.speed, 10_000);
    assert_eq!(p.max_recvs, 8);
    assert_eq!(p.ptr_support, ferroccl_plugin_api::abi::NCCL_PTR_HOST);
    assert!(p.reg_is_global);
    assert!(net.properties(1).is_err());
    let (mut s, mut r) = pair(&net);
    let mut b = [0u8; 64];
    let mr = net.reg_mr(CommMut::Send(&mut s), buf(&mut b), PtrType::Host).unwrap();
    net.dereg_mr(CommMut::Send(&mut s), mr).unwrap();
    let e = net
        .reg_mr(CommMut::Recv(&mut r), Buf::new(b.as_mut_ptr(), 64), PtrType::Cuda)
        .unwrap_err();
    assert!(e.to_string().contains("NCCL_PTR_HOST"), "{e}");
    assert!(net.iflush(&mut r, &[rb(&mut b, 0)]).unwrap().is_none());
    assert!(matches!(net.irecv(&mut r, &[]), Err(NetError::InvalidArgument(_))));
}

#[test]
fn connect_to_nothing_fails_after_retries() {
    let net = net_with(&[("NCCL_SOCKET_RETRY_CNT", "2"), ("NCCL_SOCKET_RETRY_SLEEP_MSEC", "10")]);
    let mut handle: Handle = [0; 128];
    let l = net.listen(&(), 0, &mut handle).unwrap();
    net.close_listen(l).unwrap();
    let t0 = Instant::now();
    let e = loop {
        match net.connect(&(), 0, &mut handle, &CommConfig::default()) {
            Ok(None) => assert!(t0.elapsed() < BOUND),
            Ok(Some(_)) => panic!("connected to a closed listener"),
            Err(e) => break e,
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(e.to_string().contains("retries"), "{e}");
    let _ = TestStatus::Pending;
}
