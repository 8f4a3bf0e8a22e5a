//! The safe Rust SDK for RMA (one-sided) plugins.
//!
//! A plugin implements [`Rma`] once, with v14 semantics, and calls
//! [`export_rma_plugin!`](crate::export_rma_plugin) to emit `ncclRmaPlugin_v14` and
//! `ncclRmaPlugin_v13` (NCCL 2.30.7 `src/include/plugin/rma/rma_v1{3,4}.h`), usually
//! beside [`export_net_plugin!`](crate::export_net_plugin) in the same cdylib (NCCL looks
//! for the RMA table in the net plugin's library after `NCCL_RMA_PLUGIN`'s,
//! `src/plugin/rma.cc`). The generated shims ([`crate::export::rma`]) absorb the v13
//! differences (the GIN config, the unused device and GIN handles, no
//! `isStrongSignal`), catch panics, validate pointers, check offsets and sizes against
//! the registered windows, and own every object handed to C.
//!
//! Model (NCCL 2.30.7 `src/rma/rma_proxy.cc`): every rank `listen`s, the 128-byte
//! handles are all-gathered out of band, and every rank calls `connect` once with all
//! handles (collective, may block with a bounded wait). `createContext` makes the
//! issue queues. Memory is registered **symmetrically**: every rank registers its
//! windows in the same order, and an operation names the *local* registration of the
//! window; the target is the peer's registration of the same rank in that order.
//! Requests are tested with the collComm (`test(collComm, request)`), so a request
//! must carry what it needs to complete.
//!
//! Threading: calls on one RMA context come from one thread at a time (NCCL's RMA
//! proxy thread); `test` may come from another thread than the one that posted.

use std::ffi::CStr;

use super::{Buf, Handle, NetError, NetResult, Properties, PtrType};
use crate::abi;

/// `createContext` options (`ncclRmaConfig_v14_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmaConfig {
    /// Independent issue contexts requested (≥ 1; NCCL 2.30.7 asks for 1). Operations
    /// name a context `< n_contexts`.
    pub n_contexts: usize,
    /// Traffic class, `NCCL_NET_TRAFFIC_CLASS_UNDEF` (-1) when unset.
    pub traffic_class: i32,
}

/// How the signal word is updated (`NCCL_NET_SIGNAL_OP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    /// `NCCL_NET_SIGNAL_OP_INC` (1): add 1.
    Inc,
    /// `NCCL_NET_SIGNAL_OP_ADD` (2): add the value.
    Add,
}

impl SignalOp {
    /// The op for a C `signalOp`; `None` for any other value.
    pub fn from_c(op: u32) -> Option<SignalOp> {
        match op {
            abi::NCCL_NET_SIGNAL_OP_INC => Some(SignalOp::Inc),
            abi::NCCL_NET_SIGNAL_OP_ADD => Some(SignalOp::Add),
            _ => None,
        }
    }

    /// The amount added to the signal word for `value`.
    pub fn delta(self, value: u64) -> u64 {
        match self {
            SignalOp::Inc => 1,
            SignalOp::Add => value,
        }
    }
}

/// A transfer between a local and a peer's window, already checked by the shims:
/// `local_off + size ≤` the local window's length and `remote_off + size ≤` the
/// length of the window as registered locally (symmetric windows have equal sizes on
/// every rank in NCCL's use; the plugin checks the peer's side).
#[derive(Debug)]
pub struct Xfer<'a, M> {
    /// Context index, `< RmaConfig::n_contexts`.
    pub context: usize,
    /// The local window (`srcMhandle` of a put, `localMhandle` of a get).
    pub local: &'a M,
    /// Offset in the local window, bytes.
    pub local_off: usize,
    /// The window on the peer, named by its local registration.
    pub remote: &'a M,
    /// Offset in the peer's window, bytes.
    pub remote_off: usize,
    /// Bytes to move.
    pub size: usize,
    /// The peer's rank.
    pub rank: usize,
}

/// The signal of a put-with-signal: the 8-byte word at `off` of the peer's window
/// `window`, updated by `op` once the put's data is visible there (`off + 8 ≤` window
/// length, checked by the shims).
#[derive(Debug)]
pub struct Signal<'a, M> {
    /// The signal window, named by its local registration.
    pub window: &'a M,
    /// Offset of the 64-bit word, bytes.
    pub off: usize,
    /// The update.
    pub op: SignalOp,
    /// Operand of [`SignalOp::Add`].
    pub value: u64,
    /// v14 `isStrongSignal`: `false` allows the signal to overtake *other* earlier
    /// operations (never its own data); always `true` for v13 tables.
    pub strong: bool,
}

/// An RMA plugin with v14 semantics. See the module docs for the model and
/// [`export_rma_plugin!`](crate::export_rma_plugin) for the C symbols.
pub trait Rma: Sized + Send + Sync + 'static {
    /// The vtable `name` (logs, `ferroccl-info`).
    const NAME: &'static CStr;
    /// Whether [`Rma::progress`] must be called (fills `rmaProgress`; NULL otherwise).
    const HAS_PROGRESS: bool = false;
    /// Per-communicator context (`init`'s `ctx`).
    type Ctx: Send + Sync + 'static;
    /// Listening endpoint.
    type ListenComm: Send + 'static;
    /// A connected group (`collComm`); shared by `test` and the RMA contexts.
    type CollComm: Send + Sync + 'static;
    /// An RMA context (`createContext`'s `rmaCtx`).
    type RmaCtx: Send + Sync + 'static;
    /// A symmetric registration (`mhandle`).
    type Mr: Send + Sync + 'static;
    /// An outstanding operation.
    type Request: Send + 'static;

    /// Creates the plugin on the first `init` of the process.
    fn new() -> NetResult<Self>;
    /// Per-communicator context; `comm_id` is NCCL's commHash.
    fn init(&self, comm_id: u64) -> NetResult<Self::Ctx>;
    /// Releases an [`Rma::init`] context.
    fn finalize(&self, ctx: Self::Ctx) -> NetResult<()> {
        drop(ctx);
        Ok(())
    }
    /// Number of RMA-capable devices; 0 makes NCCL skip the plugin.
    fn devices(&self) -> NetResult<usize>;
    /// Properties of `dev` (written as `ncclNetProperties_v12_t`).
    fn properties(&self, dev: usize) -> NetResult<Properties>;
    /// Starts listening on `dev`, filling the handle the other ranks receive.
    fn listen(&self, ctx: &Self::Ctx, dev: usize, handle: &mut Handle) -> NetResult<Self::ListenComm>;
    /// Connects the group: `handles[r]` is rank `r`'s listen handle, `rank` is ours.
    /// Every rank calls it once; it may block (bounded) until all peers are connected.
    fn connect(
        &self,
        ctx: &Self::Ctx,
        handles: &[Handle],
        rank: usize,
        listen: &mut Self::ListenComm,
    ) -> NetResult<Self::CollComm>;
    /// Closes a listen endpoint (after `connect`).
    fn close_listen(&self, listen: Self::ListenComm) -> NetResult<()> {
        drop(listen);
        Ok(())
    }
    /// Closes a group (after its contexts and registrations are gone).
    fn close_coll(&self, coll: Self::CollComm) -> NetResult<()> {
        drop(coll);
        Ok(())
    }
    /// Creates an RMA context on `coll`.
    fn create_context(&self, coll: &Self::CollComm, config: &RmaConfig) -> NetResult<Self::RmaCtx>;
    /// Destroys an RMA context.
    fn destroy_context(&self, ctx: Self::RmaCtx) -> NetResult<()> {
        drop(ctx);
        Ok(())
    }
    /// Registers the symmetric window `buf` (`mr_flags`: `NCCL_NET_MR_FLAG_*`).
    fn reg_mr_sym(&self, coll: &Self::CollComm, buf: Buf, ty: PtrType, mr_flags: u64) -> NetResult<Self::Mr>;
    /// Registers a DMA-BUF window; default: unsupported.
    fn reg_mr_sym_dmabuf(
        &self,
        coll: &Self::CollComm,
        buf: Buf,
        ty: PtrType,
        offset: u64,
        fd: i32,
        mr_flags: u64,
    ) -> NetResult<Self::Mr> {
        let _ = (coll, buf, ty, offset, fd, mr_flags);
        Err(NetError::InvalidUsage(format!(
            "RMA/{}: regMrSymDmaBuf is not supported",
            Self::NAME.to_string_lossy()
        )))
    }
    /// Deregisters a window.
    fn dereg_mr_sym(&self, coll: &Self::CollComm, mr: Self::Mr) -> NetResult<()> {
        let _ = coll;
        drop(mr);
        Ok(())
    }
    /// Posts a put (`signal` = `None`) or a put-with-signal.
    fn iput(
        &self,
        ctx: &Self::RmaCtx,
        x: Xfer<'_, Self::Mr>,
        signal: Option<Signal<'_, Self::Mr>>,
    ) -> NetResult<Self::Request>;
    /// Posts a get (peer's window → local window).
    fn iget(&self, ctx: &Self::RmaCtx, x: Xfer<'_, Self::Mr>) -> NetResult<Self::Request>;
    /// Posts a flush: completes once what earlier operations with `rank` moved into
    /// `mr` is visible.
    fn iflush(&self, ctx: &Self::RmaCtx, context: usize, mr: &Self::Mr, rank: usize) -> NetResult<Self::Request>;
    /// Whether `req` is complete; an error ends the request too.
    fn test(&self, coll: &Self::CollComm, req: &mut Self::Request) -> NetResult<bool>;
    /// Makes progress (called by NCCL's RMA proxy thread when [`Rma::HAS_PROGRESS`]).
    fn progress(&self, ctx: &Self::RmaCtx) -> NetResult<()> {
        let _ = ctx;
        Ok(())
    }
    /// Whether the context saw an asynchronous error (`queryLastError`).
    fn query_last_error(&self, ctx: &Self::RmaCtx) -> NetResult<bool> {
        let _ = ctx;
        Ok(false)
    }
}
