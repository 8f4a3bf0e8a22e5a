//! The safe Rust SDK for network plugins.
//!
//! A plugin implements [`Net`] once, with the newest (v12) semantics, and calls
//! [`export_net_plugin!`](crate::export_net_plugin) to emit `ncclNetPlugin_v6` …
//! `ncclNetPlugin_v12`. The macro's generated `extern "C"` shims absorb every
//! version's quirks (`int` vs `size_t` sizes, v10's `connect(config)`, v11's
//! per-communicator `ctx`, the v9+ `*request == 1` hint), catch panics, validate
//! pointers, and own the allocation of comms and requests, so the trait itself
//! never sees a raw C pointer except for data buffers, which are asynchronous by
//! nature and travel as [`Buf`].
//!
//! Threading contract (NCCL's, `plugins/net/README.md`): calls on one comm and its
//! requests come from one thread at a time; different comms may be driven from
//! different threads concurrently. Hence `&mut` access to comms and requests and
//! `&self` access to the plugin.

use std::ffi::CStr;

use crate::abi;

pub mod collnet;
pub mod env;
pub mod net_profiler;
pub mod profiler;
pub mod rma;
pub mod tuner;

pub use profiler::{Profiler, ProfilerInit};
pub use tuner::{CostTable, Tuner, TunerInit};

/// Handle buffer NCCL passes to `listen`/`connect` (`NCCL_NET_HANDLE_MAXSIZE` = 128 bytes).
pub type Handle = [u8; abi::NCCL_NET_HANDLE_MAXSIZE];

/// Most receive buffers one grouped `irecv` can name that the SDK supports
/// (`NCCL_NET_IB_MAX_RECVS` = 8 in NCCL 2.30.7).
pub const MAX_RECVS: usize = 8;

/// Error of a plugin call. Maps to the `ncclResult_t` the C ABI returns
/// (guidance of NCCL's `plugins/net/README.md`: network/system failure →
/// `ncclSystemError`, API misuse by the caller → `ncclInternalError`, user
/// misconfiguration / size mismatch → `ncclInvalidUsage`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// A system call or the network failed (`ncclSystemError`, 2).
    #[error("system error: {0}")]
    System(String),
    /// The remote peer failed or sent something invalid (`ncclRemoteError`, 6).
    #[error("remote error: {0}")]
    Remote(String),
    /// The caller broke the API contract (`ncclInternalError`, 3).
    #[error("internal error: {0}")]
    Internal(String),
    /// A bad argument (`ncclInvalidArgument`, 4).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// User misconfiguration or a size mismatch (`ncclInvalidUsage`, 5).
    #[error("invalid usage: {0}")]
    InvalidUsage(String),
    /// A bounded wait expired (`ncclTimeout`, 8; NCCL 2.30+).
    #[error("timeout: {0}")]
    Timeout(String),
}

impl NetError {
    /// The `ncclResult_t` value this error is reported as.
    pub fn code(&self) -> abi::ncclResult_t {
        match self {
            NetError::System(_) => abi::ncclResult_t::ncclSystemError,
            NetError::Remote(_) => abi::ncclResult_t::ncclRemoteError,
            NetError::Internal(_) => abi::ncclResult_t::ncclInternalError,
            NetError::InvalidArgument(_) => abi::ncclResult_t::ncclInvalidArgument,
            NetError::InvalidUsage(_) => abi::ncclResult_t::ncclInvalidUsage,
            NetError::Timeout(_) => abi::ncclResult_t::ncclTimeout,
        }
    }
}

/// Result of a plugin call.
pub type NetResult<T> = Result<T, NetError>;

/// Memory type of a buffer (`NCCL_PTR_HOST` = 1, `NCCL_PTR_CUDA` = 2, `NCCL_PTR_DMABUF` = 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtrType {
    /// Host memory (`NCCL_PTR_HOST`).
    Host,
    /// CUDA device memory (`NCCL_PTR_CUDA`).
    Cuda,
    /// DMA-BUF memory (`NCCL_PTR_DMABUF`), only through `regMrDmaBuf`.
    DmaBuf,
}

impl PtrType {
    /// Decodes the C `int type` argument of `regMr`; `None` for unknown values.
    pub fn from_c(t: i32) -> Option<Self> {
        match t {
            abi::NCCL_PTR_HOST => Some(PtrType::Host),
            abi::NCCL_PTR_CUDA => Some(PtrType::Cuda),
            abi::NCCL_PTR_DMABUF => Some(PtrType::DmaBuf),
            _ => None,
        }
    }
}

/// Device properties with the newest (v12) fields, owned. The export macro
/// converts them to each version's `ncclNetProperties_vN_t`, keeping the C
/// strings alive for the life of the process (NCCL borrows them).
#[derive(Debug, Clone, PartialEq)]
pub struct Properties {
    /// Device name, e.g. the interface or HCA name.
    pub name: String,
    /// sysfs PCI path of the device, `None` for virtual devices.
    pub pci_path: Option<String>,
    /// Unique identifier of the NIC chip (two ports of one NIC share it).
    pub guid: u64,
    /// Bitmask of `NCCL_PTR_*` the device can send from / receive into.
    pub ptr_support: i32,
    /// `regMr` registrations are global (not tied to a comm), so sub-ranges of a registered buffer work.
    pub reg_is_global: bool,
    /// NCCL must call `iflush` even for host memory.
    pub force_flush: bool,
    /// Port speed in Mbps.
    pub speed: i32,
    /// Port number.
    pub port: i32,
    /// Network latency in microseconds.
    pub latency: f32,
    /// Maximum number of comms the device supports.
    pub max_comms: i32,
    /// Maximum number of buffers in one grouped receive (≥ 1, ≤ [`MAX_RECVS`]).
    pub max_recvs: i32,
    /// Device offload type (`NCCL_NET_DEVICE_HOST` = 0).
    pub net_device_type: i32,
    /// Device offload version (`NCCL_NET_DEVICE_INVALID_VERSION` = 0 for HOST).
    pub net_device_version: i32,
    /// Physical devices fused into this virtual device (v9+ `vProps`), at most 8.
    pub vdevs: Vec<i32>,
    /// Largest message for p2p operations, bytes (v9+; NCCL caps at 2^40).
    pub max_p2p_bytes: usize,
    /// Largest message for collective operations, bytes (v9+).
    pub max_coll_bytes: usize,
    /// Most requests one multi-request may group (v11+; 1 = none).
    pub max_multi_request_size: i32,
    /// Rail id (v12; -1 = undefined).
    pub rail_id: i16,
    /// Plane id (v12; -1 = undefined).
    pub plane_id: i16,
}

impl Default for Properties {
    fn default() -> Self {
        Properties {
            name: String::new(),
            pci_path: None,
            guid: 0,
            ptr_support: abi::NCCL_PTR_HOST,
            reg_is_global: false,
            force_flush: false,
            speed: 10_000,
            port: 0,
            latency: 0.0,
            max_comms: 65_536,
            max_recvs: 1,
            net_device_type: abi::NCCL_NET_DEVICE_HOST,
            net_device_version: abi::NCCL_NET_DEVICE_INVALID_VERSION,
            vdevs: Vec::new(),
            max_p2p_bytes: abi::MAX_NET_SIZE,
            max_coll_bytes: abi::MAX_COLLNET_SIZE,
            max_multi_request_size: 1,
            rail_id: abi::NCCL_NET_ID_UNDEF as i16,
            plane_id: abi::NCCL_NET_ID_UNDEF as i16,
        }
    }
}

/// Per-communicator configuration (`ncclNetCommConfig_t`, v10+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommConfig {
    /// Traffic class, `NCCL_NET_TRAFFIC_CLASS_UNDEF` (-1) when not set.
    pub traffic_class: i32,
}

impl Default for CommConfig {
    fn default() -> Self {
        CommConfig {
            traffic_class: abi::NCCL_NET_TRAFFIC_CLASS_UNDEF,
        }
    }
}

/// A data buffer handed over the C ABI: a raw address and a length in bytes.
///
/// It stays valid until the request it belongs to completes (NCCL's contract),
/// which no Rust lifetime can express, so reading or writing it is `unsafe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buf {
    /// Start address (may be dangling when `len == 0`).
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

// SAFETY: a `Buf` is only an address and a length; the memory it names is owned by
// the caller, who guarantees (NCCL contract) it stays valid until the request
// completes, from whatever thread the plugin touches it.
unsafe impl Send for Buf {}
// SAFETY: as above; sharing the address itself is harmless.
unsafe impl Sync for Buf {}

impl Buf {
    /// A buffer over `len` bytes at `ptr`.
    pub fn new(ptr: *mut u8, len: usize) -> Self {
        Buf { ptr, len }
    }

    /// The buffer as a slice.
    ///
    /// # Safety
    /// The memory must be valid for reads of `len` bytes and not written
    /// concurrently (true while the owning request is in flight).
    pub unsafe fn as_slice<'a>(&self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the caller guarantees validity for `len` bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The buffer as a mutable slice.
    ///
    /// # Safety
    /// The memory must be valid for writes of `len` bytes and not accessed by
    /// anyone else while the slice lives (true for a receive buffer in flight).
    pub unsafe fn as_mut_slice<'a>(&self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: the caller guarantees exclusive validity for `len` bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// One buffer of a (grouped) receive: `irecv(n, data[], sizes[], tags[], mhandles[])`.
#[derive(Debug)]
pub struct RecvBuf<'a, M> {
    /// Where the message lands; its `len` is the posted (maximum) size.
    pub buf: Buf,
    /// Tag that selects this buffer in a grouped receive (NCCL: the sender's rank).
    pub tag: i32,
    /// Registration of `buf`, if the caller passed one.
    pub mr: Option<&'a M>,
}

/// Outcome of `test`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestStatus {
    /// Not finished yet; call `test` again.
    Pending,
    /// Finished. For a send, `sizes[0]` is the size sent; for a receive of `n`
    /// buffers, `sizes[..n]` are the sizes actually received.
    Done {
        /// Number of valid entries in `sizes`.
        n: usize,
        /// Sizes in bytes.
        sizes: [usize; MAX_RECVS],
    },
}

impl TestStatus {
    /// A completed single operation of `size` bytes.
    pub fn done1(size: usize) -> Self {
        let mut sizes = [0; MAX_RECVS];
        sizes[0] = size;
        TestStatus::Done { n: 1, sizes }
    }
}

/// Which kind of comm a registration call targets (`regMr` takes either).
#[derive(Debug)]
pub enum CommMut<'a, P: Net> {
    /// A send comm from `connect`.
    Send(&'a mut P::SendComm),
    /// A receive comm from `accept`.
    Recv(&'a mut P::RecvComm),
}

/// A network plugin with the newest (v12) semantics. See the module docs for the
/// threading contract and [`export_net_plugin!`](crate::export_net_plugin) for how
/// the versioned C symbols are produced.
///
/// Lifecycle (NCCL 2.30.7, reference §1.5): the plugin object is created once per
/// library load by [`Net::new`] on the first `init`. Each communicator gets a
/// context from [`Net::init`] (v11+ call `init` per communicator; for v6–v10 the
/// shims create one shared context) and gives it back through [`Net::finalize`].
pub trait Net: Sized + Send + Sync + 'static {
    /// The vtable `name` (what `NCCL_NET` matches, case-insensitively); no spaces.
    const NAME: &'static CStr;
    /// Per-communicator context (v11+ `ctx`).
    type Ctx: Send + Sync + 'static;
    /// Listening endpoint (`listenComm`).
    type ListenComm: Send + 'static;
    /// Sending side of a connection (`sendComm`).
    type SendComm: Send + 'static;
    /// Receiving side of a connection (`recvComm`).
    type RecvComm: Send + 'static;
    /// Memory registration (`mhandle`).
    type Mr: Send + Sync + 'static;
    /// An outstanding `isend`/`irecv`/`iflush`.
    type Request: Send + 'static;

    /// Creates the plugin on the first `init` of a load. Returning an error makes
    /// `init` fail, which disables the plugin in NCCL.
    fn new() -> NetResult<Self>;

    /// Creates a per-communicator context. `comm_id` is NCCL's commHash (0 for
    /// the shared context of pre-v11 versions).
    fn init(&self, comm_id: u64, config: &CommConfig) -> NetResult<Self::Ctx>;

    /// Releases a context created by [`Net::init`].
    fn finalize(&self, ctx: Self::Ctx) -> NetResult<()> {
        drop(ctx);
        Ok(())
    }

    /// Number of devices (`devices`). Zero disables the plugin in NCCL.
    fn devices(&self) -> NetResult<usize>;

    /// Properties of device `dev` (< `devices()`; the shims check the range).
    fn properties(&self, dev: usize) -> NetResult<Properties>;

    /// Starts listening on `dev` and writes whatever a peer needs to connect into
    /// `handle` (`listen`). Must not block.
    fn listen(&self, ctx: &Self::Ctx, dev: usize, handle: &mut Handle) -> NetResult<Self::ListenComm>;

    /// Connects to the peer described by `handle` (`connect`). Must not block:
    /// returns `Ok(None)` until the connection is ready; NCCL calls again with
    /// the same `handle` buffer, which the plugin may use as scratch space.
    fn connect(
        &self,
        ctx: &Self::Ctx,
        dev: usize,
        handle: &mut Handle,
        config: &CommConfig,
    ) -> NetResult<Option<Self::SendComm>>;

    /// Accepts one connection on `listen` (`accept`). Must not block: `Ok(None)`
    /// until a connection is ready.
    fn accept(&self, listen: &mut Self::ListenComm) -> NetResult<Option<Self::RecvComm>>;

    /// Closes a listening endpoint (`closeListen`); comms it accepted stay valid.
    fn close_listen(&self, listen: Self::ListenComm) -> NetResult<()> {
        drop(listen);
        Ok(())
    }

    /// Registers `buf` of memory type `ty` for use with `comm` (`regMr`).
    fn reg_mr(&self, comm: CommMut<'_, Self>, buf: Buf, ty: PtrType) -> NetResult<Self::Mr>;

    /// Registers a DMA-BUF (`regMrDmaBuf`). Default: unsupported (`ncclInternalError`).
    fn reg_mr_dmabuf(
        &self,
        comm: CommMut<'_, Self>,
        buf: Buf,
        ty: PtrType,
        offset: u64,
        fd: i32,
    ) -> NetResult<Self::Mr> {
        let _ = (comm, buf, ty, offset, fd);
        Err(NetError::Internal("regMrDmaBuf is not supported by this plugin".into()))
    }

    /// Releases a registration (`deregMr`).
    fn dereg_mr(&self, comm: CommMut<'_, Self>, mr: Self::Mr) -> NetResult<()> {
        let _ = comm;
        drop(mr);
        Ok(())
    }

    /// Posts a send of `buf` with `tag` (`isend`). `Ok(None)` means the plugin
    /// cannot take it now; the caller retries later.
    fn isend(
        &self,
        comm: &mut Self::SendComm,
        buf: Buf,
        tag: i32,
        mr: Option<&Self::Mr>,
    ) -> NetResult<Option<Self::Request>>;

    /// Posts a receive of `bufs.len()` (1 ..= `max_recvs`) buffers (`irecv`).
    /// A send matching tag `t` lands in the buffer posted with tag `t`; sends and
    /// receives otherwise match in posting order. `Ok(None)` = retry later.
    fn irecv(&self, comm: &mut Self::RecvComm, bufs: &[RecvBuf<'_, Self::Mr>]) -> NetResult<Option<Self::Request>>;

    /// Makes received data visible to the GPU (`iflush`). `Ok(None)` means
    /// nothing to do (host memory). Default: nothing to do.
    fn iflush(&self, comm: &mut Self::RecvComm, bufs: &[RecvBuf<'_, Self::Mr>]) -> NetResult<Option<Self::Request>> {
        let _ = (comm, bufs);
        Ok(None)
    }

    /// Tests a request (`test`). After `Done` (or an error) the shims free the
    /// request; it is never tested again.
    fn test(&self, req: &mut Self::Request) -> NetResult<TestStatus>;

    /// Closes a send comm (`closeSend`); outstanding requests are abandoned and
    /// must be freed by the plugin.
    fn close_send(&self, comm: Self::SendComm) -> NetResult<()> {
        drop(comm);
        Ok(())
    }

    /// Closes a receive comm (`closeRecv`); outstanding requests are abandoned.
    fn close_recv(&self, comm: Self::RecvComm) -> NetResult<()> {
        drop(comm);
        Ok(())
    }

    /// Fuses physical devices into a virtual device (`makeVDevice`, v9+).
    /// Default: unsupported (`ncclInvalidUsage`).
    fn make_vdevice(&self, devs: &[i32]) -> NetResult<usize> {
        let _ = devs;
        Err(NetError::InvalidUsage(
            "makeVDevice is not supported by this plugin".into(),
        ))
    }

    /// Per-context network attributes hint (`setNetAttr`, v11+). Default: ignored.
    fn set_net_attr(&self, ctx: &Self::Ctx, attr: &abi::ncclNetAttr_v12_t) -> NetResult<()> {
        let _ = (ctx, attr);
        Ok(())
    }
}
