//! `ncclRma_v13_t` / `ncclRma_v14_t` and their config structs (NCCL 2.30.7 RMA plugins).
//!
//! Sources: NCCL 2.30.7 `src/include/plugin/rma/rma_v14.h`, `rma/rma_v13.h` (which is
//! `typedef ncclGin_v13_t ncclRma_v13_t`, from `gin/gin_v13.h`), `src/plugin/rma.cc` and
//! `src/plugin/rma/rma_v1{3,4}.cc`.
//!
//! Loading (`src/plugin/rma.cc`, `initPluginLibsOnceFunc` + `ncclRmaInit`): the candidate
//! libraries are, in order, (1) each comma-separated name of `NCCL_RMA_PLUGIN` (`none`
//! ⇒ no external library) or, when unset, `libnccl-rma.so`; (2) the library already
//! opened for the GIN plugin (`ncclGetGinPluginLib`); (3) the library already opened for
//! the net plugin (`ncclGetNetPluginLib`); (4) NCCL's internal IB proxy RMA. In each
//! library, [`RMA_PLUGIN_SYMBOLS`] is tried in order (v14 first, then v13, whose
//! `getNcclRma_v13` also accepts `ncclGinPlugin_v13`, the two tables being one type). The
//! first library whose `init` succeeds and whose `devices` reports ≥ 1 device is
//! assigned to the communicator; the other external ones are disabled.
//!
//! Layouts are identical slot for slot between v13 and v14 (21 slots, 168 bytes); only
//! the argument lists of `createContext`, `regMrSym*` and `iputSignal` differ.

use std::ffi::{CStr, c_char, c_int, c_void};

use super::common::{abi_struct, ncclDebugLogger_t, ncclResult_t};
use super::gin::ncclGinConfig_v13_t;
use super::net::*;

abi_struct! {
    /// `ncclRmaConfig_v14_t`: `createContext` options. NCCL 2.30.7 passes
    /// `{ nContexts = 1, trafficClass = comm->config.trafficClass }`
    /// (`src/rma/rma_proxy.cc`, `ncclRmaProxyCreateContext`).
    #[derive(Debug, Default)]
    pub struct ncclRmaConfig_v14_t, size 8 {
        nContexts: c_int = 0,
        trafficClass: c_int = 4,
    }
}

/// `ncclRmaConfig_t` inside NCCL 2.30.7.
pub type ncclRmaConfig_t = ncclRmaConfig_v14_t;

abi_struct! {
    /// `ncclRma_v13_t` = `ncclGin_v13_t` (symbols `ncclRmaPlugin_v13`, then
    /// `ncclGinPlugin_v13`). `createContext` also returns a device handle, `regMrSym*`
    /// a GIN handle (both ignored by NCCL's RMA path), `iputSignal` has no
    /// `isStrongSignal` (every v13 signal is strong), and slot 18 is `ginProgress`.
    #[derive(Debug)]
    pub struct ncclRma_v13_t, size 168 {
        name: *const c_char = 0,
        init: fnp!(ctx: *mut *mut c_void, commId: u64, logFunction: ncclDebugLogger_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v12_t) = 24,
        listen: fnp!(ctx: *mut c_void, dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
        connect: fnp!(ctx: *mut c_void, handles: *mut *mut c_void, nranks: c_int, rank: c_int,
            listenComm: *mut c_void, collComm: *mut *mut c_void) = 40,
        createContext: fnp!(collComm: *mut c_void, config: *mut ncclGinConfig_v13_t, ginCtx: *mut *mut c_void,
            devHandle: *mut *mut ncclNetDeviceHandle_v11_t) = 48,
        regMrSym: fnp!(collComm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, mrFlags: u64,
            mhandle: *mut *mut c_void, ginHandle: *mut *mut c_void) = 56,
        regMrSymDmaBuf: fnp!(collComm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, offset: u64,
            fd: c_int, mrFlags: u64, mhandle: *mut *mut c_void, ginHandle: *mut *mut c_void) = 64,
        deregMrSym: fnp!(collComm: *mut c_void, mhandle: *mut c_void) = 72,
        destroyContext: fnp!(ginCtx: *mut c_void) = 80,
        closeColl: fnp!(collComm: *mut c_void) = 88,
        closeListen: fnp!(listenComm: *mut c_void) = 96,
        iput: fnp!(ginCtx: *mut c_void, context: c_int, srcOff: u64, srcMhandle: *mut c_void, size: usize,
            dstOff: u64, dstMhandle: *mut c_void, rank: u32, request: *mut *mut c_void) = 104,
        iputSignal: fnp!(ginCtx: *mut c_void, context: c_int, srcOff: u64, srcMhandle: *mut c_void, size: usize,
            dstOff: u64, dstMhandle: *mut c_void, rank: u32, signalOff: u64, signalMhandle: *mut c_void,
            signalValue: u64, signalOp: u32, request: *mut *mut c_void) = 112,
        iget: fnp!(ginCtx: *mut c_void, context: c_int, remoteOff: u64, remoteMhandle: *mut c_void, size: usize,
            localOff: u64, localMhandle: *mut c_void, rank: u32, request: *mut *mut c_void) = 120,
        iflush: fnp!(ginCtx: *mut c_void, context: c_int, mhandle: *mut c_void, rank: u32,
            request: *mut *mut c_void) = 128,
        test: fnp!(collComm: *mut c_void, request: *mut c_void, done: *mut c_int) = 136,
        ginProgress: fnp!(ginCtx: *mut c_void) = 144,
        queryLastError: fnp!(ginCtx: *mut c_void, hasError: *mut bool) = 152,
        finalize: fnp!(ctx: *mut c_void) = 160,
    }
}

abi_struct! {
    /// `ncclRma_v14_t` (symbol `ncclRmaPlugin_v14`).
    ///
    /// `test` takes the *collComm* (from `connect`), not the RMA context; `iputSignal`
    /// applies `signalOp` ([`NCCL_NET_SIGNAL_OP_INC`] adds 1, [`NCCL_NET_SIGNAL_OP_ADD`]
    /// adds `signalValue`) to the `u64` at `signalOff` of the peer's `signalMhandle`
    /// window only once the put's data is visible there.
    #[derive(Debug)]
    pub struct ncclRma_v14_t, size 168 {
        name: *const c_char = 0,
        init: fnp!(ctx: *mut *mut c_void, commId: u64, logFunction: ncclDebugLogger_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v12_t) = 24,
        listen: fnp!(ctx: *mut c_void, dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
        connect: fnp!(ctx: *mut c_void, handles: *mut *mut c_void, nranks: c_int, rank: c_int,
            listenComm: *mut c_void, collComm: *mut *mut c_void) = 40,
        createContext: fnp!(collComm: *mut c_void, config: *mut ncclRmaConfig_v14_t, rmaCtx: *mut *mut c_void) = 48,
        regMrSym: fnp!(collComm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, mrFlags: u64,
            mhandle: *mut *mut c_void) = 56,
        regMrSymDmaBuf: fnp!(collComm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, offset: u64,
            fd: c_int, mrFlags: u64, mhandle: *mut *mut c_void) = 64,
        deregMrSym: fnp!(collComm: *mut c_void, mhandle: *mut c_void) = 72,
        destroyContext: fnp!(rmaCtx: *mut c_void) = 80,
        closeColl: fnp!(collComm: *mut c_void) = 88,
        closeListen: fnp!(listenComm: *mut c_void) = 96,
        iput: fnp!(rmaCtx: *mut c_void, context: c_int, srcOff: u64, srcMhandle: *mut c_void, size: usize,
            dstOff: u64, dstMhandle: *mut c_void, rank: u32, request: *mut *mut c_void) = 104,
        iputSignal: fnp!(rmaCtx: *mut c_void, context: c_int, srcOff: u64, srcMhandle: *mut c_void, size: usize,
            dstOff: u64, dstMhandle: *mut c_void, rank: u32, signalOff: u64, signalMhandle: *mut c_void,
            signalValue: u64, signalOp: u32, isStrongSignal: bool, request: *mut *mut c_void) = 112,
        iget: fnp!(rmaCtx: *mut c_void, context: c_int, remoteOff: u64, remoteMhandle: *mut c_void, size: usize,
            localOff: u64, localMhandle: *mut c_void, rank: u32, request: *mut *mut c_void) = 120,
        iflush: fnp!(rmaCtx: *mut c_void, context: c_int, mhandle: *mut c_void, rank: u32,
            request: *mut *mut c_void) = 128,
        test: fnp!(collComm: *mut c_void, request: *mut c_void, done: *mut c_int) = 136,
        rmaProgress: fnp!(rmaCtx: *mut c_void) = 144,
        queryLastError: fnp!(rmaCtx: *mut c_void, hasError: *mut bool) = 152,
        finalize: fnp!(ctx: *mut c_void) = 160,
    }
}

/// `ncclRma_t` inside NCCL 2.30.7.
pub type ncclRma_t = ncclRma_v14_t;

/// `NCCL_RMA_PLUGIN`'s default library name when the variable is unset (`rma.cc`).
pub const NCCL_RMA_DEFAULT_PLUGIN_LIB: &CStr = c"libnccl-rma.so";

/// RMA plugin data symbols with their table version, in NCCL 2.30.7's search order
/// (`ncclRmaVersion[] = {14, 13}`; `getNcclRma_v13` tries `ncclRmaPlugin_v13`, then
/// `ncclGinPlugin_v13`, both read as [`ncclRma_v13_t`]).
pub const RMA_PLUGIN_SYMBOLS: [(&CStr, u32); 3] = [
    (c"ncclRmaPlugin_v14", 14),
    (c"ncclRmaPlugin_v13", 13),
    (c"ncclGinPlugin_v13", 13),
];
