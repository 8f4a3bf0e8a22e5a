//! The C enums of `nccl.h` (NCCL 2.30.7 `src/nccl.h.in`) with their values: one
//! table per enum, which `build.rs` writes into the generated header as
//! `typedef enum { … } name;` and the library reads for its checks and messages.
//! Shared with `build.rs` by `#[path]`, so the header and the library cannot
//! disagree.
//!
//! The library receives these types as plain `int` (`abi::ncclDataType_t` & co.
//! are `c_int`), so a value outside an enum is an argument to reject, never
//! undefined behaviour.
#![allow(dead_code)]

/// One C enum: its typedef name and its enumerators in header order (aliases
/// such as `ncclChar` share a value).
pub struct CEnum {
    /// The typedef name (`ncclDataType_t`).
    pub name: &'static str,
    /// `(enumerator, value)` in header order.
    pub values: &'static [(&'static str, i64)],
}

/// `ncclResult_t`.
pub mod result {
    /// `ncclSuccess`
    pub const SUCCESS: i32 = 0;
    /// `ncclUnhandledCudaError`
    pub const UNHANDLED_CUDA_ERROR: i32 = 1;
    /// `ncclSystemError`
    pub const SYSTEM_ERROR: i32 = 2;
    /// `ncclInternalError`
    pub const INTERNAL_ERROR: i32 = 3;
    /// `ncclInvalidArgument`
    pub const INVALID_ARGUMENT: i32 = 4;
    /// `ncclInvalidUsage`
    pub const INVALID_USAGE: i32 = 5;
    /// `ncclRemoteError`
    pub const REMOTE_ERROR: i32 = 6;
    /// `ncclInProgress`
    pub const IN_PROGRESS: i32 = 7;
    /// `ncclTimeout` (new in 2.30)
    pub const TIMEOUT: i32 = 8;
    /// `ncclNumResults`
    pub const NUM_RESULTS: i32 = 9;
}

/// `ncclNumOps`: built-in reduction operators, and the first id of operators made
/// by `ncclRedOpCreatePreMulSum`.
pub const NUM_OPS: i32 = 5;
/// `ncclMaxRedOp`: the largest valid `ncclRedOp_t` (`0x7fffffff >> (32 - 8 *
/// sizeof(ncclRedOp_dummy_t))` with a 4-byte enum).
pub const MAX_RED_OP: i64 = 0x7fff_ffff;
/// `ncclNumTypes`.
pub const NUM_TYPES: i32 = 12;
/// `ncclFloat8e4m3`.
pub const FLOAT8_E4M3: i32 = 10;
/// `ncclFloat8e5m2`.
pub const FLOAT8_E5M2: i32 = 11;
/// `ncclScalarDevice`.
pub const SCALAR_DEVICE: i32 = 0;
/// `ncclScalarHostImmediate`.
pub const SCALAR_HOST_IMMEDIATE: i32 = 1;

/// Every enum of the header, in header order.
pub const ENUMS: &[CEnum] = &[
    CEnum {
        name: "ncclResult_t",
        values: &[
            ("ncclSuccess", result::SUCCESS as i64),
            ("ncclUnhandledCudaError", result::UNHANDLED_CUDA_ERROR as i64),
            ("ncclSystemError", result::SYSTEM_ERROR as i64),
            ("ncclInternalError", result::INTERNAL_ERROR as i64),
            ("ncclInvalidArgument", result::INVALID_ARGUMENT as i64),
            ("ncclInvalidUsage", result::INVALID_USAGE as i64),
            ("ncclRemoteError", result::REMOTE_ERROR as i64),
            ("ncclInProgress", result::IN_PROGRESS as i64),
            ("ncclTimeout", result::TIMEOUT as i64),
            ("ncclNumResults", result::NUM_RESULTS as i64),
        ],
    },
    CEnum {
        name: "ncclCommMemStat_t",
        values: &[
            ("ncclStatGpuMemSuspend", 0),
            ("ncclStatGpuMemSuspended", 1),
            ("ncclStatGpuMemPersist", 2),
            ("ncclStatGpuMemTotal", 3),
        ],
    },
    CEnum {
        name: "ncclRedOp_dummy_t",
        values: &[("ncclNumOps_dummy", NUM_OPS as i64)],
    },
    CEnum {
        name: "ncclRedOp_t",
        values: &[
            ("ncclSum", 0),
            ("ncclProd", 1),
            ("ncclMax", 2),
            ("ncclMin", 3),
            ("ncclAvg", 4),
            ("ncclNumOps", NUM_OPS as i64),
            ("ncclMaxRedOp", MAX_RED_OP),
        ],
    },
    CEnum {
        name: "ncclDataType_t",
        values: &[
            ("ncclInt8", 0),
            ("ncclChar", 0),
            ("ncclUint8", 1),
            ("ncclInt32", 2),
            ("ncclInt", 2),
            ("ncclUint32", 3),
            ("ncclInt64", 4),
            ("ncclUint64", 5),
            ("ncclFloat16", 6),
            ("ncclHalf", 6),
            ("ncclFloat32", 7),
            ("ncclFloat", 7),
            ("ncclFloat64", 8),
            ("ncclDouble", 8),
            ("ncclBfloat16", 9),
            ("ncclFloat8e4m3", FLOAT8_E4M3 as i64),
            ("ncclFloat8e5m2", FLOAT8_E5M2 as i64),
            ("ncclNumTypes", NUM_TYPES as i64),
        ],
    },
    CEnum {
        name: "ncclScalarResidence_t",
        values: &[
            ("ncclScalarDevice", SCALAR_DEVICE as i64),
            ("ncclScalarHostImmediate", SCALAR_HOST_IMMEDIATE as i64),
        ],
    },
];

/// The name of `ncclDataType_t` value `v` as NCCL prints it (`ncclFloat32`), or
/// `None` outside the enum.
pub fn datatype_name(v: i32) -> Option<&'static str> {
    ENUMS
        .iter()
        .find(|e| e.name == "ncclDataType_t")?
        .values
        .iter()
        .filter(|(n, _)| !matches!(*n, "ncclChar" | "ncclInt" | "ncclHalf" | "ncclFloat" | "ncclDouble"))
        .find(|(n, x)| *x == i64::from(v) && *n != "ncclNumTypes")
        .map(|(n, _)| *n)
}

/// The C text of every enum, as `build.rs` puts it in the header.
pub fn c_text() -> String {
    let mut s = String::new();
    for e in ENUMS {
        s.push_str("typedef enum {\n");
        for (i, (n, v)) in e.values.iter().enumerate() {
            let sep = if i + 1 == e.values.len() { "" } else { "," };
            let v = if *v == MAX_RED_OP {
                "0x7fffffff".to_string()
            } else {
                v.to_string()
            };
            s.push_str(&format!("  {n} = {v}{sep}\n"));
        }
        s.push_str(&format!("}} {};\n\n", e.name));
    }
    s
}
