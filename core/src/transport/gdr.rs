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

/// The INFO line for a decision about GPU `gpu` and net device `dev` of plugin
/// `net` (NCCL prints `GPU Direct RDMA Enabled for ...` / `... Disabled for ...`
/// in `ncclTopoCheckGdr`); `None` for host memory.
pub fn describe(path: &MemPath, gpu: usize, net: &str, dev: usize, read: bool) -> Option<String> {
    let dir = if read { "send" } else { "receive" };
    match path {
        MemPath::Host => None,
        MemPath::Direct { dmabuf, mode, flush } => Some(format!(
            "GPU Direct RDMA Enabled for GPU {gpu} / NET/{net}/{dev} ({dir}, read {}, mode {}{}{})",
            i32::from(read),
            match mode {
                GdrMode::Pci => "PCI",
                _ => "Default",
            },
            if *dmabuf { ", DMA-BUF" } else { "" },
            if *flush { ", flush" } else { "" },
        )),
        MemPath::Staged(why) => Some(format!(
            "GPU Direct RDMA Disabled for GPU {gpu} / NET/{net}/{dev} ({dir}: {why}); staging through host memory"
        )),
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

    #[test]
    fn info_lines_as_nccl() {
        let on = decide(DEV, true, &inputs(NCCL_PTR_CUDA, GdrMode::Default));
        assert_eq!(
            describe(&on, 0, "IB", 1, true).unwrap(),
            "GPU Direct RDMA Enabled for GPU 0 / NET/IB/1 (send, read 1, mode Default)"
        );
        let off = decide(DEV, false, &inputs(NCCL_PTR_HOST, GdrMode::Default));
        assert_eq!(
            describe(&off, 0, "Socket", 0, false).unwrap(),
            "GPU Direct RDMA Disabled for GPU 0 / NET/Socket/0 (receive: the plugin does not support \
             NCCL_PTR_CUDA); staging through host memory"
        );
        assert_eq!(describe(&MemPath::Host, 0, "IB", 0, true), None);
    }
}
