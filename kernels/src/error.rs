//! Errors of the kernel primitives.

use crate::DataType;

/// What a kernel primitive rejected. Messages say what was expected and found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A buffer length is not a multiple of the element size.
    #[error("{what} buffer is {len} bytes, not a multiple of the {dtype} element size {size}")]
    Misaligned {
        /// Which operand (`"dst"`, `"a"`, `"b"`, `"src"`, `"acc"`, `"buf"`).
        what: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The datatype.
        dtype: DataType,
        /// `dtype.size()`.
        size: usize,
    },
    /// Operand lengths differ.
    #[error("{what} buffer is {found} bytes, expected {expected} bytes (same as dst)")]
    LengthMismatch {
        /// Which operand.
        what: &'static str,
        /// Length of the destination.
        expected: usize,
        /// Length of this operand.
        found: usize,
    },
    /// `ncclDataType_t` value outside 0..=9.
    #[error("unknown ncclDataType_t {0} (expected 0..=9)")]
    UnknownDataType(i32),
    /// Datatype name not recognised.
    #[error(
        "unknown datatype name {0:?} (expected int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16)"
    )]
    UnknownDataTypeName(String),
    /// Built-in `ncclRedOp_t` value outside 0..=4.
    #[error("unknown built-in ncclRedOp_t {0} (expected 0..=4: sum, prod, max, min, avg)")]
    UnknownRedOp(i32),
    /// Reduction op name not recognised.
    #[error("unknown reduction op name {0:?} (expected sum, prod, max, min, avg, premulsum)")]
    UnknownRedOpName(String),
    /// Average over zero ranks.
    #[error("average over nranks = 0")]
    ZeroRanks,
    /// CUDA cannot be used in this process: no driver library, `cuInit` failed
    /// (no device, `CUDA_VISIBLE_DEVICES` empty), or a build without the `cuda`
    /// feature. The text says which and what to do.
    #[error("no CUDA: {0}")]
    NoCuda(String),
    /// NVRTC (the run-time CUDA C compiler the device kernels need) cannot be
    /// loaded; the text says where it was looked for.
    #[error("no NVRTC: {0}")]
    NoNvrtc(String),
    /// A CUDA driver call failed.
    #[error("CUDA call {call} failed: {message}")]
    Cuda {
        /// The driver entry point (`cuLaunchKernel`, ...).
        call: &'static str,
        /// The driver's error name and text.
        message: String,
    },
    /// NVRTC rejected a kernel program.
    #[error("NVRTC could not compile {program} for compute_{arch}: {log}")]
    Compile {
        /// Which program (`kernels for float`, ...).
        program: String,
        /// The virtual architecture, e.g. 90 for `compute_90`.
        arch: u32,
        /// NVRTC's result and program log.
        log: String,
    },
    /// Operands of one primitive live in memory spaces no single backend can
    /// reach together (for example device memory and pageable host memory).
    #[error(
        "{what} is {found}, but {first} is {expected}: one backend cannot reach both (stage through pinned host memory or device memory)"
    )]
    MemorySpaceMismatch {
        /// The operand that does not fit.
        what: &'static str,
        /// Its memory space.
        found: String,
        /// The operand that chose the backend.
        first: &'static str,
        /// That operand's memory space.
        expected: String,
    },
}
