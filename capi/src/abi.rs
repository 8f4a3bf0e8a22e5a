//! The data types of `nccl.h` (NCCL 2.30.7 `src/nccl.h.in`) in Rust: the
//! structs with their C layout (checked by `size_of`/`offset_of` below and by
//! a C program compiled against the generated header), the opaque handles,
//! and the integer macros. `build.rs` runs cbindgen over this file and
//! `exports.rs`; the enums come from `enums.rs` and the function-like macros
//! from `header/`.
//!
//! The enum types are `c_int` here: a C caller may pass any `int`, and a value
//! outside the enum must be an error the library reports, not undefined
//! behaviour in Rust.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint};

/// `NCCL_MAJOR`: the NCCL API version this library implements.
pub const NCCL_MAJOR: c_int = 2;
/// `NCCL_MINOR`.
pub const NCCL_MINOR: c_int = 30;
/// `NCCL_PATCH`.
pub const NCCL_PATCH: c_int = 7;
/// `NCCL_VERSION_CODE` (`NCCL_VERSION(2, 30, 7)` = 2·10000 + 30·100 + 7).
pub const NCCL_VERSION_CODE: c_int = 23007;
/// `NCCL_UNIQUE_ID_BYTES`.
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;
/// `NCCL_SPLIT_NOCOLOR`: the color of a rank that joins no communicator in `ncclCommSplit`.
pub const NCCL_SPLIT_NOCOLOR: c_int = -1;
/// `NCCL_API_MAGIC`: `ncclConfig_t.magic` as `NCCL_CONFIG_INITIALIZER` sets it.
pub const NCCL_API_MAGIC: c_uint = 0xcafebeef;
/// `NCCL_WIN_DEFAULT` (window registration flags).
pub const NCCL_WIN_DEFAULT: c_int = 0x00;
/// `NCCL_WIN_COLL_SYMMETRIC`.
pub const NCCL_WIN_COLL_SYMMETRIC: c_int = 0x01;
/// `NCCL_WIN_STRICT_ORDERING`.
pub const NCCL_WIN_STRICT_ORDERING: c_int = 0x02;
/// `NCCL_WIN_GIN_ONLY`.
pub const NCCL_WIN_GIN_ONLY: c_int = 0x04;
/// `NCCL_WIN_REQUIRED_ALIGNMENT`.
pub const NCCL_WIN_REQUIRED_ALIGNMENT: c_int = 4096;
/// `NCCL_CTA_POLICY_DEFAULT`.
pub const NCCL_CTA_POLICY_DEFAULT: c_int = 0x00;
/// `NCCL_CTA_POLICY_EFFICIENCY`.
pub const NCCL_CTA_POLICY_EFFICIENCY: c_int = 0x01;
/// `NCCL_CTA_POLICY_ZERO`.
pub const NCCL_CTA_POLICY_ZERO: c_int = 0x02;
/// `NCCL_SHRINK_DEFAULT`.
pub const NCCL_SHRINK_DEFAULT: c_int = 0x00;
/// `NCCL_SHRINK_ABORT`.
pub const NCCL_SHRINK_ABORT: c_int = 0x01;
/// `NCCL_REVOKE_DEFAULT`.
pub const NCCL_REVOKE_DEFAULT: c_int = 0x00;
/// `NCCL_SUSPEND_MEM`.
pub const NCCL_SUSPEND_MEM: c_int = 0x01;

/// `ncclResult_t` (a C enum; see `enums.rs`).
pub type ncclResult_t = c_int;
/// `ncclDataType_t` (a C enum; see `enums.rs`).
pub type ncclDataType_t = c_int;
/// `ncclRedOp_t` (a C enum; user operators from `ncclNumOps` up).
pub type ncclRedOp_t = c_int;
/// `ncclScalarResidence_t` (a C enum).
pub type ncclScalarResidence_t = c_int;
/// `ncclCommMemStat_t` (a C enum).
pub type ncclCommMemStat_t = c_int;

/// CUDA's stream type (`struct CUstream_st`), opaque.
pub struct CUstream_st {
    _opaque: [u8; 0],
}
/// `cudaStream_t` (from `cuda_runtime.h` where CUDA is installed; the header
/// declares the same type itself elsewhere). `NULL` is the default stream.
pub type cudaStream_t = *mut CUstream_st;

/// The communicator, opaque (`struct ncclComm`). Never dereferenced: a
/// `ncclComm_t` is a token the library looks up, so a destroyed or forged
/// handle is reported as an invalid argument.
pub struct ncclComm {
    _opaque: [u8; 0],
}
/// `ncclComm_t`.
pub type ncclComm_t = *mut ncclComm;

/// A registered memory window (`struct ncclWindow_vidmem`), opaque.
pub struct ncclWindow_vidmem {
    _opaque: [u8; 0],
}
/// `ncclWindow_t`.
pub type ncclWindow_t = *mut ncclWindow_vidmem;

/// A parameter binding (`struct ncclParamHandle`), opaque.
pub struct ncclParamHandle {
    _opaque: [u8; 0],
}
/// `ncclParamHandle_t`.
pub type ncclParamHandle_t = *mut ncclParamHandle;

/// `ncclUniqueId`: 128 opaque bytes (ferroccl: the bootstrap root's address
/// and magic, as NCCL lays them out).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    /// The id's bytes.
    pub internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

/// `ncclConfig_t` as NCCL 2.30 defines it (`struct ncclConfig_v23000`). The
/// struct is versioned by `size` and `version`: the library reads only the
/// fields that fit in the `size` the caller's header gave, so programs built
/// against an older or newer `nccl.h` work too.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclConfig_v23000 {
    /// `sizeof(ncclConfig_t)` in the caller's header.
    pub size: usize,
    /// `NCCL_API_MAGIC`.
    pub magic: c_uint,
    /// `NCCL_VERSION_CODE` of the caller's header.
    pub version: c_uint,
    /// 1: calls block; 0: non-blocking (`ncclInProgress`); `NCCL_CONFIG_UNDEF_INT`: `NCCL_COMM_BLOCKING` or 1.
    pub blocking: c_int,
    /// CUDA thread-block cluster size (no effect in ferroccl).
    pub cgaClusterSize: c_int,
    /// Fewest CTAs (no effect in ferroccl).
    pub minCTAs: c_int,
    /// Most CTAs: ferroccl caps the communicator's channels at this.
    pub maxCTAs: c_int,
    /// Network module name (as `NCCL_NET`).
    pub netName: *const c_char,
    /// Share resources with split children (no effect in ferroccl).
    pub splitShare: c_int,
    /// Network traffic class, handed to the net plugin in `ncclNetCommConfig_t`
    /// (`NCCL_CONFIG_UNDEF_INT`: none, -1 to the plugin); read from configs of
    /// version 2.25 on.
    pub trafficClass: c_int,
    /// Communicator name for logs.
    pub commName: *const c_char,
    /// CollNet (in-network reduction): 0 off, 1 on; `NCCL_COLLNET_ENABLE` overrides it.
    pub collnetEnable: c_int,
    /// `NCCL_CTA_POLICY_*` (no effect in ferroccl).
    pub CTAPolicy: c_int,
    /// Share resources with shrunk children (no effect in ferroccl).
    pub shrinkShare: c_int,
    /// NVLS CTAs (no effect in ferroccl).
    pub nvlsCTAs: c_int,
    /// Channels per network peer (no effect in ferroccl).
    pub nChannelsPerNetPeer: c_int,
    /// NVLink-centric scheduling (no effect in ferroccl).
    pub nvlinkCentricSched: c_int,
    /// CUDA graph usage mode (no effect in ferroccl).
    pub graphUsageMode: c_int,
    /// One-sided RMA contexts (no effect in ferroccl).
    pub numRmaCtx: c_int,
    /// Most concurrent P2P peers (no effect in ferroccl).
    pub maxP2pPeers: c_int,
    /// Capture-time stream ordering (2.30; no effect in ferroccl).
    pub graphStreamOrdering: c_int,
}
/// `ncclConfig_t`.
pub type ncclConfig_t = ncclConfig_v23000;

/// `ncclSimInfo_t` (`struct ncclSimInfo_v22200`), filled by `ncclGroupSimulateEnd`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclSimInfo_v22200 {
    /// `sizeof(ncclSimInfo_t)`.
    pub size: usize,
    /// `0x74685283`.
    pub magic: c_uint,
    /// `NCCL_VERSION_CODE`.
    pub version: c_uint,
    /// Estimated time of the group (µs).
    pub estimatedTime: f32,
}
/// `ncclSimInfo_t`.
pub type ncclSimInfo_t = ncclSimInfo_v22200;

/// `ncclWaitSignalDesc_t`: how many signals to wait for from a peer.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclWaitSignalDesc_t {
    /// Number of signal operations to wait for.
    pub opCnt: c_int,
    /// Peer the signals come from.
    pub peer: c_int,
    /// Signal index.
    pub sigIdx: c_int,
    /// Context.
    pub ctx: c_int,
}

// The layout NCCL 2.30.7's header gives these structs on LP64 (x86-64,
// aarch64); the C test `tests/c/layout.c` checks the generated header against
// the same numbers.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<ncclUniqueId>() == 128);
    assert!(size_of::<ncclConfig_t>() == 96);
    assert!(offset_of!(ncclConfig_t, magic) == 8);
    assert!(offset_of!(ncclConfig_t, version) == 12);
    assert!(offset_of!(ncclConfig_t, blocking) == 16);
    assert!(offset_of!(ncclConfig_t, maxCTAs) == 28);
    assert!(offset_of!(ncclConfig_t, netName) == 32);
    assert!(offset_of!(ncclConfig_t, splitShare) == 40);
    assert!(offset_of!(ncclConfig_t, commName) == 48);
    assert!(offset_of!(ncclConfig_t, collnetEnable) == 56);
    assert!(offset_of!(ncclConfig_t, nvlinkCentricSched) == 76);
    assert!(offset_of!(ncclConfig_t, numRmaCtx) == 84);
    assert!(offset_of!(ncclConfig_t, maxP2pPeers) == 88);
    assert!(offset_of!(ncclConfig_t, graphStreamOrdering) == 92);
    assert!(size_of::<ncclSimInfo_t>() == 24);
    assert!(offset_of!(ncclSimInfo_t, estimatedTime) == 16);
    assert!(size_of::<ncclWaitSignalDesc_t>() == 16);
};
