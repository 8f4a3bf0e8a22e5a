//! `ncclDataType_t`.

use std::fmt;
use std::str::FromStr;

use crate::KernelError;

/// `ncclDataType_t` (`src/nccl.h.in`), with NCCL's enum values as discriminants.
/// fp8 types (10, 11) are not supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
pub enum DataType {
    /// `ncclInt8` / `ncclChar`
    Int8 = 0,
    /// `ncclUint8`
    Uint8 = 1,
    /// `ncclInt32` / `ncclInt`
    Int32 = 2,
    /// `ncclUint32`
    Uint32 = 3,
    /// `ncclInt64`
    Int64 = 4,
    /// `ncclUint64`
    Uint64 = 5,
    /// `ncclFloat16` / `ncclHalf` (IEEE binary16)
    Float16 = 6,
    /// `ncclFloat32` / `ncclFloat`
    Float32 = 7,
    /// `ncclFloat64` / `ncclDouble`
    Float64 = 8,
    /// `ncclBfloat16`
    Bfloat16 = 9,
}

impl DataType {
    /// All supported types, in NCCL enum order.
    pub const ALL: [DataType; 10] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Bfloat16,
    ];

    /// Element size in bytes (`ncclTypeSize`).
    pub const fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 => 1,
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }

    /// From an `ncclDataType_t` value (0..=9).
    pub fn from_nccl(v: i32) -> Result<DataType, KernelError> {
        DataType::ALL
            .get(usize::try_from(v).map_err(|_| KernelError::UnknownDataType(v))?)
            .copied()
            .ok_or(KernelError::UnknownDataType(v))
    }

    /// The `ncclDataType_t` value.
    pub const fn to_nccl(self) -> i32 {
        self as i32
    }

    /// Name as nccl-tests prints it: `int8`, `uint8`, `int32`, `uint32`, `int64`,
    /// `uint64`, `half`, `float`, `double`, `bfloat16`.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Float16 => "half",
            DataType::Float32 => "float",
            DataType::Float64 => "double",
            DataType::Bfloat16 => "bfloat16",
        }
    }

    /// Floating-point type (float16, bfloat16, float32, float64)?
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Bfloat16
        )
    }

    /// Signed integer type?
    pub const fn is_signed_int(self) -> bool {
        matches!(self, DataType::Int8 | DataType::Int32 | DataType::Int64)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DataType {
    type Err = KernelError;

    /// Parses nccl-tests names (`int8` … `bfloat16`, `half`, `float`, `double`) and
    /// the aliases `char`, `int`, `float16`, `float32`, `float64`, `bf16`
    /// (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "int8" | "char" => DataType::Int8,
            "uint8" => DataType::Uint8,
            "int32" | "int" => DataType::Int32,
            "uint32" => DataType::Uint32,
            "int64" => DataType::Int64,
            "uint64" => DataType::Uint64,
            "half" | "float16" | "fp16" => DataType::Float16,
            "float" | "float32" | "fp32" => DataType::Float32,
            "double" | "float64" | "fp64" => DataType::Float64,
            "bfloat16" | "bf16" => DataType::Bfloat16,
            _ => return Err(KernelError::UnknownDataTypeName(s.to_string())),
        })
    }
}
