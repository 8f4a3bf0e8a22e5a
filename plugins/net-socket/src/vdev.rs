//! Virtual devices: several interfaces fused into one device (`makeVDevice`, ncclNet
//! v9+), as the runtime's NIC fusion asks for them (NCCL 2.30.7 `src/graph/topo.cc`,
//! `NCCL_NET_MERGE_LEVEL` / `NCCL_NET_FORCE_MERGE`).
//!
//! Properties follow NCCL's IB plugin for merged devices (`src/transport/net_ib/init.cc`
//! `ncclIbMakeVDeviceInternal`, `ncclIbGetProperties`): the name is the members' names
//! joined by `+`, the speed their sum, `vProps` lists the members, and every other field
//! is the first member's. Virtual devices are numbered after the interfaces, in the
//! order they were made, and live as long as the plugin.
//!
//! Striping: a listen on a virtual device opens one listen socket per member interface;
//! the handle carries the first in its usual place and the others at
//! [`STRIPE_OFF`]. The connector sends the control stream to the first member and data
//! stream *i* to member `i mod n`, so a connection has at least one data stream per
//! member ([`stripe_streams`]) and the chunks of every large message, dealt to the data
//! streams in turn, cross every member interface.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use ferroccl_plugin_api::sdk::{NetError, NetResult, Properties};

use crate::dev::Iface;
use crate::proto::{HANDLE_LEN, MAX_STREAMS};

/// Most members of one virtual device (`NCCL_NET_MAX_DEVS_PER_NIC`).
pub const MAX_MEMBERS: usize = 8;
/// Where the handle carries the other members' listen addresses: `[80]` count, `[81]`
/// family (4/6), then per member IPv4 `ip[4] port[2]` or IPv6 `ip[16] port[2] scope[4]`
/// (so at most 7 IPv4 or 2 IPv6 extra members).
pub const STRIPE_OFF: usize = 80;
const V4_LEN: usize = 6;
const V6_LEN: usize = 22;

/// How many extra member addresses of `family` (4/6) fit in the handle.
pub fn max_extra(v6: bool) -> usize {
    (HANDLE_LEN - STRIPE_OFF - 2) / if v6 { V6_LEN } else { V4_LEN }
}

/// Checks a `makeVDevice` request against the `nphys` interfaces `ifaces`: at least one
/// member, each a physical device, no repeats, at most [`MAX_MEMBERS`], one address
/// family, and few enough for the handle.
pub fn check_members(devs: &[i32], ifaces: &[Iface]) -> NetResult<Vec<usize>> {
    if devs.is_empty() {
        return Err(NetError::InvalidUsage(
            "NET/FerrocclSocket : Can't make virtual NIC with 0 devices".into(),
        ));
    }
    if devs.len() > MAX_MEMBERS {
        return Err(NetError::InvalidUsage(format!(
            "NET/FerrocclSocket : virtual NIC of {} devices (at most {MAX_MEMBERS})",
            devs.len()
        )));
    }
    let mut out: Vec<usize> = Vec::with_capacity(devs.len());
    for &d in devs {
        let Some(u) = usize::try_from(d).ok().filter(|&u| u < ifaces.len()) else {
            return Err(NetError::InvalidUsage(format!(
                "NET/FerrocclSocket : Cannot use physical device {d}, max {}",
                ifaces.len()
            )));
        };
        if out.contains(&u) {
            return Err(NetError::InvalidUsage(format!(
                "NET/FerrocclSocket : device {d} listed twice in a virtual NIC"
            )));
        }
        out.push(u);
    }
    let v6 = ifaces[out[0]].ip.is_ipv6();
    if out.iter().any(|&u| ifaces[u].ip.is_ipv6() != v6) {
        return Err(NetError::InvalidUsage(
            "NET/FerrocclSocket : Attempted to merge interfaces of different address families".into(),
        ));
    }
    if out.len() - 1 > max_extra(v6) {
        return Err(NetError::InvalidUsage(format!(
            "NET/FerrocclSocket : a virtual NIC of {} IPv{} interfaces does not fit the connection handle (at most {})",
            out.len(),
            if v6 { 6 } else { 4 },
            max_extra(v6) + 1
        )));
    }
    Ok(out)
}

/// The properties of a virtual device from its members' (in member order).
pub fn properties(members: &[Properties], devs: &[usize]) -> Properties {
    let mut p = members[0].clone();
    p.name = members.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join("+");
    p.speed = members.iter().map(|m| m.speed).sum();
    p.vdevs = devs.iter().map(|&d| d as i32).collect();
    p
}

/// Data streams and helper threads of a connection on an `n`-member virtual device:
/// at least one stream per member, a multiple of `n` (so each member carries an equal
/// share), at most [`MAX_STREAMS`]; at least one helper thread.
pub fn stripe_streams(nstreams: usize, nthreads: usize, n: usize) -> (usize, usize) {
    let n = n.max(1);
    let streams = (nstreams.max(1).div_ceil(n) * n).min(MAX_STREAMS / n * n);
    (streams, nthreads.clamp(1, streams))
}

/// Writes the other members' listen addresses into the handle (after the listener's
/// part was encoded).
pub fn encode_stripe(h: &mut [u8; HANDLE_LEN], extra: &[SocketAddr]) -> NetResult<()> {
    let v6 = extra.first().is_some_and(SocketAddr::is_ipv6);
    if extra.len() > max_extra(v6) || extra.iter().any(|a| a.is_ipv6() != v6) {
        return Err(NetError::Internal(format!(
            "NET/FerrocclSocket: {} member addresses do not fit the handle",
            extra.len()
        )));
    }
    h[STRIPE_OFF] = extra.len() as u8;
    h[STRIPE_OFF + 1] = if v6 { 6 } else { 4 };
    let mut o = STRIPE_OFF + 2;
    for a in extra {
        match a {
            SocketAddr::V4(a) => {
                h[o..o + 4].copy_from_slice(&a.ip().octets());
                h[o + 4..o + 6].copy_from_slice(&a.port().to_le_bytes());
                o += V4_LEN;
            }
            SocketAddr::V6(a) => {
                h[o..o + 16].copy_from_slice(&a.ip().octets());
                h[o + 16..o + 18].copy_from_slice(&a.port().to_le_bytes());
                h[o + 18..o + 22].copy_from_slice(&a.scope_id().to_le_bytes());
                o += V6_LEN;
            }
        }
    }
    Ok(())
}

/// Reads the addresses [`encode_stripe`] wrote (none for a physical device's handle,
/// whose bytes there are zero).
///
/// # Errors
/// `InvalidArgument` for a count or family that does not fit.
pub fn decode_stripe(h: &[u8; HANDLE_LEN]) -> NetResult<Vec<SocketAddr>> {
    let n = h[STRIPE_OFF] as usize;
    if n == 0 {
        return Ok(Vec::new());
    }
    let v6 = match h[STRIPE_OFF + 1] {
        4 => false,
        6 => true,
        f => {
            return Err(NetError::InvalidArgument(format!(
                "NET/FerrocclSocket: handle lists {n} member addresses of family byte {f} (expected 4 or 6)"
            )));
        }
    };
    if n > max_extra(v6) {
        return Err(NetError::InvalidArgument(format!(
            "NET/FerrocclSocket: handle lists {n} member addresses (at most {})",
            max_extra(v6)
        )));
    }
    let mut o = STRIPE_OFF + 2;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let port = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
        if v6 {
            let ip: [u8; 16] = h[o..o + 16].try_into().expect("16 bytes");
            let scope = u32::from_le_bytes(h[o + 18..o + 22].try_into().expect("4 bytes"));
            out.push(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port(o + 16),
                0,
                scope,
            )));
            o += V6_LEN;
        } else {
            let ip = Ipv4Addr::new(h[o], h[o + 1], h[o + 2], h[o + 3]);
            out.push(SocketAddr::V4(SocketAddrV4::new(ip, port(o + 4))));
            o += V4_LEN;
        }
    }
    Ok(out)
}

/// The `(ip, scope id)` a member interface listens on.
pub fn listen_addr(i: &Iface) -> (IpAddr, u32) {
    (i.ip, i.scope_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifs(ips: &[&str]) -> Vec<Iface> {
        ips.iter()
            .enumerate()
            .map(|(k, ip)| Iface {
                name: format!("eth{k}"),
                ip: ip.parse().unwrap(),
                scope_id: 0,
            })
            .collect()
    }

    #[test]
    fn members_are_checked() {
        let v4 = ifs(&["10.0.0.1", "10.0.1.1", "fe80::1"]);
        assert_eq!(check_members(&[1, 0], &v4).unwrap(), vec![1, 0]);
        for bad in [&[][..], &[0, 0], &[0, 3], &[-1], &[0, 2]] {
            assert!(check_members(bad, &v4).is_err(), "{bad:?}");
        }
        let many: Vec<String> = (0..9).map(|k| format!("10.0.{k}.1")).collect();
        let many = ifs(&many.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(check_members(&[0, 1, 2, 3, 4, 5, 6, 7], &many).is_ok());
        assert!(check_members(&[0, 1, 2, 3, 4, 5, 6, 7, 8], &many).is_err());
        let v6 = ifs(&["fe80::1", "fe80::2", "fe80::3", "fe80::4"]);
        assert!(check_members(&[0, 1, 2], &v6).is_ok());
        assert!(check_members(&[0, 1, 2, 3], &v6).is_err());
    }

    #[test]
    fn stripe_addresses_round_trip_through_the_handle() {
        let mut h = [0u8; HANDLE_LEN];
        assert!(decode_stripe(&h).unwrap().is_empty());
        let v4: Vec<SocketAddr> = (1..=7)
            .map(|k| format!("10.0.{k}.2:{}", 4000 + k).parse().unwrap())
            .collect();
        encode_stripe(&mut h, &v4).unwrap();
        assert_eq!(decode_stripe(&h).unwrap(), v4);
        let v6: Vec<SocketAddr> = vec![
            SocketAddr::V6(SocketAddrV6::new("fe80::2".parse().unwrap(), 5000, 0, 3)),
            SocketAddr::V6(SocketAddrV6::new("fe80::3".parse().unwrap(), 5001, 0, 4)),
        ];
        let mut h = [0u8; HANDLE_LEN];
        encode_stripe(&mut h, &v6).unwrap();
        assert_eq!(decode_stripe(&h).unwrap(), v6);
        h[STRIPE_OFF + 1] = 9;
        assert!(decode_stripe(&h).is_err());
        let mut h = [0u8; HANDLE_LEN];
        let too_many: Vec<SocketAddr> = (1..=8).map(|k| format!("10.0.{k}.2:1").parse().unwrap()).collect();
        assert!(encode_stripe(&mut h, &too_many).is_err());
    }

    #[test]
    fn streams_cover_every_member() {
        assert_eq!(stripe_streams(0, 0, 2), (2, 1));
        assert_eq!(stripe_streams(3, 2, 2), (4, 2));
        assert_eq!(stripe_streams(64, 16, 3), (63, 16));
        assert_eq!(stripe_streams(1, 1, 4), (4, 1));
    }

    #[test]
    fn properties_follow_the_ib_plugins_merged_devices() {
        let a = Properties {
            name: "eth0".into(),
            speed: 10_000,
            guid: 7,
            vdevs: vec![0],
            ..Properties::default()
        };
        let b = Properties {
            name: "eth1".into(),
            speed: 25_000,
            guid: 8,
            vdevs: vec![1],
            ..Properties::default()
        };
        let v = properties(&[a, b], &[0, 1]);
        assert_eq!(
            (v.name.as_str(), v.speed, v.guid, v.vdevs),
            ("eth0+eth1", 35_000, 7, vec![0, 1])
        );
    }
}
