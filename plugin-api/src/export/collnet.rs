//! The generic machinery behind [`export_collnet_plugin!`](crate::export_collnet_plugin):
//! `extern "C"` shims generic over a [`CollNet`] type, and `const fn`s building each
//! `ncclCollNet_vN_t` from them (reference §2; NCCL 2.30.7 `src/plugin/net/net_v*.cc`).
//!
//! Ownership follows [`super::net`]: contexts, listen comms, collComms, registrations
//! and requests are SDK boxes starting with a `(magic, kind)` header, so NULL,
//! foreign, mistyped or closed pointers are reported as errors. Requests live in
//! boxed slots owned by their collComm (stable addresses, at most
//! [`MAX_COLL_REQUESTS`] outstanding: beyond that the post returns `*request =
//! NULL` and NCCL retries); `test` frees a slot once it reports completion or an
//! error, `closeColl` frees the rest.
//!
//! Version differences absorbed here:
//! * `iallreduce` `count`, `regMr` `size` (v6/v7) and `iflush` `size` are `int`:
//!   negative values are rejected, and `int` counts above `MAX_NET_SIZE` (2^30) as
//!   NCCL's v8 adapter does (`ncclCollNet_iallreduce`, `src/plugin/net/net_v8.cc`).
//! * v8 `ncclNetSGE_v8_t` has a 32-bit `size`; parts above `MAX_COLLNET_SIZE`
//!   (2^29) are rejected as NCCL's v8 adapter does. v9+ parts are `size_t`.
//! * v6/v7 have no `iallgather`/`ireducescatter`; v8+ fill them only when
//!   [`CollNet::HAS_IALLGATHER_IREDUCESCATTER`] is set.
//! * v6–v10 `init(logger)` share one context (the v10 collnet `init` has no profiler
//!   callback); v11+ `init(ctx, commId, logger)` create one per communicator.
//! * `test`'s `size` out-pointer may be NULL (NCCL's recv proxy passes NULL).

use std::ffi::{CStr, c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use super::guard;
use super::net::{
    DEAD, KIND_COLL, KIND_COLL_REQ, KIND_CTX, KIND_LISTEN, KIND_MR, MAGIC, handle_mut, int_size, object, ptr_type, put,
};
use super::props::{self, CStrInterner, PropStrings};
use crate::abi::{self, ncclDataType_t, ncclRedOp_t, ncclResult_t};
use crate::sdk::collnet::{CollNet, Sge, Window, dtype_size};
use crate::sdk::{Buf, Handle, NetError, NetResult};

/// Most requests one collComm may have outstanding (NCCL keeps at most
/// `NCCL_STEPS` (8) per channel and shares one collComm among ≤ 32 channels).
pub const MAX_COLL_REQUESTS: usize = 1024;

/// Most SGE parts one `iallgather`/`ireducescatter` may name (NCCL passes 1).
pub const MAX_SGE_PARTS: usize = 64;

/// Links a plugin type to its process-wide [`CollNetState`]. Implemented by
/// [`collnet_plugin_state!`](crate::collnet_plugin_state).
pub trait CollNetExport: CollNet {
    /// The one state object of this plugin type.
    fn state() -> &'static CollNetState<Self>;
}

/// Process-wide state of one exported CollNet type: the lazily created plugin,
/// the shared context of pre-v11 versions, and the interned property strings.
pub struct CollNetState<P: CollNet> {
    plugin: OnceLock<P>,
    init_lock: Mutex<()>,
    shared: OnceLock<CtxBox<P>>,
    shared_refs: AtomicUsize,
    strings: CStrInterner,
}

impl<P: CollNet> Default for CollNetState<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: CollNet> CollNetState<P> {
    /// Empty state (no plugin yet), usable in a `static`.
    pub const fn new() -> Self {
        CollNetState {
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
            .ok_or_else(|| NetError::Internal("collnet plugin used before a successful init".into()))
    }

    /// How many times a pre-v11 `init` succeeded.
    pub fn shared_refs(&self) -> usize {
        self.shared_refs.load(Ordering::Relaxed)
    }

    fn shared_ctx(&'static self) -> NetResult<&'static CtxBox<P>> {
        self.shared
            .get()
            .ok_or_else(|| NetError::Internal("collnet plugin used before a successful init".into()))
    }

    fn init_shared(&'static self) -> NetResult<()> {
        let plugin = self.plugin_or_init()?;
        if self.shared.get().is_none() {
            let _g = self.init_lock.lock().unwrap_or_else(|e| e.into_inner());
            if self.shared.get().is_none() {
                let ctx = plugin.init(0)?;
                let _ = self.shared.set(CtxBox {
                    magic: MAGIC,
                    kind: KIND_CTX,
                    ctx,
                });
            }
        }
        self.shared_refs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[repr(C)]
struct CtxBox<P: CollNet> {
    magic: u64,
    kind: u32,
    ctx: P::Ctx,
}

#[repr(C)]
struct ListenBox<P: CollNet> {
    magic: u64,
    kind: u32,
    plugin: &'static P,
    listen: Option<P::ListenComm>,
}

#[repr(C)]
struct MrBox<P: CollNet> {
    magic: u64,
    kind: u32,
    mr: P::Mr,
}

#[repr(C)]
struct Slot<P: CollNet> {
    magic: u64,
    kind: u32,
    index: u32,
    plugin: &'static P,
    free_list: *mut Vec<u32>,
    req: Option<P::Request>,
}

#[repr(C)]
struct CollBox<P: CollNet> {
    magic: u64,
    kind: u32,
    plugin: &'static P,
    rank: usize,
    nranks: usize,
    free: Vec<u32>,
    slots: Vec<Box<Slot<P>>>,
    comm: Option<P::CollComm>,
}

impl<P: CollNet> CollBox<P> {
    fn comm(&mut self) -> NetResult<&mut P::CollComm> {
        self.comm
            .as_mut()
            .ok_or_else(|| NetError::Internal("collComm already closed".into()))
    }

    /// A free slot index, growing the table up to [`MAX_COLL_REQUESTS`].
    fn take_slot(&mut self) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        if self.slots.len() >= MAX_COLL_REQUESTS {
            return None;
        }
        let index = self.slots.len() as u32;
        let free_list = &raw mut self.free;
        self.slots.push(Box::new(Slot {
            magic: MAGIC,
            kind: KIND_COLL_REQ,
            index,
            plugin: self.plugin,
            free_list,
            req: None,
        }));
        Some(index)
    }

    /// Posts through `f` into a fresh slot; writes the request (or NULL) to `out`.
    ///
    /// # Safety
    /// `out` must be valid for writes (checked non-NULL by the caller).
    unsafe fn post(
        &mut self,
        out: *mut *mut c_void,
        f: impl FnOnce(&'static P, &mut P::CollComm) -> NetResult<Option<P::Request>>,
    ) -> NetResult<()> {
        self.comm()?;
        // A full table: leave `*request` NULL; NCCL retries the post later.
        let Some(idx) = self.take_slot() else { return Ok(()) };
        let plugin = self.plugin;
        let r = match self.comm.as_mut() {
            Some(comm) => f(plugin, comm),
            None => Err(NetError::Internal("collComm already closed".into())),
        };
        match r {
            Ok(Some(req)) => {
                let slot = &mut self.slots[idx as usize];
                slot.req = Some(req);
                let p = &mut **slot as *mut Slot<P> as *mut c_void;
                // SAFETY: the caller checked `out` is non-NULL and writable.
                unsafe { out.write(p) };
                Ok(())
            }
            Ok(None) => {
                self.free.push(idx);
                Ok(())
            }
            Err(e) => {
                self.free.push(idx);
                Err(e)
            }
        }
    }
}

/// # Safety
/// `mh` must be NULL or an `mhandle` from this plugin's `regMr`.
unsafe fn mr_ref<'a, P: CollNet>(mh: *mut c_void) -> NetResult<Option<&'a P::Mr>> {
    if mh.is_null() {
        return Ok(None);
    }
    // SAFETY: caller's contract; the header is checked before the cast.
    let b: &mut MrBox<P> = unsafe { object(mh, KIND_MR)? };
    Ok(Some(&b.mr))
}

/// # Safety
/// `comm` must be NULL or readable for a header.
unsafe fn coll<'a, P: CollNet>(comm: *mut c_void) -> NetResult<&'a mut CollBox<P>> {
    // SAFETY: caller's contract.
    unsafe { object(comm, KIND_COLL) }
}

fn dev_index<P: CollNet>(plugin: &P, dev: c_int) -> NetResult<usize> {
    let n = plugin.devices()?;
    usize::try_from(dev)
        .ok()
        .filter(|&d| d < n)
        .ok_or_else(|| NetError::InvalidArgument(format!("device {dev} out of range (collnet plugin has {n} devices)")))
}

/// A data buffer of `len` bytes at `p`; NULL is allowed only when `len == 0`.
fn data_buf(p: *mut c_void, len: usize, what: &str) -> NetResult<Buf> {
    if p.is_null() && len > 0 {
        return Err(NetError::InvalidArgument(format!("{what} is NULL with {len} bytes")));
    }
    Ok(Buf::new(p as *mut u8, len))
}

/// An `int` element count of v6–v8 `iallreduce`: 0 ..= `MAX_NET_SIZE`.
fn int_count(count: c_int) -> NetResult<usize> {
    match usize::try_from(count) {
        Ok(c) if c <= abi::MAX_NET_SIZE => Ok(c),
        _ => Err(NetError::InvalidArgument(format!(
            "iallreduce: count {count} outside 0..={} (the int count of collnet v6-v8)",
            abi::MAX_NET_SIZE
        ))),
    }
}

fn bytes_of(count: usize, dtype: ncclDataType_t) -> NetResult<usize> {
    let es = dtype_size(dtype).ok_or_else(|| NetError::InvalidArgument(format!("unknown data type {dtype:?}")))?;
    count
        .checked_mul(es)
        .ok_or_else(|| NetError::InvalidArgument(format!("{count} elements of {dtype:?} overflow size_t")))
}

/// Reads `n` SGE entries through `get(i) -> (mhandle, address, size)`.
///
/// # Safety
/// `get(i)` reads entry `i < n` of a caller-provided array.
unsafe fn sges<'a, P: CollNet>(
    n: c_int,
    nonnull: bool,
    what: &str,
    get: impl Fn(usize) -> NetResult<(*mut c_void, *mut c_void, usize)>,
) -> NetResult<Vec<Sge<'a, P::Mr>>> {
    let n = usize::try_from(n)
        .ok()
        .filter(|&n| n <= MAX_SGE_PARTS)
        .ok_or_else(|| NetError::InvalidArgument(format!("{what}: {n} parts, expected 0..={MAX_SGE_PARTS}")))?;
    if n > 0 && !nonnull {
        return Err(NetError::InvalidArgument(format!("{what}: parts array is NULL")));
    }
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let (mh, addr, size) = get(i)?;
        // SAFETY: `mh` is NULL or from our regMr (C API contract).
        let mr = unsafe { mr_ref::<P>(mh)? };
        v.push(Sge {
            buf: data_buf(addr, size, what)?,
            mr,
        });
    }
    Ok(v)
}

fn window(
    nranks: usize,
    bytes_per_rank: usize,
    offset: usize,
    bytes: usize,
    parts: &[Sge<'_, impl Sized>],
    what: &str,
) -> NetResult<Window> {
    let total = nranks.checked_mul(bytes_per_rank).ok_or_else(|| {
        NetError::InvalidArgument(format!("{what}: {nranks} x bytesPerRank {bytes_per_rank} overflows"))
    })?;
    match offset.checked_add(bytes) {
        Some(end) if end <= total => {}
        _ => {
            return Err(NetError::InvalidArgument(format!(
                "{what}: window [{offset}, {offset}+{bytes}) outside the {total} bytes of {nranks} ranks x {bytes_per_rank}"
            )));
        }
    }
    let sum: usize = parts.iter().map(|p| p.buf.len).sum();
    if sum != bytes {
        return Err(NetError::InvalidArgument(format!(
            "{what}: {} parts hold {sum} bytes, windowBytes is {bytes}",
            parts.len()
        )));
    }
    Ok(Window {
        bytes_per_rank,
        offset,
        bytes,
    })
}

// ---------------------------------------------------------------------------
// Shim bodies (version independent).
// ---------------------------------------------------------------------------

fn init_shared_impl<P: CollNetExport>(logger: abi::ncclDebugLogger_t) -> NetResult<()> {
    crate::log::set_logger(logger);
    P::state().init_shared()
}

unsafe fn init_ctx_impl<P: CollNetExport>(
    ctx: *mut *mut c_void,
    comm_id: u64,
    logger: abi::ncclDebugLogger_t,
) -> NetResult<()> {
    crate::log::set_logger(logger);
    // SAFETY: NULL checked by `put`; NCCL passes a valid void**.
    unsafe { put(ctx, null_mut(), "ctx")? };
    let plugin = P::state().plugin_or_init()?;
    let c = plugin.init(comm_id)?;
    let b = Box::into_raw(Box::new(CtxBox::<P> {
        magic: MAGIC,
        kind: KIND_CTX,
        ctx: c,
    }));
    // SAFETY: checked non-NULL above.
    unsafe { ctx.write(b as *mut c_void) };
    Ok(())
}

unsafe fn finalize_impl<P: CollNetExport>(ctx: *mut c_void) -> NetResult<()> {
    let plugin = P::state().plugin()?;
    // SAFETY: `ctx` comes from our `init`.
    let b: &mut CtxBox<P> = unsafe { object(ctx, KIND_CTX)? };
    b.magic = DEAD;
    // SAFETY: created by `Box::into_raw` in `init_ctx_impl`, freed only here.
    let b = unsafe { Box::from_raw(b as *mut CtxBox<P>) };
    plugin.finalize(b.ctx)
}

unsafe fn devices_impl<P: CollNetExport>(ndev: *mut c_int) -> NetResult<()> {
    let n = P::state().plugin()?.devices()?;
    let n = c_int::try_from(n).map_err(|_| NetError::Internal(format!("{n} devices do not fit an int")))?;
    // SAFETY: NULL checked by `put`.
    unsafe { put(ndev, n, "ndev") }
}

unsafe fn get_properties_impl<P: CollNetExport, T>(
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
    // SAFETY: non-NULL; NCCL passes a properties struct of this version.
    unsafe { out.write(v) };
    Ok(())
}

unsafe fn listen_impl<P: CollNetExport>(
    ctx: &'static CtxBox<P>,
    dev: c_int,
    handle: *mut c_void,
    listen: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(listen, null_mut(), "listenComm")? };
    let plugin = P::state().plugin()?;
    let d = dev_index(plugin, dev)?;
    let handle = handle_mut(handle)?;
    let l = plugin.listen(&ctx.ctx, d, handle)?;
    let b = Box::into_raw(Box::new(ListenBox::<P> {
        magic: MAGIC,
        kind: KIND_LISTEN,
        plugin,
        listen: Some(l),
    }));
    // SAFETY: checked non-NULL above.
    unsafe { listen.write(b as *mut c_void) };
    Ok(())
}

unsafe fn ctx_ref<P: CollNetExport>(ctx: *mut c_void) -> NetResult<&'static CtxBox<P>> {
    // SAFETY: `ctx` comes from our init and lives until finalize (C API contract).
    unsafe { object::<CtxBox<P>>(ctx, KIND_CTX).map(|c| &*(c as *const CtxBox<P>)) }
}

unsafe fn connect_impl<P: CollNetExport>(
    handles: *mut *mut c_void,
    nranks: c_int,
    rank: c_int,
    listen: *mut c_void,
    coll_comm: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(coll_comm, null_mut(), "collComm")? };
    let n = usize::try_from(nranks)
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| NetError::InvalidArgument(format!("connect: nranks {nranks}, expected >= 1")))?;
    let r = usize::try_from(rank)
        .ok()
        .filter(|&r| r < n)
        .ok_or_else(|| NetError::InvalidArgument(format!("connect: rank {rank} outside 0..{n}")))?;
    if handles.is_null() {
        return Err(NetError::InvalidArgument("connect: handles array is NULL".into()));
    }
    let mut hs: Vec<&Handle> = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: NCCL passes an array of `nranks` handle pointers.
        let h = unsafe { *handles.add(i) };
        if h.is_null() {
            return Err(NetError::InvalidArgument(format!(
                "connect: handle of rank {i} is NULL"
            )));
        }
        hs.push(handle_mut(h)?);
    }
    // SAFETY: `listen` comes from our listen.
    let lb: &mut ListenBox<P> = unsafe { object(listen, KIND_LISTEN)? };
    let plugin = lb.plugin;
    let l = lb
        .listen
        .as_mut()
        .ok_or_else(|| NetError::Internal("listenComm already closed".into()))?;
    let c = plugin.connect(&hs, r, l)?;
    let b = Box::into_raw(Box::new(CollBox::<P> {
        magic: MAGIC,
        kind: KIND_COLL,
        plugin,
        rank: r,
        nranks: n,
        free: Vec::new(),
        slots: Vec::new(),
        comm: Some(c),
    }));
    // SAFETY: checked non-NULL above.
    unsafe { coll_comm.write(b as *mut c_void) };
    Ok(())
}

unsafe fn reduce_support_impl<P: CollNetExport>(
    dtype: ncclDataType_t,
    op: ncclRedOp_t,
    supported: *mut c_int,
) -> NetResult<()> {
    let s = P::state().plugin()?.reduce_support(dtype, op);
    // SAFETY: NULL checked by `put`.
    unsafe { put(supported, c_int::from(s), "supported") }
}

unsafe fn reg_mr_impl<P: CollNetExport>(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    ty: c_int,
    dmabuf: Option<(u64, c_int)>,
    mhandle: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(mhandle, null_mut(), "mhandle")? };
    let ty = ptr_type(ty)?;
    let buf = data_buf(data, size, "regMr data")?;
    // SAFETY: `comm` comes from our connect.
    let b = unsafe { coll::<P>(comm)? };
    let plugin = b.plugin;
    let c = b.comm()?;
    let mr = match dmabuf {
        None => plugin.reg_mr(c, buf, ty)?,
        Some((offset, fd)) => plugin.reg_mr_dmabuf(c, buf, ty, offset, fd)?,
    };
    let m = Box::into_raw(Box::new(MrBox::<P> {
        magic: MAGIC,
        kind: KIND_MR,
        mr,
    }));
    // SAFETY: checked non-NULL above.
    unsafe { mhandle.write(m as *mut c_void) };
    Ok(())
}

unsafe fn dereg_mr_impl<P: CollNetExport>(comm: *mut c_void, mhandle: *mut c_void) -> NetResult<()> {
    // SAFETY: `comm` comes from our connect.
    let b = unsafe { coll::<P>(comm)? };
    // SAFETY: `mhandle` comes from our regMr.
    let mb: &mut MrBox<P> = unsafe { object(mhandle, KIND_MR)? };
    let plugin = b.plugin;
    let c = b.comm()?;
    mb.magic = DEAD;
    // SAFETY: created by `Box::into_raw` in `reg_mr_impl`, freed only here.
    let mb = unsafe { Box::from_raw(mb as *mut MrBox<P>) };
    plugin.dereg_mr(c, mb.mr)
}

#[allow(clippy::too_many_arguments)]
unsafe fn iallreduce_impl<P: CollNetExport>(
    comm: *mut c_void,
    send: *mut c_void,
    recv: *mut c_void,
    count: usize,
    dtype: ncclDataType_t,
    op: ncclRedOp_t,
    send_mh: *mut c_void,
    recv_mh: *mut c_void,
    request: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(request, null_mut(), "request")? };
    let bytes = bytes_of(count, dtype)?;
    let send = data_buf(send, bytes, "iallreduce sendData")?;
    let recv = data_buf(recv, bytes, "iallreduce recvData")?;
    // SAFETY: mhandles are NULL or from our regMr.
    let (smr, rmr) = unsafe { (mr_ref::<P>(send_mh)?, mr_ref::<P>(recv_mh)?) };
    // SAFETY: `comm` comes from our connect.
    let b = unsafe { coll::<P>(comm)? };
    // SAFETY: `request` checked non-NULL above.
    unsafe { b.post(request, |p, c| p.iallreduce(c, send, recv, count, dtype, op, smr, rmr)) }
}

/// # Safety
/// C API contract of `iallgather`; `get(i)` reads entry `i` of `recvParts`.
#[allow(clippy::too_many_arguments)]
unsafe fn iallgather_impl<P: CollNetExport>(
    comm: *mut c_void,
    send: *mut c_void,
    n_parts: c_int,
    parts_nonnull: bool,
    get: impl Fn(usize) -> NetResult<(*mut c_void, *mut c_void, usize)>,
    bytes_per_rank: usize,
    offset: usize,
    bytes: usize,
    send_mh: *mut c_void,
    request: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(request, null_mut(), "request")? };
    // SAFETY: `comm` comes from our connect.
    let b = unsafe { coll::<P>(comm)? };
    // SAFETY: caller's contract.
    let parts = unsafe { sges::<P>(n_parts, parts_nonnull, "iallgather recvParts", get)? };
    let w = window(b.nranks, bytes_per_rank, offset, bytes, &parts, "iallgather")?;
    let send = data_buf(send, w.rank_part(b.rank).1, "iallgather sendData")?;
    // SAFETY: NULL or from our regMr.
    let smr = unsafe { mr_ref::<P>(send_mh)? };
    // SAFETY: `request` checked non-NULL above.
    unsafe { b.post(request, |p, c| p.iallgather(c, send, smr, &parts, w)) }
}

/// # Safety
/// C API contract of `ireducescatter`; `get(i)` reads entry `i` of `sendParts`.
#[allow(clippy::too_many_arguments)]
unsafe fn ireducescatter_impl<P: CollNetExport>(
    comm: *mut c_void,
    n_parts: c_int,
    parts_nonnull: bool,
    get: impl Fn(usize) -> NetResult<(*mut c_void, *mut c_void, usize)>,
    recv: *mut c_void,
    bytes_per_rank: usize,
    offset: usize,
    bytes: usize,
    dtype: ncclDataType_t,
    op: ncclRedOp_t,
    recv_mh: *mut c_void,
    request: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(request, null_mut(), "request")? };
    // SAFETY: `comm` comes from our connect.
    let b = unsafe { coll::<P>(comm)? };
    // SAFETY: caller's contract.
    let parts = unsafe { sges::<P>(n_parts, parts_nonnull, "ireducescatter sendParts", get)? };
    let w = window(b.nranks, bytes_per_rank, offset, bytes, &parts, "ireducescatter")?;
    let es = dtype_size(dtype).ok_or_else(|| NetError::InvalidArgument(format!("unknown data type {dtype:?}")))?;
    if !bytes_per_rank.is_multiple_of(es) || !offset.is_multiple_of(es) || !bytes.is_multiple_of(es) {
        return Err(NetError::InvalidArgument(format!(
            "ireducescatter: bytesPerRank {bytes_per_rank}, windowOffset {offset}, windowBytes {bytes} \
             must be multiples of the {es}-byte {dtype:?}"
        )));
    }
    let recv = data_buf(recv, w.rank_part(b.rank).1, "ireducescatter recvData")?;
    // SAFETY: NULL or from our regMr.
    let rmr = unsafe { mr_ref::<P>(recv_mh)? };
    // SAFETY: `request` checked non-NULL above.
    unsafe { b.post(request, |p, c| p.ireducescatter(c, &parts, recv, rmr, w, dtype, op)) }
}

unsafe fn iflush_impl<P: CollNetExport>(
    comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> NetResult<()> {
    // SAFETY: NULL checked by `put`.
    unsafe { put(request, null_mut(), "request")? };
    let buf = data_buf(data, int_size(size, "iflush")?, "iflush data")?;
    // SAFETY: NULL or from our regMr.
    let mr = unsafe { mr_ref::<P>(mhandle)? };
    // SAFETY: `comm` comes from our connect.
    let b = unsafe { coll::<P>(comm)? };
    // SAFETY: `request` checked non-NULL above.
    unsafe { b.post(request, |p, c| p.iflush(c, buf, mr)) }
}

unsafe fn test_impl<P: CollNetExport>(request: *mut c_void, done: *mut c_int, size: *mut c_int) -> NetResult<()> {
    if done.is_null() {
        return Err(NetError::InvalidArgument("test: done is NULL".into()));
    }
    // SAFETY: `request` comes from one of our posts.
    let slot: &mut Slot<P> = unsafe { object(request, KIND_COLL_REQ)? };
    let Some(req) = slot.req.as_mut() else {
        return Err(NetError::Internal(format!(
            "collnet request {request:p} was already completed and freed"
        )));
    };
    let r = slot.plugin.test(req);
    if !matches!(r, Ok(None)) {
        slot.req = None;
        // SAFETY: the free list lives in the collComm box, which outlives its slots;
        // NCCL drives a comm and its requests from one thread at a time.
        unsafe { (*slot.free_list).push(slot.index) };
    }
    match r? {
        None => {
            // SAFETY: checked non-NULL above.
            unsafe { done.write(0) };
        }
        Some(n) => {
            if !size.is_null() {
                // SAFETY: non-NULL int* from the caller.
                unsafe { size.write(c_int::try_from(n).unwrap_or(c_int::MAX)) };
            }
            // SAFETY: checked non-NULL above.
            unsafe { done.write(1) };
        }
    }
    Ok(())
}

unsafe fn close_coll_impl<P: CollNetExport>(comm: *mut c_void) -> NetResult<()> {
    // SAFETY: `comm` comes from our connect.
    let b = unsafe { coll::<P>(comm)? };
    b.magic = DEAD;
    // SAFETY: created by `Box::into_raw` in `connect_impl`, freed only here.
    let mut b = unsafe { Box::from_raw(b as *mut CollBox<P>) };
    for s in b.slots.iter_mut() {
        s.magic = DEAD;
        drop(s.req.take());
    }
    match b.comm.take() {
        Some(c) => b.plugin.close_coll(c),
        None => Ok(()),
    }
}

unsafe fn close_listen_impl<P: CollNetExport>(listen: *mut c_void) -> NetResult<()> {
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

unsafe fn make_vdevice_impl<P: CollNetExport>(d: *mut c_int, ndevs: c_int, devs: &[c_int]) -> NetResult<()> {
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

// ---------------------------------------------------------------------------
// extern "C" shims.
// ---------------------------------------------------------------------------

fn g<P: CollNetExport>(what: &str, f: impl FnOnce() -> NetResult<()>) -> ncclResult_t {
    guard(P::NAME, what, f)
}

/// Shim bodies below dereference C pointers; each `unsafe` block's justification is
/// the C API contract of the slot it implements (NCCL passes valid or NULL pointers).
macro_rules! shim {
    (fn $name:ident<P>($($a:ident : $t:ty),*) => $what:literal, $body:expr) => {
        #[doc(hidden)]
        pub unsafe extern "C" fn $name<P: CollNetExport>($($a: $t),*) -> ncclResult_t {
            g::<P>($what, || $body)
        }
    };
}

type Vp = *mut c_void;
type Vpp = *mut *mut c_void;
type Dt = ncclDataType_t;
type Op = ncclRedOp_t;

shim!(fn init_v6<P>(logger: abi::ncclDebugLogger_t) => "collnet init", init_shared_impl::<P>(logger));
shim!(fn init_v11<P>(ctx: Vpp, comm_id: u64, logger: abi::ncclDebugLogger_t) => "collnet init",
    // SAFETY: C API contract.
    unsafe { init_ctx_impl::<P>(ctx, comm_id, logger) });
shim!(fn finalize<P>(ctx: Vp) => "collnet finalize",
    // SAFETY: C API contract.
    unsafe { finalize_impl::<P>(ctx) });
shim!(fn devices<P>(ndev: *mut c_int) => "collnet devices",
    // SAFETY: C API contract.
    unsafe { devices_impl::<P>(ndev) });
shim!(fn get_properties_v6<P>(dev: c_int, props: *mut abi::ncclNetProperties_v6_t) => "collnet getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P, _>(dev, props, |p, _, s| Ok(props::props_v6(p, s))) });
shim!(fn get_properties_v7<P>(dev: c_int, props: *mut abi::ncclNetProperties_v7_t) => "collnet getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P, _>(dev, props, |p, _, s| Ok(props::props_v7(p, s))) });
shim!(fn get_properties_v8<P>(dev: c_int, props: *mut abi::ncclNetProperties_v8_t) => "collnet getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P, _>(dev, props, |p, _, s| Ok(props::props_v8(p, s))) });
shim!(fn get_properties_v9<P>(dev: c_int, props: *mut abi::ncclNetProperties_v9_t) => "collnet getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P, _>(dev, props, props::props_v9) });
shim!(fn get_properties_v11<P>(dev: c_int, props: *mut abi::ncclNetProperties_v11_t) => "collnet getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P, _>(dev, props, props::props_v11) });
shim!(fn get_properties_v12<P>(dev: c_int, props: *mut abi::ncclNetProperties_v12_t) => "collnet getProperties",
    // SAFETY: C API contract.
    unsafe { get_properties_impl::<P, _>(dev, props, props::props_v12) });
shim!(fn listen_v6<P>(dev: c_int, handle: Vp, listen: Vpp) => "collnet listen",
    // SAFETY: C API contract.
    unsafe { listen_impl::<P>(P::state().shared_ctx()?, dev, handle, listen) });
shim!(fn listen_v11<P>(ctx: Vp, dev: c_int, handle: Vp, listen: Vpp) => "collnet listen",
    // SAFETY: C API contract.
    unsafe { listen_impl::<P>(ctx_ref::<P>(ctx)?, dev, handle, listen) });
shim!(fn connect<P>(handles: Vpp, nranks: c_int, rank: c_int, listen: Vp, coll_comm: Vpp) => "collnet connect",
    // SAFETY: C API contract.
    unsafe { connect_impl::<P>(handles, nranks, rank, listen, coll_comm) });
shim!(fn reduce_support<P>(dtype: Dt, op: Op, supported: *mut c_int) => "collnet reduceSupport",
    // SAFETY: C API contract.
    unsafe { reduce_support_impl::<P>(dtype, op, supported) });
shim!(fn reg_mr_v6<P>(comm: Vp, data: Vp, size: c_int, ty: c_int, mhandle: Vpp) => "collnet regMr",
    // SAFETY: C API contract.
    unsafe { reg_mr_impl::<P>(comm, data, int_size(size, "regMr")?, ty, None, mhandle) });
shim!(fn reg_mr_v8<P>(comm: Vp, data: Vp, size: usize, ty: c_int, mhandle: Vpp) => "collnet regMr",
    // SAFETY: C API contract.
    unsafe { reg_mr_impl::<P>(comm, data, size, ty, None, mhandle) });
shim!(fn reg_mr_dmabuf<P>(comm: Vp, data: Vp, size: usize, ty: c_int, offset: u64, fd: c_int, mhandle: Vpp)
    => "collnet regMrDmaBuf",
    // SAFETY: C API contract.
    unsafe { reg_mr_impl::<P>(comm, data, size, ty, Some((offset, fd)), mhandle) });
shim!(fn dereg_mr<P>(comm: Vp, mhandle: Vp) => "collnet deregMr",
    // SAFETY: C API contract.
    unsafe { dereg_mr_impl::<P>(comm, mhandle) });
shim!(fn iallreduce_v6<P>(comm: Vp, send: Vp, recv: Vp, count: c_int, dtype: Dt, op: Op, smh: Vp, rmh: Vp,
    request: Vpp) => "collnet iallreduce",
    // SAFETY: C API contract.
    unsafe { iallreduce_impl::<P>(comm, send, recv, int_count(count)?, dtype, op, smh, rmh, request) });
shim!(fn iallreduce_v9<P>(comm: Vp, send: Vp, recv: Vp, count: usize, dtype: Dt, op: Op, smh: Vp, rmh: Vp,
    request: Vpp) => "collnet iallreduce",
    // SAFETY: C API contract.
    unsafe { iallreduce_impl::<P>(comm, send, recv, count, dtype, op, smh, rmh, request) });
shim!(fn iallgather_v8<P>(comm: Vp, send: Vp, n: c_int, parts: *mut abi::ncclNetSGE_v8_t, bpr: usize, off: usize,
    bytes: usize, smh: Vp, request: Vpp) => "collnet iallgather",
    // SAFETY: C API contract (`parts` has `n` entries).
    unsafe { iallgather_impl::<P>(comm, send, n, !parts.is_null(), |i| sge_v8(&*parts.add(i)), bpr, off, bytes, smh,
        request) });
shim!(fn iallgather_v9<P>(comm: Vp, send: Vp, n: c_int, parts: *mut abi::ncclNetSGE_v9_t, bpr: usize, off: usize,
    bytes: usize, smh: Vp, request: Vpp) => "collnet iallgather",
    // SAFETY: C API contract (`parts` has `n` entries).
    unsafe { iallgather_impl::<P>(comm, send, n, !parts.is_null(), |i| Ok(sge_v9(&*parts.add(i))), bpr, off, bytes,
        smh, request) });
shim!(fn ireducescatter_v8<P>(comm: Vp, n: c_int, parts: *mut abi::ncclNetSGE_v8_t, recv: Vp, bpr: usize,
    off: usize, bytes: usize, dtype: Dt, op: Op, rmh: Vp, request: Vpp) => "collnet ireducescatter",
    // SAFETY: C API contract (`parts` has `n` entries).
    unsafe { ireducescatter_impl::<P>(comm, n, !parts.is_null(), |i| sge_v8(&*parts.add(i)), recv, bpr, off, bytes,
        dtype, op, rmh, request) });
shim!(fn ireducescatter_v9<P>(comm: Vp, n: c_int, parts: *mut abi::ncclNetSGE_v9_t, recv: Vp, bpr: usize,
    off: usize, bytes: usize, dtype: Dt, op: Op, rmh: Vp, request: Vpp) => "collnet ireducescatter",
    // SAFETY: C API contract (`parts` has `n` entries).
    unsafe { ireducescatter_impl::<P>(comm, n, !parts.is_null(), |i| Ok(sge_v9(&*parts.add(i))), recv, bpr, off,
        bytes, dtype, op, rmh, request) });
shim!(fn iflush<P>(comm: Vp, data: Vp, size: c_int, mhandle: Vp, request: Vpp) => "collnet iflush",
    // SAFETY: C API contract.
    unsafe { iflush_impl::<P>(comm, data, size, mhandle, request) });
shim!(fn test<P>(request: Vp, done: *mut c_int, size: *mut c_int) => "collnet test",
    // SAFETY: C API contract.
    unsafe { test_impl::<P>(request, done, size) });
shim!(fn close_coll<P>(comm: Vp) => "collnet closeColl",
    // SAFETY: C API contract.
    unsafe { close_coll_impl::<P>(comm) });
shim!(fn close_listen<P>(listen: Vp) => "collnet closeListen",
    // SAFETY: C API contract.
    unsafe { close_listen_impl::<P>(listen) });
shim!(fn make_vdevice_v9<P>(d: *mut c_int, props: *mut abi::ncclNetVDeviceProps_v9_t) => "collnet makeVDevice",
// SAFETY: C API contract.
unsafe {
    let p = props.as_ref().ok_or_else(|| NetError::InvalidArgument("makeVDevice: props is NULL".into()))?;
    make_vdevice_impl::<P>(d, p.ndevs, &p.devs)
});
shim!(fn make_vdevice_v12<P>(d: *mut c_int, props: *mut abi::ncclNetVDeviceProps_v12_t) => "collnet makeVDevice",
// SAFETY: C API contract.
unsafe {
    let p = props.as_ref().ok_or_else(|| NetError::InvalidArgument("makeVDevice: props is NULL".into()))?;
    make_vdevice_impl::<P>(d, p.ndevs, &p.devs)
});

/// A v8 SGE as `(mhandle, address, size)`; sizes above `MAX_COLLNET_SIZE` are
/// rejected as NCCL's v8 adapter does.
fn sge_v8(s: &abi::ncclNetSGE_v8_t) -> NetResult<(*mut c_void, *mut c_void, usize)> {
    let size = s.size as usize;
    if size > abi::MAX_COLLNET_SIZE {
        return Err(NetError::InvalidArgument(format!(
            "SGE size {size} above {} (the 32-bit ncclNetSGE_v8 limit NCCL applies)",
            abi::MAX_COLLNET_SIZE
        )));
    }
    Ok((s.mhandle, s.address, size))
}

fn sge_v9(s: &abi::ncclNetSGE_v9_t) -> (*mut c_void, *mut c_void, usize) {
    (s.mhandle, s.address, s.size)
}

// ---------------------------------------------------------------------------
// Vtables.
// ---------------------------------------------------------------------------

const fn name<P: CollNet>() -> *const std::ffi::c_char {
    let n: &'static CStr = P::NAME;
    n.as_ptr()
}

/// The `ncclCollNet_v6_t` of plugin `P`.
pub const fn collnet_v6<P: CollNetExport>() -> abi::ncclCollNet_v6_t {
    abi::ncclCollNet_v6_t {
        name: name::<P>(),
        init: Some(init_v6::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v6::<P>),
        listen: Some(listen_v6::<P>),
        connect: Some(connect::<P>),
        reduceSupport: Some(reduce_support::<P>),
        regMr: Some(reg_mr_v6::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        iallreduce: Some(iallreduce_v6::<P>),
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeColl: Some(close_coll::<P>),
        closeListen: Some(close_listen::<P>),
    }
}

/// The `ncclCollNet_v7_t` of plugin `P`.
pub const fn collnet_v7<P: CollNetExport>() -> abi::ncclCollNet_v7_t {
    abi::ncclCollNet_v7_t {
        name: name::<P>(),
        init: Some(init_v6::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v7::<P>),
        listen: Some(listen_v6::<P>),
        connect: Some(connect::<P>),
        reduceSupport: Some(reduce_support::<P>),
        regMr: Some(reg_mr_v6::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        iallreduce: Some(iallreduce_v6::<P>),
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeColl: Some(close_coll::<P>),
        closeListen: Some(close_listen::<P>),
    }
}

/// The `ncclCollNet_v8_t` of plugin `P`.
pub const fn collnet_v8<P: CollNetExport>() -> abi::ncclCollNet_v8_t {
    abi::ncclCollNet_v8_t {
        name: name::<P>(),
        init: Some(init_v6::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v8::<P>),
        listen: Some(listen_v6::<P>),
        connect: Some(connect::<P>),
        reduceSupport: Some(reduce_support::<P>),
        regMr: Some(reg_mr_v8::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        iallreduce: Some(iallreduce_v6::<P>),
        iallgather: if P::HAS_IALLGATHER_IREDUCESCATTER {
            Some(iallgather_v8::<P>)
        } else {
            None
        },
        ireducescatter: if P::HAS_IALLGATHER_IREDUCESCATTER {
            Some(ireducescatter_v8::<P>)
        } else {
            None
        },
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeColl: Some(close_coll::<P>),
        closeListen: Some(close_listen::<P>),
    }
}

/// The `ncclCollNet_v9_t` of plugin `P`.
pub const fn collnet_v9<P: CollNetExport>() -> abi::ncclCollNet_v9_t {
    abi::ncclCollNet_v9_t {
        name: name::<P>(),
        init: Some(init_v6::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v9::<P>),
        listen: Some(listen_v6::<P>),
        connect: Some(connect::<P>),
        reduceSupport: Some(reduce_support::<P>),
        regMr: Some(reg_mr_v8::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        iallreduce: Some(iallreduce_v9::<P>),
        iallgather: if P::HAS_IALLGATHER_IREDUCESCATTER {
            Some(iallgather_v9::<P>)
        } else {
            None
        },
        ireducescatter: if P::HAS_IALLGATHER_IREDUCESCATTER {
            Some(ireducescatter_v9::<P>)
        } else {
            None
        },
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeColl: Some(close_coll::<P>),
        closeListen: Some(close_listen::<P>),
        makeVDevice: Some(make_vdevice_v9::<P>),
    }
}

/// The `ncclCollNet_v10_t` of plugin `P` (v9's slots; its `init` has no profiler callback).
pub const fn collnet_v10<P: CollNetExport>() -> abi::ncclCollNet_v10_t {
    abi::ncclCollNet_v10_t {
        name: name::<P>(),
        init: Some(init_v6::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v9::<P>),
        listen: Some(listen_v6::<P>),
        connect: Some(connect::<P>),
        reduceSupport: Some(reduce_support::<P>),
        regMr: Some(reg_mr_v8::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        iallreduce: Some(iallreduce_v9::<P>),
        iallgather: if P::HAS_IALLGATHER_IREDUCESCATTER {
            Some(iallgather_v9::<P>)
        } else {
            None
        },
        ireducescatter: if P::HAS_IALLGATHER_IREDUCESCATTER {
            Some(ireducescatter_v9::<P>)
        } else {
            None
        },
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeColl: Some(close_coll::<P>),
        closeListen: Some(close_listen::<P>),
        makeVDevice: Some(make_vdevice_v9::<P>),
    }
}

/// The `ncclCollNet_v11_t` of plugin `P`.
pub const fn collnet_v11<P: CollNetExport>() -> abi::ncclCollNet_v11_t {
    abi::ncclCollNet_v11_t {
        name: name::<P>(),
        init: Some(init_v11::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v11::<P>),
        listen: Some(listen_v11::<P>),
        connect: Some(connect::<P>),
        reduceSupport: Some(reduce_support::<P>),
        regMr: Some(reg_mr_v8::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        iallreduce: Some(iallreduce_v9::<P>),
        iallgather: if P::HAS_IALLGATHER_IREDUCESCATTER {
            Some(iallgather_v9::<P>)
        } else {
            None
        },
        ireducescatter: if P::HAS_IALLGATHER_IREDUCESCATTER {
            Some(ireducescatter_v9::<P>)
        } else {
            None
        },
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeColl: Some(close_coll::<P>),
        closeListen: Some(close_listen::<P>),
        makeVDevice: Some(make_vdevice_v9::<P>),
        finalize: Some(finalize::<P>),
    }
}

/// The `ncclCollNet_v12_t` of plugin `P`.
pub const fn collnet_v12<P: CollNetExport>() -> abi::ncclCollNet_v12_t {
    abi::ncclCollNet_v12_t {
        name: name::<P>(),
        init: Some(init_v11::<P>),
        devices: Some(devices::<P>),
        getProperties: Some(get_properties_v12::<P>),
        listen: Some(listen_v11::<P>),
        connect: Some(connect::<P>),
        reduceSupport: Some(reduce_support::<P>),
        regMr: Some(reg_mr_v8::<P>),
        regMrDmaBuf: Some(reg_mr_dmabuf::<P>),
        deregMr: Some(dereg_mr::<P>),
        iallreduce: Some(iallreduce_v9::<P>),
        iallgather: if P::HAS_IALLGATHER_IREDUCESCATTER {
            Some(iallgather_v9::<P>)
        } else {
            None
        },
        ireducescatter: if P::HAS_IALLGATHER_IREDUCESCATTER {
            Some(ireducescatter_v9::<P>)
        } else {
            None
        },
        iflush: Some(iflush::<P>),
        test: Some(test::<P>),
        closeColl: Some(close_coll::<P>),
        closeListen: Some(close_listen::<P>),
        makeVDevice: Some(make_vdevice_v12::<P>),
        finalize: Some(finalize::<P>),
    }
}
