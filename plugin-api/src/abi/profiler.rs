//! `ncclProfiler_v1_t` … `ncclProfiler_v6_t`, their event descriptors, state
//! arguments, event type bits and states, and the payloads the built-in net
//! plugins send through `ncclProfilerCallback_t` (reference §3.2).
//!
//! Sources: NCCL 2.30.7 `src/include/plugin/nccl_profiler.h`,
//! `src/include/plugin/profiler/profiler_v{1..6}.h`, `.../profiler/net_ib_v1.h`,
//! `.../profiler/net_socket_v1.h`. The anonymous unions of the C descriptors are
//! the named member `u` here; nested struct offsets are pinned as absolute
//! offsets from the start of the descriptor (`base 24`).

use std::ffi::{CStr, c_char, c_int, c_void};

use super::common::{abi_struct, abi_union, ncclDebugLogger_t, ncclResult_t};
use super::net::fnp;

/// `ncclProfileGroup` event type bit (v1+).
pub const ncclProfileGroup: u64 = 1 << 0;
/// `ncclProfileColl` (v1+)
pub const ncclProfileColl: u64 = 1 << 1;
/// `ncclProfileP2p` (v1+)
pub const ncclProfileP2p: u64 = 1 << 2;
/// `ncclProfileProxyOp` (v1+)
pub const ncclProfileProxyOp: u64 = 1 << 3;
/// `ncclProfileProxyStep` (v1+)
pub const ncclProfileProxyStep: u64 = 1 << 4;
/// `ncclProfileProxyCtrl` (v1+)
pub const ncclProfileProxyCtrl: u64 = 1 << 5;
/// `ncclProfileKernelCh` (v3+)
pub const ncclProfileKernelCh: u64 = 1 << 6;
/// `ncclProfileNetPlugin` (v3+)
pub const ncclProfileNetPlugin: u64 = 1 << 7;
/// `ncclProfileGroupApi` (v5+)
pub const ncclProfileGroupApi: u64 = 1 << 8;
/// `ncclProfileCollApi` (v5+)
pub const ncclProfileCollApi: u64 = 1 << 9;
/// `ncclProfileP2pApi` (v5+)
pub const ncclProfileP2pApi: u64 = 1 << 10;
/// `ncclProfileKernelLaunch` (v5+)
pub const ncclProfileKernelLaunch: u64 = 1 << 11;
/// `ncclProfileCeColl` (v6)
pub const ncclProfileCeColl: u64 = 1 << 12;
/// `ncclProfileCeSync` (v6)
pub const ncclProfileCeSync: u64 = 1 << 13;
/// `ncclProfileCeBatch` (v6)
pub const ncclProfileCeBatch: u64 = 1 << 14;

/// `ncclProfilerEventState_t` (one 4-byte enum shared by all versions), kept as `int`.
pub type ncclProfilerEventState_t = i32;
/// `ncclProfilerEventState_v1_t` = the shared enum.
pub type ncclProfilerEventState_v1_t = ncclProfilerEventState_t;
/// `ncclProfilerEventState_v2_t`
pub type ncclProfilerEventState_v2_t = ncclProfilerEventState_t;
/// `ncclProfilerEventState_v3_t`
pub type ncclProfilerEventState_v3_t = ncclProfilerEventState_t;
/// `ncclProfilerEventState_v4_t`
pub type ncclProfilerEventState_v4_t = ncclProfilerEventState_t;
/// `ncclProfilerEventState_v5_t`
pub type ncclProfilerEventState_v5_t = ncclProfilerEventState_t;
/// `ncclProfilerEventState_v6_t`
pub type ncclProfilerEventState_v6_t = ncclProfilerEventState_t;

/// Declares `ncclProfilerEventState_t` constants.
macro_rules! states {
    ($($name:ident = $v:literal),* $(,)?) => {
        $( #[doc = concat!("`", stringify!($name), "` = ", stringify!($v))]
           pub const $name: ncclProfilerEventState_t = $v; )*
    };
}
states! {
    ncclProfilerProxyOpSendPosted = 0,
    ncclProfilerProxyOpSendRemFifoWait = 1,
    ncclProfilerProxyOpSendTransmitted = 2,
    ncclProfilerProxyOpSendDone = 3,
    ncclProfilerProxyOpRecvPosted = 4,
    ncclProfilerProxyOpRecvReceived = 5,
    ncclProfilerProxyOpRecvTransmitted = 6,
    ncclProfilerProxyOpRecvDone = 7,
    ncclProfilerProxyStepSendGPUWait = 8,
    ncclProfilerProxyStepSendWait = 9,
    ncclProfilerProxyStepRecvWait = 10,
    ncclProfilerProxyStepRecvFlushWait = 11,
    ncclProfilerProxyStepRecvGPUWait = 12,
    ncclProfilerProxyCtrlIdle = 13,
    ncclProfilerProxyCtrlActive = 14,
    ncclProfilerProxyCtrlSleep = 15,
    ncclProfilerProxyCtrlWakeup = 16,
    ncclProfilerProxyCtrlAppend = 17,
    ncclProfilerProxyCtrlAppendEnd = 18,
    ncclProfilerProxyOpInProgress_v4 = 19,
    ncclProfilerProxyStepSendPeerWait_v4 = 20,
    ncclProfilerNetPluginUpdate = 21,
    ncclProfilerKernelChStop = 22,
    ncclProfilerGroupStartApiStop = 23,
    ncclProfilerGroupEndApiStart = 24,
    ncclProfilerCeCollStart = 25,
    ncclProfilerCeCollComplete = 26,
    ncclProfilerCeSyncStart = 27,
    ncclProfilerCeSyncComplete = 28,
    ncclProfilerCeBatchStart = 29,
    ncclProfilerCeBatchComplete = 30,
}

/// `ncclPid_t` (`pid_t` on Linux).
pub type ncclPid_t = i32;

// ---- sub-structs shared across versions ----

abi_struct! {
    /// `proxyOp` member of the event descriptors (identical v1 … v6).
    #[derive(Debug)]
    pub struct ncclProfilerProxyOpDescr_v1_t, size 24, base 24 {
        pid: ncclPid_t = 24,
        channelId: u8 = 28,
        peer: c_int = 32,
        nSteps: c_int = 36,
        chunkSize: c_int = 40,
        isSend: c_int = 44,
    }
}
abi_struct! {
    /// `proxyStep` member of the event descriptors (identical v1 … v6).
    #[derive(Debug)]
    pub struct ncclProfilerProxyStepDescr_v1_t, size 4, base 24 {
        step: c_int = 24,
    }
}
abi_struct! {
    /// `netPlugin` member of the event descriptors (identical v3 … v6).
    #[derive(Debug)]
    pub struct ncclProfilerNetPluginDescr_v3_t, size 16, base 24 {
        id: i64 = 24,
        data: *mut c_void = 32,
    }
}

// ---- v1 ----

abi_struct! {
    /// `coll` member of `ncclProfilerEventDescr_v1_t`.
    #[derive(Debug)]
    pub struct ncclProfilerCollDescr_v1_t, size 96, base 24 {
        name: *const c_char = 24,
        commHash: u64 = 32,
        seqNumber: u64 = 40,
        func: u8 = 48,
        sendBuff: *const c_void = 56,
        recvBuff: *mut c_void = 64,
        count: usize = 72,
        root: c_int = 80,
        datatype: u8 = 84,
        op: u32 = 88,
        trafficBytes: usize = 96,
        nMaxChannels: u8 = 104,
        nWarps: u8 = 105,
        algo: u8 = 106,
        proto: u8 = 107,
        isCollnet: c_int = 108,
        isNvls: c_int = 112,
    }
}
abi_struct! {
    /// `p2p` member of `ncclProfilerEventDescr_v1_t`.
    #[derive(Debug)]
    pub struct ncclProfilerP2pDescr_v1_t, size 56, base 24 {
        name: *const c_char = 24,
        commHash: u64 = 32,
        func: u8 = 40,
        buff: *mut c_void = 48,
        datatype: u8 = 56,
        count: usize = 64,
        peer: c_int = 72,
    }
}
abi_union! {
    /// Anonymous union of `ncclProfilerEventDescr_v1_t`.
    pub union ncclProfilerEventDescr_v1_u, size 96 {
        coll: ncclProfilerCollDescr_v1_t,
        p2p: ncclProfilerP2pDescr_v1_t,
        proxyOp: ncclProfilerProxyOpDescr_v1_t,
        proxyStep: ncclProfilerProxyStepDescr_v1_t,
    }
}
abi_struct! {
    /// `ncclProfilerEventDescr_v1_t` (`type` is `uint8_t`).
    #[derive(Debug)]
    pub struct ncclProfilerEventDescr_v1_t, size 120 {
        r#type: u8 = 0,
        parentObj: *mut c_void = 8,
        rank: c_int = 16,
        u: ncclProfilerEventDescr_v1_u = 24,
    }
}

// ---- v2 ----

abi_struct! {
    /// `coll` member of `ncclProfilerEventDescr_v2_t` (func/datatype/algo/proto are strings).
    #[derive(Debug)]
    pub struct ncclProfilerCollDescr_v2_t, size 104, base 24 {
        name: *const c_char = 24,
        commHash: u64 = 32,
        seqNumber: u64 = 40,
        func: *const c_char = 48,
        sendBuff: *const c_void = 56,
        recvBuff: *mut c_void = 64,
        count: usize = 72,
        root: c_int = 80,
        datatype: *const c_char = 88,
        trafficBytes: usize = 96,
        nMaxChannels: u8 = 104,
        nWarps: u8 = 105,
        algo: *const c_char = 112,
        proto: *const c_char = 120,
    }
}
abi_struct! {
    /// `p2p` member of `ncclProfilerEventDescr_v2_t` (= v3).
    #[derive(Debug)]
    pub struct ncclProfilerP2pDescr_v2_t, size 56, base 24 {
        name: *const c_char = 24,
        commHash: u64 = 32,
        func: *const c_char = 40,
        buff: *mut c_void = 48,
        datatype: *const c_char = 56,
        count: usize = 64,
        peer: c_int = 72,
    }
}
abi_union! {
    /// Anonymous union of `ncclProfilerEventDescr_v2_t`.
    pub union ncclProfilerEventDescr_v2_u, size 104 {
        coll: ncclProfilerCollDescr_v2_t,
        p2p: ncclProfilerP2pDescr_v2_t,
        proxyOp: ncclProfilerProxyOpDescr_v1_t,
        proxyStep: ncclProfilerProxyStepDescr_v1_t,
    }
}
abi_struct! {
    /// `ncclProfilerEventDescr_v2_t`.
    #[derive(Debug)]
    pub struct ncclProfilerEventDescr_v2_t, size 128 {
        r#type: u8 = 0,
        parentObj: *mut c_void = 8,
        rank: c_int = 16,
        u: ncclProfilerEventDescr_v2_u = 24,
    }
}

// ---- v3 ----

abi_struct! {
    /// `coll` member of `ncclProfilerEventDescr_v3_t` (drops `trafficBytes`).
    #[derive(Debug)]
    pub struct ncclProfilerCollDescr_v3_t, size 96, base 24 {
        name: *const c_char = 24,
        commHash: u64 = 32,
        seqNumber: u64 = 40,
        func: *const c_char = 48,
        sendBuff: *const c_void = 56,
        recvBuff: *mut c_void = 64,
        count: usize = 72,
        root: c_int = 80,
        datatype: *const c_char = 88,
        nMaxChannels: u8 = 96,
        nWarps: u8 = 97,
        algo: *const c_char = 104,
        proto: *const c_char = 112,
    }
}
abi_struct! {
    /// `kernelCh` member of `ncclProfilerEventDescr_v3_t`.
    #[derive(Debug)]
    pub struct ncclProfilerKernelChDescr_v3_t, size 1, base 24 {
        channelId: u8 = 24,
    }
}
abi_union! {
    /// Anonymous union of `ncclProfilerEventDescr_v3_t`.
    pub union ncclProfilerEventDescr_v3_u, size 96 {
        coll: ncclProfilerCollDescr_v3_t,
        p2p: ncclProfilerP2pDescr_v2_t,
        proxyOp: ncclProfilerProxyOpDescr_v1_t,
        proxyStep: ncclProfilerProxyStepDescr_v1_t,
        kernelCh: ncclProfilerKernelChDescr_v3_t,
        netPlugin: ncclProfilerNetPluginDescr_v3_t,
    }
}
abi_struct! {
    /// `ncclProfilerEventDescr_v3_t`.
    #[derive(Debug)]
    pub struct ncclProfilerEventDescr_v3_t, size 120 {
        r#type: u8 = 0,
        parentObj: *mut c_void = 8,
        rank: c_int = 16,
        u: ncclProfilerEventDescr_v3_u = 24,
    }
}

// ---- v4 ----

abi_struct! {
    /// `coll` member of `ncclProfilerEventDescr_v4_t` (drops `name`/`commHash`).
    #[derive(Debug)]
    pub struct ncclProfilerCollDescr_v4_t, size 80, base 24 {
        seqNumber: u64 = 24,
        func: *const c_char = 32,
        sendBuff: *const c_void = 40,
        recvBuff: *mut c_void = 48,
        count: usize = 56,
        root: c_int = 64,
        datatype: *const c_char = 72,
        nChannels: u8 = 80,
        nWarps: u8 = 81,
        algo: *const c_char = 88,
        proto: *const c_char = 96,
    }
}
abi_struct! {
    /// `p2p` member of `ncclProfilerEventDescr_v4_t`.
    #[derive(Debug)]
    pub struct ncclProfilerP2pDescr_v4_t, size 40, base 24 {
        func: *const c_char = 24,
        buff: *mut c_void = 32,
        datatype: *const c_char = 40,
        count: usize = 48,
        peer: c_int = 56,
        nChannels: u8 = 60,
    }
}
abi_struct! {
    /// `kernelCh` member of `ncclProfilerEventDescr_v4_t` (= v5, v6).
    #[derive(Debug)]
    pub struct ncclProfilerKernelChDescr_v4_t, size 16, base 24 {
        channelId: u8 = 24,
        pTimer: u64 = 32,
    }
}
abi_union! {
    /// Anonymous union of `ncclProfilerEventDescr_v4_t`.
    pub union ncclProfilerEventDescr_v4_u, size 80 {
        coll: ncclProfilerCollDescr_v4_t,
        p2p: ncclProfilerP2pDescr_v4_t,
        proxyOp: ncclProfilerProxyOpDescr_v1_t,
        proxyStep: ncclProfilerProxyStepDescr_v1_t,
        kernelCh: ncclProfilerKernelChDescr_v4_t,
        netPlugin: ncclProfilerNetPluginDescr_v3_t,
    }
}
abi_struct! {
    /// `ncclProfilerEventDescr_v4_t`.
    #[derive(Debug)]
    pub struct ncclProfilerEventDescr_v4_t, size 104 {
        r#type: u8 = 0,
        parentObj: *mut c_void = 8,
        rank: c_int = 16,
        u: ncclProfilerEventDescr_v4_u = 24,
    }
}

// ---- v5 ----

abi_struct! {
    /// `groupApi` member of `ncclProfilerEventDescr_v5_t` (= v6).
    #[derive(Debug)]
    pub struct ncclProfilerGroupApiDescr_v5_t, size 8, base 24 {
        graphCaptured: bool = 24,
        groupDepth: c_int = 28,
    }
}
abi_struct! {
    /// `collApi` member of `ncclProfilerEventDescr_v5_t` (= v6).
    #[derive(Debug)]
    pub struct ncclProfilerCollApiDescr_v5_t, size 48, base 24 {
        func: *const c_char = 24,
        count: usize = 32,
        datatype: *const c_char = 40,
        root: c_int = 48,
        stream: *mut c_void = 56,
        graphCaptured: bool = 64,
    }
}
abi_struct! {
    /// `p2pApi` member of `ncclProfilerEventDescr_v5_t` (= v6).
    #[derive(Debug)]
    pub struct ncclProfilerP2pApiDescr_v5_t, size 40, base 24 {
        func: *const c_char = 24,
        count: usize = 32,
        datatype: *const c_char = 40,
        stream: *mut c_void = 48,
        graphCaptured: bool = 56,
    }
}
abi_struct! {
    /// `kernelLaunch` member of `ncclProfilerEventDescr_v5_t` (= v6).
    #[derive(Debug)]
    pub struct ncclProfilerKernelLaunchDescr_v5_t, size 8, base 24 {
        stream: *mut c_void = 24,
    }
}
abi_struct! {
    /// `coll` member of `ncclProfilerEventDescr_v5_t` (= v6): v4 plus `parentGroup`.
    #[derive(Debug)]
    pub struct ncclProfilerCollDescr_v5_t, size 88, base 24 {
        seqNumber: u64 = 24,
        func: *const c_char = 32,
        sendBuff: *const c_void = 40,
        recvBuff: *mut c_void = 48,
        count: usize = 56,
        root: c_int = 64,
        datatype: *const c_char = 72,
        nChannels: u8 = 80,
        nWarps: u8 = 81,
        algo: *const c_char = 88,
        proto: *const c_char = 96,
        parentGroup: *mut c_void = 104,
    }
}
abi_struct! {
    /// `p2p` member of `ncclProfilerEventDescr_v5_t` (= v6): v4 plus `parentGroup`.
    #[derive(Debug)]
    pub struct ncclProfilerP2pDescr_v5_t, size 48, base 24 {
        func: *const c_char = 24,
        buff: *mut c_void = 32,
        datatype: *const c_char = 40,
        count: usize = 48,
        peer: c_int = 56,
        nChannels: u8 = 60,
        parentGroup: *mut c_void = 64,
    }
}
abi_union! {
    /// Anonymous union of `ncclProfilerEventDescr_v5_t`.
    pub union ncclProfilerEventDescr_v5_u, size 88 {
        groupApi: ncclProfilerGroupApiDescr_v5_t,
        collApi: ncclProfilerCollApiDescr_v5_t,
        p2pApi: ncclProfilerP2pApiDescr_v5_t,
        kernelLaunch: ncclProfilerKernelLaunchDescr_v5_t,
        coll: ncclProfilerCollDescr_v5_t,
        p2p: ncclProfilerP2pDescr_v5_t,
        proxyOp: ncclProfilerProxyOpDescr_v1_t,
        proxyStep: ncclProfilerProxyStepDescr_v1_t,
        kernelCh: ncclProfilerKernelChDescr_v4_t,
        netPlugin: ncclProfilerNetPluginDescr_v3_t,
    }
}
abi_struct! {
    /// `ncclProfilerEventDescr_v5_t` (`type` widened to `uint64_t`).
    #[derive(Debug)]
    pub struct ncclProfilerEventDescr_v5_t, size 112 {
        r#type: u64 = 0,
        parentObj: *mut c_void = 8,
        rank: c_int = 16,
        u: ncclProfilerEventDescr_v5_u = 24,
    }
}

// ---- v6 ----

abi_struct! {
    /// `ceColl` member of `ncclProfilerEventDescr_v6_t` (copy-engine collective).
    #[derive(Debug)]
    pub struct ncclProfilerCeCollDescr_v6_t, size 88, base 24 {
        seqNumber: u64 = 24,
        func: *const c_char = 32,
        sendBuff: *const c_void = 40,
        recvBuff: *mut c_void = 48,
        count: usize = 56,
        root: c_int = 64,
        datatype: *const c_char = 72,
        syncStrategy: *const c_char = 80,
        intraBatchSync: bool = 88,
        batchSize: u32 = 92,
        numBatches: u32 = 96,
        ceSeqNum: u32 = 100,
        stream: *mut c_void = 104,
    }
}
abi_struct! {
    /// `ceCollSync` member of `ncclProfilerEventDescr_v6_t`.
    #[derive(Debug)]
    pub struct ncclProfilerCeCollSyncDescr_v6_t, size 8, base 24 {
        isComplete: bool = 24,
        nRanks: c_int = 28,
    }
}
abi_struct! {
    /// `ceCollBatch` member of `ncclProfilerEventDescr_v6_t`.
    #[derive(Debug)]
    pub struct ncclProfilerCeCollBatchDescr_v6_t, size 24, base 24 {
        numOps: c_int = 24,
        totalBytes: usize = 32,
        useIntraSync: bool = 40,
    }
}
abi_union! {
    /// Anonymous union of `ncclProfilerEventDescr_v6_t`.
    pub union ncclProfilerEventDescr_v6_u, size 88 {
        groupApi: ncclProfilerGroupApiDescr_v5_t,
        collApi: ncclProfilerCollApiDescr_v5_t,
        p2pApi: ncclProfilerP2pApiDescr_v5_t,
        kernelLaunch: ncclProfilerKernelLaunchDescr_v5_t,
        coll: ncclProfilerCollDescr_v5_t,
        p2p: ncclProfilerP2pDescr_v5_t,
        proxyOp: ncclProfilerProxyOpDescr_v1_t,
        proxyStep: ncclProfilerProxyStepDescr_v1_t,
        kernelCh: ncclProfilerKernelChDescr_v4_t,
        netPlugin: ncclProfilerNetPluginDescr_v3_t,
        ceColl: ncclProfilerCeCollDescr_v6_t,
        ceCollSync: ncclProfilerCeCollSyncDescr_v6_t,
        ceCollBatch: ncclProfilerCeCollBatchDescr_v6_t,
    }
}
abi_struct! {
    /// `ncclProfilerEventDescr_v6_t` (adds copy-engine events; size unchanged from v5).
    #[derive(Debug)]
    pub struct ncclProfilerEventDescr_v6_t, size 112 {
        r#type: u64 = 0,
        parentObj: *mut c_void = 8,
        rank: c_int = 16,
        u: ncclProfilerEventDescr_v6_u = 24,
    }
}

// ---- state arguments ----

abi_struct! {
    /// `proxyOp` member of `ncclProfilerEventStateArgs_v1_t`.
    #[derive(Debug)]
    pub struct ncclProfilerProxyOpStateArgs_v1_t, size 16 {
        transSize: usize = 0,
        steps: c_int = 8,
    }
}
abi_struct! {
    /// `proxyCtrl` member of the state-argument unions (all versions).
    #[derive(Debug)]
    pub struct ncclProfilerProxyCtrlStateArgs_v1_t, size 4 {
        appendedProxyOps: c_int = 0,
    }
}
abi_union! {
    /// `ncclProfilerEventStateArgs_v1_t` (= v2, v3).
    pub union ncclProfilerEventStateArgs_v1_t, size 16 {
        proxyOp: ncclProfilerProxyOpStateArgs_v1_t,
        proxyCtrl: ncclProfilerProxyCtrlStateArgs_v1_t,
    }
}
/// `ncclProfilerEventStateArgs_v2_t` = v1.
pub type ncclProfilerEventStateArgs_v2_t = ncclProfilerEventStateArgs_v1_t;
/// `ncclProfilerEventStateArgs_v3_t` = v1.
pub type ncclProfilerEventStateArgs_v3_t = ncclProfilerEventStateArgs_v1_t;

abi_struct! {
    /// `proxyStep` member of `ncclProfilerEventStateArgs_v4_t`.
    #[derive(Debug)]
    pub struct ncclProfilerProxyStepStateArgs_v4_t, size 8 {
        transSize: usize = 0,
    }
}
abi_struct! {
    /// `netPlugin` member of `ncclProfilerEventStateArgs_v4_t`.
    #[derive(Debug)]
    pub struct ncclProfilerNetPluginStateArgs_v4_t, size 8 {
        data: *mut c_void = 0,
    }
}
abi_struct! {
    /// `kernelCh` member of `ncclProfilerEventStateArgs_v4_t`.
    #[derive(Debug)]
    pub struct ncclProfilerKernelChStateArgs_v4_t, size 8 {
        pTimer: u64 = 0,
    }
}
abi_union! {
    /// `ncclProfilerEventStateArgs_v4_t` (= v5, v6).
    pub union ncclProfilerEventStateArgs_v4_t, size 8 {
        proxyStep: ncclProfilerProxyStepStateArgs_v4_t,
        proxyCtrl: ncclProfilerProxyCtrlStateArgs_v1_t,
        netPlugin: ncclProfilerNetPluginStateArgs_v4_t,
        kernelCh: ncclProfilerKernelChStateArgs_v4_t,
    }
}
/// `ncclProfilerEventStateArgs_v5_t` = v4.
pub type ncclProfilerEventStateArgs_v5_t = ncclProfilerEventStateArgs_v4_t;
/// `ncclProfilerEventStateArgs_v6_t` = v5.
pub type ncclProfilerEventStateArgs_v6_t = ncclProfilerEventStateArgs_v4_t;

// ---- vtables ----

/// Generates a profiler vtable: `name`, `init`, `startEvent`, `stopEvent`, `recordEventState`, `finalize`.
macro_rules! profiler_vtable {
    ($(#[$m:meta])* $name:ident, $descr:ty, $args:ty, init: $init:ty) => {
        abi_struct! {
            $(#[$m])*
            #[derive(Debug)]
            pub struct $name, size 48 {
                name: *const c_char = 0,
                init: $init = 8,
                startEvent: fnp!(context: *mut c_void, eHandle: *mut *mut c_void, eDescr: *mut $descr) = 16,
                stopEvent: fnp!(eHandle: *mut c_void) = 24,
                recordEventState: fnp!(eHandle: *mut c_void, eState: ncclProfilerEventState_t,
                    eStateArgs: *mut $args) = 32,
                finalize: fnp!(context: *mut c_void) = 40,
            }
        }
    };
}

profiler_vtable!(
    /// `ncclProfiler_v1_t` (symbol `ncclProfiler_v1`).
    ncclProfiler_v1_t, ncclProfilerEventDescr_v1_t, ncclProfilerEventStateArgs_v1_t,
    init: fnp!(context: *mut *mut c_void, eActivationMask: *mut c_int)
);
profiler_vtable!(
    /// `ncclProfiler_v2_t` (symbol `ncclProfiler_v2`).
    ncclProfiler_v2_t, ncclProfilerEventDescr_v2_t, ncclProfilerEventStateArgs_v2_t,
    init: fnp!(context: *mut *mut c_void, eActivationMask: *mut c_int)
);
profiler_vtable!(
    /// `ncclProfiler_v3_t` (symbol `ncclProfiler_v3`).
    ncclProfiler_v3_t, ncclProfilerEventDescr_v3_t, ncclProfilerEventStateArgs_v3_t,
    init: fnp!(context: *mut *mut c_void, eActivationMask: *mut c_int)
);
profiler_vtable!(
    /// `ncclProfiler_v4_t` (symbol `ncclProfiler_v4`): `init` gains comm info and the logger.
    ncclProfiler_v4_t, ncclProfilerEventDescr_v4_t, ncclProfilerEventStateArgs_v4_t,
    init: fnp!(context: *mut *mut c_void, eActivationMask: *mut c_int, commName: *const c_char, commHash: u64,
        nNodes: c_int, nranks: c_int, rank: c_int, logfn: ncclDebugLogger_t)
);
profiler_vtable!(
    /// `ncclProfiler_v5_t` (symbol `ncclProfiler_v5`): `commId` moved to the 2nd `init` parameter.
    ncclProfiler_v5_t, ncclProfilerEventDescr_v5_t, ncclProfilerEventStateArgs_v5_t,
    init: fnp!(context: *mut *mut c_void, commId: u64, eActivationMask: *mut c_int, commName: *const c_char,
        nNodes: c_int, nranks: c_int, rank: c_int, logfn: ncclDebugLogger_t)
);
profiler_vtable!(
    /// `ncclProfiler_v6_t` (symbol `ncclProfiler_v6`; `ncclProfiler_t` in 2.30.7).
    ncclProfiler_v6_t, ncclProfilerEventDescr_v6_t, ncclProfilerEventStateArgs_v6_t,
    init: fnp!(context: *mut *mut c_void, commId: u64, eActivationMask: *mut c_int, commName: *const c_char,
        nNodes: c_int, nranks: c_int, rank: c_int, logfn: ncclDebugLogger_t)
);

/// `ncclProfiler_t` inside NCCL 2.30.7.
pub type ncclProfiler_t = ncclProfiler_v6_t;

/// Profiler plugin data symbols with their version, in NCCL 2.30.7's search order
/// (no `Plugin` in the name).
pub const PROFILER_PLUGIN_SYMBOLS: [(&CStr, u32); 6] = [
    (c"ncclProfiler_v6", 6),
    (c"ncclProfiler_v5", 5),
    (c"ncclProfiler_v4", 4),
    (c"ncclProfiler_v3", 3),
    (c"ncclProfiler_v2", 2),
    (c"ncclProfiler_v1", 1),
];

// ---- net-plugin-defined profiler payloads ----

/// `NCCL_PROFILER_NET_VER_MASK`: descriptor version bits of `pluginId`.
pub const NCCL_PROFILER_NET_VER_MASK: u32 = 0x0000_ffff;
/// `NCCL_PROFILER_NET_TYPE_MASK`: network type bits of `pluginId`.
pub const NCCL_PROFILER_NET_TYPE_MASK: u32 = 0xffff_0000;
/// `NCCL_PROFILER_NET_TYPE_IB`
pub const NCCL_PROFILER_NET_TYPE_IB: u32 = 1 << 16;
/// `NCCL_PROFILER_NET_TYPE_SOCK`
pub const NCCL_PROFILER_NET_TYPE_SOCK: u32 = 2 << 16;
/// `ncclProfileQp`: event type of `ncclProfilerNetIbDescr_v1_t`.
pub const ncclProfileQp: u8 = 1 << 0;
/// `ncclProfileSocket`: event type of `ncclProfilerNetSockDescr_v1_t`.
pub const ncclProfileSocket: u8 = 1 << 0;

abi_struct! {
    /// `qp` member of `ncclProfilerNetIbDescr_v1_t`.
    #[derive(Debug)]
    pub struct ncclProfilerNetIbQpDescr_v1_t, size 32, base 8 {
        device: c_int = 8,
        wr_id: u64 = 16,
        opcode: c_int = 24,
        qpNum: c_int = 28,
        length: usize = 32,
    }
}
abi_union! {
    /// Anonymous union of `ncclProfilerNetIbDescr_v1_t`.
    pub union ncclProfilerNetIbDescr_v1_u, size 32 {
        qp: ncclProfilerNetIbQpDescr_v1_t,
    }
}
abi_struct! {
    /// `ncclProfilerNetIbDescr_v1_t` (`net_ib_v1.h`): extData of the built-in IB plugin.
    #[derive(Debug)]
    pub struct ncclProfilerNetIbDescr_v1_t, size 40 {
        r#type: u8 = 0,
        u: ncclProfilerNetIbDescr_v1_u = 8,
    }
}
abi_struct! {
    /// `sock` member of `ncclProfilerNetSockDescr_v1_t`.
    #[derive(Debug)]
    pub struct ncclProfilerNetSockSockDescr_v1_t, size 16, base 8 {
        fd: c_int = 8,
        op: c_int = 12,
        length: usize = 16,
    }
}
abi_union! {
    /// Anonymous union of `ncclProfilerNetSockDescr_v1_t`.
    pub union ncclProfilerNetSockDescr_v1_u, size 16 {
        sock: ncclProfilerNetSockSockDescr_v1_t,
    }
}
abi_struct! {
    /// `ncclProfilerNetSockDescr_v1_t` (`net_socket_v1.h`): extData of the built-in socket plugin.
    #[derive(Debug)]
    pub struct ncclProfilerNetSockDescr_v1_t, size 24 {
        r#type: u8 = 0,
        u: ncclProfilerNetSockDescr_v1_u = 8,
    }
}

/// Absolute offsets through the unions, as listed in the reference tables (spot checks
/// on top of the per-struct `base` checks).
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(ncclProfilerEventDescr_v1_t, u.coll.isNvls) == 112);
    assert!(offset_of!(ncclProfilerEventDescr_v2_t, u.coll.proto) == 120);
    assert!(offset_of!(ncclProfilerEventDescr_v3_t, u.netPlugin.data) == 32);
    assert!(offset_of!(ncclProfilerEventDescr_v4_t, u.p2p.nChannels) == 60);
    assert!(offset_of!(ncclProfilerEventDescr_v5_t, u.coll.parentGroup) == 104);
    assert!(offset_of!(ncclProfilerEventDescr_v6_t, u.ceColl.stream) == 104);
    assert!(offset_of!(ncclProfilerEventDescr_v6_t, u.ceCollBatch.useIntraSync) == 40);
    assert!(offset_of!(ncclProfilerNetIbDescr_v1_t, u.qp.length) == 32);
    assert!(offset_of!(ncclProfilerNetSockDescr_v1_t, u.sock.length) == 16);
};
