//! The one place that decides how a user buffer meets the network: registered as
//! host memory, registered as device memory (GPUDirect RDMA: `regMr` with
//! `NCCL_PTR_CUDA`, or `regMrDmaBuf`), or staged through host memory.
//!
//! NCCL decides this per connection in `src/transport/net.cc` (`sendSetup` /
//! `recvSetup` call `ncclTopoCheckGdr(topo, rank, netId, read, &useGdr)` with
//! `read = 1` on the send side; `sendProxySetup` / `recvProxySetup` set
//! `useDmaBuf = useGdr && dmaBufSupport && (props.ptrSupport & NCCL_PTR_DMABUF)`;
//! `recvSetup` asks `ncclTopoNeedFlush` whether received device data needs an
//! `iflush`), and in `src/graph/paths.cc` (`ncclTopoCheckGdr`: the NIC
//! (`ptrSupport & NCCL_PTR_CUDA`, NCCL's `net.gdrSupport`) and the GPU must both
//! support it; reads (sends) need `NCCL_NET_GDR_READ`, on by default from
//! compute capability 8.0 or with NVLink; the GPU–NIC path must be no farther
//! than `NCCL_NET_GDR_LEVEL`, default PXB (P2C with `NCCL_NET_GDR_C2C`)). That
//! topology part is [`crate::topo::paths::check_gdr`]; its answer is an input
//! here. `NCCL_DMABUF_ENABLE` (default 1) and the driver's DMA-BUF support
//! (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`) give NCCL's `dmaBufSupport`
//! (`src/init.cc`).
//!
//! What each answer means for ferroccl:
//! * [`MemPath::Host`]: host memory the CPU may touch; registered with
//!   `NCCL_PTR_HOST` when the operation registers user memory (as today);
//! * [`MemPath::Direct`]: device memory the plugin reads and writes itself;
//!   registered with `NCCL_PTR_CUDA` (or through DMA-BUF), with an `iflush`
//!   after receives when `flush`;
//! * [`MemPath::Staged`]: device memory the plugin cannot reach; never
//!   registered, and the executor copies it through host memory
//!   (`coll::mem`) so steps go through the host FIFOs.

use ferroccl_kernels::MemorySpace;
use ferroccl_plugin_api::abi::{NCCL_PTR_CUDA, NCCL_PTR_DMABUF};

use crate::topo::paths::GdrMode;
use crate::topo::types::PathType;

/// Everything [`decide`] depends on besides the buffer's memory space, for one
/// connection (one plugin device, one direction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GdrInputs {
    /// The plugin device's `ptrSupport` bits (`NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF`).
    pub ptr_support: i32,
    /// `ncclTopoCheckGdr` for this rank's GPU and the connection's NIC
    /// ([`crate::topo::paths::check_gdr`] with `read` = send side), which
    /// applies `NCCL_NET_GDR_LEVEL`, `NCCL_NET_GDR_READ`, `NCCL_NET_GDR_C2C`
    /// and the GPU's own GPUDirect support. `Disable` when the topology has no
    /// GPU for this rank.
    pub topo: GdrMode,
    /// `NCCL_DMABUF_ENABLE` (default 1).
    pub dmabuf_enable: bool,
    /// The driver exports DMA-BUF handles for the buffer's GPU.
    pub driver_dmabuf: bool,
    /// The GPU's compute capability, `major * 10 + minor` (decides the flush).
    pub cuda_cc: i32,
    /// The plugin device's `forceFlush` property.
    pub force_flush: bool,
}

/// Why device memory is staged instead of registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageReason {
    /// The plugin device does not advertise `NCCL_PTR_CUDA`.
    NoPtrCuda,
    /// `ncclTopoCheckGdr` said no: distance beyond `NCCL_NET_GDR_LEVEL`,
    /// `NCCL_NET_GDR_READ=0` on a send, or a GPU without GPUDirect RDMA.
    Topology,
}

impl std::fmt::Display for StageReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StageReason::NoPtrCuda => "the plugin does not support NCCL_PTR_CUDA",
            StageReason::Topology => "topology or NCCL_NET_GDR_LEVEL/NCCL_NET_GDR_READ",
        })
    }
}

/// How a buffer meets the network (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemPath {
    /// Host memory: `regMr(NCCL_PTR_HOST)`.
    Host,
    /// GPUDirect RDMA: `regMr(NCCL_PTR_CUDA)`, or `regMrDmaBuf` when `dmabuf`.
    Direct {
        /// Register through DMA-BUF.
        dmabuf: bool,
        /// `ncclTopoGdrMode` (Default, or PCI on C2C systems).
        mode: GdrMode,
        /// Received data needs an `iflush` before the GPU reads it
        /// (`ncclTopoNeedFlush`: GPUs before compute capability 9.0, or the
        /// plugin's `forceFlush`). Always false on the send side.
        flush: bool,
    },
    /// Device memory copied through host memory; never registered.
    Staged(StageReason),
}

/// Decides how a buffer in `space` meets the network on a connection
/// described by `inp`; `read` is the send side (the NIC reads the buffer).
/// Host-accessible memory (pageable, pinned, managed) is always [`MemPath::Host`].
pub fn decide(space: MemorySpace, read: bool, inp: &GdrInputs) -> MemPath {
    if space.host_accessible() {
        return MemPath::Host;
    }
    // paths.cc ncclTopoCheckGdr: "Check that both the NIC and GPUs support it";
    // the NIC's gdrSupport is ptrSupport & NCCL_PTR_CUDA.
    if inp.ptr_support & NCCL_PTR_CUDA == 0 {
        return MemPath::Staged(StageReason::NoPtrCuda);
    }
    if inp.topo == GdrMode::Disable {
        return MemPath::Staged(StageReason::Topology);
    }
    MemPath::Direct {
        // net.cc: useDmaBuf = useGdr && dmaBufSupport && (ptrSupport & NCCL_PTR_DMABUF).
        dmabuf: inp.dmabuf_enable && inp.driver_dmabuf && inp.ptr_support & NCCL_PTR_DMABUF != 0,
        mode: inp.topo,
        // net.cc recvSetup: flush only with GDR, as ncclTopoNeedFlush says
        // (forceFlush, or compute capability below 9.0).
        flush: !read && (inp.force_flush || inp.cuda_cc < 90),
    }
}

/// What the GPUDirect decision needs to know about a GPU (NCCL reads these from
/// its topology's GPU node: `gdrSupport`, `cudaCompCap`, the PCI position; and
/// `dmaBufSupport` from the driver in `src/init.cc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFacts {
    /// Device ordinal.
    pub ordinal: usize,
    /// Compute capability, `major * 10 + minor`.
    pub cuda_cc: i32,
    /// The GPU supports GPUDirect RDMA.
    pub gdr: bool,
    /// The driver exports DMA-BUF handles for the GPU's memory.
    pub dmabuf: bool,
    /// sysfs PCI path of the GPU; `None` when unknown.
    pub pci_path: Option<String>,
}

impl GpuFacts {
    /// NCCL's `busId` of the GPU as printed in its GDR lines (`%lx` of the
    /// `dddd:bb:dd.f` id read as one hex number, e.g. `3b000`); the ordinal
    /// when the PCI position is unknown.
    pub fn bus_id(&self) -> u64 {
        self.pci_path
            .as_deref()
            .and_then(|p| p.rsplit('/').next())
            .and_then(|bdf| u64::from_str_radix(&bdf.replace([':', '.'], ""), 16).ok())
            .unwrap_or(self.ordinal as u64)
    }
}

/// The facts of GPU `ordinal`: a mock GPU's ([`crate::mockdev`]) when a test
/// declared one, else the CUDA driver's (`cuDeviceGetAttribute`,
/// `cuDeviceGetPCIBusId` and the sysfs path of that bus id).
///
/// Errors: text naming why the driver could not answer (no CUDA, bad ordinal).
pub fn gpu_facts(ordinal: usize) -> Result<GpuFacts, String> {
    if let Some(g) = crate::mockdev::gpu(ordinal) {
        return Ok(GpuFacts {
            ordinal,
            cuda_cc: g.cuda_cc,
            gdr: g.gdr,
            dmabuf: g.dmabuf,
            pci_path: g.pci_path,
        });
    }
    #[cfg(feature = "cuda")]
    {
        let a = ferroccl_kernels::cuda::device_attrs(ordinal).map_err(|e| e.to_string())?;
        let sys = std::path::Path::new("/sys/bus/pci/devices").join(&a.bus_id);
        let pci_path = std::fs::canonicalize(&sys)
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        Ok(GpuFacts {
            ordinal,
            cuda_cc: a.cuda_cc,
            gdr: a.gdr,
            dmabuf: a.dmabuf,
            pci_path,
        })
    }
    #[cfg(not(feature = "cuda"))]
    Err(format!("GPU {ordinal}: ferroccl was built without its `cuda` feature"))
}

/// A DMA-BUF descriptor for `[ptr, ptr + len)` of device memory and the offset
/// of `ptr` in it (`cuMemGetHandleForAddressRange`, or the mock's stand-in).
///
/// Errors: text naming why none could be made.
pub fn dmabuf_fd(ptr: *const u8, len: usize) -> Result<(std::os::fd::OwnedFd, u64), String> {
    if let Some(r) = crate::mockdev::dmabuf_fd(ptr, len) {
        return r.map_err(|e| format!("mock DMA-BUF: {e}"));
    }
    #[cfg(feature = "cuda")]
    return ferroccl_kernels::cuda::dmabuf_fd_for(ptr, len).map_err(|e| e.to_string());
    #[cfg(not(feature = "cuda"))]
    Err("DMA-BUF needs the `cuda` feature".into())
}

/// The bridges above a PCI device in a sysfs path
/// (`/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0` → root `pci0000:00`,
/// chain `[0000:00:01.0, 0000:01:00.0]`, the device last).
fn pci_chain(path: &str) -> Option<(&str, Vec<&str>)> {
    let mut it = path.split('/').filter(|c| !c.is_empty());
    let root = it.find(|c| c.starts_with("pci"))?;
    let chain: Vec<&str> = it.collect();
    (!chain.is_empty()).then_some((root, chain))
}

/// The PCI path type between a GPU and a NIC from their sysfs paths, as NCCL's
/// topology would compute it (`src/graph/paths.cc`): `PIX` when they hang off
/// the same bridge, `PXB` when they share a bridge farther up (no host bridge
/// crossed), `PHB` when they only share the root complex (or either position
/// is unknown: NCCL attaches such a device to its CPU), `SYS` across root
/// complexes (NCCL: across CPU sockets; NUMA affinity is not read here).
pub fn pci_distance(gpu: Option<&str>, nic: Option<&str>) -> PathType {
    let (Some((gr, g)), Some((nr, n))) = (gpu.and_then(pci_chain), nic.and_then(pci_chain)) else {
        return PathType::Phb;
    };
    if gr != nr {
        return PathType::Sys;
    }
    let (gp, np) = (&g[..g.len() - 1], &n[..n.len() - 1]);
    if !gp.is_empty() && gp == np {
        return PathType::Pix;
    }
    let common = gp.iter().zip(np).take_while(|(a, b)| a == b).count();
    if common > 0 { PathType::Pxb } else { PathType::Phb }
}

/// The parameters of the decision that come from the environment, read once
/// per communicator: `NCCL_NET_GDR_LEVEL`, `NCCL_NET_GDR_READ`,
/// `NCCL_NET_GDR_C2C`, `NCCL_DMABUF_ENABLE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GdrParams {
    /// `NCCL_NET_GDR_LEVEL` (`None`: PXB).
    pub level: Option<PathType>,
    /// `NCCL_NET_GDR_READ` (-2: default, on from compute capability 8.0).
    pub read: i64,
    /// `NCCL_DMABUF_ENABLE`.
    pub dmabuf_enable: bool,
}

impl Default for GdrParams {
    fn default() -> Self {
        GdrParams {
            level: None,
            read: -2,
            dmabuf_enable: true,
        }
    }
}

impl GdrParams {
    /// Reads the parameters from the process configuration.
    ///
    /// Errors: [`crate::error::Error::Config`] for an out-of-range `NCCL_DMABUF_ENABLE`.
    pub fn from_config(topo: &crate::topo::TopoParams) -> Result<GdrParams, crate::error::Error> {
        let cfg = crate::config::Config::global();
        Ok(GdrParams {
            level: topo.net_gdr_level,
            read: topo.net_gdr_read,
            dmabuf_enable: crate::config::IntParamExt::get(&crate::config::params::DMABUF_ENABLE, cfg)? == 1,
        })
    }
}

/// The topology half of `ncclTopoCheckGdr` for a GPU and a NIC at `nic_pci`:
/// the GPU must support GPUDirect RDMA; a send (`read`) needs
/// `NCCL_NET_GDR_READ` (default: compute capability 8.0 or later; NVLink is not
/// modelled for a buffer's GPU); the PCI distance must not exceed
/// `NCCL_NET_GDR_LEVEL` (default PXB). Returns the mode with the distance and
/// the level compared (for NCCL's INFO line).
pub fn topo_check(gpu: &GpuFacts, nic_pci: Option<&str>, read: bool, p: &GdrParams) -> (GdrMode, PathType, PathType) {
    let level = p.level.unwrap_or(PathType::Pxb);
    let distance = pci_distance(gpu.pci_path.as_deref(), nic_pci);
    let off = (GdrMode::Disable, distance, level);
    if !gpu.gdr {
        return off;
    }
    if read && (p.read == 0 || (p.read < 0 && gpu.cuda_cc < 80)) {
        return off;
    }
    if distance > level {
        return off;
    }
    (GdrMode::Default, distance, level)
}

/// NCCL's INFO line of `ncclTopoCheckGdr` (`src/graph/paths.cc`) for GPU `gpu`
/// and net device `dev`: `GPU Direct RDMA Enabled for GPU 3b000 / HCA 0
/// (distance 4 <= 5), read 1` or `... Disabled ... (distance 9 > 5)`.
pub fn nccl_gdr_line(
    gpu: &GpuFacts,
    dev: usize,
    read: bool,
    mode: GdrMode,
    distance: PathType,
    level: PathType,
) -> String {
    let (d, l) = (distance as i32, level as i32);
    if mode == GdrMode::Disable {
        if distance > level {
            format!(
                "GPU Direct RDMA Disabled for GPU {:x} / HCA {dev} (distance {d} > {l})",
                gpu.bus_id()
            )
        } else {
            format!(
                "GPU Direct RDMA Disabled for GPU {:x} / HCA {dev} ({})",
                gpu.bus_id(),
                if gpu.gdr {
                    "NCCL_NET_GDR_READ: no GPUDirect reads"
                } else {
                    "the GPU does not support GPUDirect RDMA"
                }
            )
        }
    } else {
        format!(
            "GPU Direct RDMA Enabled for GPU {:x} / HCA {dev} (distance {d} <= {l}), read {}",
            gpu.bus_id(),
            i32::from(read)
        )
    }
}

#[cfg(test)]
mod tests {
    use ferroccl_plugin_api::abi::NCCL_PTR_HOST;

    use super::*;

    const DEV: MemorySpace = MemorySpace::Device {
        ordinal: 0,
        managed: false,
    };

    fn inputs(ptr_support: i32, topo: GdrMode) -> GdrInputs {
        GdrInputs {
            ptr_support,
            topo,
            dmabuf_enable: true,
            driver_dmabuf: true,
            cuda_cc: 90,
            force_flush: false,
        }
    }

    /// Host-accessible memory never depends on the plugin or the topology.
    #[test]
    fn host_memory_is_host_whatever_the_plugin() {
        for space in [
            MemorySpace::Host { pinned: false },
            MemorySpace::Host { pinned: true },
            MemorySpace::Device {
                ordinal: 1,
                managed: true,
            },
        ] {
            for ptr in [NCCL_PTR_HOST, NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF] {
                for topo in [GdrMode::Disable, GdrMode::Default, GdrMode::Pci] {
                    for read in [false, true] {
                        assert_eq!(
                            decide(space, read, &inputs(ptr, topo)),
                            MemPath::Host,
                            "{space} {ptr} {topo:?}"
                        );
                    }
                }
            }
        }
    }

    /// The whole table for device memory: plugin bits × topology answer ×
    /// DMA-BUF enable × driver DMA-BUF × side × compute capability × forceFlush.
    #[test]
    fn device_memory_decision_table() {
        for ptr in 0..8 {
            for topo in [GdrMode::Disable, GdrMode::Default, GdrMode::Pci] {
                for (dmabuf_enable, driver_dmabuf) in [(false, false), (false, true), (true, false), (true, true)] {
                    for read in [false, true] {
                        for cc in [70, 80, 90, 100] {
                            for force_flush in [false, true] {
                                let inp = GdrInputs {
                                    ptr_support: ptr,
                                    topo,
                                    dmabuf_enable,
                                    driver_dmabuf,
                                    cuda_cc: cc,
                                    force_flush,
                                };
                                let got = decide(DEV, read, &inp);
                                let want = if ptr & NCCL_PTR_CUDA == 0 {
                                    MemPath::Staged(StageReason::NoPtrCuda)
                                } else if topo == GdrMode::Disable {
                                    MemPath::Staged(StageReason::Topology)
                                } else {
                                    MemPath::Direct {
                                        dmabuf: dmabuf_enable && driver_dmabuf && ptr & NCCL_PTR_DMABUF != 0,
                                        mode: topo,
                                        flush: !read && (force_flush || cc < 90),
                                    }
                                };
                                assert_eq!(got, want, "{inp:?} read {read}");
                            }
                        }
                    }
                }
            }
        }
        // Spot checks of the table's meaning, as NCCL behaves.
        // A socket-like plugin (host only): always staged.
        assert_eq!(
            decide(DEV, true, &inputs(NCCL_PTR_HOST, GdrMode::Default)),
            MemPath::Staged(StageReason::NoPtrCuda)
        );
        // DMA-BUF alone is not GPUDirect (NCCL's net.gdrSupport is the CUDA bit).
        assert_eq!(
            decide(DEV, false, &inputs(NCCL_PTR_HOST | NCCL_PTR_DMABUF, GdrMode::Default)),
            MemPath::Staged(StageReason::NoPtrCuda)
        );
        // IB with peermem and DMA-BUF on Hopper: DMA-BUF preferred, no flush.
        assert_eq!(
            decide(
                DEV,
                false,
                &inputs(NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, GdrMode::Default)
            ),
            MemPath::Direct {
                dmabuf: true,
                mode: GdrMode::Default,
                flush: false
            }
        );
        // NCCL_DMABUF_ENABLE=0: plain regMr(NCCL_PTR_CUDA).
        let mut inp = inputs(NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, GdrMode::Default);
        inp.dmabuf_enable = false;
        inp.cuda_cc = 80;
        assert_eq!(
            decide(DEV, false, &inp),
            MemPath::Direct {
                dmabuf: false,
                mode: GdrMode::Default,
                flush: true
            }
        );
    }

    const ROOT0: &str = "/sys/devices/pci0000:00";

    /// PCI distances from sysfs paths, as NCCL's topology would classify them.
    #[test]
    fn pci_distance_from_sysfs_paths() {
        let p = |tail: &str| format!("{ROOT0}/{tail}");
        let gpu = p("0000:00:01.0/0000:02:00.0/0000:03:00.0/0000:04:00.0");
        // Same downstream port of a switch: one bridge between them.
        let nic_pix = p("0000:00:01.0/0000:02:00.0/0000:03:00.0/0000:04:00.1");
        // Another downstream port of the same switch: several bridges.
        let nic_pxb = p("0000:00:01.0/0000:02:00.0/0000:03:04.0/0000:05:00.0");
        // Another root port of the same root complex: through the host bridge.
        let nic_phb = p("0000:00:03.0/0000:06:00.0");
        let nic_sys = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";
        assert_eq!(pci_distance(Some(&gpu), Some(&nic_pix)), PathType::Pix);
        assert_eq!(pci_distance(Some(&gpu), Some(&nic_pxb)), PathType::Pxb);
        assert_eq!(pci_distance(Some(&gpu), Some(&nic_phb)), PathType::Phb);
        assert_eq!(pci_distance(Some(&gpu), Some(nic_sys)), PathType::Sys);
        // Unknown positions hang off the CPU.
        assert_eq!(pci_distance(None, Some(&nic_pix)), PathType::Phb);
        assert_eq!(pci_distance(Some(&gpu), None), PathType::Phb);
        assert_eq!(pci_distance(Some("lo"), Some("garbage")), PathType::Phb);
        // Two devices directly on the root complex: host bridge.
        assert_eq!(
            pci_distance(Some(&p("0000:00:02.0")), Some(&p("0000:00:03.0"))),
            PathType::Phb
        );
    }

    fn facts(cc: i32, gdr: bool, pci: &str) -> GpuFacts {
        GpuFacts {
            ordinal: 0,
            cuda_cc: cc,
            gdr,
            dmabuf: true,
            pci_path: Some(pci.to_string()),
        }
    }

    /// ncclTopoCheckGdr's rules: GPU support, NCCL_NET_GDR_READ on sends,
    /// NCCL_NET_GDR_LEVEL against the distance.
    #[test]
    fn topo_check_follows_nccl() {
        let gpu_path = format!("{ROOT0}/0000:00:01.0/0000:01:00.0");
        let nic = format!("{ROOT0}/0000:00:01.0/0000:01:00.1");
        let far = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";
        let d = GdrParams::default();
        let g80 = facts(80, true, &gpu_path);
        assert_eq!(
            topo_check(&g80, Some(&nic), true, &d),
            (GdrMode::Default, PathType::Pix, PathType::Pxb)
        );
        assert_eq!(topo_check(&g80, Some(far), false, &d).0, GdrMode::Disable);
        let sys = GdrParams {
            level: Some(PathType::Sys),
            ..d
        };
        assert_eq!(topo_check(&g80, Some(far), false, &sys).0, GdrMode::Default);
        let loc = GdrParams {
            level: Some(PathType::Loc),
            ..d
        };
        assert_eq!(
            topo_check(&g80, Some(&nic), false, &loc),
            (GdrMode::Disable, PathType::Pix, PathType::Loc)
        );
        // Reads: off before 8.0 by default, off with NCCL_NET_GDR_READ=0, forced on with 1.
        let g70 = facts(70, true, &gpu_path);
        assert_eq!(topo_check(&g70, Some(&nic), true, &d).0, GdrMode::Disable);
        assert_eq!(topo_check(&g70, Some(&nic), false, &d).0, GdrMode::Default);
        let read1 = GdrParams { read: 1, ..d };
        assert_eq!(topo_check(&g70, Some(&nic), true, &read1).0, GdrMode::Default);
        let read0 = GdrParams { read: 0, ..d };
        assert_eq!(topo_check(&g80, Some(&nic), true, &read0).0, GdrMode::Disable);
        assert_eq!(topo_check(&g80, Some(&nic), false, &read0).0, GdrMode::Default);
        // A GPU without GPUDirect RDMA.
        assert_eq!(
            topo_check(&facts(90, false, &gpu_path), Some(&nic), false, &d).0,
            GdrMode::Disable
        );
    }

    #[test]
    fn nccl_lines_and_bus_ids() {
        let g = facts(80, true, "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0");
        assert_eq!(g.bus_id(), 0x81000);
        assert_eq!(
            nccl_gdr_line(&g, 1, true, GdrMode::Default, PathType::Pxb, PathType::Pxb),
            "GPU Direct RDMA Enabled for GPU 81000 / HCA 1 (distance 5 <= 5), read 1"
        );
        assert_eq!(
            nccl_gdr_line(&g, 0, false, GdrMode::Disable, PathType::Sys, PathType::Pxb),
            "GPU Direct RDMA Disabled for GPU 81000 / HCA 0 (distance 9 > 5)"
        );
        let unknown = GpuFacts {
            pci_path: None,
            ordinal: 3,
            ..g
        };
        assert_eq!(unknown.bus_id(), 3);
    }
}
