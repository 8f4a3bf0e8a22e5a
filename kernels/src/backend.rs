//! The interface every kernel backend implements: the CPU backend on host
//! memory, the CUDA backend (feature `cuda`) on device memory. The executor picks
//! one per operation by memory space ([`crate::backend_for_operands`]) and calls
//! the raw-address forms (`*_raw`), which exist for every backend.

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

    /// A form of this backend whose raw methods (`*_raw`) may return before
    /// their work has run: work enqueued through it runs in the order it was
    /// enqueued, and all of it has run once [`Backend::wait_enqueued`] on
    /// `self` returns (CUDA: launches on the backend's stream, then one
    /// `cuStreamSynchronize`). `None` (the default, the CPU backend): every raw
    /// method has finished when it returns. Nothing may read what such work
    /// writes, or write what it reads, before `wait_enqueued` returns.
    fn enqueuer(&self) -> Option<&dyn Backend> {
        None
    }

    /// Waits until everything enqueued through [`Backend::enqueuer`] has run,
    /// and returns the first error it met (a kernel fault).
    fn wait_enqueued(&self) -> Result<(), KernelError> {
        Ok(())
    }

    // ---- Raw-address forms: the memory-space-aware entry points ----
    //
    // The slice methods above need memory the host may dereference. The executor
    // holds raw addresses that may be device memory (never dereferenceable on the
    // host, so no Rust reference may point at it); it calls these instead. The
    // defaults (used by the CPU backend) build slices, so they are for host
    // memory; the CUDA backend overrides them and never touches the bytes on the
    // host. Same length rules and errors as the slice forms, with `bytes` the
    // length of every operand.

    /// `dst = src` on `bytes` bytes.
    ///
    /// # Safety
    /// `dst` and `src` must be valid for `bytes` bytes in a memory space this
    /// backend serves (host memory for the CPU backend; memory the device can
    /// reach for the CUDA backend), and must either be equal or not overlap.
    /// Nothing else may access `dst` during the call.
    unsafe fn copy_raw(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<(), KernelError> {
        if std::ptr::eq(dst, src) || bytes == 0 {
            return Ok(());
        }
        // SAFETY: the caller guarantees both ranges are valid host memory that
        // does not overlap and that nothing else accesses `dst`.
        unsafe {
            self.copy(
                std::slice::from_raw_parts_mut(dst, bytes),
                std::slice::from_raw_parts(src, bytes),
            )
        }
    }

    /// `dst = pre?(a) ⊕ pre?(b)` on `bytes` bytes; `dst` may equal `a` (in place,
    /// `Pre::A` then selects the accumulator as in [`Backend::reduce_inplace`]) or `b`.
    ///
    /// # Safety
    /// As [`Backend::copy_raw`], for all three ranges: each one either equal to
    /// `dst` or disjoint from it.
    unsafe fn reduce_raw(
        &self,
        dst: *mut u8,
        a: *const u8,
        b: *const u8,
        bytes: usize,
        op: &DevRedOp,
        pre: Pre,
    ) -> Result<(), KernelError> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: (all arms) the caller guarantees every range is valid host
        // memory for `bytes` bytes, equal to `dst` or disjoint from it, and that
        // nothing else accesses `dst`; a mutable slice never aliases another
        // slice (an operand equal to `dst` is read from a copy, or is `dst`).
        unsafe {
            let out = std::slice::from_raw_parts_mut(dst, bytes);
            match (std::ptr::eq(dst, a), std::ptr::eq(dst, b)) {
                (true, true) => {
                    let bv = out.to_vec();
                    self.reduce_inplace(out, &bv, op, pre)
                }
                (true, false) => self.reduce_inplace(out, std::slice::from_raw_parts(b, bytes), op, pre),
                (false, true) => {
                    let bv = out.to_vec();
                    self.reduce(out, std::slice::from_raw_parts(a, bytes), &bv, op, pre)
                }
                (false, false) => self.reduce(
                    out,
                    std::slice::from_raw_parts(a, bytes),
                    std::slice::from_raw_parts(b, bytes),
                    op,
                    pre,
                ),
            }
        }
    }

    /// `dst = pre(src)` on `bytes` bytes; `dst` may equal `src` (in place).
    ///
    /// # Safety
    /// As [`Backend::copy_raw`].
    unsafe fn pre_op_raw(&self, dst: *mut u8, src: *const u8, bytes: usize, op: &DevRedOp) -> Result<(), KernelError> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: as in `copy_raw`; in place only one (mutable) slice exists.
        unsafe {
            if std::ptr::eq(dst, src) {
                self.pre_op_inplace(std::slice::from_raw_parts_mut(dst, bytes), op)
            } else {
                self.pre_op(
                    std::slice::from_raw_parts_mut(dst, bytes),
                    std::slice::from_raw_parts(src, bytes),
                    op,
                )
            }
        }
    }

    /// The op's post-op on `bytes` bytes at `buf`, in place.
    ///
    /// # Safety
    /// `buf` must be valid for `bytes` bytes in a memory space this backend
    /// serves, and nothing else may access it during the call.
    unsafe fn post_op_raw(&self, buf: *mut u8, bytes: usize, op: &DevRedOp) -> Result<(), KernelError> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: the caller guarantees `buf` is valid, exclusively ours.
        unsafe { self.post_op(std::slice::from_raw_parts_mut(buf, bytes), op) }
    }
}
