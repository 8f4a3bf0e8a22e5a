//! The interface every kernel backend implements (CPU now, CUDA later).

use crate::{DevRedOp, KernelError};

/// Which operands of a binary reduction get the op's pre-multiply
/// ([`DevRedOp::pre_mul`]) before combining. Ignored when the op has no pre-op.
///
/// In a ring, the rank's own user input needs the pre-op (once); data received
/// from a peer already has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Pre {
    /// Neither operand.
    #[default]
    None,
    /// The first operand (`a`, or `acc` for in-place).
    A,
    /// The second operand (`b`, or `src` for in-place).
    B,
    /// Both operands.
    Both,
}

/// Reduction and copy primitives on byte buffers of one datatype.
///
/// All lengths are in bytes, must be equal between operands and a multiple of
/// `op.dtype.size()` ([`KernelError::LengthMismatch`] / [`KernelError::Misaligned`]
/// otherwise, and nothing is written). Buffers may have any alignment.
/// Results are bit-identical between backends for integers and follow the same
/// per-operation rounding for floats.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Short name for logs (`"cpu"`).
    fn name(&self) -> &'static str;

    /// `dst = src`.
    fn copy(&self, dst: &mut [u8], src: &[u8]) -> Result<(), KernelError>;

    /// `dst = pre?(a) ⊕ pre?(b)` element-wise, `⊕` = `op.combine`, pre-multiply
    /// applied to the operands selected by `pre`.
    fn reduce(&self, dst: &mut [u8], a: &[u8], b: &[u8], op: &DevRedOp, pre: Pre) -> Result<(), KernelError>;

    /// `acc = pre?(acc) ⊕ pre?(src)` element-wise (`Pre::A` = acc, `Pre::B` = src).
    fn reduce_inplace(&self, acc: &mut [u8], src: &[u8], op: &DevRedOp, pre: Pre) -> Result<(), KernelError>;

    /// `dst = pre(src)`: multiply by the op's pre-multiply scalar, or plain copy when
    /// the op has none. Use when a rank's own input is sent without combining
    /// (first step of a ring reduce).
    fn pre_op(&self, dst: &mut [u8], src: &[u8], op: &DevRedOp) -> Result<(), KernelError>;

    /// `buf = pre(buf)` in place (no-op when the op has no pre-multiply).
    fn pre_op_inplace(&self, buf: &mut [u8], op: &DevRedOp) -> Result<(), KernelError>;

    /// Applies the op's post-op to a fully reduced buffer: integer `Avg` divides by
    /// `nranks` (truncating toward zero); no-op for every other op/type.
    fn post_op(&self, buf: &mut [u8], op: &DevRedOp) -> Result<(), KernelError>;
}
