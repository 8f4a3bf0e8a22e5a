//! Virtual devices over loopback: two addresses of `lo` (127.0.0.1, 127.0.0.2) as two
//! devices, fused by `makeVDevice`; a connection on the virtual device moves data intact
//! and has data streams on both members' addresses.

mod common;

use std::time::Instant;

use common::*;
use ferroccl_plugin_api::sdk::{CommConfig, Handle, Net};
use nccl_net_socket::dev::Iface;
use nccl_net_socket::{Config, RecvComm, SendComm, SocketNet, vdev};

fn two_lo() -> SocketNet {
    let cfg = Config::from_lookup(|n| match n {
        "NCCL_SOCKET_NTHREADS" => Some("0".into()),
        _ => None,
    });
    let ifs = ["127.0.0.1", "127.0.0.2"]
        .iter()
        .enumerate()
        .map(|(k, ip)| Iface {
            name: format!("lo{k}"),
            ip: ip.parse().unwrap(),
            scope_id: 0,
        })
        .collect();
    SocketNet::with_interfaces(cfg, ifs)
}

fn pair_on(net: &SocketNet, dev: usize, handle: &mut Handle) -> (SendComm, RecvComm) {
    let mut l = net.listen(&(), dev, handle).unwrap();
    let (mut s, mut r) = (None, None);
    let t0 = Instant::now();
    while s.is_none() || r.is_none() {
        assert!(t0.elapsed() < BOUND, "connect/accept did not finish");
        if s.is_none() {
            s = net.connect(&(), dev, handle, &CommConfig::default()).unwrap();
        }
        if r.is_none() {
            r = net.accept(&mut l).unwrap();
        }
    }
    net.close_listen(l).unwrap();
    (s.unwrap(), r.unwrap())
}

/// Established TCP connections whose local end is `127.0.0.2:port` (`/proc/net/tcp`).
fn established_on_127_0_0_2(port: u16) -> usize {
    let want = format!("0200007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1] == want && f[3] == "01"
        })
        .count()
}

#[test]
fn a_virtual_device_fuses_two_addresses_and_stripes_its_streams() {
    let net = two_lo();
    assert_eq!(net.devices().unwrap(), 2);
    // Bad requests are refused and make nothing.
    assert!(net.make_vdevice(&[]).is_err());
    assert!(net.make_vdevice(&[0, 0]).is_err());
    assert!(net.make_vdevice(&[0, 5]).is_err());
    assert_eq!(net.devices().unwrap(), 2);
    let v = net.make_vdevice(&[0, 1]).unwrap();
    assert_eq!(v, 2);
    assert_eq!(net.devices().unwrap(), 3);
    let p = net.properties(v).unwrap();
    let (p0, p1) = (net.properties(0).unwrap(), net.properties(1).unwrap());
    assert_eq!(p.name, "lo0+lo1");
    assert_eq!(p.speed, p0.speed + p1.speed);
    assert_eq!(p.vdevs, vec![0, 1]);
    assert_eq!(p0.vdevs, vec![0]);

    let mut handle: Handle = [0; 128];
    let (mut s, mut r) = pair_on(&net, v, &mut handle);
    let stripe = vdev::decode_stripe(&handle).unwrap();
    assert_eq!(stripe.len(), 1);
    assert_eq!(stripe[0].ip().to_string(), "127.0.0.2");
    // NCCL_SOCKET_NTHREADS=0 would mean no data streams; a virtual device has one per member.
    assert_eq!(
        established_on_127_0_0_2(stripe[0].port()),
        1,
        "one data stream on the second member"
    );
    for (i, size) in [1usize, 100_000, 4 << 20].into_iter().enumerate() {
        let mut src = pattern(i as u64 + 9, size);
        let mut dst = vec![0u8; size];
        let rr = post(|| net.irecv(&mut r, &[rb(&mut dst, 1)]));
        let sr = post(|| net.isend(&mut s, buf(&mut src), 1, None));
        let got = wait_all(&net, &mut [sr, rr]);
        assert_eq!(got[1], vec![size]);
        assert!(dst == src, "data intact for {size} bytes");
    }
    net.close_send(s).unwrap();
    net.close_recv(r).unwrap();
    // A physical device's handle carries no stripe.
    let mut h0: Handle = [0; 128];
    let (s0, r0) = pair_on(&net, 0, &mut h0);
    assert!(vdev::decode_stripe(&h0).unwrap().is_empty());
    net.close_send(s0).unwrap();
    net.close_recv(r0).unwrap();
}
