//! Reduction and copy primitives for every `ncclDataType_t` × `ncclRedOp_t`.
//!
//! The ring executor works on byte buffers (user buffers, FIFO slots), so every
//! primitive here takes `&[u8]` / `&mut [u8]` plus a [`DataType`]. Buffers need not
//! be aligned; lengths must be a multiple of [`DataType::size`] and equal between
//! operands (otherwise [`KernelError`]).
//!
//! How NCCL applies a reduction (`hostToDevRedOp` in `src/enqueue.cc`) and how to
//! reproduce it with this crate:
//!
//! * [`RedOp`] is the user-visible `ncclRedOp_t`; [`DevRedOp::new`] lowers it for a
//!   datatype and rank count exactly like NCCL: `ncclAvg` becomes *PreMulSum by
//!   `1/nranks`* for floating types and *Sum then divide by `nranks`* (`SumPostDiv`)
//!   for integer types; `PreMulSum(s)` multiplies every rank's input by `s`.
//! * Executor recipe: whenever a rank's own user input enters the pipeline, apply
//!   the pre-op (`Backend::pre_op`, or the fused `Backend::reduce` with
//!   [`Pre::B`]); combine with `Backend::reduce`/`Backend::reduce_inplace`; when
//!   the fully reduced value is final, apply `Backend::post_op` (integer average
//!   division; a no-op otherwise). Data received from a peer already had its
//!   pre-op applied by that peer and must not get it again.
//!
//! Semantics (match NCCL's device code):
//! * integers: `+`/`*` wrap (two's complement); `max`/`min` ordinary; integer avg
//!   divides the wrapped sum, truncating toward zero;
//! * floats: IEEE `+`/`*`; `max`/`min` follow C `fmax`/`fmin` (what NCCL calls):
//!   if exactly one operand is NaN the other is returned, NaN only if both are;
//! * float16 / bfloat16: each operation is computed in `f32` and rounded to nearest
//!   even back to 16 bits after *every* operation (including after the pre-multiply),
//!   which equals NCCL's native `__hadd`/`__hmul` results bit for bit.

//!
//! Memory spaces (see [`memory_space`], [`backend_for_operands`]): the
//! [`CpuBackend`] works on host memory; the CUDA backend ([`cuda::CudaBackend`],
//! cargo feature `cuda`, on by default) runs the same primitives as CUDA kernels
//! compiled at run time with NVRTC. The executor classifies its buffers once
//! per operation and calls the raw-address methods of [`Backend`] on the
//! backend that can reach them. Without CUDA every pointer is host memory and
//! every CUDA entry point returns [`KernelError::NoCuda`]. `kernels/README.md`
//! says which parts need a GPU.

mod backend;
mod cpu;
pub mod cuda;
mod dtype;
mod error;
mod half_conv;
pub mod hostreg;
mod op;
pub mod reference;
mod space;

pub use backend::{Backend, Pre};
pub use cpu::{CpuBackend, Reducer};
pub use dtype::DataType;
pub use error::KernelError;
pub use op::{Combine, DevRedOp, RedOp, Scalar};
pub use space::{MemorySpace, backend_for, backend_for_operands, backend_for_space, memory_space};

/// Deterministic xorshift64 (Marsaglia 2003) for the unit tests' bit patterns.
#[cfg(test)]
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}
