//! The vectorised CPU kernels against the scalar reference, for every dtype × op,
//! every pre-op placement, in-place and out-of-place, on unaligned random buffers.

use ferroccl_kernels::{Backend, CpuBackend, DataType, DevRedOp, Pre, RedOp, Scalar, reference};
use proptest::prelude::*;

fn ops(dtype: DataType, s: f64) -> Vec<RedOp> {
    let _ = dtype;
    vec![
        RedOp::Sum,
        RedOp::Prod,
        RedOp::Max,
        RedOp::Min,
        RedOp::Avg,
        RedOp::PreMulSum(Scalar::from_f64(dtype, s)),
    ]
}

/// Equal bytes, except that two NaNs of a float type count as equal (payloads may differ).
fn same(dtype: DataType, x: &[u8], y: &[u8]) -> bool {
    if x == y {
        return true;
    }
    (0..x.len() / dtype.size()).all(|i| {
        let (a, b) = (reference::get(x, dtype, i), reference::get(y, dtype, i));
        match (a, b) {
            (reference::Value::F(a), reference::Value::F(b)) => {
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
            }
            _ => a == b,
        }
    })
}

fn dtype_strategy() -> impl Strategy<Value = DataType> {
    prop::sample::select(DataType::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    #[test]
    fn fast_equals_reference(
        dtype in dtype_strategy(),
        count in 0usize..300,
        offs in (0usize..8, 0usize..8, 0usize..8),
        seed in prop::collection::vec(any::<u8>(), 3 * 8 * 300 + 64),
        nranks in 1u32..9,
        s in -4.0f64..4.0,
        pre_i in 0usize..4,
    ) {
        let n = count * dtype.size();
        let (oa, ob, od) = offs;
        let a = &seed[oa..oa + n];
        let b = &seed[8 * 300 + ob..8 * 300 + ob + n];
        let pre = [Pre::None, Pre::A, Pre::B, Pre::Both][pre_i];
        for op in ops(dtype, s) {
            let dev = DevRedOp::new(dtype, op, nranks).unwrap();
            // out-of-place, dst at an odd offset
            let mut dst_buf = vec![0xAAu8; n + 8];
            let dst = &mut dst_buf[od..od + n];
            CpuBackend.reduce(dst, a, b, &dev, pre).unwrap();
            let mut want = vec![0u8; n];
            reference::reduce(&mut want, a, b, &dev, pre);
            prop_assert!(same(dtype, dst, &want), "reduce {dtype} {op} {pre:?} n={count}");
            // in-place
            let mut acc_buf = vec![0u8; n + 8];
            acc_buf[od..od + n].copy_from_slice(a);
            CpuBackend.reduce_inplace(&mut acc_buf[od..od + n], b, &dev, pre).unwrap();
            prop_assert!(same(dtype, &acc_buf[od..od + n], &want), "reduce_inplace {dtype} {op} {pre:?}");
            // pre_op out-of-place and in-place
            let mut p = vec![0u8; n];
            CpuBackend.pre_op(&mut p, a, &dev).unwrap();
            let mut pw = vec![0u8; n];
            reference::pre_op(&mut pw, a, &dev);
            prop_assert!(same(dtype, &p, &pw), "pre_op {dtype} {op}");
            let mut pi = a.to_vec();
            CpuBackend.pre_op_inplace(&mut pi, &dev).unwrap();
            prop_assert!(same(dtype, &pi, &pw), "pre_op_inplace {dtype} {op}");
            // post_op
            let mut q = a.to_vec();
            CpuBackend.post_op(&mut q, &dev).unwrap();
            let mut qw = a.to_vec();
            reference::post_op(&mut qw, &dev);
            prop_assert!(same(dtype, &q, &qw), "post_op {dtype} {op}");
            // bytes outside dst untouched
            prop_assert!(dst_buf[..od].iter().all(|&x| x == 0xAA) && dst_buf[od + n..].iter().all(|&x| x == 0xAA));
        }
    }
}
