//! `ncclCollNet_v6_t` … `ncclCollNet_v12_t` and `ncclNetSGE` (reference §2).
//!
//! Sources: NCCL 2.30.7 `src/include/plugin/net/net_v{6..12}.h` (each defines both the
//! net and the collnet struct). Note `ncclCollNet_v8` *inserted* `iallgather` and
//! `ireducescatter` before `iflush`, and `ncclCollNet_v10.init` has no profiler callback.

use std::ffi::{CStr, c_char, c_int, c_void};

use super::common::{abi_struct, ncclDataType_t, ncclDebugLogger_t, ncclRedOp_t, ncclResult_t};
use super::net::*;

abi_struct! {
    /// `ncclNetSGE_v8_t`: one scatter-gather element; note the 32-bit `size`.
    #[derive(Debug)]
    pub struct ncclNetSGE_v8_t, size 24 {
        mhandle: *mut c_void = 0,
        address: *mut c_void = 8,
        size: u32 = 16,
    }
}

abi_struct! {
    /// `ncclNetSGE_v9_t` (= v10, v11, v12): `size_t` size.
    #[derive(Debug)]
    pub struct ncclNetSGE_v9_t, size 24 {
        mhandle: *mut c_void = 0,
        address: *mut c_void = 8,
        size: usize = 16,
    }
}
/// `ncclNetSGE_v10_t` = v9.
pub type ncclNetSGE_v10_t = ncclNetSGE_v9_t;
/// `ncclNetSGE_v11_t` = v9.
pub type ncclNetSGE_v11_t = ncclNetSGE_v9_t;
/// `ncclNetSGE_v12_t` = v9.
pub type ncclNetSGE_v12_t = ncclNetSGE_v9_t;

abi_struct! {
    /// `ncclCollNet_v6_t` (symbol `ncclCollNetPlugin_v6`).
    #[derive(Debug)]
    pub struct ncclCollNet_v6_t, size 120 {
        name: *const c_char = 0,
        init: fnp!(logFunction: ncclDebugLogger_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v6_t) = 24,
        listen: fnp!(dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
        connect: fnp!(handles: *mut *mut c_void, nranks: c_int, rank: c_int, listenComm: *mut c_void,
            collComm: *mut *mut c_void) = 40,
        reduceSupport: fnp!(dataType: ncclDataType_t, redOp: ncclRedOp_t, supported: *mut c_int) = 48,
        regMr: fnp!(collComm: *mut c_void, data: *mut c_void, size: c_int, r#type: c_int,
            mhandle: *mut *mut c_void) = 56,
        regMrDmaBuf: fnp!(collComm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, offset: u64,
            fd: c_int, mhandle: *mut *mut c_void) = 64,
        deregMr: fnp!(collComm: *mut c_void, mhandle: *mut c_void) = 72,
        iallreduce: fnp!(collComm: *mut c_void, sendData: *mut c_void, recvData: *mut c_void, count: c_int,
            dataType: ncclDataType_t, redOp: ncclRedOp_t, sendMhandle: *mut c_void, recvMhandle: *mut c_void,
            request: *mut *mut c_void) = 80,
        iflush: fnp!(collComm: *mut c_void, data: *mut c_void, size: c_int, mhandle: *mut c_void,
            request: *mut *mut c_void) = 88,
        test: fnp!(request: *mut c_void, done: *mut c_int, size: *mut c_int) = 96,
        closeColl: fnp!(collComm: *mut c_void) = 104,
        closeListen: fnp!(listenComm: *mut c_void) = 112,
    }
}

abi_struct! {
    /// `ncclCollNet_v7_t` (symbol `ncclCollNetPlugin_v7`): only the properties type changes.
    #[derive(Debug)]
    pub struct ncclCollNet_v7_t, size 120 {
        name: *const c_char = 0,
        init: fnp!(logFunction: ncclDebugLogger_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v7_t) = 24,
        listen: fnp!(dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
        connect: fnp!(handles: *mut *mut c_void, nranks: c_int, rank: c_int, listenComm: *mut c_void,
            collComm: *mut *mut c_void) = 40,
        reduceSupport: fnp!(dataType: ncclDataType_t, redOp: ncclRedOp_t, supported: *mut c_int) = 48,
        regMr: fnp!(collComm: *mut c_void, data: *mut c_void, size: c_int, r#type: c_int,
            mhandle: *mut *mut c_void) = 56,
        regMrDmaBuf: fnp!(collComm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, offset: u64,
            fd: c_int, mhandle: *mut *mut c_void) = 64,
        deregMr: fnp!(collComm: *mut c_void, mhandle: *mut c_void) = 72,
        iallreduce: fnp!(collComm: *mut c_void, sendData: *mut c_void, recvData: *mut c_void, count: c_int,
            dataType: ncclDataType_t, redOp: ncclRedOp_t, sendMhandle: *mut c_void, recvMhandle: *mut c_void,
            request: *mut *mut c_void) = 80,
        iflush: fnp!(collComm: *mut c_void, data: *mut c_void, size: c_int, mhandle: *mut c_void,
            request: *mut *mut c_void) = 88,
        test: fnp!(request: *mut c_void, done: *mut c_int, size: *mut c_int) = 96,
        closeColl: fnp!(collComm: *mut c_void) = 104,
        closeListen: fnp!(listenComm: *mut c_void) = 112,
    }
}

abi_struct! {
    /// `ncclCollNet_v8_t` (symbol `ncclCollNetPlugin_v8`): `regMr` size `size_t`;
    /// `iallgather`/`ireducescatter` **inserted** before `iflush`.
    #[derive(Debug)]
    pub struct ncclCollNet_v8_t, size 136 {
        name: *const c_char = 0,
        init: fnp!(logFunction: ncclDebugLogger_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v8_t) = 24,
        listen: fnp!(dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
        connect: fnp!(handles: *mut *mut c_void, nranks: c_int, rank: c_int, listenComm: *mut c_void,
            collComm: *mut *mut c_void) = 40,
        reduceSupport: fnp!(dataType: ncclDataType_t, redOp: ncclRedOp_t, supported: *mut c_int) = 48,
        regMr: fnp!(collComm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int,
            mhandle: *mut *mut c_void) = 56,
        regMrDmaBuf: fnp!(collComm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, offset: u64,
            fd: c_int, mhandle: *mut *mut c_void) = 64,
        deregMr: fnp!(collComm: *mut c_void, mhandle: *mut c_void) = 72,
        iallreduce: fnp!(collComm: *mut c_void, sendData: *mut c_void, recvData: *mut c_void, count: c_int,
            dataType: ncclDataType_t, redOp: ncclRedOp_t, sendMhandle: *mut c_void, recvMhandle: *mut c_void,
            request: *mut *mut c_void) = 80,
        iallgather: fnp!(collComm: *mut c_void, sendData: *mut c_void, nRecvParts: c_int,
            recvParts: *mut ncclNetSGE_v8_t, bytesPerRank: usize, windowOffset: usize, windowBytes: usize,
            sendMhandle: *mut c_void, request: *mut *mut c_void) = 88,
        ireducescatter: fnp!(collComm: *mut c_void, nSendParts: c_int, sendParts: *mut ncclNetSGE_v8_t,
            recvData: *mut c_void, bytesPerRank: usize, windowOffset: usize, windowBytes: usize,
            dataType: ncclDataType_t, redOp: ncclRedOp_t, recvMhandle: *mut c_void,
            request: *mut *mut c_void) = 96,
        iflush: fnp!(collComm: *mut c_void, data: *mut c_void, size: c_int, mhandle: *mut c_void,
            request: *mut *mut c_void) = 104,
        test: fnp!(request: *mut c_void, done: *mut c_int, size: *mut c_int) = 112,
        closeColl: fnp!(collComm: *mut c_void) = 120,
        closeListen: fnp!(listenComm: *mut c_void) = 128,
    }
}

/// Generates the v9 / v10 collnet vtables, which differ only in type names.
macro_rules! collnet_v9_like {
    ($(#[$m:meta])* $name:ident, $props:ty, $sge:ty, $vprops:ty) => {
        abi_struct! {
            $(#[$m])*
            #[derive(Debug)]
            pub struct $name, size 144 {
                name: *const c_char = 0,
                init: fnp!(logFunction: ncclDebugLogger_t) = 8,
                devices: fnp!(ndev: *mut c_int) = 16,
                getProperties: fnp!(dev: c_int, props: *mut $props) = 24,
                listen: fnp!(dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
                connect: fnp!(handles: *mut *mut c_void, nranks: c_int, rank: c_int, listenComm: *mut c_void,
                    collComm: *mut *mut c_void) = 40,
                reduceSupport: fnp!(dataType: ncclDataType_t, redOp: ncclRedOp_t, supported: *mut c_int) = 48,
                regMr: fnp!(collComm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int,
                    mhandle: *mut *mut c_void) = 56,
                regMrDmaBuf: fnp!(collComm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int,
                    offset: u64, fd: c_int, mhandle: *mut *mut c_void) = 64,
                deregMr: fnp!(collComm: *mut c_void, mhandle: *mut c_void) = 72,
                iallreduce: fnp!(collComm: *mut c_void, sendData: *mut c_void, recvData: *mut c_void, count: usize,
                    dataType: ncclDataType_t, redOp: ncclRedOp_t, sendMhandle: *mut c_void,
                    recvMhandle: *mut c_void, request: *mut *mut c_void) = 80,
                iallgather: fnp!(collComm: *mut c_void, sendData: *mut c_void, nRecvParts: c_int,
                    recvParts: *mut $sge, bytesPerRank: usize, windowOffset: usize, windowBytes: usize,
                    sendMhandle: *mut c_void, request: *mut *mut c_void) = 88,
                ireducescatter: fnp!(collComm: *mut c_void, nSendParts: c_int, sendParts: *mut $sge,
                    recvData: *mut c_void, bytesPerRank: usize, windowOffset: usize, windowBytes: usize,
                    dataType: ncclDataType_t, redOp: ncclRedOp_t, recvMhandle: *mut c_void,
                    request: *mut *mut c_void) = 96,
                iflush: fnp!(collComm: *mut c_void, data: *mut c_void, size: c_int, mhandle: *mut c_void,
                    request: *mut *mut c_void) = 104,
                test: fnp!(request: *mut c_void, done: *mut c_int, size: *mut c_int) = 112,
                closeColl: fnp!(collComm: *mut c_void) = 120,
                closeListen: fnp!(listenComm: *mut c_void) = 128,
                makeVDevice: fnp!(d: *mut c_int, props: *mut $vprops) = 136,
            }
        }
    };
}

collnet_v9_like!(
    /// `ncclCollNet_v9_t` (symbol `ncclCollNetPlugin_v9`): `iallreduce` count `size_t`,
    /// `size_t` SGEs, `makeVDevice` appended.
    ncclCollNet_v9_t, ncclNetProperties_v9_t, ncclNetSGE_v9_t, ncclNetVDeviceProps_v9_t
);
collnet_v9_like!(
    /// `ncclCollNet_v10_t` (symbol `ncclCollNetPlugin_v10`): same slots as v9; its `init`
    /// did **not** get the profiler callback.
    ncclCollNet_v10_t, ncclNetProperties_v10_t, ncclNetSGE_v10_t, ncclNetVDeviceProps_v10_t
);

/// Generates the v11 / v12 collnet vtables, which differ only in type names.
macro_rules! collnet_v11_like {
    ($(#[$m:meta])* $name:ident, $props:ty, $sge:ty, $vprops:ty) => {
        abi_struct! {
            $(#[$m])*
            #[derive(Debug)]
            pub struct $name, size 152 {
                name: *const c_char = 0,
                init: fnp!(ctx: *mut *mut c_void, commId: u64, logFunction: ncclDebugLogger_t) = 8,
                devices: fnp!(ndev: *mut c_int) = 16,
                getProperties: fnp!(dev: c_int, props: *mut $props) = 24,
                listen: fnp!(ctx: *mut c_void, dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
                connect: fnp!(handles: *mut *mut c_void, nranks: c_int, rank: c_int, listenComm: *mut c_void,
                    collComm: *mut *mut c_void) = 40,
                reduceSupport: fnp!(dataType: ncclDataType_t, redOp: ncclRedOp_t, supported: *mut c_int) = 48,
                regMr: fnp!(collComm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int,
                    mhandle: *mut *mut c_void) = 56,
                regMrDmaBuf: fnp!(collComm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int,
                    offset: u64, fd: c_int, mhandle: *mut *mut c_void) = 64,
                deregMr: fnp!(collComm: *mut c_void, mhandle: *mut c_void) = 72,
                iallreduce: fnp!(collComm: *mut c_void, sendData: *mut c_void, recvData: *mut c_void, count: usize,
                    dataType: ncclDataType_t, redOp: ncclRedOp_t, sendMhandle: *mut c_void,
                    recvMhandle: *mut c_void, request: *mut *mut c_void) = 80,
                iallgather: fnp!(collComm: *mut c_void, sendData: *mut c_void, nRecvParts: c_int,
                    recvParts: *mut $sge, bytesPerRank: usize, windowOffset: usize, windowBytes: usize,
                    sendMhandle: *mut c_void, request: *mut *mut c_void) = 88,
                ireducescatter: fnp!(collComm: *mut c_void, nSendParts: c_int, sendParts: *mut $sge,
                    recvData: *mut c_void, bytesPerRank: usize, windowOffset: usize, windowBytes: usize,
                    dataType: ncclDataType_t, redOp: ncclRedOp_t, recvMhandle: *mut c_void,
                    request: *mut *mut c_void) = 96,
                iflush: fnp!(collComm: *mut c_void, data: *mut c_void, size: c_int, mhandle: *mut c_void,
                    request: *mut *mut c_void) = 104,
                test: fnp!(request: *mut c_void, done: *mut c_int, size: *mut c_int) = 112,
                closeColl: fnp!(collComm: *mut c_void) = 120,
                closeListen: fnp!(listenComm: *mut c_void) = 128,
                makeVDevice: fnp!(d: *mut c_int, props: *mut $vprops) = 136,
                finalize: fnp!(ctx: *mut c_void) = 144,
            }
        }
    };
}

collnet_v11_like!(
    /// `ncclCollNet_v11_t` (symbol `ncclCollNetPlugin_v11`): per-communicator `ctx`
    /// (`init(ctx, commId, logger)`), `listen` takes `ctx`, `finalize` appended.
    ncclCollNet_v11_t, ncclNetProperties_v11_t, ncclNetSGE_v11_t, ncclNetVDeviceProps_v11_t
);
collnet_v11_like!(
    /// `ncclCollNet_v12_t` (symbol `ncclCollNetPlugin_v12`): v11's slots with v12 types.
    ncclCollNet_v12_t, ncclNetProperties_v12_t, ncclNetSGE_v12_t, ncclNetVDeviceProps_v12_t
);

/// `ncclCollNet_t` inside NCCL 2.30.7.
pub type ncclCollNet_t = ncclCollNet_v12_t;

/// CollNet plugin data symbols with their version, in NCCL 2.30.7's search order.
pub const COLLNET_PLUGIN_SYMBOLS: [(&CStr, u32); 7] = [
    (c"ncclCollNetPlugin_v12", 12),
    (c"ncclCollNetPlugin_v11", 11),
    (c"ncclCollNetPlugin_v10", 10),
    (c"ncclCollNetPlugin_v9", 9),
    (c"ncclCollNetPlugin_v8", 8),
    (c"ncclCollNetPlugin_v7", 7),
    (c"ncclCollNetPlugin_v6", 6),
];
