//! Launch-plan coverage, proved from the plan alone (no GPU, no compiler):
//! for real device shapes (132 SMs × 2048 threads as on H100/H200, 108 as on
//! A100, 58, 8, and the emulation's small device), every dtype size (1, 2, 4,
//! 8 bytes), the buffer offsets the kernel tests use (aligned, a common
//! offset, mutually misaligned, not element-aligned, in place), and element
//! counts on both sides of every boundary of the plan (head / packs / tail,
//! one block's work, the grid cap, the kernel's 4-way unrolled loop, and
//! 2^20 + 5 with its neighbours, the size at which an H200 saw in-place
//! mismatches), every element of the destination is stored by exactly one
//! thread of exactly one launch, no store leaves the destination, and every
//! 16-byte pack store is 16-byte aligned.
//!
//! The stores are enumerated by [`Launch::for_each_store`], which follows the
//! loops of `kernels.cu`'s `elementwise`; `cuda_emulated.rs` runs the kernel
//! source itself with the same shapes (blocks in shuffled order, in place).

use ferroccl_kernels::cuda::plan::{self, BLOCK_THREADS, DeviceShape, Launch, PACK_BYTES};
use ferroccl_kernels::{DataType, DevRedOp, Pre, RedOp, Scalar};

fn shape(sm_count: u32) -> DeviceShape {
    DeviceShape {
        sm_count,
        max_threads_per_sm: 2048,
    }
}

/// H100/H200, A100, a mid-size part, a small part, and the emulation's
/// 2-block device.
fn shapes() -> Vec<DeviceShape> {
    vec![
        shape(132),
        shape(108),
        shape(58),
        shape(8),
        DeviceShape {
            sm_count: 1,
            max_threads_per_sm: 1024,
        },
    ]
}

/// One dtype per element size, with an op whose pre- or post-op kernel exists.
fn dtypes() -> [(DataType, RedOp); 4] {
    [
        (DataType::Int8, RedOp::Avg),
        (
            DataType::Float16,
            RedOp::PreMulSum(Scalar::from_f64(DataType::Float16, 0.5)),
        ),
        (DataType::Float32, RedOp::Avg),
        (DataType::Int64, RedOp::Avg),
    ]
}

/// Element counts on both sides of every boundary for elements of `e` bytes
/// on `shape`; `big` adds the grid cap and the unrolled loop's boundaries.
fn counts(shape: &DeviceShape, e: u64, big: bool) -> Vec<u64> {
    let n = PACK_BYTES / e;
    let block = u64::from(BLOCK_THREADS);
    let nth = u64::from(shape.resident_blocks()) * block;
    let mut c: Vec<u64> = (0..=3 * n + 2).collect();
    let mut around = |x: u64, ds: &[u64]| {
        for &d in ds {
            c.push(x.saturating_sub(d));
            c.push(x + d);
        }
    };
    around(block * n, &[0, 1, n - 1, n, n + 1]);
    around(1 << 20, &[0, 1, 4, 5, 6]);
    if big {
        around(nth * n, &[0, 1, n]);
        around(4 * nth * n, &[0, 1, n]);
    }
    c.sort_unstable();
    c.dedup();
    c
}

/// Byte offsets of (dst, a, b) as `cuda_emulated.rs` and `cuda_device.rs` use
/// them, plus the common one-element offset.
fn offsets(e: u64) -> Vec<(u64, u64, u64)> {
    vec![(0, 0, 0), (e, e, e), (e, e + 16, e + 32), (0, e.min(8), 0), (1, 3, 5)]
}

/// The stores of `launches` (one primitive's launches on one destination of
/// `count` elements at `dst`) land once on each element, inside the
/// destination, packs 16-byte aligned; every grid fits the device.
fn check_all(shape: &DeviceShape, dst: u64, count: u64, launches: &[Launch], what: &str) {
    let mut seen = vec![0u8; count as usize];
    let mut bad: Vec<String> = Vec::new();
    for (li, l) in launches.iter().enumerate() {
        assert!(
            l.grid >= 1 && l.grid <= shape.resident_blocks(),
            "{what}: grid {} for {shape:?}",
            l.grid
        );
        assert_eq!(l.block, BLOCK_THREADS, "{what}");
        let e = l.elem_bytes();
        let base = (l.args[0] - dst) / e;
        l.for_each_store(|tid, first, n| {
            let first = base + first;
            if first + n > count {
                bad.push(format!(
                    "launch {li} thread {tid} stores {first}..{} past {count}",
                    first + n
                ));
                return;
            }
            if n > 1 && !(dst + first * e).is_multiple_of(PACK_BYTES) {
                bad.push(format!(
                    "launch {li} thread {tid} stores an unaligned pack at element {first}"
                ));
            }
            for s in &mut seen[first as usize..(first + n) as usize] {
                *s = s.saturating_add(1);
            }
        });
    }
    if let Some(i) = seen.iter().position(|&s| s != 1) {
        bad.push(format!("element {i} of {count} stored {} times", seen[i]));
    }
    assert!(bad.is_empty(), "{what}: {}", bad[..bad.len().min(5)].join("; "));
}

fn check(shape: &DeviceShape, l: &Launch, what: &str) {
    check_all(shape, l.args[0], l.args[3], std::slice::from_ref(l), what);
}

#[test]
fn every_element_is_stored_by_exactly_one_thread_of_one_launch() {
    const DST: u64 = 0x7f00_0000_0000;
    const A: u64 = 0x7f10_0000_0000;
    const B: u64 = 0x7f20_0000_0000;
    let mut cases = 0;
    for (si, shape) in shapes().into_iter().enumerate() {
        for (t, op) in dtypes() {
            let e = t.size() as u64;
            let dev = DevRedOp::new(t, op, 3).unwrap();
            // The grid cap and unrolled-loop sizes (up to 17 M elements): on
            // H100 with a common one-element offset (head, packs and tail), on
            // the smaller shapes aligned.
            for (oi, (od, oa, ob)) in offsets(e).into_iter().enumerate() {
                for count in counts(&shape, e, oi == 0 && si >= 2 || oi == 1 && si == 0) {
                    let bytes = (count * e) as usize;
                    let what = |k: &str| format!("{k} {t} count {count} offsets {:?} {shape:?}", (od, oa, ob));
                    let out = plan::reduce(&shape, DST + od, A + oa, B + ob, bytes, &dev, Pre::Both).unwrap();
                    let inplace = plan::reduce(&shape, A + oa, A + oa, B + ob, bytes, &dev, Pre::Both).unwrap();
                    assert_eq!(out.is_none(), count == 0);
                    for (l, k) in [(out, "reduce"), (inplace, "reduce in place")] {
                        if let Some(l) = l {
                            check(&shape, &l, &what(k));
                            cases += 1;
                        }
                    }
                    let pre = plan::pre_op(&shape, A + oa, A + oa, bytes, &dev).unwrap();
                    let post = plan::post_op(&shape, A + oa, bytes, &dev).unwrap();
                    let copy = plan::copy(&shape, DST + od, A + oa, bytes);
                    for (l, k) in [(pre, "pre_op in place"), (post, "post_op"), (copy, "copy")] {
                        if let Some(l) = l {
                            check(&shape, &l, &what(k));
                            cases += 1;
                        }
                    }
                }
            }
        }
    }
    eprintln!("{cases} launches: every element stored exactly once");
}

/// The check itself can fail: a second launch over part of the range (as a
/// plan split into launches that overlap would make) is caught.
#[test]
fn a_plan_that_stores_twice_is_caught() {
    let shape = shape(132);
    let dev = DevRedOp::new(DataType::Uint8, RedOp::Sum, 2).unwrap();
    let n = (1 << 20) + 5;
    let l = plan::reduce(&shape, 0x1000, 0x1000, 0x9000, n, &dev, Pre::None)
        .unwrap()
        .unwrap();
    check(&shape, &l, "as planned");
    let last = plan::reduce(&shape, 0x1000 + n as u64 - 21, 0x1000, 0x9000, 21, &dev, Pre::None)
        .unwrap()
        .unwrap();
    let r = std::panic::catch_unwind(|| check_all(&shape, 0x1000, n as u64, &[l, last], "overlapping launches"));
    let msg = r.expect_err("a double store must fail the check");
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("stored 2 times"), "{msg}");
}
