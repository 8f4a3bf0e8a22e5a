//! Version adapters: one [`NetAdapter`] drives any `ncclNet_v6_t` … `ncclNet_v12_t`
//! through [`NetPlugin`] (newest semantics), the way NCCL 2.30.7's
//! `src/plugin/net/net_v*.cc` adapters do (reference §1.5):
//!
//! * **init**: v6–v10 have one process-wide `init` per loaded library; the adapter
//!   calls it on the first [`NetPlugin::init_ctx`] only and counts contexts after
//!   that (a failed `init` is remembered: the plugin stays disabled). v10 contexts
//!   are a heap copy of `ncclNetCommConfig_v10_t`, passed to `connect` as its
//!   `config`. v11+ call the plugin's `init` for every context and require a
//!   non-NULL `finalize`.
//! * **function pointers** are read only after the first successful `init`: the
//!   vtable struct is copied again from the exported symbol then, because some
//!   plugins fill or rewrite their table inside `init`. Before that only `name` and
//!   `init` are read.
//! * **sizes**: v6/v7 `regMr` takes `int` (sizes ≥ 2^31 → `InvalidArgument`); v6–v8
//!   `isend`/`irecv` take `int` and NCCL limits them to `MAX_NET_SIZE` = 2^30 (larger
//!   → `InvalidArgument`); `iflush` and `test` sizes are `int` in every version.
//! * **irecv hint**: v9+ may get `NCCL_NET_OPTIONAL_RECV_COMPLETION` (1) in
//!   `*request`; for v6–v8 `*request` starts NULL. A plugin that leaves the 1 in place
//!   gets an `Internal` error instead of a bogus request.
//! * **optional slots** checked for NULL: `regMrDmaBuf`, `getDeviceMr`,
//!   `irecvConsumed`, `makeVDevice`, `setNetAttr`. Every other slot must be non-NULL
//!   ([`NetAdapter::missing_required_slot`]).
//! * v7+ `connect`/`accept` device-handle out-arguments are passed and ignored
//!   (ferroccl has no device-side offload; the load check refuses UNPACK plugins).

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::{Arc, Mutex, OnceLock};

use ferroccl_plugin_api::abi::{
    self, MAX_NET_SIZE, NCCL_MAX_NET_SIZE_BYTES, NCCL_NET_OPTIONAL_RECV_COMPLETION, ncclNet_v6_t, ncclNet_v7_t,
    ncclNet_v8_t, ncclNet_v9_t, ncclNet_v10_t, ncclNet_v11_t, ncclNet_v12_t, ncclNetAttr_v12_t,
    ncclNetCommConfig_v10_t, ncclNetDeviceHandle_v7_t, ncclNetVDeviceProps_v9_t, ncclNetVDeviceProps_v12_t,
    ncclResult_t,
};

use super::collnet::CollNetAdapter;
use super::library::PluginLibrary;
use super::logger;
use super::net::{
    CommConfig, NetError, NetHandle, NetInfo, NetPlugin, NetResult, Properties, PtrType, RawComm, RawCtx, RawMr,
    RawRequest, RecvSlot,
};

/// The plugin's vtable, copied out of the exported symbol, tagged by version.
#[derive(Clone, Copy)]
enum Table {
    V6(ncclNet_v6_t),
    V7(ncclNet_v7_t),
    V8(ncclNet_v8_t),
    V9(ncclNet_v9_t),
    V10(ncclNet_v10_t),
    V11(ncclNet_v11_t),
    V12(ncclNet_v12_t),
}

/// Runs `$body` with `$v` bound to the version's struct, for slots whose C type is
/// the same in every version (the body is expanded once per arm).
macro_rules! each {
    ($t:expr, $v:ident => $body:expr) => {
        match $t {
            Table::V6($v) => $body,
            Table::V7($v) => $body,
            Table::V8($v) => $body,
            Table::V9($v) => $body,
            Table::V10($v) => $body,
            Table::V11($v) => $body,
            Table::V12($v) => $body,
        }
    };
}

impl Table {
    /// Copies the vtable out of the symbol.
    ///
    /// # Safety
    /// `sym` must point to a readable struct of the type of `version` (6 ..= 12).
    unsafe fn read(sym: *const c_void, version: u32) -> Table {
        // SAFETY: per the caller's guarantee; `read_unaligned` because nothing
        // promises the plugin's data symbol is aligned.
        unsafe {
            match version {
                6 => Table::V6(std::ptr::read_unaligned(sym.cast())),
                7 => Table::V7(std::ptr::read_unaligned(sym.cast())),
                8 => Table::V8(std::ptr::read_unaligned(sym.cast())),
                9 => Table::V9(std::ptr::read_unaligned(sym.cast())),
                10 => Table::V10(std::ptr::read_unaligned(sym.cast())),
                11 => Table::V11(std::ptr::read_unaligned(sym.cast())),
                _ => Table::V12(std::ptr::read_unaligned(sym.cast())),
            }
        }
    }

    fn name_ptr(&self) -> *const c_char {
        each!(self, t => t.name)
    }

    /// Name of the first slot that NCCL calls without a NULL check but is NULL.
    fn missing_required_slot(&self) -> Option<&'static str> {
        macro_rules! req {
            ($t:expr, $($f:ident),*) => {{
                $( if $t.$f.is_none() { return Some(stringify!($f)); } )*
            }};
        }
        each!(self, t => req!(t, init, devices, getProperties, listen, connect, accept, regMr, deregMr, isend, irecv,
            iflush, test, closeSend, closeRecv, closeListen));
        match self {
            Table::V11(t) => req!(t, finalize),
            Table::V12(t) => req!(t, finalize),
            _ => {}
        }
        None
    }
}

/// A raw pointer that may be shared between threads (the vtable symbol's address).
#[derive(Clone, Copy)]
struct SymAddr(*const c_void);
// SAFETY: the address of a data symbol in a library that is never unloaded while
// the adapter lives; it is only read.
unsafe impl Send for SymAddr {}
// SAFETY: as above.
unsafe impl Sync for SymAddr {}

/// Table plus init state, shared by every context.
struct InitState {
    /// v6–v10: outcome of the one `init` (`None` = not called yet): the error's
    /// `ncclResult_t` and text, replayed to later callers with the same code.
    shared_init: Option<Result<(), (i32, String)>>,
    /// Live contexts (informational for v11+, the refcount for v6–v10).
    contexts: usize,
}

/// Drives one loaded `ncclNetPlugin_vN` symbol through [`NetPlugin`].
pub struct NetAdapter {
    lib: Arc<PluginLibrary>,
    sym: SymAddr,
    info: NetInfo,
    /// Copied before `init`: only `name` and `init` are used from it.
    pre: Table,
    /// Copied after the first successful `init`; every other slot comes from here.
    table: OnceLock<Table>,
    state: Mutex<InitState>,
    /// The library's `ncclCollNetPlugin_vN`, if it exports one.
    collnet: Option<Arc<CollNetAdapter>>,
}

// SAFETY: the tables hold plugin function pointers and C strings, which NCCL's
// contract allows to be used from any thread; mutable state is behind a Mutex.
unsafe impl Send for NetAdapter {}
// SAFETY: as above.
unsafe impl Sync for NetAdapter {}

impl std::fmt::Debug for NetAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetAdapter")
            .field("info", &self.info)
            .field("initialized", &self.table.get().is_some())
            .finish()
    }
}

/// Reads a C string the plugin owns; `None` for NULL.
pub(super) fn c_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: plugins must give NUL-terminated strings that stay alive (NCCL borrows them).
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Converts a `usize` argument to the `int` an older version takes, or `InvalidArgument`.
pub(super) fn to_int(v: usize, what: &str, limit: usize) -> NetResult<c_int> {
    if v > limit {
        return Err(NetError::InvalidArgument(format!(
            "{what} {v} exceeds this plugin version's limit of {limit} bytes"
        )));
    }
    c_int::try_from(v).map_err(|_| NetError::InvalidArgument(format!("{what} {v} does not fit a C int")))
}

/// The `NCCL_PTR_*` value of `ty`.
pub(super) fn ptr_type(ty: PtrType) -> c_int {
    match ty {
        PtrType::Host => abi::NCCL_PTR_HOST,
        PtrType::Cuda => abi::NCCL_PTR_CUDA,
        PtrType::DmaBuf => abi::NCCL_PTR_DMABUF,
    }
}

/// The `mhandle` pointer of `mr` (NULL for none).
pub(super) fn mr_ptr(mr: Option<RawMr>) -> *mut c_void {
    mr.map_or(null_mut(), |m| m.0)
}

/// Common fields of every properties version.
macro_rules! base_props {
    ($p:expr) => {
        Properties {
            name: c_string($p.name).unwrap_or_default(),
            pci_path: c_string($p.pciPath),
            guid: $p.guid,
            ptr_support: $p.ptrSupport,
            speed: $p.speed,
            port: $p.port,
            latency: $p.latency,
            max_comms: $p.maxComms,
            max_recvs: $p.maxRecvs,
            ..Properties::default()
        }
    };
}

fn vdevs(ndevs: c_int, devs: &[c_int]) -> Vec<i32> {
    let n = usize::try_from(ndevs).unwrap_or(0).min(devs.len());
    devs[..n].to_vec()
}

impl NetAdapter {
    /// Wraps the vtable at `sym` (the address of `ncclNetPlugin_v<version>` in `lib`)
    /// and, when `collnet` gives the address and version of the library's
    /// `ncclCollNetPlugin_vN`, its [`CollNetAdapter`].
    ///
    /// # Safety
    /// `sym` must be the address of a `ncclNet_v<version>_t` exported by `lib`, and
    /// `collnet` that of a `ncclCollNet_v<N>_t` exported by `lib` (N in 6 ..= 12).
    pub(crate) unsafe fn new(
        lib: Arc<PluginLibrary>,
        sym: *const c_void,
        version: u32,
        path: PathBuf,
        collnet: Option<(*const c_void, u32)>,
    ) -> Self {
        // SAFETY: per the caller's guarantee.
        let pre = unsafe { Table::read(sym, version) };
        let name = c_string(pre.name_ptr()).unwrap_or_default();
        let collnet_version = collnet.map(|(_, v)| v);
        let collnet = collnet.map(|(csym, cver)| {
            // SAFETY: per the caller's guarantee.
            Arc::new(unsafe { CollNetAdapter::new(lib.clone(), csym, cver, path.clone()) })
        });
        NetAdapter {
            collnet,
            lib,
            sym: SymAddr(sym),
            info: NetInfo {
                name,
                version,
                path,
                collnet_version,
            },
            pre,
            table: OnceLock::new(),
            state: Mutex::new(InitState {
                shared_init: None,
                contexts: 0,
            }),
        }
    }

    /// Address of the exported vtable (identifies the loaded plugin).
    pub(crate) fn symbol_address(&self) -> usize {
        self.sym.0 as usize
    }

    /// The library this plugin lives in.
    pub(crate) fn library(&self) -> &Arc<PluginLibrary> {
        &self.lib
    }

    /// After the first successful `init`: the first required slot that is NULL.
    pub fn missing_required_slot(&self) -> Option<&'static str> {
        self.table.get().and_then(Table::missing_required_slot)
    }

    /// Number of live contexts.
    pub fn live_contexts(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).contexts
    }

    fn err(&self, call: &str, r: ncclResult_t) -> NetError {
        let msg = format!(
            "plugin '{}' (ncclNet v{}) {call} returned {} ({})",
            self.info.name,
            self.info.version,
            r.name(),
            r.0
        );
        net_error(r.0, msg)
    }

    fn check(&self, call: &str, r: ncclResult_t) -> NetResult<()> {
        if r.is_success() { Ok(()) } else { Err(self.err(call, r)) }
    }

    fn null_slot(&self, slot: &str) -> NetError {
        NetError::Internal(format!(
            "plugin '{}' (ncclNet v{}) has a NULL '{slot}' function pointer",
            self.info.name, self.info.version
        ))
    }

    /// The post-`init` table, or an error when no `init` succeeded yet.
    fn t(&self) -> NetResult<&Table> {
        self.table.get().ok_or_else(|| {
            NetError::Internal(format!(
                "plugin '{}': called before a successful init (use init_ctx first)",
                self.info.name
            ))
        })
    }

    fn dev(dev: usize) -> NetResult<c_int> {
        c_int::try_from(dev).map_err(|_| NetError::InvalidArgument(format!("device index {dev} does not fit a C int")))
    }

    /// Copies the table after the first successful `init`.
    fn capture_table(&self) {
        self.table.get_or_init(|| {
            // SAFETY: `sym` is the address of this version's vtable (constructor contract).
            let t = unsafe { Table::read(self.sym.0, self.info.version) };
            let name = c_string(t.name_ptr()).unwrap_or_default();
            if name != self.info.name {
                tracing::info!(target: "ferroccl::plugin",
                    "NET/Plugin: '{}' renamed itself to '{name}' in init; keeping the name matched before init",
                    self.info.name);
            }
            t
        });
    }
}

/// The [`NetError`] a plugin's `ncclResult_t` value `code` stands for, with `msg`
/// (an unknown or unexpected code is an internal error).
pub(super) fn net_error(code: i32, msg: String) -> NetError {
    match code {
        2 => NetError::System(msg),
        4 => NetError::InvalidArgument(msg),
        5 => NetError::InvalidUsage(msg),
        6 => NetError::Remote(msg),
        8 => NetError::Timeout(msg),
        _ => NetError::Internal(msg),
    }
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

/// The signature of NCCL's `ncclProfilerCallback` (`src/plugin/profiler.cc`).
pub type NetProfilerCallback =
    unsafe extern "C" fn(*mut *mut c_void, c_int, *mut c_void, i64, *mut c_void) -> ncclResult_t;

/// The profiler layer's net-plugin callback, installed once by the layer above
/// (`comm` installs `profiler::net_callback` before loading a net plugin) so the
/// plugin host never imports the profiler.
static NET_PROFILER_HOOK: std::sync::OnceLock<NetProfilerCallback> = std::sync::OnceLock::new();

/// Installs the callback v10+ net plugins' profiler events go to (the first
/// call wins; later calls are ignored).
pub fn set_net_profiler_callback(f: NetProfilerCallback) {
    let _ = NET_PROFILER_HOOK.set(f);
}

/// What v10+ net plugins get as `profFunction`: forwards to the installed
/// callback; without one, every call succeeds and does nothing.
///
/// # Safety
/// Called by plugins per the ABI (see the installed callback's contract).
unsafe extern "C" fn net_profiler_trampoline(
    e_handle: *mut *mut c_void,
    ty: c_int,
    p_handle: *mut c_void,
    plugin_id: i64,
    ext_data: *mut c_void,
) -> ncclResult_t {
    match NET_PROFILER_HOOK.get() {
        // SAFETY: forwarded unchanged under the same ABI contract.
        Some(f) => unsafe { f(e_handle, ty, p_handle, plugin_id, ext_data) },
        None => ncclResult_t::ncclSuccess,
    }
}

impl NetPlugin for NetAdapter {
    fn info(&self) -> &NetInfo {
        &self.info
    }

    fn collnet(&self) -> Option<Arc<CollNetAdapter>> {
        self.collnet.clone()
    }

    fn plugin_library(&self) -> Option<Arc<PluginLibrary>> {
        Some(self.lib.clone())
    }

    fn init_ctx(&self, comm_id: u64, config: &CommConfig) -> NetResult<RawCtx> {
        let logger = Some(logger::nccl_logger());
        let prof: abi::ncclProfilerCallback_t = Some(net_profiler_trampoline);
        // From here on plugin code runs: never dlclose this library again.
        self.lib.pin();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match self.info.version {
            6..=10 => {
                match &st.shared_init {
                    Some(Err((code, e))) => {
                        // Not retried (NCCL calls a v6-v10 init once per process);
                        // the caller sees the original code, e.g. ncclSystemError.
                        let msg = format!("plugin disabled: its init failed earlier: {e}");
                        return Err(net_error(*code, msg));
                    }
                    Some(Ok(())) => {}
                    None => {
                        // SAFETY: calling the plugin's init with the logger and the
                        // profiler callback its version expects.
                        let r = unsafe {
                            match &self.pre {
                                Table::V6(t) => slot!(self, t, init)(logger),
                                Table::V7(t) => slot!(self, t, init)(logger),
                                Table::V8(t) => slot!(self, t, init)(logger),
                                Table::V9(t) => slot!(self, t, init)(logger),
                                Table::V10(t) => slot!(self, t, init)(logger, prof),
                                _ => unreachable!("version checked above"),
                            }
                        };
                        if let Err(e) = self.check("init", r) {
                            st.shared_init = Some(Err((e.code().0, e.to_string())));
                            return Err(e);
                        }
                        st.shared_init = Some(Ok(()));
                        self.capture_table();
                    }
                }
                st.contexts += 1;
                if self.info.version == 10 {
                    let cfg = Box::new(ncclNetCommConfig_v10_t {
                        trafficClass: config.traffic_class,
                    });
                    Ok(RawCtx(Box::into_raw(cfg).cast()))
                } else {
                    Ok(RawCtx(null_mut()))
                }
            }
            _ => {
                let t = *self.table.get().unwrap_or(&self.pre);
                let mut ctx: *mut c_void = null_mut();
                let mut cfg = ncclNetCommConfig_v10_t {
                    trafficClass: config.traffic_class,
                };
                // SAFETY: v11/v12 init signature; `ctx` and `cfg` outlive the call.
                let r = unsafe {
                    match &t {
                        Table::V11(t) => slot!(self, t, init)(&mut ctx, comm_id, &mut cfg, logger, prof),
                        Table::V12(t) => slot!(self, t, init)(&mut ctx, comm_id, &mut cfg, logger, prof),
                        _ => unreachable!("version checked above"),
                    }
                };
                self.check("init", r)?;
                self.capture_table();
                if self.missing_required_slot() == Some("finalize") {
                    return Err(self.null_slot("finalize"));
                }
                st.contexts += 1;
                Ok(RawCtx(ctx))
            }
        }
    }

    fn finalize_ctx(&self, ctx: RawCtx) -> NetResult<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match self.t()? {
            Table::V11(t) => {
                // SAFETY: `ctx` came from this plugin's init.
                let r = unsafe { slot!(self, t, finalize)(ctx.0) };
                st.contexts = st.contexts.saturating_sub(1);
                self.check("finalize", r)
            }
            Table::V12(t) => {
                // SAFETY: as above.
                let r = unsafe { slot!(self, t, finalize)(ctx.0) };
                st.contexts = st.contexts.saturating_sub(1);
                self.check("finalize", r)
            }
            Table::V10(_) => {
                if !ctx.0.is_null() {
                    // SAFETY: v10 contexts are boxes made by `init_ctx`.
                    drop(unsafe { Box::from_raw(ctx.0.cast::<ncclNetCommConfig_v10_t>()) });
                }
                st.contexts = st.contexts.saturating_sub(1);
                Ok(())
            }
            _ => {
                st.contexts = st.contexts.saturating_sub(1);
                Ok(())
            }
        }
    }

    fn devices(&self) -> NetResult<usize> {
        let mut n: c_int = 0;
        // SAFETY: `devices(int*)` in every version.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, devices)(&mut n) });
        self.check("devices", r)?;
        usize::try_from(n).map_err(|_| NetError::Internal(format!("plugin '{}' devices() gave {n}", self.info.name)))
    }

    fn properties(&self, dev: usize) -> NetResult<Properties> {
        let d = Self::dev(dev)?;
        let call = "getProperties";
        // SAFETY: each arm passes the properties struct of the table's version.
        let mut p = unsafe {
            match self.t()? {
                Table::V6(t) => {
                    let mut p = abi::ncclNetProperties_v6_t::zeroed();
                    self.check(call, slot!(self, t, getProperties)(d, &mut p))?;
                    props_v6(&p)
                }
                Table::V7(t) => {
                    let mut p = abi::ncclNetProperties_v7_t::zeroed();
                    self.check(call, slot!(self, t, getProperties)(d, &mut p))?;
                    props_v7(&p)
                }
                Table::V8(t) => {
                    let mut p = abi::ncclNetProperties_v8_t::zeroed();
                    self.check(call, slot!(self, t, getProperties)(d, &mut p))?;
                    props_v8(&p)
                }
                Table::V9(t) => {
                    let mut p = abi::ncclNetProperties_v9_t::zeroed();
                    self.check(call, slot!(self, t, getProperties)(d, &mut p))?;
                    props_v9(&p)
                }
                Table::V10(t) => {
                    let mut p = abi::ncclNetProperties_v10_t::zeroed();
                    self.check(call, slot!(self, t, getProperties)(d, &mut p))?;
                    props_v9(&p)
                }
                Table::V11(t) => {
                    let mut p = abi::ncclNetProperties_v11_t::zeroed();
                    self.check(call, slot!(self, t, getProperties)(d, &mut p))?;
                    props_v11(&p)
                }
                Table::V12(t) => {
                    let mut p = abi::ncclNetProperties_v12_t::zeroed();
                    self.check(call, slot!(self, t, getProperties)(d, &mut p))?;
                    props_v12(&p)
                }
            }
        };
        // NCCL caps both limits at NCCL_MAX_NET_SIZE_BYTES.
        p.max_p2p_bytes = p.max_p2p_bytes.min(NCCL_MAX_NET_SIZE_BYTES);
        p.max_coll_bytes = p.max_coll_bytes.min(NCCL_MAX_NET_SIZE_BYTES);
        Ok(p)
    }

    fn listen(&self, ctx: RawCtx, dev: usize, handle: &mut NetHandle) -> NetResult<RawComm> {
        let d = Self::dev(dev)?;
        let h = handle.as_mut_ptr().cast::<c_void>();
        let mut lc: *mut c_void = null_mut();
        // SAFETY: `handle` is the 128-byte buffer NCCL passes; `lc` outlives the call.
        let r = unsafe {
            match self.t()? {
                Table::V6(t) => slot!(self, t, listen)(d, h, &mut lc),
                Table::V7(t) => slot!(self, t, listen)(d, h, &mut lc),
                Table::V8(t) => slot!(self, t, listen)(d, h, &mut lc),
                Table::V9(t) => slot!(self, t, listen)(d, h, &mut lc),
                Table::V10(t) => slot!(self, t, listen)(d, h, &mut lc),
                Table::V11(t) => slot!(self, t, listen)(ctx.0, d, h, &mut lc),
                Table::V12(t) => slot!(self, t, listen)(ctx.0, d, h, &mut lc),
            }
        };
        self.check("listen", r)?;
        if lc.is_null() {
            return Err(NetError::Internal(format!(
                "plugin '{}' listen succeeded but returned a NULL listenComm",
                self.info.name
            )));
        }
        Ok(RawComm(lc))
    }

    fn connect(&self, ctx: RawCtx, dev: usize, handle: &mut NetHandle) -> NetResult<Option<RawComm>> {
        let d = Self::dev(dev)?;
        let h = handle.as_mut_ptr().cast::<c_void>();
        let mut sc: *mut c_void = null_mut();
        let mut dc: *mut ncclNetDeviceHandle_v7_t = null_mut();
        let mut default_cfg = ncclNetCommConfig_v10_t {
            trafficClass: abi::NCCL_NET_TRAFFIC_CLASS_UNDEF,
        };
        // SAFETY: per-version connect signatures; every pointer outlives the call. For
        // v10 `ctx` is the config box made by `init_ctx` (or NULL → a default config).
        let r = unsafe {
            match self.t()? {
                Table::V6(t) => slot!(self, t, connect)(d, h, &mut sc),
                Table::V7(t) => slot!(self, t, connect)(d, h, &mut sc, &mut dc),
                Table::V8(t) => slot!(self, t, connect)(d, h, &mut sc, &mut dc),
                Table::V9(t) => slot!(self, t, connect)(d, h, &mut sc, &mut dc),
                Table::V10(t) => {
                    let cfg = if ctx.0.is_null() {
                        &mut default_cfg as *mut _
                    } else {
                        ctx.0.cast::<ncclNetCommConfig_v10_t>()
                    };
                    slot!(self, t, connect)(d, cfg, h, &mut sc, &mut dc)
                }
                Table::V11(t) => slot!(self, t, connect)(ctx.0, d, h, &mut sc, &mut dc),
                Table::V12(t) => slot!(self, t, connect)(ctx.0, d, h, &mut sc, &mut dc),
            }
        };
        self.check("connect", r)?;
        Ok((!sc.is_null()).then_some(RawComm(sc)))
    }

    fn accept(&self, listen: RawComm) -> NetResult<Option<RawComm>> {
        let mut rc: *mut c_void = null_mut();
        let mut dc: *mut ncclNetDeviceHandle_v7_t = null_mut();
        // SAFETY: per-version accept signatures; out-pointers outlive the call.
        let r = unsafe {
            match self.t()? {
                Table::V6(t) => slot!(self, t, accept)(listen.0, &mut rc),
                Table::V7(t) => slot!(self, t, accept)(listen.0, &mut rc, &mut dc),
                Table::V8(t) => slot!(self, t, accept)(listen.0, &mut rc, &mut dc),
                Table::V9(t) => slot!(self, t, accept)(listen.0, &mut rc, &mut dc),
                Table::V10(t) => slot!(self, t, accept)(listen.0, &mut rc, &mut dc),
                Table::V11(t) => slot!(self, t, accept)(listen.0, &mut rc, &mut dc),
                Table::V12(t) => slot!(self, t, accept)(listen.0, &mut rc, &mut dc),
            }
        };
        self.check("accept", r)?;
        Ok((!rc.is_null()).then_some(RawComm(rc)))
    }

    fn reg_mr(&self, comm: RawComm, data: *mut u8, size: usize, ty: PtrType) -> NetResult<RawMr> {
        let mut mh: *mut c_void = null_mut();
        let ty = ptr_type(ty);
        let p = data.cast::<c_void>();
        // SAFETY: per-version regMr signatures; `mh` outlives the call.
        let r = unsafe {
            match self.t()? {
                Table::V6(t) => {
                    slot!(self, t, regMr)(comm.0, p, to_int(size, "regMr size", i32::MAX as usize)?, ty, &mut mh)
                }
                Table::V7(t) => {
                    slot!(self, t, regMr)(comm.0, p, to_int(size, "regMr size", i32::MAX as usize)?, ty, &mut mh)
                }
                Table::V8(t) => slot!(self, t, regMr)(comm.0, p, size, ty, &mut mh),
                Table::V9(t) => slot!(self, t, regMr)(comm.0, p, size, ty, &mut mh),
                Table::V10(t) => slot!(self, t, regMr)(comm.0, p, size, ty, &mut mh),
                Table::V11(t) => slot!(self, t, regMr)(comm.0, p, size, ty, &mut mh),
                Table::V12(t) => slot!(self, t, regMr)(comm.0, p, size, ty, &mut mh),
            }
        };
        self.check("regMr", r)?;
        Ok(RawMr(mh))
    }

    fn dereg_mr(&self, comm: RawComm, mr: RawMr) -> NetResult<()> {
        // SAFETY: `deregMr(void*, void*)` in every version.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, deregMr)(comm.0, mr.0) });
        self.check("deregMr", r)
    }

    fn isend(
        &self,
        comm: RawComm,
        data: *mut u8,
        size: usize,
        tag: i32,
        mr: Option<RawMr>,
    ) -> NetResult<Option<RawRequest>> {
        self.isend_ph(comm, data, size, tag, mr, null_mut())
    }

    // `phandle` is handed to the plugin as an opaque token; the host never
    // dereferences it here (the installed profiler callback does).
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    fn isend_ph(
        &self,
        comm: RawComm,
        data: *mut u8,
        size: usize,
        tag: i32,
        mr: Option<RawMr>,
        phandle: *mut c_void,
    ) -> NetResult<Option<RawRequest>> {
        let mut req: *mut c_void = null_mut();
        let p = data.cast::<c_void>();
        let mh = mr_ptr(mr);
        // SAFETY: per-version isend signatures; `req` outlives the call; `phandle` is NULL or a live PHandle.
        let r = unsafe {
            match self.t()? {
                Table::V6(t) => {
                    slot!(self, t, isend)(comm.0, p, to_int(size, "isend size", MAX_NET_SIZE)?, tag, mh, &mut req)
                }
                Table::V7(t) => {
                    slot!(self, t, isend)(comm.0, p, to_int(size, "isend size", MAX_NET_SIZE)?, tag, mh, &mut req)
                }
                Table::V8(t) => {
                    slot!(self, t, isend)(comm.0, p, to_int(size, "isend size", MAX_NET_SIZE)?, tag, mh, &mut req)
                }
                Table::V9(t) => slot!(self, t, isend)(comm.0, p, size, tag, mh, &mut req),
                Table::V10(t) => slot!(self, t, isend)(comm.0, p, size, tag, mh, phandle, &mut req),
                Table::V11(t) => slot!(self, t, isend)(comm.0, p, size, tag, mh, phandle, &mut req),
                Table::V12(t) => slot!(self, t, isend)(comm.0, p, size, tag, mh, phandle, &mut req),
            }
        };
        self.check("isend", r)?;
        Ok((!req.is_null()).then_some(RawRequest(req)))
    }

    fn irecv(&self, comm: RawComm, slots: &[RecvSlot], optional_completion: bool) -> NetResult<Option<RawRequest>> {
        self.irecv_ph(comm, slots, optional_completion, &[])
    }

    fn irecv_ph(
        &self,
        comm: RawComm,
        slots: &[RecvSlot],
        optional_completion: bool,
        phandles: &[*mut c_void],
    ) -> NetResult<Option<RawRequest>> {
        let n = c_int::try_from(slots.len()).ok().filter(|&n| n >= 1).ok_or_else(|| {
            NetError::InvalidArgument(format!("irecv of {} buffers (expected 1 ..= maxRecvs)", slots.len()))
        })?;
        let mut data: Vec<*mut c_void> = slots.iter().map(|s| s.data.cast()).collect();
        let mut tags: Vec<c_int> = slots.iter().map(|s| s.tag).collect();
        let mut mhs: Vec<*mut c_void> = slots.iter().map(|s| mr_ptr(s.mr)).collect();
        let mut phs: Vec<*mut c_void> = (0..slots.len())
            .map(|i| phandles.get(i).copied().unwrap_or(null_mut()))
            .collect();
        let mut sizes: Vec<usize> = slots.iter().map(|s| s.size).collect();
        let t = self.t()?;
        let v9plus = self.info.version >= 9;
        let hint = NCCL_NET_OPTIONAL_RECV_COMPLETION as *mut c_void;
        // v6–v8 never see the hint (NCCL's adapters reset *request to NULL).
        let mut req: *mut c_void = if optional_completion && v9plus {
            hint
        } else {
            null_mut()
        };
        let mut isizes: Vec<c_int> = Vec::new();
        if !v9plus {
            isizes = sizes
                .iter()
                .map(|&s| to_int(s, "irecv size", MAX_NET_SIZE))
                .collect::<NetResult<_>>()?;
        }
        let (d, tg, mh, ph) = (data.as_mut_ptr(), tags.as_mut_ptr(), mhs.as_mut_ptr(), phs.as_mut_ptr());
        // SAFETY: per-version irecv signatures; every array has `n` entries and
        // outlives the call; `req` outlives the call.
        let r = unsafe {
            match t {
                Table::V6(t) => slot!(self, t, irecv)(comm.0, n, d, isizes.as_mut_ptr(), tg, mh, &mut req),
                Table::V7(t) => slot!(self, t, irecv)(comm.0, n, d, isizes.as_mut_ptr(), tg, mh, &mut req),
                Table::V8(t) => slot!(self, t, irecv)(comm.0, n, d, isizes.as_mut_ptr(), tg, mh, &mut req),
                Table::V9(t) => slot!(self, t, irecv)(comm.0, n, d, sizes.as_mut_ptr(), tg, mh, &mut req),
                Table::V10(t) => slot!(self, t, irecv)(comm.0, n, d, sizes.as_mut_ptr(), tg, mh, ph, &mut req),
                Table::V11(t) => slot!(self, t, irecv)(comm.0, n, d, sizes.as_mut_ptr(), tg, mh, ph, &mut req),
                Table::V12(t) => slot!(self, t, irecv)(comm.0, n, d, sizes.as_mut_ptr(), tg, mh, ph, &mut req),
            }
        };
        self.check("irecv", r)?;
        if req == hint {
            return Err(NetError::Internal(format!(
                "plugin '{}' irecv left NCCL_NET_OPTIONAL_RECV_COMPLETION (1) in *request instead of a request or NULL",
                self.info.name
            )));
        }
        Ok((!req.is_null()).then_some(RawRequest(req)))
    }

    fn iflush(&self, comm: RawComm, slots: &[RecvSlot]) -> NetResult<Option<RawRequest>> {
        let n = c_int::try_from(slots.len())
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| NetError::InvalidArgument(format!("iflush of {} buffers", slots.len())))?;
        let mut data: Vec<*mut c_void> = slots.iter().map(|s| s.data.cast()).collect();
        let mut sizes: Vec<c_int> = slots
            .iter()
            .map(|s| to_int(s.size, "iflush size", i32::MAX as usize))
            .collect::<NetResult<_>>()?;
        let mut mhs: Vec<*mut c_void> = slots.iter().map(|s| mr_ptr(s.mr)).collect();
        let mut req: *mut c_void = null_mut();
        // SAFETY: `iflush` has the same signature in every version; arrays have `n` entries.
        let r = each!(self.t()?, t => unsafe {
            slot!(self, t, iflush)(comm.0, n, data.as_mut_ptr(), sizes.as_mut_ptr(), mhs.as_mut_ptr(), &mut req)
        });
        self.check("iflush", r)?;
        Ok((!req.is_null()).then_some(RawRequest(req)))
    }

    fn test(&self, req: RawRequest, sizes: &mut [usize]) -> NetResult<bool> {
        const MAX: usize = 64;
        if sizes.len() > MAX {
            return Err(NetError::InvalidArgument(format!(
                "test with {} size slots (at most {MAX})",
                sizes.len()
            )));
        }
        let mut done: c_int = 0;
        let mut buf = [0 as c_int; MAX];
        let p = if sizes.is_empty() { null_mut() } else { buf.as_mut_ptr() };
        // SAFETY: `test(void*, int*, int*)` in every version; `buf` has room for any
        // multi-recv the caller posted (at most `sizes.len()` ≤ 64 buffers).
        let r = each!(self.t()?, t => unsafe { slot!(self, t, test)(req.0, &mut done, p) });
        self.check("test", r)?;
        if done == 0 {
            return Ok(false);
        }
        for (dst, &src) in sizes.iter_mut().zip(buf.iter()) {
            *dst = usize::try_from(src).map_err(|_| {
                NetError::Internal(format!(
                    "plugin '{}' test reported a negative size {src}",
                    self.info.name
                ))
            })?;
        }
        Ok(true)
    }

    fn close_send(&self, comm: RawComm) -> NetResult<()> {
        // SAFETY: same signature in every version.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, closeSend)(comm.0) });
        self.check("closeSend", r)
    }

    fn close_recv(&self, comm: RawComm) -> NetResult<()> {
        // SAFETY: same signature in every version.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, closeRecv)(comm.0) });
        self.check("closeRecv", r)
    }

    fn close_listen(&self, listen: RawComm) -> NetResult<()> {
        // SAFETY: same signature in every version.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, closeListen)(listen.0) });
        self.check("closeListen", r)
    }

    fn has_dmabuf(&self) -> bool {
        self.t()
            .map(|t| each!(t, t => t.regMrDmaBuf.is_some()))
            .unwrap_or(false)
    }

    fn reg_mr_dmabuf(
        &self,
        comm: RawComm,
        data: *mut u8,
        size: usize,
        ty: PtrType,
        offset: u64,
        fd: i32,
    ) -> NetResult<RawMr> {
        let mut mh: *mut c_void = null_mut();
        let f = each!(self.t()?, t => t.regMrDmaBuf);
        let Some(f) = f else {
            return Err(NetError::Internal(format!(
                "plugin '{}' has no regMrDmaBuf (slot is NULL)",
                self.info.name
            )));
        };
        // SAFETY: `regMrDmaBuf` has the same signature in every version.
        let r = unsafe { f(comm.0, data.cast(), size, ptr_type(ty), offset, fd, &mut mh) };
        self.check("regMrDmaBuf", r)?;
        Ok(RawMr(mh))
    }

    fn irecv_consumed(&self, comm: RawComm, n: usize, req: RawRequest) -> NetResult<()> {
        let f = match self.t()? {
            Table::V6(_) => None,
            Table::V7(t) => t.irecvConsumed,
            Table::V8(t) => t.irecvConsumed,
            Table::V9(t) => t.irecvConsumed,
            Table::V10(t) => t.irecvConsumed,
            Table::V11(t) => t.irecvConsumed,
            Table::V12(t) => t.irecvConsumed,
        };
        let Some(f) = f else { return Ok(()) };
        let n = c_int::try_from(n).map_err(|_| NetError::InvalidArgument(format!("irecvConsumed n={n}")))?;
        // SAFETY: `irecvConsumed(void*, int, void*)` for v7+.
        let r = unsafe { f(comm.0, n, req.0) };
        self.check("irecvConsumed", r)
    }

    fn has_make_vdevice(&self) -> bool {
        match self.t() {
            Ok(Table::V9(t)) => t.makeVDevice.is_some(),
            Ok(Table::V10(t)) => t.makeVDevice.is_some(),
            Ok(Table::V11(t)) => t.makeVDevice.is_some(),
            Ok(Table::V12(t)) => t.makeVDevice.is_some(),
            _ => false,
        }
    }

    fn make_vdevice(&self, devs: &[i32]) -> NetResult<usize> {
        let unsupported = || {
            NetError::InvalidUsage(format!(
                "plugin '{}' (ncclNet v{}) cannot fuse devices (no makeVDevice)",
                self.info.name, self.info.version
            ))
        };
        let mut d: c_int = -1;
        let r = match self.t()? {
            Table::V9(t) => vdev_call(t.makeVDevice.ok_or_else(unsupported)?, devs, &mut d)?,
            Table::V10(t) => vdev_call(t.makeVDevice.ok_or_else(unsupported)?, devs, &mut d)?,
            Table::V11(t) => vdev_call(t.makeVDevice.ok_or_else(unsupported)?, devs, &mut d)?,
            Table::V12(t) => {
                let f = t.makeVDevice.ok_or_else(unsupported)?;
                let mut p = ncclNetVDeviceProps_v12_t::zeroed();
                if devs.len() > p.devs.len() {
                    return Err(NetError::InvalidArgument(format!(
                        "makeVDevice of {} devices (at most 8)",
                        devs.len()
                    )));
                }
                p.ndevs = devs.len() as c_int;
                p.devs[..devs.len()].copy_from_slice(devs);
                // SAFETY: v12 makeVDevice with its 8-entry struct.
                unsafe { f(&mut d, &mut p) }
            }
            _ => return Err(unsupported()),
        };
        self.check("makeVDevice", r)?;
        usize::try_from(d).map_err(|_| NetError::Internal(format!("makeVDevice returned device {d}")))
    }

    fn set_net_attr(&self, ctx: RawCtx, attr: &ncclNetAttr_v12_t) -> NetResult<()> {
        let f = match self.t()? {
            Table::V11(t) => t.setNetAttr,
            Table::V12(t) => t.setNetAttr,
            _ => None,
        };
        let Some(f) = f else { return Ok(()) };
        let mut a = *attr;
        // SAFETY: `setNetAttr(void* ctx, ncclNetAttr*)`; `a` outlives the call.
        let r = unsafe { f(ctx.0, &mut a) };
        self.check("setNetAttr", r)
    }
}

type MakeVDeviceV9 = unsafe extern "C" fn(*mut c_int, *mut ncclNetVDeviceProps_v9_t) -> ncclResult_t;

fn vdev_call(f: MakeVDeviceV9, devs: &[i32], d: &mut c_int) -> NetResult<ncclResult_t> {
    let mut p = ncclNetVDeviceProps_v9_t::zeroed();
    if devs.len() > p.devs.len() {
        return Err(NetError::InvalidArgument(format!(
            "makeVDevice of {} devices (at most 4 before v12)",
            devs.len()
        )));
    }
    p.ndevs = devs.len() as c_int;
    p.devs[..devs.len()].copy_from_slice(devs);
    // SAFETY: v9–v11 makeVDevice with the 4-entry struct; both pointers outlive the call.
    Ok(unsafe { f(d, &mut p) })
}

/// `ncclNetProperties_v6_t` → [`Properties`] (pre-v9 limits keep NCCL's assumed values).
pub(super) fn props_v6(p: &abi::ncclNetProperties_v6_t) -> Properties {
    base_props!(p)
}

/// `ncclNetProperties_v7_t` → [`Properties`].
pub(super) fn props_v7(p: &abi::ncclNetProperties_v7_t) -> Properties {
    Properties {
        net_device_type: p.netDeviceType,
        net_device_version: p.netDeviceVersion,
        ..base_props!(p)
    }
}

/// `ncclNetProperties_v8_t` → [`Properties`].
pub(super) fn props_v8(p: &abi::ncclNetProperties_v8_t) -> Properties {
    Properties {
        reg_is_global: p.regIsGlobal != 0,
        net_device_type: p.netDeviceType,
        net_device_version: p.netDeviceVersion,
        ..base_props!(p)
    }
}

/// The fields of `ncclNetProperties_v11_t` (and later) → [`Properties`].
macro_rules! v11_props {
    ($p:expr) => {
        Properties {
            reg_is_global: $p.regIsGlobal != 0,
            force_flush: $p.forceFlush != 0,
            net_device_type: $p.netDeviceType,
            net_device_version: $p.netDeviceVersion,
            vdevs: vdevs($p.vProps.ndevs, &$p.vProps.devs),
            max_p2p_bytes: $p.maxP2pBytes,
            max_coll_bytes: $p.maxCollBytes,
            max_multi_request_size: $p.maxMultiRequestSize,
            ..base_props!($p)
        }
    };
}

/// `ncclNetProperties_v11_t` → [`Properties`].
pub(super) fn props_v11(p: &abi::ncclNetProperties_v11_t) -> Properties {
    v11_props!(p)
}

/// `ncclNetProperties_v12_t` → [`Properties`] (v11's and the rail and plane ids).
pub(super) fn props_v12(p: &abi::ncclNetProperties_v12_t) -> Properties {
    Properties {
        rail_id: p.railId,
        plane_id: p.planeId,
        ..v11_props!(p)
    }
}

/// `ncclNetProperties_v9_t` / `_v10_t` → [`Properties`].
pub(super) fn props_v9(p: &abi::ncclNetProperties_v9_t) -> Properties {
    Properties {
        reg_is_global: p.regIsGlobal != 0,
        force_flush: p.forceFlush != 0,
        net_device_type: p.netDeviceType,
        net_device_version: p.netDeviceVersion,
        vdevs: vdevs(p.vProps.ndevs, &p.vProps.devs),
        max_p2p_bytes: p.maxP2pBytes,
        max_coll_bytes: p.maxCollBytes,
        ..base_props!(p)
    }
}
