//! `ncclTuner_v2_t` … `ncclTuner_v6_t` (reference §3.1, §4.5).
//!
//! Sources: NCCL 2.30.7 `src/include/plugin/nccl_tuner.h`, `src/include/plugin/tuner/tuner_v{2..6}.h`.
//! `collCostTable` is a flat `float[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS]` passed as `float**`.

use std::ffi::{CStr, c_char, c_int, c_void};

use super::common::{abi_struct, ncclDebugLogger_t, ncclFunc_t, ncclResult_t};
use super::net::fnp;

/// `NCCL_NUM_ALGORITHMS_V5`
pub const NCCL_NUM_ALGORITHMS_V5: usize = 7;
/// `NCCL_NUM_PROTOCOLS_V5`
pub const NCCL_NUM_PROTOCOLS_V5: usize = 3;
/// `NCCL_NUM_HW_LINKS_V5`
pub const NCCL_NUM_HW_LINKS_V5: usize = 3;
/// `NCCL_NUM_COMPCAPS_V5`
pub const NCCL_NUM_COMPCAPS_V5: usize = 4;
/// `NCCL_NUM_TUNING_SCALES_V5`
pub const NCCL_NUM_TUNING_SCALES_V5: usize = 3;
/// HW link index `NCCL_HW_NVLINK`
pub const NCCL_HW_NVLINK: usize = 0;
/// HW link index `NCCL_HW_PCI`
pub const NCCL_HW_PCI: usize = 1;
/// HW link index `NCCL_HW_NET`
pub const NCCL_HW_NET: usize = 2;
/// Compute-capability index `NCCL_VOLTA_COMPCAP_IDX`
pub const NCCL_VOLTA_COMPCAP_IDX: usize = 0;
/// Compute-capability index `NCCL_AMPERE_COMPCAP_IDX`
pub const NCCL_AMPERE_COMPCAP_IDX: usize = 1;
/// Compute-capability index `NCCL_HOPPER_COMPCAP_IDX`
pub const NCCL_HOPPER_COMPCAP_IDX: usize = 2;
/// Compute-capability index `NCCL_BLACKWELL_COMPCAP_IDX`
pub const NCCL_BLACKWELL_COMPCAP_IDX: usize = 3;
/// Tuning scale `NCCL_TUNING_SCALE_1NODE`
pub const NCCL_TUNING_SCALE_1NODE: usize = 0;
/// Tuning scale `NCCL_TUNING_SCALE_2NODES`
pub const NCCL_TUNING_SCALE_2NODES: usize = 1;
/// Tuning scale `NCCL_TUNING_SCALE_4NODES`
pub const NCCL_TUNING_SCALE_4NODES: usize = 2;

abi_struct! {
    /// `ncclNvlDomainInfo_v5_t` (= v6).
    #[derive(Debug, PartialEq, Eq)]
    pub struct ncclNvlDomainInfo_v5_t, size 12 {
        nNvlDomains: c_int = 0,
        minRanksPerNvlDomain: c_int = 4,
        maxRanksPerNvlDomain: c_int = 8,
    }
}
/// `ncclNvlDomainInfo_v6_t` = v5.
pub type ncclNvlDomainInfo_v6_t = ncclNvlDomainInfo_v5_t;

/// `[compcap][tuning scale]` table of `ncclTunerConstants_v5_t`.
pub type ncclTunerBwTable_v5 = [[f64; NCCL_NUM_TUNING_SCALES_V5]; NCCL_NUM_COMPCAPS_V5];

abi_struct! {
    /// `ncclTunerConstants_v5_t` (= v6): NCCL pre-fills it and reads it back after `init`.
    #[derive(Debug, PartialEq)]
    pub struct ncclTunerConstants_v5_t, size 1152 {
        baseLatencies: [[f64; NCCL_NUM_PROTOCOLS_V5]; NCCL_NUM_ALGORITHMS_V5] = 0,
        hwLatencies: [[[f64; NCCL_NUM_PROTOCOLS_V5]; NCCL_NUM_ALGORITHMS_V5]; NCCL_NUM_HW_LINKS_V5] = 168,
        llMaxBws: ncclTunerBwTable_v5 = 672,
        perChMaxRingLL128Bws: ncclTunerBwTable_v5 = 768,
        perChMaxTreeLL128Bws: ncclTunerBwTable_v5 = 864,
        perChMaxTreeBws: ncclTunerBwTable_v5 = 960,
        perChMaxNVLSTreeBws: ncclTunerBwTable_v5 = 1056,
    }
}
/// `ncclTunerConstants_v6_t` = v5.
pub type ncclTunerConstants_v6_t = ncclTunerConstants_v5_t;

abi_struct! {
    /// `ncclTuner_v2_t` (symbol `ncclTunerPlugin_v2`).
    #[derive(Debug)]
    pub struct ncclTuner_v2_t, size 32 {
        name: *const c_char = 0,
        init: fnp!(nRanks: usize, nNodes: usize, logFunction: ncclDebugLogger_t, context: *mut *mut c_void) = 8,
        getCollInfo: fnp!(context: *mut c_void, collType: ncclFunc_t, nBytes: usize, collNetSupport: c_int,
            nvlsSupport: c_int, numPipeOps: c_int, algorithm: *mut c_int, protocol: *mut c_int,
            nChannels: *mut c_int) = 16,
        destroy: fnp!(context: *mut c_void) = 24,
    }
}

abi_struct! {
    /// `ncclTuner_v3_t` (symbol `ncclTunerPlugin_v3`): cost-table interface.
    #[derive(Debug)]
    pub struct ncclTuner_v3_t, size 32 {
        name: *const c_char = 0,
        init: fnp!(nRanks: usize, nNodes: usize, logFunction: ncclDebugLogger_t, context: *mut *mut c_void) = 8,
        getCollInfo: fnp!(context: *mut c_void, collType: ncclFunc_t, nBytes: usize, numPipeOps: c_int,
            collCostTable: *mut *mut f32, numAlgo: c_int, numProto: c_int, nChannels: *mut c_int) = 16,
        destroy: fnp!(context: *mut c_void) = 24,
    }
}

abi_struct! {
    /// `ncclTuner_v4_t` (symbol `ncclTunerPlugin_v4`): adds `regBuff`.
    #[derive(Debug)]
    pub struct ncclTuner_v4_t, size 32 {
        name: *const c_char = 0,
        init: fnp!(nRanks: usize, nNodes: usize, logFunction: ncclDebugLogger_t, context: *mut *mut c_void) = 8,
        getCollInfo: fnp!(context: *mut c_void, collType: ncclFunc_t, nBytes: usize, numPipeOps: c_int,
            collCostTable: *mut *mut f32, numAlgo: c_int, numProto: c_int, regBuff: c_int,
            nChannels: *mut c_int) = 16,
        destroy: fnp!(context: *mut c_void) = 24,
    }
}

abi_struct! {
    /// `ncclTuner_v5_t` (symbol `ncclTunerPlugin_v5`): per-comm ctx, NVL domain info,
    /// writable constants; `destroy` renamed `finalize`.
    #[derive(Debug)]
    pub struct ncclTuner_v5_t, size 32 {
        name: *const c_char = 0,
        init: fnp!(ctx: *mut *mut c_void, commId: u64, nRanks: usize, nNodes: usize,
            logFunction: ncclDebugLogger_t, nvlDomainInfo: *mut ncclNvlDomainInfo_v5_t,
            constants: *mut ncclTunerConstants_v5_t) = 8,
        getCollInfo: fnp!(context: *mut c_void, collType: ncclFunc_t, nBytes: usize, numPipeOps: c_int,
            collCostTable: *mut *mut f32, numAlgo: c_int, numProto: c_int, regBuff: c_int,
            nChannels: *mut c_int) = 16,
        finalize: fnp!(context: *mut c_void) = 24,
    }
}

abi_struct! {
    /// `ncclTuner_v6_t` (symbol `ncclTunerPlugin_v6`; `ncclTuner_t` in 2.30.7): appends the
    /// optional `getChunkSize`.
    #[derive(Debug)]
    pub struct ncclTuner_v6_t, size 40 {
        name: *const c_char = 0,
        init: fnp!(ctx: *mut *mut c_void, commId: u64, nRanks: usize, nNodes: usize,
            logFunction: ncclDebugLogger_t, nvlDomainInfo: *mut ncclNvlDomainInfo_v6_t,
            constants: *mut ncclTunerConstants_v6_t) = 8,
        getCollInfo: fnp!(context: *mut c_void, collType: ncclFunc_t, nBytes: usize, numPipeOps: c_int,
            collCostTable: *mut *mut f32, numAlgo: c_int, numProto: c_int, regBuff: c_int,
            nChannels: *mut c_int) = 16,
        finalize: fnp!(context: *mut c_void) = 24,
        getChunkSize: fnp!(context: *mut c_void, collType: ncclFunc_t, nBytes: usize, algo: c_int, proto: c_int,
            nChannels: c_int, chunkSize: *mut usize) = 32,
    }
}

/// `ncclTuner_t` inside NCCL 2.30.7.
pub type ncclTuner_t = ncclTuner_v6_t;

/// Tuner plugin data symbols with their version, in NCCL 2.30.7's search order.
pub const TUNER_PLUGIN_SYMBOLS: [(&CStr, u32); 5] = [
    (c"ncclTunerPlugin_v6", 6),
    (c"ncclTunerPlugin_v5", 5),
    (c"ncclTunerPlugin_v4", 4),
    (c"ncclTunerPlugin_v3", 3),
    (c"ncclTunerPlugin_v2", 2),
];
