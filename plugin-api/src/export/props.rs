//! Conversion of [`sdk::Properties`](crate::sdk::Properties) to each version's
//! `ncclNetProperties_vN_t`, and the interner that keeps the borrowed C strings
//! (`name`, `pciPath`) alive for the life of the process.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::Mutex;

use crate::abi;
use crate::sdk::{NetError, NetResult, Properties};

/// Interns strings as leaked, NUL-terminated C strings: each distinct string is
/// allocated once and lives for the rest of the process (NCCL keeps the
/// `name`/`pciPath` pointers of `getProperties` indefinitely).
#[derive(Debug)]
pub struct CStrInterner {
    map: Mutex<BTreeMap<String, &'static CStr>>,
}

impl Default for CStrInterner {
    fn default() -> Self {
        Self::new()
    }
}

impl CStrInterner {
    /// An empty interner (usable in a `static`).
    pub const fn new() -> Self {
        CStrInterner {
            map: Mutex::new(BTreeMap::new()),
        }
    }

    /// The interned copy of `s`; interior NUL bytes are dropped.
    pub fn intern(&self, s: &str) -> &'static CStr {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get(s) {
            return c;
        }
        let c: &'static CStr = Box::leak(CString::new(s.replace('\0', "")).unwrap_or_default().into_boxed_c_str());
        map.insert(s.to_owned(), c);
        c
    }

    /// Number of distinct strings interned so far.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// `true` if nothing was interned yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The borrowed C strings of one properties struct.
#[derive(Debug, Clone, Copy)]
pub struct PropStrings {
    /// `name` (never NULL).
    pub name: *mut c_char,
    /// `pciPath` (NULL for a virtual device).
    pub pci_path: *mut c_char,
}

impl PropStrings {
    /// Interns `p.name` and `p.pci_path`.
    pub fn of(p: &Properties, interner: &CStrInterner) -> Self {
        PropStrings {
            name: interner.intern(&p.name).as_ptr() as *mut c_char,
            pci_path: p
                .pci_path
                .as_deref()
                .map_or(std::ptr::null_mut(), |s| interner.intern(s).as_ptr() as *mut c_char),
        }
    }
}

/// The `vProps` of device `dev` with room for `K` entries: `p.vdevs`, or `[dev]` for a
/// physical device (empty `vdevs`), as NCCL's own plugins report.
fn vdevs<const K: usize>(p: &Properties, dev: usize) -> NetResult<(c_int, [c_int; K])> {
    let mut devs = [0; K];
    if p.vdevs.is_empty() {
        devs[0] = c_int::try_from(dev).map_err(|_| NetError::InvalidArgument(format!("device {dev} too large")))?;
        return Ok((1, devs));
    }
    if p.vdevs.len() > K {
        return Err(NetError::InvalidUsage(format!(
            "device {dev} fuses {} devices, this plugin API version holds at most {K}",
            p.vdevs.len()
        )));
    }
    devs[..p.vdevs.len()].copy_from_slice(&p.vdevs);
    Ok((p.vdevs.len() as c_int, devs))
}

/// `ncclNetProperties_v6_t` of `p`.
pub fn props_v6(p: &Properties, s: PropStrings) -> abi::ncclNetProperties_v6_t {
    abi::ncclNetProperties_v6_t {
        name: s.name,
        pciPath: s.pci_path,
        guid: p.guid,
        ptrSupport: p.ptr_support,
        speed: p.speed,
        port: p.port,
        latency: p.latency,
        maxComms: p.max_comms,
        maxRecvs: p.max_recvs,
    }
}

/// `ncclNetProperties_v7_t` of `p`.
pub fn props_v7(p: &Properties, s: PropStrings) -> abi::ncclNetProperties_v7_t {
    abi::ncclNetProperties_v7_t {
        name: s.name,
        pciPath: s.pci_path,
        guid: p.guid,
        ptrSupport: p.ptr_support,
        speed: p.speed,
        port: p.port,
        latency: p.latency,
        maxComms: p.max_comms,
        maxRecvs: p.max_recvs,
        netDeviceType: p.net_device_type,
        netDeviceVersion: p.net_device_version,
    }
}

/// `ncclNetProperties_v8_t` of `p`.
pub fn props_v8(p: &Properties, s: PropStrings) -> abi::ncclNetProperties_v8_t {
    abi::ncclNetProperties_v8_t {
        name: s.name,
        pciPath: s.pci_path,
        guid: p.guid,
        ptrSupport: p.ptr_support,
        regIsGlobal: p.reg_is_global as c_int,
        speed: p.speed,
        port: p.port,
        latency: p.latency,
        maxComms: p.max_comms,
        maxRecvs: p.max_recvs,
        netDeviceType: p.net_device_type,
        netDeviceVersion: p.net_device_version,
    }
}

/// `ncclNetProperties_v9_t` (= v10) of device `dev`. Errors if `vdevs` has more than 4 entries.
pub fn props_v9(p: &Properties, dev: usize, s: PropStrings) -> NetResult<abi::ncclNetProperties_v9_t> {
    let (ndevs, devs) = vdevs::<{ abi::NCCL_NET_MAX_DEVS_PER_NIC_V11 }>(p, dev)?;
    Ok(abi::ncclNetProperties_v9_t {
        name: s.name,
        pciPath: s.pci_path,
        guid: p.guid,
        ptrSupport: p.ptr_support,
        regIsGlobal: p.reg_is_global as c_int,
        forceFlush: p.force_flush as c_int,
        speed: p.speed,
        port: p.port,
        latency: p.latency,
        maxComms: p.max_comms,
        maxRecvs: p.max_recvs,
        netDeviceType: p.net_device_type,
        netDeviceVersion: p.net_device_version,
        vProps: abi::ncclNetVDeviceProps_v9_t { ndevs, devs },
        maxP2pBytes: p.max_p2p_bytes,
        maxCollBytes: p.max_coll_bytes,
    })
}

/// `ncclNetProperties_v11_t` of device `dev`. Errors if `vdevs` has more than 4 entries.
pub fn props_v11(p: &Properties, dev: usize, s: PropStrings) -> NetResult<abi::ncclNetProperties_v11_t> {
    let v9 = props_v9(p, dev, s)?;
    Ok(abi::ncclNetProperties_v11_t {
        name: v9.name,
        pciPath: v9.pciPath,
        guid: v9.guid,
        ptrSupport: v9.ptrSupport,
        regIsGlobal: v9.regIsGlobal,
        forceFlush: v9.forceFlush,
        speed: v9.speed,
        port: v9.port,
        latency: v9.latency,
        maxComms: v9.maxComms,
        maxRecvs: v9.maxRecvs,
        netDeviceType: v9.netDeviceType,
        netDeviceVersion: v9.netDeviceVersion,
        vProps: v9.vProps,
        maxP2pBytes: v9.maxP2pBytes,
        maxCollBytes: v9.maxCollBytes,
        maxMultiRequestSize: p.max_multi_request_size,
    })
}

/// `ncclNetProperties_v12_t` of device `dev`. Errors if `vdevs` has more than 8 entries.
pub fn props_v12(p: &Properties, dev: usize, s: PropStrings) -> NetResult<abi::ncclNetProperties_v12_t> {
    let (ndevs, devs) = vdevs::<{ abi::NCCL_NET_MAX_DEVS_PER_NIC_V12 }>(p, dev)?;
    Ok(abi::ncclNetProperties_v12_t {
        name: s.name,
        pciPath: s.pci_path,
        guid: p.guid,
        ptrSupport: p.ptr_support,
        regIsGlobal: p.reg_is_global as c_int,
        forceFlush: p.force_flush as c_int,
        speed: p.speed,
        port: p.port,
        latency: p.latency,
        maxComms: p.max_comms,
        maxRecvs: p.max_recvs,
        netDeviceType: p.net_device_type,
        netDeviceVersion: p.net_device_version,
        vProps: abi::ncclNetVDeviceProps_v12_t { ndevs, devs },
        maxP2pBytes: p.max_p2p_bytes,
        maxCollBytes: p.max_coll_bytes,
        maxMultiRequestSize: p.max_multi_request_size,
        railId: p.rail_id,
        planeId: p.plane_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Properties {
        Properties {
            name: "eth0".into(),
            pci_path: Some("/sys/devices/pci0000:00/0000:00:03.0".into()),
            guid: 0x1234,
            ptr_support: abi::NCCL_PTR_HOST | abi::NCCL_PTR_CUDA,
            reg_is_global: true,
            force_flush: true,
            speed: 100_000,
            port: 2,
            latency: 1.5,
            max_comms: 1000,
            max_recvs: 8,
            max_p2p_bytes: 1 << 35,
            max_coll_bytes: 1 << 33,
            max_multi_request_size: 4,
            rail_id: 3,
            plane_id: 1,
            ..Properties::default()
        }
    }

    #[test]
    fn interner_keeps_one_copy_per_string() {
        let i = CStrInterner::new();
        let a = i.intern("eth0");
        let b = i.intern("eth0");
        assert_eq!(a.as_ptr(), b.as_ptr());
        assert_eq!(a.to_str().unwrap(), "eth0");
        assert_eq!(i.intern("a\0b").to_str().unwrap(), "ab");
        assert_eq!(i.len(), 2);
    }

    #[test]
    fn every_version_carries_its_fields() {
        let i = CStrInterner::new();
        let p = sample();
        let s = PropStrings::of(&p, &i);
        // SAFETY: interned strings are valid NUL-terminated C strings forever.
        let name = |ptr: *mut c_char| unsafe { CStr::from_ptr(ptr) }.to_str().unwrap().to_owned();

        let v6 = props_v6(&p, s);
        assert_eq!(
            (name(v6.name), v6.guid, v6.speed, v6.port, v6.maxRecvs),
            ("eth0".into(), 0x1234, 100_000, 2, 8)
        );
        assert_eq!(name(v6.pciPath), "/sys/devices/pci0000:00/0000:00:03.0");
        let v7 = props_v7(&p, s);
        assert_eq!((v7.netDeviceType, v7.netDeviceVersion), (abi::NCCL_NET_DEVICE_HOST, 0));
        let v8 = props_v8(&p, s);
        assert_eq!((v8.regIsGlobal, v8.latency, v8.maxComms), (1, 1.5, 1000));
        let v9 = props_v9(&p, 5, s).unwrap();
        assert_eq!((v9.forceFlush, v9.maxP2pBytes, v9.maxCollBytes), (1, 1 << 35, 1 << 33));
        assert_eq!(
            v9.vProps,
            abi::ncclNetVDeviceProps_v9_t {
                ndevs: 1,
                devs: [5, 0, 0, 0]
            }
        );
        let v11 = props_v11(&p, 5, s).unwrap();
        assert_eq!((v11.maxMultiRequestSize, v11.maxP2pBytes), (4, 1 << 35));
        let v12 = props_v12(&p, 5, s).unwrap();
        assert_eq!(
            (v12.railId, v12.planeId, v12.maxMultiRequestSize, v12.maxCollBytes),
            (3, 1, 4, 1 << 33)
        );
        assert_eq!(v12.vProps.ndevs, 1);
    }

    #[test]
    fn vdevs_fit_or_fail_per_version() {
        let i = CStrInterner::new();
        let mut p = sample();
        p.pci_path = None;
        p.vdevs = vec![0, 1, 2, 3, 4, 5];
        let s = PropStrings::of(&p, &i);
        assert!(s.pci_path.is_null());
        assert!(matches!(props_v9(&p, 0, s), Err(NetError::InvalidUsage(_))));
        assert!(matches!(props_v11(&p, 0, s), Err(NetError::InvalidUsage(_))));
        let v12 = props_v12(&p, 0, s).unwrap();
        assert_eq!(v12.vProps.ndevs, 6);
        assert_eq!(v12.vProps.devs, [0, 1, 2, 3, 4, 5, 0, 0]);
        p.vdevs = vec![0; 9];
        assert!(props_v12(&p, 0, s).is_err());
        p.vdevs = vec![7, 9];
        assert_eq!(
            props_v9(&p, 0, s).unwrap().vProps,
            abi::ncclNetVDeviceProps_v9_t {
                ndevs: 2,
                devs: [7, 9, 0, 0]
            }
        );
    }
}
