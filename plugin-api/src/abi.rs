//! NCCL 2.30.7 plugin C ABI. STUB: being filled in (issue 2); the names below are final.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

/// `ncclResult_t` (`src/nccl.h.in`), a 4-byte C enum.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ncclResult_t {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclTimeout = 8,
}

pub const NCCL_NET_HANDLE_MAXSIZE: usize = 128;
pub const NCCL_PTR_HOST: i32 = 0x1;
pub const NCCL_PTR_CUDA: i32 = 0x2;
pub const NCCL_PTR_DMABUF: i32 = 0x4;
pub const NCCL_NET_DEVICE_HOST: i32 = 0;
pub const NCCL_NET_DEVICE_INVALID_VERSION: i32 = 0;
pub const MAX_NET_SIZE: usize = 1 << 30;
pub const MAX_COLLNET_SIZE: usize = 1 << 29;
pub const NCCL_NET_ID_UNDEF: i32 = -1;
pub const NCCL_NET_TRAFFIC_CLASS_UNDEF: i32 = -1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ncclNetCommAttr_v12_t {
    pub maxConcurrentPeers: i32,
    pub minConcurrentPeers: i32,
    pub maxFlowsPerPeer: i32,
    pub minFlowsPerPeer: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ncclNetAttr_v12_t {
    pub sendCommAttr: ncclNetCommAttr_v12_t,
    pub recvCommAttr: ncclNetCommAttr_v12_t,
    pub op: u32,
    pub algo: u32,
    pub proto: u32,
}
