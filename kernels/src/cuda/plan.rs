//! Launch planning: which kernel, how many blocks, and the kernel arguments for
//! one primitive on raw device addresses. Pure arithmetic, no CUDA call, so it
//! is tested on any machine (and the GPU emulation test runs `kernels.cu` with
//! exactly these launches).
//!
//! Every kernel takes eight 64-bit arguments (`kernels.cu`'s `FCCL_PARAMS`):
//! `dst, a, b, count, head, nvec, scalar, flags`. The element range is split
//! into a head before the first 16-byte boundary, `nvec` 16-byte packs, and a
//! tail (see `kernels.cu`). Packs are used only when every operand has the same
//! address modulo 16 and that offset is a whole number of elements; otherwise
//! all elements take the scalar path.
//!
//! Grid: [`BLOCK_THREADS`] threads per block, as many blocks as the work needs,
//! at most as many as the device keeps resident at once
//! (`multiProcessorCount × maxThreadsPerMultiProcessor / BLOCK_THREADS`);
//! threads then stride over the rest.

use crate::backend::Pre;
use crate::cpu::{check_len, check_same};
use crate::cuda::source::Kernel;
use crate::{DevRedOp, KernelError};

/// Threads per block (the kernels' `__launch_bounds__`).
pub const BLOCK_THREADS: u32 = 512;

/// Bytes per vector load/store.
pub const PACK_BYTES: u64 = 16;

/// What the grid size depends on: `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT` and
/// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceShape {
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Resident threads per multiprocessor.
    pub max_threads_per_sm: u32,
}

impl DeviceShape {
    /// Blocks of [`BLOCK_THREADS`] the device runs at once (at least 1).
    pub fn resident_blocks(&self) -> u32 {
        (self.sm_count.max(1) * (self.max_threads_per_sm / BLOCK_THREADS).max(1)).max(1)
    }
}

/// One kernel launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// The entry point.
    pub kernel: Kernel,
    /// Blocks (1-D grid).
    pub grid: u32,
    /// Threads per block.
    pub block: u32,
    /// `dst, a, b, count, head, nvec, scalar, flags`.
    pub args: [u64; 8],
}

/// `(head, nvec)` for `count` elements of `elem` bytes at `addrs`.
pub fn split(addrs: &[u64], elem: u64, count: u64) -> (u64, u64) {
    let off = addrs.first().map_or(0, |a| a % PACK_BYTES);
    let same = addrs.iter().all(|a| a % PACK_BYTES == off);
    if !same || !off.is_multiple_of(elem) {
        return (count, 0);
    }
    let per_pack = PACK_BYTES / elem;
    let head = (((PACK_BYTES - off) % PACK_BYTES) / elem).min(count);
    let nvec = (count - head) / per_pack;
    (head, nvec)
}

fn launch(
    shape: &DeviceShape,
    kernel: Kernel,
    addrs: [u64; 3],
    elem: u64,
    count: u64,
    scalar: u64,
    flags: u64,
) -> Launch {
    let used: &[u64] = match kernel {
        Kernel::Reduce(..) => &addrs,
        _ => &addrs[..2],
    };
    let (head, nvec) = split(used, elem, count);
    let scalar_items = head + (count - head - nvec * (PACK_BYTES / elem));
    let work = nvec.max(scalar_items);
    let blocks = work.div_ceil(u64::from(BLOCK_THREADS)).max(1);
    Launch {
        kernel,
        grid: blocks.min(u64::from(shape.resident_blocks())) as u32,
        block: BLOCK_THREADS,
        args: [addrs[0], addrs[1], addrs[2], count, head, nvec, scalar, flags],
    }
}

impl Launch {
    /// Bytes per element of the launch's kernel (1 for [`Kernel::Copy`]).
    pub fn elem_bytes(&self) -> u64 {
        match self.kernel {
            Kernel::Copy => 1,
            Kernel::Reduce(t, _) | Kernel::PreMul(t) | Kernel::PostDiv(t) => t.size() as u64,
        }
    }

    /// Every store the launch's threads make, in `kernels.cu`'s `elementwise`
    /// indexing: `f(thread, first, n)` for thread `thread` (`blockIdx.x *
    /// blockDim.x + threadIdx.x`) storing elements `first..first + n` of the
    /// `count` elements at `dst` (`n` = `16 / elem` for a pack, 1 for a head or
    /// tail element). The same loops as the kernel (the 4-way unrolled pack
    /// loop, its remainder, then the scalar head and tail), so a test can prove
    /// from the plan alone that every element is written by exactly one thread
    /// of exactly one launch. Keep in step with `elementwise` in `kernels.cu`.
    pub fn for_each_store(&self, mut f: impl FnMut(u64, u64, u64)) {
        const UNROLL: u64 = 4;
        let [_, _, _, count, head, nvec, _, _] = self.args;
        let per_pack = PACK_BYTES / self.elem_bytes();
        let nth = u64::from(self.grid) * u64::from(self.block);
        // u64 arithmetic wraps in the kernel.
        let tail = head.wrapping_add(nvec.wrapping_mul(per_pack));
        let nscalar = head.wrapping_add(count.wrapping_sub(tail));
        for tid in 0..nth {
            let mut i = tid;
            while i + (UNROLL - 1) * nth < nvec {
                for u in 0..UNROLL {
                    f(tid, head + (i + u * nth) * per_pack, per_pack);
                }
                i += UNROLL * nth;
            }
            while i < nvec {
                f(tid, head + i * per_pack, per_pack);
                i += nth;
            }
            let mut j = tid;
            while j < nscalar {
                f(tid, if j < head { j } else { tail.wrapping_add(j - head) }, 1);
                j += nth;
            }
        }
    }
}

/// The pre-multiply scalar as the kernels read it (its bytes, little-endian).
fn scalar_bits(op: &DevRedOp) -> u64 {
    op.pre_mul.map_or(0, |s| u64::from_le_bytes(s.0))
}

/// Kernel argument `flags` for `pre` (bit 0: first operand, bit 1: second).
fn pre_flags(op: &DevRedOp, pre: Pre) -> u64 {
    if op.pre_mul.is_none() {
        return 0;
    }
    match pre {
        Pre::None => 0,
        Pre::A => 1,
        Pre::B => 2,
        Pre::Both => 3,
    }
}

/// `dst = src` on `bytes` bytes; `None` when there is nothing to do.
pub fn copy(shape: &DeviceShape, dst: u64, src: u64, bytes: usize) -> Option<Launch> {
    if bytes == 0 || dst == src {
        return None;
    }
    Some(launch(shape, Kernel::Copy, [dst, src, src], 1, bytes as u64, 0, 0))
}

/// `dst = pre?(a) ⊕ pre?(b)` (`dst` may equal `a` or `b`). Errors as
/// [`Backend::reduce`](crate::Backend::reduce); `None` for zero bytes.
pub fn reduce(
    shape: &DeviceShape,
    dst: u64,
    a: u64,
    b: u64,
    bytes: usize,
    op: &DevRedOp,
    pre: Pre,
) -> Result<Option<Launch>, KernelError> {
    check_len("dst", bytes, op.dtype)?;
    if bytes == 0 {
        return Ok(None);
    }
    let elem = op.dtype.size() as u64;
    Ok(Some(launch(
        shape,
        Kernel::Reduce(op.dtype, op.combine),
        [dst, a, b],
        elem,
        bytes as u64 / elem,
        scalar_bits(op),
        pre_flags(op, pre),
    )))
}

/// `dst = pre(src)` (`dst` may equal `src`): the pre-multiply kernel, or a copy
/// when the op has no pre-op; `None` when nothing is to be done.
pub fn pre_op(
    shape: &DeviceShape,
    dst: u64,
    src: u64,
    bytes: usize,
    op: &DevRedOp,
) -> Result<Option<Launch>, KernelError> {
    check_len("dst", bytes, op.dtype)?;
    if op.pre_mul.is_none() {
        return Ok(copy(shape, dst, src, bytes));
    }
    if bytes == 0 {
        return Ok(None);
    }
    let elem = op.dtype.size() as u64;
    Ok(Some(launch(
        shape,
        Kernel::PreMul(op.dtype),
        [dst, src, src],
        elem,
        bytes as u64 / elem,
        scalar_bits(op),
        0,
    )))
}

/// The post-op in place on `buf` (integer average: divide by nranks); `None`
/// when the op has none.
pub fn post_op(shape: &DeviceShape, buf: u64, bytes: usize, op: &DevRedOp) -> Result<Option<Launch>, KernelError> {
    check_len("buf", bytes, op.dtype)?;
    let Some(n) = op.post_div.filter(|&n| n != 1) else {
        return Ok(None);
    };
    if bytes == 0 {
        return Ok(None);
    }
    let elem = op.dtype.size() as u64;
    Ok(Some(launch(
        shape,
        Kernel::PostDiv(op.dtype),
        [buf, buf, buf],
        elem,
        bytes as u64 / elem,
        u64::from(n),
        0,
    )))
}

/// Checks operand lengths as the slice primitives do (`dst` vs each other).
pub fn check_lengths(dtype: crate::DataType, dst: usize, others: &[(&'static str, usize)]) -> Result<(), KernelError> {
    check_len("dst", dst, dtype)?;
    for &(what, n) in others {
        check_same(what, dst, n)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DataType, RedOp, Scalar};

    const H100: DeviceShape = DeviceShape {
        sm_count: 132,
        max_threads_per_sm: 2048,
    };

    #[test]
    fn split_aligned_misaligned_and_mixed() {
        // All 16-byte aligned floats: no head, packs of 4, tail of the rest.
        assert_eq!(split(&[0x1000, 0x2000, 0x3000], 4, 10), (0, 2));
        // Same offset 8: head of 2 floats, then packs.
        assert_eq!(split(&[0x1008, 0x2008, 0x3008], 4, 11), (2, 2));
        // Different offsets: scalar only.
        assert_eq!(split(&[0x1000, 0x2004], 4, 100), (100, 0));
        // Offset not a whole element (odd address for a float): scalar only.
        assert_eq!(split(&[0x1001, 0x2001], 4, 100), (100, 0));
        // Bytes: any common offset vectorises.
        assert_eq!(split(&[0x1003, 0x2003], 1, 100), (13, 5));
        // Head longer than the buffer.
        assert_eq!(split(&[0x1008], 2, 3), (3, 0));
        assert_eq!(split(&[0x1000], 8, 0), (0, 0));
    }

    #[test]
    fn split_covers_every_element_once() {
        for off in 0..16u64 {
            for elem in [1u64, 2, 4, 8] {
                for count in 0..70u64 {
                    let (head, nvec) = split(&[0x1000 + off, 0x9000 + off], elem, count);
                    let packed = nvec * (16 / elem);
                    assert!(head + packed <= count, "off {off} elem {elem} count {count}");
                    if nvec > 0 {
                        assert_eq!((0x1000 + off + head * elem) % 16, 0, "packs start 16-byte aligned");
                    }
                    // The tail is shorter than a pack whenever packs are used.
                    if off % elem == 0 {
                        assert!(count - head - packed < 16 / elem || head == count);
                    }
                }
            }
        }
    }

    #[test]
    fn grid_is_capped_by_the_device_and_at_least_one_block() {
        let op = DevRedOp::new(DataType::Float32, RedOp::Sum, 2).unwrap();
        let big = reduce(&H100, 0x10000, 0x20000, 0x30000, 64 << 20, &op, Pre::None)
            .unwrap()
            .unwrap();
        assert_eq!(big.grid, 132 * 4);
        assert_eq!(big.block, BLOCK_THREADS);
        let small = reduce(&H100, 0x10000, 0x20000, 0x30000, 64, &op, Pre::None)
            .unwrap()
            .unwrap();
        assert_eq!(small.grid, 1);
        assert_eq!(small.args[3], 16);
        assert!(reduce(&H100, 0, 0, 0, 0, &op, Pre::None).unwrap().is_none());
        assert!(reduce(&H100, 0, 0, 0, 6, &op, Pre::None).is_err());
    }

    #[test]
    fn ops_choose_their_kernels_and_flags() {
        let t = DataType::Float16;
        let pms = DevRedOp::new(t, RedOp::PreMulSum(Scalar::from_f64(t, 0.5)), 4).unwrap();
        let l = reduce(&H100, 0x100, 0x200, 0x300, 64, &pms, Pre::B).unwrap().unwrap();
        assert_eq!(l.kernel, Kernel::Reduce(t, crate::Combine::Sum));
        assert_eq!(l.args[7], 2);
        assert_eq!(l.args[6], u64::from(half::f16::from_f32(0.5).to_bits()));
        let sum = DevRedOp::new(t, RedOp::Sum, 4).unwrap();
        let l = reduce(&H100, 0x100, 0x200, 0x300, 64, &sum, Pre::Both)
            .unwrap()
            .unwrap();
        assert_eq!(l.args[7], 0, "no pre-op: flags ignored");
        assert_eq!(
            pre_op(&H100, 0x100, 0x200, 64, &sum).unwrap().unwrap().kernel,
            Kernel::Copy
        );
        assert!(pre_op(&H100, 0x100, 0x100, 64, &sum).unwrap().is_none());
        assert_eq!(
            pre_op(&H100, 0x100, 0x100, 64, &pms).unwrap().unwrap().kernel,
            Kernel::PreMul(t)
        );
        let iavg = DevRedOp::new(DataType::Int32, RedOp::Avg, 3).unwrap();
        let l = post_op(&H100, 0x100, 64, &iavg).unwrap().unwrap();
        assert_eq!((l.kernel, l.args[6]), (Kernel::PostDiv(DataType::Int32), 3));
        assert!(post_op(&H100, 0x100, 64, &sum).unwrap().is_none());
        let one = DevRedOp::new(DataType::Int32, RedOp::Avg, 1).unwrap();
        assert!(post_op(&H100, 0x100, 64, &one).unwrap().is_none());
        assert!(post_op(&H100, 0x100, 6, &iavg).is_err());
    }
}
