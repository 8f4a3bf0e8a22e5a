//! The CUDA C++ source of the device kernels and the names of their entry points.
//!
//! The kernel bodies live in `kernels.cu` (templates over the element type and
//! the combine operation); this module appends the `extern "C"` entry points of
//! one compilation [`Unit`]: the byte copy, or every kernel of one datatype.
//! NVRTC compiles one unit per (device architecture, unit) on first use
//! ([`super::compile`]), so a process that only reduces `float` compiles only the
//! `float` unit.
//!
//! Kernel inventory (57 entry points in 11 units):
//! * `ferroccl_copy`: bytes;
//! * per datatype `T` (nccl-tests names: `int8` … `bfloat16`):
//!   `ferroccl_reduce_{sum,prod,max,min}_T` (the four combine operations; which
//!   operands get the pre-multiply is a launch argument), `ferroccl_premul_T`
//!   (the pre-op of PreMulSum and float Avg), and for integer `T`
//!   `ferroccl_postdiv_T` (the post-op of integer Avg, NCCL's `SumPostDiv`).
//!
//! Every `ncclRedOp_t` lowers to these through [`DevRedOp`] exactly as NCCL's
//! `hostToDevRedOp` (`src/enqueue.cc`) lowers it: [`kernels_for`] lists the
//! kernels one op needs.

use std::fmt;

use crate::{Combine, DataType, DevRedOp};

/// `kernels.cu`: the shared kernel bodies (no entry points).
pub const KERNELS_CU: &str = include_str!("kernels.cu");

/// One NVRTC program: the copy kernel, or all kernels of one datatype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// `ferroccl_copy`.
    Copy,
    /// The reduce, pre-multiply and (integers) post-divide kernels of one type.
    Type(DataType),
}

impl Unit {
    /// Every unit: the copy unit, then one per datatype in NCCL enum order.
    pub fn all() -> Vec<Unit> {
        std::iter::once(Unit::Copy)
            .chain(DataType::ALL.iter().map(|&t| Unit::Type(t)))
            .collect()
    }

    /// The entry points this unit defines.
    pub fn kernels(self) -> Vec<Kernel> {
        match self {
            Unit::Copy => vec![Kernel::Copy],
            Unit::Type(t) => {
                let mut v: Vec<Kernel> = COMBINES.iter().map(|&c| Kernel::Reduce(t, c)).collect();
                v.push(Kernel::PreMul(t));
                if !t.is_float() {
                    v.push(Kernel::PostDiv(t));
                }
                v
            }
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unit::Copy => f.write_str("copy kernel"),
            Unit::Type(t) => write!(f, "{t} kernels"),
        }
    }
}

/// The four combine operations, in `kernels.cu`'s `OP_*` order.
pub const COMBINES: [Combine; 4] = [Combine::Sum, Combine::Prod, Combine::Max, Combine::Min];

/// One kernel entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// `dst = src`, bytes.
    Copy,
    /// `dst = pre?(a) ⊕ pre?(b)`.
    Reduce(DataType, Combine),
    /// `dst = src × scalar`.
    PreMul(DataType),
    /// `dst = src / n` (integer types only).
    PostDiv(DataType),
}

impl Kernel {
    /// The entry point's symbol, e.g. `ferroccl_reduce_sum_bfloat16`.
    pub fn name(self) -> String {
        match self {
            Kernel::Copy => "ferroccl_copy".to_string(),
            Kernel::Reduce(t, c) => format!("ferroccl_reduce_{}_{}", combine_name(c), t.name()),
            Kernel::PreMul(t) => format!("ferroccl_premul_{}", t.name()),
            Kernel::PostDiv(t) => format!("ferroccl_postdiv_{}", t.name()),
        }
    }

    /// The unit that defines it.
    pub fn unit(self) -> Unit {
        match self {
            Kernel::Copy => Unit::Copy,
            Kernel::Reduce(t, _) | Kernel::PreMul(t) | Kernel::PostDiv(t) => Unit::Type(t),
        }
    }

    /// The `extern "C"` definition of this entry point (appended to `kernels.cu`).
    fn definition(self) -> String {
        let body = match self {
            Kernel::Copy => "copy_kernel(FCCL_PASS)".to_string(),
            Kernel::Reduce(t, c) => format!("reduce_kernel<{}, {}>(FCCL_PASS)", type_traits(t), combine_const(c)),
            Kernel::PreMul(t) => format!("premul_kernel<{}>(FCCL_PASS)", type_traits(t)),
            Kernel::PostDiv(t) => format!("postdiv_kernel<{}>(FCCL_PASS)", type_traits(t)),
        };
        format!("FCCL_GLOBAL {}(FCCL_PARAMS) {{ {body}; }}\n", self.name())
    }
}

fn combine_name(c: Combine) -> &'static str {
    match c {
        Combine::Sum => "sum",
        Combine::Prod => "prod",
        Combine::Max => "max",
        Combine::Min => "min",
    }
}

fn combine_const(c: Combine) -> &'static str {
    match c {
        Combine::Sum => "OP_SUM",
        Combine::Prod => "OP_PROD",
        Combine::Max => "OP_MAX",
        Combine::Min => "OP_MIN",
    }
}

/// The element-type struct of `kernels.cu` for `t`.
fn type_traits(t: DataType) -> &'static str {
    match t {
        DataType::Int8 => "I8T",
        DataType::Uint8 => "U8T",
        DataType::Int32 => "I32T",
        DataType::Uint32 => "U32T",
        DataType::Int64 => "I64T",
        DataType::Uint64 => "U64T",
        DataType::Float16 => "F16T",
        DataType::Float32 => "F32T",
        DataType::Float64 => "F64T",
        DataType::Bfloat16 => "Bf16T",
    }
}

/// The full source of a program defining the entry points of `units`
/// (`kernels.cu` once, then each unit's `extern "C"` kernels).
pub fn program(units: &[Unit]) -> String {
    let mut s = String::with_capacity(KERNELS_CU.len() + 4096);
    s.push_str(KERNELS_CU);
    for u in units {
        s.push_str(&format!("\n// ---- {u} ----\n"));
        for k in u.kernels() {
            s.push_str(&k.definition());
        }
    }
    s
}

/// The kernels a reduction `op` can launch: every combine's reduce kernel is
/// reachable from the slice primitives, plus the pre-multiply when the op has a
/// pre-op and the post-divide when it has a post-op.
pub fn kernels_for(op: &DevRedOp) -> Vec<Kernel> {
    let mut v = vec![Kernel::Reduce(op.dtype, op.combine)];
    if op.has_pre_op() {
        v.push(Kernel::PreMul(op.dtype));
    } else {
        v.push(Kernel::Copy);
    }
    if op.has_post_op() {
        v.push(Kernel::PostDiv(op.dtype));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedOp;

    #[test]
    fn inventory_is_57_unique_kernels() {
        let all: Vec<String> = Unit::all()
            .into_iter()
            .flat_map(|u| u.kernels())
            .map(|k| k.name())
            .collect();
        assert_eq!(all.len(), 1 + 10 * 5 + 6);
        let mut sorted = all.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len(), "kernel names are unique");
        assert!(all.contains(&"ferroccl_reduce_sum_bfloat16".to_string()));
        assert!(all.contains(&"ferroccl_postdiv_uint64".to_string()));
        assert!(!all.contains(&"ferroccl_postdiv_float".to_string()));
    }

    #[test]
    fn every_op_needs_only_defined_kernels() {
        for t in DataType::ALL {
            let defined = Unit::Type(t).kernels();
            for op in [
                RedOp::Sum,
                RedOp::Prod,
                RedOp::Max,
                RedOp::Min,
                RedOp::Avg,
                RedOp::PreMulSum(crate::Scalar::from_f64(t, 2.0)),
            ] {
                for nranks in [1, 3] {
                    let dev = DevRedOp::new(t, op, nranks).unwrap();
                    for k in kernels_for(&dev) {
                        assert!(k == Kernel::Copy || defined.contains(&k), "{t} {op}: {k:?} undefined");
                        assert_eq!(k.unit(), if k == Kernel::Copy { Unit::Copy } else { Unit::Type(t) });
                    }
                }
            }
        }
    }

    #[test]
    fn program_defines_each_entry_once() {
        let src = program(&Unit::all());
        for u in Unit::all() {
            for k in u.kernels() {
                let decl = format!("FCCL_GLOBAL {}(", k.name());
                assert_eq!(src.matches(&decl).count(), 1, "{decl}");
            }
        }
        let one = program(&[Unit::Type(DataType::Float32)]);
        assert!(one.contains("ferroccl_reduce_min_float("));
        assert!(!one.contains("ferroccl_copy("));
    }
}
