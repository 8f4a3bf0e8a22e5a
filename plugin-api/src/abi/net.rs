//! `ncclNet_v6_t` … `ncclNet_v12_t` and their data structs (reference §1, §4.1).
//!
//! Sources: NCCL 2.30.7 `src/include/plugin/net/net_v{6..12}.h`,
//! `src/include/plugin/nccl_net.h`, `src/include/nccl_device/net_device.h`.

use std::ffi::{CStr, c_char, c_int, c_void};

use super::common::{abi_struct, ncclDebugLogger_t, ncclProfilerCallback_t, ncclResult_t};

/// `Option<unsafe extern "C" fn(args) -> ncclResult_t>`: a nullable vtable slot.
macro_rules! fnp {
    ($($a:ident : $t:ty),* $(,)?) => {
        Option<unsafe extern "C" fn($($a: $t),*) -> ncclResult_t>
    };
}
pub(crate) use fnp;

/// `NCCL_NET_HANDLE_MAXSIZE`: size of the listen handle buffer (bytes).
pub const NCCL_NET_HANDLE_MAXSIZE: usize = 128;
/// `NCCL_PTR_HOST`: `ptrSupport` bit / `regMr` type.
pub const NCCL_PTR_HOST: i32 = 0x1;
/// `NCCL_PTR_CUDA`
pub const NCCL_PTR_CUDA: i32 = 0x2;
/// `NCCL_PTR_DMABUF`: `ptrSupport` bit only; DMA-BUF registrations use `regMrDmaBuf`.
pub const NCCL_PTR_DMABUF: i32 = 0x4;
/// `NCCL_NET_MAX_REQUESTS`: outstanding requests each comm must support (since 2.19).
pub const NCCL_NET_MAX_REQUESTS: usize = 32;
/// `NCCL_NET_MAX_REQUESTS_V6`: the pre-2.19 value kept in `net_v6.h`.
pub const NCCL_NET_MAX_REQUESTS_V6: usize = 8;
/// `NCCL_NET_OPTIONAL_RECV_COMPLETION`: value NCCL may store in `*request` before `irecv` (v9+).
pub const NCCL_NET_OPTIONAL_RECV_COMPLETION: usize = 0x1;
/// `NCCL_NET_MULTI_REQUEST` (defined, unused by core in 2.30.7).
pub const NCCL_NET_MULTI_REQUEST: usize = 0x2;
/// `NCCL_NET_MAX_PLUGINS`: most `ncclNet` objects per process (2 reserved for IB and Socket).
pub const NCCL_NET_MAX_PLUGINS: usize = 16;
/// `NCCL_MAX_NET_SIZE_BYTES`: 2^40, upper bound NCCL accepts for `maxP2pBytes`/`maxCollBytes`.
pub const NCCL_MAX_NET_SIZE_BYTES: usize = 1 << 40;
/// `MAX_NET_SIZE`: 2^30, the `maxP2pBytes` NCCL assumes for v6–v8 (and their isend/irecv limit).
pub const MAX_NET_SIZE: usize = 1 << 30;
/// `MAX_COLLNET_SIZE`: 2^29, the `maxCollBytes` NCCL assumes for v6–v8.
pub const MAX_COLLNET_SIZE: usize = 1 << 29;
/// `NCCL_NET_MAX_DEVS_PER_NIC_V11`: `vProps.devs` entries for v9–v11.
pub const NCCL_NET_MAX_DEVS_PER_NIC_V11: usize = 4;
/// `NCCL_NET_MAX_DEVS_PER_NIC_V12`: `vProps.devs` entries for v12.
pub const NCCL_NET_MAX_DEVS_PER_NIC_V12: usize = 8;
/// `NCCL_NET_MAX_DEVS_PER_NIC` in 2.30.
pub const NCCL_NET_MAX_DEVS_PER_NIC: usize = NCCL_NET_MAX_DEVS_PER_NIC_V12;
/// `NCCL_NET_TRAFFIC_CLASS_UNDEF`
pub const NCCL_NET_TRAFFIC_CLASS_UNDEF: i32 = -1;
/// `NCCL_NET_ATTR_UNDEF` (the `uint32_t` fields hold `(uint32_t)-1`).
pub const NCCL_NET_ATTR_UNDEF: i32 = -1;
/// `NCCL_NET_ID_UNDEF`: rail/plane undefined.
pub const NCCL_NET_ID_UNDEF: i32 = -1;
/// `NCCL_NET_MTU_SIZE`
pub const NCCL_NET_MTU_SIZE: usize = 4096;
/// `NCCL_NET_MR_FLAG_FORCE_SO` (GIN/RMA only).
pub const NCCL_NET_MR_FLAG_FORCE_SO: u32 = 1 << 0;
/// `NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET` (GIN/RMA only).
pub const NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET: u32 = 1 << 1;
/// `NCCL_NET_SIGNAL_OP_INC` (GIN/RMA only).
pub const NCCL_NET_SIGNAL_OP_INC: u32 = 0x1;
/// `NCCL_NET_SIGNAL_OP_ADD` (GIN/RMA only).
pub const NCCL_NET_SIGNAL_OP_ADD: u32 = 0x2;

/// `ncclNetDeviceType`, a 4-byte C enum kept as `int` (values from C may be anything).
pub type ncclNetDeviceType = i32;
/// `NCCL_NET_DEVICE_HOST`
pub const NCCL_NET_DEVICE_HOST: ncclNetDeviceType = 0;
/// `NCCL_NET_DEVICE_UNPACK`
pub const NCCL_NET_DEVICE_UNPACK: ncclNetDeviceType = 1;
/// `NCCL_NET_DEVICE_GIN_PROXY` (2.29+, not valid for net plugins)
pub const NCCL_NET_DEVICE_GIN_PROXY: ncclNetDeviceType = 2;
/// `NCCL_NET_DEVICE_GIN_GDAKI` (2.29+, not valid for net plugins)
pub const NCCL_NET_DEVICE_GIN_GDAKI: ncclNetDeviceType = 3;
/// `NCCL_NET_DEVICE_GIN_GPI` (2.30.7, not valid for net plugins)
pub const NCCL_NET_DEVICE_GIN_GPI: ncclNetDeviceType = 4;
/// `NCCL_NET_DEVICE_INVALID_VERSION`: the version to report with `NCCL_NET_DEVICE_HOST`.
pub const NCCL_NET_DEVICE_INVALID_VERSION: i32 = 0;
/// `NCCL_NET_DEVICE_UNPACK_VERSION`: the only UNPACK version NCCL 2.19–2.30 accept.
pub const NCCL_NET_DEVICE_UNPACK_VERSION: i32 = 0x7;

abi_struct! {
    /// `ncclNetDeviceHandle_v7_t` (identical for v7 … v12): device-offload handle.
    #[derive(Debug)]
    pub struct ncclNetDeviceHandle_v7_t, size 32 {
        netDeviceType: ncclNetDeviceType = 0,
        netDeviceVersion: c_int = 4,
        handle: *mut c_void = 8,
        size: usize = 16,
        needsProxyProgress: c_int = 24,
    }
}
/// `ncclNetDeviceHandle_v8_t` = v7.
pub type ncclNetDeviceHandle_v8_t = ncclNetDeviceHandle_v7_t;
/// `ncclNetDeviceHandle_v9_t` = v7.
pub type ncclNetDeviceHandle_v9_t = ncclNetDeviceHandle_v7_t;
/// `ncclNetDeviceHandle_v10_t` = v7.
pub type ncclNetDeviceHandle_v10_t = ncclNetDeviceHandle_v7_t;
/// `ncclNetDeviceHandle_v11_t` = v7.
pub type ncclNetDeviceHandle_v11_t = ncclNetDeviceHandle_v7_t;
/// `ncclNetDeviceHandle_v12_t` = v7.
pub type ncclNetDeviceHandle_v12_t = ncclNetDeviceHandle_v7_t;

abi_struct! {
    /// `ncclNetVDeviceProps_v9_t` (= v10, v11): physical devices fused into a virtual NIC, 4 entries.
    #[derive(Debug, PartialEq, Eq)]
    pub struct ncclNetVDeviceProps_v9_t, size 20 {
        ndevs: c_int = 0,
        devs: [c_int; NCCL_NET_MAX_DEVS_PER_NIC_V11] = 4,
    }
}
/// `ncclNetVDeviceProps_v10_t` = v9.
pub type ncclNetVDeviceProps_v10_t = ncclNetVDeviceProps_v9_t;
/// `ncclNetVDeviceProps_v11_t` = v9.
pub type ncclNetVDeviceProps_v11_t = ncclNetVDeviceProps_v9_t;

abi_struct! {
    /// `ncclNetVDeviceProps_v12_t`: 8 entries.
    #[derive(Debug, PartialEq, Eq)]
    pub struct ncclNetVDeviceProps_v12_t, size 36 {
        ndevs: c_int = 0,
        devs: [c_int; NCCL_NET_MAX_DEVS_PER_NIC_V12] = 4,
    }
}

abi_struct! {
    /// `ncclNetCommConfig_v10_t` (= v11, v12): per-communicator configuration.
    #[derive(Debug, PartialEq, Eq)]
    pub struct ncclNetCommConfig_v10_t, size 4 {
        /// `NCCL_NET_TRAFFIC_CLASS_UNDEF` (-1) when unset.
        trafficClass: c_int = 0,
    }
}
/// `ncclNetCommConfig_v11_t` = v10.
pub type ncclNetCommConfig_v11_t = ncclNetCommConfig_v10_t;
/// `ncclNetCommConfig_v12_t` = v10.
pub type ncclNetCommConfig_v12_t = ncclNetCommConfig_v10_t;

abi_struct! {
    /// `ncclNetCommAttr_v12_t` (= v11): concurrency hints for one comm direction.
    #[derive(Debug, PartialEq, Eq)]
    pub struct ncclNetCommAttr_v12_t, size 16 {
        maxConcurrentPeers: i32 = 0,
        minConcurrentPeers: i32 = 4,
        maxFlowsPerPeer: i32 = 8,
        minFlowsPerPeer: i32 = 12,
    }
}
/// `ncclNetCommAttr_v11_t` = v12.
pub type ncclNetCommAttr_v11_t = ncclNetCommAttr_v12_t;

abi_struct! {
    /// `ncclNetAttr_v12_t` (= v11): `setNetAttr` hint. `op` is a bitmask `1 << ncclFunc_t`,
    /// `algo` `1 << NCCL_ALGO_*`, `proto` `1 << NCCL_PROTO_*`; undefined fields are `u32::MAX`.
    #[derive(Debug, PartialEq, Eq)]
    pub struct ncclNetAttr_v12_t, size 44 {
        sendCommAttr: ncclNetCommAttr_v12_t = 0,
        recvCommAttr: ncclNetCommAttr_v12_t = 16,
        op: u32 = 32,
        algo: u32 = 36,
        proto: u32 = 40,
    }
}
/// `ncclNetAttr_v11_t` = v12.
pub type ncclNetAttr_v11_t = ncclNetAttr_v12_t;

abi_struct! {
    /// `ncclNetProperties_v6_t`. `name`/`pciPath` are borrowed by NCCL for the life of the plugin.
    #[derive(Debug)]
    pub struct ncclNetProperties_v6_t, size 48 {
        name: *mut c_char = 0,
        pciPath: *mut c_char = 8,
        guid: u64 = 16,
        ptrSupport: c_int = 24,
        speed: c_int = 28,
        port: c_int = 32,
        latency: f32 = 36,
        maxComms: c_int = 40,
        maxRecvs: c_int = 44,
    }
}

abi_struct! {
    /// `ncclNetProperties_v7_t`: v6 plus device-offload fields.
    #[derive(Debug)]
    pub struct ncclNetProperties_v7_t, size 56 {
        name: *mut c_char = 0,
        pciPath: *mut c_char = 8,
        guid: u64 = 16,
        ptrSupport: c_int = 24,
        speed: c_int = 28,
        port: c_int = 32,
        latency: f32 = 36,
        maxComms: c_int = 40,
        maxRecvs: c_int = 44,
        netDeviceType: ncclNetDeviceType = 48,
        netDeviceVersion: c_int = 52,
    }
}

abi_struct! {
    /// `ncclNetProperties_v8_t`: inserts `regIsGlobal` after `ptrSupport`.
    #[derive(Debug)]
    pub struct ncclNetProperties_v8_t, size 64 {
        name: *mut c_char = 0,
        pciPath: *mut c_char = 8,
        guid: u64 = 16,
        ptrSupport: c_int = 24,
        regIsGlobal: c_int = 28,
        speed: c_int = 32,
        port: c_int = 36,
        latency: f32 = 40,
        maxComms: c_int = 44,
        maxRecvs: c_int = 48,
        netDeviceType: ncclNetDeviceType = 52,
        netDeviceVersion: c_int = 56,
    }
}

abi_struct! {
    /// `ncclNetProperties_v9_t` (= v10): inserts `forceFlush`, appends `vProps` and max sizes.
    #[derive(Debug)]
    pub struct ncclNetProperties_v9_t, size 104 {
        name: *mut c_char = 0,
        pciPath: *mut c_char = 8,
        guid: u64 = 16,
        ptrSupport: c_int = 24,
        regIsGlobal: c_int = 28,
        forceFlush: c_int = 32,
        speed: c_int = 36,
        port: c_int = 40,
        latency: f32 = 44,
        maxComms: c_int = 48,
        maxRecvs: c_int = 52,
        netDeviceType: ncclNetDeviceType = 56,
        netDeviceVersion: c_int = 60,
        vProps: ncclNetVDeviceProps_v9_t = 64,
        maxP2pBytes: usize = 88,
        maxCollBytes: usize = 96,
    }
}
/// `ncclNetProperties_v10_t`: field-for-field identical to v9.
pub type ncclNetProperties_v10_t = ncclNetProperties_v9_t;

abi_struct! {
    /// `ncclNetProperties_v11_t`: v10 plus `maxMultiRequestSize`.
    #[derive(Debug)]
    pub struct ncclNetProperties_v11_t, size 112 {
        name: *mut c_char = 0,
        pciPath: *mut c_char = 8,
        guid: u64 = 16,
        ptrSupport: c_int = 24,
        regIsGlobal: c_int = 28,
        forceFlush: c_int = 32,
        speed: c_int = 36,
        port: c_int = 40,
        latency: f32 = 44,
        maxComms: c_int = 48,
        maxRecvs: c_int = 52,
        netDeviceType: ncclNetDeviceType = 56,
        netDeviceVersion: c_int = 60,
        vProps: ncclNetVDeviceProps_v11_t = 64,
        maxP2pBytes: usize = 88,
        maxCollBytes: usize = 96,
        maxMultiRequestSize: c_int = 104,
    }
}

abi_struct! {
    /// `ncclNetProperties_v12_t`: 8-entry `vProps` (moves the tail), plus `railId`/`planeId`.
    #[derive(Debug)]
    pub struct ncclNetProperties_v12_t, size 128 {
        name: *mut c_char = 0,
        pciPath: *mut c_char = 8,
        guid: u64 = 16,
        ptrSupport: c_int = 24,
        regIsGlobal: c_int = 28,
        forceFlush: c_int = 32,
        speed: c_int = 36,
        port: c_int = 40,
        latency: f32 = 44,
        maxComms: c_int = 48,
        maxRecvs: c_int = 52,
        netDeviceType: ncclNetDeviceType = 56,
        netDeviceVersion: c_int = 60,
        vProps: ncclNetVDeviceProps_v12_t = 64,
        maxP2pBytes: usize = 104,
        maxCollBytes: usize = 112,
        maxMultiRequestSize: c_int = 120,
        railId: i16 = 124,
        planeId: i16 = 126,
    }
}

abi_struct! {
    /// `ncclNet_v6_t` (symbol `ncclNetPlugin_v6`).
    #[derive(Debug)]
    pub struct ncclNet_v6_t, size 136 {
        name: *const c_char = 0,
        init: fnp!(logFunction: ncclDebugLogger_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v6_t) = 24,
        listen: fnp!(dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
        connect: fnp!(dev: c_int, handle: *mut c_void, sendComm: *mut *mut c_void) = 40,
        accept: fnp!(listenComm: *mut c_void, recvComm: *mut *mut c_void) = 48,
        regMr: fnp!(comm: *mut c_void, data: *mut c_void, size: c_int, r#type: c_int, mhandle: *mut *mut c_void) = 56,
        regMrDmaBuf: fnp!(comm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, offset: u64, fd: c_int,
            mhandle: *mut *mut c_void) = 64,
        deregMr: fnp!(comm: *mut c_void, mhandle: *mut c_void) = 72,
        isend: fnp!(sendComm: *mut c_void, data: *mut c_void, size: c_int, tag: c_int, mhandle: *mut c_void,
            request: *mut *mut c_void) = 80,
        irecv: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut c_int, tags: *mut c_int,
            mhandles: *mut *mut c_void, request: *mut *mut c_void) = 88,
        iflush: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut c_int,
            mhandles: *mut *mut c_void, request: *mut *mut c_void) = 96,
        test: fnp!(request: *mut c_void, done: *mut c_int, sizes: *mut c_int) = 104,
        closeSend: fnp!(sendComm: *mut c_void) = 112,
        closeRecv: fnp!(recvComm: *mut c_void) = 120,
        closeListen: fnp!(listenComm: *mut c_void) = 128,
    }
}

abi_struct! {
    /// `ncclNet_v7_t` (symbol `ncclNetPlugin_v7`): `connect`/`accept` gain a device-handle
    /// out-arg; `getDeviceMr`, `irecvConsumed` appended.
    #[derive(Debug)]
    pub struct ncclNet_v7_t, size 152 {
        name: *const c_char = 0,
        init: fnp!(logFunction: ncclDebugLogger_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v7_t) = 24,
        listen: fnp!(dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
        connect: fnp!(dev: c_int, handle: *mut c_void, sendComm: *mut *mut c_void,
            sendDevComm: *mut *mut ncclNetDeviceHandle_v7_t) = 40,
        accept: fnp!(listenComm: *mut c_void, recvComm: *mut *mut c_void,
            recvDevComm: *mut *mut ncclNetDeviceHandle_v7_t) = 48,
        regMr: fnp!(comm: *mut c_void, data: *mut c_void, size: c_int, r#type: c_int, mhandle: *mut *mut c_void) = 56,
        regMrDmaBuf: fnp!(comm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, offset: u64, fd: c_int,
            mhandle: *mut *mut c_void) = 64,
        deregMr: fnp!(comm: *mut c_void, mhandle: *mut c_void) = 72,
        isend: fnp!(sendComm: *mut c_void, data: *mut c_void, size: c_int, tag: c_int, mhandle: *mut c_void,
            request: *mut *mut c_void) = 80,
        irecv: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut c_int, tags: *mut c_int,
            mhandles: *mut *mut c_void, request: *mut *mut c_void) = 88,
        iflush: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut c_int,
            mhandles: *mut *mut c_void, request: *mut *mut c_void) = 96,
        test: fnp!(request: *mut c_void, done: *mut c_int, sizes: *mut c_int) = 104,
        closeSend: fnp!(sendComm: *mut c_void) = 112,
        closeRecv: fnp!(recvComm: *mut c_void) = 120,
        closeListen: fnp!(listenComm: *mut c_void) = 128,
        getDeviceMr: fnp!(comm: *mut c_void, mhandle: *mut c_void, dptr_mhandle: *mut *mut c_void) = 136,
        irecvConsumed: fnp!(recvComm: *mut c_void, n: c_int, request: *mut c_void) = 144,
    }
}

abi_struct! {
    /// `ncclNet_v8_t` (symbol `ncclNetPlugin_v8`): `regMr` size becomes `size_t`.
    #[derive(Debug)]
    pub struct ncclNet_v8_t, size 152 {
        name: *const c_char = 0,
        init: fnp!(logFunction: ncclDebugLogger_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v8_t) = 24,
        listen: fnp!(dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
        connect: fnp!(dev: c_int, handle: *mut c_void, sendComm: *mut *mut c_void,
            sendDevComm: *mut *mut ncclNetDeviceHandle_v8_t) = 40,
        accept: fnp!(listenComm: *mut c_void, recvComm: *mut *mut c_void,
            recvDevComm: *mut *mut ncclNetDeviceHandle_v8_t) = 48,
        regMr: fnp!(comm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, mhandle: *mut *mut c_void) = 56,
        regMrDmaBuf: fnp!(comm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, offset: u64, fd: c_int,
            mhandle: *mut *mut c_void) = 64,
        deregMr: fnp!(comm: *mut c_void, mhandle: *mut c_void) = 72,
        isend: fnp!(sendComm: *mut c_void, data: *mut c_void, size: c_int, tag: c_int, mhandle: *mut c_void,
            request: *mut *mut c_void) = 80,
        irecv: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut c_int, tags: *mut c_int,
            mhandles: *mut *mut c_void, request: *mut *mut c_void) = 88,
        iflush: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut c_int,
            mhandles: *mut *mut c_void, request: *mut *mut c_void) = 96,
        test: fnp!(request: *mut c_void, done: *mut c_int, sizes: *mut c_int) = 104,
        closeSend: fnp!(sendComm: *mut c_void) = 112,
        closeRecv: fnp!(recvComm: *mut c_void) = 120,
        closeListen: fnp!(listenComm: *mut c_void) = 128,
        getDeviceMr: fnp!(comm: *mut c_void, mhandle: *mut c_void, dptr_mhandle: *mut *mut c_void) = 136,
        irecvConsumed: fnp!(recvComm: *mut c_void, n: c_int, request: *mut c_void) = 144,
    }
}

abi_struct! {
    /// `ncclNet_v9_t` (symbol `ncclNetPlugin_v9`): `isend`/`irecv` sizes become `size_t`;
    /// `makeVDevice` appended.
    #[derive(Debug)]
    pub struct ncclNet_v9_t, size 160 {
        name: *const c_char = 0,
        init: fnp!(logFunction: ncclDebugLogger_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v9_t) = 24,
        listen: fnp!(dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
        connect: fnp!(dev: c_int, handle: *mut c_void, sendComm: *mut *mut c_void,
            sendDevComm: *mut *mut ncclNetDeviceHandle_v9_t) = 40,
        accept: fnp!(listenComm: *mut c_void, recvComm: *mut *mut c_void,
            recvDevComm: *mut *mut ncclNetDeviceHandle_v9_t) = 48,
        regMr: fnp!(comm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, mhandle: *mut *mut c_void) = 56,
        regMrDmaBuf: fnp!(comm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, offset: u64, fd: c_int,
            mhandle: *mut *mut c_void) = 64,
        deregMr: fnp!(comm: *mut c_void, mhandle: *mut c_void) = 72,
        isend: fnp!(sendComm: *mut c_void, data: *mut c_void, size: usize, tag: c_int, mhandle: *mut c_void,
            request: *mut *mut c_void) = 80,
        irecv: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut usize, tags: *mut c_int,
            mhandles: *mut *mut c_void, request: *mut *mut c_void) = 88,
        iflush: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut c_int,
            mhandles: *mut *mut c_void, request: *mut *mut c_void) = 96,
        test: fnp!(request: *mut c_void, done: *mut c_int, sizes: *mut c_int) = 104,
        closeSend: fnp!(sendComm: *mut c_void) = 112,
        closeRecv: fnp!(recvComm: *mut c_void) = 120,
        closeListen: fnp!(listenComm: *mut c_void) = 128,
        getDeviceMr: fnp!(comm: *mut c_void, mhandle: *mut c_void, dptr_mhandle: *mut *mut c_void) = 136,
        irecvConsumed: fnp!(recvComm: *mut c_void, n: c_int, request: *mut c_void) = 144,
        makeVDevice: fnp!(d: *mut c_int, props: *mut ncclNetVDeviceProps_v9_t) = 152,
    }
}

abi_struct! {
    /// `ncclNet_v10_t` (symbol `ncclNetPlugin_v10`): `init` gains the profiler callback,
    /// `connect` gains `config` as its **second** argument, `isend`/`irecv` gain `phandle(s)`.
    #[derive(Debug)]
    pub struct ncclNet_v10_t, size 160 {
        name: *const c_char = 0,
        init: fnp!(logFunction: ncclDebugLogger_t, profFunction: ncclProfilerCallback_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v10_t) = 24,
        listen: fnp!(dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
        connect: fnp!(dev: c_int, config: *mut ncclNetCommConfig_v10_t, handle: *mut c_void,
            sendComm: *mut *mut c_void, sendDevComm: *mut *mut ncclNetDeviceHandle_v10_t) = 40,
        accept: fnp!(listenComm: *mut c_void, recvComm: *mut *mut c_void,
            recvDevComm: *mut *mut ncclNetDeviceHandle_v10_t) = 48,
        regMr: fnp!(comm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, mhandle: *mut *mut c_void) = 56,
        regMrDmaBuf: fnp!(comm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, offset: u64, fd: c_int,
            mhandle: *mut *mut c_void) = 64,
        deregMr: fnp!(comm: *mut c_void, mhandle: *mut c_void) = 72,
        isend: fnp!(sendComm: *mut c_void, data: *mut c_void, size: usize, tag: c_int, mhandle: *mut c_void,
            phandle: *mut c_void, request: *mut *mut c_void) = 80,
        irecv: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut usize, tags: *mut c_int,
            mhandles: *mut *mut c_void, phandles: *mut *mut c_void, request: *mut *mut c_void) = 88,
        iflush: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut c_int,
            mhandles: *mut *mut c_void, request: *mut *mut c_void) = 96,
        test: fnp!(request: *mut c_void, done: *mut c_int, sizes: *mut c_int) = 104,
        closeSend: fnp!(sendComm: *mut c_void) = 112,
        closeRecv: fnp!(recvComm: *mut c_void) = 120,
        closeListen: fnp!(listenComm: *mut c_void) = 128,
        getDeviceMr: fnp!(comm: *mut c_void, mhandle: *mut c_void, dptr_mhandle: *mut *mut c_void) = 136,
        irecvConsumed: fnp!(recvComm: *mut c_void, n: c_int, request: *mut c_void) = 144,
        makeVDevice: fnp!(d: *mut c_int, props: *mut ncclNetVDeviceProps_v10_t) = 152,
    }
}

abi_struct! {
    /// `ncclNet_v11_t` (symbol `ncclNetPlugin_v11`): per-communicator `ctx` from `init`;
    /// `listen`/`connect` take `ctx` first; `connect` loses `config`; `finalize`, `setNetAttr` appended.
    #[derive(Debug)]
    pub struct ncclNet_v11_t, size 176 {
        name: *const c_char = 0,
        init: fnp!(ctx: *mut *mut c_void, commId: u64, config: *mut ncclNetCommConfig_v11_t,
            logFunction: ncclDebugLogger_t, profFunction: ncclProfilerCallback_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v11_t) = 24,
        listen: fnp!(ctx: *mut c_void, dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
        connect: fnp!(ctx: *mut c_void, dev: c_int, handle: *mut c_void, sendComm: *mut *mut c_void,
            sendDevComm: *mut *mut ncclNetDeviceHandle_v11_t) = 40,
        accept: fnp!(listenComm: *mut c_void, recvComm: *mut *mut c_void,
            recvDevComm: *mut *mut ncclNetDeviceHandle_v11_t) = 48,
        regMr: fnp!(comm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, mhandle: *mut *mut c_void) = 56,
        regMrDmaBuf: fnp!(comm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, offset: u64, fd: c_int,
            mhandle: *mut *mut c_void) = 64,
        deregMr: fnp!(comm: *mut c_void, mhandle: *mut c_void) = 72,
        isend: fnp!(sendComm: *mut c_void, data: *mut c_void, size: usize, tag: c_int, mhandle: *mut c_void,
            phandle: *mut c_void, request: *mut *mut c_void) = 80,
        irecv: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut usize, tags: *mut c_int,
            mhandles: *mut *mut c_void, phandles: *mut *mut c_void, request: *mut *mut c_void) = 88,
        iflush: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut c_int,
            mhandles: *mut *mut c_void, request: *mut *mut c_void) = 96,
        test: fnp!(request: *mut c_void, done: *mut c_int, sizes: *mut c_int) = 104,
        closeSend: fnp!(sendComm: *mut c_void) = 112,
        closeRecv: fnp!(recvComm: *mut c_void) = 120,
        closeListen: fnp!(listenComm: *mut c_void) = 128,
        getDeviceMr: fnp!(comm: *mut c_void, mhandle: *mut c_void, dptr_mhandle: *mut *mut c_void) = 136,
        irecvConsumed: fnp!(recvComm: *mut c_void, n: c_int, request: *mut c_void) = 144,
        makeVDevice: fnp!(d: *mut c_int, props: *mut ncclNetVDeviceProps_v11_t) = 152,
        finalize: fnp!(ctx: *mut c_void) = 160,
        setNetAttr: fnp!(ctx: *mut c_void, netAttr: *mut ncclNetAttr_v11_t) = 168,
    }
}

abi_struct! {
    /// `ncclNet_v12_t` (symbol `ncclNetPlugin_v12`; `ncclNet_t` in 2.30.7): v11's slots with
    /// the v12 properties / vProps structs.
    #[derive(Debug)]
    pub struct ncclNet_v12_t, size 176 {
        name: *const c_char = 0,
        init: fnp!(ctx: *mut *mut c_void, commId: u64, config: *mut ncclNetCommConfig_v12_t,
            logFunction: ncclDebugLogger_t, profFunction: ncclProfilerCallback_t) = 8,
        devices: fnp!(ndev: *mut c_int) = 16,
        getProperties: fnp!(dev: c_int, props: *mut ncclNetProperties_v12_t) = 24,
        listen: fnp!(ctx: *mut c_void, dev: c_int, handle: *mut c_void, listenComm: *mut *mut c_void) = 32,
        connect: fnp!(ctx: *mut c_void, dev: c_int, handle: *mut c_void, sendComm: *mut *mut c_void,
            sendDevComm: *mut *mut ncclNetDeviceHandle_v12_t) = 40,
        accept: fnp!(listenComm: *mut c_void, recvComm: *mut *mut c_void,
            recvDevComm: *mut *mut ncclNetDeviceHandle_v12_t) = 48,
        regMr: fnp!(comm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, mhandle: *mut *mut c_void) = 56,
        regMrDmaBuf: fnp!(comm: *mut c_void, data: *mut c_void, size: usize, r#type: c_int, offset: u64, fd: c_int,
            mhandle: *mut *mut c_void) = 64,
        deregMr: fnp!(comm: *mut c_void, mhandle: *mut c_void) = 72,
        isend: fnp!(sendComm: *mut c_void, data: *mut c_void, size: usize, tag: c_int, mhandle: *mut c_void,
            phandle: *mut c_void, request: *mut *mut c_void) = 80,
        irecv: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut usize, tags: *mut c_int,
            mhandles: *mut *mut c_void, phandles: *mut *mut c_void, request: *mut *mut c_void) = 88,
        iflush: fnp!(recvComm: *mut c_void, n: c_int, data: *mut *mut c_void, sizes: *mut c_int,
            mhandles: *mut *mut c_void, request: *mut *mut c_void) = 96,
        test: fnp!(request: *mut c_void, done: *mut c_int, sizes: *mut c_int) = 104,
        closeSend: fnp!(sendComm: *mut c_void) = 112,
        closeRecv: fnp!(recvComm: *mut c_void) = 120,
        closeListen: fnp!(listenComm: *mut c_void) = 128,
        getDeviceMr: fnp!(comm: *mut c_void, mhandle: *mut c_void, dptr_mhandle: *mut *mut c_void) = 136,
        irecvConsumed: fnp!(recvComm: *mut c_void, n: c_int, request: *mut c_void) = 144,
        makeVDevice: fnp!(d: *mut c_int, props: *mut ncclNetVDeviceProps_v12_t) = 152,
        finalize: fnp!(ctx: *mut c_void) = 160,
        setNetAttr: fnp!(ctx: *mut c_void, netAttr: *mut ncclNetAttr_v12_t) = 168,
    }
}

/// `ncclNet_t` inside NCCL 2.30.7.
pub type ncclNet_t = ncclNet_v12_t;

/// Net plugin data symbols with their version, in NCCL 2.30.7's search order (first hit wins).
pub const NET_PLUGIN_SYMBOLS: [(&CStr, u32); 7] = [
    (c"ncclNetPlugin_v12", 12),
    (c"ncclNetPlugin_v11", 11),
    (c"ncclNetPlugin_v10", 10),
    (c"ncclNetPlugin_v9", 9),
    (c"ncclNetPlugin_v8", 8),
    (c"ncclNetPlugin_v7", 7),
    (c"ncclNetPlugin_v6", 6),
];
