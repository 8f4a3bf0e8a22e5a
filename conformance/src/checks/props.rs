//! Properties of every device (or of `--device N`).

use ferroccl::plugin::net::Properties;

use crate::cx::Cx;
use crate::outcome::Res;
use crate::registry::Registry;
use crate::watch::Call;
use crate::{ensure, fail};

pub(crate) fn register(r: &mut Registry) {
    r.add(
        "props.name",
        "§1.2",
        "getProperties succeeds and name is a non-empty string",
        name,
    )
    .nccl("src/transport/net.cc sendProxySetup/recvProxySetup: getProperties(netDev, &props)");
    r.add(
        "props.pci_path",
        "§1.2",
        "pciPath is NULL (virtual device) or an existing sysfs path",
        pci_path,
    )
    .nccl("src/graph/topo.cc: the NIC is placed in the topology from props.pciPath");
    r.add("props.speed", "§1.2", "speed (Mbps) is > 0", speed)
        .nccl("src/graph/topo.cc: the NIC's bandwidth in the topology comes from props.speed");
    r.add(
        "props.ptr_support",
        "§1.2",
        "ptrSupport includes NCCL_PTR_HOST (0x1) and no unknown bits",
        ptr_support,
    )
    .nccl("src/transport/net.cc sendProxySetup: useDmaBuf needs props.ptrSupport & NCCL_PTR_DMABUF; host FIFOs are registered as NCCL_PTR_HOST");
    r.add("props.max_comms", "§1.2", "maxComms >= 1", max_comms)
        .nccl("src/transport/net.cc: one sendComm/recvComm pair per channel and peer connection");
    r.add(
        "props.max_recvs",
        "§1.2",
        "maxRecvs >= 1 (and <= 8, NCCL_NET_IB_MAX_RECVS)",
        max_recvs,
    )
    .nccl("src/transport/net.cc recvProxyProgress: up to props.maxRecvs subs share one irecv");
    r.add(
        "props.latency",
        "§1.2",
        "latency (us) is finite, >= 0 and below 1 s",
        latency,
    )
    .advisory()
    .nccl("src/graph/topo.cc: props.latency feeds the topology's NIC latency");
    r.add(
        "props.device_type",
        "§1.5",
        "netDeviceType is HOST (0), or UNPACK (1) with netDeviceVersion 7",
        device_type,
    )
    .nccl("src/plugin/net.cc: netDeviceType must be NCCL_NET_DEVICE_HOST, or UNPACK with netDeviceVersion 7");
    r.add(
        "props.max_bytes",
        "§1.2",
        "maxP2pBytes and maxCollBytes are > 0 and <= 2^40 (NCCL_MAX_NET_SIZE_BYTES)",
        max_bytes,
    )
    .since(9)
    .nccl("src/transport/net.cc sendProxySetup: maxP2pBytes <= 0 or > NCCL_MAX_NET_SIZE_BYTES is an error");
    r.add("props.multi_request", "§1.2", "maxMultiRequestSize >= 1", multi_request)
        .since(11)
        .nccl("src/plugin/net.cc: v11+ maxMultiRequestSize (v6..v10 adapters assume 1)");
    r.add(
        "props.rail_plane",
        "§1.2",
        "railId and planeId are -1 (undefined) or >= 0",
        rail_plane,
    )
    .since(12)
    .advisory()
    .nccl("src/plugin/net/net_v12.cc: railId/planeId passed through to the topology");
    r.add(
        "props.guid",
        "§1.2",
        "devices on different NICs report different guids (two ports of one NIC share one)",
        guid,
    )
    .advisory()
    .nccl("src/graph/topo.cc: NICs with the same guid are ports of one NIC");
}

fn each(cx: &mut Cx, f: impl Fn(usize, &Properties) -> Res) -> Res {
    for dev in cx.devices.clone() {
        let p = cx.call(Call::GetProperties, &format!("getProperties({dev})"), |n| {
            n.properties(dev)
        })?;
        f(dev, &p)?;
    }
    Ok(())
}

fn name(cx: &mut Cx, _: u64) -> Res {
    each(cx, |d, p| {
        ensure!(
            !p.name.is_empty(),
            "props.name is a non-empty string",
            "device {d}: name is empty (or NULL)"
        );
        Ok(())
    })
}

fn pci_path(cx: &mut Cx, _: u64) -> Res {
    each(cx, |d, p| {
        if let Some(path) = &p.pci_path {
            ensure!(
                std::path::Path::new(path).exists(),
                "pciPath is NULL or an existing path (NCCL reads the PCI topology from it)",
                "device {d}: pciPath {path:?} does not exist"
            );
        }
        Ok(())
    })
}

fn speed(cx: &mut Cx, _: u64) -> Res {
    each(cx, |d, p| {
        ensure!(
            p.speed > 0,
            "speed > 0 (Mbps; NCCL's bandwidth model divides by it)",
            "device {d}: speed = {}",
            p.speed
        );
        Ok(())
    })
}

fn ptr_support(cx: &mut Cx, _: u64) -> Res {
    each(cx, |d, p| {
        ensure!(
            p.ptr_support & 1 != 0,
            "ptrSupport includes NCCL_PTR_HOST (0x1)",
            "device {d}: ptrSupport = {:#x}",
            p.ptr_support
        );
        ensure!(
            p.ptr_support & !0x7 == 0,
            "ptrSupport only uses HOST|CUDA|DMABUF (0x7)",
            "device {d}: ptrSupport = {:#x}",
            p.ptr_support
        );
        Ok(())
    })
}

fn max_comms(cx: &mut Cx, _: u64) -> Res {
    each(cx, |d, p| {
        ensure!(
            p.max_comms >= 1,
            "maxComms >= 1",
            "device {d}: maxComms = {}",
            p.max_comms
        );
        Ok(())
    })
}

fn max_recvs(cx: &mut Cx, _: u64) -> Res {
    each(cx, |d, p| {
        ensure!(
            (1..=8).contains(&p.max_recvs),
            "1 <= maxRecvs <= 8",
            "device {d}: maxRecvs = {}",
            p.max_recvs
        );
        Ok(())
    })
}

fn latency(cx: &mut Cx, _: u64) -> Res {
    each(cx, |d, p| {
        ensure!(
            p.latency.is_finite() && p.latency >= 0.0 && p.latency < 1e6,
            "0 <= latency < 1e6 us",
            "device {d}: latency = {}",
            p.latency
        );
        Ok(())
    })
}

fn device_type(cx: &mut Cx, _: u64) -> Res {
    each(cx, |d, p| match (p.net_device_type, p.net_device_version) {
        (0, _) | (1, 7) => Ok(()),
        (t, v) => Err(fail!(
            "netDeviceType HOST (0), or UNPACK (1) with version 7; anything else makes NCCL skip the plugin",
            "device {d}: netDeviceType = {t}, netDeviceVersion = {v}"
        )),
    })
}

fn max_bytes(cx: &mut Cx, _: u64) -> Res {
    each(cx, |d, p| {
        let lim = 1usize << 40;
        ensure!(
            p.max_p2p_bytes > 0 && p.max_p2p_bytes <= lim,
            "0 < maxP2pBytes <= 2^40",
            "device {d}: maxP2pBytes = {}",
            p.max_p2p_bytes
        );
        ensure!(
            p.max_coll_bytes > 0 && p.max_coll_bytes <= lim,
            "0 < maxCollBytes <= 2^40",
            "device {d}: maxCollBytes = {}",
            p.max_coll_bytes
        );
        Ok(())
    })
}

fn multi_request(cx: &mut Cx, _: u64) -> Res {
    each(cx, |d, p| {
        ensure!(
            p.max_multi_request_size >= 1,
            "maxMultiRequestSize >= 1",
            "device {d}: maxMultiRequestSize = {}",
            p.max_multi_request_size
        );
        Ok(())
    })
}

fn rail_plane(cx: &mut Cx, _: u64) -> Res {
    each(cx, |d, p| {
        ensure!(
            p.rail_id >= -1 && p.plane_id >= -1,
            "railId/planeId are -1 or >= 0",
            "device {d}: railId {}, planeId {}",
            p.rail_id,
            p.plane_id
        );
        Ok(())
    })
}

fn guid(cx: &mut Cx, _: u64) -> Res {
    let mut seen: Vec<(usize, Properties)> = Vec::new();
    for dev in 0..cx.ndev {
        let p = cx.call(Call::GetProperties, &format!("getProperties({dev})"), |n| {
            n.properties(dev)
        })?;
        for (other, q) in &seen {
            let same_nic = match (&p.pci_path, &q.pci_path) {
                (Some(a), Some(b)) => a.rsplit_once('.').map(|x| x.0) == b.rsplit_once('.').map(|x| x.0),
                _ => false,
            };
            ensure!(
                q.guid != p.guid || same_nic,
                "different NICs report different guids",
                "devices {other} ({}) and {dev} ({}) both report guid {:#x}",
                q.name,
                p.name,
                p.guid
            );
        }
        seen.push((dev, p));
    }
    Ok(())
}
