//! The RMA host adapter: one [`RmaAdapter`] drives an `ncclRma_v13_t` or
//! `ncclRma_v14_t` table (NCCL 2.30.7 `src/include/plugin/rma/rma_v1{3,4}.h`) with
//! v14 semantics, the way NCCL's shims do (`src/plugin/rma/rma_v13.cc`):
//!
//! * **loading** ([`load_rma`], `src/plugin/rma.cc`, `initPluginLibsOnceFunc`): the
//!   `NCCL_RMA_PLUGIN` entries (comma separated; `none` ⇒ none; unset ⇒
//!   `libnccl-rma.so`), each opened by NCCL's `openPluginLib` rule with the prefix
//!   `libnccl-rma`; then the GIN plugin's library (ferroccl does not load GIN plugins
//!   yet, so this step is empty); then the net plugin's library. In each library the
//!   symbols [`abi::RMA_PLUGIN_SYMBOLS`] are tried in order (`ncclRmaPlugin_v14`,
//!   `ncclRmaPlugin_v13`, `ncclGinPlugin_v13`). The first library whose `init` succeeds
//!   and whose `devices()` reports ≥ 1 device is chosen (`ncclRmaInit`); NCCL's
//!   internal IB proxy RMA (its last fallback) has no ferroccl counterpart.
//! * **init** (`ncclRmaPluginInit`): `init(&ctx, commId, logger)` per communicator,
//!   `finalize(ctx)` at its end. An `init` failure, a `devices()` error, 0 devices or a
//!   NULL slot NCCL calls unchecked disables the library for the process.
//! * **v13 tables** (`rma_v13.cc`): `createContext` gets an `ncclGinConfig_v13_t`
//!   holding only `nContexts`/`trafficClass` and an ignored device handle;
//!   `regMrSym*` an ignored GIN handle; `iputSignal` drops `isStrongSignal` (every v13
//!   signal is strong); `ginProgress` is the progress slot.
//!
//! The call sequence is NCCL's (`src/rma/rma_proxy.cc`, `ncclRmaProxyConnectOnce`,
//! `ncclRmaProxyCreateContext`, `ncclRmaProxyFinalize`): `devices`; per device
//! `listen` → all-gather of the 128-byte handles → `connect(ctx, handles, nranks,
//! rank, listenComm)` (collective and blocking) → `getProperties` → `closeListen`;
//! `createContext(collComm, {nContexts: 1, trafficClass})`; symmetric `regMrSym` (every
//! rank registers the same windows in the same order); `iput`/`iputSignal`/`iget`/
//! `iflush` on context 0 with `test(collComm, request)` until done (NCCL tests the
//! requests to one peer in FIFO order), `rmaProgress(rmaCtx)` from the progress thread
//! when the slot is non-NULL; teardown: `destroyContext`, `deregMrSym`, `closeColl`,
//! `finalize`. (NCCL 2.30.7 passes `comm->netContext` to `connect`; the adapter passes
//! the RMA `init` context, which is what the header documents.)

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::{Arc, Mutex, OnceLock};

use ferroccl_plugin_api::abi::{
    self, NCCL_NET_HANDLE_MAXSIZE, NCCL_NET_SIGNAL_OP_ADD, NCCL_NET_SIGNAL_OP_INC, ncclGinConfig_v13_t, ncclResult_t,
    ncclRma_v13_t, ncclRma_v14_t, ncclRmaConfig_v14_t,
};

use super::adapter::{c_string, net_error, props_v12, ptr_type};
use super::library::{PluginLibrary, open_plugin_lib};
use super::logger;
use super::net::{NetError, NetHandle, NetResult, Properties, PtrType, RawComm, RawCtx, RawMr, RawRequest};

/// The plugin's RMA vtable, copied out of the exported symbol, tagged by version.
#[derive(Clone, Copy)]
enum Table {
    V13(ncclRma_v13_t),
    V14(ncclRma_v14_t),
}

/// Runs `$body` with `$v` bound to the table, for slots of the same C type in both versions.
macro_rules! each {
    ($t:expr, $v:ident => $body:expr) => {
        match $t {
            Table::V13($v) => $body,
            Table::V14($v) => $body,
        }
    };
}

/// Looks up slot `$f` of table `$t`, or returns the NULL-slot error.
macro_rules! slot {
    ($self:ident, $t:expr, $f:ident) => {
        match $t.$f {
            Some(f) => f,
            None => return Err($self.null_slot(stringify!($f))),
        }
    };
}

impl Table {
    /// # Safety
    /// `sym` must point to a readable table of `version` (13 or 14).
    unsafe fn read(sym: *const c_void, version: u32) -> Table {
        // SAFETY: per the caller's guarantee; unaligned because nothing promises the
        // plugin's data symbol is aligned.
        unsafe {
            if version == 13 {
                Table::V13(std::ptr::read_unaligned(sym.cast()))
            } else {
                Table::V14(std::ptr::read_unaligned(sym.cast()))
            }
        }
    }

    /// The first slot NCCL calls without a NULL check that is NULL (all but
    /// `rmaProgress`, "called if non-NULL").
    fn missing_required_slot(&self) -> Option<&'static str> {
        macro_rules! req {
            ($t:expr, $($f:ident),*) => {{
                $( if $t.$f.is_none() { return Some(stringify!($f)); } )*
            }};
        }
        each!(self, t => req!(t, init, devices, getProperties, listen, connect, createContext, regMrSym,
            regMrSymDmaBuf, deregMrSym, destroyContext, closeColl, closeListen, iput, iputSignal, iget, iflush,
            test, queryLastError, finalize));
        None
    }
}

/// The symbol's address, shareable between threads.
#[derive(Clone, Copy)]
struct SymAddr(*const c_void);
// SAFETY: the address of a data symbol in a library that is never unloaded once plugin
// code ran (pinned before `init`); it is only read.
unsafe impl Send for SymAddr {}
// SAFETY: as above.
unsafe impl Sync for SymAddr {}

/// What a library's RMA table is, for logs and `ferroccl-info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RmaInfo {
    /// The vtable's `name` as read before `init`.
    pub name: String,
    /// The table version (13 or 14).
    pub version: u32,
    /// The symbol it was found under (`ncclRmaPlugin_v14`, `ncclRmaPlugin_v13`, `ncclGinPlugin_v13`).
    pub symbol: String,
    /// The library file.
    pub path: PathBuf,
}

/// Whether the table can be used (NCCL's `ncclRmaPluginState_t`, `src/plugin/rma.cc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RmaState {
    /// Found; no `init` ran yet (`InitReady`).
    NotInitialized,
    /// `init` and `devices()` succeeded (`Enabled`).
    Enabled {
        /// `devices()` of the first successful initialisation.
        devices: usize,
    },
    /// Disabled for the rest of the process; the reason names the failed call.
    Disabled(String),
}

/// An RMA context from `createContext` (`rmaCtx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RmaCtx(pub *mut c_void);
// SAFETY: an opaque plugin pointer; NCCL's contract allows any one thread at a time to
// drive it (its proxy thread), which callers uphold.
unsafe impl Send for RmaCtx {}
// SAFETY: as above; sharing the pointer value is harmless.
unsafe impl Sync for RmaCtx {}

/// `createContext` options (`ncclRmaConfig_v14_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmaConfig {
    /// Contexts (independent issue queues) in the RMA context; NCCL 2.30.7 asks for 1.
    pub n_contexts: i32,
    /// The communicator's traffic class (`NCCL_NET_TRAFFIC_CLASS_UNDEF` = -1 when unset).
    pub traffic_class: i32,
}

impl Default for RmaConfig {
    fn default() -> Self {
        RmaConfig {
            n_contexts: 1,
            traffic_class: abi::NCCL_NET_TRAFFIC_CLASS_UNDEF,
        }
    }
}

/// How `iputSignal` updates the peer's 64-bit signal word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    /// `NCCL_NET_SIGNAL_OP_INC`: adds 1 (the value is ignored).
    Inc,
    /// `NCCL_NET_SIGNAL_OP_ADD`: adds `value`.
    Add,
}

impl SignalOp {
    /// The `signalOp` argument.
    pub fn raw(self) -> u32 {
        match self {
            SignalOp::Inc => NCCL_NET_SIGNAL_OP_INC,
            SignalOp::Add => NCCL_NET_SIGNAL_OP_ADD,
        }
    }
}

/// The signal of an `iputSignal`: the `u64` at `off` bytes into the peer's window
/// `mr`, updated by `op` once the put's data is visible.
#[derive(Debug, Clone, Copy)]
pub struct RmaSignal {
    /// Byte offset of the signal word in the window.
    pub off: u64,
    /// The (symmetric) signal window.
    pub mr: RawMr,
    /// Operand of [`SignalOp::Add`].
    pub value: u64,
    /// The update.
    pub op: SignalOp,
}

/// One transfer between a local and a remote symmetric window: `iput` copies
/// `size` bytes from `local_mr + local_off` to `remote_mr + remote_off` on `rank`;
/// `iget` copies the other way.
#[derive(Debug, Clone, Copy)]
pub struct RmaXfer {
    /// Context index, `< RmaConfig::n_contexts` (NCCL uses 0).
    pub context: i32,
    /// Offset in the local window, bytes.
    pub local_off: u64,
    /// The local window.
    pub local_mr: RawMr,
    /// Bytes to move.
    pub size: usize,
    /// Offset in the peer's window, bytes.
    pub remote_off: u64,
    /// The window, as registered locally (symmetric: the peer's matching registration is the target).
    pub remote_mr: RawMr,
    /// The peer's rank in the group given to `connect`.
    pub rank: u32,
}

struct State {
    status: RmaState,
    contexts: usize,
}

/// Drives one RMA table with v14 semantics (see the module docs). Shared by every
/// communicator of the process.
pub struct RmaAdapter {
    lib: Arc<PluginLibrary>,
    sym: SymAddr,
    info: RmaInfo,
    pre: Table,
    table: OnceLock<Table>,
    state: Mutex<State>,
}

// SAFETY: the tables hold plugin function pointers and C strings, usable from any
// thread per NCCL's contract; mutable state is behind a Mutex.
unsafe impl Send for RmaAdapter {}
// SAFETY: as above.
unsafe impl Sync for RmaAdapter {}

impl std::fmt::Debug for RmaAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmaAdapter")
            .field("info", &self.info)
            .field("state", &self.state())
            .finish()
    }
}

impl RmaAdapter {
    /// Looks for an RMA table in `lib` in NCCL 2.30.7's order ([`abi::RMA_PLUGIN_SYMBOLS`])
    /// and wraps the first found; logs `RMA/Plugin: Loaded rma plugin <name> (v<N>)`.
    pub fn probe(lib: Arc<PluginLibrary>) -> Option<RmaAdapter> {
        Self::probe_from(lib, 0)
    }

    /// Like [`RmaAdapter::probe`], but only with the symbols of
    /// [`abi::RMA_PLUGIN_SYMBOLS`] from index `first` on (1: skip v14, to drive a
    /// library's v13 table; tests and `ferroccl-info`).
    pub fn probe_from(lib: Arc<PluginLibrary>, first: usize) -> Option<RmaAdapter> {
        let (sym, version, symbol) = abi::RMA_PLUGIN_SYMBOLS
            .iter()
            .skip(first)
            .find_map(|(s, v)| lib.symbol(s).map(|p| (p, *v, s.to_string_lossy().into_owned())))?;
        let path = PluginLibrary::file_of(sym).unwrap_or_else(|| PathBuf::from(lib.opened_as()));
        // SAFETY: `sym` is the address of the table NCCL reads under this symbol and version.
        let pre = unsafe { Table::read(sym, version) };
        let name = c_string(each!(&pre, t => t.name)).unwrap_or_default();
        tracing::info!(target: "ferroccl::plugin", "RMA/Plugin: Loaded rma plugin {name} (v{version}) from {}",
            path.display());
        Some(RmaAdapter {
            lib,
            sym: SymAddr(sym),
            info: RmaInfo {
                name,
                version,
                symbol,
                path,
            },
            pre,
            table: OnceLock::new(),
            state: Mutex::new(State {
                status: RmaState::NotInitialized,
                contexts: 0,
            }),
        })
    }

    /// Name, version, symbol and file.
    pub fn info(&self) -> &RmaInfo {
        &self.info
    }

    /// Current state.
    pub fn state(&self) -> RmaState {
        self.lock().status.clone()
    }

    /// Live contexts (`init_ctx` minus `finalize_ctx`).
    pub fn live_contexts(&self) -> usize {
        self.lock().contexts
    }

    /// Whether the plugin has a progress function (`rmaProgress`/`ginProgress` non-NULL).
    pub fn has_progress(&self) -> bool {
        self.table.get().is_some_and(|t| {
            matches!(t, Table::V13(x) if x.ginProgress.is_some())
                || matches!(t, Table::V14(x) if x.rmaProgress.is_some())
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn err(&self, call: &str, r: ncclResult_t) -> NetError {
        net_error(
            r.0,
            format!(
                "RMA plugin '{}' (ncclRma v{}) {call} returned {} ({})",
                self.info.name,
                self.info.version,
                r.name(),
                r.0
            ),
        )
    }

    fn check(&self, call: &str, r: ncclResult_t) -> NetResult<()> {
        if r.is_success() { Ok(()) } else { Err(self.err(call, r)) }
    }

    fn null_slot(&self, slot: &str) -> NetError {
        NetError::Internal(format!(
            "RMA plugin '{}' (ncclRma v{}) has a NULL '{slot}' function pointer",
            self.info.name, self.info.version
        ))
    }

    fn null_out(&self, call: &str, what: &str) -> NetError {
        NetError::Internal(format!(
            "RMA plugin '{}' (ncclRma v{}) {call} succeeded but returned a NULL {what}",
            self.info.name, self.info.version
        ))
    }

    fn t(&self) -> NetResult<&Table> {
        self.table.get().ok_or_else(|| {
            NetError::Internal(format!(
                "RMA plugin '{}': called before a successful init (use init_ctx first)",
                self.info.name
            ))
        })
    }

    fn disable(&self, st: &mut State, why: String) -> NetError {
        tracing::info!(target: "ferroccl::plugin",
            "RMA/Plugin: RMA plugin '{}' (ncclRma v{}) disabled: {why}", self.info.name, self.info.version);
        st.status = RmaState::Disabled(why.clone());
        NetError::InvalidUsage(format!("RMA plugin '{}' disabled: {why}", self.info.name))
    }

    /// Opens a per-communicator context: `init(&ctx, comm_id, logger)` (`ncclRmaPluginInit`).
    /// The first success also runs `devices()`. Any failure disables the plugin for the
    /// process and returns `InvalidUsage` naming the failed call; a disabled plugin refuses at once.
    pub fn init_ctx(&self, comm_id: u64) -> NetResult<RawCtx> {
        let log = Some(logger::nccl_logger());
        // From here on plugin code runs: never dlclose this library again.
        self.lib.pin();
        let mut st = self.lock();
        if let RmaState::Disabled(why) = &st.status {
            return Err(NetError::InvalidUsage(format!(
                "RMA plugin '{}' is disabled: {why}",
                self.info.name
            )));
        }
        let t = *self.table.get().unwrap_or(&self.pre);
        let mut ctx: *mut c_void = null_mut();
        // SAFETY: `init(void** ctx, uint64_t commId, ncclDebugLogger_t)` in both versions.
        let r = each!(&t, t => t.init.map(|f| unsafe { f(&mut ctx, comm_id, log) }));
        match r {
            None => return Err(self.disable(&mut st, "its init slot is NULL".into())),
            Some(r) if !r.is_success() => {
                let e = self.err("init", r);
                return Err(self.disable(&mut st, e.to_string()));
            }
            Some(_) => {}
        }
        let table = *self.table.get_or_init(|| {
            // SAFETY: `sym` is this version's table (see `probe`).
            unsafe { Table::read(self.sym.0, self.info.version) }
        });
        let mut failure = table
            .missing_required_slot()
            .map(|s| format!("its '{s}' function pointer is NULL after init"));
        if failure.is_none() && st.status == RmaState::NotInitialized {
            match self.devices() {
                Ok(0) => failure = Some("devices() reported 0 devices".into()),
                Ok(n) => {
                    st.status = RmaState::Enabled { devices: n };
                    tracing::info!(target: "ferroccl::plugin",
                        "RMA/Plugin: Initialized RMA plugin {} (ncclRma v{}), {n} device(s)",
                        self.info.name, self.info.version);
                }
                Err(e) => failure = Some(e.to_string()),
            }
        }
        if let Some(why) = failure {
            if let Some(f) = each!(&table, t => t.finalize) {
                // SAFETY: `ctx` came from this plugin's init.
                let _ = unsafe { f(ctx) };
            }
            return Err(self.disable(&mut st, why));
        }
        st.contexts += 1;
        Ok(RawCtx(ctx))
    }

    /// `finalize(ctx)` for a context of [`RmaAdapter::init_ctx`] (`ncclRmaPluginFinalize`).
    pub fn finalize_ctx(&self, ctx: RawCtx) -> NetResult<()> {
        {
            let mut st = self.lock();
            st.contexts = st.contexts.saturating_sub(1);
        }
        // SAFETY: `ctx` came from this plugin's init.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, finalize)(ctx.0) });
        self.check("finalize", r)
    }

    /// `devices()`.
    pub fn devices(&self) -> NetResult<usize> {
        let mut n: c_int = 0;
        // SAFETY: `devices(int*)`.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, devices)(&mut n) });
        self.check("devices", r)?;
        usize::try_from(n).map_err(|_| {
            NetError::Internal(format!(
                "RMA plugin '{}' devices() reported {n} (expected a count ≥ 0)",
                self.info.name
            ))
        })
    }

    /// `getProperties(dev)` (`ncclNetProperties_v12_t` in both versions).
    pub fn properties(&self, dev: usize) -> NetResult<Properties> {
        let d = dev_index(dev)?;
        let mut p = abi::ncclNetProperties_v12_t::zeroed();
        // SAFETY: the v12 properties struct both versions take.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, getProperties)(d, &mut p) });
        self.check("getProperties", r)?;
        Ok(props_v12(&p))
    }

    /// `listen(ctx, dev, handle, &listenComm)`: fills the 128-byte handle every rank
    /// all-gathers; returns the listenComm (never NULL on success).
    pub fn listen(&self, ctx: RawCtx, dev: usize, handle: &mut NetHandle) -> NetResult<RawComm> {
        let d = dev_index(dev)?;
        let mut lc: *mut c_void = null_mut();
        let h = handle.as_mut_ptr().cast::<c_void>();
        // SAFETY: `handle` is NCCL_NET_HANDLE_MAXSIZE bytes; `lc` outlives the call.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, listen)(ctx.0, d, h, &mut lc) });
        self.check("listen", r)?;
        if lc.is_null() {
            return Err(self.null_out("listen", "listenComm"));
        }
        Ok(RawComm(lc))
    }

    /// `connect(ctx, handles, nranks, rank, listenComm, &collComm)`: collective over
    /// every rank of `handles` (index = rank), blocking until the group is connected.
    pub fn connect(&self, ctx: RawCtx, handles: &mut [NetHandle], rank: usize, listen: RawComm) -> NetResult<RawComm> {
        let nranks = c_int::try_from(handles.len())
            .map_err(|_| NetError::InvalidArgument(format!("{} ranks do not fit a C int", handles.len())))?;
        if rank >= handles.len() {
            return Err(NetError::InvalidArgument(format!(
                "RMA connect: rank {rank} out of range (expected < {nranks})"
            )));
        }
        const _: () = assert!(NCCL_NET_HANDLE_MAXSIZE == std::mem::size_of::<NetHandle>());
        let mut ptrs: Vec<*mut c_void> = handles.iter_mut().map(|h| h.as_mut_ptr().cast()).collect();
        let mut cc: *mut c_void = null_mut();
        // SAFETY: `ptrs` holds `nranks` pointers to 128-byte handles, alive during the call.
        let r = each!(self.t()?, t => unsafe {
            slot!(self, t, connect)(ctx.0, ptrs.as_mut_ptr(), nranks, rank as c_int, listen.0, &mut cc)
        });
        self.check("connect", r)?;
        if cc.is_null() {
            return Err(self.null_out("connect", "collComm"));
        }
        Ok(RawComm(cc))
    }

    /// `closeListen(listenComm)`.
    pub fn close_listen(&self, listen: RawComm) -> NetResult<()> {
        // SAFETY: `listen` came from this plugin's listen.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, closeListen)(listen.0) });
        self.check("closeListen", r)
    }

    /// `closeColl(collComm)`, after every context and registration of it is gone.
    pub fn close_coll(&self, coll: RawComm) -> NetResult<()> {
        // SAFETY: `coll` came from this plugin's connect.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, closeColl)(coll.0) });
        self.check("closeColl", r)
    }

    /// `createContext(collComm, config, &rmaCtx)`; a v13 table gets the config as an
    /// `ncclGinConfig_v13_t` (other fields 0) and its device handle is dropped (`rma_v13.cc`).
    pub fn create_context(&self, coll: RawComm, config: &RmaConfig) -> NetResult<RmaCtx> {
        let mut out: *mut c_void = null_mut();
        // SAFETY: each arm passes the config type of its version; out-pointers outlive the call.
        let r = unsafe {
            match self.t()? {
                Table::V13(t) => {
                    let mut c = ncclGinConfig_v13_t {
                        nContexts: config.n_contexts,
                        trafficClass: config.traffic_class,
                        ..ncclGinConfig_v13_t::zeroed()
                    };
                    let mut dev: *mut abi::ncclNetDeviceHandle_v11_t = null_mut();
                    slot!(self, t, createContext)(coll.0, &mut c, &mut out, &mut dev)
                }
                Table::V14(t) => {
                    let mut c = ncclRmaConfig_v14_t {
                        nContexts: config.n_contexts,
                        trafficClass: config.traffic_class,
                    };
                    slot!(self, t, createContext)(coll.0, &mut c, &mut out)
                }
            }
        };
        self.check("createContext", r)?;
        if out.is_null() {
            return Err(self.null_out("createContext", "rmaCtx"));
        }
        Ok(RmaCtx(out))
    }

    /// `destroyContext(rmaCtx)`.
    pub fn destroy_context(&self, ctx: RmaCtx) -> NetResult<()> {
        // SAFETY: `ctx` came from this plugin's createContext.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, destroyContext)(ctx.0) });
        self.check("destroyContext", r)
    }

    /// `regMrSym(collComm, data, size, type, mrFlags, &mhandle)`: a symmetric window;
    /// every rank registers its windows in the same order. `mr_flags`:
    /// `NCCL_NET_MR_FLAG_FORCE_SO` for signal windows, as NCCL registers them.
    pub fn reg_mr_sym(
        &self,
        coll: RawComm,
        data: *mut u8,
        size: usize,
        ty: PtrType,
        mr_flags: u64,
    ) -> NetResult<RawMr> {
        let mut mh: *mut c_void = null_mut();
        let d = data.cast::<c_void>();
        let ty = ptr_type(ty);
        // SAFETY: `data..data+size` is the caller's buffer; out-pointers outlive the call.
        let r = unsafe {
            match self.t()? {
                Table::V13(t) => {
                    let mut gin: *mut c_void = null_mut();
                    slot!(self, t, regMrSym)(coll.0, d, size, ty, mr_flags, &mut mh, &mut gin)
                }
                Table::V14(t) => slot!(self, t, regMrSym)(coll.0, d, size, ty, mr_flags, &mut mh),
            }
        };
        self.check("regMrSym", r)?;
        if mh.is_null() {
            return Err(self.null_out("regMrSym", "mhandle"));
        }
        Ok(RawMr(mh))
    }

    /// `regMrSymDmaBuf(collComm, data, size, type, offset, fd, mrFlags, &mhandle)`.
    #[allow(clippy::too_many_arguments)]
    pub fn reg_mr_sym_dmabuf(
        &self,
        coll: RawComm,
        data: *mut u8,
        size: usize,
        ty: PtrType,
        offset: u64,
        fd: i32,
        mr_flags: u64,
    ) -> NetResult<RawMr> {
        let mut mh: *mut c_void = null_mut();
        let d = data.cast::<c_void>();
        let ty = ptr_type(ty);
        // SAFETY: as for `reg_mr_sym`; `fd` is the caller's DMA-BUF descriptor.
        let r = unsafe {
            match self.t()? {
                Table::V13(t) => {
                    let mut gin: *mut c_void = null_mut();
                    slot!(self, t, regMrSymDmaBuf)(coll.0, d, size, ty, offset, fd, mr_flags, &mut mh, &mut gin)
                }
                Table::V14(t) => slot!(self, t, regMrSymDmaBuf)(coll.0, d, size, ty, offset, fd, mr_flags, &mut mh),
            }
        };
        self.check("regMrSymDmaBuf", r)?;
        if mh.is_null() {
            return Err(self.null_out("regMrSymDmaBuf", "mhandle"));
        }
        Ok(RawMr(mh))
    }

    /// `deregMrSym(collComm, mhandle)`.
    pub fn dereg_mr_sym(&self, coll: RawComm, mr: RawMr) -> NetResult<()> {
        // SAFETY: `mr` came from this plugin's regMrSym on `coll`.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, deregMrSym)(coll.0, mr.0) });
        self.check("deregMrSym", r)
    }

    fn request(&self, call: &str, r: ncclResult_t, req: *mut c_void) -> NetResult<RawRequest> {
        self.check(call, r)?;
        if req.is_null() {
            // NCCL's proxy (`ncclRmaProxyIssuePutSignal`) treats this as an internal error:
            // the caller bounds the requests in flight, the plugin must accept them.
            return Err(self.null_out(call, "request"));
        }
        Ok(RawRequest(req))
    }

    /// `iput(rmaCtx, context, srcOff, srcMhandle, size, dstOff, dstMhandle, rank, &request)`.
    pub fn iput(&self, ctx: RmaCtx, x: &RmaXfer) -> NetResult<RawRequest> {
        let mut req: *mut c_void = null_mut();
        // SAFETY: handles came from this plugin; `req` outlives the call.
        let r = each!(self.t()?, t => unsafe {
            slot!(self, t, iput)(ctx.0, x.context, x.local_off, x.local_mr.0, x.size, x.remote_off, x.remote_mr.0,
                x.rank, &mut req)
        });
        self.request("iput", r, req)
    }

    /// `iputSignal(...)`: the put, then the signal update on the peer once the data is
    /// visible. `strong` is v14's `isStrongSignal` (NCCL passes `true`); a v13 table
    /// does not take it (all its signals are strong).
    pub fn iput_signal(&self, ctx: RmaCtx, x: &RmaXfer, sig: &RmaSignal, strong: bool) -> NetResult<RawRequest> {
        let mut req: *mut c_void = null_mut();
        // SAFETY: handles came from this plugin; `req` outlives the call.
        let r = unsafe {
            match self.t()? {
                Table::V13(t) => slot!(self, t, iputSignal)(
                    ctx.0,
                    x.context,
                    x.local_off,
                    x.local_mr.0,
                    x.size,
                    x.remote_off,
                    x.remote_mr.0,
                    x.rank,
                    sig.off,
                    sig.mr.0,
                    sig.value,
                    sig.op.raw(),
                    &mut req,
                ),
                Table::V14(t) => slot!(self, t, iputSignal)(
                    ctx.0,
                    x.context,
                    x.local_off,
                    x.local_mr.0,
                    x.size,
                    x.remote_off,
                    x.remote_mr.0,
                    x.rank,
                    sig.off,
                    sig.mr.0,
                    sig.value,
                    sig.op.raw(),
                    strong,
                    &mut req,
                ),
            }
        };
        self.request("iputSignal", r, req)
    }

    /// `iget(rmaCtx, context, remoteOff, remoteMhandle, size, localOff, localMhandle, rank, &request)`.
    pub fn iget(&self, ctx: RmaCtx, x: &RmaXfer) -> NetResult<RawRequest> {
        let mut req: *mut c_void = null_mut();
        // SAFETY: handles came from this plugin; `req` outlives the call.
        let r = each!(self.t()?, t => unsafe {
            slot!(self, t, iget)(ctx.0, x.context, x.remote_off, x.remote_mr.0, x.size, x.local_off, x.local_mr.0,
                x.rank, &mut req)
        });
        self.request("iget", r, req)
    }

    /// `iflush(rmaCtx, context, mhandle, rank, &request)`: completes once the data the
    /// earlier operations with `rank` moved into `mr` is visible.
    pub fn iflush(&self, ctx: RmaCtx, context: i32, mr: RawMr, rank: u32) -> NetResult<RawRequest> {
        let mut req: *mut c_void = null_mut();
        // SAFETY: handles came from this plugin; `req` outlives the call.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, iflush)(ctx.0, context, mr.0, rank, &mut req) });
        self.request("iflush", r, req)
    }

    /// `test(collComm, request, &done)`: note the *collComm*, not the RMA context. A
    /// request that reported done (or an error) must not be tested again.
    pub fn test(&self, coll: RawComm, req: RawRequest) -> NetResult<bool> {
        let mut done: c_int = 0;
        // SAFETY: `req` came from this plugin and was not completed yet.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, test)(coll.0, req.0, &mut done) });
        self.check("test", r)?;
        Ok(done != 0)
    }

    /// `rmaProgress(rmaCtx)` (`ginProgress` for v13); a no-op when the slot is NULL
    /// (NCCL calls it "if non-NULL").
    pub fn progress(&self, ctx: RmaCtx) -> NetResult<()> {
        let f = match self.t()? {
            Table::V13(t) => t.ginProgress,
            Table::V14(t) => t.rmaProgress,
        };
        let Some(f) = f else { return Ok(()) };
        // SAFETY: `ctx` came from this plugin's createContext.
        let r = unsafe { f(ctx.0) };
        self.check("rmaProgress", r)
    }

    /// `queryLastError(rmaCtx, &hasError)`: whether the context saw an asynchronous error.
    pub fn query_last_error(&self, ctx: RmaCtx) -> NetResult<bool> {
        let mut has = false;
        // SAFETY: `ctx` came from this plugin's createContext; `has` outlives the call.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, queryLastError)(ctx.0, &mut has) });
        self.check("queryLastError", r)?;
        Ok(has)
    }
}

/// A device index as the `int` the ABI takes.
fn dev_index(dev: usize) -> NetResult<c_int> {
    c_int::try_from(dev).map_err(|_| NetError::InvalidArgument(format!("device index {dev} does not fit a C int")))
}

/// Where a candidate RMA library came from ([`load_rma`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RmaSource {
    /// An `NCCL_RMA_PLUGIN` entry, or the default `libnccl-rma.so`.
    External(String),
    /// The net plugin's library.
    NetLibrary,
}

/// The candidates [`load_rma`] tries, in NCCL 2.30.7's order, from the value of
/// `NCCL_RMA_PLUGIN`: unset → `libnccl-rma.so`; `none` (any case) → no external
/// library; otherwise each non-empty comma-separated entry shorter than 255 characters.
pub fn rma_plugin_names(env: Option<&str>) -> Vec<String> {
    match env {
        None => vec!["libnccl-rma.so".to_owned()],
        Some(v) if v.eq_ignore_ascii_case("none") => Vec::new(),
        Some(v) => v
            .split(',')
            .filter(|s| !s.is_empty() && s.len() < super::MAX_PLUGIN_NAME_LEN)
            .map(str::to_owned)
            .collect(),
    }
}

/// Process-wide adapters by table address, so a library is wrapped (and disabled) once.
static ADAPTERS: Mutex<Vec<Arc<RmaAdapter>>> = Mutex::new(Vec::new());

fn registered(lib: Arc<PluginLibrary>) -> Option<Arc<RmaAdapter>> {
    let a = RmaAdapter::probe(lib)?;
    let mut reg = ADAPTERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(old) = reg.iter().find(|o| o.sym.0 == a.sym.0) {
        return Some(old.clone());
    }
    let a = Arc::new(a);
    reg.push(a.clone());
    Some(a)
}

/// Chooses the RMA plugin for a communicator as `ncclRmaInit` (`src/plugin/rma.cc`)
/// does: candidates from `NCCL_RMA_PLUGIN` ([`rma_plugin_names`]; `env` is its value),
/// opened with prefix `libnccl-rma` in `dirs` as well, then `net_lib`; the first whose
/// `init(comm_id)` succeeds with ≥ 1 device wins. Returns the adapter, the context
/// `init` gave and where it came from; `Ok(None)` when no candidate works (NCCL:
/// "Failed to initialize any RMA plugin"). Every rejected candidate is logged at INFO.
pub fn load_rma(
    env: Option<&str>,
    dirs: &[PathBuf],
    net_lib: Option<Arc<PluginLibrary>>,
    comm_id: u64,
) -> Option<(Arc<RmaAdapter>, RawCtx, RmaSource)> {
    let mut cands: Vec<(Arc<PluginLibrary>, RmaSource)> = Vec::new();
    for name in rma_plugin_names(env) {
        let out = open_plugin_lib(if name == "libnccl-rma.so" { "" } else { &name }, "libnccl-rma", dirs);
        match out.lib {
            Some(lib) => cands.push((Arc::new(lib), RmaSource::External(name))),
            None => tracing::info!(target: "ferroccl::plugin", "RMA/Plugin: {name}: not loaded ({})", out.tried()),
        }
    }
    if let Some(l) = net_lib {
        cands.push((l, RmaSource::NetLibrary));
    }
    for (lib, src) in cands {
        let opened = lib.opened_as().to_owned();
        let Some(a) = registered(lib) else {
            tracing::info!(target: "ferroccl::plugin", "RMA/Plugin: {opened}: no ncclRmaPlugin_v14/_v13 or ncclGinPlugin_v13 symbol");
            continue;
        };
        match a.init_ctx(comm_id) {
            Ok(ctx) => {
                tracing::info!(target: "ferroccl::plugin", "Assigned RMA plugin {} to comm", a.info().name);
                return Some((a, ctx, src));
            }
            Err(e) => tracing::info!(target: "ferroccl::plugin", "RMA/Plugin: {opened}: {e}"),
        }
    }
    tracing::info!(target: "ferroccl::plugin", "Failed to initialize any RMA plugin");
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_follow_nccl() {
        assert_eq!(rma_plugin_names(None), vec!["libnccl-rma.so"]);
        assert!(rma_plugin_names(Some("NONE")).is_empty());
        assert_eq!(rma_plugin_names(Some("a,,b")), vec!["a", "b"]);
        let long = "x".repeat(300);
        assert_eq!(rma_plugin_names(Some(&format!("{long},c"))), vec!["c"]);
    }

    #[test]
    fn signal_ops_are_ncclnet_values() {
        assert_eq!(SignalOp::Inc.raw(), 1);
        assert_eq!(SignalOp::Add.raw(), 2);
    }
}
