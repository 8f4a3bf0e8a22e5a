//! The P2P transport's host-side logic (NCCL's `p2pTransport`,
//! `src/transport/p2p.cc`): which pairs of ranks it may join, and the connect
//! information that carries a FIFO in GPU memory to the peer (a CUDA IPC
//! handle, or the pointer itself within one process).
//!
//! Selection follows `p2pCanConnect` and `ncclTopoCheckP2p`
//! (`src/graph/paths.cc`): same host; both ranks drive a GPU; neither sets
//! `NCCL_P2P_DISABLE=1` (NCCL's `ncclGetLevel` then caps the level at `LOC`);
//! the GPUs' path is no farther than `NCCL_P2P_LEVEL` (default `PXB`); and the
//! driver says the devices can reach each other (`cuDeviceCanAccessPeer`, or the
//! same device). Each refusal carries its reason, logged at INFO by
//! [`P2pTransport::can_connect`] (NCCL logs "Could not enable P2P between dev …").
//!
//! A rank takes part only when its communicator binds a GPU
//! (`CommConfig::cuda_dev`, which the C API sets from the current device as
//! NCCL's `cudaGetDevice` at init): [`TransportPeer::gpu`]. Unbound ranks
//! (host processes) never use P2P.
//!
//! # Data path (NCCL's `p2pRecvSetup` / `p2pSendConnect`, Simple protocol)
//!
//! The receiver allocates the connection's FIFO slots (`NCCL_STEPS` slots of
//! the step size, page-rounded) in its GPU's memory and exports them; the
//! sender imports them and its steps are written straight there. The step
//! counters (`tail`, the FIFO entries, `head`), the state words and the
//! operation headers stay in host memory: a shared-memory transport segment
//! ([`super::shm`]) whose slots are the device memory ([`ExtSlots`]), so the
//! peer watch, the close and failure words and the checks are the SHM
//! transport's. Neither connector touches a slot with the CPU; the executor's
//! operation header of a step goes in the segment beside its slot
//! ([`super::SendConnector::hdr_slot`]), and the connectors report
//! [`super::FifoMem::Device`] so that the executor runs the steps as kernels.
//!
//! How the slots reach the sender ([`P2pMode`], NCCL's INFO lines
//! `via P2P/direct pointer`, `via P2P/CUMEM` and `via P2P/IPC`):
//! * same process: the pointer itself (the allocation is kept alive for the
//!   sender by a process-wide table, [`DIRECT`]);
//! * another process, cuMem (NCCL's `P2P_CUMEM`, its default where the driver
//!   supports it): the receiver allocates the FIFO with `cuMemCreate`
//!   (pinned, POSIX file descriptor handle type, rounded to the granularity,
//!   mapped at a reserved address with read/write access: NCCL's
//!   `ncclCuMemAlloc`), exports it (`cuMemExportToShareableHandle`) and
//!   sends the descriptor with `SCM_RIGHTS` over a Unix datagram socket the
//!   sender bound at setup and named in its connect information
//!   ([`super::ipcsock`], NCCL's `ipcsocket.cc`; NCCL's proxy carries it the
//!   same way). The sender checks the tag that came with it against the
//!   receiver's connect information, imports it
//!   (`cuMemImportFromShareableHandle`, reserve, map, set access) and unmaps
//!   and releases it when the connector drops. `NCCL_CUMEM_ENABLE` decides
//!   as NCCL's `ncclCuMemEnable` (0 off, positive on, -2 by the device's
//!   support); the receiver decides per connection and the sender follows it;
//! * another process, legacy CUDA IPC (`cuIpcGetMemHandle` /
//!   `cuIpcOpenMemHandle`, NCCL's `P2P_IPC`): when cuMem is off, unsupported,
//!   or a receiver's cuMem allocation or export fails, with an INFO line
//!   saying why (`P2P: cuMem not used (…); using legacy CUDA IPC`). A
//!   sender's failure to import a cuMem FIFO fails the connection with an
//!   error naming `NCCL_CUMEM_ENABLE=0`.
//!
//! Two processes on one GPU (the usual one-GPU test) use P2P/CUMEM or P2P/IPC:
//! the same bus id is distance `LOC`, and importing another process'
//! allocation on the same device works. NCCL itself refuses two ranks on one
//! GPU at init ("Duplicate GPU detected"); ferroccl goes beyond it here.
//!
//! Allocation, export and import go through [`FifoDevMem`]: the CUDA driver
//! ([`CudaFifoMem`]) or, for GPUs a test declared with
//! `mockdev::declare_gpu`, the mock device ([`MockFifoMem`]: a `memfd` whose
//! legacy export names the owner's descriptor, imported through
//! `/proc/<pid>/fd`, and whose cuMem export is a descriptor of it that crosses
//! the real socket; in host memory, which the executor nevertheless
//! never touches with the CPU). The executor runs a step on a device FIFO as
//! kernels on that GPU (`coll::exec`, `device_for`) when its user buffers are
//! within the GPU's reach; a step on host memory (host user buffers) instead
//! has its FIFO slots copied through host mirrors by the FIFO's GPU
//! (`coll::exec`, `stage_device_fifos`: device to host before it reads a
//! received slot, host to device before it pushes an outgoing one), the
//! CPU reducing host memory only. NCCL has no such path: its kernels reach
//! host buffers through unified addressing.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::shm::{ExtSlots, Layout, ShmTransport};
use super::{ConnRequest, Connected, Dir, PendingConn, Transport, TransportPeer, ipcsock};
use crate::error::Error;
use crate::topo::PathType;
use crate::transport::gdr::pci_distance;

/// A rank's GPU as the P2P transport sees it (NCCL's `busId` / `cudaDev` in
/// `struct ncclPeerInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GpuLoc {
    /// The device ordinal in the rank's own process.
    pub dev: usize,
    /// PCI bus id, lower case (`0000:3b:00.0`).
    pub bus_id: String,
    /// sysfs PCI path, when known (for the distance).
    pub pci_path: Option<String>,
}

/// `NCCL_P2P_DISABLE` and `NCCL_P2P_LEVEL` of one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct P2pParams {
    /// `NCCL_P2P_DISABLE=1`.
    pub disable: bool,
    /// `NCCL_P2P_LEVEL` (`None`: PXB).
    pub level: Option<PathType>,
}

impl P2pParams {
    /// Parses the two variables as NCCL's `ncclGetLevel` does: `NCCL_P2P_DISABLE`
    /// is a number (1 disables); `NCCL_P2P_LEVEL` a path type name (`LOC`, `NVL`,
    /// `PIX`, `PXB`, `PHB`, `SYS`, …) or an old-style number 0–4 (LOC, PIX,
    /// PXB, PHB, SYS).
    ///
    /// Errors: text naming the variable, the value and what is accepted.
    pub(crate) fn parse(disable: Option<&str>, level: Option<&str>) -> Result<P2pParams, String> {
        let disable = match disable.map(str::trim).filter(|s| !s.is_empty()) {
            None => false,
            Some(s) => match s.parse::<i64>() {
                Ok(v) => v == 1,
                Err(_) => return Err(format!("NCCL_P2P_DISABLE={s}: expected a number (1 disables P2P)")),
            },
        };
        let level = match level.map(str::trim).filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => Some(crate::topo::parse_level(s).ok_or_else(|| {
                format!("NCCL_P2P_LEVEL={s}: expected LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS or 0-4")
            })?),
        };
        Ok(P2pParams { disable, level })
    }

    /// The farthest path P2P may take for a pair where this rank has `self`
    /// and the peer `other` (a switch on either end applies to the pair).
    fn level_with(&self, other: &P2pParams) -> PathType {
        if self.disable || other.disable {
            return PathType::Loc;
        }
        let mine = self.level.unwrap_or(PathType::Pxb);
        let theirs = other.level.unwrap_or(PathType::Pxb);
        mine.min(theirs)
    }
}

/// How the FIFO reaches the peer once P2P is chosen (NCCL's `p2pType`:
/// `P2P/direct pointer`, `P2P/IPC`, `P2P/CUMEM`; one device shared by both
/// ranks is IPC or CUMEM too across processes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum P2pMode {
    /// Same process: the pointer itself.
    Direct,
    /// Another process: a legacy CUDA IPC handle.
    Ipc,
    /// Another process: a cuMem allocation exported as a POSIX file
    /// descriptor, sent over a Unix socket ([`super::ipcsock`]).
    Cumem,
}

impl P2pMode {
    /// NCCL's name for the mode in `via P2P/...` lines.
    pub(crate) fn via(self) -> &'static str {
        match self {
            P2pMode::Direct => "P2P/direct pointer",
            P2pMode::Ipc => "P2P/IPC",
            P2pMode::Cumem => "P2P/CUMEM",
        }
    }
}

/// Whether P2P can join `me` and `peer`, given `params` for each rank and the
/// driver's `can_access(my dev, peer bus id)`; the refusal's reason otherwise.
pub(crate) fn p2p_check(
    me: &TransportPeer,
    my_params: &P2pParams,
    peer: &TransportPeer,
    peer_params: &P2pParams,
    can_access: &dyn Fn(usize, &str) -> Result<bool, String>,
) -> Result<P2pMode, String> {
    if me.host_hash != peer.host_hash {
        return Err(format!("rank {} is on another host", peer.rank));
    }
    let Some(g1) = &me.gpu else {
        return Err(format!("rank {} drives no GPU", me.rank));
    };
    let Some(g2) = &peer.gpu else {
        return Err(format!("rank {} drives no GPU", peer.rank));
    };
    // NCCL_P2P_DISABLE=1 on either end turns the transport off. NCCL caps the
    // level at LOC instead (`ncclGetLevel`), which still admits two ranks on
    // one GPU; NCCL never meets that pair (init refuses duplicate GPUs), we
    // do, and a user who disables P2P means it for that pair too.
    if my_params.disable || peer_params.disable {
        return Err(format!(
            "P2P between rank {} and rank {} is disabled by NCCL_P2P_DISABLE=1",
            me.rank, peer.rank
        ));
    }
    let level = my_params.level_with(peer_params);
    let distance = if g1.bus_id == g2.bus_id {
        PathType::Loc
    } else {
        pci_distance(g1.pci_path.as_deref(), g2.pci_path.as_deref())
    };
    if distance > level {
        return Err(format!(
            "P2P between GPU {} and GPU {} is disabled: distance {} > level {} (NCCL_P2P_LEVEL / NCCL_P2P_DISABLE)",
            g1.bus_id, g2.bus_id, distance as i32, level as i32
        ));
    }
    match can_access(g1.dev, &g2.bus_id) {
        Ok(true) => {}
        Ok(false) => {
            return Err(format!(
                "Could not enable P2P between dev {}(={}) and dev {}",
                g1.dev, g1.bus_id, g2.bus_id
            ));
        }
        Err(e) => {
            return Err(format!(
                "peer query failed between dev {}(={}) and dev {}: {e}",
                g1.dev, g1.bus_id, g2.bus_id
            ));
        }
    }
    Ok(if me.pid == peer.pid && me.pid_ns == peer.pid_ns {
        P2pMode::Direct
    } else {
        P2pMode::Ipc
    })
}

/// The driver's answer for P2P between this process' device `dev` and the GPU
/// at `peer_bus` (`cuDeviceCanAccessPeer` after mapping the bus id to a local
/// ordinal); without CUDA, the reason there is none.
pub(crate) fn driver_can_access(dev: usize, peer_bus: &str) -> Result<bool, String> {
    #[cfg(feature = "cuda")]
    {
        use ferroccl_kernels::cuda;
        let n = cuda::device_count().map_err(|e| e.to_string())?;
        let peer = (0..n)
            .find(|&o| cuda::device_attrs(o).is_ok_and(|a| a.bus_id == peer_bus))
            .ok_or_else(|| format!("GPU {peer_bus} is not visible in this process"))?;
        cuda::can_access_peer(dev, peer).map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (dev, peer_bus);
        Err("ferroccl was built without its `cuda` feature".into())
    }
}

/// Size of an encoded [`ConnectInfo`].
pub(crate) const CONNECT_INFO_BYTES: usize = 4 + 2 + 1 + 1 + 4 + 16 + 8 + 8 + 64;
const MAGIC: u32 = 0x5032_5049; // "P2PI"
const VERSION: u16 = 1;
/// Largest FIFO a peer may announce (NCCL_BUFFSIZE is at most a few hundred MiB).
const MAX_FIFO_BYTES: u64 = 1 << 32;

/// What one side of a P2P connection sends the other (NCCL's `struct
/// p2pConnectInfo`: `direct`, `read`, and the pointer or the IPC handle), in a
/// fixed little-endian layout of [`CONNECT_INFO_BYTES`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectInfo {
    /// How the FIFO is reached.
    pub mode: P2pMode,
    /// P2P read (the SIMPLE buffer lives with the sender).
    pub read: bool,
    /// The sender's process id (checked against its peer-info record).
    pub pid: u32,
    /// Bus id of the GPU holding the FIFO.
    pub bus_id: String,
    /// Bytes of the FIFO allocation.
    pub size: u64,
    /// Offset of the FIFO in the allocation the handle names.
    pub offset: u64,
    /// `Direct`: the pointer in its first 8 bytes; `Ipc`: the 64-byte
    /// `CUipcMemHandle`; `Cumem`: the 16-byte tag the descriptor is sent with,
    /// then the allocation's rounded size (u64), then zeros.
    pub handle: [u8; 64],
}

impl ConnectInfo {
    /// The wire form.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(CONNECT_INFO_BYTES);
        v.extend_from_slice(&MAGIC.to_le_bytes());
        v.extend_from_slice(&VERSION.to_le_bytes());
        v.push(match self.mode {
            P2pMode::Direct => 0,
            P2pMode::Ipc => 1,
            P2pMode::Cumem => 2,
        });
        v.push(u8::from(self.read));
        v.extend_from_slice(&self.pid.to_le_bytes());
        let mut bus = [0u8; 16];
        let b = self.bus_id.as_bytes();
        bus[..b.len().min(16)].copy_from_slice(&b[..b.len().min(16)]);
        v.extend_from_slice(&bus);
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.offset.to_le_bytes());
        v.extend_from_slice(&self.handle);
        debug_assert_eq!(v.len(), CONNECT_INFO_BYTES);
        v
    }

    /// Decodes rank `peer`'s connect information, rejecting anything but what
    /// [`ConnectInfo::encode`] makes: wrong length, magic or version, an
    /// unknown mode, a bus id that is not `dddd:bb:dd.f`, an empty or oversized
    /// FIFO, an offset past it.
    ///
    /// Errors: [`Error::Remote`] naming the peer, what was expected and what was found.
    pub(crate) fn decode(peer: usize, b: &[u8]) -> Result<ConnectInfo, Error> {
        let bad = |what: String| Error::Remote(format!("rank {peer} sent bad P2P connect information: {what}"));
        if b.len() != CONNECT_INFO_BYTES {
            return Err(bad(format!("{} bytes, expected {CONNECT_INFO_BYTES}", b.len())));
        }
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(bad(format!("magic {magic:#010x}, expected {MAGIC:#010x}")));
        }
        let version = u16_at(4);
        if version != VERSION {
            return Err(bad(format!("version {version}, expected {VERSION}")));
        }
        let mode = match b[6] {
            0 => P2pMode::Direct,
            1 => P2pMode::Ipc,
            2 => P2pMode::Cumem,
            m => {
                return Err(bad(format!(
                    "mode {m}, expected 0 (direct pointer), 1 (IPC handle) or 2 (cuMem descriptor)"
                )));
            }
        };
        let read = match b[7] {
            0 => false,
            1 => true,
            r => return Err(bad(format!("read flag {r}, expected 0 or 1"))),
        };
        let pid = u32_at(8);
        let bus_raw = &b[12..28];
        let end = bus_raw.iter().position(|&c| c == 0).unwrap_or(16);
        if bus_raw[end..].iter().any(|&c| c != 0) {
            return Err(bad("bus id with bytes after its terminator".into()));
        }
        let bus_id = std::str::from_utf8(&bus_raw[..end])
            .ok()
            .filter(|s| is_bus_id(s))
            .ok_or_else(|| {
                bad(format!(
                    "bus id {:?}, expected dddd:bb:dd.f",
                    String::from_utf8_lossy(&bus_raw[..end])
                ))
            })?
            .to_string();
        let size = u64_at(28);
        if size == 0 || size > MAX_FIFO_BYTES {
            return Err(bad(format!("FIFO of {size} bytes, expected 1..={MAX_FIFO_BYTES}")));
        }
        let offset = u64_at(36);
        if offset >= size {
            return Err(bad(format!("offset {offset} past the {size}-byte FIFO")));
        }
        let handle: [u8; 64] = b[44..108].try_into().expect("64 bytes");
        if mode == P2pMode::Direct && handle[8..].iter().any(|&c| c != 0) {
            return Err(bad("direct pointer with a non-zero IPC handle tail".into()));
        }
        if mode == P2pMode::Cumem {
            let alloc = u64::from_le_bytes(handle[16..24].try_into().expect("8 bytes"));
            if alloc < size || alloc > MAX_FIFO_BYTES {
                return Err(bad(format!(
                    "cuMem allocation of {alloc} bytes for a {size}-byte FIFO (at most {MAX_FIFO_BYTES})"
                )));
            }
            if handle[24..].iter().any(|&c| c != 0) {
                return Err(bad("cuMem descriptor with a non-zero handle tail".into()));
            }
        }
        Ok(ConnectInfo {
            mode,
            read,
            pid,
            bus_id,
            size,
            offset,
            handle,
        })
    }
}

/// Whether `s` is a PCI bus id `dddd:bb:dd.f` (hex, lower or upper case).
fn is_bus_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// The GPU `dev` of this process as a communicator binds it (NCCL's
/// `cudaDev`, `busId` from `cuDeviceGetPCIBusId`, and the sysfs path for the
/// PCI distance): a mock GPU declared with `mockdev::declare_gpu`, else the
/// CUDA driver's.
///
/// Errors: [`Error::InvalidArgument`] naming the device when neither knows it.
pub(crate) fn bind_gpu(dev: usize) -> Result<GpuLoc, Error> {
    if let Some(g) = crate::mockdev::bound_gpu(dev) {
        let bus_id = g
            .pci_path
            .as_deref()
            .and_then(|p| p.rsplit('/').next())
            .filter(|b| is_bus_id(b))
            .map_or_else(|| format!("0000:{:02x}:00.0", dev & 0xff), str::to_ascii_lowercase);
        return Ok(GpuLoc {
            dev,
            bus_id,
            pci_path: g.pci_path,
        });
    }
    #[cfg(feature = "cuda")]
    {
        let a = ferroccl_kernels::cuda::device_attrs(dev)
            .map_err(|e| Error::InvalidArgument(format!("binding CUDA device {dev}: {e}")))?;
        let pci_path = std::fs::canonicalize(format!("/sys/bus/pci/devices/{}", a.bus_id))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        Ok(GpuLoc {
            dev,
            bus_id: a.bus_id,
            pci_path,
        })
    }
    #[cfg(not(feature = "cuda"))]
    Err(Error::InvalidArgument(format!(
        "binding CUDA device {dev}: ferroccl was built without its `cuda` feature"
    )))
}

/// A FIFO allocation of [`FifoDevMem`]: its address in this process and what
/// keeps it alive (the allocation, or the mapping of another process').
#[derive(Clone)]
pub(crate) struct DevAlloc {
    /// Address of the first byte (a device address for real GPUs).
    pub ptr: *mut u8,
    /// Dropped last by whoever uses `ptr`.
    pub keep: Arc<dyn Send + Sync>,
}

// SAFETY: `ptr` is an address handed to connectors, never dereferenced here;
// `keep` is Send + Sync.
unsafe impl Send for DevAlloc {}

/// Allocation, export and import of P2P FIFOs in a GPU's memory (NCCL's
/// `ncclP2pAllocateShareableBuffer` / `ncclP2pImportShareableBuffer`,
/// `src/transport/p2p.cc`: the legacy IPC branch, and the cuMem branch with
/// POSIX file descriptors).
pub(crate) trait FifoDevMem: Send + Sync {
    /// `len` bytes on device `ordinal` and their export (a 64-byte handle).
    fn alloc(&self, ordinal: usize, len: usize) -> Result<(DevAlloc, [u8; 64]), String>;
    /// Maps another process' export `handle` of `len` bytes into this
    /// process, for device `ordinal`.
    fn import(&self, ordinal: usize, handle: &[u8; 64], len: usize) -> Result<DevAlloc, String>;
    /// Why device `ordinal` cannot use cuMem with POSIX descriptors, if it
    /// cannot (NCCL's `ncclIsCuMemSupported`).
    fn cumem_unsupported(&self, ordinal: usize) -> Option<String>;
    /// At least `len` bytes on device `ordinal` made with `cuMemCreate`, the
    /// allocation's rounded size, and its export as a file descriptor.
    fn cumem_alloc(&self, ordinal: usize, len: usize) -> Result<(DevAlloc, u64, OwnedFd), String>;
    /// Maps the `size`-byte allocation another process exported as `fd`,
    /// with read/write access for device `ordinal`.
    fn cumem_import(&self, ordinal: usize, fd: OwnedFd, size: u64) -> Result<DevAlloc, String>;
}

/// The CUDA driver: `cuMemAlloc` + `cuIpcGetMemHandle`, `cuIpcOpenMemHandle`.
pub(crate) struct CudaFifoMem;

impl FifoDevMem for CudaFifoMem {
    #[cfg(feature = "cuda")]
    fn alloc(&self, ordinal: usize, len: usize) -> Result<(DevAlloc, [u8; 64]), String> {
        use ferroccl_kernels::cuda;
        let buf = cuda::DeviceBuffer::alloc(ordinal, len).map_err(|e| e.to_string())?;
        let h = cuda::ipc_get_mem_handle(buf.as_ptr()).map_err(|e| e.to_string())?;
        let ptr = buf.as_ptr();
        Ok((
            DevAlloc {
                ptr,
                keep: Arc::new(buf),
            },
            h,
        ))
    }

    #[cfg(feature = "cuda")]
    fn import(&self, ordinal: usize, handle: &[u8; 64], _len: usize) -> Result<DevAlloc, String> {
        let m = ferroccl_kernels::cuda::IpcMapping::open(ordinal, handle).map_err(|e| e.to_string())?;
        let ptr = m.as_ptr();
        Ok(DevAlloc { ptr, keep: Arc::new(m) })
    }

    #[cfg(feature = "cuda")]
    fn cumem_unsupported(&self, ordinal: usize) -> Option<String> {
        match ferroccl_kernels::cuda::cumem_unsupported(ordinal) {
            Ok(why) => why,
            Err(e) => Some(e.to_string()),
        }
    }

    #[cfg(feature = "cuda")]
    fn cumem_alloc(&self, ordinal: usize, len: usize) -> Result<(DevAlloc, u64, OwnedFd), String> {
        let (buf, fd) = ferroccl_kernels::cuda::CuMemBuffer::alloc_exported(ordinal, len).map_err(|e| e.to_string())?;
        let (ptr, size) = (buf.as_ptr(), buf.size() as u64);
        Ok((
            DevAlloc {
                ptr,
                keep: Arc::new(buf),
            },
            size,
            fd,
        ))
    }

    #[cfg(feature = "cuda")]
    fn cumem_import(&self, ordinal: usize, fd: OwnedFd, size: u64) -> Result<DevAlloc, String> {
        let buf = ferroccl_kernels::cuda::CuMemBuffer::import(ordinal, fd, size as usize).map_err(|e| e.to_string())?;
        let ptr = buf.as_ptr();
        Ok(DevAlloc {
            ptr,
            keep: Arc::new(buf),
        })
    }

    #[cfg(not(feature = "cuda"))]
    fn alloc(&self, _ordinal: usize, _len: usize) -> Result<(DevAlloc, [u8; 64]), String> {
        Err("ferroccl was built without its `cuda` feature".into())
    }

    #[cfg(not(feature = "cuda"))]
    fn cumem_unsupported(&self, _ordinal: usize) -> Option<String> {
        Some("ferroccl was built without its `cuda` feature".into())
    }

    #[cfg(not(feature = "cuda"))]
    fn cumem_alloc(&self, _ordinal: usize, _len: usize) -> Result<(DevAlloc, u64, OwnedFd), String> {
        Err("ferroccl was built without its `cuda` feature".into())
    }

    #[cfg(not(feature = "cuda"))]
    fn cumem_import(&self, _ordinal: usize, _fd: OwnedFd, _size: u64) -> Result<DevAlloc, String> {
        Err("ferroccl was built without its `cuda` feature".into())
    }

    #[cfg(not(feature = "cuda"))]
    fn import(&self, _ordinal: usize, _handle: &[u8; 64], _len: usize) -> Result<DevAlloc, String> {
        Err("ferroccl was built without its `cuda` feature".into())
    }
}

/// The mock device (`mockdev::P2pAlloc`): host memory shared through a `memfd`.
pub(crate) struct MockFifoMem;

impl FifoDevMem for MockFifoMem {
    fn alloc(&self, _ordinal: usize, len: usize) -> Result<(DevAlloc, [u8; 64]), String> {
        let (a, h) = crate::mockdev::P2pAlloc::alloc(len).map_err(|e| format!("mock device allocation: {e}"))?;
        let ptr = a.as_ptr();
        Ok((DevAlloc { ptr, keep: Arc::new(a) }, h))
    }

    fn import(&self, _ordinal: usize, handle: &[u8; 64], len: usize) -> Result<DevAlloc, String> {
        let a = crate::mockdev::P2pAlloc::import(handle, len).map_err(|e| format!("mock device import: {e}"))?;
        let ptr = a.as_ptr();
        Ok(DevAlloc { ptr, keep: Arc::new(a) })
    }

    fn cumem_unsupported(&self, ordinal: usize) -> Option<String> {
        (!crate::mockdev::cumem_supported())
            .then(|| format!("mock GPU {ordinal} does not support cuMem (mockdev::declare_cumem)"))
    }

    fn cumem_alloc(&self, _ordinal: usize, len: usize) -> Result<(DevAlloc, u64, OwnedFd), String> {
        let (a, fd) = crate::mockdev::P2pAlloc::cumem_alloc(len).map_err(|e| format!("mock cuMem allocation: {e}"))?;
        let ptr = a.as_ptr();
        Ok((DevAlloc { ptr, keep: Arc::new(a) }, len as u64, fd))
    }

    fn cumem_import(&self, _ordinal: usize, fd: OwnedFd, size: u64) -> Result<DevAlloc, String> {
        let a =
            crate::mockdev::P2pAlloc::cumem_import(fd, size as usize).map_err(|e| format!("mock cuMem import: {e}"))?;
        let ptr = a.as_ptr();
        Ok(DevAlloc { ptr, keep: Arc::new(a) })
    }
}

/// Why this process does not use cuMem for its P2P FIFOs on `gpu`, if it
/// does not: NCCL's `ncclCuMemEnable` (`src/misc/cudawrap.cc`) with
/// `NCCL_CUMEM_ENABLE` (a value of 0 or more decides, -2 asks the driver,
/// any other negative value is off) and the device's support.
fn cumem_refusal(gpu: &GpuLoc) -> Option<String> {
    use crate::config::IntParamExt;
    let v = crate::config::params::CUMEM_ENABLE
        .get(crate::config::Config::global())
        .unwrap_or_else(|e| {
            tracing::warn!(target: "ferroccl::init", "{e}; using the default");
            -2
        });
    match v {
        0 => Some("NCCL_CUMEM_ENABLE=0".into()),
        v if v > 0 => None,
        -2 => dev_mem(gpu).cumem_unsupported(gpu.dev),
        v => Some(format!("NCCL_CUMEM_ENABLE={v}")),
    }
}

/// Logs at INFO, once per process and reason, why P2P uses legacy CUDA IPC.
fn log_legacy(why: &str) {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if !seen.iter().any(|s| s == why) {
        seen.push(why.to_string());
        drop(seen);
        crate::log::nccl_info!(INIT, "P2P: cuMem not used ({why}); using legacy CUDA IPC");
    }
}

/// Whether `gpu` is a mock GPU (declared with `mockdev::declare_gpu`).
fn is_mock(gpu: &GpuLoc) -> bool {
    crate::mockdev::bound_gpu(gpu.dev).is_some()
}

/// The allocator for this process' GPU `gpu`.
fn dev_mem(gpu: &GpuLoc) -> &'static dyn FifoDevMem {
    if is_mock(gpu) { &MockFifoMem } else { &CudaFifoMem }
}

/// Direct-pointer FIFOs of this process, by address, from the receiver's
/// setup until its sender's connect takes a strong reference (the allocation
/// then lives as long as either connector). Weak: a FIFO whose sender never
/// connects is freed with its receiver.
type DirectTable = Vec<(usize, std::sync::Weak<dyn Send + Sync>)>;
static DIRECT: Mutex<DirectTable> = Mutex::new(Vec::new());

/// How `me` reaches `peer`'s FIFO.
fn mode_of(me: &TransportPeer, peer: &TransportPeer) -> P2pMode {
    if me.pid == peer.pid && me.pid_ns == peer.pid_ns {
        P2pMode::Direct
    } else {
        P2pMode::Ipc
    }
}

/// The P2P transport (see the module docs).
pub(crate) struct P2pTransport {
    /// Every rank's `NCCL_P2P_DISABLE` / `NCCL_P2P_LEVEL`.
    params: Vec<P2pParams>,
    /// The shared-memory transport whose segments carry the counters (Simple).
    shm: ShmTransport,
}

impl P2pTransport {
    /// The transport for ranks with `params[r]` each; `shm` makes the host
    /// side of each connection (its protocol must be Simple).
    pub(crate) fn new(params: Vec<P2pParams>, shm: ShmTransport) -> P2pTransport {
        P2pTransport { params, shm }
    }

    /// Why P2P does not join `me` and `peer`, if it does not (the checks of
    /// [`p2p_check`] plus what this data path needs).
    fn refusal(&self, me: &TransportPeer, peer: &TransportPeer) -> Option<String> {
        let d = P2pParams::default();
        let mine = self.params.get(me.rank).unwrap_or(&d);
        let theirs = self.params.get(peer.rank).unwrap_or(&d);
        let mock = me.gpu.as_ref().is_some_and(is_mock);
        let mock_access = |_: usize, bus: &str| {
            // Mock GPUs reach each other (both ranks declared theirs).
            Ok(peer.gpu.as_ref().is_some_and(|g| g.bus_id == bus))
        };
        let access: &dyn Fn(usize, &str) -> Result<bool, String> = if mock { &mock_access } else { &driver_can_access };
        if let Err(why) = p2p_check(me, mine, peer, theirs, access) {
            return Some(why);
        }
        if me.pid_ns != peer.pid_ns {
            return Some(format!("rank {} is in another PID namespace", peer.rank));
        }
        None
    }
}

impl Transport for P2pTransport {
    fn name(&self) -> &'static str {
        "P2P"
    }

    fn describe(&self) -> String {
        "P2P/IPC".into()
    }

    /// NCCL's `p2pCanConnect` ([`p2p_check`] with the driver's answer, or the
    /// mock's). The driver's refusal is logged at INFO as NCCL logs it
    /// (`Could not enable P2P between dev …`); the other reasons, which NCCL
    /// does not log, at TRACE.
    fn can_connect(&self, me: &TransportPeer, peer: &TransportPeer) -> bool {
        match self.refusal(me, peer) {
            None => true,
            Some(why) => {
                if why.starts_with("Could not enable P2P") {
                    crate::log::nccl_info!(INIT, "{why}");
                } else if me.host_hash == peer.host_hash {
                    tracing::trace!(target: "ferroccl::p2p", "P2P refused for rank {} -> rank {}: {why}", me.rank, peer.rank);
                }
                false
            }
        }
    }

    fn setup(
        &self,
        req: &ConnRequest,
        me: &TransportPeer,
        peer: &TransportPeer,
    ) -> Result<(Box<dyn PendingConn>, Vec<u8>), Error> {
        let (Some(gpu), Some(peer_gpu)) = (me.gpu.clone(), peer.gpu.clone()) else {
            return Err(Error::Internal(format!(
                "P2P connection with rank {} set up without a GPU on both ranks",
                peer.rank
            )));
        };
        let mut mode = mode_of(me, peer);
        match req.dir {
            Dir::Recv => {
                // NCCL's p2pRecvSetup: the FIFO is in the receiver's GPU memory.
                let layout = Layout::external(req.step_size)?;
                let len = layout.slots_len();
                // Across processes, cuMem with a file descriptor when enabled
                // and supported (NCCL's P2P_CUMEM); legacy IPC otherwise, or
                // when any cuMem call fails.
                let mut cumem = None;
                if mode == P2pMode::Ipc {
                    match cumem_refusal(&gpu) {
                        Some(why) => log_legacy(&why),
                        None => match dev_mem(&gpu).cumem_alloc(gpu.dev, len) {
                            Ok(c) => cumem = Some(c),
                            Err(e) => log_legacy(&format!("cuMem allocation failed on GPU {}: {e}", gpu.bus_id)),
                        },
                    }
                }
                let (alloc, handle, export) = match cumem {
                    Some((alloc, size, fd)) => {
                        mode = P2pMode::Cumem;
                        let mut h = [0u8; 64];
                        h[..8].copy_from_slice(&super::shm::random_u64().to_le_bytes());
                        h[8..16].copy_from_slice(&super::shm::random_u64().to_le_bytes());
                        h[16..24].copy_from_slice(&size.to_le_bytes());
                        let tag: [u8; ipcsock::TAG_BYTES] = h[..ipcsock::TAG_BYTES].try_into().expect("16 bytes");
                        (alloc, h, Some(CumemExport { fd, tag, size }))
                    }
                    None => {
                        let (alloc, handle) = dev_mem(&gpu).alloc(gpu.dev, len).map_err(|e| Error::System {
                            what: format!(
                                "allocating the {len}-byte P2P FIFO for rank {} on GPU {} ({e}; NCCL_P2P_DISABLE=1 \
                                 avoids P2P)",
                                peer.rank, gpu.bus_id
                            ),
                            source: Arc::new(std::io::Error::other(e)),
                        })?;
                        (alloc, handle, None)
                    }
                };
                let handle = match mode {
                    P2pMode::Ipc | P2pMode::Cumem => handle,
                    P2pMode::Direct => {
                        let mut d = DIRECT.lock().unwrap_or_else(|e| e.into_inner());
                        d.retain(|(_, w)| w.strong_count() > 0);
                        d.push((alloc.ptr as usize, Arc::downgrade(&alloc.keep)));
                        let mut h = [0u8; 64];
                        h[..8].copy_from_slice(&(alloc.ptr as u64).to_le_bytes());
                        h
                    }
                };
                let ext = ExtSlots {
                    base: alloc.ptr,
                    ordinal: gpu.dev,
                    _keep: alloc.keep.clone(),
                };
                let (mut pending, shm_info) = self.shm.setup_recv(req, me, peer, layout, Some(ext))?;
                pending.watch_peer();
                let ci = ConnectInfo {
                    mode,
                    read: false,
                    pid: me.pid,
                    bus_id: gpu.bus_id.clone(),
                    size: len as u64,
                    offset: 0,
                    handle,
                };
                let mut info = (shm_info.len() as u32).to_le_bytes().to_vec();
                info.extend_from_slice(&shm_info);
                info.extend_from_slice(&ci.encode());
                Ok((
                    Box::new(P2pPendingRecv {
                        shm: pending,
                        cumem: export.is_some(),
                        export,
                        peer: peer.rank,
                    }),
                    info,
                ))
            }
            Dir::Send => {
                // Across processes the receiver decides between IPC and CUMEM:
                // the line is logged at connect, once its choice is known. A
                // socket is bound for its descriptor either way (NCCL's proxy
                // keeps one per process, `ncclIpcSocketInit`).
                let (via, fdr) = match mode {
                    P2pMode::Direct => (mode.via(), None),
                    _ => match ipcsock::FdReceiver::bind() {
                        Ok(r) => ("", Some(r)),
                        Err(e) => {
                            log_legacy(&format!("no Unix socket for cuMem descriptors: {e}"));
                            ("", None)
                        }
                    },
                };
                let (pending, shm_info) = self.shm.setup_send(req, me, peer, via);
                let name = fdr.as_ref().map_or("", |r| r.name());
                let mut info = (shm_info.len() as u32).to_le_bytes().to_vec();
                info.extend_from_slice(&shm_info);
                info.extend_from_slice(name.as_bytes());
                let dev = |p: &TransportPeer| p.gpu.as_ref().map_or(p.local_rank, |g| g.dev);
                Ok((
                    Box::new(P2pPendingSend {
                        shm: pending,
                        req: *req,
                        gpu,
                        peer_gpu,
                        peer_pid: peer.pid,
                        mode,
                        fdr,
                        ranks: (me.rank, dev(me), peer.rank, dev(peer)),
                        got: None,
                        polls: 0,
                    }),
                    info,
                ))
            }
        }
    }
}

/// A cuMem FIFO's export waiting to be sent to the sender's socket.
struct CumemExport {
    /// The descriptor from `cuMemExportToShareableHandle`; closed once sent.
    fd: OwnedFd,
    /// Sent with it; the sender checks it against the connect information.
    tag: [u8; ipcsock::TAG_BYTES],
    /// The allocation's rounded size.
    size: u64,
}

/// Splits a P2P sender's connect information: the SHM transport's part and
/// the name of its descriptor socket (empty: none).
fn split_send_info(peer: usize, b: &[u8]) -> Result<(&[u8], &str), Error> {
    let bad = |m: String| Error::Remote(format!("rank {peer} sent bad P2P connect information: {m}"));
    if b.len() < 4 {
        return Err(bad(format!("{} bytes", b.len())));
    }
    let n = u32::from_le_bytes(b[..4].try_into().expect("4 bytes")) as usize;
    if b.len() < 4 + n || b.len() - 4 - n > ipcsock::MAX_NAME {
        return Err(bad(format!(
            "{} bytes where the shared-memory part announces {n} and a socket name at most {}",
            b.len(),
            ipcsock::MAX_NAME
        )));
    }
    let (shm, name) = b[4..].split_at(n);
    let name = std::str::from_utf8(name)
        .ok()
        .filter(|s| s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'))
        .ok_or_else(|| bad(format!("socket name {:?}", String::from_utf8_lossy(name))))?;
    Ok((shm, name))
}

/// The receiving side between setup and connect (the SHM transport's, with
/// the device slots), and a cuMem export to send.
struct P2pPendingRecv {
    shm: super::shm::PendingRecv,
    export: Option<CumemExport>,
    peer: usize,
    /// The FIFO is a cuMem allocation (`P2P/CUMEM`).
    cumem: bool,
}

impl PendingConn for P2pPendingRecv {
    /// NCCL's `p2pRecvConnect`; with cuMem, first sends the FIFO's descriptor
    /// to the sender's socket (NCCL's proxy `ncclIpcSocketSendFd`).
    fn connect(&mut self, peer_info: &[u8]) -> Result<Option<Connected>, Error> {
        let (shm_info, name) = split_send_info(self.peer, peer_info)?;
        if let Some(x) = &self.export {
            if name.is_empty() {
                return Err(Error::Remote(format!(
                    "rank {} has no socket for the P2P/CUMEM FIFO's descriptor (NCCL_CUMEM_ENABLE=0 uses legacy \
                     CUDA IPC)",
                    self.peer
                )));
            }
            match ipcsock::send_fd(name, x.fd.as_fd(), &x.tag) {
                Ok(()) => self.export = None,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => {
                    return Err(Error::System {
                        what: format!(
                            "sending the {}-byte P2P/CUMEM FIFO's descriptor to rank {} over Unix socket {name} \
                             (NCCL_CUMEM_ENABLE=0 uses legacy CUDA IPC)",
                            x.size, self.peer
                        ),
                        source: Arc::new(e),
                    });
                }
            }
        }
        Ok(self.shm.finish(shm_info)?.map(|c| Connected::Recv(Box::new(c))))
    }

    fn waiting_for(&self) -> String {
        self.shm.waiting_for().replace("shared-memory segment", "P2P FIFO")
    }

    fn describe(&self) -> Option<String> {
        self.cumem.then(|| P2pMode::Cumem.via().to_string())
    }
}

/// The sending side between setup and connect.
struct P2pPendingSend {
    shm: super::shm::PendingSend,
    req: ConnRequest,
    gpu: GpuLoc,
    peer_gpu: GpuLoc,
    peer_pid: u32,
    /// `Direct`, or `Ipc` for another process (the receiver may say `Cumem`).
    mode: P2pMode,
    /// Where a cuMem FIFO's descriptor arrives (another process only).
    fdr: Option<ipcsock::FdReceiver>,
    /// (my rank, my device, peer rank, peer device) for the `via` line.
    ranks: (usize, usize, usize, usize),
    /// The mode the receiver chose, once connected.
    got: Option<P2pMode>,
    /// Polls while waiting for a cuMem descriptor.
    polls: u32,
}

/// Whether process `pid` (of this PID namespace) has exited: no
/// `/proc/<pid>/stat`, or a zombie (`Z`) or dead (`X`) state there.
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|st| st == "Z" || st == "X"),
    }
}

impl PendingConn for P2pPendingSend {
    /// NCCL's `p2pSendConnect`: maps the receiver's FIFO (its pointer, IPC
    /// handle, or the cuMem descriptor it sends to this side's socket: until
    /// that arrives, `Ok(None)`), then its counters' segment; logs the
    /// connection `via` the receiver's choice.
    fn connect(&mut self, peer_info: &[u8]) -> Result<Option<Connected>, Error> {
        let peer = self.req.key.peer;
        let bad = |m: String| Error::Remote(format!("rank {peer} sent bad P2P connect information: {m}"));
        if peer_info.len() < 4 {
            return Err(bad(format!("{} bytes", peer_info.len())));
        }
        let n = u32::from_le_bytes(peer_info[..4].try_into().expect("4 bytes")) as usize;
        if peer_info.len() != 4 + n + CONNECT_INFO_BYTES {
            return Err(bad(format!(
                "{} bytes where its parts announce {}",
                peer_info.len(),
                4 + n + CONNECT_INFO_BYTES
            )));
        }
        let (shm_info, ci) = peer_info[4..].split_at(n);
        let ci = ConnectInfo::decode(peer, ci)?;
        let layout = Layout::external(self.req.step_size)?;
        let mode_ok = ci.mode == self.mode || (self.mode == P2pMode::Ipc && ci.mode == P2pMode::Cumem);
        if !mode_ok
            || ci.pid != self.peer_pid
            || ci.bus_id != self.peer_gpu.bus_id
            || ci.size != layout.slots_len() as u64
            || ci.offset != 0
        {
            return Err(bad(format!(
                "{:?} FIFO of {} bytes at offset {} on GPU {} from pid {}, expected {:?} of {} bytes at 0 on GPU {} \
                 from pid {}",
                ci.mode,
                ci.size,
                ci.offset,
                ci.bus_id,
                ci.pid,
                self.mode,
                layout.slots_len(),
                self.peer_gpu.bus_id,
                self.peer_pid
            )));
        }
        let alloc = match ci.mode {
            P2pMode::Direct => {
                let ptr = u64::from_le_bytes(ci.handle[..8].try_into().expect("8 bytes")) as usize;
                let mut d = DIRECT.lock().unwrap_or_else(|e| e.into_inner());
                let keep = d
                    .iter()
                    .position(|(p, _)| *p == ptr)
                    .and_then(|i| d.swap_remove(i).1.upgrade())
                    .ok_or_else(|| bad(format!("direct pointer {ptr:#x} is no live FIFO of this process")))?;
                DevAlloc {
                    ptr: ptr as *mut u8,
                    keep,
                }
            }
            P2pMode::Ipc => dev_mem(&self.gpu)
                .import(self.gpu.dev, &ci.handle, layout.slots_len())
                .map_err(|e| Error::System {
                    what: format!(
                        "opening rank {peer}'s P2P FIFO on GPU {} ({e}; NCCL_P2P_DISABLE=1 avoids P2P)",
                        ci.bus_id
                    ),
                    source: Arc::new(std::io::Error::other(e)),
                })?,
            P2pMode::Cumem => {
                let Some(fdr) = &self.fdr else {
                    return Err(Error::Internal(format!(
                        "rank {peer} chose P2P/CUMEM but this rank has no socket for its descriptor (NCCL_CUMEM_ENABLE=0 \
                         uses legacy CUDA IPC)"
                    )));
                };
                let (fd, tag) = match fdr.try_recv() {
                    Ok(Some(x)) => x,
                    Ok(None) => {
                        // The receiver's death fails the wait at once, not at the deadline.
                        self.polls = self.polls.wrapping_add(1);
                        if self.polls.is_multiple_of(64) && process_gone(self.peer_pid) {
                            return Err(Error::Remote(format!(
                                "rank {peer} (pid {}) exited before sending its P2P/CUMEM FIFO descriptor",
                                self.peer_pid
                            )));
                        }
                        return Ok(None);
                    }
                    Err(e) => {
                        return Err(Error::System {
                            what: format!(
                                "receiving rank {peer}'s P2P/CUMEM FIFO descriptor on socket {}",
                                fdr.name()
                            ),
                            source: Arc::new(e),
                        });
                    }
                };
                if tag[..] != ci.handle[..ipcsock::TAG_BYTES] {
                    return Err(bad(format!(
                        "a descriptor on socket {} with a tag that is not the one its connect information announced",
                        fdr.name()
                    )));
                }
                let size = u64::from_le_bytes(ci.handle[16..24].try_into().expect("8 bytes"));
                dev_mem(&self.gpu)
                    .cumem_import(self.gpu.dev, fd, size)
                    .map_err(|e| Error::System {
                        what: format!(
                            "importing rank {peer}'s P2P/CUMEM FIFO on GPU {} ({e}; NCCL_CUMEM_ENABLE=0 uses legacy CUDA \
                             IPC, NCCL_P2P_DISABLE=1 avoids P2P)",
                            ci.bus_id
                        ),
                        source: Arc::new(std::io::Error::other(e)),
                    })?
            }
        };
        if ci.mode != P2pMode::Direct {
            let (me, my_dev, to, peer_dev) = self.ranks;
            crate::log::nccl_info!(
                INIT,
                "Channel {:02}/{} : {me}[{my_dev}] -> {to}[{peer_dev}] via {}",
                self.req.key.channel,
                self.req.key.conn,
                ci.mode.via()
            );
        }
        self.got = Some(ci.mode);
        self.fdr = None;
        let ext = ExtSlots {
            base: alloc.ptr,
            ordinal: self.gpu.dev,
            _keep: alloc.keep,
        };
        Ok(Some(Connected::Send(Box::new(self.shm.attach(shm_info, Some(ext))?))))
    }

    fn waiting_for(&self) -> String {
        match (&self.fdr, self.got) {
            (Some(r), None) => format!(
                "rank {}'s P2P FIFO (a P2P/CUMEM descriptor on socket {})",
                self.req.key.peer,
                r.name()
            ),
            _ => format!("rank {}'s P2P FIFO", self.req.key.peer),
        }
    }

    fn describe(&self) -> Option<String> {
        self.got.filter(|&m| m == P2pMode::Cumem).map(|m| m.via().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::TransportParams;

    fn peer(rank: usize, host: u64, pid: u32, gpu: Option<(&str, &str)>) -> TransportPeer {
        TransportPeer {
            rank,
            host_hash: host,
            pid,
            pid_ns: 1,
            params: TransportParams::default(),
            local_rank: rank,
            gpu: gpu.map(|(bus, path)| GpuLoc {
                dev: 0,
                bus_id: bus.into(),
                pci_path: Some(path.into()),
            }),
        }
    }

    const A: (&str, &str) = (
        "0000:04:00.0",
        "/sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0/0000:04:00.0",
    );
    const B: (&str, &str) = (
        "0000:05:00.0",
        "/sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0/0000:05:00.0",
    );
    const FAR: (&str, &str) = ("0000:81:00.0", "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0");

    fn yes(_: usize, _: &str) -> Result<bool, String> {
        Ok(true)
    }

    #[test]
    fn selection_follows_nccl() {
        let d = P2pParams::default();
        let (a, b) = (peer(0, 7, 100, Some(A)), peer(1, 7, 200, Some(B)));
        assert_eq!(p2p_check(&a, &d, &b, &d, &yes), Ok(P2pMode::Ipc));
        let same_proc = peer(1, 7, 100, Some(B));
        assert_eq!(p2p_check(&a, &d, &same_proc, &d, &yes), Ok(P2pMode::Direct));
        // Another host, no GPU on either side.
        assert!(
            p2p_check(&a, &d, &peer(1, 8, 200, Some(B)), &d, &yes)
                .unwrap_err()
                .contains("another host")
        );
        assert!(
            p2p_check(&peer(0, 7, 100, None), &d, &b, &d, &yes)
                .unwrap_err()
                .contains("rank 0 drives no GPU")
        );
        assert!(
            p2p_check(&a, &d, &peer(1, 7, 200, None), &d, &yes)
                .unwrap_err()
                .contains("rank 1 drives no GPU")
        );
        // Across root complexes: beyond the default PXB; allowed with NCCL_P2P_LEVEL=SYS on both.
        let far = peer(1, 7, 200, Some(FAR));
        assert!(
            p2p_check(&a, &d, &far, &d, &yes)
                .unwrap_err()
                .contains("distance 9 > level 5")
        );
        let sys = P2pParams::parse(None, Some("SYS")).unwrap();
        assert_eq!(p2p_check(&a, &sys, &far, &sys, &yes), Ok(P2pMode::Ipc));
        // The stricter side wins.
        assert!(p2p_check(&a, &sys, &far, &d, &yes).is_err());
        // NCCL_P2P_DISABLE=1 on either side: no P2P, not even on one GPU
        // (which NCCL would allow at level LOC, but never meets).
        let off = P2pParams::parse(Some("1"), None).unwrap();
        assert!(
            p2p_check(&a, &off, &b, &d, &yes)
                .unwrap_err()
                .contains("NCCL_P2P_DISABLE=1")
        );
        assert!(p2p_check(&a, &d, &b, &off, &yes).is_err());
        let same_gpu = peer(1, 7, 200, Some(A));
        assert!(
            p2p_check(&a, &off, &same_gpu, &d, &yes)
                .unwrap_err()
                .contains("NCCL_P2P_DISABLE=1")
        );
        assert_eq!(p2p_check(&a, &d, &same_gpu, &d, &yes), Ok(P2pMode::Ipc));
        // The driver's answer.
        let no = |_: usize, _: &str| Ok(false);
        assert!(
            p2p_check(&a, &d, &b, &d, &no)
                .unwrap_err()
                .contains("Could not enable P2P")
        );
        let fail = |_: usize, _: &str| Err("no CUDA driver".to_string());
        assert!(p2p_check(&a, &d, &b, &d, &fail).unwrap_err().contains("no CUDA driver"));
    }

    /// Without a GPU bound to the ranks (every host today) the transport never
    /// accepts a pair, and without CUDA the driver query says why.
    #[test]
    fn no_gpu_no_p2p() {
        let shm = ShmTransport::new(
            0,
            vec![100, 200],
            crate::transport::proto::Protocol::Simple,
            std::time::Duration::from_secs(5),
        );
        let t = P2pTransport::new(vec![P2pParams::default(); 2], shm);
        let (a, b) = (peer(0, 7, 100, None), peer(1, 7, 200, None));
        assert!(!t.can_connect(&a, &b));
        if ferroccl_kernels::cuda::driver_info().is_err() {
            let e = driver_can_access(0, "0000:04:00.0").unwrap_err();
            assert!(!e.is_empty());
            let (a, b) = (peer(0, 7, 100, Some(A)), peer(1, 7, 200, Some(B)));
            assert!(!t.can_connect(&a, &b), "no driver: no P2P");
        }
    }

    /// Two ranks of this process on one mock GPU: P2P accepts the pair (direct
    /// pointer), the receiver's FIFO is the mock device allocation, steps move
    /// through it with their operation headers in the segment beside the slots,
    /// and both connectors report device memory.
    #[test]
    fn direct_pair_moves_steps_through_the_mock_device_fifo() {
        use crate::transport::proto::Protocol;
        use crate::transport::{ConnKey, FifoMem};
        crate::mockdev::declare_gpu(crate::mockdev::MockGpu {
            ordinal: 7,
            cuda_cc: 90,
            gdr: false,
            dmabuf: false,
            pci_path: Some(A.1.into()),
        });
        let gpu = bind_gpu(7).expect("mock GPU binds");
        assert_eq!(gpu.bus_id, A.0);
        let pid = std::process::id();
        let ns = crate::transport::pid_namespace();
        let mk = |rank: usize| TransportPeer {
            rank,
            host_hash: 7,
            pid,
            pid_ns: ns,
            params: TransportParams::default(),
            local_rank: rank,
            gpu: Some(gpu.clone()),
        };
        let (a, b) = (mk(0), mk(1));
        let shm = |r: usize| ShmTransport::new(r, vec![pid, pid], Protocol::Simple, std::time::Duration::from_secs(5));
        let (t0, t1) = (
            P2pTransport::new(vec![P2pParams::default(); 2], shm(0)),
            P2pTransport::new(vec![P2pParams::default(); 2], shm(1)),
        );
        assert!(t0.can_connect(&a, &b) && t1.can_connect(&b, &a));
        let req = |peer: usize, dir: Dir| ConnRequest {
            key: ConnKey {
                channel: 0,
                peer,
                conn: 0,
            },
            dir,
            step_size: 4096,
            net_dev: 0,
        };
        let (mut ps, si) = t0.setup(&req(1, Dir::Send), &a, &b).expect("send setup");
        let (mut pr, ri) = t1.setup(&req(0, Dir::Recv), &b, &a).expect("recv setup");
        assert!(pr.connect(&si).unwrap().is_none(), "receiver waits for the sender");
        let Some(Connected::Send(mut s)) = ps.connect(&ri).expect("send connect") else {
            panic!("no send connector")
        };
        let Some(Connected::Recv(mut r)) = pr.connect(&si).expect("recv connect") else {
            panic!("no receive connector")
        };
        assert_eq!(s.fifo_mem(), Some(FifoMem::Device { ordinal: 7 }));
        assert_eq!(r.fifo_mem(), Some(FifoMem::Device { ordinal: 7 }));
        for step in 0..3 * crate::transport::NCCL_STEPS {
            assert!(s.can_push(), "step {step}");
            let (hdr, slot) = (s.hdr_slot(), s.next_slot());
            let h = hdr as usize;
            assert!(
                h + crate::coll::desc::OP_HDR_BYTES <= slot as usize || h >= slot as usize + 4096,
                "the header is not in the device slot"
            );
            // SAFETY: mock device memory is host memory; the header place
            // holds OP_HDR_BYTES bytes and the slot 4096; both ours until pushed.
            unsafe {
                std::ptr::write_bytes(hdr, step as u8, crate::coll::desc::OP_HDR_BYTES);
                std::ptr::write_bytes(slot, step as u8 ^ 0xa5, 100);
            }
            s.push(100);
            let (p, n) = r.peek().expect("the step arrived");
            assert_eq!((p, n), (slot, 100), "direct pointer: the same slot address");
            // SAFETY: the received step and its header, valid until pop.
            unsafe {
                let got = std::slice::from_raw_parts(r.hdr_of(p), crate::coll::desc::OP_HDR_BYTES);
                assert!(got.iter().all(|&x| x == step as u8), "header of step {step}");
                let data = std::slice::from_raw_parts(p, n);
                assert!(data.iter().all(|&x| x == step as u8 ^ 0xa5), "data of step {step}");
            }
            r.pop();
            s.progress().expect("sender progress");
            r.progress().expect("receiver progress");
        }
        s.close();
        r.close();
    }

    /// An exported mock FIFO whose owner has exited cannot be imported, and
    /// the error says so (no hang, no mapping of something else).
    #[test]
    fn a_dead_owners_fifo_is_not_imported() {
        let (_mine, mut h) = crate::mockdev::P2pAlloc::alloc(8192).expect("mock alloc");
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let dead = child.id();
        child.wait().expect("reap");
        h[8..12].copy_from_slice(&dead.to_le_bytes());
        let e = MockFifoMem.import(0, &h, 8192).err().expect("import of a dead owner");
        assert!(e.contains("mock device import"), "{e}");
        let (_mine, h) = crate::mockdev::P2pAlloc::alloc(8192).expect("mock alloc");
        let e = MockFifoMem.import(0, &h, 4096).err().expect("import of the wrong size");
        assert!(e.contains("expected 4096"), "{e}");
    }

    #[test]
    fn a_gone_process_is_seen() {
        assert!(!process_gone(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        // Exited but not reaped (a zombie), then reaped (gone).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !process_gone(pid) {
            assert!(std::time::Instant::now() < deadline, "pid {pid} never exited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().expect("reap");
        assert!(process_gone(pid));
    }

    #[test]
    fn params_parse_as_nccl() {
        assert_eq!(P2pParams::parse(None, None).unwrap(), P2pParams::default());
        assert!(P2pParams::parse(Some("1"), None).unwrap().disable);
        assert!(!P2pParams::parse(Some("0"), None).unwrap().disable);
        assert_eq!(P2pParams::parse(None, Some("PIX")).unwrap().level, Some(PathType::Pix));
        assert_eq!(P2pParams::parse(None, Some("2")).unwrap().level, Some(PathType::Pxb));
        assert!(
            P2pParams::parse(Some("yes"), None)
                .unwrap_err()
                .contains("NCCL_P2P_DISABLE=yes")
        );
        assert!(
            P2pParams::parse(None, Some("FAST"))
                .unwrap_err()
                .contains("NCCL_P2P_LEVEL=FAST")
        );
    }

    fn sample() -> ConnectInfo {
        let mut handle = [0u8; 64];
        for (i, b) in handle.iter_mut().enumerate() {
            *b = i as u8 ^ 0x5a;
        }
        ConnectInfo {
            mode: P2pMode::Ipc,
            read: true,
            pid: 4242,
            bus_id: "0000:3b:00.0".into(),
            size: 4 << 20,
            offset: 4096,
            handle,
        }
    }

    #[test]
    fn connect_info_round_trips() {
        let c = sample();
        let b = c.encode();
        assert_eq!(b.len(), CONNECT_INFO_BYTES);
        assert_eq!(ConnectInfo::decode(3, &b).unwrap(), c);
        let mut d = sample();
        d.mode = P2pMode::Direct;
        d.read = false;
        d.handle = [0; 64];
        d.handle[..8].copy_from_slice(&0x7f00_dead_b000u64.to_le_bytes());
        assert_eq!(ConnectInfo::decode(3, &d.encode()).unwrap(), d);
        let mut c = sample();
        c.mode = P2pMode::Cumem;
        c.handle = [0; 64];
        c.handle[..16].copy_from_slice(&[9; 16]);
        c.handle[16..24].copy_from_slice(&(c.size + 4096).to_le_bytes());
        assert_eq!(ConnectInfo::decode(3, &c.encode()).unwrap(), c);
        // A cuMem allocation smaller than the FIFO, or a non-zero tail, is refused.
        let mut small = c.clone();
        small.handle[16..24].copy_from_slice(&(c.size - 1).to_le_bytes());
        let e = ConnectInfo::decode(3, &small.encode()).unwrap_err().to_string();
        assert!(e.contains("cuMem allocation of"), "{e}");
        let mut tail = c;
        tail.handle[40] = 1;
        let e = ConnectInfo::decode(3, &tail.encode()).unwrap_err().to_string();
        assert!(e.contains("non-zero handle tail"), "{e}");
    }

    /// A P2P sender's connect information: the SHM part and a socket name of
    /// letters, digits and dashes; anything else is refused.
    #[test]
    fn send_info_splits_and_checks_the_socket_name() {
        let mut b = 3u32.to_le_bytes().to_vec();
        b.extend_from_slice(b"shm");
        assert_eq!(split_send_info(1, &b).unwrap(), (&b"shm"[..], ""));
        b.extend_from_slice(b"ferroccl-ipc-12-00ab");
        assert_eq!(split_send_info(1, &b).unwrap(), (&b"shm"[..], "ferroccl-ipc-12-00ab"));
        let mut bad = b.clone();
        bad.push(b'/');
        assert!(
            split_send_info(1, &bad)
                .unwrap_err()
                .to_string()
                .contains("socket name")
        );
        let mut long = b.clone();
        long.extend(std::iter::repeat_n(b'a', 200));
        assert!(split_send_info(1, &long).is_err());
        assert!(split_send_info(1, &[9, 0, 0, 0, 1]).is_err());
        assert!(split_send_info(1, &[1]).is_err());
    }

    /// Every malformed field is refused with a message naming the peer and what
    /// was wrong; random bytes never decode (nor panic).
    #[test]
    fn hostile_connect_info_is_rejected() {
        let good = sample().encode();
        type Mutate = fn(&mut Vec<u8>);
        let cases: Vec<(Mutate, &str)> = vec![
            (|b: &mut Vec<u8>| b.truncate(50), "50 bytes, expected 108"),
            (|b: &mut Vec<u8>| b.push(0), "109 bytes"),
            (|b: &mut Vec<u8>| b[0] ^= 1, "magic"),
            (|b: &mut Vec<u8>| b[4] = 9, "version 9"),
            (|b: &mut Vec<u8>| b[6] = 7, "mode 7"),
            (|b: &mut Vec<u8>| b[6] = 2, "cuMem allocation of"),
            (|b: &mut Vec<u8>| b[7] = 2, "read flag 2"),
            (
                (|b: &mut Vec<u8>| b[12..28].copy_from_slice(b"not-a-bus-id!!!!")),
                "bus id",
            ),
            (|b: &mut Vec<u8>| b[25] = b'x', "bytes after its terminator"),
            (
                (|b: &mut Vec<u8>| b[28..36].copy_from_slice(&0u64.to_le_bytes())),
                "FIFO of 0 bytes",
            ),
            (
                (|b: &mut Vec<u8>| b[28..36].copy_from_slice(&u64::MAX.to_le_bytes())),
                "FIFO of",
            ),
            (
                (|b: &mut Vec<u8>| b[36..44].copy_from_slice(&(8u64 << 20).to_le_bytes())),
                "offset",
            ),
        ];
        for (mutate, want) in cases {
            let mut b = good.clone();
            mutate(&mut b);
            let e = ConnectInfo::decode(5, &b).unwrap_err().to_string();
            assert!(e.contains("rank 5") && e.contains(want), "{want}: {e}");
        }
        let mut direct = sample();
        direct.mode = P2pMode::Direct;
        let e = ConnectInfo::decode(5, &direct.encode()).unwrap_err().to_string();
        assert!(e.contains("non-zero IPC handle tail"), "{e}");
        // Pseudo-random input of every length up to twice the size.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..2 * CONNECT_INFO_BYTES {
            let b: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            assert!(ConnectInfo::decode(1, &b).is_err());
        }
    }
}
