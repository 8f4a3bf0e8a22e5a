//! Scalar, obviously-correct reference implementation (used by tests and by the
//! runtime's result checks). One element at a time, through typed values; 16-bit
//! floats go through `f32` with the `half` crate's per-element conversions and are
//! rounded after every operation. Same semantics as the fast kernels (see the
//! crate docs).

use half::{bf16, f16};

use crate::{Combine, DataType, DevRedOp, Pre, Scalar};

/// One decoded element.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// Signed integer (int8/int32/int64), sign-extended.
    I(i64),
    /// Unsigned integer (uint8/uint32/uint64).
    U(u64),
    /// Floating point value (exactly representable in f64 for every float type).
    F(f64),
}

/// Decodes element `i` of `buf`.
pub fn get(buf: &[u8], dtype: DataType, i: usize) -> Value {
    let n = dtype.size();
    let b = &buf[i * n..(i + 1) * n];
    match dtype {
        DataType::Int8 => Value::I(i8::from_ne_bytes([b[0]]).into()),
        DataType::Uint8 => Value::U(b[0].into()),
        DataType::Int32 => Value::I(i32::from_ne_bytes(b.try_into().unwrap()).into()),
        DataType::Uint32 => Value::U(u32::from_ne_bytes(b.try_into().unwrap()).into()),
        DataType::Int64 => Value::I(i64::from_ne_bytes(b.try_into().unwrap())),
        DataType::Uint64 => Value::U(u64::from_ne_bytes(b.try_into().unwrap())),
        DataType::Float16 => Value::F(f16::from_ne_bytes([b[0], b[1]]).to_f64()),
        DataType::Bfloat16 => Value::F(bf16::from_ne_bytes([b[0], b[1]]).to_f64()),
        DataType::Float32 => Value::F(f32::from_ne_bytes(b.try_into().unwrap()).into()),
        DataType::Float64 => Value::F(f64::from_ne_bytes(b.try_into().unwrap())),
    }
}

/// Encodes `v` into element `i` of `buf`, wrapping integers to the type and
/// rounding floats to nearest even.
pub fn set(buf: &mut [u8], dtype: DataType, i: usize, v: Value) {
    let n = dtype.size();
    let b = &mut buf[i * n..(i + 1) * n];
    let (iv, uv) = match v {
        Value::I(x) => (x, x as u64),
        Value::U(x) => (x as i64, x),
        Value::F(_) => (0, 0),
    };
    let fv = match v {
        Value::F(x) => x,
        _ => f64::NAN,
    };
    match dtype {
        DataType::Int8 => b.copy_from_slice(&(iv as i8).to_ne_bytes()),
        DataType::Uint8 => b.copy_from_slice(&(uv as u8).to_ne_bytes()),
        DataType::Int32 => b.copy_from_slice(&(iv as i32).to_ne_bytes()),
        DataType::Uint32 => b.copy_from_slice(&(uv as u32).to_ne_bytes()),
        DataType::Int64 => b.copy_from_slice(&iv.to_ne_bytes()),
        DataType::Uint64 => b.copy_from_slice(&uv.to_ne_bytes()),
        // f32 -> f16 with the value already rounded to f32 first (see `round`).
        DataType::Float16 => b.copy_from_slice(&f16::from_f32(fv as f32).to_ne_bytes()),
        DataType::Bfloat16 => b.copy_from_slice(&bf16::from_f32(fv as f32).to_ne_bytes()),
        DataType::Float32 => b.copy_from_slice(&(fv as f32).to_ne_bytes()),
        DataType::Float64 => b.copy_from_slice(&fv.to_ne_bytes()),
    }
}

/// Rounds a float result to what the type stores (round trip through the type).
fn round(dtype: DataType, v: Value) -> Value {
    let mut b = [0u8; 8];
    set(&mut b, dtype, 0, v);
    get(&b, dtype, 0)
}

/// Wraps an integer result to the type's width.
fn wrap(dtype: DataType, v: Value) -> Value {
    round(dtype, v)
}

/// `x * y` for `dtype`: wrapping for integers; for floats computed in the type's
/// compute precision (f32 for 16-bit and 32-bit floats, f64 for double) and rounded.
pub fn mul(dtype: DataType, x: Value, y: Value) -> Value {
    match (x, y) {
        (Value::I(a), Value::I(b)) => wrap(dtype, Value::I(a.wrapping_mul(b))),
        (Value::U(a), Value::U(b)) => wrap(dtype, Value::U(a.wrapping_mul(b))),
        (Value::F(a), Value::F(b)) if dtype == DataType::Float64 => Value::F(a * b),
        (Value::F(a), Value::F(b)) => round(dtype, Value::F(f64::from(a as f32 * b as f32))),
        _ => unreachable!("mixed value kinds"),
    }
}

/// `x ⊕ y` for `dtype`.
pub fn combine(dtype: DataType, c: Combine, x: Value, y: Value) -> Value {
    match c {
        Combine::Prod => mul(dtype, x, y),
        Combine::Sum => match (x, y) {
            (Value::I(a), Value::I(b)) => wrap(dtype, Value::I(a.wrapping_add(b))),
            (Value::U(a), Value::U(b)) => wrap(dtype, Value::U(a.wrapping_add(b))),
            (Value::F(a), Value::F(b)) if dtype == DataType::Float64 => Value::F(a + b),
            (Value::F(a), Value::F(b)) => round(dtype, Value::F(f64::from(a as f32 + b as f32))),
            _ => unreachable!("mixed value kinds"),
        },
        Combine::Max | Combine::Min => {
            let max = c == Combine::Max;
            match (x, y) {
                (Value::I(a), Value::I(b)) => Value::I(if max { a.max(b) } else { a.min(b) }),
                (Value::U(a), Value::U(b)) => Value::U(if max { a.max(b) } else { a.min(b) }),
                // C fmax/fmin: a NaN operand is ignored unless both are NaN.
                (Value::F(a), Value::F(b)) => Value::F(if a.is_nan() {
                    b
                } else if b.is_nan() {
                    a
                } else if max {
                    if a >= b { a } else { b }
                } else if a <= b {
                    a
                } else {
                    b
                }),
                _ => unreachable!("mixed value kinds"),
            }
        }
    }
}

/// `v / n` for integer average (truncation toward zero); floats unchanged.
pub fn div(v: Value, n: u32) -> Value {
    match v {
        Value::I(a) => Value::I(a / i64::from(n)),
        Value::U(a) => Value::U(a / u64::from(n)),
        f => f,
    }
}

/// The scalar as a value of `dtype`.
pub fn scalar(dtype: DataType, s: &Scalar) -> Value {
    get(&s.0, dtype, 0)
}

/// Reference for [`Backend::reduce`](crate::Backend::reduce): `dst = pre?(a) ⊕ pre?(b)`.
/// Panics on bad lengths.
pub fn reduce(dst: &mut [u8], a: &[u8], b: &[u8], op: &DevRedOp, pre: Pre) {
    let t = op.dtype;
    assert!(dst.len() == a.len() && dst.len() == b.len() && dst.len().is_multiple_of(t.size()));
    for i in 0..dst.len() / t.size() {
        let mut x = get(a, t, i);
        let mut y = get(b, t, i);
        if let Some(s) = &op.pre_mul {
            if matches!(pre, Pre::A | Pre::Both) {
                x = mul(t, x, scalar(t, s));
            }
            if matches!(pre, Pre::B | Pre::Both) {
                y = mul(t, y, scalar(t, s));
            }
        }
        set(dst, t, i, combine(t, op.combine, x, y));
    }
}

/// Reference for [`Backend::pre_op`](crate::Backend::pre_op).
pub fn pre_op(dst: &mut [u8], src: &[u8], op: &DevRedOp) {
    let t = op.dtype;
    for i in 0..dst.len() / t.size() {
        let x = get(src, t, i);
        let y = match &op.pre_mul {
            Some(s) => mul(t, x, scalar(t, s)),
            None => x,
        };
        set(dst, t, i, y);
    }
}

/// Reference for [`Backend::post_op`](crate::Backend::post_op).
pub fn post_op(buf: &mut [u8], op: &DevRedOp) {
    let t = op.dtype;
    if let Some(n) = op.post_div {
        for i in 0..buf.len() / t.size() {
            let v = div(get(buf, t, i), n);
            set(buf, t, i, v);
        }
    }
}

/// Reference of a whole reduction across ranks in a fixed order, as a ring computes
/// it: `((pre(in[0]) ⊕ pre(in[1])) ⊕ pre(in[2])) …`, then the post-op. The ring
/// executor's results must equal this when it combines in rank order starting at
/// rank 0; in other orders floats differ within rounding.
pub fn reduce_ranks(out: &mut [u8], inputs: &[&[u8]], op: &DevRedOp) {
    pre_op(out, inputs[0], op);
    let mut tmp = out.to_vec();
    for input in &inputs[1..] {
        reduce(&mut tmp, out, input, op, Pre::B);
        out.copy_from_slice(&tmp);
    }
    post_op(out, op);
}
