//! `ncclRedOp_t`, PreMulSum scalars and NCCL's lowering of ops per datatype.

use std::fmt;
use std::str::FromStr;

use half::{bf16, f16};

use crate::{DataType, KernelError};

/// A PreMulSum scalar in the datatype's native (host-endian) encoding: the first
/// `dtype.size()` bytes are the value, the rest is ignored (keep it zero).
/// This is what `ncclRedOpCreatePreMulSum(op, scalar, datatype, …)` points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Scalar(pub [u8; 8]);

impl Scalar {
    /// Copies the first `dtype.size()` bytes of `bytes` (fewer if `bytes` is shorter).
    pub fn from_bytes(dtype: DataType, bytes: &[u8]) -> Scalar {
        let mut s = [0u8; 8];
        let n = dtype.size().min(bytes.len());
        s[..n].copy_from_slice(&bytes[..n]);
        Scalar(s)
    }

    /// The value `v` converted to `dtype` (`as` casts for integers: saturating,
    /// NaN → 0; round-to-nearest-even for float types).
    pub fn from_f64(dtype: DataType, v: f64) -> Scalar {
        let mut s = [0u8; 8];
        match dtype {
            DataType::Int8 => s[..1].copy_from_slice(&(v as i8).to_ne_bytes()),
            DataType::Uint8 => s[..1].copy_from_slice(&(v as u8).to_ne_bytes()),
            DataType::Int32 => s[..4].copy_from_slice(&(v as i32).to_ne_bytes()),
            DataType::Uint32 => s[..4].copy_from_slice(&(v as u32).to_ne_bytes()),
            DataType::Int64 => s.copy_from_slice(&(v as i64).to_ne_bytes()),
            DataType::Uint64 => s.copy_from_slice(&(v as u64).to_ne_bytes()),
            DataType::Float16 => s[..2].copy_from_slice(&f16::from_f64(v).to_ne_bytes()),
            DataType::Bfloat16 => s[..2].copy_from_slice(&bf16::from_f64(v).to_ne_bytes()),
            DataType::Float32 => s[..4].copy_from_slice(&(v as f32).to_ne_bytes()),
            DataType::Float64 => s.copy_from_slice(&v.to_ne_bytes()),
        }
        Scalar(s)
    }

    /// The value `v` as `dtype` (two's-complement truncation for integer types,
    /// rounding for floats).
    pub fn from_i64(dtype: DataType, v: i64) -> Scalar {
        if dtype.is_float() {
            return Scalar::from_f64(dtype, v as f64);
        }
        let mut s = [0u8; 8];
        let b = v.to_ne_bytes();
        // Truncation keeps the low-order bytes; on big-endian they are at the end.
        let n = dtype.size();
        if cfg!(target_endian = "little") {
            s[..n].copy_from_slice(&b[..n]);
        } else {
            s[..n].copy_from_slice(&b[8 - n..]);
        }
        Scalar(s)
    }

    /// The significant bytes for `dtype`.
    pub fn bytes(&self, dtype: DataType) -> &[u8] {
        &self.0[..dtype.size()]
    }
}

/// `ncclRedOp_t`: the four built-ins, average, and a PreMulSum op created with
/// `ncclRedOpCreatePreMulSum` (its scalar is held here, already read from host or
/// device memory by the runtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RedOp {
    /// `ncclSum` = 0
    Sum,
    /// `ncclProd` = 1
    Prod,
    /// `ncclMax` = 2
    Max,
    /// `ncclMin` = 3
    Min,
    /// `ncclAvg` = 4
    Avg,
    /// User op from `ncclRedOpCreatePreMulSum` (ids from `ncclNumOps` = 5 up):
    /// every rank's input is multiplied by the scalar, then summed.
    PreMulSum(Scalar),
}

impl RedOp {
    /// From a built-in `ncclRedOp_t` value 0..=4 (PreMulSum ids are per-communicator
    /// handles the runtime resolves itself).
    pub fn from_nccl(v: i32) -> Result<RedOp, KernelError> {
        Ok(match v {
            0 => RedOp::Sum,
            1 => RedOp::Prod,
            2 => RedOp::Max,
            3 => RedOp::Min,
            4 => RedOp::Avg,
            _ => return Err(KernelError::UnknownRedOp(v)),
        })
    }

    /// Name as nccl-tests prints it: `sum`, `prod`, `max`, `min`, `avg`, `mulsum`.
    pub const fn name(&self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Max => "max",
            RedOp::Min => "min",
            RedOp::Avg => "avg",
            RedOp::PreMulSum(_) => "mulsum",
        }
    }

    /// The element-wise binary operation used to combine two partial results.
    pub const fn combine(&self) -> Combine {
        match self {
            RedOp::Sum | RedOp::Avg | RedOp::PreMulSum(_) => Combine::Sum,
            RedOp::Prod => Combine::Prod,
            RedOp::Max => Combine::Max,
            RedOp::Min => Combine::Min,
        }
    }
}

impl fmt::Display for RedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for RedOp {
    type Err = KernelError;

    /// Parses `sum`, `prod`, `max`, `min`, `avg` (ASCII case-insensitive).
    /// `premulsum`/`mulsum` parse to a PreMulSum whose scalar is zero bytes: set it
    /// with [`Scalar::from_f64`] afterwards.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "sum" => RedOp::Sum,
            "prod" => RedOp::Prod,
            "max" => RedOp::Max,
            "min" => RedOp::Min,
            "avg" => RedOp::Avg,
            "premulsum" | "mulsum" => RedOp::PreMulSum(Scalar::default()),
            _ => return Err(KernelError::UnknownRedOpName(s.to_string())),
        })
    }
}

/// The element-wise binary operation of a reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Combine {
    /// `a + b` (wrapping for integers)
    Sum,
    /// `a * b` (wrapping for integers)
    Prod,
    /// `max(a, b)` (`fmax` for floats)
    Max,
    /// `min(a, b)` (`fmin` for floats)
    Min,
}

/// A reduction lowered for one datatype and rank count, as NCCL's `hostToDevRedOp`
/// does (`ncclDevRedOpFull`): the combine operation, an optional pre-multiply of
/// each rank's own input, and an optional final integer division.
///
/// * `Sum/Prod/Max/Min` → that combine, no pre-op, no post-op;
/// * `PreMulSum(s)` → `Sum` with pre-multiply by `s`;
/// * `Avg` on float16/bfloat16/float32/float64 → `Sum` with pre-multiply by
///   `1/nranks` (computed in `f64`, rounded to the type, as NCCL does);
/// * `Avg` on integer types → `Sum`, then divide by `nranks` (`SumPostDiv`,
///   truncation toward zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevRedOp {
    /// The datatype it was lowered for.
    pub dtype: DataType,
    /// The user-visible op.
    pub op: RedOp,
    /// Combine step.
    pub combine: Combine,
    /// Pre-multiply scalar applied to each rank's own input, if any.
    pub pre_mul: Option<Scalar>,
    /// Divisor applied once to the final result, if any (integer average).
    pub post_div: Option<u32>,
}

impl DevRedOp {
    /// Lowers `op` for `dtype` in a communicator of `nranks` ranks.
    /// Errors: `nranks == 0` with `Avg`.
    pub fn new(dtype: DataType, op: RedOp, nranks: u32) -> Result<DevRedOp, KernelError> {
        let (pre_mul, post_div) = match op {
            RedOp::PreMulSum(s) => (Some(s), None),
            RedOp::Avg if nranks == 0 => return Err(KernelError::ZeroRanks),
            RedOp::Avg if dtype.is_float() => {
                let inv = 1.0 / f64::from(nranks);
                let s = match dtype {
                    // NCCL: __float2half(float(1.0/nRanks)) etc.
                    DataType::Float16 | DataType::Bfloat16 | DataType::Float32 => {
                        Scalar::from_f64(dtype, f64::from(inv as f32))
                    }
                    _ => Scalar::from_f64(dtype, inv),
                };
                (Some(s), None)
            }
            RedOp::Avg => (None, Some(nranks)),
            _ => (None, None),
        };
        Ok(DevRedOp {
            dtype,
            op,
            combine: op.combine(),
            pre_mul,
            post_div,
        })
    }

    /// Whether a rank's own input must go through the pre-op.
    pub fn has_pre_op(&self) -> bool {
        self.pre_mul.is_some()
    }

    /// Whether the final result needs [`Backend::post_op`](crate::Backend::post_op).
    pub fn has_post_op(&self) -> bool {
        self.post_div.is_some_and(|d| d != 1)
    }
}
