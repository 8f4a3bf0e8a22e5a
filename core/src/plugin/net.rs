//! The one internal view of a loaded network plugin.
//!
//! Every `ncclNet_vN` version (v6 … v12) is adapted behind [`NetPlugin`], so the
//! rest of `core` (transport, proxy, bootstrap, conformance suite) never sees a
//! version number. Semantics are those of the newest version (v12) as described in
//! `docs/reference/nccl-plugin-abi.md` §1.5; adapters for older versions
//! translate (e.g. `size_t` → `int` with range checks, v10's `connect(config)`,
//! the shared pre-v11 context, clearing the v9+ `*request == 1` hint for v6–v8).
//!
//! Raw handles ([`RawComm`], [`RawMr`], [`RawRequest`]) are the plugin's own
//! opaque pointers. They are `Send` because NCCL's contract lets any one thread at
//! a time drive a comm; callers keep that discipline.

use std::ffi::c_void;
use std::path::PathBuf;

pub use super::collnet::CollNetAdapter;
pub use ferroccl_plugin_api::sdk::{CommConfig, Properties, PtrType};
pub use ferroccl_plugin_api::{NetError, NetResult};

/// The 128-byte listen handle (`NCCL_NET_HANDLE_MAXSIZE`).
pub type NetHandle = [u8; 128];

macro_rules! raw_handle {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(pub *mut c_void);
        // SAFETY: an opaque plugin pointer; NCCL's contract allows any one thread
        // at a time to use it, which callers of `NetPlugin` uphold.
        unsafe impl Send for $name {}
        // SAFETY: sharing the pointer value is harmless; calls through it follow
        // the one-thread-at-a-time rule above.
        unsafe impl Sync for $name {}
    };
}

raw_handle!(
    /// A per-communicator plugin context (v11+ `ctx`; synthesised for older versions).
    RawCtx
);
raw_handle!(
    /// A `listenComm`, `sendComm` or `recvComm`.
    RawComm
);
raw_handle!(
    /// A memory registration (`mhandle`).
    RawMr
);
raw_handle!(
    /// An outstanding request.
    RawRequest
);

/// What was loaded, for logs, `ferroccl-info` and the cross-rank agreement check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetInfo {
    /// The vtable's `name` field as read before `init` (NCCL's built-ins: `"Socket"`,
    /// `"IB"`; ferroccl's in-tree plugins: `"FerrocclSocket"`, `"FerrocclIB"`).
    pub name: String,
    /// The `ncclNetPlugin_vN` version found (6 … 12).
    pub version: u32,
    /// The file the library was loaded from (resolved with `dladdr` on the vtable
    /// symbol, so a bare name shows the real path).
    pub path: PathBuf,
    /// The `ncclCollNetPlugin_vN` version, if the library exports one.
    pub collnet_version: Option<u32>,
}

/// One receive buffer of a (grouped) `irecv`.
#[derive(Debug, Clone, Copy)]
pub struct RecvSlot {
    /// Destination address.
    pub data: *mut u8,
    /// Posted (maximum) size in bytes.
    pub size: usize,
    /// Tag selecting this buffer (NCCL: the sender's rank).
    pub tag: i32,
    /// Registration of `data`, if any.
    pub mr: Option<RawMr>,
}

/// A loaded, initialised network plugin of any version (newest semantics).
///
/// All methods return [`NetError`] built from the plugin's `ncclResult_t` with a
/// message naming the plugin and the call, or from a check the adapter made
/// (e.g. a size above the version's limit gives `InvalidArgument`).
pub trait NetPlugin: Send + Sync {
    /// Name, version and file of the plugin.
    fn info(&self) -> &NetInfo;
    /// The CollNet table of the same library (`ncclCollNetPlugin_vN`, searched
    /// independently of the net version as NCCL's `src/plugin/net.cc` does), if it
    /// exports one; whether it is usable is [`CollNetAdapter::state`]. Default: none.
    fn collnet(&self) -> Option<std::sync::Arc<CollNetAdapter>> {
        None
    }
    /// The shared library the plugin was loaded from, if any (NCCL's `ncclRmaInit`
    /// tries the net plugin's library for an RMA table, `src/plugin/rma.cc`).
    /// Default: none.
    fn plugin_library(&self) -> Option<std::sync::Arc<super::library::PluginLibrary>> {
        None
    }
    /// A per-communicator context: v11+ call the plugin's `init(&ctx, comm_id,
    /// config, logger, profCb)` every time; v6–v10 call `init` only the first time
    /// per loaded library and return a synthetic context (NULL, or for v10 a copy of
    /// `config` that `connect` receives). The host's variadic logger
    /// ([`crate::plugin::logger::nccl_logger`]) is passed as `ncclDebugLogger_t`.
    fn init_ctx(&self, comm_id: u64, config: &CommConfig) -> NetResult<RawCtx>;
    /// Releases a context (`finalize(ctx)` for v11+; for v6–v10 only the host's
    /// refcount drops: the plugin's one `init` is never repeated, and the library
    /// stays loaded).
    fn finalize_ctx(&self, ctx: RawCtx) -> NetResult<()>;
    /// Number of devices (`devices`).
    fn devices(&self) -> NetResult<usize>;
    /// Properties of `dev`, converted to the newest layout (pre-v9 fields get
    /// NCCL's assumed values: `maxP2pBytes` 2^30, `maxCollBytes` 2^29, …).
    fn properties(&self, dev: usize) -> NetResult<Properties>;
    /// `listen`: fills `handle`, returns the listenComm (never NULL on success).
    fn listen(&self, ctx: RawCtx, dev: usize, handle: &mut NetHandle) -> NetResult<RawComm>;
    /// `connect`: `Ok(None)` until ready; call again with the same `handle`.
    fn connect(&self, ctx: RawCtx, dev: usize, handle: &mut NetHandle) -> NetResult<Option<RawComm>>;
    /// `accept`: `Ok(None)` until a connection is ready.
    fn accept(&self, listen: RawComm) -> NetResult<Option<RawComm>>;
    /// `regMr` on a send or recv comm.
    fn reg_mr(&self, comm: RawComm, data: *mut u8, size: usize, ty: PtrType) -> NetResult<RawMr>;
    /// `deregMr`.
    fn dereg_mr(&self, comm: RawComm, mr: RawMr) -> NetResult<()>;
    /// `isend`: `Ok(None)` = plugin busy, retry later.
    fn isend(
        &self,
        comm: RawComm,
        data: *mut u8,
        size: usize,
        tag: i32,
        mr: Option<RawMr>,
    ) -> NetResult<Option<RawRequest>>;
    /// `irecv` of `slots.len()` buffers. `optional_completion` stores
    /// `NCCL_NET_OPTIONAL_RECV_COMPLETION` in `*request` first (v9+ only; cleared for older).
    fn irecv(&self, comm: RawComm, slots: &[RecvSlot], optional_completion: bool) -> NetResult<Option<RawRequest>>;
    /// [`NetPlugin::isend`] passing `phandle` (v10+; ignored by older versions):
    /// the host's profiler record of the step, which the plugin hands back to the
    /// profiler callback (installed with `adapter::set_net_profiler_callback`). Default: `isend`.
    fn isend_ph(
        &self,
        comm: RawComm,
        data: *mut u8,
        size: usize,
        tag: i32,
        mr: Option<RawMr>,
        phandle: *mut c_void,
    ) -> NetResult<Option<RawRequest>> {
        let _ = phandle;
        self.isend(comm, data, size, tag, mr)
    }
    /// [`NetPlugin::irecv`] passing one `phandle` per buffer (v10+; `phandles`
    /// shorter than `slots` pads with NULL). Default: `irecv`.
    fn irecv_ph(
        &self,
        comm: RawComm,
        slots: &[RecvSlot],
        optional_completion: bool,
        phandles: &[*mut c_void],
    ) -> NetResult<Option<RawRequest>> {
        let _ = phandles;
        self.irecv(comm, slots, optional_completion)
    }
    /// `iflush`; `Ok(None)` when the plugin has nothing to flush.
    fn iflush(&self, comm: RawComm, slots: &[RecvSlot]) -> NetResult<Option<RawRequest>>;
    /// `test`: `Ok(true)` when done, with the sizes written to `sizes[..n]`
    /// (`sizes` may be empty to pass NULL, as NCCL's bootstrap does).
    fn test(&self, req: RawRequest, sizes: &mut [usize]) -> NetResult<bool>;
    /// `closeSend`.
    fn close_send(&self, comm: RawComm) -> NetResult<()>;
    /// `closeRecv`.
    fn close_recv(&self, comm: RawComm) -> NetResult<()>;
    /// `closeListen`.
    fn close_listen(&self, listen: RawComm) -> NetResult<()>;
    /// Whether `regMrDmaBuf` is present (slot non-NULL).
    fn has_dmabuf(&self) -> bool;
    /// `regMrDmaBuf` (NULL slot → `Internal`). Default: unsupported.
    fn reg_mr_dmabuf(
        &self,
        comm: RawComm,
        data: *mut u8,
        size: usize,
        ty: PtrType,
        offset: u64,
        fd: i32,
    ) -> NetResult<RawMr> {
        let _ = (comm, data, size, ty, offset, fd);
        Err(NetError::Internal("regMrDmaBuf is not supported by this plugin".into()))
    }
    /// `irecvConsumed(recvComm, n, request)` (v7+; a NULL slot or an older version
    /// makes it a no-op, as in NCCL). Default: no-op.
    fn irecv_consumed(&self, comm: RawComm, n: usize, req: RawRequest) -> NetResult<()> {
        let _ = (comm, n, req);
        Ok(())
    }
    /// `makeVDevice` (v9+): fuses `devs` into a virtual device and returns its
    /// index. At most 4 devices before v12, 8 for v12. NULL slot or an older
    /// version → `InvalidUsage`. Default: unsupported.
    fn make_vdevice(&self, devs: &[i32]) -> NetResult<usize> {
        let _ = devs;
        Err(NetError::InvalidUsage(
            "makeVDevice is not supported by this plugin".into(),
        ))
    }
    /// Whether `makeVDevice` can be called: a v9+ table with the slot non-NULL
    /// (NCCL's `netInfo.makeVDevice != NULL` in `ncclTopoProcessNet`). Default: no.
    fn has_make_vdevice(&self) -> bool {
        false
    }
    /// `setNetAttr(ctx, attr)` (v11+; NULL slot or older version → ignored, as in
    /// NCCL). Default: ignored.
    fn set_net_attr(&self, ctx: RawCtx, attr: &ferroccl_plugin_api::abi::ncclNetAttr_v12_t) -> NetResult<()> {
        let _ = (ctx, attr);
        Ok(())
    }
}
