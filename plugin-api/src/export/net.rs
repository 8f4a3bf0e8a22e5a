//! The generic machinery behind [`export_net_plugin!`](crate::export_net_plugin):
//! one `extern "C"` shim per distinct slot signature, generic over the plugin
//! type, and `const fn`s building each `ncclNet_vN_t` from them.
//!
//! Ownership: comms, registrations, contexts and requests are boxes owned by the
//! SDK. Every box starts with a `#[repr(C)]` header (`magic`, `kind`) so a NULL,
//! foreign or already-closed pointer is detected (where the memory is readable)
//! and reported as an error instead of being dereferenced as the wrong type.
//! Requests live in a fixed slot table per comm (`NCCL_NET_MAX_REQUESTS ×
//! MAX_RECVS` entries, stable addresses); a full table makes `isend`/`irecv`
//! return `*request = NULL` (NCCL retries), closing a comm frees all of its
//! outstanding requests, and a `test` that reports completion frees the slot.

use std::ffi::{CStr, c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use super::guard;
use super::props::{self, CStrInterner, PropStrings};
use crate::abi::{self, ncclResult_t};
use crate::sdk::{Buf, CommConfig, CommMut, Handle, MAX_RECVS, Net, NetError, NetResult, PtrType, RecvBuf, TestStatus};

/// Requests one comm can have outstanding: `NCCL_NET_MAX_REQUESTS × MAX_RECVS` (a send
/// comm may see 32 × maxRecvs isends, reference §1.5).
pub const SLOTS_PER_COMM: usize = abi::NCCL_NET_MAX_REQUESTS * MAX_RECVS;

/// Links a plugin type to its process-wide [`NetState`]. Implemented by
/// [`net_plugin_state!`](crate::net_plugin_state) (which
/// [`export_net_plugin!`](crate::export_net_plugin) invokes).
pub trait NetExport: Net {
    /// The one state object of this plugin type.
    fn state() -> &'static NetState<Self>;
}

/// Process-wide state of one exported plugin type: the lazily created plugin
/// object, the shared context of pre-v11 versions, and the interned property strings.
pub struct NetState<P: Net> {
    plugin: OnceLock<P>,
    init_lock: Mutex<()>,
    shared: OnceLock<CtxBox<P>>,
    shared_refs: AtomicUsize,
    strings: CStrInterner,
}

impl<P: Net> Default for NetState<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Net> NetState<P> {
    /// Empty state (no plugin yet), usable in a `static`.
    pub const fn new() -> Self {
        NetState {
            plugin: OnceLock::new(),
            init_lock: Mutex::new(()),
            shared: OnceLock::new(),
            shared_refs: AtomicUsize::new(0),
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
            .ok_or_else(|| NetError::Internal("plugin used before a successful init".into()))
    }

    /// How many times a pre-v11 `init` succeeded (the shared context's reference count).
    pub fn shared_refs(&self) -> usize {
        self.shared_refs.load(Ordering::Relaxed)
    }

    fn shared_ctx(&'static self) -> NetResult<&'static CtxBox<P>> {
        self.shared
            .get()
            .ok_or_else(|| NetError::Internal("plugin used before a successful init".into()))
    }

    fn init_shared(&'static self) -> NetResult<()> {
        let plugin = self.plugin_or_init()?;
        if self.shared.get().is_none() {
            let _g = self.init_lock.lock().unwrap_or_else(|e| e.into_inner());
            if self.shared.get().is_none() {
                let config = CommConfig::default();
                let ctx = plugin.init(0, &config)?;
                let _ = self.shared.set(CtxBox {
                    magic: MAGIC,
                    kind: KIND_CTX,
                    config,
                    ctx,
                });
            }
        }
        self.shared_refs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

pub(super) const MAGIC: u64 = 0x4652_4343_4c53_444b; // "FRCCLSDK"
pub(super) const DEAD: u64 = 0xdead_dead_dead_dead;
pub(super) const KIND_CTX: u32 = 1;
pub(super) const KIND_LISTEN: u32 = 2;
const KIND_SEND: u32 = 3;
const KIND_RECV: u32 = 4;
pub(super) const KIND_MR: u32 = 5;
const KIND_REQ: u32 = 6;
/// A `collComm` of a CollNet plugin (see [`super::collnet`]).
pub(super) const KIND_COLL: u32 = 7;
/// A CollNet request.
pub(super) const KIND_COLL_REQ: u32 = 8;

fn kind_name(kind: u32) -> &'static str {
    match kind {
        KIND_CTX => "context",
        KIND_LISTEN => "listenComm",
        KIND_SEND => "sendComm",
        KIND_RECV => "recvComm",
        KIND_MR => "mhandle",
        KIND_REQ => "request",
        KIND_COLL => "collComm",
        KIND_COLL_REQ => "collnet request",
        super::rma::KIND_RMA_CTX => "RMA init context",
        super::rma::KIND_RMA_LISTEN => "RMA listenComm",
        super::rma::KIND_RMA_COLL => "RMA collComm",
        super::rma::KIND_RMA_CONTEXT => "RMA context",
        super::rma::KIND_RMA_MR => "RMA mhandle",
        super::rma::KIND_RMA_REQ => "RMA request",
        _ => "unknown object",
    }
}

/// Common header of every SDK-owned object handed to C.
#[repr(C)]
pub(super) struct Header {
    magic: u64,
    kind: u32,
}

#[repr(C)]
struct CtxBox<P: Net> {
    magic: u64,
    kind: u32,
    config: CommConfig,
    ctx: P::Ctx,
}

#[repr(C)]
struct ListenBox<P: Net> {
    magic: u64,
    kind: u32,
    plugin: &'static P,
    max_recvs: usize,
    listen: Option<P::ListenComm>,
}

#[repr(C)]
struct MrBox<P: Net> {
    magic: u64,
    kind: u32,
    mr: P::Mr,
}

#[repr(C)]
struct Slot<P: Net> {
    magic: u64,
    kind: u32,
    index: u32,
    plugin: &'static P,
    free_list: *mut Vec<u32>,
    req: Option<P::Request>,
}

#[repr(C)]
struct CommBox<P: Net, C> {
    magic: u64,
    kind: u32,
    plugin: &'static P,
    max_recvs: usize,
    free: Vec<u32>,
    slots: Box<[Slot<P>]>,
    comm: Option<C>,
}

impl<P: Net, C> CommBox<P, C> {
    fn new(kind: u32, plugin: &'static P, max_recvs: usize, comm: C) -> *mut Self {
        let b = Box::into_raw(Box::new(CommBox {
            magic: MAGIC,
            kind,
            plugin,
            max_recvs,
            free: (0..SLOTS_PER_COMM as u32).rev().collect(),
            slots: Box::new([]),
            comm: Some(comm),
        }));
        // SAFETY: `b` was just allocated and is exclusively ours.
        let free_list = unsafe { &raw mut (*b).free };
        let slots = (0..SLOTS_PER_COMM as u32)
            .map(|index| Slot {
                magic: MAGIC,
                kind: KIND_REQ,
                index,
                plugin,
                free_list,
                req: None,
            })
            .collect();
        // SAFETY: as above.
        unsafe { (*b).slots = slots };
        b
    }

    fn comm(&mut self) -> NetResult<&mut C> {
        self.comm
            .as_mut()
            .ok_or_else(|| NetError::Internal("comm already closed".into()))
    }

    /// Stores `req` in slot `idx` and returns the pointer handed to NCCL.
    fn post(&mut self, idx: u32, req: P::Request) -> *mut c_void {
        let slot = &mut self.slots[idx as usize];
        slot.req = Some(req);
        slot as *mut Slot<P> as *mut c_void
    }
}

/// Checks `p` is a live SDK object of `kind` and returns it as `T`.
///
/// # Safety
/// `p` must be NULL or point to readable memory of at least a [`Header`].
pub(super) unsafe fn object<'a, T>(p: *mut c_void, kind: u32) -> NetResult<&'a mut T> {
    let what = kind_name(kind);
    if p.is_null() {
        return Err(NetError::InvalidArgument(format!("{what} is NULL")));
    }
    if !(p as usize).is_multiple_of(std::mem::align_of::<u64>()) {
        return Err(NetError::Internal(format!(
            "{what} {p:p} is misaligned: not an object of this plugin"
        )));
    }
    // SAFETY: non-NULL, aligned, readable per the caller's contract.
    let h = unsafe { &*(p as *const Header) };
    if h.magic != MAGIC {
        return Err(NetError::Internal(format!(
            "{what} {p:p} is not a live object of this plugin (magic {:#x}{})",
            h.magic,
            if h.magic == DEAD { ", already closed" } else { "" }
        )));
    }
    if h.kind != kind {
        return Err(NetError::Internal(format!(
            "{p:p} is a {}, expected a {what}",
            kind_name(h.kind)
        )));
    }
    // SAFETY: magic and kind identify an SDK box of type `T`, created by this module.
    Ok(unsafe { &mut *(p as *mut T) })
}

/// `*p = v` after checking `p` is not NULL.
///
/// # Safety
/// `p` must be NULL or valid for writes.
pub(super) unsafe fn put<T>(p: *mut T, v: T, what: &str) -> NetResult<()> {
    if p.is_null() {
        return Err(NetError::InvalidArgument(format!("{what} out-pointer is NULL")));
    }
    // SAFETY: non-NULL and valid for writes per the caller's contract.
    unsafe { p.write(v) };
    Ok(())
}

fn dev_index<P: Net>(plugin: &P, dev: c_int) -> NetResult<usize> {
    let n = plugin.devices()?;
    usize::try_from(dev)
        .ok()
        .filter(|&d| d < n)
        .ok_or_else(|| NetError::InvalidArgument(format!("device {dev} out of range (plugin has {n} devices)")))
}

pub(super) fn ptr_type(t: c_int) -> NetResult<PtrType> {
    PtrType::from_c(t).ok_or_else(|| NetError::InvalidArgument(format!("unknown pointer type {t}")))
}

pub(super) fn handle_mut<'a>(handle: *mut c_void) -> NetResult<&'a mut Handle> {
    if handle.is_null() {
        return Err(NetError::InvalidArgument("handle is NULL".into()));
    }
    // SAFETY: NCCL passes a buffer of NCCL_NET_HANDLE_MAXSIZE bytes (byte-aligned array type).
    Ok(unsafe { &mut *(handle as *mut Handle) })
}

/// # Safety
/// `mh` must be NULL or an `mhandle` from this plugin's `regMr`.
unsafe fn mr_ref<'a, P: Net>(mh: *mut c_void) -> NetResult<Option<&'a P::Mr>> {
    if mh.is_null() {
        return Ok(None);
    }
    // SAFETY: caller's contract.
    let b: &mut MrBox<P> = unsafe { object(mh, KIND_MR)? };
    Ok(Some(&b.mr))
}

// ---------------------------------------------------------------------------
// Shim bodies (version independent).
// ---------------------------------------------------------------------------

fn set_logger(logger: abi::ncclDebugLogger_t) {
    crate::log::set_logger(logger);
}

fn init_shared_impl<P: NetExport>(logger: abi::ncclDebugLogger_t) -> NetResult<()> {
    set_logger(logger);
    P::state().init_shared()
}

unsafe fn init_ctx_impl<P: NetExport>(
    ctx: *mut *mut c_void,
    comm_id: u64,
    config: *mut abi::ncclNetCommConfig_v12_t,
    logger: abi::ncclDebugLogger_t,
) -> NetResult<()> {
    set_logger(logger);
    if ctx.is_null() {
        return Err(NetError::InvalidArgument("ctx out-pointer is NULL".into()));
    }
    // SAFETY: non-NULL; NCCL passes a valid config or NULL.
    let config = unsafe { config.as_ref() }.map_or_else(CommConfig::default, |c| CommConfig {
        traffic_class: c.trafficClass,
    });
    let plugin = P::state().plugin_or_init()?;
    let c = plugin.init(comm_id, &config)?;
    let b = Box::into_raw(Box::new(CtxBox::<P> {
        magic: MAGIC,
        kind: KIND_CTX,
        config,
        ctx: c,
    }));
    // SAFETY: checked non-NULL above.
    unsafe { ctx.write(b as *mut c_void) };
    Ok(())
}

unsafe fn finalize_impl<P: NetExport>(ctx: *mut c_void) -> NetResult<()> {
    let plugin = P::state().plugin()?;
    // SAFETY: `ctx` comes from our `init`.
    let b: &mut CtxBox<P> = unsafe { object(ctx, KIND_CTX)? };
    b.magic = DEAD;
    // SAFETY: `ctx` was created by `Box::into_raw` in `init_ctx_impl` and is freed only here.
    let b = unsafe { Box::from_raw(b as *mut CtxBox<P>) };
    plugin.finalize(b.ctx)
}

unsafe fn devices_impl<P: NetExport>(ndev: *mut c_int) -> NetResult<()> {
    let n = P::state().plugin()?.devices()?;
    let n = c_int::try_from(n).map_err(|_| NetError::Internal(format!("{n} devices do not fit an int")))?;
    // SAFETY: NULL checked by `put`; NCCL passes a valid int*.
    unsafe { put(ndev, n, "ndev") }
}

unsafe fn get_properties_impl<P: NetExport, T>(
    dev: c_int,
    out: *mut T,
    convert: impl FnOnce(&crate::sdk::Properties, usize, PropStrings) -> NetResult<T>,
) -> NetResult<()> {
    if out.is_null() {
        return Err(NetError::InvalidArgument("props out-pointer is NULL".into()));
    }
    let state = P::state();
    let plugin = state.plugin()?;
    let d = dev_index(plugin, dev)?;
    let p = plugin.properties(d)?;
    let v = convert(&p, d, PropStrings::of(&p, &state.strings))?;
    // SAFETY: non-NULL, NCCL passes a properties struct of this version.
    unsafe { out.write(v) };
    Ok(())
}

unsafe fn listen_impl<P: NetExport>(
    ctx: &'static CtxBox<P>,
    dev: c_int,
    handle: *mut c_void,
    listen: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked; NCCL passes a valid void**.
    unsafe { put(listen, null_mut(), "listenComm")? };
    let plugin = P::state().plugin()?;
    let d = dev_index(plugin, dev)?;
    let handle = handle_mut(handle)?;
    let max_recvs = plugin
        .properties(d)
        .map_or(1, |p| p.max_recvs.clamp(1, MAX_RECVS as i32) as usize);
    let l = plugin.listen(&ctx.ctx, d, handle)?;
    let b = Box::into_raw(Box::new(ListenBox::<P> {
        magic: MAGIC,
        kind: KIND_LISTEN,
        plugin,
        max_recvs,
        listen: Some(l),
    }));
    // SAFETY: checked non-NULL above.
    unsafe { listen.write(b as *mut c_void) };
    Ok(())
}

unsafe fn connect_impl<P: NetExport>(
    ctx: &'static CtxBox<P>,
    dev: c_int,
    config: Option<CommConfig>,
    handle: *mut c_void,
    send: *mut *mut c_void,
    dev_comm: *mut *mut abi::ncclNetDeviceHandle_v7_t,
) -> NetResult<()> {
    // SAFETY: NULL checked; NCCL passes a valid void**.
    unsafe { put(send, null_mut(), "sendComm")? };
    if !dev_comm.is_null() {
        // SAFETY: non-NULL out-pointer from NCCL.
        unsafe { dev_comm.write(null_mut()) };
    }
    let plugin = P::state().plugin()?;
    let d = dev_index(plugin, dev)?;
    let handle = handle_mut(handle)?;
    let config = config.unwrap_or(ctx.config);
    if let Some(c) = plugin.connect(&ctx.ctx, d, handle, &config)? {
        let b = CommBox::<P, P::SendComm>::new(KIND_SEND, plugin, MAX_RECVS, c);
        // SAFETY: checked non-NULL above.
        unsafe { send.write(b as *mut c_void) };
    }
    Ok(())
}

unsafe fn accept_impl<P: NetExport>(
    listen: *mut c_void,
    recv: *mut *mut c_void,
    dev_comm: *mut *mut abi::ncclNetDeviceHandle_v7_t,
) -> NetResult<()> {
    // SAFETY: NULL checked; NCCL passes a valid void**.
    unsafe { put(recv, null_mut(), "recvComm")? };
    if !dev_comm.is_null() {
        // SAFETY: non-NULL out-pointer from NCCL.
        unsafe { dev_comm.write(null_mut()) };
    }
    // SAFETY: `listen` comes from our `listen`.
    let lb: &mut ListenBox<P> = unsafe { object(listen, KIND_LISTEN)? };
    let plugin = lb.plugin;
    let l = lb
        .listen
        .as_mut()
        .ok_or_else(|| NetError::Internal("listenComm already closed".into()))?;
    if let Some(c) = plugin.accept(l)? {
        let b = CommBox::<P, P::RecvComm>::new(KIND_RECV, plugin, lb.max_recvs, c);
        // SAFETY: checked non-NULL above.
        unsafe { recv.write(b as *mut c_void) };
    }
    Ok(())
}

/// Runs `f` on the send or receive comm behind `comm`.
///
/// # Safety
/// `comm` must be NULL or a comm of this plugin.
unsafe fn with_comm<P: Net, R>(
    comm: *mut c_void,
    f: impl FnOnce(&'static P, CommMut<'_, P>) -> NetResult<R>,
) -> NetResult<R> {
    if comm.is_null() {
        return Err(NetError::InvalidArgument("comm is NULL".into()));
    }
    // SAFETY: non-NULL; the caller guarantees readability of the header.
    let kind = unsafe { object::<Header>(comm, KIND_SEND) }
        .map(|_| KIND_SEND)
        // SAFETY: as above.
        .or_else(|_| unsafe { object::<Header>(comm, KIND_RECV) }.map(|_| KIND_RECV))
        .map_err(|_| {
            NetError::Internal(format!(
                "comm {comm:p} is neither a live sendComm nor recvComm of this plugin"
            ))
        })?;
    if kind == KIND_SEND {
        // SAFETY: header checked.
        let b: &mut CommBox<P, P::SendComm> = unsafe { object(comm, KIND_SEND)? };
        let plugin = b.plugin;
        f(plugin, CommMut::Send(b.comm()?))
    } else {
        // SAFETY: header checked.
        let b: &mut CommBox<P, P::RecvComm> = unsafe { object(comm, KIND_RECV)? };
        let plugin = b.plugin;
        f(plugin, CommMut::Recv(b.comm()?))
    }
}

unsafe fn reg_mr_impl<P: NetExport>(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    ty: c_int,
    dmabuf: Option<(u64, c_int)>,
    mhandle: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked; NCCL passes a valid void**.
    unsafe { put(mhandle, null_mut(), "mhandle")? };
    let ty = ptr_type(ty)?;
    let buf = Buf::new(data as *mut u8, size);
    // SAFETY: `comm` comes from our connect/accept.
    let mr = unsafe {
        with_comm::<P, _>(comm, |plugin, c| match dmabuf {
            None => plugin.reg_mr(c, buf, ty),
            Some((offset, fd)) => plugin.reg_mr_dmabuf(c, buf, ty, offset, fd),
        })?
    };
    let b = Box::into_raw(Box::new(MrBox::<P> {
        magic: MAGIC,
        kind: KIND_MR,
        mr,
    }));
    // SAFETY: checked non-NULL above.
    unsafe { mhandle.write(b as *mut c_void) };
    Ok(())
}

unsafe fn dereg_mr_impl<P: NetExport>(comm: *mut c_void, mhandle: *mut c_void) -> NetResult<()> {
    // SAFETY: `mhandle` comes from our regMr.
    let mb: &mut MrBox<P> = unsafe { object(mhandle, KIND_MR)? };
    // SAFETY: `comm` comes from our connect/accept.
    unsafe {
        with_comm::<P, _>(comm, |plugin, c| {
            mb.magic = DEAD;
            // SAFETY: created by `Box::into_raw` in `reg_mr_impl`, freed only here.
            let mb = Box::from_raw(mb as *mut MrBox<P>);
            plugin.dereg_mr(c, mb.mr)
        })
    }
}

unsafe fn isend_impl<P: NetExport>(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked; NCCL passes a valid void**.
    unsafe { put(request, null_mut(), "request")? };
    // SAFETY: `comm` comes from our connect.
    let b: &mut CommBox<P, P::SendComm> = unsafe { object(comm, KIND_SEND)? };
    // SAFETY: `mhandle` is NULL or from our regMr.
    let mr = unsafe { mr_ref::<P>(mhandle)? };
    let Some(idx) = b.free.pop() else { return Ok(()) };
    let plugin = b.plugin;
    match b
        .comm()
        .and_then(|c| plugin.isend(c, Buf::new(data as *mut u8, size), tag, mr))
    {
        Ok(Some(req)) => {
            let r = b.post(idx, req);
            // SAFETY: checked non-NULL above.
            unsafe { request.write(r) };
            Ok(())
        }
        Ok(None) => {
            b.free.push(idx);
            Ok(())
        }
        Err(e) => {
            b.free.push(idx);
            Err(e)
        }
    }
}

/// Posts a (grouped) `irecv` (`flush == false`) or `iflush` (`flush == true`).
///
/// # Safety
/// Pointers as in the C API; `size(i)` reads `sizes[i]` for `i < n`.
#[allow(clippy::too_many_arguments)]
unsafe fn irecv_impl<P: NetExport>(
    flush: bool,
    comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    size: impl Fn(usize) -> NetResult<usize>,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> NetResult<()> {
    // Always overwrite `*request`: a v9+ caller may have stored 1
    // (NCCL_NET_OPTIONAL_RECV_COMPLETION) there, which must never be left behind.
    // SAFETY: NULL checked; NCCL passes a valid void**.
    unsafe { put(request, null_mut(), "request")? };
    // SAFETY: `comm` comes from our accept.
    let b: &mut CommBox<P, P::RecvComm> = unsafe { object(comm, KIND_RECV)? };
    let op = if flush { "iflush" } else { "irecv" };
    let max = b.max_recvs.min(MAX_RECVS);
    let n = usize::try_from(n)
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| NetError::Internal(format!("{op} with n={n}, expected 1..={max} (maxRecvs)")))?;
    if data.is_null() {
        return Err(NetError::InvalidArgument(format!("{op}: data array is NULL")));
    }
    if !flush && tags.is_null() {
        return Err(NetError::InvalidArgument("irecv: tags array is NULL".into()));
    }
    let mut bufs: Vec<RecvBuf<'_, P::Mr>> = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: NCCL passes arrays of `n` entries (mhandles may be NULL as a whole).
        let (ptr, tag, mh) = unsafe {
            (
                *data.add(i),
                if tags.is_null() { 0 } else { *tags.add(i) },
                if mhandles.is_null() {
                    null_mut()
                } else {
                    *mhandles.add(i)
                },
            )
        };
        // SAFETY: `mh` is NULL or from our regMr.
        let mr = unsafe { mr_ref::<P>(mh)? };
        bufs.push(RecvBuf {
            buf: Buf::new(ptr as *mut u8, size(i)?),
            tag,
            mr,
        });
    }
    let Some(idx) = b.free.pop() else { return Ok(()) };
    let plugin = b.plugin;
    let r = b.comm().and_then(|c| {
        if flush {
            plugin.iflush(c, &bufs)
        } else {
            plugin.irecv(c, &bufs)
        }
    });
    match r {
        Ok(Some(req)) => {
            let r = b.post(idx, req);
            // SAFETY: checked non-NULL above.
            unsafe { request.write(r) };
            Ok(())
        }
        Ok(None) => {
            b.free.push(idx);
            Ok(())
        }
        Err(e) => {
            b.free.push(idx);
            Err(e)
        }
    }
}

unsafe fn test_impl<P: NetExport>(request: *mut c_void, done: *mut c_int, sizes: *mut c_int) -> NetResult<()> {
    if done.is_null() {
        return Err(NetError::InvalidArgument("test: done is NULL".into()));
    }
    // SAFETY: `request` comes from our isend/irecv/iflush.
    let slot: &mut Slot<P> = unsafe { object(request, KIND_REQ)? };
    let Some(req) = slot.req.as_mut() else {
        return Err(NetError::Internal(format!(
            "request {request:p} was already completed and freed"
        )));
    };
    let r = slot.plugin.test(req);
    let finished = !matches!(r, Ok(TestStatus::Pending));
    if finished {
        slot.req = None;
        // SAFETY: the free list lives in the comm box, which outlives its slots; NCCL drives a
        // comm and its requests from one thread at a time.
        unsafe { (*slot.free_list).push(slot.index) };
    }
    match r? {
        TestStatus::Pending => {
            // SAFETY: checked non-NULL above.
            unsafe { done.write(0) };
        }
        TestStatus::Done { n, sizes: s } => {
            if !sizes.is_null() {
                for (i, &v) in s.iter().enumerate().take(n.min(MAX_RECVS)) {
                    // SAFETY: NCCL passes room for `n` sizes when non-NULL.
                    unsafe { sizes.add(i).write(c_int::try_from(v).unwrap_or(c_int::MAX)) };
                }
            }
            // SAFETY: checked non-NULL above.
            unsafe { done.write(1) };
        }
    }
    Ok(())
}

unsafe fn close_comm_impl<P: NetExport, C>(
    comm: *mut c_void,
    kind: u32,
    close: impl FnOnce(&'static P, C) -> NetResult<()>,
) -> NetResult<()> {
    // SAFETY: `comm` comes from our connect/accept.
    let b: &mut CommBox<P, C> = unsafe { object(comm, kind)? };
    b.magic = DEAD;
    // SAFETY: created by `Box::into_raw` in `CommBox::new`, freed only here.
    let mut b = unsafe { Box::from_raw(b as *mut CommBox<P, C>) };
    for s in b.slots.iter_mut() {
        s.magic = DEAD;
        drop(s.req.take());
    }
    match b.comm.take() {
        Some(c) => close(b.plugin, c),
        None => Ok(()),
    }
}

unsafe fn close_listen_impl<P: NetExport>(listen: *mut c_void) -> NetResult<()> {
    // SAFETY: `listen` comes from our listen.
    let b: &mut ListenBox<P> = unsafe { object(listen, KIND_LISTEN)? };
    b.magic = DEAD;
    // SAFETY: created by `Box::into_raw` in `listen_impl`, freed only here.
    let mut b = unsafe { Box::from_raw(b as *mut ListenBox<P>) };
    match b.listen.take() {
        Some(l) => b.plugin.close_listen(l),
        None => Ok(()),
    }
}

unsafe fn get_device_mr_impl<P: NetExport>(
    comm: *mut c_void,
    mhandle: *mut c_void,
    dptr: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked; NCCL passes a valid void**.
    unsafe { put(dptr, null_mut(), "dptr_mhandle")? };
    // SAFETY: pointers come from our connect/accept/regMr.
    unsafe {
        with_comm::<P, _>(comm, |_, _| Ok(()))?;
        mr_ref::<P>(mhandle)?;
    }
    Ok(())
}

unsafe fn make_vdevice_impl<P: NetExport>(d: *mut c_int, ndevs: c_int, devs: &[c_int]) -> NetResult<()> {
    if d.is_null() {
        return Err(NetError::InvalidArgument("makeVDevice: d is NULL".into()));
    }
    let n = usize::try_from(ndevs)
        .ok()
        .filter(|&n| n <= devs.len())
        .ok_or_else(|| NetError::InvalidArgument(format!("makeVDevice: ndevs={ndevs}, expected 0..={}", devs.len())))?;
    let v = P::state().plugin()?.make_vdevice(&devs[..n])?;
    let v = c_int::try_from(v).map_err(|_| NetError::Internal(format!("virtual device {v} does not fit an int")))?;
    // SAFETY: checked non-NULL above.
    unsafe { d.write(v) };
    Ok(())
}

unsafe fn set_net_attr_impl<P: NetExport>(ctx: *mut c_void, attr: *mut abi::ncclNetAttr_v12_t) -> NetResult<()> {
    // SAFETY: `ctx` comes from our init.
    let c: &mut CtxBox<P> = unsafe { object(ctx, KIND_CTX)? };
    // SAFETY: NCCL passes a valid attribute struct or NULL.
    let attr =
        unsafe { attr.as_ref() }.ok_or_else(|| NetError::InvalidArgument("setNetAttr: netAttr is NULL".into()))?;
    P::state().plugin()?.set_net_attr(&c.ctx, attr)
}

pub(super) fn int_size(size: c_int, what: &str) -> NetResult<usize> {
    usize::try_from(size).map_err(|_| NetError::InvalidArgument(format!("{what}: negative size {size}")))
}

// ---------------------------------------------------------------------------
// extern "C" shims, one per distinct slot signature.
// ---------------------------------------------------------------------------

fn g<P: NetExport>(what: &str, f: impl FnOnce() -> NetResult<()>) -> ncclResult_t {
    guard(P::NAME, what, f)
}

/// Shim bodies below dereference C pointers; each `unsafe` block's justification is
/// the C API contract of the slot it implements (NCCL passes valid or NULL pointers).
macro_rules! shim {
    ($(#[$m:meta])* fn $name:ident<P>($($a:ident : $t:ty),*) => $what:literal, $body:expr) => {
        $(#[$m])*
        #[doc(hidden)]
        pub unsafe extern "C" fn $name<P: NetExport>($($a: $t),*) -> ncclResult_t {
            g::<P>($what, || $body)
        }
    };
}

type Vp = *mut c_void;
type Vpp = *mut *mut c_void;
type DevH = *mut *mut abi::ncclNetDeviceHandle_v7_t;

shim!(fn init_v6<P>(logger: abi::ncclDebugLogger_t) => "init", init_shared_impl::<P>(logger));
shim!(fn init_v10<P>(logger: abi::ncclDebugLogger_t, prof: abi::ncclProfilerCallback_t) => "init",
    { crate::sdk::net_profiler::set_callback(prof); init_shared_impl::<P>(logger) });
shim!(fn init_v11<P>(ctx: Vpp, comm_id: u64, config: *mut abi::ncclNetCommConfig_v12_t,
    logger: abi::ncclDebugLogger_t, prof: abi::ncclProfilerCallback_t) => "init",
    { crate::sdk::net_profiler::set_callback(prof);
    // SAFETY: C API contract.
    unsafe { init_ctx_impl::<P>(ctx, comm_id, config, logger) } });
shim!(fn finalize<P>(ctx: Vp) => "finalize",
    // SAFETY: C API contract.
    unsafe { finalize_impl::<P>(ctx) });
shim!(fn devices<P>(ndev: *mut c_int) => "devices",
    // SAFETY: C API contract.
    unsafe { devices_impl::<P>(ndev) });
shim!(fn get_properties_v6<P>(dev: c_int, props: *mut abi::ncclNetProperties_v6_t) => "getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P, _>(dev, props, |p, _, s| Ok(props::props_v6(p, s))) });
shim!(fn get_properties_v7<P>(dev: c_int, props: *mut abi::ncclNetProperties_v7_t) => "getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P, _>(dev, props, |p, _, s| Ok(props::props_v7(p, s))) });
shim!(fn get_properties_v8<P>(dev: c_int, props: *mut abi::ncclNetProperties_v8_t) => "getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P, _>(dev, props, |p, _, s| Ok(props::props_v8(p, s))) });
shim!(fn get_properties_v9<P>(dev: c_int, props: *mut abi::ncclNetProperties_v9_t) => "getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P, _>(dev, props, props::props_v9) });
shim!(fn get_properties_v11<P>(dev: c_int, props: *mut abi::ncclNetProperties_v11_t) => "getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P, _>(dev, props, props::props_v11) });
shim!(fn get_properties_v12<P>(dev: c_int, props: *mut abi::ncclNetProperties_v12_t) => "getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P, _>(dev, props, props::props_v12) });
shim!(fn listen_v6<P>(dev: c_int, handle: Vp, listen: Vpp) => "listen",
    // SAFETY: C API contract.
    unsafe { listen_impl::<P>(P::state().shared_ctx()?, dev, handle, listen) });
shim!(fn listen_v11<P>(ctx: Vp, dev: c_int, handle: Vp, listen: Vpp) => "listen",
    // SAFETY: C API contract; `ctx` is from our init and lives until finalize.
    unsafe { listen_impl::<P>(&*(object::<CtxBox<P>>(ctx, KIND_CTX)? as *const CtxBox<P>), dev, handle, listen) });
shim!(fn connect_v6<P>(dev: c_int, handle: Vp, send: Vpp) => "connect",
    // SAFETY: C API contract.
    unsafe { connect_impl::<P>(P::state().shared_ctx()?, dev, None, handle, send, null_mut()) });
shim!(fn connect_v7<P>(dev: c_int, handle: Vp, send: Vpp, dev_comm: DevH) => "connect",
    // SAFETY: C API contract.
    unsafe { connect_impl::<P>(P::state().shared_ctx()?, dev, None, handle, send, dev_comm) });
shim!(fn connect_v10<P>(dev: c_int, config: *mut abi::ncclNetCommConfig_v10_t, handle: Vp, send: Vpp,
dev_comm: DevH) => "connect",
// SAFETY: C API contract.
unsafe {
    let cfg = config.as_ref().map_or_else(CommConfig::default, |c| CommConfig { traffic_class: c.trafficClass });
    connect_impl::<P>(P::state().shared_ctx()?, dev, Some(cfg), handle, send, dev_comm)
});
shim!(fn connect_v11<P>(ctx: Vp, dev: c_int, handle: Vp, send: Vpp, dev_comm: DevH) => "connect",
// SAFETY: C API contract; `ctx` is from our init and lives until finalize.
unsafe {
    let ctx = &*(object::<CtxBox<P>>(ctx, KIND_CTX)? as *const CtxBox<P>);
    connect_impl::<P>(ctx, dev, None, handle, send, dev_comm)
});
shim!(fn accept_v6<P>(listen: Vp, recv: Vpp) => "accept",
    // SAFETY: C API contract.
    unsafe { accept_impl::<P>(listen, recv, null_mut()) });
shim!(fn accept_v7<P>(listen: Vp, recv: Vpp, dev_comm: DevH) => "accept",
    // SAFETY: C API contract.
    unsafe { accept_impl::<P>(listen, recv, dev_comm) });
shim!(fn reg_mr_v6<P>(comm: Vp, data: Vp, size: c_int, ty: c_int, mhandle: Vpp) => "regMr",
    // SAFETY: C API contract.
    unsafe { reg_mr_impl::<P>(comm, data, int_size(size, "regMr")?, ty, None, mhandle) });
shim!(fn reg_mr_v8<P>(comm: Vp, data: Vp, size: usize, ty: c_int, mhandle: Vpp) => "regMr",
    // SAFETY: C API contract.
    unsafe { reg_mr_impl::<P>(comm, data, size, ty, None, mhandle) });
shim!(fn reg_mr_dmabuf<P>(comm: Vp, data: Vp, size: usize, ty: c_int, offset: u64, fd: c_int, mhandle: Vpp)
    => "regMrDmaBuf",
    // SAFETY: C API contract.
    unsafe { reg_mr_impl::<P>(comm, data, size, ty, Some((offset, fd)), mhandle) });
shim!(fn dereg_mr<P>(comm: Vp, mhandle: Vp) => "deregMr",
    // SAFETY: C API contract.
    unsafe { dereg_mr_impl::<P>(comm, mhandle) });
shim!(fn isend_v6<P>(comm: Vp, data: Vp, size: c_int, tag: c_int, mhandle: Vp, request: Vpp) => "isend",
    // SAFETY: C API contract.
    unsafe { isend_impl::<P>(comm, data, int_size(size, "isend")?, tag, mhandle, request) });
shim!(fn isend_v9<P>(comm: Vp, data: Vp, size: usize, tag: c_int, mhandle: Vp, request: Vpp) => "isend",
    // SAFETY: C API contract.
    unsafe { isend_impl::<P>(comm, data, size, tag, mhandle, request) });
shim!(fn isend_v10<P>(comm: Vp, data: Vp, size: usize, tag: c_int, mhandle: Vp, phandle: Vp, request: Vpp)
    => "isend",
    crate::sdk::net_profiler::with_step_handles(&[phandle], ||
        // SAFETY: C API contract.
        unsafe { isend_impl::<P>(comm, data, size, tag, mhandle, request) }));
shim!(fn irecv_v6<P>(comm: Vp, n: c_int, data: Vpp, sizes: *mut c_int, tags: *mut c_int, mhandles: Vpp,
    request: Vpp) => "irecv",
    // SAFETY: C API contract (`sizes` has `n` entries).
    unsafe { irecv_impl::<P>(false, comm, n, data, |i| int_size(*sizes.add(i), "irecv"), tags, mhandles, request) });
shim!(fn irecv_v9<P>(comm: Vp, n: c_int, data: Vpp, sizes: *mut usize, tags: *mut c_int, mhandles: Vpp,
    request: Vpp) => "irecv",
    // SAFETY: C API contract (`sizes` has `n` entries).
    unsafe { irecv_impl::<P>(false, comm, n, data, |i| Ok(*sizes.add(i)), tags, mhandles, request) });
shim!(fn irecv_v10<P>(comm: Vp, n: c_int, data: Vpp, sizes: *mut usize, tags: *mut c_int, mhandles: Vpp,
phandles: Vpp, request: Vpp) => "irecv",
{
    let ph: &[*mut c_void] = if phandles.is_null() || n <= 0 { &[] } else {
        // SAFETY: `phandles` is non-NULL and has `n` entries (C API contract).
        unsafe { std::slice::from_raw_parts(phandles, n as usize) }
    };
    crate::sdk::net_profiler::with_step_handles(ph, ||
        // SAFETY: C API contract (`sizes` has `n` entries).
        unsafe { irecv_impl::<P>(false, comm, n, data, |i| Ok(*sizes.add(i)), tags, mhandles, request) })
});
shim!(fn iflush<P>(comm: Vp, n: c_int, data: Vpp, sizes: *mut c_int, mhandles: Vpp, request: Vpp) => "iflush",
    // SAFETY: C API contract (`sizes` has `n` entries).
    unsafe { irecv_impl::<P>(true, comm, n, data, |i| int_size(*sizes.add(i), "iflush"), null_mut(), mhandles, request) });
shim!(fn test<P>(request: Vp, done: *mut c_int, sizes: *mut c_int) => "test",
    // SAFETY: C API contract.
    unsafe { test_impl::<P>(request, done, sizes) });
shim!(fn close_send<P>(comm: Vp) => "closeSend",
    // SAFETY: C API contract.
    unsafe { close_comm_impl::<P, P::SendComm>(comm, KIND_SEND, |p, c| p.close_send(c)) });
shim!(fn close_recv<P>(comm: Vp) => "closeRecv",
    // SAFETY: C API contract.
    unsafe { close_comm_impl::<P, P::RecvComm>(comm, KIND_RECV, |p, c| p.close_recv(c)) });
shim!(fn close_listen<P>(listen: Vp) => "closeListen",
    // SAFETY: C API contract.
    unsafe { close_listen_impl::<P>(listen) });
shim!(fn get_device_mr<P>(comm: Vp, mhandle: Vp, dptr: Vpp) => "getDeviceMr",
    // SAFETY: C API contract.
    unsafe { get_device_mr_impl::<P>(comm, mhandle, dptr) });
shim!(fn irecv_consumed<P>(_comm: Vp, _n: c_int, _request: Vp) => "irecvConsumed", Ok(()));
shim!(fn make_vdevice_v9<P>(d: *mut c_int, props: *mut abi::ncclNetVDeviceProps_v9_t) => "makeVDevice",
// SAFETY: C API contract.
unsafe {
    let p = props.as_ref().ok_or_else(|| NetError::InvalidArgument("makeVDevice: props is NULL".into()))?;
    make_vdevice_impl::<P>(d, p.ndevs, &p.devs)
});
shim!(fn make_vdevice_v12<P>(d: *mut c_int, props: *mut abi::ncclNetVDeviceProps_v12_t) => "makeVDevice",
// SAFETY: C API contract.
unsafe {
    let p = props.as_ref().ok_or_else(|| NetError::InvalidArgument("makeVDevice: props is NULL".into()))?;
    make_vdevice_impl::<P>(d, p.ndevs, &p.devs)
});
shim!(fn set_net_attr<P>(ctx: Vp, attr: *mut abi::ncclNetAttr_v12_t) => "setNetAttr",
    // SAFETY: C API contract.
    unsafe { set_net_attr_impl::<P>(ctx, attr) });

// ---------------------------------------------------------------------------
// Vtables.
// ---------------------------------------------------------------------------

const fn name<P: Net>() -> *const std::ffi::c_char {
    let n: &'static CStr = P::NAME;
    n.as_ptr()
}

/// The `ncclNet_v6_t` of plugin `P`.
pub const fn net_v6<P: NetExport>() -> abi::ncclNet_v6_t {
    abi::ncclNet_v6_t {
        name: name::<P>(),
        init: Some(init_v6::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v6::<P>),
        listen: Some(listen_v6::<P>),
        connect: Some(connect_v6::<P>),
        accept: Some(accept_v6::<P>),
        regMr: Some(reg_mr_v6::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        isend: Some(isend_v6::<P>),
        irecv: Some(irecv_v6::<P>),
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeSend: Some(close_send::<P>),
        closeRecv: Some(close_recv::<P>),
        closeListen: Some(close_listen::<P>),
    }
}

/// The `ncclNet_v7_t` of plugin `P`.
pub const fn net_v7<P: NetExport>() -> abi::ncclNet_v7_t {
    abi::ncclNet_v7_t {
        name: name::<P>(),
        init: Some(init_v6::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v7::<P>),
        listen: Some(listen_v6::<P>),
        connect: Some(connect_v7::<P>),
        accept: Some(accept_v7::<P>),
        regMr: Some(reg_mr_v6::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        isend: Some(isend_v6::<P>),
        irecv: Some(irecv_v6::<P>),
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeSend: Some(close_send::<P>),
        closeRecv: Some(close_recv::<P>),
        closeListen: Some(close_listen::<P>),
        getDeviceMr: Some(get_device_mr::<P>),
        irecvConsumed: Some(irecv_consumed::<P>),
    }
}

/// The `ncclNet_v8_t` of plugin `P`.
pub const fn net_v8<P: NetExport>() -> abi::ncclNet_v8_t {
    abi::ncclNet_v8_t {
        name: name::<P>(),
        init: Some(init_v6::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v8::<P>),
        listen: Some(listen_v6::<P>),
        connect: Some(connect_v7::<P>),
        accept: Some(accept_v7::<P>),
        regMr: Some(reg_mr_v8::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        isend: Some(isend_v6::<P>),
        irecv: Some(irecv_v6::<P>),
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeSend: Some(close_send::<P>),
        closeRecv: Some(close_recv::<P>),
        closeListen: Some(close_listen::<P>),
        getDeviceMr: Some(get_device_mr::<P>),
        irecvConsumed: Some(irecv_consumed::<P>),
    }
}

/// The `ncclNet_v9_t` of plugin `P`.
pub const fn net_v9<P: NetExport>() -> abi::ncclNet_v9_t {
    abi::ncclNet_v9_t {
        name: name::<P>(),
        init: Some(init_v6::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v9::<P>),
        listen: Some(listen_v6::<P>),
        connect: Some(connect_v7::<P>),
        accept: Some(accept_v7::<P>),
        regMr: Some(reg_mr_v8::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        isend: Some(isend_v9::<P>),
        irecv: Some(irecv_v9::<P>),
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeSend: Some(close_send::<P>),
        closeRecv: Some(close_recv::<P>),
        closeListen: Some(close_listen::<P>),
        getDeviceMr: Some(get_device_mr::<P>),
        irecvConsumed: Some(irecv_consumed::<P>),
        makeVDevice: Some(make_vdevice_v9::<P>),
    }
}

/// The `ncclNet_v10_t` of plugin `P`.
pub const fn net_v10<P: NetExport>() -> abi::ncclNet_v10_t {
    abi::ncclNet_v10_t {
        name: name::<P>(),
        init: Some(init_v10::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v9::<P>),
        listen: Some(listen_v6::<P>),
        connect: Some(connect_v10::<P>),
        accept: Some(accept_v7::<P>),
        regMr: Some(reg_mr_v8::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        isend: Some(isend_v10::<P>),
        irecv: Some(irecv_v10::<P>),
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeSend: Some(close_send::<P>),
        closeRecv: Some(close_recv::<P>),
        closeListen: Some(close_listen::<P>),
        getDeviceMr: Some(get_device_mr::<P>),
        irecvConsumed: Some(irecv_consumed::<P>),
        makeVDevice: Some(make_vdevice_v9::<P>),
    }
}

/// The `ncclNet_v11_t` of plugin `P`.
pub const fn net_v11<P: NetExport>() -> abi::ncclNet_v11_t {
    abi::ncclNet_v11_t {
        name: name::<P>(),
        init: Some(init_v11::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v11::<P>),
        listen: Some(listen_v11::<P>),
        connect: Some(connect_v11::<P>),
        accept: Some(accept_v7::<P>),
        regMr: Some(reg_mr_v8::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        isend: Some(isend_v10::<P>),
        irecv: Some(irecv_v10::<P>),
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeSend: Some(close_send::<P>),
        closeRecv: Some(close_recv::<P>),
        closeListen: Some(close_listen::<P>),
        getDeviceMr: Some(get_device_mr::<P>),
        irecvConsumed: Some(irecv_consumed::<P>),
        makeVDevice: Some(make_vdevice_v9::<P>),
        finalize: Some(finalize::<P>),
        setNetAttr: Some(set_net_attr::<P>),
    }
}

/// The `ncclNet_v12_t` of plugin `P`.
pub const fn net_v12<P: NetExport>() -> abi::ncclNet_v12_t {
    abi::ncclNet_v12_t {
        name: name::<P>(),
        init: Some(init_v11::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v12::<P>),
        listen: Some(listen_v11::<P>),
        connect: Some(connect_v11::<P>),
        accept: Some(accept_v7::<P>),
        regMr: Some(reg_mr_v8::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        isend: Some(isend_v10::<P>),
        irecv: Some(irecv_v10::<P>),
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeSend: Some(close_send::<P>),
        closeRecv: Some(close_recv::<P>),
        closeListen: Some(close_listen::<P>),
        getDeviceMr: Some(get_device_mr::<P>),
        irecvConsumed: Some(irecv_consumed::<P>),
        makeVDevice: Some(make_vdevice_v12::<P>),
        finalize: Some(finalize::<P>),
        setNetAttr: Some(set_net_attr::<P>),
    }
}
