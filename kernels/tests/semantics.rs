//! Element semantics that must match NCCL exactly.

use ferroccl_kernels::{Backend, CpuBackend, DataType, DevRedOp, KernelError, Pre, RedOp, Reducer, Scalar};
use half::{bf16, f16};

fn bytes<T: Copy, const N: usize>(v: [T; N], f: impl Fn(T) -> Vec<u8>) -> Vec<u8> {
    v.into_iter().flat_map(f).collect()
}

#[test]
fn integer_sum_and_prod_wrap() {
    let a = bytes([i8::MAX, i8::MIN, 100], |x| x.to_ne_bytes().to_vec());
    let b = bytes([1i8, -1, 100], |x| x.to_ne_bytes().to_vec());
    let mut d = vec![0u8; 3];
    Reducer.reduce(&mut d, &a, &b, DataType::Int8, &RedOp::Sum).unwrap();
    assert_eq!(
        d.iter().map(|&x| x as i8).collect::<Vec<_>>(),
        vec![i8::MIN, i8::MAX, -56]
    );
    let a = u64::MAX.to_ne_bytes();
    let b = 2u64.to_ne_bytes();
    let mut d = [0u8; 8];
    Reducer.reduce(&mut d, &a, &b, DataType::Uint64, &RedOp::Prod).unwrap();
    assert_eq!(u64::from_ne_bytes(d), u64::MAX.wrapping_mul(2));
}

#[test]
fn float_max_min_ignore_a_single_nan() {
    let a = bytes([f32::NAN, 1.0, f32::NAN], |x: f32| x.to_ne_bytes().to_vec());
    let b = bytes([2.0f32, f32::NAN, f32::NAN], |x: f32| x.to_ne_bytes().to_vec());
    for op in [RedOp::Max, RedOp::Min] {
        let mut d = vec![0u8; 12];
        Reducer.reduce(&mut d, &a, &b, DataType::Float32, &op).unwrap();
        let v: Vec<f32> = d.chunks(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect();
        assert_eq!(v[0], 2.0);
        assert_eq!(v[1], 1.0);
        assert!(v[2].is_nan());
    }
}

#[test]
fn avg_lowering_matches_nccl() {
    let d = DevRedOp::new(DataType::Int32, RedOp::Avg, 4).unwrap();
    assert_eq!((d.pre_mul, d.post_div), (None, Some(4)));
    let d = DevRedOp::new(DataType::Float32, RedOp::Avg, 3).unwrap();
    assert_eq!(
        d.pre_mul,
        Some(Scalar::from_f64(DataType::Float32, f64::from((1.0f64 / 3.0) as f32)))
    );
    assert_eq!(d.post_div, None);
    let d = DevRedOp::new(DataType::Float16, RedOp::Avg, 3).unwrap();
    assert_eq!(
        d.pre_mul.unwrap().bytes(DataType::Float16),
        f16::from_f32((1.0f64 / 3.0) as f32).to_ne_bytes()
    );
    assert_eq!(
        DevRedOp::new(DataType::Int8, RedOp::Avg, 0),
        Err(KernelError::ZeroRanks)
    );
}

#[test]
fn integer_avg_truncates_toward_zero() {
    let op = DevRedOp::new(DataType::Int32, RedOp::Avg, 4).unwrap();
    let mut buf = bytes([-7i32, 7, -8, i32::MIN], |x| x.to_ne_bytes().to_vec());
    CpuBackend.post_op(&mut buf, &op).unwrap();
    let v: Vec<i32> = buf
        .chunks(4)
        .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(v, vec![-1, 1, -2, i32::MIN / 4]);
    // uint8 with more ranks than the type can count.
    let op = DevRedOp::new(DataType::Uint8, RedOp::Avg, 200).unwrap();
    let mut buf = vec![250u8, 199];
    CpuBackend.post_op(&mut buf, &op).unwrap();
    assert_eq!(buf, vec![1, 0]);
}

#[test]
fn premulsum_rounds_after_the_multiply_for_half() {
    // 2049 is not representable in f16 (rounds to 2048); (1025*2) = 2050 is.
    let s = Scalar::from_f64(DataType::Float16, 2.0);
    let op = DevRedOp::new(DataType::Float16, RedOp::PreMulSum(s), 2).unwrap();
    let a = f16::from_f32(1025.0).to_ne_bytes();
    let b = f16::from_f32(1.0).to_ne_bytes();
    let mut d = [0u8; 2];
    CpuBackend.reduce(&mut d, &a, &b, &op, Pre::Both).unwrap();
    // round(2050 + 2) = 2052
    assert_eq!(f16::from_ne_bytes(d).to_f32(), 2052.0);
    // bfloat16 sum rounds to nearest even: 256 + 1 = 257 -> 256 (8-bit mantissa)
    let a = bf16::from_f32(256.0).to_ne_bytes();
    let b = bf16::from_f32(1.0).to_ne_bytes();
    Reducer.reduce(&mut d, &a, &b, DataType::Bfloat16, &RedOp::Sum).unwrap();
    assert_eq!(bf16::from_ne_bytes(d).to_f32(), 256.0);
}

#[test]
fn bad_lengths_are_errors_and_write_nothing() {
    let mut d = vec![7u8; 6];
    let e = Reducer
        .reduce(&mut d, &[0; 6], &[0; 6], DataType::Float32, &RedOp::Sum)
        .unwrap_err();
    assert!(matches!(e, KernelError::Misaligned { len: 6, size: 4, .. }), "{e}");
    assert!(e.to_string().contains("not a multiple"));
    let e = Reducer
        .reduce(&mut d, &[0; 6], &[0; 4], DataType::Int8, &RedOp::Sum)
        .unwrap_err();
    assert!(matches!(
        e,
        KernelError::LengthMismatch {
            expected: 6,
            found: 4,
            ..
        }
    ));
    assert_eq!(d, vec![7u8; 6]);
    assert!(Reducer.copy(&mut d, &[1; 5]).is_err());
}

#[test]
fn dtype_names_and_values() {
    for (i, t) in DataType::ALL.iter().enumerate() {
        assert_eq!(DataType::from_nccl(i as i32).unwrap(), *t);
        assert_eq!(t.to_nccl(), i as i32);
        assert_eq!(t.name().parse::<DataType>().unwrap(), *t);
    }
    assert_eq!("float16".parse::<DataType>().unwrap(), DataType::Float16);
    assert_eq!("bf16".parse::<DataType>().unwrap(), DataType::Bfloat16);
    assert_eq!("float64".parse::<DataType>().unwrap(), DataType::Float64);
    assert_eq!(DataType::Float16.to_string(), "half");
    assert!(DataType::from_nccl(10).is_err());
    assert!("int9".parse::<DataType>().is_err());
    assert_eq!(RedOp::from_nccl(4).unwrap(), RedOp::Avg);
    assert!(RedOp::from_nccl(5).is_err());
}

#[test]
fn finalize_avg_sum_then_scale() {
    let mut buf = bytes([6.0f64, -3.0], |x| x.to_ne_bytes().to_vec());
    Reducer.finalize_avg(&mut buf, DataType::Float64, 3).unwrap();
    let v: Vec<f64> = buf
        .chunks(8)
        .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(v, vec![6.0 * (1.0 / 3.0), -3.0 * (1.0 / 3.0)]);
    let mut buf = bytes([-7i64, 9], |x| x.to_ne_bytes().to_vec());
    Reducer.finalize_avg(&mut buf, DataType::Int64, 2).unwrap();
    assert_eq!(i64::from_ne_bytes(buf[..8].try_into().unwrap()), -3);
    assert_eq!(i64::from_ne_bytes(buf[8..].try_into().unwrap()), 4);
}
