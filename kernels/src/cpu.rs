//! The vectorisable CPU implementation.
//!
//! Every primitive walks its byte buffers in fixed-size chunks of [`CHUNK_BYTES`]:
//! a chunk is loaded into a stack array of the element's compute type with
//! unaligned native-endian loads (`from_ne_bytes`), combined lane by lane, and
//! stored back. The fixed trip count lets LLVM turn each chunk into SIMD loads,
//! arithmetic and stores for any buffer alignment; the last partial chunk goes
//! through the same code via a zero-padded stack copy. Buffers shorter than one
//! chunk (an 8-byte AllReduce) skip the padding and go element by element with
//! the portable lanes.

use half::{bf16, f16};

use crate::half_conv;

use crate::backend::{Backend, Pre};
use crate::{Combine, DataType, DevRedOp, KernelError, RedOp, Scalar};

/// Bytes processed per chunk (4 AVX2 registers, 2 AVX-512 registers).
pub const CHUNK_BYTES: usize = 128;

/// Arithmetic on the compute type (wrapping for integers, IEEE for floats).
pub(crate) trait Arith: Copy + Default {
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    /// Integer average division (truncation toward zero); floats divide.
    fn div_n(self, n: u32) -> Self;
}

macro_rules! arith_int {
    ($($t:ty => $w:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)]
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)]
            fn max(self, o: Self) -> Self { Ord::max(self, o) }
            #[inline(always)]
            fn min(self, o: Self) -> Self { Ord::min(self, o) }
            #[inline(always)]
            fn div_n(self, n: u32) -> Self { ((self as $w) / (n as $w)) as $t }
        }
    )*};
}
arith_int!(i8 => i64, u8 => u64, i32 => i64, u32 => u64, i64 => i64, u64 => u64);

macro_rules! arith_float {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn add(self, o: Self) -> Self { self + o }
            #[inline(always)]
            fn mul(self, o: Self) -> Self { self * o }
            #[inline(always)]
            fn max(self, o: Self) -> Self { <$t>::max(self, o) }
            #[inline(always)]
            fn min(self, o: Self) -> Self { <$t>::min(self, o) }
            #[inline(always)]
            fn div_n(self, n: u32) -> Self { self / (n as $t) }
        }
    )*};
}
arith_float!(f32, f64);

/// An element type stored in byte buffers, computed in `Self::C`.
pub(crate) trait Lane {
    const SIZE: usize;
    type C: Arith;
    /// Loads `N` elements from `b` (`b.len() == N * SIZE`).
    fn widen<const N: usize>(b: &[u8]) -> [Self::C; N];
    /// Stores `N` elements to `b` (`b.len() == N * SIZE`), rounding to the storage type.
    fn narrow<const N: usize>(v: &[Self::C; N], b: &mut [u8]);
    /// Rounds to the storage type's precision (identity unless storage is narrower).
    #[inline(always)]
    fn round<const N: usize>(_v: &mut [Self::C; N]) {}
    /// The scalar's value in the compute type.
    fn scalar(s: &Scalar) -> Self::C;
}

macro_rules! lane_direct {
    ($($t:ty),*) => {$(
        impl Lane for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            type C = $t;
            #[inline(always)]
            fn widen<const N: usize>(b: &[u8]) -> [$t; N] {
                let b = &b[..N * Self::SIZE];
                std::array::from_fn(|i| {
                    <$t>::from_ne_bytes(b[i * Self::SIZE..(i + 1) * Self::SIZE].try_into().expect("lane width"))
                })
            }
            #[inline(always)]
            fn narrow<const N: usize>(v: &[$t; N], b: &mut [u8]) {
                let b = &mut b[..N * Self::SIZE];
                for i in 0..N {
                    b[i * Self::SIZE..(i + 1) * Self::SIZE].copy_from_slice(&v[i].to_ne_bytes());
                }
            }
            #[inline(always)]
            fn scalar(s: &Scalar) -> $t {
                <$t>::from_ne_bytes(s.0[..Self::SIZE].try_into().expect("lane width"))
            }
        }
    )*};
}
lane_direct!(i8, u8, i32, u32, i64, u64, f32, f64);

macro_rules! lane_half {
    ($($t:ty => $widen:path, $narrow:path);*) => {$(
        impl Lane for $t {
            const SIZE: usize = 2;
            type C = f32;
            #[inline(always)]
            fn widen<const N: usize>(b: &[u8]) -> [f32; N] {
                let b = &b[..N * 2];
                let h: [u16; N] = std::array::from_fn(|i| {
                    u16::from_ne_bytes(b[2 * i..2 * i + 2].try_into().expect("lane width"))
                });
                h.map($widen)
            }
            #[inline(always)]
            fn narrow<const N: usize>(v: &[f32; N], b: &mut [u8]) {
                let b = &mut b[..N * 2];
                let h: [u16; N] = v.map($narrow);
                for i in 0..N {
                    b[2 * i..2 * i + 2].copy_from_slice(&h[i].to_ne_bytes());
                }
            }
            #[inline(always)]
            fn round<const N: usize>(v: &mut [f32; N]) {
                for x in v.iter_mut() {
                    *x = $widen($narrow(*x));
                }
            }
            #[inline(always)]
            fn scalar(s: &Scalar) -> f32 {
                $widen(u16::from_ne_bytes([s.0[0], s.0[1]]))
            }
        }
    )*};
}
lane_half!(f16 => half_conv::f16_to_f32, half_conv::f32_to_f16; bf16 => half_conv::bf16_to_f32, half_conv::f32_to_bf16);

/// `dst = pre_a(a) ⊕ pre_b(b)`, where `a` is `dst` itself when `INPLACE`.
/// Lengths were checked by the caller.
#[inline(always)]
fn binary<T: Lane, const N: usize, const INPLACE: bool, const PA: bool, const PB: bool>(
    dst: &mut [u8],
    a: &[u8],
    b: &[u8],
    s: T::C,
    f: impl Fn(T::C, T::C) -> T::C,
) {
    let cb = N * T::SIZE;
    // A function, not a closure: LLVM may decline to inline a large closure
    // (the 16-bit float lanes), which would then be compiled without the
    // caller's AVX2 target feature.
    #[inline(always)]
    fn body<T: Lane, const N: usize, const PA: bool, const PB: bool>(
        d: &mut [u8],
        a: &[u8],
        b: &[u8],
        s: T::C,
        f: &impl Fn(T::C, T::C) -> T::C,
    ) {
        let mut va = T::widen::<N>(a);
        let mut vb = T::widen::<N>(b);
        if PA {
            for x in va.iter_mut() {
                *x = x.mul(s);
            }
            T::round(&mut va);
        }
        if PB {
            for x in vb.iter_mut() {
                *x = x.mul(s);
            }
            T::round(&mut vb);
        }
        let mut r = [T::C::default(); N];
        for i in 0..N {
            r[i] = f(va[i], vb[i]);
        }
        T::narrow(&r, d);
    }
    let body = |d: &mut [u8], a: &[u8], b: &[u8]| body::<T, N, PA, PB>(d, a, b, s, &f);
    let full = dst.len() / cb * cb;
    if INPLACE {
        let mut tmp = [0u8; CHUNK_BYTES];
        for (d, bb) in dst[..full].chunks_exact_mut(cb).zip(b[..full].chunks_exact(cb)) {
            tmp[..cb].copy_from_slice(d);
            body(d, &tmp[..cb], bb);
        }
    } else {
        for ((d, aa), bb) in dst[..full]
            .chunks_exact_mut(cb)
            .zip(a[..full].chunks_exact(cb))
            .zip(b[..full].chunks_exact(cb))
        {
            body(d, aa, bb);
        }
    }
    let rest = dst.len() - full;
    if rest > 0 {
        let mut ta = [0u8; CHUNK_BYTES];
        let mut tb = [0u8; CHUNK_BYTES];
        let mut td = [0u8; CHUNK_BYTES];
        if INPLACE {
            ta[..rest].copy_from_slice(&dst[full..]);
        } else {
            ta[..rest].copy_from_slice(&a[full..]);
        }
        tb[..rest].copy_from_slice(&b[full..]);
        body(&mut td[..cb], &ta[..cb], &tb[..cb]);
        dst[full..].copy_from_slice(&td[..rest]);
    }
}

/// `dst = g(src)` element-wise (`src` is `dst` itself when `INPLACE`).
#[inline(always)]
fn unary<T: Lane, const N: usize, const INPLACE: bool>(dst: &mut [u8], src: &[u8], g: impl Fn(&mut [T::C; N])) {
    let cb = N * T::SIZE;
    #[inline(always)]
    fn body<T: Lane, const N: usize>(d: &mut [u8], s: &[u8], g: &impl Fn(&mut [T::C; N])) {
        let mut v = T::widen::<N>(s);
        g(&mut v);
        T::narrow(&v, d);
    }
    let body = |d: &mut [u8], s: &[u8]| body::<T, N>(d, s, &g);
    let full = dst.len() / cb * cb;
    if INPLACE {
        let mut tmp = [0u8; CHUNK_BYTES];
        for d in dst[..full].chunks_exact_mut(cb) {
            tmp[..cb].copy_from_slice(d);
            body(d, &tmp[..cb]);
        }
    } else {
        for (d, s) in dst[..full].chunks_exact_mut(cb).zip(src[..full].chunks_exact(cb)) {
            body(d, s);
        }
    }
    let rest = dst.len() - full;
    if rest > 0 {
        let mut ts = [0u8; CHUNK_BYTES];
        let mut td = [0u8; CHUNK_BYTES];
        if INPLACE {
            ts[..rest].copy_from_slice(&dst[full..]);
        } else {
            ts[..rest].copy_from_slice(&src[full..]);
        }
        body(&mut td[..cb], &ts[..cb]);
        dst[full..].copy_from_slice(&td[..rest]);
    }
}

/// Monomorphises `binary` over (combine, pre) for one lane type.
#[inline(always)]
fn binary_typed<T: Lane, const N: usize, const INPLACE: bool>(
    dst: &mut [u8],
    a: &[u8],
    b: &[u8],
    combine: Combine,
    pre: Pre,
    scalar: Option<&Scalar>,
) {
    let s = scalar.map(T::scalar).unwrap_or_default();
    let pre = if scalar.is_none() { Pre::None } else { pre };
    macro_rules! go {
        ($f:expr) => {
            match pre {
                Pre::None => binary::<T, N, INPLACE, false, false>(dst, a, b, s, $f),
                Pre::A => binary::<T, N, INPLACE, true, false>(dst, a, b, s, $f),
                Pre::B => binary::<T, N, INPLACE, false, true>(dst, a, b, s, $f),
                Pre::Both => binary::<T, N, INPLACE, true, true>(dst, a, b, s, $f),
            }
        };
    }
    match combine {
        Combine::Sum => go!(|x: T::C, y: T::C| x.add(y)),
        Combine::Prod => go!(|x: T::C, y: T::C| x.mul(y)),
        Combine::Max => go!(|x: T::C, y: T::C| x.max(y)),
        Combine::Min => go!(|x: T::C, y: T::C| x.min(y)),
    }
}

/// Calls `$mac!(T, N)` with the type `T` and chunk length `N` matching
/// `$dtype`; with `elementwise`, `N` is 1: one element per chunk, for buffers
/// shorter than a chunk, which would otherwise go through the zero-padded
/// stack copies (three 128-byte arrays per call). Lane-wise, so bitwise the
/// same as the chunked and hardware lanes.
macro_rules! dispatch {
    ($dtype:expr, $mac:ident) => {
        dispatch!(@table $dtype, $mac, chunk)
    };
    ($dtype:expr, $mac:ident, elementwise) => {
        dispatch!(@table $dtype, $mac, elementwise)
    };
    (@table $dtype:expr, $mac:ident, $w:ident) => {
        match $dtype {
            DataType::Int8 => dispatch!(@lanes $mac, i8, 128, $w),
            DataType::Uint8 => dispatch!(@lanes $mac, u8, 128, $w),
            DataType::Int32 => dispatch!(@lanes $mac, i32, 32, $w),
            DataType::Uint32 => dispatch!(@lanes $mac, u32, 32, $w),
            DataType::Int64 => dispatch!(@lanes $mac, i64, 16, $w),
            DataType::Uint64 => dispatch!(@lanes $mac, u64, 16, $w),
            DataType::Float16 => dispatch!(@lanes $mac, f16, 64, $w),
            DataType::Bfloat16 => dispatch!(@lanes $mac, bf16, 64, $w),
            DataType::Float32 => dispatch!(@lanes $mac, f32, 32, $w),
            DataType::Float64 => dispatch!(@lanes $mac, f64, 16, $w),
        }
    };
    (@lanes $mac:ident, $t:ty, $n:literal, chunk) => {
        $mac!($t, $n)
    };
    (@lanes $mac:ident, $t:ty, $n:literal, elementwise) => {
        $mac!($t, 1)
    };
}

/// Buffers shorter than this go element by element (`dispatch!(…, elementwise)`).
const ELEMENTWISE_BELOW: usize = CHUNK_BYTES;

/// `binary` for `op`'s type, combine and pre-op (lengths checked by the caller).
#[inline(always)]
fn binary_generic<const INPLACE: bool>(dst: &mut [u8], a: &[u8], b: &[u8], op: &DevRedOp, pre: Pre) {
    let scalar = op.pre_mul.as_ref();
    macro_rules! go {
        ($t:ty, $n:literal) => {
            binary_typed::<$t, $n, INPLACE>(dst, a, b, op.combine, pre, scalar)
        };
    }
    dispatch!(op.dtype, go)
}

/// `binary` for `op`'s type one element at a time (buffers shorter than
/// [`ELEMENTWISE_BELOW`]; lengths checked by the caller).
fn binary_elementwise<const INPLACE: bool>(dst: &mut [u8], a: &[u8], b: &[u8], op: &DevRedOp, pre: Pre) {
    let scalar = op.pre_mul.as_ref();
    macro_rules! go {
        ($t:ty, $n:literal) => {
            binary_typed::<$t, $n, INPLACE>(dst, a, b, op.combine, pre, scalar)
        };
    }
    dispatch!(op.dtype, go, elementwise)
}

/// [`binary_generic`] compiled for AVX2 (x86-64 only; the caller checks the CPU).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn binary_avx2<const INPLACE: bool>(dst: &mut [u8], a: &[u8], b: &[u8], op: &DevRedOp, pre: Pre) {
    binary_generic::<INPLACE>(dst, a, b, op, pre)
}

/// Rounds `v` to a 16-bit lane's precision by storing and reloading it (the
/// hardware lanes, whose conversions work on whole registers).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn round_through_storage<L: Lane<C = f32>, const N: usize>(v: &mut [f32; N]) {
    let mut b = [0u8; CHUNK_BYTES];
    L::narrow(v, &mut b[..N * 2]);
    *v = L::widen::<N>(&b[..N * 2]);
}

/// float16 lanes converted by the F16C instructions (`vcvtph2ps`/`vcvtps2ph`, 8
/// lanes each). Only [`binary_f16c`] instantiates kernels with it, and the
/// dispatcher calls that only on CPUs with F16C and AVX2. The hardware rounds to
/// nearest even and quiets NaNs exactly as `half` does (`half` itself uses F16C
/// where present), so results equal the [`f16`](struct@half::f16) lane's bit for bit
/// (`simd_tests::f16c_matches_software_bitwise`).
#[cfg(target_arch = "x86_64")]
struct F16c;

#[cfg(target_arch = "x86_64")]
impl Lane for F16c {
    const SIZE: usize = 2;
    type C = f32;
    #[inline(always)]
    fn widen<const N: usize>(b: &[u8]) -> [f32; N] {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps, _mm256_storeu_ps};
        const { assert!(N.is_multiple_of(8)) };
        let b = &b[..N * 2];
        let mut out = [0f32; N];
        for (o, i) in out.chunks_exact_mut(8).zip(b.chunks_exact(16)) {
            // SAFETY: `i` has 16 readable bytes and `o` 8 writable f32s (unaligned
            // loads/stores); F16C is present: this lane is only used by
            // `binary_f16c`, which is only called after detecting it.
            unsafe {
                _mm256_storeu_ps(
                    o.as_mut_ptr(),
                    _mm256_cvtph_ps(_mm_loadu_si128(i.as_ptr() as *const __m128i)),
                )
            };
        }
        out
    }
    #[inline(always)]
    fn narrow<const N: usize>(v: &[f32; N], b: &mut [u8]) {
        use std::arch::x86_64::{
            __m128i, _MM_FROUND_TO_NEAREST_INT, _mm_storeu_si128, _mm256_cvtps_ph, _mm256_loadu_ps,
        };
        let b = &mut b[..N * 2];
        for (i, o) in v.chunks_exact(8).zip(b.chunks_exact_mut(16)) {
            // SAFETY: as in `widen`: 8 f32s in, 16 bytes out, F16C present.
            unsafe {
                _mm_storeu_si128(
                    o.as_mut_ptr() as *mut __m128i,
                    _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(i.as_ptr())),
                )
            };
        }
    }
    #[inline(always)]
    fn round<const N: usize>(v: &mut [f32; N]) {
        round_through_storage::<Self, N>(v)
    }
    #[inline(always)]
    fn scalar(s: &Scalar) -> f32 {
        <f16 as Lane>::scalar(s)
    }
}

/// bfloat16 lanes converted with AVX2 integer instructions, 16 lanes per step
/// (the compiler's own vectorisation of the [`bf16`] lane reached about 5 GB/s).
/// Only [`binary_bf16_avx2`] instantiates kernels with it, and the dispatcher
/// calls that only on CPUs with AVX2. Same rules as `half_conv`: exact widening
/// with NaNs quieted; narrowing rounds to nearest even, a NaN keeps its top
/// payload bits and becomes quiet (`simd_tests::bf16_avx2_matches_software_bitwise`).
#[cfg(target_arch = "x86_64")]
struct Bf16Avx2;

#[cfg(target_arch = "x86_64")]
impl Lane for Bf16Avx2 {
    const SIZE: usize = 2;
    type C = f32;
    #[inline(always)]
    fn widen<const N: usize>(b: &[u8]) -> [f32; N] {
        use std::arch::x86_64::*;
        const { assert!(N.is_multiple_of(16)) };
        let b = &b[..N * 2];
        let mut out = [0f32; N];
        for (o, i) in out.chunks_exact_mut(8).zip(b.chunks_exact(16)) {
            // SAFETY: `i` has 16 readable bytes and `o` 8 writable f32s (unaligned
            // loads/stores); AVX2 is present: this lane is only used by
            // `binary_bf16_avx2`, which is only called after detecting it.
            unsafe {
                let x = _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(i.as_ptr() as *const __m128i)));
                // x + (-0.0) is x exactly for every non-NaN (signed zeros and
                // subnormals included: Rust runs with FTZ/DAZ off) and sets a
                // NaN's quiet bit, keeping its payload: what `half` does.
                let q = _mm256_add_ps(_mm256_castsi256_ps(x), _mm256_set1_ps(-0.0));
                _mm256_storeu_ps(o.as_mut_ptr(), q);
            }
        }
        out
    }
    #[inline(always)]
    fn narrow<const N: usize>(v: &[f32; N], b: &mut [u8]) {
        use std::arch::x86_64::*;
        /// 8 f32 bit patterns to bfloat16 bits in the low half of each 32-bit lane.
        #[inline(always)]
        fn to_bf16(x: __m256i) -> __m256i {
            // SAFETY: pure register arithmetic; AVX2 is present (see `widen`), and
            // this inlines into `binary_bf16_avx2`, which enables it.
            unsafe {
                let xf = _mm256_castsi256_ps(x);
                let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(xf, xf));
                let hi = _mm256_srli_epi32::<16>(x);
                let lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
                let bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff));
                let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(x, bias));
                let quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x0040));
                _mm256_blendv_epi8(rounded, quiet, nan)
            }
        }
        let b = &mut b[..N * 2];
        for (i, o) in v.chunks_exact(16).zip(b.chunks_exact_mut(32)) {
            // SAFETY: 16 f32s in, 32 bytes out (unaligned); AVX2 present (see `widen`).
            unsafe {
                let lo = to_bf16(_mm256_castps_si256(_mm256_loadu_ps(i.as_ptr())));
                let hi = to_bf16(_mm256_castps_si256(_mm256_loadu_ps(i.as_ptr().add(8))));
                // packus works per 128-bit half: [lo0-3 hi0-3 | lo4-7 hi4-7]; the
                // permute restores element order. Values fit 16 bits: no saturation.
                let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(lo, hi));
                _mm256_storeu_si256(o.as_mut_ptr() as *mut __m256i, packed);
            }
        }
    }
    #[inline(always)]
    fn round<const N: usize>(v: &mut [f32; N]) {
        round_through_storage::<Self, N>(v)
    }
    #[inline(always)]
    fn scalar(s: &Scalar) -> f32 {
        <bf16 as Lane>::scalar(s)
    }
}

/// The bfloat16 reduction with [`Bf16Avx2`] conversions.
///
/// # Safety
/// The CPU must support AVX2; `op.dtype` is `Bfloat16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn binary_bf16_avx2<const INPLACE: bool>(dst: &mut [u8], a: &[u8], b: &[u8], op: &DevRedOp, pre: Pre) {
    binary_typed::<Bf16Avx2, 64, INPLACE>(dst, a, b, op.combine, pre, op.pre_mul.as_ref())
}

/// The float16 reduction with F16C conversions and AVX2 arithmetic.
///
/// # Safety
/// The CPU must support AVX2 and F16C; `op.dtype` is `Float16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn binary_f16c<const INPLACE: bool>(dst: &mut [u8], a: &[u8], b: &[u8], op: &DevRedOp, pre: Pre) {
    binary_typed::<F16c, 64, INPLACE>(dst, a, b, op.combine, pre, op.pre_mul.as_ref())
}

/// Runs the reduction with the widest vector unit this CPU has: AVX2 when
/// `is_x86_feature_detected!("avx2")` (twice the lanes of the SSE2 baseline the
/// crate is compiled for; float16 also converts with F16C when present), else the
/// baseline. Lane-wise, so results are bitwise
/// the same either way (no FMA is enabled, so a PreMulSum's multiply and add stay
/// separately rounded).
fn binary_dispatch<const INPLACE: bool>(dst: &mut [u8], a: &[u8], b: &[u8], op: &DevRedOp, pre: Pre) {
    if dst.len() < ELEMENTWISE_BELOW {
        // A few elements: no vector unit to pick.
        binary_elementwise::<INPLACE>(dst, a, b, op, pre);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if op.dtype == DataType::Float16 && std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c") {
        // SAFETY: AVX2 and F16C support were just checked; the type is float16.
        unsafe { binary_f16c::<INPLACE>(dst, a, b, op, pre) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if op.dtype == DataType::Bfloat16 && std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 support was just checked; the type is bfloat16.
        unsafe { binary_bf16_avx2::<INPLACE>(dst, a, b, op, pre) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 support was just checked.
        unsafe { binary_avx2::<INPLACE>(dst, a, b, op, pre) };
        return;
    }
    binary_generic::<INPLACE>(dst, a, b, op, pre)
}

pub(crate) fn check_len(what: &'static str, len: usize, dtype: DataType) -> Result<(), KernelError> {
    let size = dtype.size();
    // Every element size is a power of two: a mask, not a division (a 64-bit
    // `div` costs tens of cycles, three times per small reduction).
    debug_assert!(size.is_power_of_two());
    if len & (size - 1) != 0 {
        return Err(KernelError::Misaligned { what, len, dtype, size });
    }
    Ok(())
}

pub(crate) fn check_same(what: &'static str, expected: usize, found: usize) -> Result<(), KernelError> {
    if expected != found {
        return Err(KernelError::LengthMismatch { what, expected, found });
    }
    Ok(())
}

/// The CPU backend: vectorisable loops on host memory. Zero-sized and stateless.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuBackend;

/// Convenience front end on byte buffers taking a [`DataType`] and [`RedOp`]
/// directly (uses the CPU kernels). For NCCL-exact `Avg`/`PreMulSum` in a ring,
/// prefer the [`Backend`] methods with a [`DevRedOp`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Reducer;

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn copy(&self, dst: &mut [u8], src: &[u8]) -> Result<(), KernelError> {
        check_same("src", dst.len(), src.len())?;
        dst.copy_from_slice(src);
        Ok(())
    }

    fn reduce(&self, dst: &mut [u8], a: &[u8], b: &[u8], op: &DevRedOp, pre: Pre) -> Result<(), KernelError> {
        check_len("dst", dst.len(), op.dtype)?;
        check_same("a", dst.len(), a.len())?;
        check_same("b", dst.len(), b.len())?;
        binary_dispatch::<false>(dst, a, b, op, pre);
        Ok(())
    }

    fn reduce_inplace(&self, acc: &mut [u8], src: &[u8], op: &DevRedOp, pre: Pre) -> Result<(), KernelError> {
        check_len("acc", acc.len(), op.dtype)?;
        check_same("src", acc.len(), src.len())?;
        binary_dispatch::<true>(acc, &[], src, op, pre);
        Ok(())
    }

    fn pre_op(&self, dst: &mut [u8], src: &[u8], op: &DevRedOp) -> Result<(), KernelError> {
        check_len("dst", dst.len(), op.dtype)?;
        check_same("src", dst.len(), src.len())?;
        match op.pre_mul {
            Some(s) => premul_impl::<false>(dst, src, op.dtype, &s),
            None => dst.copy_from_slice(src),
        }
        Ok(())
    }

    fn pre_op_inplace(&self, buf: &mut [u8], op: &DevRedOp) -> Result<(), KernelError> {
        check_len("buf", buf.len(), op.dtype)?;
        if let Some(s) = op.pre_mul {
            premul_impl::<true>(buf, &[], op.dtype, &s);
        }
        Ok(())
    }

    fn post_op(&self, buf: &mut [u8], op: &DevRedOp) -> Result<(), KernelError> {
        check_len("buf", buf.len(), op.dtype)?;
        if let Some(n) = op.post_div.filter(|&n| n != 1) {
            div_impl(buf, op.dtype, n);
        }
        Ok(())
    }
}

fn premul_impl<const INPLACE: bool>(dst: &mut [u8], src: &[u8], dtype: DataType, s: &Scalar) {
    let dst_len = dst.len();
    macro_rules! go {
        ($t:ty, $n:literal) => {{
            let sc = <$t as Lane>::scalar(s);
            unary::<$t, $n, INPLACE>(dst, src, |v| {
                for x in v.iter_mut() {
                    *x = x.mul(sc);
                }
            })
        }};
    }
    if dst_len < ELEMENTWISE_BELOW {
        dispatch!(dtype, go, elementwise)
    } else {
        dispatch!(dtype, go)
    }
}

fn div_impl(buf: &mut [u8], dtype: DataType, n: u32) {
    let dst_len = buf.len();
    macro_rules! go {
        ($t:ty, $n:literal) => {
            unary::<$t, $n, true>(buf, &[], |v| {
                for x in v.iter_mut() {
                    *x = x.div_n(n);
                }
            })
        };
    }
    if dst_len < ELEMENTWISE_BELOW {
        dispatch!(dtype, go, elementwise)
    } else {
        dispatch!(dtype, go)
    }
}

impl Reducer {
    /// `dst = src`. Errors: lengths differ.
    pub fn copy(&self, dst: &mut [u8], src: &[u8]) -> Result<(), KernelError> {
        CpuBackend.copy(dst, src)
    }

    /// `dst = a op b` element-wise, using only the combine step of `op`
    /// (`Avg` and `PreMulSum` combine by summing; apply their pre/post steps with
    /// [`premul`](Self::premul) / [`finalize_avg`](Self::finalize_avg), or use the
    /// [`Backend`] methods with a [`DevRedOp`]).
    /// Errors: lengths differ or are not a multiple of `dtype.size()`.
    pub fn reduce(&self, dst: &mut [u8], a: &[u8], b: &[u8], dtype: DataType, op: &RedOp) -> Result<(), KernelError> {
        let dev = DevRedOp {
            dtype,
            op: *op,
            combine: op.combine(),
            pre_mul: None,
            post_div: None,
        };
        Backend::reduce(&CpuBackend, dst, a, b, &dev, Pre::None)
    }

    /// `acc = acc op src` element-wise (combine step only, as [`reduce`](Self::reduce)).
    pub fn reduce_inplace(&self, acc: &mut [u8], src: &[u8], dtype: DataType, op: &RedOp) -> Result<(), KernelError> {
        let dev = DevRedOp {
            dtype,
            op: *op,
            combine: op.combine(),
            pre_mul: None,
            post_div: None,
        };
        Backend::reduce_inplace(&CpuBackend, acc, src, &dev, Pre::None)
    }

    /// `dst = src * scalar` element-wise (wrapping for integers; 16-bit floats rounded).
    pub fn premul(&self, dst: &mut [u8], src: &[u8], dtype: DataType, scalar: &Scalar) -> Result<(), KernelError> {
        check_len("dst", dst.len(), dtype)?;
        check_same("src", dst.len(), src.len())?;
        premul_impl::<false>(dst, src, dtype, scalar);
        Ok(())
    }

    /// Sum-then-scale average: integers are divided by `nranks` (truncating toward
    /// zero, as NCCL's `SumPostDiv`); floats are multiplied by `1/nranks` rounded to
    /// the type. NCCL itself pre-multiplies float inputs instead (see [`DevRedOp`]);
    /// this is for callers that summed without a pre-op.
    /// Errors: `nranks == 0`, length not a multiple of `dtype.size()`.
    pub fn finalize_avg(&self, buf: &mut [u8], dtype: DataType, nranks: u32) -> Result<(), KernelError> {
        check_len("buf", buf.len(), dtype)?;
        if nranks == 0 {
            return Err(KernelError::ZeroRanks);
        }
        if dtype.is_float() {
            let dev = DevRedOp::new(dtype, RedOp::Avg, nranks)?;
            if let Some(s) = dev.pre_mul {
                premul_impl::<true>(buf, &[], dtype, &s);
            }
        } else if nranks != 1 {
            div_impl(buf, dtype, nranks);
        }
        Ok(())
    }
}

#[cfg(test)]
mod simd_tests {
    use super::*;

    /// The AVX2 build of the reduction gives bitwise the same bytes as the
    /// baseline build, for every type, op, pre-op and an odd length (tail chunk).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn avx2_matches_baseline_bitwise() {
        if !std::is_x86_feature_detected!("avx2") {
            eprintln!("no AVX2 on this CPU: only the baseline build exists");
            return;
        }
        let len_elems = 1000 + 37;
        let mut rnd = crate::xorshift(0x9e37_79b9_7f4a_7c15);
        for dt in DataType::ALL {
            let ops = [
                RedOp::Sum,
                RedOp::Prod,
                RedOp::Max,
                RedOp::Min,
                RedOp::Avg,
                RedOp::PreMulSum(Scalar::from_i64(dt, 3)),
            ];
            let n = len_elems * dt.size();
            // Floats from small integers so no NaN patterns make bitwise equality moot.
            let fill = |r: &mut dyn FnMut() -> u64| -> Vec<u8> {
                let mut v = vec![0u8; n];
                for i in 0..len_elems {
                    let x = (r() % 200) as i64 - 100;
                    let val = if dt.is_float() {
                        crate::reference::Value::F(x as f64 * 0.25)
                    } else {
                        crate::reference::Value::I(x)
                    };
                    crate::reference::set(&mut v, dt, i, val);
                }
                v
            };
            let a = fill(&mut rnd);
            let b = fill(&mut rnd);
            for op in ops {
                let Ok(dev) = DevRedOp::new(dt, op, 3) else { continue };
                for pre in [Pre::None, Pre::A, Pre::B, Pre::Both] {
                    let mut d0 = vec![0u8; n];
                    let mut d1 = vec![0u8; n];
                    binary_generic::<false>(&mut d0, &a, &b, &dev, pre);
                    // SAFETY: AVX2 checked above.
                    unsafe { binary_avx2::<false>(&mut d1, &a, &b, &dev, pre) };
                    assert_eq!(d0, d1, "{dt:?} {op:?} {pre:?} out of place");
                    let mut i0 = a.clone();
                    let mut i1 = a.clone();
                    binary_generic::<true>(&mut i0, &[], &b, &dev, pre);
                    // SAFETY: AVX2 checked above.
                    unsafe { binary_avx2::<true>(&mut i1, &[], &b, &dev, pre) };
                    assert_eq!(i0, i1, "{dt:?} {op:?} {pre:?} in place");
                    // The type-specific hardware builds, where this CPU has them.
                    type Kernel = unsafe fn(&mut [u8], &[u8], &[u8], &DevRedOp, Pre);
                    let special: Option<(&str, Kernel, Kernel)> = match dt {
                        DataType::Bfloat16 => Some(("bf16 AVX2", binary_bf16_avx2::<false>, binary_bf16_avx2::<true>)),
                        DataType::Float16 if std::is_x86_feature_detected!("f16c") => {
                            Some(("F16C", binary_f16c::<false>, binary_f16c::<true>))
                        }
                        _ => None,
                    };
                    if let Some((name, out_of_place, in_place)) = special {
                        let mut d2 = vec![0u8; n];
                        let mut i2 = a.clone();
                        // SAFETY: AVX2 (and F16C for float16) checked; the kernel matches `dt`.
                        unsafe { out_of_place(&mut d2, &a, &b, &dev, pre) };
                        // SAFETY: as above.
                        unsafe { in_place(&mut i2, &[], &b, &dev, pre) };
                        assert_eq!(d0, d2, "{name} {op:?} {pre:?} out of place");
                        assert_eq!(i0, i2, "{name} {op:?} {pre:?} in place");
                    }
                }
            }
        }
    }

    /// Lanes `H` (hardware) and `S` (software) give the same bits widening every
    /// 16-bit pattern, and narrowing the exact values of every pattern, the
    /// values just around each rounding point (`edges` added to their bits, so
    /// ties, NaNs and overflow are all hit) and a million random f32 patterns.
    fn half_lanes_match<H: Lane<C = f32>, S: Lane<C = f32>>(to_f32: fn(u16) -> f32, edges: [u32; 4], seed: u64) {
        let all: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_ne_bytes).collect();
        for c in all.chunks_exact(128) {
            let hw = H::widen::<64>(c);
            let sw = S::widen::<64>(c);
            assert_eq!(hw.map(f32::to_bits), sw.map(f32::to_bits), "widen {:02x?}", &c[..2]);
        }
        let mut rnd = crate::xorshift(seed);
        let mut pats: Vec<u32> = (0..=u16::MAX)
            .flat_map(|h| {
                let f = to_f32(h).to_bits();
                [
                    f,
                    f.wrapping_add(edges[0]),
                    f.wrapping_add(edges[1]),
                    f.wrapping_add(edges[2]),
                    f.wrapping_add(edges[3]),
                ]
            })
            .collect();
        pats.extend(std::iter::repeat_with(|| (rnd() >> 32) as u32).take(1 << 20));
        for c in pats.chunks_exact(64) {
            let v: [f32; 64] = std::array::from_fn(|i| f32::from_bits(c[i]));
            let (mut hw, mut sw) = ([0u8; 128], [0u8; 128]);
            H::narrow::<64>(&v, &mut hw);
            S::narrow::<64>(&v, &mut sw);
            assert_eq!(hw, sw, "narrow {:08x?}", &c[..4]);
        }
    }

    /// The F16C float16 lane against the software one (itself checked against
    /// the `half` crate).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn f16c_matches_software_bitwise() {
        if !std::is_x86_feature_detected!("f16c") {
            eprintln!("no F16C on this CPU: only the software float16 lane is used");
            return;
        }
        let f16_edges = [0xfff, 0x1000, 0x1001, u32::MAX];
        half_lanes_match::<F16c, f16>(crate::half_conv::f16_to_f32, f16_edges, 0x2545_f491_4f6c_dd1d);
    }

    /// The AVX2 bfloat16 lane against the software one.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn bf16_avx2_matches_software_bitwise() {
        if !std::is_x86_feature_detected!("avx2") {
            eprintln!("no AVX2 on this CPU: only the software bfloat16 lane is used");
            return;
        }
        let bf16_edges = [0x7fff, 0x8000, 0x8001, u32::MAX];
        half_lanes_match::<Bf16Avx2, bf16>(crate::half_conv::bf16_to_f32, bf16_edges, 0x9e37_79b9_7f4a_7c15);
    }
}
