//! GPUs as NVML describes them (NCCL 2.30.7 `xml.cc:ncclTopoGetXmlFromGpu`, `nvmlwrap.cc`),
//! through `libnvidia-ml.so.1` loaded at run time. Without the library or without a GPU
//! every query returns nothing: CPU-only hosts never need it.
//!
//! What is read per GPU: PCI bus id, NVML index, compute capability, and for each NVLink
//! `l < maxNvLinks(sm)` that supports P2P and is active, the remote PCI bus id (empty or
//! unprintable → `fffffff:ffff:ff`, an NVSwitch invisible to the VM). NCCL reads the link
//! state of sm ≥ 9.0 GPUs through a field value (`NVML_FI_DEV_NVLINK_GET_STATE`); this reads
//! `nvmlDeviceGetNvLinkState` for every GPU. C2C links are not read.
//!
//! GPUDirect RDMA support is taken as present when the kernel's peer-memory module is
//! loaded (`nvidia_peermem` or the legacy `nv_peer_mem`); NCCL also accepts DMA-BUF.

use std::ffi::{c_char, c_int, c_uint, c_void};

use libloading::{Library, Symbol};

use super::fill::GpuFacts;
use super::types::{bus_id_to_i64, i64_to_bus_id};

/// `nvmlPciInfo_t` (`nvml.h`, the v3 layout).
#[repr(C)]
#[derive(Default)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

type Device = *mut c_void;

/// A loaded, initialised NVML.
struct Nvml {
    lib: Library,
}

const NVML_SUCCESS: c_int = 0;
const NVML_NVLINK_CAP_P2P_SUPPORTED: c_uint = 0;
const NVML_FEATURE_ENABLED: c_uint = 1;

impl Nvml {
    fn load() -> Option<Nvml> {
        // SAFETY: loading the NVIDIA management library runs its initialisers, which have no
        // preconditions; failure to find it is reported as an error.
        let lib = unsafe { Library::new("libnvidia-ml.so.1") }.ok()?;
        let nvml = Nvml { lib };
        // SAFETY: `nvmlInit_v2` takes no arguments and returns an nvmlReturn_t.
        let rc = unsafe { nvml.sym::<unsafe extern "C" fn() -> c_int>(b"nvmlInit_v2\0")?() };
        (rc == NVML_SUCCESS).then_some(nvml)
    }

    /// A symbol of the library.
    ///
    /// # Safety
    /// `T` must be the symbol's C signature.
    unsafe fn sym<T>(&self, name: &[u8]) -> Option<Symbol<'_, T>> {
        // SAFETY: the caller names the right type for the symbol.
        unsafe { self.lib.get::<T>(name) }.ok()
    }

    fn count(&self) -> u32 {
        let mut n: c_uint = 0;
        // SAFETY: the signature is `nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int*)`; `n`
        // is a valid out-pointer.
        let ok = unsafe {
            self.sym::<unsafe extern "C" fn(*mut c_uint) -> c_int>(b"nvmlDeviceGetCount_v2\0")
                .map(|f| f(&mut n) == NVML_SUCCESS)
        };
        if ok == Some(true) { n } else { 0 }
    }

    fn handle(&self, index: u32) -> Option<Device> {
        let mut d: Device = std::ptr::null_mut();
        // SAFETY: `nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t*)`; `d` is a valid
        // out-pointer.
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, *mut Device) -> c_int>(b"nvmlDeviceGetHandleByIndex_v2\0")?(
                index, &mut d,
            )
        };
        (rc == NVML_SUCCESS && !d.is_null()).then_some(d)
    }

    fn pci(&self, d: Device) -> Option<String> {
        let mut info = PciInfo::default();
        // SAFETY: `nvmlDeviceGetPciInfo_v3(nvmlDevice_t, nvmlPciInfo_t*)`; `info` has the
        // v3 layout and is writable.
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(Device, *mut PciInfo) -> c_int>(b"nvmlDeviceGetPciInfo_v3\0")?(d, &mut info)
        };
        (rc == NVML_SUCCESS).then(|| c_str(&info.bus_id))
    }

    fn cc(&self, d: Device) -> Option<i32> {
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        // SAFETY: `nvmlDeviceGetCudaComputeCapability(nvmlDevice_t, int*, int*)`; both
        // out-pointers are valid.
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(Device, *mut c_int, *mut c_int) -> c_int>(
                b"nvmlDeviceGetCudaComputeCapability\0",
            )?(d, &mut major, &mut minor)
        };
        (rc == NVML_SUCCESS).then_some(major * 10 + minor)
    }

    fn nvlink_remote(&self, d: Device, link: u32) -> Option<String> {
        let mut cap: c_uint = 0;
        // SAFETY: `nvmlDeviceGetNvLinkCapability(nvmlDevice_t, unsigned int link,
        // nvmlNvLinkCapability_t, unsigned int*)`; `cap` is a valid out-pointer.
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(Device, c_uint, c_uint, *mut c_uint) -> c_int>(
                b"nvmlDeviceGetNvLinkCapability\0",
            )?(d, link, NVML_NVLINK_CAP_P2P_SUPPORTED, &mut cap)
        };
        if rc != NVML_SUCCESS || cap == 0 {
            return None;
        }
        let mut state: c_uint = 0;
        // SAFETY: `nvmlDeviceGetNvLinkState(nvmlDevice_t, unsigned int, nvmlEnableState_t*)`.
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> c_int>(b"nvmlDeviceGetNvLinkState\0")?(
                d, link, &mut state,
            )
        };
        if rc != NVML_SUCCESS || state != NVML_FEATURE_ENABLED {
            return None;
        }
        let mut info = PciInfo::default();
        // SAFETY: `nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t, unsigned int,
        // nvmlPciInfo_t*)`; `info` has the v3 layout the v2 call fills.
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(Device, c_uint, *mut PciInfo) -> c_int>(
                b"nvmlDeviceGetNvLinkRemotePciInfo_v2\0",
            )?(d, link, &mut info)
        };
        if rc != NVML_SUCCESS {
            return None;
        }
        let b = c_str(&info.bus_id);
        if b.is_empty() || !b.chars().all(|c| c.is_ascii_graphic()) {
            Some("fffffff:ffff:ff".to_string())
        } else {
            Some(b.to_ascii_lowercase())
        }
    }
}

fn c_str(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `maxNvLinks` by compute capability (`ncclTopoGetXmlFromGpu`).
fn max_nvlinks(sm: i32) -> u32 {
    match sm {
        s if s < 60 => 0,
        s if s < 70 => 4,
        s if s < 80 => 6,
        s if s < 90 => 12,
        _ => 18,
    }
}

/// Whether the kernel offers GPU peer memory to RDMA devices.
fn gdr_available() -> bool {
    [
        "/sys/module/nvidia_peermem",
        "/sys/module/nv_peer_mem",
        "/sys/kernel/mm/memory_peers/nv_mem/version",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}

/// Every GPU NVML reports: (bus id in `dddd:bb:dd.f` form, facts). Empty without NVML.
pub fn gpus() -> Vec<(String, GpuFacts)> {
    let Some(nvml) = Nvml::load() else {
        return Vec::new();
    };
    let gdr = gdr_available();
    let mut out = Vec::new();
    for i in 0..nvml.count() {
        let Some(d) = nvml.handle(i) else { continue };
        let Some(bus) = nvml.pci(d).and_then(|b| bus_id_to_i64(&b)).map(i64_to_bus_id) else {
            continue;
        };
        let sm = nvml.cc(d).unwrap_or(0);
        let mut nvlinks: Vec<(String, u32, String)> = Vec::new();
        for l in 0..max_nvlinks(sm) {
            if let Some(t) = nvml.nvlink_remote(d, l) {
                match nvlinks.iter_mut().find(|(x, _, _)| *x == t) {
                    Some(e) => e.1 += 1,
                    None => nvlinks.push((t, 1, String::new())),
                }
            }
        }
        out.push((
            bus,
            GpuFacts {
                dev: i as i32,
                sm,
                gdr,
                nvlinks,
                c2c: None,
            },
        ));
    }
    out
}
