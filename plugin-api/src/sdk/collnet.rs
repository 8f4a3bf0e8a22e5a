//! The safe Rust SDK for CollNet (in-network collective) plugins.
//!
//! A plugin implements [`CollNet`] once, with the newest (v12) semantics, and calls
//! [`export_collnet_plugin!`](crate::export_collnet_plugin) to emit
//! `ncclCollNetPlugin_v6` … `ncclCollNetPlugin_v12` — beside
//! [`export_net_plugin!`](crate::export_net_plugin) in the same cdylib, as NCCL loads
//! both tables from one library (`src/plugin/net.cc`). The generated shims
//! ([`crate::export::collnet`]) absorb the version differences (reference §2,
//! NCCL 2.30.7 `src/plugin/net/net_v{6..12}.cc`): `int` counts and sizes through v8,
//! the v8 `ncclNetSGE` with a 32-bit size, v6/v7 tables without
//! `iallgather`/`ireducescatter`, the v11+ per-communicator `ctx`; they catch panics,
//! validate pointers, own the comm/registration/request allocations, and turn the
//! raw `iallgather`/`ireducescatter` window arguments into a checked [`Window`].
//!
//! Threading contract (NCCL's proxy thread): calls on one `collComm` and its requests
//! come from one thread at a time; different comms may be driven concurrently.

use std::ffi::CStr;

use super::{Buf, Handle, NetError, NetResult, Properties, PtrType};
use crate::abi::{ncclDataType_t, ncclRedOp_t};

/// Size in bytes of one element of `dtype` (`ncclTypeSize`, `src/include/utils.h`);
/// `None` for values outside NCCL 2.30.7's `ncclDataType_t`.
pub fn dtype_size(dtype: ncclDataType_t) -> Option<usize> {
    Some(match dtype.raw() {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => return None,
    })
}

/// One scatter-gather element of `iallgather` (receive side) or `ireducescatter`
/// (send side): `ncclNetSGE_vN_t`, with its registration resolved.
#[derive(Debug)]
pub struct Sge<'a, M> {
    /// The bytes of this part (`address`, `size`).
    pub buf: Buf,
    /// Registration of `buf` (`mhandle`), if the caller passed one.
    pub mr: Option<&'a M>,
}

/// The window of an `iallgather`/`ireducescatter` (NCCL 2.30.7
/// `src/transport/coll_net.cc`, `collNetIallgather`/`collNetIreducescatter`).
///
/// The full collective spans `nranks × bytes_per_rank` bytes, rank `r` owning
/// `[r × bytes_per_rank, (r+1) × bytes_per_rank)`. One call moves the window
/// `[offset, offset + bytes)` of it. The shims check `offset + bytes ≤ nranks ×
/// bytes_per_rank` and that the SGE parts add up to `bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Bytes each rank owns in the full collective (`bytesPerRank`).
    pub bytes_per_rank: usize,
    /// Start of the window in the full collective, bytes (`windowOffset`).
    pub offset: usize,
    /// Length of the window, bytes (`windowBytes`).
    pub bytes: usize,
}

impl Window {
    /// The part of rank `rank`'s region inside the window, as `(start, len)` in
    /// bytes relative to the window start: where rank `rank`'s bytes sit among the
    /// window's `bytes` (`len` may be 0).
    pub fn rank_part(&self, rank: usize) -> (usize, usize) {
        let beg = rank.saturating_mul(self.bytes_per_rank);
        let end = beg.saturating_add(self.bytes_per_rank);
        let wend = self.offset.saturating_add(self.bytes);
        let lo = beg.max(self.offset);
        let hi = end.min(wend);
        if hi <= lo { (0, 0) } else { (lo - self.offset, hi - lo) }
    }
}

/// A CollNet plugin with the newest (v12) semantics. See the module docs for the
/// threading contract and [`export_collnet_plugin!`](crate::export_collnet_plugin)
/// for the versioned C symbols.
///
/// Lifecycle (NCCL 2.30.7 `src/plugin/net.cc`, `src/transport/coll_net.cc`): the
/// plugin object is created by [`CollNet::new`] on the first `init`; each
/// communicator gets a context from [`CollNet::init`] (v11+; v6–v10 share one);
/// every rank of a CollNet group calls `listen`, exchanges the handles out of band,
/// and calls `connect` **once** (it may block, with a bounded wait) with every
/// rank's handle; NCCL then closes the listen comm, registers its buffers, posts
/// collectives in the same order on every rank and tests them, and calls
/// `closeColl` at teardown.
pub trait CollNet: Sized + Send + Sync + 'static {
    /// The vtable `name` (what `NCCL_COLLNET_PLUGIN`/logs show); no spaces.
    const NAME: &'static CStr;
    /// `true` if [`CollNet::iallgather`] and [`CollNet::ireducescatter`] are
    /// implemented: their v8+ slots are then filled, else NULL (NCCL then does not
    /// run AllGather/ReduceScatter over CollNet, `src/graph/tuning.cc`).
    const HAS_IALLGATHER_IREDUCESCATTER: bool = false;
    /// Per-communicator context (v11+ `ctx`).
    type Ctx: Send + Sync + 'static;
    /// Listening endpoint (`listenComm`).
    type ListenComm: Send + 'static;
    /// A connected CollNet group (`collComm`).
    type CollComm: Send + 'static;
    /// Memory registration (`mhandle`).
    type Mr: Send + Sync + 'static;
    /// An outstanding collective or flush.
    type Request: Send + 'static;

    /// Creates the plugin on the first `init` of a load. An error makes `init`
    /// fail, which disables CollNet (not the net plugin) in NCCL.
    fn new() -> NetResult<Self>;

    /// Creates a per-communicator context; `comm_id` is NCCL's commHash (0 for the
    /// shared context of pre-v11 versions).
    fn init(&self, comm_id: u64) -> NetResult<Self::Ctx>;

    /// Releases a context created by [`CollNet::init`] (v11+ `finalize`).
    fn finalize(&self, ctx: Self::Ctx) -> NetResult<()> {
        drop(ctx);
        Ok(())
    }

    /// Number of CollNet devices. Zero disables CollNet in NCCL.
    fn devices(&self) -> NetResult<usize>;

    /// Properties of device `dev` (< `devices()`; the shims check the range).
    /// `max_coll_bytes` is the largest single collective NCCL posts (v9+).
    fn properties(&self, dev: usize) -> NetResult<Properties>;

    /// Starts listening on `dev`, writing what peers need into `handle` (`listen`).
    fn listen(&self, ctx: &Self::Ctx, dev: usize, handle: &mut Handle) -> NetResult<Self::ListenComm>;

    /// Connects this rank (`rank` < `handles.len()` = nranks) to the group whose
    /// members listened with `handles` (every rank's handle, in rank order), using
    /// this rank's `listen` (`connect`). Called once: block until the group is
    /// formed, with a bounded wait, or fail.
    fn connect(&self, handles: &[&Handle], rank: usize, listen: &mut Self::ListenComm) -> NetResult<Self::CollComm>;

    /// Whether `iallreduce`/`ireducescatter` reduce `dtype` with `op` correctly
    /// (`reduceSupport`). Must be true exactly for the pairs the plugin handles.
    fn reduce_support(&self, dtype: ncclDataType_t, op: ncclRedOp_t) -> bool;

    /// Registers `buf` of memory type `ty` for use with `comm` (`regMr`).
    fn reg_mr(&self, comm: &mut Self::CollComm, buf: Buf, ty: PtrType) -> NetResult<Self::Mr>;

    /// Registers a DMA-BUF (`regMrDmaBuf`). Default: unsupported (`ncclInternalError`).
    fn reg_mr_dmabuf(
        &self,
        comm: &mut Self::CollComm,
        buf: Buf,
        ty: PtrType,
        offset: u64,
        fd: i32,
    ) -> NetResult<Self::Mr> {
        let _ = (comm, buf, ty, offset, fd);
        Err(NetError::Internal(
            "regMrDmaBuf is not supported by this CollNet plugin".into(),
        ))
    }

    /// Releases a registration (`deregMr`).
    fn dereg_mr(&self, comm: &mut Self::CollComm, mr: Self::Mr) -> NetResult<()> {
        let _ = comm;
        drop(mr);
        Ok(())
    }

    /// Posts an allreduce of `count` elements of `dtype` with `op` from `send` into
    /// `recv` (`iallreduce`; both `len` = `count × dtype_size`, possibly the same
    /// memory). `Ok(None)` = cannot take it now, NCCL retries.
    #[allow(clippy::too_many_arguments)]
    fn iallreduce(
        &self,
        comm: &mut Self::CollComm,
        send: Buf,
        recv: Buf,
        count: usize,
        dtype: ncclDataType_t,
        op: ncclRedOp_t,
        send_mr: Option<&Self::Mr>,
        recv_mr: Option<&Self::Mr>,
    ) -> NetResult<Option<Self::Request>>;

    /// Posts the `window` of an allgather (`iallgather`, v8+): `send` holds this
    /// rank's bytes inside the window (`len` = [`Window::rank_part`] of this rank);
    /// the window's `bytes` land in `recv_parts`, in order. Default: unsupported.
    fn iallgather(
        &self,
        comm: &mut Self::CollComm,
        send: Buf,
        send_mr: Option<&Self::Mr>,
        recv_parts: &[Sge<'_, Self::Mr>],
        window: Window,
    ) -> NetResult<Option<Self::Request>> {
        let _ = (comm, send, send_mr, recv_parts, window);
        Err(NetError::Internal(
            "iallgather is not supported by this CollNet plugin".into(),
        ))
    }

    /// Posts the `window` of a reduce-scatter (`ireducescatter`, v8+): every rank's
    /// `send_parts` hold its window bytes, in order; the reduction of this rank's
    /// part of the window ([`Window::rank_part`]) lands in `recv` (that `len`).
    /// Default: unsupported.
    #[allow(clippy::too_many_arguments)]
    fn ireducescatter(
        &self,
        comm: &mut Self::CollComm,
        send_parts: &[Sge<'_, Self::Mr>],
        recv: Buf,
        recv_mr: Option<&Self::Mr>,
        window: Window,
        dtype: ncclDataType_t,
        op: ncclRedOp_t,
    ) -> NetResult<Option<Self::Request>> {
        let _ = (comm, send_parts, recv, recv_mr, window, dtype, op);
        Err(NetError::Internal(
            "ireducescatter is not supported by this CollNet plugin".into(),
        ))
    }

    /// Makes received data visible to the GPU (`iflush`). `Ok(None)` = nothing to
    /// do (host memory): NCCL treats a NULL request as complete. Default: nothing.
    fn iflush(&self, comm: &mut Self::CollComm, buf: Buf, mr: Option<&Self::Mr>) -> NetResult<Option<Self::Request>> {
        let _ = (comm, buf, mr);
        Ok(None)
    }

    /// Tests a request (`test`): `Some(bytes)` when finished (bytes received into
    /// this rank's buffers), `None` while pending. After `Some` or an error the
    /// shims free the request.
    fn test(&self, req: &mut Self::Request) -> NetResult<Option<usize>>;

    /// Closes a collComm (`closeColl`); outstanding requests are abandoned and
    /// freed by the shims.
    fn close_coll(&self, comm: Self::CollComm) -> NetResult<()> {
        drop(comm);
        Ok(())
    }

    /// Closes a listening endpoint (`closeListen`; NCCL calls it right after a
    /// successful `connect`).
    fn close_listen(&self, listen: Self::ListenComm) -> NetResult<()> {
        drop(listen);
        Ok(())
    }

    /// Fuses devices into a virtual device (`makeVDevice`, v9+). Default:
    /// unsupported (`ncclInvalidUsage`).
    fn make_vdevice(&self, devs: &[i32]) -> NetResult<usize> {
        let _ = devs;
        Err(NetError::InvalidUsage(
            "makeVDevice is not supported by this CollNet plugin".into(),
        ))
    }
}

/// NCCL's built-in reduction ops as an enum (`ncclSum` … `ncclMin`; `ncclAvg` and
/// user ops are `None`), for plugins matching on `op`.
pub fn builtin_op(op: ncclRedOp_t) -> Option<BuiltinOp> {
    match op {
        ncclRedOp_t::ncclSum => Some(BuiltinOp::Sum),
        ncclRedOp_t::ncclProd => Some(BuiltinOp::Prod),
        ncclRedOp_t::ncclMax => Some(BuiltinOp::Max),
        ncclRedOp_t::ncclMin => Some(BuiltinOp::Min),
        _ => None,
    }
}

/// The four element-wise reductions every CollNet device offers (`src/nccl.h.in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BuiltinOp {
    /// `ncclSum`.
    Sum,
    /// `ncclProd`.
    Prod,
    /// `ncclMax`.
    Max,
    /// `ncclMin`.
    Min,
}

impl From<BuiltinOp> for ncclRedOp_t {
    fn from(op: BuiltinOp) -> ncclRedOp_t {
        match op {
            BuiltinOp::Sum => ncclRedOp_t::ncclSum,
            BuiltinOp::Prod => ncclRedOp_t::ncclProd,
            BuiltinOp::Max => ncclRedOp_t::ncclMax,
            BuiltinOp::Min => ncclRedOp_t::ncclMin,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_sizes_follow_nccl() {
        assert_eq!(dtype_size(ncclDataType_t::ncclInt8), Some(1));
        assert_eq!(dtype_size(ncclDataType_t::ncclFloat16), Some(2));
        assert_eq!(dtype_size(ncclDataType_t::ncclBfloat16), Some(2));
        assert_eq!(dtype_size(ncclDataType_t::ncclUint32), Some(4));
        assert_eq!(dtype_size(ncclDataType_t::ncclFloat64), Some(8));
        assert_eq!(dtype_size(ncclDataType_t::ncclFloat8e5m2), Some(1));
        assert_eq!(dtype_size(ncclDataType_t(12)), None);
        assert_eq!(dtype_size(ncclDataType_t(-1)), None);
    }

    #[test]
    fn window_rank_parts() {
        // 3 ranks × 10 bytes; window [5, 25).
        let w = Window {
            bytes_per_rank: 10,
            offset: 5,
            bytes: 20,
        };
        assert_eq!(w.rank_part(0), (0, 5));
        assert_eq!(w.rank_part(1), (5, 10));
        assert_eq!(w.rank_part(2), (15, 5));
        assert_eq!(w.rank_part(3), (0, 0));
        let empty = Window { bytes: 0, ..w };
        assert_eq!(empty.rank_part(1), (0, 0));
    }
}
