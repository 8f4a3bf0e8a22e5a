//! The generic machinery behind [`export_rma_plugin!`](crate::export_rma_plugin):
//! `extern "C"` shims generic over an [`Rma`] type and `const fn`s building
//! `ncclRma_v14_t` / `ncclRma_v13_t` from them (NCCL 2.30.7
//! `src/include/plugin/rma/rma_v1{3,4}.h`, `src/plugin/rma/rma_v13.cc`).
//!
//! Every object handed to C (init contexts, listen comms, collComms, RMA contexts,
//! registrations, requests) is an SDK box starting with the `(magic, kind)` header of
//! [`super::net`], so NULL, foreign, mistyped or closed pointers are reported as
//! errors. A request box is freed by the `test` that reports it done or failed.
//!
//! Checks made before the plugin sees an operation: the context index is below the
//! RMA context's `nContexts`; `off + size` fits the local registration of each window
//! (overflow included); a signal word lies inside its window and is 8-byte aligned in
//! the window; `signalOp` is `NCCL_NET_SIGNAL_OP_INC` or `_ADD`.
//!
//! v13 differences: `createContext` takes an `ncclGinConfig_v13_t` (only `nContexts`
//! and `trafficClass` are read) and returns a NULL device handle; `regMrSym*` return a
//! NULL GIN handle; `iputSignal` has no `isStrongSignal` (strong); `ginProgress`.

use std::ffi::{CStr, c_int, c_void};
use std::ptr::null_mut;
use std::sync::{Mutex, OnceLock};

use super::guard;
use super::net::{DEAD, MAGIC, handle_mut, object, ptr_type, put};
use super::props::{self, CStrInterner, PropStrings};
use crate::abi::{self, ncclResult_t};
use crate::sdk::rma::{Rma, RmaConfig, Signal, SignalOp, Xfer};
use crate::sdk::{Buf, Handle, NetError, NetResult};

pub(super) const KIND_RMA_CTX: u32 = 20;
pub(super) const KIND_RMA_LISTEN: u32 = 21;
pub(super) const KIND_RMA_COLL: u32 = 22;
pub(super) const KIND_RMA_CONTEXT: u32 = 23;
pub(super) const KIND_RMA_MR: u32 = 24;
pub(super) const KIND_RMA_REQ: u32 = 25;

/// Links a plugin type to its process-wide [`RmaState`]. Implemented by
/// [`rma_plugin_state!`](crate::rma_plugin_state).
pub trait RmaExport: Rma {
    /// The one state object of this plugin type.
    fn state() -> &'static RmaState<Self>;
}

/// Process-wide state of one exported RMA type: the lazily created plugin and the
/// interned property strings.
pub struct RmaState<P: Rma> {
    plugin: OnceLock<P>,
    init_lock: Mutex<()>,
    strings: CStrInterner,
}

impl<P: Rma> Default for RmaState<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Rma> RmaState<P> {
    /// Empty state, usable in a `static`.
    pub const fn new() -> Self {
        RmaState {
            plugin: OnceLock::new(),
            init_lock: Mutex::new(()),
            strings: CStrInterner::new(),
        }
    }

    /// The plugin, created by `P::new()` on the first call.
    pub fn plugin_or_init(&'static self) -> NetResult<&'static P> {
        if let Some(p) = self.plugin.get() {
            return Ok(p);
        }
        let _g = self.init_lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = self.plugin.get() {
            return Ok(p);
        }
        let p = P::new()?;
        Ok(self.plugin.get_or_init(|| p))
    }

    /// The plugin, if `init` succeeded before.
    pub fn plugin(&'static self) -> NetResult<&'static P> {
        self.plugin
            .get()
            .ok_or_else(|| NetError::Internal("RMA plugin used before a successful init".into()))
    }
}

#[repr(C)]
struct CtxBox<P: Rma> {
    magic: u64,
    kind: u32,
    ctx: P::Ctx,
}

#[repr(C)]
struct ListenBox<P: Rma> {
    magic: u64,
    kind: u32,
    listen: P::ListenComm,
}

#[repr(C)]
struct CollBox<P: Rma> {
    magic: u64,
    kind: u32,
    nranks: usize,
    coll: P::CollComm,
}

#[repr(C)]
struct ContextBox<P: Rma> {
    magic: u64,
    kind: u32,
    n_contexts: usize,
    nranks: usize,
    ctx: P::RmaCtx,
}

#[repr(C)]
struct MrBox<P: Rma> {
    magic: u64,
    kind: u32,
    len: usize,
    mr: P::Mr,
}

#[repr(C)]
struct ReqBox<P: Rma> {
    magic: u64,
    kind: u32,
    req: P::Request,
}

/// Boxes `v` and writes its address to `out` (already checked non-NULL by `put`).
///
/// # Safety
/// `out` must be valid for writes.
unsafe fn hand_out<T>(out: *mut *mut c_void, v: T) -> NetResult<()> {
    let b = Box::into_raw(Box::new(v));
    // SAFETY: caller's contract.
    unsafe { put(out, b.cast(), "out") }
}

/// Takes back a box made by [`hand_out`], marking it dead.
///
/// # Safety
/// `p` must be NULL or an object of this module of kind `kind` and type `T`.
unsafe fn take_back<T>(p: *mut c_void, kind: u32) -> NetResult<Box<T>> {
    // SAFETY: caller's contract; `object` checks NULL, magic and kind.
    let r: &mut T = unsafe { object(p, kind)? };
    // SAFETY: every box of this module starts with the `magic: u64` header.
    unsafe { (r as *mut T).cast::<u64>().write(DEAD) };
    // SAFETY: created by `Box::into_raw` in `hand_out`, freed only here.
    Ok(unsafe { Box::from_raw(r as *mut T) })
}

fn dev_index<P: Rma>(plugin: &P, dev: c_int) -> NetResult<usize> {
    let n = plugin.devices()?;
    usize::try_from(dev)
        .ok()
        .filter(|&d| d < n)
        .ok_or_else(|| NetError::InvalidArgument(format!("device {dev} out of range (RMA plugin has {n} devices)")))
}

/// Checks `off + size ≤ len` for window `what`.
fn in_window(what: &str, off: u64, size: usize, len: usize) -> NetResult<usize> {
    let off = usize::try_from(off).map_err(|_| NetError::InvalidArgument(format!("{what} offset {off} too large")))?;
    match off.checked_add(size) {
        Some(end) if end <= len => Ok(off),
        _ => Err(NetError::InvalidArgument(format!(
            "{what}: offset {off} + size {size} exceeds the registered window of {len} bytes"
        ))),
    }
}

fn context_index<P: Rma>(c: &ContextBox<P>, context: c_int, rank: u32) -> NetResult<(usize, usize)> {
    let ci = usize::try_from(context)
        .ok()
        .filter(|&i| i < c.n_contexts)
        .ok_or_else(|| {
            NetError::InvalidArgument(format!("context {context} out of range (nContexts = {})", c.n_contexts))
        })?;
    let r = rank as usize;
    if r >= c.nranks {
        return Err(NetError::InvalidArgument(format!(
            "rank {rank} out of range (group of {} ranks)",
            c.nranks
        )));
    }
    Ok((ci, r))
}

// ---------------------------------------------------------------------------
// Shim bodies.
// ---------------------------------------------------------------------------

unsafe fn init_impl<P: RmaExport>(
    ctx: *mut *mut c_void,
    comm_id: u64,
    logger: abi::ncclDebugLogger_t,
) -> NetResult<()> {
    crate::log::set_logger(logger);
    // SAFETY: NULL checked by `put`.
    unsafe { put(ctx, null_mut(), "ctx")? };
    let c = P::state().plugin_or_init()?.init(comm_id)?;
    // SAFETY: checked non-NULL above.
    unsafe {
        hand_out(
            ctx,
            CtxBox::<P> {
                magic: MAGIC,
                kind: KIND_RMA_CTX,
                ctx: c,
            },
        )
    }
}

unsafe fn finalize_impl<P: RmaExport>(ctx: *mut c_void) -> NetResult<()> {
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract: `ctx` came from our `init`.
    let b = unsafe { take_back::<CtxBox<P>>(ctx, KIND_RMA_CTX)? };
    plugin.finalize(b.ctx)
}

unsafe fn devices_impl<P: RmaExport>(ndev: *mut c_int) -> NetResult<()> {
    let n = P::state().plugin()?.devices()?;
    let n = c_int::try_from(n).map_err(|_| NetError::Internal(format!("{n} devices do not fit an int")))?;
    // SAFETY: NULL checked by `put`.
    unsafe { put(ndev, n, "ndev") }
}

unsafe fn get_properties_impl<P: RmaExport>(dev: c_int, out: *mut abi::ncclNetProperties_v12_t) -> NetResult<()> {
    if out.is_null() {
        return Err(NetError::InvalidArgument("props out-pointer is NULL".into()));
    }
    let state = P::state();
    let plugin = state.plugin()?;
    let d = dev_index(plugin, dev)?;
    let p = plugin.properties(d)?;
    let v = props::props_v12(&p, d, PropStrings::of(&p, &state.strings))?;
    // SAFETY: non-NULL; NCCL passes an ncclNetProperties_v12_t.
    unsafe { out.write(v) };
    Ok(())
}

unsafe fn listen_impl<P: RmaExport>(
    ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    listen: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(listen, null_mut(), "listenComm")? };
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract: `ctx` came from our `init`.
    let c: &mut CtxBox<P> = unsafe { object(ctx, KIND_RMA_CTX)? };
    let d = dev_index(plugin, dev)?;
    let l = plugin.listen(&c.ctx, d, handle_mut(handle)?)?;
    // SAFETY: checked non-NULL above.
    unsafe {
        hand_out(
            listen,
            ListenBox::<P> {
                magic: MAGIC,
                kind: KIND_RMA_LISTEN,
                listen: l,
            },
        )
    }
}

unsafe fn connect_impl<P: RmaExport>(
    ctx: *mut c_void,
    handles: *mut *mut c_void,
    nranks: c_int,
    rank: c_int,
    listen: *mut c_void,
    coll: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(coll, null_mut(), "collComm")? };
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract.
    let c: &mut CtxBox<P> = unsafe { object(ctx, KIND_RMA_CTX)? };
    // SAFETY: C API contract.
    let l: &mut ListenBox<P> = unsafe { object(listen, KIND_RMA_LISTEN)? };
    let n = usize::try_from(nranks)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| NetError::InvalidArgument(format!("nranks {nranks} (expected ≥ 1)")))?;
    let me = usize::try_from(rank)
        .ok()
        .filter(|&r| r < n)
        .ok_or_else(|| NetError::InvalidArgument(format!("rank {rank} out of range (nranks {nranks})")))?;
    if handles.is_null() {
        return Err(NetError::InvalidArgument("handles is NULL".into()));
    }
    let mut hs: Vec<Handle> = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: NCCL passes `nranks` handle pointers.
        let h = unsafe { *handles.add(i) };
        hs.push(*handle_mut(h).map_err(|e| NetError::InvalidArgument(format!("handle of rank {i}: {e}")))?);
    }
    let cc = plugin.connect(&c.ctx, &hs, me, &mut l.listen)?;
    // SAFETY: checked non-NULL above.
    unsafe {
        hand_out(
            coll,
            CollBox::<P> {
                magic: MAGIC,
                kind: KIND_RMA_COLL,
                nranks: n,
                coll: cc,
            },
        )
    }
}

unsafe fn create_context_impl<P: RmaExport>(
    coll: *mut c_void,
    n_contexts: c_int,
    tc: c_int,
    out: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(out, null_mut(), "rmaCtx")? };
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract.
    let c: &mut CollBox<P> = unsafe { object(coll, KIND_RMA_COLL)? };
    let n = usize::try_from(n_contexts)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| NetError::InvalidArgument(format!("nContexts {n_contexts} (expected ≥ 1)")))?;
    let cfg = RmaConfig {
        n_contexts: n,
        traffic_class: tc,
    };
    let ctx = plugin.create_context(&c.coll, &cfg)?;
    // SAFETY: checked non-NULL above.
    unsafe {
        hand_out(
            out,
            ContextBox::<P> {
                magic: MAGIC,
                kind: KIND_RMA_CONTEXT,
                n_contexts: n,
                nranks: c.nranks,
                ctx,
            },
        )
    }
}

unsafe fn reg_impl<P: RmaExport>(
    coll: *mut c_void,
    data: *mut c_void,
    size: usize,
    ty: c_int,
    dmabuf: Option<(u64, c_int)>,
    flags: u64,
    mh: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(mh, null_mut(), "mhandle")? };
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract.
    let c: &mut CollBox<P> = unsafe { object(coll, KIND_RMA_COLL)? };
    if data.is_null() && size > 0 {
        return Err(NetError::InvalidArgument(format!("window of {size} bytes at NULL")));
    }
    let buf = Buf::new(data.cast(), size);
    let t = ptr_type(ty)?;
    let mr = match dmabuf {
        None => plugin.reg_mr_sym(&c.coll, buf, t, flags)?,
        Some((off, fd)) => plugin.reg_mr_sym_dmabuf(&c.coll, buf, t, off, fd, flags)?,
    };
    // SAFETY: checked non-NULL above.
    unsafe {
        hand_out(
            mh,
            MrBox::<P> {
                magic: MAGIC,
                kind: KIND_RMA_MR,
                len: size,
                mr,
            },
        )
    }
}

unsafe fn dereg_impl<P: RmaExport>(coll: *mut c_void, mh: *mut c_void) -> NetResult<()> {
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract.
    let c: &mut CollBox<P> = unsafe { object(coll, KIND_RMA_COLL)? };
    // SAFETY: C API contract.
    let m = unsafe { take_back::<MrBox<P>>(mh, KIND_RMA_MR)? };
    plugin.dereg_mr_sym(&c.coll, m.mr)
}

/// # Safety
/// `p` must be NULL or an mhandle of this module.
unsafe fn mr<'a, P: Rma>(p: *mut c_void, what: &str) -> NetResult<&'a MrBox<P>> {
    // SAFETY: caller's contract.
    let m: &mut MrBox<P> =
        unsafe { object(p, KIND_RMA_MR) }.map_err(|e| NetError::InvalidArgument(format!("{what}: {e}")))?;
    Ok(m)
}

/// The arguments common to iput, iputSignal and iget, in the local/remote naming.
struct RawXfer {
    ctx: *mut c_void,
    context: c_int,
    local_off: u64,
    local: *mut c_void,
    size: usize,
    remote_off: u64,
    remote: *mut c_void,
    rank: u32,
}

/// The raw signal of an iputSignal.
struct RawSignal {
    off: u64,
    mh: *mut c_void,
    value: u64,
    op: u32,
    strong: bool,
}

unsafe fn xfer_impl<P: RmaExport>(
    x: RawXfer,
    get: bool,
    sig: Option<RawSignal>,
    req: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(req, null_mut(), "request")? };
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract.
    let c: &mut ContextBox<P> = unsafe { object(x.ctx, KIND_RMA_CONTEXT)? };
    let (ci, rank) = context_index(c, x.context, x.rank)?;
    let (lname, rname) = if get {
        ("localMhandle", "remoteMhandle")
    } else {
        ("srcMhandle", "dstMhandle")
    };
    // SAFETY: C API contract.
    let (lm, rm) = unsafe { (mr::<P>(x.local, lname)?, mr::<P>(x.remote, rname)?) };
    let local_off = in_window(lname, x.local_off, x.size, lm.len)?;
    let remote_off = in_window(rname, x.remote_off, x.size, rm.len)?;
    let xf = Xfer {
        context: ci,
        local: &lm.mr,
        local_off,
        remote: &rm.mr,
        remote_off,
        size: x.size,
        rank,
    };
    let r = if get {
        plugin.iget(&c.ctx, xf)?
    } else {
        let signal = match sig {
            None => None,
            Some(s) => {
                let op = SignalOp::from_c(s.op).ok_or_else(|| {
                    NetError::InvalidArgument(format!(
                        "signalOp {} (expected NCCL_NET_SIGNAL_OP_INC = 1 or NCCL_NET_SIGNAL_OP_ADD = 2)",
                        s.op
                    ))
                })?;
                // SAFETY: C API contract.
                let sm = unsafe { mr::<P>(s.mh, "signalMhandle")? };
                let off = in_window("signal", s.off, 8, sm.len)?;
                if off % 8 != 0 {
                    return Err(NetError::InvalidArgument(format!(
                        "signal offset {off} is not a multiple of 8 bytes"
                    )));
                }
                Some(Signal {
                    window: &sm.mr,
                    off,
                    op,
                    value: s.value,
                    strong: s.strong,
                })
            }
        };
        plugin.iput(&c.ctx, xf, signal)?
    };
    // SAFETY: checked non-NULL above.
    unsafe {
        hand_out(
            req,
            ReqBox::<P> {
                magic: MAGIC,
                kind: KIND_RMA_REQ,
                req: r,
            },
        )
    }
}

unsafe fn iflush_impl<P: RmaExport>(
    ctx: *mut c_void,
    context: c_int,
    mh: *mut c_void,
    rank: u32,
    req: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(req, null_mut(), "request")? };
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract.
    let c: &mut ContextBox<P> = unsafe { object(ctx, KIND_RMA_CONTEXT)? };
    let (ci, r) = context_index(c, context, rank)?;
    // SAFETY: C API contract.
    let m = unsafe { mr::<P>(mh, "mhandle")? };
    let q = plugin.iflush(&c.ctx, ci, &m.mr, r)?;
    // SAFETY: checked non-NULL above.
    unsafe {
        hand_out(
            req,
            ReqBox::<P> {
                magic: MAGIC,
                kind: KIND_RMA_REQ,
                req: q,
            },
        )
    }
}

unsafe fn test_impl<P: RmaExport>(coll: *mut c_void, req: *mut c_void, done: *mut c_int) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(done, 0, "done")? };
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract.
    let c: &mut CollBox<P> = unsafe { object(coll, KIND_RMA_COLL)? };
    // SAFETY: C API contract.
    let r: &mut ReqBox<P> = unsafe { object(req, KIND_RMA_REQ)? };
    let res = plugin.test(&c.coll, &mut r.req);
    if !matches!(res, Ok(false)) {
        // Done or failed: the request ends here.
        // SAFETY: `req` is a live request box of this module.
        drop(unsafe { take_back::<ReqBox<P>>(req, KIND_RMA_REQ)? });
    }
    if res? {
        // SAFETY: checked non-NULL above.
        unsafe { done.write(1) };
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// extern "C" shims.
// ---------------------------------------------------------------------------

fn g<P: RmaExport>(what: &str, f: impl FnOnce() -> NetResult<()>) -> ncclResult_t {
    guard(P::NAME, what, f)
}

/// Shim bodies dereference C pointers; each `unsafe` block's justification is the C
/// API contract of the slot it implements (NCCL passes valid or NULL pointers).
macro_rules! shim {
    (fn $name:ident<P>($($a:ident : $t:ty),*) => $what:literal, $body:expr) => {
        #[doc(hidden)]
        pub unsafe extern "C" fn $name<P: RmaExport>($($a: $t),*) -> ncclResult_t {
            g::<P>($what, || $body)
        }
    };
}

type Vp = *mut c_void;
type Vpp = *mut *mut c_void;

shim!(fn init<P>(ctx: Vpp, comm_id: u64, logger: abi::ncclDebugLogger_t) => "rma init",
    // SAFETY: C API contract.
    unsafe { init_impl::<P>(ctx, comm_id, logger) });
shim!(fn finalize<P>(ctx: Vp) => "rma finalize",
    // SAFETY: C API contract.
    unsafe { finalize_impl::<P>(ctx) });
shim!(fn devices<P>(ndev: *mut c_int) => "rma devices",
    // SAFETY: C API contract.
    unsafe { devices_impl::<P>(ndev) });
shim!(fn get_properties<P>(dev: c_int, props: *mut abi::ncclNetProperties_v12_t) => "rma getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P>(dev, props) });
shim!(fn listen<P>(ctx: Vp, dev: c_int, handle: Vp, listen: Vpp) => "rma listen",
    // SAFETY: C API contract.
    unsafe { listen_impl::<P>(ctx, dev, handle, listen) });
shim!(fn connect<P>(ctx: Vp, handles: Vpp, nranks: c_int, rank: c_int, listen: Vp, coll: Vpp) => "rma connect",
    // SAFETY: C API contract.
    unsafe { connect_impl::<P>(ctx, handles, nranks, rank, listen, coll) });
shim!(fn create_context_v14<P>(coll: Vp, config: *mut abi::ncclRmaConfig_v14_t, out: Vpp) => "rma createContext", {
    if config.is_null() {
        return Err(NetError::InvalidArgument("config is NULL".into()));
    }
    // SAFETY: non-NULL; NCCL passes an ncclRmaConfig_v14_t.
    let c = unsafe { *config };
    // SAFETY: C API contract.
    unsafe { create_context_impl::<P>(coll, c.nContexts, c.trafficClass, out) }
});
shim!(fn create_context_v13<P>(coll: Vp, config: *mut abi::ncclGinConfig_v13_t, out: Vpp,
    dev: *mut *mut abi::ncclNetDeviceHandle_v11_t) => "rma createContext", {
    if config.is_null() {
        return Err(NetError::InvalidArgument("config is NULL".into()));
    }
    if !dev.is_null() {
        // SAFETY: non-NULL out-pointer; host-side RMA has no device handle.
        unsafe { dev.write(null_mut()) };
    }
    // SAFETY: non-NULL; NCCL passes an ncclGinConfig_v13_t.
    let c = unsafe { *config };
    // SAFETY: C API contract.
    unsafe { create_context_impl::<P>(coll, c.nContexts, c.trafficClass, out) }
});
shim!(fn destroy_context<P>(ctx: Vp) => "rma destroyContext", {
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract.
    let b = unsafe { take_back::<ContextBox<P>>(ctx, KIND_RMA_CONTEXT)? };
    plugin.destroy_context(b.ctx)
});
shim!(fn reg_mr_sym_v14<P>(coll: Vp, data: Vp, size: usize, ty: c_int, flags: u64, mh: Vpp) => "rma regMrSym",
    // SAFETY: C API contract.
    unsafe { reg_impl::<P>(coll, data, size, ty, None, flags, mh) });
shim!(fn reg_mr_sym_v13<P>(coll: Vp, data: Vp, size: usize, ty: c_int, flags: u64, mh: Vpp, gin: Vpp) => "rma regMrSym", {
    if !gin.is_null() {
        // SAFETY: non-NULL out-pointer.
        unsafe { gin.write(null_mut()) };
    }
    // SAFETY: C API contract.
    unsafe { reg_impl::<P>(coll, data, size, ty, None, flags, mh) }
});
shim!(fn reg_mr_sym_dmabuf_v14<P>(coll: Vp, data: Vp, size: usize, ty: c_int, offset: u64, fd: c_int, flags: u64,
    mh: Vpp) => "rma regMrSymDmaBuf",
    // SAFETY: C API contract.
    unsafe { reg_impl::<P>(coll, data, size, ty, Some((offset, fd)), flags, mh) });
shim!(fn reg_mr_sym_dmabuf_v13<P>(coll: Vp, data: Vp, size: usize, ty: c_int, offset: u64, fd: c_int, flags: u64,
    mh: Vpp, gin: Vpp) => "rma regMrSymDmaBuf", {
    if !gin.is_null() {
        // SAFETY: non-NULL out-pointer.
        unsafe { gin.write(null_mut()) };
    }
    // SAFETY: C API contract.
    unsafe { reg_impl::<P>(coll, data, size, ty, Some((offset, fd)), flags, mh) }
});
shim!(fn dereg_mr_sym<P>(coll: Vp, mh: Vp) => "rma deregMrSym",
    // SAFETY: C API contract.
    unsafe { dereg_impl::<P>(coll, mh) });
shim!(fn close_coll<P>(coll: Vp) => "rma closeColl", {
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract.
    let b = unsafe { take_back::<CollBox<P>>(coll, KIND_RMA_COLL)? };
    plugin.close_coll(b.coll)
});
shim!(fn close_listen<P>(listen: Vp) => "rma closeListen", {
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract.
    let b = unsafe { take_back::<ListenBox<P>>(listen, KIND_RMA_LISTEN)? };
    plugin.close_listen(b.listen)
});
shim!(fn iput<P>(ctx: Vp, context: c_int, src_off: u64, src: Vp, size: usize, dst_off: u64, dst: Vp, rank: u32,
    req: Vpp) => "rma iput",
    // SAFETY: C API contract.
    unsafe { xfer_impl::<P>(RawXfer { ctx, context, local_off: src_off, local: src, size, remote_off: dst_off,
        remote: dst, rank }, false, None, req) });
shim!(fn iput_signal_v14<P>(ctx: Vp, context: c_int, src_off: u64, src: Vp, size: usize, dst_off: u64, dst: Vp,
    rank: u32, sig_off: u64, sig: Vp, value: u64, op: u32, strong: bool, req: Vpp) => "rma iputSignal",
    // SAFETY: C API contract.
    unsafe { xfer_impl::<P>(RawXfer { ctx, context, local_off: src_off, local: src, size, remote_off: dst_off,
        remote: dst, rank }, false, Some(RawSignal { off: sig_off, mh: sig, value, op, strong }), req) });
shim!(fn iput_signal_v13<P>(ctx: Vp, context: c_int, src_off: u64, src: Vp, size: usize, dst_off: u64, dst: Vp,
    rank: u32, sig_off: u64, sig: Vp, value: u64, op: u32, req: Vpp) => "rma iputSignal",
    // SAFETY: C API contract.
    unsafe { xfer_impl::<P>(RawXfer { ctx, context, local_off: src_off, local: src, size, remote_off: dst_off,
        remote: dst, rank }, false, Some(RawSignal { off: sig_off, mh: sig, value, op, strong: true }), req) });
shim!(fn iget<P>(ctx: Vp, context: c_int, remote_off: u64, remote: Vp, size: usize, local_off: u64, local: Vp,
    rank: u32, req: Vpp) => "rma iget",
    // SAFETY: C API contract.
    unsafe { xfer_impl::<P>(RawXfer { ctx, context, local_off, local, size, remote_off, remote, rank }, true, None,
        req) });
shim!(fn iflush<P>(ctx: Vp, context: c_int, mh: Vp, rank: u32, req: Vpp) => "rma iflush",
    // SAFETY: C API contract.
    unsafe { iflush_impl::<P>(ctx, context, mh, rank, req) });
shim!(fn test<P>(coll: Vp, req: Vp, done: *mut c_int) => "rma test",
    // SAFETY: C API contract.
    unsafe { test_impl::<P>(coll, req, done) });
shim!(fn progress<P>(ctx: Vp) => "rma rmaProgress", {
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract.
    let c: &mut ContextBox<P> = unsafe { object(ctx, KIND_RMA_CONTEXT)? };
    plugin.progress(&c.ctx)
});
shim!(fn query_last_error<P>(ctx: Vp, has_error: *mut bool) => "rma queryLastError", {
    let plugin = P::state().plugin()?;
    // SAFETY: C API contract.
    let c: &mut ContextBox<P> = unsafe { object(ctx, KIND_RMA_CONTEXT)? };
    let e = plugin.query_last_error(&c.ctx)?;
    // SAFETY: NULL checked by `put`.
    unsafe { put(has_error, e, "hasError") }
});

const fn name<P: Rma>() -> *const std::ffi::c_char {
    let n: &'static CStr = P::NAME;
    n.as_ptr()
}

/// The `ncclRma_v14_t` of plugin `P`.
pub const fn rma_v14<P: RmaExport>() -> abi::ncclRma_v14_t {
    abi::ncclRma_v14_t {
        name: name::<P>(),
        init: Some(init::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties::<P>),
        listen: Some(listen::<P>),
        connect: Some(connect::<P>),
        createContext: Some(create_context_v14::<P>),
        regMrSym: Some(reg_mr_sym_v14::<P>),
        regMrSymDmaBuf: Some(reg_mr_sym_dmabuf_v14::<P>),
        deregMrSym: Some(dereg_mr_sym::<P>),
        destroyContext: Some(destroy_context::<P>),
        closeColl: Some(close_coll::<P>),
        closeListen: Some(close_listen::<P>),
        iput: Some(iput::<P>),
        iputSignal: Some(iput_signal_v14::<P>),
        iget: Some(iget::<P>),
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        rmaProgress: if P::HAS_PROGRESS { Some(progress::<P>) } else { None },
        queryLastError: Some(query_last_error::<P>),
        finalize: Some(finalize::<P>),
    }
}

/// The `ncclRma_v13_t` (= `ncclGin_v13_t`) of plugin `P`.
pub const fn rma_v13<P: RmaExport>() -> abi::ncclRma_v13_t {
    abi::ncclRma_v13_t {
        name: name::<P>(),
        init: Some(init::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties::<P>),
        listen: Some(listen::<P>),
        connect: Some(connect::<P>),
        createContext: Some(create_context_v13::<P>),
        regMrSym: Some(reg_mr_sym_v13::<P>),
        regMrSymDmaBuf: Some(reg_mr_sym_dmabuf_v13::<P>),
        deregMrSym: Some(dereg_mr_sym::<P>),
        destroyContext: Some(destroy_context::<P>),
        closeColl: Some(close_coll::<P>),
        closeListen: Some(close_listen::<P>),
        iput: Some(iput::<P>),
        iputSignal: Some(iput_signal_v13::<P>),
        iget: Some(iget::<P>),
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        ginProgress: if P::HAS_PROGRESS { Some(progress::<P>) } else { None },
        queryLastError: Some(query_last_error::<P>),
        finalize: Some(finalize::<P>),
    }
}
