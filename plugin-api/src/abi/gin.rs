//! `ncclGin_v13_t` / `ncclGin_v14_t`: the GPU-initiated networking (GIN) plugin
//! tables, as far as a host inspects them (ferroccl hosts no GIN device path):
//! every slot at its offset, the host-side ones (`name`, `init`, `devices`,
//! `getGinProperties`, `getProperties`, `finalize`) typed, the rest opaque
//! function pointers.
//!
//! Sources: NCCL 2.30.7 `src/include/plugin/gin/gin_v13.h`, `gin_v14.h` (layouts);
//! `src/plugin/gin.cc` (`ncclGinPluginLoad`: `ncclGinPlugin_v14` first, then
//! `_v13`; `ncclGinPluginInit`: `init(&ginContext, commHash, logger)`, then
//! `devices`, `ndev <= 0` disabling the plugin; `ncclGinPluginAssignToComm`:
//! `getProperties(0, …)` into an `ncclNetProperties_t`, whose `netDeviceType` is
//! the GIN type); `src/plugin/gin/gin_v13.cc`, `gin_v14.cc` (symbol names).
//! NCCL looks for a GIN table in `NCCL_GIN_PLUGIN` (default `libnccl-gin.so`) and
//! in the net plugin's library (`initPluginLibsOnceFunc`).

use std::ffi::{CStr, c_char, c_int, c_void};

use super::common::{abi_struct, ncclDebugLogger_t, ncclResult_t};
use super::net::{fnp, ncclNetProperties_v12_t};

/// An opaque slot: a function pointer the host never calls.
pub type GinOpaqueSlot = Option<unsafe extern "C" fn()>;

abi_struct! {
    /// `ncclGinConfig_v13_t`: `createContext`'s configuration (v13 and v14).
    #[derive(Debug)]
    pub struct ncclGinConfig_v13_t, size 20 {
        nSignals: c_int = 0,
        nCounters: c_int = 4,
        nContexts: c_int = 8,
        queueDepth: c_int = 12,
        trafficClass: c_int = 16,
    }
}

abi_struct! {
    /// `ncclGinProperties_v14_t` (`getGinProperties`, v14).
    #[derive(Debug)]
    pub struct ncclGinProperties_v14_t, size 2 {
        supportsStrongSignals: bool = 0,
        supportsVASignals: bool = 1,
    }
}

abi_struct! {
    /// `ncclGin_v13_t` (symbol `ncclGinPlugin_v13`): 21 slots.
    #[derive(Debug)]
    pub struct ncclGin_v13_t, size 168 {
        name: *const c_char = 0,
        init: fnp!(ctx: *mut *mut c_void, commId: u64, logFunction: ncclDebugLogger_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v12_t) = 24,
        listen: GinOpaqueSlot = 32,
        connect: GinOpaqueSlot = 40,
        createContext: GinOpaqueSlot = 48,
        regMrSym: GinOpaqueSlot = 56,
        regMrSymDmaBuf: GinOpaqueSlot = 64,
        deregMrSym: GinOpaqueSlot = 72,
        destroyContext: GinOpaqueSlot = 80,
        closeColl: GinOpaqueSlot = 88,
        closeListen: GinOpaqueSlot = 96,
        iput: GinOpaqueSlot = 104,
        iputSignal: GinOpaqueSlot = 112,
        iget: GinOpaqueSlot = 120,
        iflush: GinOpaqueSlot = 128,
        test: GinOpaqueSlot = 136,
        ginProgress: GinOpaqueSlot = 144,
        queryLastError: GinOpaqueSlot = 152,
        finalize: fnp!(ctx: *mut c_void) = 160,
    }
}

abi_struct! {
    /// `ncclGin_v14_t` (symbol `ncclGinPlugin_v14`): `getGinProperties` after
    /// `devices`; the data-path slots (`iput` … `test`) moved to the RMA API.
    #[derive(Debug)]
    pub struct ncclGin_v14_t, size 136 {
        name: *const c_char = 0,
        init: fnp!(ctx: *mut *mut c_void, commId: u64, logFunction: ncclDebugLogger_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getGinProperties: fnp!(ginProps: *mut ncclGinProperties_v14_t) = 24,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v12_t) = 32,
        listen: GinOpaqueSlot = 40,
        connect: GinOpaqueSlot = 48,
        createContext: GinOpaqueSlot = 56,
        regMrSym: GinOpaqueSlot = 64,
        regMrSymDmaBuf: GinOpaqueSlot = 72,
        deregMrSym: GinOpaqueSlot = 80,
        destroyContext: GinOpaqueSlot = 88,
        closeColl: GinOpaqueSlot = 96,
        closeListen: GinOpaqueSlot = 104,
        ginProgress: GinOpaqueSlot = 112,
        queryLastError: GinOpaqueSlot = 120,
        finalize: fnp!(ctx: *mut c_void) = 128,
    }
}

/// GIN plugin data symbols with their version, in NCCL 2.30.7's search order
/// (`src/plugin/gin.cc`, `ncclGinVersion = {14, 13}`).
pub const GIN_PLUGIN_SYMBOLS: [(&CStr, u32); 2] = [(c"ncclGinPlugin_v14", 14), (c"ncclGinPlugin_v13", 13)];

/// The host-side slots common to both versions, read from the table of `version`.
#[derive(Debug, Clone, Copy)]
pub struct GinHostSlots {
    /// `name`.
    pub name: *const c_char,
    /// `init(void** ctx, uint64_t commId, ncclDebugLogger_t)`.
    pub init: fnp!(ctx: *mut *mut c_void, commId: u64, logFunction: ncclDebugLogger_t),
    /// `devices(int* ndev)`.
    pub devices: fnp!(ndev: *mut c_int),
    /// `getProperties(int dev, ncclNetProperties_v12_t*)`.
    pub get_properties: fnp!(dev: c_int, props: *mut ncclNetProperties_v12_t),
    /// `finalize(void* ctx)`.
    pub finalize: fnp!(ctx: *mut c_void),
    /// `getGinProperties` (v14 only; `None` for v13, where NCCL assumes strong
    /// signals and no VA signals: `gin_v13.cc`).
    pub get_gin_properties: fnp!(ginProps: *mut ncclGinProperties_v14_t),
}

impl GinHostSlots {
    /// The host-side slots of the table at `table`, of `version` (13 or 14).
    ///
    /// # Safety
    /// `table` must point to a readable `ncclGin_v<version>_t` (the data symbol of
    /// that name in a loaded library).
    pub unsafe fn read(table: *const c_void, version: u32) -> Option<GinHostSlots> {
        match version {
            13 => {
                // SAFETY: the caller's contract; unaligned read, nothing promises alignment.
                let t = unsafe { std::ptr::read_unaligned(table.cast::<ncclGin_v13_t>()) };
                Some(GinHostSlots {
                    name: t.name,
                    init: t.init,
                    devices: t.devices,
                    get_properties: t.getProperties,
                    finalize: t.finalize,
                    get_gin_properties: None,
                })
            }
            14 => {
                // SAFETY: as above.
                let t = unsafe { std::ptr::read_unaligned(table.cast::<ncclGin_v14_t>()) };
                Some(GinHostSlots {
                    name: t.name,
                    init: t.init,
                    devices: t.devices,
                    get_properties: t.getProperties,
                    finalize: t.finalize,
                    get_gin_properties: t.getGinProperties,
                })
            }
            _ => None,
        }
    }
}
