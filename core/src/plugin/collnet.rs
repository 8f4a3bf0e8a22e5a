//! The CollNet host adapter: one [`CollNetAdapter`] drives any `ncclCollNet_v6_t` …
//! `ncclCollNet_v12_t` (reference `docs/reference/nccl-plugin-abi.md` §2) with the
//! semantics of the newest version, the way NCCL 2.30.7's shims do
//! (`src/plugin/net/net_v*.cc`, `getNcclCollNet_vN` and `ncclCollNet_*`):
//!
//! * **loading** (`src/plugin/net.cc`, `ncclNetPluginLoad`): the table is searched in
//!   the *same library* as the net plugin, `ncclCollNetPlugin_v12` … `_v6`,
//!   independently of the net version found; its absence only means "no CollNet".
//! * **init** (`ncclNetPluginInit`): v11+ `init(&ctx, commId, logger)` runs per
//!   communicator and `finalize(ctx)` at its end; v6–v10 `init(logger)` runs once per
//!   process (the shims' `refCount`), later contexts are NULL. The first successful
//!   init is followed by `devices()`; an `init` failure, a `devices()` error or 0
//!   devices, or a NULL slot NCCL calls unchecked **disables CollNet for the
//!   process** (NCCL's `ncclCollNetPluginState = Disabled`) and never the net plugin.
//! * **function pointers** other than `name` and `init` are read only after the first
//!   successful `init` (plugins may fill their table there), as for the net adapter.
//! * **sizes**: v6/v7 `regMr` takes `int` (≥ 2^31 refused, `ncclCollNet_regMr` in
//!   `net_v6.cc`); v6–v8 `iallreduce` counts are `int` and NCCL refuses counts above
//!   `MAX_NET_SIZE` = 2^30 (`ncclCollNet_iallreduce`); `iflush` sizes and `test` sizes
//!   are `int` in every version.
//! * **SGE**: `iallgather`/`ireducescatter` exist from v8 (the v6/v7 shims set them
//!   NULL: unsupported). v8 takes `ncclNetSGE_v8_t` with a 32-bit size, and NCCL's v8
//!   shim accepts exactly one part of at most `MAX_COLLNET_SIZE` = 2^29 bytes;
//!   v9+ take the `size_t` SGE array as is. A NULL slot means unsupported
//!   (`src/graph/tuning.cc` then skips CollNet for AllGather/ReduceScatter).
//! * **properties** (`ncclCollNet_getProperties`): converted to the net adapter's
//!   [`Properties`]; v6–v8 CollNet devices are always reported as
//!   `NCCL_NET_DEVICE_HOST` and get NCCL's assumed limits (`maxCollBytes` 2^29).
//!   `maxCollBytes` outside `1 ..= NCCL_MAX_NET_SIZE_BYTES` is refused as NCCL's
//!   `sendProxySetup` does.
//!
//! The API is shaped for the transport to drive it as NCCL's
//! `src/transport/coll_net.cc` proxy does: `listen` on every head
//! (`ncclTransportCollNetSetup`, `src/transport.cc`: only the master of each node
//! sets up, one collComm per head index), `connect` with every head's handle
//! (then `close_listen`, as `sharedConnect` does after a successful connect),
//! `reg_mr` of the staging buffers,
//! `iallreduce` / `iallgather` / `ireducescatter` returning `Ok(None)` when the plugin
//! is busy (retry later), `test` until done, `iflush` on the receive side when the
//! NIC wrote GPU memory and the path needs a flush (`recvProxyProgress`,
//! `useGdr && needFlush`), and `dereg_mr` then `close_coll` at teardown
//! (`sendProxyFree`/`recvProxyFree`, `sharedFree`).

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::{Arc, Mutex, OnceLock};

use ferroccl_kernels::{DataType, RedOp};
use ferroccl_plugin_api::abi::{
    self, MAX_COLLNET_SIZE, MAX_NET_SIZE, NCCL_MAX_NET_SIZE_BYTES, ncclCollNet_v6_t, ncclCollNet_v7_t,
    ncclCollNet_v8_t, ncclCollNet_v9_t, ncclCollNet_v10_t, ncclCollNet_v11_t, ncclCollNet_v12_t, ncclDataType_t,
    ncclNetSGE_v8_t, ncclNetSGE_v9_t, ncclRedOp_t, ncclResult_t,
};

use super::adapter::{
    c_string, mr_ptr, net_error, props_v6, props_v7, props_v8, props_v9, props_v11, props_v12, ptr_type, to_int,
};
use super::library::PluginLibrary;
use super::logger;
use super::net::{NetError, NetHandle, NetResult, Properties, PtrType, RawComm, RawCtx, RawMr, RawRequest};

/// The plugin's CollNet vtable, copied out of the exported symbol, tagged by version.
#[derive(Clone, Copy)]
enum Table {
    V6(ncclCollNet_v6_t),
    V7(ncclCollNet_v7_t),
    V8(ncclCollNet_v8_t),
    V9(ncclCollNet_v9_t),
    V10(ncclCollNet_v10_t),
    V11(ncclCollNet_v11_t),
    V12(ncclCollNet_v12_t),
}

/// Runs `$body` with `$v` bound to the version's struct, for slots whose C type is
/// the same in every version.
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

/// Runs `$v8` on a v8 table and `$body` on a v9+ table (`size_t` SGEs), each
/// with the table bound to `$v`; `$older` for v6/v7 (no SGE collectives).
macro_rules! sge_tables {
    ($t:expr, $v:ident, v8 => $v8:expr, v9 => $body:expr, older => $older:expr) => {
        match $t {
            Table::V8($v) => $v8,
            Table::V9($v) => $body,
            Table::V10($v) => $body,
            Table::V11($v) => $body,
            Table::V12($v) => $body,
            Table::V6(_) | Table::V7(_) => $older,
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
    /// Copies the vtable out of the symbol.
    ///
    /// # Safety
    /// `sym` must point to a readable struct of the type of `version` (6 ..= 12).
    unsafe fn read(sym: *const c_void, version: u32) -> Table {
        // SAFETY: per the caller's guarantee; unaligned because nothing promises the
        // plugin's data symbol is aligned.
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

    fn name_ptr(&self) -> *const std::ffi::c_char {
        each!(self, t => t.name)
    }

    /// The first slot NCCL calls without a NULL check that is NULL.
    fn missing_required_slot(&self) -> Option<&'static str> {
        macro_rules! req {
            ($t:expr, $($f:ident),*) => {{
                $( if $t.$f.is_none() { return Some(stringify!($f)); } )*
            }};
        }
        each!(self, t => req!(t, init, devices, getProperties, listen, connect, reduceSupport, regMr, deregMr,
            iallreduce, iflush, test, closeColl, closeListen));
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
// SAFETY: the address of a data symbol in a library that is never unloaded once
// plugin code ran (the library is pinned before `init`); it is only read.
unsafe impl Send for SymAddr {}
// SAFETY: as above.
unsafe impl Sync for SymAddr {}

/// What a library's `ncclCollNetPlugin_vN` is, for logs and `ferroccl-info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollNetInfo {
    /// The vtable's `name` as read before `init`.
    pub name: String,
    /// The `ncclCollNetPlugin_vN` version found (6 … 12).
    pub version: u32,
    /// The library file (the net plugin's).
    pub path: PathBuf,
}

/// Whether CollNet can be used (NCCL's `ncclCollNetPluginState`, `src/plugin/net.cc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CollNetState {
    /// The table was found; no `init` ran yet.
    NotInitialized,
    /// `init` and `devices()` succeeded.
    Enabled {
        /// `devices()` of the first successful initialisation.
        devices: usize,
    },
    /// Disabled for the rest of the process; the reason names the failed call.
    Disabled(String),
}

impl std::fmt::Display for CollNetState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CollNetState::NotInitialized => f.write_str("not initialized"),
            CollNetState::Enabled { devices } => write!(f, "enabled, {devices} device(s)"),
            CollNetState::Disabled(why) => write!(f, "disabled: {why}"),
        }
    }
}

struct State {
    status: CollNetState,
    /// v6–v10: the one process-wide `init` ran and succeeded.
    shared_init_done: bool,
    /// Live contexts.
    contexts: usize,
}

/// One scatter-gather element of `iallgather` / `ireducescatter` (`ncclNetSGE`).
#[derive(Debug, Clone, Copy)]
pub struct Sge {
    /// Start of the part.
    pub data: *mut u8,
    /// Bytes in the part.
    pub size: usize,
    /// Registration covering the part, if any.
    pub mr: Option<RawMr>,
}

/// Number of reduction ops in NCCL's CollNet support matrix (sum, prod, max, min).
pub const COLLNET_NUM_OPS: usize = 4;
/// Number of data types in NCCL's CollNet support matrix (`ncclNumTypes`).
pub const COLLNET_NUM_TYPES: usize = 12;

/// One rank's `reduceSupport` answers, `[op][type]`, encoded as NCCL's
/// `ncclCollNetSetup` (`src/transport/coll_net.cc`) exchanges them: 0 = no answer
/// (a rank that is not a CollNet head), `1 << 0` = unsupported, `1 << 1` = supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SupportBits(pub [[u8; COLLNET_NUM_TYPES]; COLLNET_NUM_OPS]);

impl SupportBits {
    /// Bytes for the bootstrap all-gather: `[op][type]`, op-major, 48 bytes.
    pub fn to_bytes(&self) -> [u8; COLLNET_NUM_OPS * COLLNET_NUM_TYPES] {
        let mut out = [0u8; COLLNET_NUM_OPS * COLLNET_NUM_TYPES];
        for (op, row) in self.0.iter().enumerate() {
            out[op * COLLNET_NUM_TYPES..(op + 1) * COLLNET_NUM_TYPES].copy_from_slice(row);
        }
        out
    }

    /// Parses [`SupportBits::to_bytes`] output. Errors name the expected length and
    /// the first entry that is not 0, 1 or 2.
    pub fn from_bytes(b: &[u8]) -> Result<SupportBits, String> {
        if b.len() != COLLNET_NUM_OPS * COLLNET_NUM_TYPES {
            return Err(format!(
                "CollNet support bits: expected {} bytes, found {}",
                COLLNET_NUM_OPS * COLLNET_NUM_TYPES,
                b.len()
            ));
        }
        let mut out = SupportBits::default();
        for (i, &v) in b.iter().enumerate() {
            if v > 2 {
                return Err(format!(
                    "CollNet support bits: entry {i} (op {}, type {}) is {v}, expected 0, 1 or 2",
                    i / COLLNET_NUM_TYPES,
                    i % COLLNET_NUM_TYPES
                ));
            }
            out.0[i / COLLNET_NUM_TYPES][i % COLLNET_NUM_TYPES] = v;
        }
        Ok(out)
    }
}

/// The communicator's `collNetSupportMatrix[op][type]` (`src/transport/coll_net.cc`,
/// `ncclCollNetSetup`): a pair is supported when some rank claims it and no rank
/// refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SupportMatrix(pub [[bool; COLLNET_NUM_TYPES]; COLLNET_NUM_OPS]);

impl SupportMatrix {
    /// Merges every rank's [`SupportBits`] as NCCL does (`accum == 1 << 1`).
    pub fn merge(ranks: &[SupportBits]) -> SupportMatrix {
        let mut m = SupportMatrix::default();
        for op in 0..COLLNET_NUM_OPS {
            for ty in 0..COLLNET_NUM_TYPES {
                let accum = ranks.iter().fold(0u8, |a, r| a | r.0[op][ty]);
                m.0[op][ty] = accum == 1 << 1;
            }
        }
        m
    }

    /// The entry for a raw `(op, type)`; `false` outside the matrix.
    pub fn get(&self, op: ncclRedOp_t, ty: ncclDataType_t) -> bool {
        let (Ok(o), Ok(t)) = (usize::try_from(op.0), usize::try_from(ty.0)) else {
            return false;
        };
        self.0.get(o).and_then(|r| r.get(t)).copied().unwrap_or(false)
    }

    /// Whether a collective of `dtype` with `op` may use CollNet
    /// (`ncclGetCollNetSupport`, `src/enqueue.cc`): `Avg` and PreMulSum are reduced
    /// as a sum by the network (the scaling runs on the GPU), so they look up `Sum`.
    pub fn supports(&self, dtype: DataType, op: &RedOp) -> bool {
        let net_op = match op {
            RedOp::Sum | RedOp::Avg | RedOp::PreMulSum(_) => ncclRedOp_t::ncclSum,
            RedOp::Prod => ncclRedOp_t::ncclProd,
            RedOp::Max => ncclRedOp_t::ncclMax,
            RedOp::Min => ncclRedOp_t::ncclMin,
        };
        self.get(net_op, ncclDataType_t(dtype as i32))
    }
}

/// Drives one `ncclCollNetPlugin_vN` symbol with newest-version semantics (see the
/// module docs). Shared by every communicator of the process.
pub struct CollNetAdapter {
    lib: Arc<PluginLibrary>,
    sym: SymAddr,
    info: CollNetInfo,
    /// Copied before `init`: only `name` and `init` are used from it.
    pre: Table,
    /// Copied after the first successful `init`.
    table: OnceLock<Table>,
    state: Mutex<State>,
}

// SAFETY: the tables hold plugin function pointers and C strings, which NCCL's
// contract allows to be used from any thread; mutable state is behind a Mutex.
unsafe impl Send for CollNetAdapter {}
// SAFETY: as above.
unsafe impl Sync for CollNetAdapter {}

impl std::fmt::Debug for CollNetAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollNetAdapter")
            .field("info", &self.info)
            .field("state", &self.state())
            .finish()
    }
}

impl CollNetAdapter {
    /// Wraps the vtable at `sym` (the address of `ncclCollNetPlugin_v<version>` in
    /// `lib`, the net plugin's library). Logs NCCL's `NET/Plugin: Loaded collnet
    /// plugin <name> (v<N>)` (`getNcclCollNet_vN`).
    ///
    /// # Safety
    /// `sym` must be the address of a `ncclCollNet_v<version>_t` exported by `lib`,
    /// and `version` in 6 ..= 12.
    pub(crate) unsafe fn new(lib: Arc<PluginLibrary>, sym: *const c_void, version: u32, path: PathBuf) -> Self {
        // SAFETY: per the caller's guarantee.
        let pre = unsafe { Table::read(sym, version) };
        let name = c_string(pre.name_ptr()).unwrap_or_default();
        tracing::info!(target: "ferroccl::plugin", "NET/Plugin: Loaded collnet plugin {name} (v{version})");
        CollNetAdapter {
            lib,
            sym: SymAddr(sym),
            info: CollNetInfo { name, version, path },
            pre,
            table: OnceLock::new(),
            state: Mutex::new(State {
                status: CollNetState::NotInitialized,
                shared_init_done: false,
                contexts: 0,
            }),
        }
    }

    /// Name, version and file.
    pub fn info(&self) -> &CollNetInfo {
        &self.info
    }

    /// Current state (enabled after a successful first init, disabled for good after a failure).
    pub fn state(&self) -> CollNetState {
        self.lock().status.clone()
    }

    /// Whether CollNet is usable now (initialised at least once and not disabled).
    pub fn is_enabled(&self) -> bool {
        matches!(self.lock().status, CollNetState::Enabled { .. })
    }

    /// Live contexts (those `init_ctx` gave and `finalize_ctx` did not take back).
    pub fn live_contexts(&self) -> usize {
        self.lock().contexts
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn err(&self, call: &str, r: ncclResult_t) -> NetError {
        net_error(
            r.0,
            format!(
                "CollNet plugin '{}' (ncclCollNet v{}) {call} returned {} ({})",
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
            "CollNet plugin '{}' (ncclCollNet v{}) has a NULL '{slot}' function pointer",
            self.info.name, self.info.version
        ))
    }

    fn t(&self) -> NetResult<&Table> {
        self.table.get().ok_or_else(|| {
            NetError::Internal(format!(
                "CollNet plugin '{}': called before a successful init (use init_ctx first)",
                self.info.name
            ))
        })
    }

    fn capture_table(&self) -> &Table {
        self.table.get_or_init(|| {
            // SAFETY: `sym` is this version's vtable (constructor contract).
            unsafe { Table::read(self.sym.0, self.info.version) }
        })
    }

    fn disable(&self, st: &mut State, why: String) -> NetError {
        tracing::info!(target: "ferroccl::plugin",
            "NET/Plugin: CollNet plugin '{}' (ncclCollNet v{}) disabled: {why}", self.info.name, self.info.version);
        st.status = CollNetState::Disabled(why.clone());
        NetError::InvalidUsage(format!("CollNet disabled: {why}"))
    }

    /// Opens a per-communicator context (`ncclNetPluginInit`, `src/plugin/net.cc`):
    /// v11+ call `init(&ctx, comm_id, logger)` every time; v6–v10 call `init(logger)`
    /// on the first call only and return a NULL context. The first successful call
    /// also runs `devices()`. Every failure disables CollNet for the process and
    /// returns `InvalidUsage` naming the failed call; a disabled adapter refuses at once.
    pub fn init_ctx(&self, comm_id: u64) -> NetResult<RawCtx> {
        let log = Some(logger::nccl_logger());
        // From here on plugin code runs: never dlclose this library again.
        self.lib.pin();
        let mut st = self.lock();
        if let CollNetState::Disabled(why) = &st.status {
            return Err(NetError::InvalidUsage(format!(
                "CollNet plugin '{}' is disabled: {why}",
                self.info.name
            )));
        }
        let ctx = match self.info.version {
            6..=10 => {
                if !st.shared_init_done {
                    // SAFETY: the pre-v11 init(logger) signature.
                    let r = unsafe {
                        match &self.pre {
                            Table::V6(t) => t.init.map(|f| f(log)),
                            Table::V7(t) => t.init.map(|f| f(log)),
                            Table::V8(t) => t.init.map(|f| f(log)),
                            Table::V9(t) => t.init.map(|f| f(log)),
                            Table::V10(t) => t.init.map(|f| f(log)),
                            _ => None,
                        }
                    };
                    match r {
                        None => return Err(self.disable(&mut st, "its init slot is NULL".into())),
                        Some(r) if !r.is_success() => {
                            let e = self.err("init", r);
                            return Err(self.disable(&mut st, e.to_string()));
                        }
                        Some(_) => {}
                    }
                    st.shared_init_done = true;
                    self.capture_table();
                }
                RawCtx(null_mut())
            }
            _ => {
                let t = *self.table.get().unwrap_or(&self.pre);
                let mut ctx: *mut c_void = null_mut();
                // SAFETY: the v11/v12 init(void** ctx, uint64_t commId, logger) signature.
                let r = unsafe {
                    match &t {
                        Table::V11(t) => t.init.map(|f| f(&mut ctx, comm_id, log)),
                        Table::V12(t) => t.init.map(|f| f(&mut ctx, comm_id, log)),
                        _ => None,
                    }
                };
                match r {
                    None => return Err(self.disable(&mut st, "its init slot is NULL".into())),
                    Some(r) if !r.is_success() => {
                        let e = self.err("init", r);
                        return Err(self.disable(&mut st, e.to_string()));
                    }
                    Some(_) => {}
                }
                self.capture_table();
                RawCtx(ctx)
            }
        };
        let table = *self.capture_table();
        let mut failure = table
            .missing_required_slot()
            .map(|s| format!("its '{s}' function pointer is NULL after init"));
        if failure.is_none() && st.status == CollNetState::NotInitialized {
            // NCCL detects devices only the first time (ncclNetPluginInit).
            match self.devices() {
                Ok(0) => failure = Some("devices() reported 0 devices".into()),
                Ok(n) => {
                    st.status = CollNetState::Enabled { devices: n };
                    tracing::info!(target: "ferroccl::plugin",
                        "NET/Plugin: Initialized CollNet plugin {} (ncclCollNet v{}), {n} device(s)",
                        self.info.name, self.info.version);
                }
                Err(e) => failure = Some(e.to_string()),
            }
        }
        if let Some(why) = failure {
            // The context of this init is given back before disabling (NCCL leaves it
            // to the plugin; closing it is what the plugin's finalize is for).
            if let Some(f) = finalize_slot(&table)
                && !ctx.0.is_null()
            {
                // SAFETY: `ctx` came from this plugin's init.
                let _ = unsafe { f(ctx.0) };
            }
            return Err(self.disable(&mut st, why));
        }
        st.contexts += 1;
        Ok(ctx)
    }

    /// Gives back a context from [`CollNetAdapter::init_ctx`] (`finalize(ctx)` for
    /// v11+, as `ncclNetPluginFinalize` does; for v6–v10 only the count drops, as in
    /// the shims' `ncclCollNet_finalize`).
    pub fn finalize_ctx(&self, ctx: RawCtx) -> NetResult<()> {
        let mut st = self.lock();
        st.contexts = st.contexts.saturating_sub(1);
        let r = match self.t()? {
            // SAFETY: `ctx` came from this plugin's init.
            Table::V11(t) => unsafe { slot!(self, t, finalize)(ctx.0) },
            // SAFETY: as above.
            Table::V12(t) => unsafe { slot!(self, t, finalize)(ctx.0) },
            _ => return Ok(()),
        };
        self.check("finalize", r)
    }

    /// `devices()`.
    pub fn devices(&self) -> NetResult<usize> {
        let mut n: c_int = 0;
        // SAFETY: `devices(int*)` in every version.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, devices)(&mut n) });
        self.check("devices", r)?;
        usize::try_from(n).map_err(|_| {
            NetError::Internal(format!(
                "CollNet plugin '{}' devices() reported {n} (expected a count ≥ 0)",
                self.info.name
            ))
        })
    }

    /// `getProperties(dev)` in the common layout (see the module docs). Errors: the
    /// plugin's code, or `Internal` when `maxCollBytes` is outside
    /// `1 ..= NCCL_MAX_NET_SIZE_BYTES` (NCCL's `sendProxySetup` check).
    pub fn properties(&self, dev: usize) -> NetResult<Properties> {
        let d = dev_index(dev)?;
        let call = "getProperties";
        // SAFETY: each arm passes the properties struct of the table's version.
        let p = unsafe {
            match self.t()? {
                Table::V6(t) => {
                    let mut p = abi::ncclNetProperties_v6_t::zeroed();
                    self.check(call, slot!(self, t, getProperties)(d, &mut p))?;
                    host_only(props_v6(&p))
                }
                Table::V7(t) => {
                    let mut p = abi::ncclNetProperties_v7_t::zeroed();
                    self.check(call, slot!(self, t, getProperties)(d, &mut p))?;
                    host_only(props_v7(&p))
                }
                Table::V8(t) => {
                    let mut p = abi::ncclNetProperties_v8_t::zeroed();
                    self.check(call, slot!(self, t, getProperties)(d, &mut p))?;
                    host_only(props_v8(&p))
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
        if p.max_coll_bytes == 0 || p.max_coll_bytes > NCCL_MAX_NET_SIZE_BYTES {
            return Err(NetError::Internal(format!(
                "CollNet plugin '{}' device {dev}: maxCollBytes {} is outside 1 ..= {NCCL_MAX_NET_SIZE_BYTES}",
                self.info.name, p.max_coll_bytes
            )));
        }
        Ok(p)
    }

    /// `listen(ctx, dev, handle, &listenComm)` (v6–v10 take no `ctx`): fills the
    /// 128-byte `handle` every rank sends to every other; returns the listenComm
    /// (never NULL on success).
    pub fn listen(&self, ctx: RawCtx, dev: usize, handle: &mut NetHandle) -> NetResult<RawComm> {
        let d = dev_index(dev)?;
        let h = handle.as_mut_ptr().cast::<c_void>();
        let mut lc: *mut c_void = null_mut();
        // SAFETY: `handle` is 128 bytes; `lc` outlives the call.
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
                "CollNet plugin '{}' listen succeeded but returned a NULL listenComm",
                self.info.name
            )));
        }
        Ok(RawComm(lc))
    }

    /// `connect(handles[], nranks, rank, listenComm, &collComm)`: `handles[r]` is rank
    /// r's listen handle (NCCL's `sharedConnect`, `src/transport/coll_net.cc`). The
    /// call is collective and blocking. On success NCCL closes the listenComm at once
    /// ([`CollNetAdapter::close_listen`]). Errors: `rank` ≥ `handles.len()`, the
    /// plugin's code, or a NULL collComm on success (NCCL treats that as a failed
    /// CollNet setup).
    pub fn connect(&self, handles: &[NetHandle], rank: usize, listen: RawComm) -> NetResult<RawComm> {
        if rank >= handles.len() {
            return Err(NetError::InvalidArgument(format!(
                "CollNet connect: rank {rank} with {} handles (expected rank < nranks)",
                handles.len()
            )));
        }
        let nranks = c_int::try_from(handles.len())
            .map_err(|_| NetError::InvalidArgument(format!("CollNet connect of {} ranks", handles.len())))?;
        let mut copies: Vec<NetHandle> = handles.to_vec();
        let mut ptrs: Vec<*mut c_void> = copies.iter_mut().map(|h| h.as_mut_ptr().cast()).collect();
        let mut cc: *mut c_void = null_mut();
        // SAFETY: `connect` has the same signature in every version; `ptrs` has
        // `nranks` entries pointing into `copies`, both outlive the call.
        let r = each!(self.t()?, t => unsafe {
            slot!(self, t, connect)(ptrs.as_mut_ptr(), nranks, rank as c_int, listen.0, &mut cc)
        });
        self.check("connect", r)?;
        if cc.is_null() {
            return Err(NetError::Internal(format!(
                "CollNet plugin '{}' connect succeeded but returned a NULL collComm",
                self.info.name
            )));
        }
        Ok(RawComm(cc))
    }

    /// `reduceSupport(dataType, redOp, &supported)`.
    pub fn reduce_support(&self, dtype: ncclDataType_t, op: ncclRedOp_t) -> NetResult<bool> {
        let mut s: c_int = 0;
        // SAFETY: same signature in every version; `s` outlives the call.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, reduceSupport)(dtype, op, &mut s) });
        self.check("reduceSupport", r)?;
        Ok(s != 0)
    }

    /// This rank's answers for every `(op, type)` of NCCL's matrix (4 ops × 12
    /// types), as a CollNet head rank computes them in `ncclCollNetSetup`. Merge all
    /// ranks' bits with [`SupportMatrix::merge`].
    pub fn support_bits(&self) -> NetResult<SupportBits> {
        let mut b = SupportBits::default();
        for (op, row) in b.0.iter_mut().enumerate() {
            for (ty, cell) in row.iter_mut().enumerate() {
                let ok = self.reduce_support(ncclDataType_t(ty as i32), ncclRedOp_t(op as i32))?;
                *cell = 1 << u8::from(ok);
            }
        }
        Ok(b)
    }

    /// `regMr` on a collComm (v6/v7: `int` size, sizes ≥ 2^31 → `InvalidArgument`).
    pub fn reg_mr(&self, coll: RawComm, data: *mut u8, size: usize, ty: PtrType) -> NetResult<RawMr> {
        let mut mh: *mut c_void = null_mut();
        let (p, ty) = (data.cast::<c_void>(), ptr_type(ty));
        let small = |s| to_int(s, "CollNet regMr size", i32::MAX as usize);
        // SAFETY: per-version regMr signatures; `mh` outlives the call.
        let r = unsafe {
            match self.t()? {
                Table::V6(t) => slot!(self, t, regMr)(coll.0, p, small(size)?, ty, &mut mh),
                Table::V7(t) => slot!(self, t, regMr)(coll.0, p, small(size)?, ty, &mut mh),
                Table::V8(t) => slot!(self, t, regMr)(coll.0, p, size, ty, &mut mh),
                Table::V9(t) => slot!(self, t, regMr)(coll.0, p, size, ty, &mut mh),
                Table::V10(t) => slot!(self, t, regMr)(coll.0, p, size, ty, &mut mh),
                Table::V11(t) => slot!(self, t, regMr)(coll.0, p, size, ty, &mut mh),
                Table::V12(t) => slot!(self, t, regMr)(coll.0, p, size, ty, &mut mh),
            }
        };
        self.check("regMr", r)?;
        Ok(RawMr(mh))
    }

    /// Whether `regMrDmaBuf` is present.
    pub fn has_dmabuf(&self) -> bool {
        self.t()
            .map(|t| each!(t, t => t.regMrDmaBuf.is_some()))
            .unwrap_or(false)
    }

    /// `regMrDmaBuf` (a NULL slot → `InvalidUsage`).
    pub fn reg_mr_dmabuf(
        &self,
        coll: RawComm,
        data: *mut u8,
        size: usize,
        ty: PtrType,
        offset: u64,
        fd: i32,
    ) -> NetResult<RawMr> {
        let Some(f) = each!(self.t()?, t => t.regMrDmaBuf) else {
            return Err(NetError::InvalidUsage(format!(
                "CollNet plugin '{}' has no regMrDmaBuf (slot is NULL)",
                self.info.name
            )));
        };
        let mut mh: *mut c_void = null_mut();
        // SAFETY: same signature in every version; `mh` outlives the call.
        let r = unsafe { f(coll.0, data.cast(), size, ptr_type(ty), offset, fd, &mut mh) };
        self.check("regMrDmaBuf", r)?;
        Ok(RawMr(mh))
    }

    /// `deregMr`.
    pub fn dereg_mr(&self, coll: RawComm, mr: RawMr) -> NetResult<()> {
        // SAFETY: same signature in every version.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, deregMr)(coll.0, mr.0) });
        self.check("deregMr", r)
    }

    /// `iallreduce` of `count` elements of `dtype` with `op` from `send` into `recv`.
    /// `Ok(None)`: the plugin is busy, post again later (NCCL's proxy retries).
    /// v6–v8: `count` above 2^30 → `InvalidArgument` (NCCL's shims refuse it).
    #[allow(clippy::too_many_arguments)]
    pub fn iallreduce(
        &self,
        coll: RawComm,
        send: *mut u8,
        recv: *mut u8,
        count: usize,
        dtype: ncclDataType_t,
        op: ncclRedOp_t,
        send_mr: Option<RawMr>,
        recv_mr: Option<RawMr>,
    ) -> NetResult<Option<RawRequest>> {
        let (s, r_, sm, rm) = (
            send.cast::<c_void>(),
            recv.cast::<c_void>(),
            mr_ptr(send_mr),
            mr_ptr(recv_mr),
        );
        let mut req: *mut c_void = null_mut();
        let small = |c| to_int(c, "CollNet iallreduce count", MAX_NET_SIZE);
        // SAFETY: per-version iallreduce signatures; `req` outlives the call.
        let r = unsafe {
            match self.t()? {
                Table::V6(t) => slot!(self, t, iallreduce)(coll.0, s, r_, small(count)?, dtype, op, sm, rm, &mut req),
                Table::V7(t) => slot!(self, t, iallreduce)(coll.0, s, r_, small(count)?, dtype, op, sm, rm, &mut req),
                Table::V8(t) => slot!(self, t, iallreduce)(coll.0, s, r_, small(count)?, dtype, op, sm, rm, &mut req),
                Table::V9(t) => slot!(self, t, iallreduce)(coll.0, s, r_, count, dtype, op, sm, rm, &mut req),
                Table::V10(t) => slot!(self, t, iallreduce)(coll.0, s, r_, count, dtype, op, sm, rm, &mut req),
                Table::V11(t) => slot!(self, t, iallreduce)(coll.0, s, r_, count, dtype, op, sm, rm, &mut req),
                Table::V12(t) => slot!(self, t, iallreduce)(coll.0, s, r_, count, dtype, op, sm, rm, &mut req),
            }
        };
        self.check("iallreduce", r)?;
        Ok((!req.is_null()).then_some(RawRequest(req)))
    }

    /// Whether `iallgather` is available (v8+ with a non-NULL slot).
    pub fn has_iallgather(&self) -> bool {
        match self.t() {
            Ok(Table::V8(t)) => t.iallgather.is_some(),
            Ok(Table::V9(t)) => t.iallgather.is_some(),
            Ok(Table::V10(t)) => t.iallgather.is_some(),
            Ok(Table::V11(t)) => t.iallgather.is_some(),
            Ok(Table::V12(t)) => t.iallgather.is_some(),
            _ => false,
        }
    }

    /// Whether `ireducescatter` is available (v8+ with a non-NULL slot).
    pub fn has_ireducescatter(&self) -> bool {
        match self.t() {
            Ok(Table::V8(t)) => t.ireducescatter.is_some(),
            Ok(Table::V9(t)) => t.ireducescatter.is_some(),
            Ok(Table::V10(t)) => t.ireducescatter.is_some(),
            Ok(Table::V11(t)) => t.ireducescatter.is_some(),
            Ok(Table::V12(t)) => t.ireducescatter.is_some(),
            _ => false,
        }
    }

    fn unsupported(&self, call: &str) -> NetError {
        NetError::InvalidUsage(format!(
            "CollNet plugin '{}' (ncclCollNet v{}) has no {call} (NULL slot, or a version before v8)",
            self.info.name, self.info.version
        ))
    }

    /// `iallgather(collComm, sendData, nRecvParts, recvParts, bytesPerRank,
    /// windowOffset, windowBytes, sendMhandle, &request)`: receives the window
    /// `[window_offset, window_offset + window_bytes)` of the gathered result (every
    /// rank contributes `bytes_per_rank`) into `recv_parts`. `Ok(None)`: busy, retry.
    /// Errors: no parts; v6/v7 or a NULL slot (`InvalidUsage`); v8 with more than one
    /// part or a part above 2^29 bytes (`InvalidArgument`, NCCL's v8 shim).
    #[allow(clippy::too_many_arguments)]
    pub fn iallgather(
        &self,
        coll: RawComm,
        send: *mut u8,
        send_mr: Option<RawMr>,
        recv_parts: &[Sge],
        bytes_per_rank: usize,
        window_offset: usize,
        window_bytes: usize,
    ) -> NetResult<Option<RawRequest>> {
        let n = parts_count("iallgather", recv_parts)?;
        let (s, sm) = (send.cast::<c_void>(), mr_ptr(send_mr));
        let mut req: *mut c_void = null_mut();
        let (b, o, w) = (bytes_per_rank, window_offset, window_bytes);
        // SAFETY: per-version iallgather signatures; the SGE arrays have `n` entries
        // and outlive the call; `req` outlives the call.
        let r = unsafe {
            sge_tables!(self.t()?, t,
                v8 => {
                    let f = t.iallgather.ok_or_else(|| self.unsupported("iallgather"))?;
                    let mut p = sge_v8("iallgather", recv_parts)?;
                    f(coll.0, s, n, &mut p, b, o, w, sm, &mut req)
                },
                v9 => {
                    let f = t.iallgather.ok_or_else(|| self.unsupported("iallgather"))?;
                    f(coll.0, s, n, sge_v9(recv_parts).as_mut_ptr(), b, o, w, sm, &mut req)
                },
                older => return Err(self.unsupported("iallgather"))
            )
        };
        self.check("iallgather", r)?;
        Ok((!req.is_null()).then_some(RawRequest(req)))
    }

    /// `ireducescatter(collComm, nSendParts, sendParts, recvData, bytesPerRank,
    /// windowOffset, windowBytes, dataType, redOp, recvMhandle, &request)`: reduces
    /// the window of every rank's input given by `send_parts` and receives this
    /// rank's share into `recv`. Same errors as [`CollNetAdapter::iallgather`].
    #[allow(clippy::too_many_arguments)]
    pub fn ireducescatter(
        &self,
        coll: RawComm,
        send_parts: &[Sge],
        recv: *mut u8,
        recv_mr: Option<RawMr>,
        bytes_per_rank: usize,
        window_offset: usize,
        window_bytes: usize,
        dtype: ncclDataType_t,
        op: ncclRedOp_t,
    ) -> NetResult<Option<RawRequest>> {
        let n = parts_count("ireducescatter", send_parts)?;
        let (rv, rm) = (recv.cast::<c_void>(), mr_ptr(recv_mr));
        let mut req: *mut c_void = null_mut();
        let (b, o, w) = (bytes_per_rank, window_offset, window_bytes);
        // SAFETY: per-version ireducescatter signatures; the SGE arrays have `n`
        // entries and outlive the call; `req` outlives the call.
        let r = unsafe {
            sge_tables!(self.t()?, t,
                v8 => {
                    let f = t.ireducescatter.ok_or_else(|| self.unsupported("ireducescatter"))?;
                    let mut p = sge_v8("ireducescatter", send_parts)?;
                    f(coll.0, n, &mut p, rv, b, o, w, dtype, op, rm, &mut req)
                },
                v9 => {
                    let f = t.ireducescatter.ok_or_else(|| self.unsupported("ireducescatter"))?;
                    let mut p = sge_v9(send_parts);
                    f(coll.0, n, p.as_mut_ptr(), rv, b, o, w, dtype, op, rm, &mut req)
                },
                older => return Err(self.unsupported("ireducescatter"))
            )
        };
        self.check("ireducescatter", r)?;
        Ok((!req.is_null()).then_some(RawRequest(req)))
    }

    /// `iflush(collComm, data, size, mhandle, &request)` (`int` size in every
    /// version); `Ok(None)` when the plugin has nothing to flush.
    pub fn iflush(
        &self,
        coll: RawComm,
        data: *mut u8,
        size: usize,
        mr: Option<RawMr>,
    ) -> NetResult<Option<RawRequest>> {
        let sz = to_int(size, "CollNet iflush size", i32::MAX as usize)?;
        let mut req: *mut c_void = null_mut();
        // SAFETY: same signature in every version; `req` outlives the call.
        let r = each!(self.t()?, t => unsafe {
            slot!(self, t, iflush)(coll.0, data.cast(), sz, mr_ptr(mr), &mut req)
        });
        self.check("iflush", r)?;
        Ok((!req.is_null()).then_some(RawRequest(req)))
    }

    /// `test(request, &done, &size)`: `Ok(Some(size))` when done (bytes the
    /// operation reports), `Ok(None)` while in flight. A negative size is `Internal`.
    pub fn test(&self, req: RawRequest) -> NetResult<Option<usize>> {
        let (mut done, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: `test(void*, int*, int*)` in every version.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, test)(req.0, &mut done, &mut size) });
        self.check("test", r)?;
        if done == 0 {
            return Ok(None);
        }
        usize::try_from(size).map(Some).map_err(|_| {
            NetError::Internal(format!(
                "CollNet plugin '{}' test reported a negative size {size}",
                self.info.name
            ))
        })
    }

    /// `closeColl`.
    pub fn close_coll(&self, coll: RawComm) -> NetResult<()> {
        // SAFETY: same signature in every version.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, closeColl)(coll.0) });
        self.check("closeColl", r)
    }

    /// `closeListen`.
    pub fn close_listen(&self, listen: RawComm) -> NetResult<()> {
        // SAFETY: same signature in every version.
        let r = each!(self.t()?, t => unsafe { slot!(self, t, closeListen)(listen.0) });
        self.check("closeListen", r)
    }
}

/// The `finalize` slot of a v11/v12 table (the only versions that have one).
fn finalize_slot(t: &Table) -> Option<unsafe extern "C" fn(*mut c_void) -> ncclResult_t> {
    match t {
        Table::V11(x) => x.finalize,
        Table::V12(x) => x.finalize,
        _ => None,
    }
}

/// A device index as the `int` every version takes.
fn dev_index(dev: usize) -> NetResult<c_int> {
    c_int::try_from(dev).map_err(|_| NetError::InvalidArgument(format!("device index {dev} does not fit a C int")))
}

/// v6–v8 CollNet properties as NCCL's shims report them (`ncclCollNet_getProperties`).
fn host_only(mut p: Properties) -> Properties {
    p.net_device_type = abi::NCCL_NET_DEVICE_HOST;
    p.net_device_version = abi::NCCL_NET_DEVICE_INVALID_VERSION;
    p.max_p2p_bytes = MAX_NET_SIZE;
    p.max_coll_bytes = MAX_COLLNET_SIZE;
    p
}

fn parts_count(call: &str, parts: &[Sge]) -> NetResult<c_int> {
    c_int::try_from(parts.len()).ok().filter(|&n| n >= 1).ok_or_else(|| {
        NetError::InvalidArgument(format!("CollNet {call} with {} SGE parts (expected ≥ 1)", parts.len()))
    })
}

/// NCCL's v8 shim: exactly one part of at most `MAX_COLLNET_SIZE` bytes, narrowed to `uint32_t`.
fn sge_v8(call: &str, parts: &[Sge]) -> NetResult<ncclNetSGE_v8_t> {
    let [p] = parts else {
        return Err(NetError::InvalidArgument(format!(
            "CollNet {call} with {} SGE parts: ncclCollNet v8 takes exactly 1",
            parts.len()
        )));
    };
    if p.size > MAX_COLLNET_SIZE {
        return Err(NetError::InvalidArgument(format!(
            "CollNet {call} SGE of {} bytes exceeds ncclCollNet v8's limit of {MAX_COLLNET_SIZE} bytes",
            p.size
        )));
    }
    Ok(ncclNetSGE_v8_t {
        mhandle: mr_ptr(p.mr),
        address: p.data.cast(),
        size: p.size as u32,
    })
}

fn sge_v9(parts: &[Sge]) -> Vec<ncclNetSGE_v9_t> {
    parts
        .iter()
        .map(|p| ncclNetSGE_v9_t {
            mhandle: mr_ptr(p.mr),
            address: p.data.cast(),
            size: p.size,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_needs_a_claim_and_no_refusal() {
        let mut a = SupportBits::default();
        let mut b = SupportBits::default();
        a.0[0][7] = 2; // rank a: sum/float32 supported
        b.0[0][7] = 0; // rank b: not a head
        a.0[2][2] = 2;
        b.0[2][2] = 1; // max/int32: refused by b
        let m = SupportMatrix::merge(&[a, b]);
        assert!(m.get(ncclRedOp_t::ncclSum, ncclDataType_t::ncclFloat32));
        assert!(!m.get(ncclRedOp_t::ncclMax, ncclDataType_t::ncclInt32));
        assert!(!m.get(ncclRedOp_t::ncclProd, ncclDataType_t::ncclFloat32));
        assert!(m.supports(DataType::Float32, &RedOp::Avg));
        assert!(!m.get(ncclRedOp_t(7), ncclDataType_t::ncclFloat32));
        let bytes = a.to_bytes();
        assert_eq!(SupportBits::from_bytes(&bytes).unwrap(), a);
        assert!(
            SupportBits::from_bytes(&bytes[..47])
                .unwrap_err()
                .contains("expected 48 bytes, found 47")
        );
        let mut bad = bytes;
        bad[13] = 9;
        assert!(
            SupportBits::from_bytes(&bad)
                .unwrap_err()
                .contains("entry 13 (op 1, type 1) is 9")
        );
    }
}
