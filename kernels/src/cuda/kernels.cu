// ferroccl reduction and copy kernels (CUDA C++).
//
// Compiled at run time by NVRTC for the device's architecture
// (kernels/src/cuda/nvrtc.rs); in tests also by NVRTC for sm_80/sm_90 and by a
// host C++ compiler under kernels/tests/emu/cuda_emu.h (the GPU emulation).
// Uses no headers, so NVRTC needs no include path.
//
// Semantics are those of kernels/src/reference.rs (see the crate docs):
// integers wrap; floats round to nearest even after every operation, 16-bit
// floats computed in f32 and rounded back after every operation; max/min are C
// fmax/fmin (a NaN operand is ignored unless both are NaN). Float adds and
// multiplies use the _rn intrinsics and the program is compiled with
// --fmad=false, so a PreMulSum's multiply and add are never fused into an FMA
// (the CPU backend never fuses either).
//
// Every kernel has the same parameters (all 64-bit, see FCCL_PARAMS); the host
// (kernels/src/cuda/plan.rs) splits the element range into
//   [0, head)                 elements before the first 16-byte boundary,
//   [head, head + nvec*N)     nvec 16-byte packs of N elements,
//   [head + nvec*N, count)    the tail,
// where the packs are only used when every operand has the same address
// modulo 16 and that offset is a whole number of elements. Otherwise head =
// count and nvec = 0: every element goes through the scalar path, which loads
// elements that are not naturally aligned byte by byte.

#ifndef FCCL_EMULATION
#define FCCL_DEV __device__ __forceinline__
#define FCCL_GLOBAL extern "C" __global__ void __launch_bounds__(512)
#define FCCL_TID ((u64)blockIdx.x * (u64)blockDim.x + (u64)threadIdx.x)
#define FCCL_NTHREADS ((u64)gridDim.x * (u64)blockDim.x)
#define FCCL_FADD(a, b) __fadd_rn((a), (b))
#define FCCL_FMUL(a, b) __fmul_rn((a), (b))
#define FCCL_DADD(a, b) __dadd_rn((a), (b))
#define FCCL_DMUL(a, b) __dmul_rn((a), (b))
#define FCCL_F2U(x) __float_as_uint(x)
#define FCCL_U2F(x) __uint_as_float(x)
#define FCCL_U2D(x) __longlong_as_double((long long)(x))
#endif

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

#define FCCL_PARAMS u64 dst, u64 a, u64 b, u64 count, u64 head, u64 nvec, u64 scalar, u64 flags
#define FCCL_PASS dst, a, b, count, head, nvec, scalar, flags

// Packs each thread keeps in flight per loop iteration.
#define FCCL_UNROLL 4

struct alignas(16) Pack {
  u64 lo, hi;
};

// ---- 16-bit float conversions ----
//
// float16 on the device: the hardware's conversions, one `cvt` each (as
// cuda_fp16.hpp's __half2float / __float2half_rn): widening is exact,
// narrowing rounds to nearest even with subnormals and overflow to infinity,
// so every non-NaN result equals kernels/src/half_conv.rs bit for bit (a NaN
// stays a NaN; its payload may differ, which the semantics allow). The integer
// version below (about 30 instructions per element for a reduction's two
// loads and one store, against about 10 for bfloat16) was the only difference
// between the float16 and bfloat16 paths when an H200 measured float16 at 0.62
// of copy bandwidth and bfloat16 at 0.93 (issue 28). The host emulation
// (FCCL_EMULATION) keeps it: bit for bit half_conv.rs, NaNs included.

#ifndef FCCL_EMULATION
FCCL_DEV float f16_to_f32(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

FCCL_DEV u16 f32_to_f16(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
#else
FCCL_DEV float f16_to_f32(u16 h16) {
  u32 h = h16;
  u32 sign = (h & 0x8000u) << 16;
  u32 em = (h & 0x7fffu) << 13;
  u32 exp = em & (0x7c00u << 13);
  u32 normal = em + ((127u - 15u) << 23);
  u32 quiet = (em & (0x3ffu << 13)) != 0 ? 0x00400000u : 0u;
  u32 special = (normal + ((128u - 16u) << 23)) | quiet;
  u32 sub = FCCL_F2U(FCCL_FADD(FCCL_U2F(normal + (1u << 23)), -FCCL_U2F(113u << 23)));
  u32 mag = exp == (0x7c00u << 13) ? special : (exp == 0 ? sub : normal);
  return FCCL_U2F(mag | sign);
}

FCCL_DEV u16 f32_to_f16(float f) {
  u32 x = FCCL_F2U(f);
  u32 sign = (x >> 16) & 0x8000u;
  u32 m = x & 0x7fffffffu;
  u32 nan = 0x7e00u | ((m & 0x007fffffu) >> 13);
  u32 sub = FCCL_F2U(FCCL_FADD(FCCL_U2F(m), 0.5f)) - FCCL_F2U(0.5f);
  u32 odd = (m >> 13) & 1u;
  u32 norm = (m - ((127u - 15u) << 23) + (0xfffu + odd)) >> 13;
  u32 h = m > 0x7f800000u ? nan : (m >= 0x477ff000u ? 0x7c00u : (m < (113u << 23) ? sub : norm));
  return (u16)(h | sign);
}
#endif

// bfloat16: bit for bit kernels/src/half_conv.rs (a few integer operations).

FCCL_DEV float bf16_to_f32(u16 h) {
  u32 x = ((u32)h) << 16;
  return FCCL_U2F((x & 0x7fffffffu) > 0x7f800000u ? (x | 0x00400000u) : x);
}

FCCL_DEV u16 f32_to_bf16(float f) {
  u32 x = FCCL_F2U(f);
  u32 rounded = (x + (0x7fffu + ((x >> 16) & 1u))) >> 16;
  return (u16)((x & 0x7fffffffu) > 0x7f800000u ? ((x >> 16) | 0x0040u) : rounded);
}

// ---- Element types: storage S, compute C, and the arithmetic ----

// Integers: wrapping + and * through the unsigned type U; average division
// through the 64-bit type W (truncation toward zero).
template <typename S_, typename U, typename W>
struct IntT {
  typedef S_ S;
  typedef S_ C;
  static FCCL_DEV C load(S x) { return x; }
  static FCCL_DEV S store(C x) { return x; }
  static FCCL_DEV C round(C x) { return x; }
  static FCCL_DEV C scalar(u64 bits) { return (S)(U)bits; }
  static FCCL_DEV C add(C x, C y) { return (S)(U)((U)x + (U)y); }
  static FCCL_DEV C mul(C x, C y) { return (S)(U)((U)x * (U)y); }
  static FCCL_DEV C max(C x, C y) { return x < y ? y : x; }
  static FCCL_DEV C min(C x, C y) { return y < x ? y : x; }
  static FCCL_DEV C div(C x, u64 n) { return (S)((W)x / (W)n); }
};

// C fmax/fmin as kernels/src/reference.rs writes them (x != x: NaN test).
template <typename C>
FCCL_DEV C fmax_ref(C x, C y) {
  return x != x ? y : (y != y ? x : (x >= y ? x : y));
}
template <typename C>
FCCL_DEV C fmin_ref(C x, C y) {
  return x != x ? y : (y != y ? x : (x <= y ? x : y));
}

struct F32T {
  typedef float S;
  typedef float C;
  static FCCL_DEV C load(S x) { return x; }
  static FCCL_DEV S store(C x) { return x; }
  static FCCL_DEV C round(C x) { return x; }
  static FCCL_DEV C scalar(u64 bits) { return FCCL_U2F((u32)bits); }
  static FCCL_DEV C add(C x, C y) { return FCCL_FADD(x, y); }
  static FCCL_DEV C mul(C x, C y) { return FCCL_FMUL(x, y); }
  static FCCL_DEV C max(C x, C y) { return fmax_ref(x, y); }
  static FCCL_DEV C min(C x, C y) { return fmin_ref(x, y); }
  static FCCL_DEV C div(C x, u64) { return x; }
};

struct F64T {
  typedef double S;
  typedef double C;
  static FCCL_DEV C load(S x) { return x; }
  static FCCL_DEV S store(C x) { return x; }
  static FCCL_DEV C round(C x) { return x; }
  static FCCL_DEV C scalar(u64 bits) { return FCCL_U2D(bits); }
  static FCCL_DEV C add(C x, C y) { return FCCL_DADD(x, y); }
  static FCCL_DEV C mul(C x, C y) { return FCCL_DMUL(x, y); }
  static FCCL_DEV C max(C x, C y) { return fmax_ref(x, y); }
  static FCCL_DEV C min(C x, C y) { return fmin_ref(x, y); }
  static FCCL_DEV C div(C x, u64) { return x; }
};

// float16 / bfloat16: stored as 16 bits, computed in f32, rounded after every operation.
struct F16T {
  typedef u16 S;
  typedef float C;
  static FCCL_DEV C load(S x) { return f16_to_f32(x); }
  static FCCL_DEV S store(C x) { return f32_to_f16(x); }
  static FCCL_DEV C round(C x) { return f16_to_f32(f32_to_f16(x)); }
  static FCCL_DEV C scalar(u64 bits) { return f16_to_f32((u16)bits); }
  static FCCL_DEV C add(C x, C y) { return FCCL_FADD(x, y); }
  static FCCL_DEV C mul(C x, C y) { return FCCL_FMUL(x, y); }
  static FCCL_DEV C max(C x, C y) { return fmax_ref(x, y); }
  static FCCL_DEV C min(C x, C y) { return fmin_ref(x, y); }
  static FCCL_DEV C div(C x, u64) { return x; }
};

struct Bf16T {
  typedef u16 S;
  typedef float C;
  static FCCL_DEV C load(S x) { return bf16_to_f32(x); }
  static FCCL_DEV S store(C x) { return f32_to_bf16(x); }
  static FCCL_DEV C round(C x) { return bf16_to_f32(f32_to_bf16(x)); }
  static FCCL_DEV C scalar(u64 bits) { return bf16_to_f32((u16)bits); }
  static FCCL_DEV C add(C x, C y) { return FCCL_FADD(x, y); }
  static FCCL_DEV C mul(C x, C y) { return FCCL_FMUL(x, y); }
  static FCCL_DEV C max(C x, C y) { return fmax_ref(x, y); }
  static FCCL_DEV C min(C x, C y) { return fmin_ref(x, y); }
  static FCCL_DEV C div(C x, u64) { return x; }
};

typedef IntT<i8, u8, i64> I8T;
typedef IntT<u8, u8, u64> U8T;
typedef IntT<i32, u32, i64> I32T;
typedef IntT<u32, u32, u64> U32T;
typedef IntT<i64, u64, i64> I64T;
typedef IntT<u64, u64, u64> U64T;

// ---- Element access ----

// Loads an element that may not be naturally aligned (byte loads then).
template <typename S>
FCCL_DEV S load_elem(u64 addr) {
  if ((addr & (sizeof(S) - 1)) == 0) return *(const S*)addr;
  union {
    S v;
    u8 b[sizeof(S)];
  } u;
  for (int k = 0; k < (int)sizeof(S); k++) u.b[k] = ((const u8*)addr)[k];
  return u.v;
}

template <typename S>
FCCL_DEV void store_elem(u64 addr, S v) {
  if ((addr & (sizeof(S) - 1)) == 0) {
    *(S*)addr = v;
    return;
  }
  union {
    S v;
    u8 b[sizeof(S)];
  } u;
  u.v = v;
  for (int k = 0; k < (int)sizeof(S); k++) ((u8*)addr)[k] = u.b[k];
}

template <typename S>
union PackOf {
  Pack p;
  S e[16 / sizeof(S)];
};

// ---- Element operations ----

enum { OP_SUM = 0, OP_PROD = 1, OP_MAX = 2, OP_MIN = 3 };

template <typename T, int OP>
FCCL_DEV typename T::C combine(typename T::C x, typename T::C y) {
  if (OP == OP_SUM) return T::add(x, y);
  if (OP == OP_PROD) return T::mul(x, y);
  if (OP == OP_MAX) return T::max(x, y);
  return T::min(x, y);
}

// flags bit 0: pre-multiply the first operand by the scalar; bit 1: the second.
template <typename T, int OP>
FCCL_DEV typename T::S reduce_elem(typename T::S sa, typename T::S sb, typename T::C s, u64 flags) {
  typename T::C x = T::load(sa);
  typename T::C y = T::load(sb);
  if (flags & 1) x = T::round(T::mul(x, s));
  if (flags & 2) y = T::round(T::mul(y, s));
  return T::store(combine<T, OP>(x, y));
}

// The kernel bodies. F maps (a element, b element) to the output element;
// `a` and `b` are read before `dst` is written, element by element, so dst may
// be the same buffer as a or b (in place).
template <typename S, typename F>
FCCL_DEV void elementwise(u64 dst, u64 a, u64 b, u64 count, u64 head, u64 nvec, const F& f) {
  enum { N = 16 / sizeof(S) };
  const u64 tid = FCCL_TID;
  const u64 nth = FCCL_NTHREADS;
  const Pack* pa = (const Pack*)(a + head * sizeof(S));
  const Pack* pb = (const Pack*)(b + head * sizeof(S));
  Pack* pd = (Pack*)(dst + head * sizeof(S));
  u64 i = tid;
  for (; i + (FCCL_UNROLL - 1) * nth < nvec; i += FCCL_UNROLL * nth) {
    PackOf<S> va[FCCL_UNROLL], vb[FCCL_UNROLL];
#pragma unroll
    for (int u = 0; u < FCCL_UNROLL; u++) {
      va[u].p = pa[i + u * nth];
      vb[u].p = pb[i + u * nth];
    }
#pragma unroll
    for (int u = 0; u < FCCL_UNROLL; u++) {
      PackOf<S> vd;
#pragma unroll
      for (int k = 0; k < N; k++) vd.e[k] = f(va[u].e[k], vb[u].e[k]);
      pd[i + u * nth] = vd.p;
    }
  }
  for (; i < nvec; i += nth) {
    PackOf<S> va, vb, vd;
    va.p = pa[i];
    vb.p = pb[i];
#pragma unroll
    for (int k = 0; k < N; k++) vd.e[k] = f(va.e[k], vb.e[k]);
    pd[i] = vd.p;
  }
  const u64 tail = head + nvec * N;
  const u64 nscalar = head + (count - tail);
  for (u64 j = tid; j < nscalar; j += nth) {
    const u64 e = (j < head ? j : tail + (j - head)) * sizeof(S);
    store_elem<S>(dst + e, f(load_elem<S>(a + e), load_elem<S>(b + e)));
  }
}

template <typename T, int OP>
struct ReduceF {
  typename T::C s;
  u64 flags;
  FCCL_DEV typename T::S operator()(typename T::S x, typename T::S y) const {
    return reduce_elem<T, OP>(x, y, s, flags);
  }
};

template <typename T>
struct PreMulF {
  typename T::C s;
  FCCL_DEV typename T::S operator()(typename T::S x, typename T::S) const {
    return T::store(T::round(T::mul(T::load(x), s)));
  }
};

template <typename T>
struct DivF {
  u64 n;
  FCCL_DEV typename T::S operator()(typename T::S x, typename T::S) const { return T::store(T::div(T::load(x), n)); }
};

struct CopyF {
  FCCL_DEV u8 operator()(u8 x, u8) const { return x; }
};

// dst = pre?(a) op pre?(b).
template <typename T, int OP>
FCCL_DEV void reduce_kernel(FCCL_PARAMS) {
  ReduceF<T, OP> f;
  f.s = T::scalar(scalar);
  f.flags = flags;
  elementwise<typename T::S>(dst, a, b, count, head, nvec, f);
}

// dst = a * scalar (the pre-op of PreMulSum and float Avg).
template <typename T>
FCCL_DEV void premul_kernel(FCCL_PARAMS) {
  (void)b;
  (void)flags;
  PreMulF<T> f;
  f.s = T::scalar(scalar);
  elementwise<typename T::S>(dst, a, a, count, head, nvec, f);
}

// dst = a / scalar (the post-op of integer Avg; scalar = nranks).
template <typename T>
FCCL_DEV void postdiv_kernel(FCCL_PARAMS) {
  (void)b;
  (void)flags;
  DivF<T> f;
  f.n = scalar;
  elementwise<typename T::S>(dst, a, a, count, head, nvec, f);
}

// dst = a, count bytes.
FCCL_DEV void copy_kernel(FCCL_PARAMS) {
  (void)b;
  (void)scalar;
  (void)flags;
  CopyF f;
  elementwise<u8>(dst, a, a, count, head, nvec, f);
}

// The extern "C" entry points follow (generated per compilation unit by
// kernels/src/cuda/source.rs).
