// Body of the CPU attention kernel, included once per instruction set by attend_kernel_<isa>.cpp
// inside its own namespace (KVFLASH_ISA_NS), so that no inline function compiled for one
// instruction set can be picked by the linker for another. Written with GCC/Clang vector
// extensions (16 floats): one AVX-512 register, or (V16Split) two AVX2 or four NEON registers.
//
// Per chunk of kKeyChunk keys: score every row against the chunk's keys (16 dot products at a
// time, with a transposing reduction so each costs a handful of shuffles instead of a horizontal
// sum), fold the chunk into each row's state with the online softmax (state.hpp's rule: weights
// of empty states are 0, never exp(-inf - -inf)), then add P * V. Calls of 1, 2 or 4 rows per KV
// head decode K and V straight into registers (attend_fused.inl; turbo in int16 with VNNI:
// attend_vnni.inl); other calls (more rows, prefill tiles) dequantize K and V into small tiles
// first (this file).
// Internal functions pass 64-byte vectors by value; their ABI never crosses this file. GCC 12
// also reports the deliberately undefined upper parts inside its own AVX-512 intrinsics. Clang
// reports neither (and knows no -Wmaybe-uninitialized).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/attend_kernel.hpp"
#include "formats/fp8_inline.hpp"
#include "kvflash/blocks.hpp"
#include "kvflash/turbo.hpp"

// Without AVX-512 the compiler has no machine mode for a 64-byte vector and would keep every
// 16-lane value in memory, so there the 16-lane types are made of native vectors with their own
// operators (V16Split below): two 256-bit ones on AVX2 (x86-64-v3), four 128-bit ones on AArch64
// (the NEON build, attend_kernel_neon.cpp). The helpers that follow (select, vmax, to_float,
// to_int, as_u, lane0, reduce16, hmax / hsum) have a native form, the expression the 64-byte
// vector types take, and a split form. KVFLASH_V16_SPLIT: native vectors per 16 lanes (0: one).
#if !defined(__AVX512F__) && defined(__AVX2__)
#define KVFLASH_V16_SPLIT 2
#elif defined(KVFLASH_NEON_KERNEL)
#if !defined(__aarch64__)
#error "the NEON kernel is built for AArch64 only"
#endif
#define KVFLASH_V16_SPLIT 4
#else
#define KVFLASH_V16_SPLIT 0
#endif
#define KVFLASH_X86_SPLIT (KVFLASH_V16_SPLIT == 2)

#if defined(__AVX512F__) || KVFLASH_X86_SPLIT
#include <immintrin.h>
#elif KVFLASH_V16_SPLIT
#include <arm_neon.h>
#endif

namespace kvflash::cpu::KVFLASH_ISA_NS {
namespace {

#if KVFLASH_V16_SPLIT
constexpr int kParts = KVFLASH_V16_SPLIT;
constexpr int kPartLanes = 16 / kParts;
// One native vector (a part of 16 lanes).
using vn = float __attribute__((vector_size(4 * kPartLanes)));
using vni = int32_t __attribute__((vector_size(4 * kPartLanes)));
using vnu = uint32_t __attribute__((vector_size(4 * kPartLanes)));
// 16 lanes as kParts registers: lanes 0 .. kPartLanes-1 in part[0], and so on (the memory layout
// of 16 floats). Comparisons give a v16i mask (-1 / 0 per lane), which select() takes.
template <class V, class E>
struct V16Split {
  V part[kParts];
};
using v16 = V16Split<vn, float>;
using v16i = V16Split<vni, int32_t>;
using v16u = V16Split<vnu, uint32_t>;
// Part by part: R r; r.part[i] = expr for every part i (loops the compiler unrolls, so every part
// stays a register).
#define KVFLASH_PER_PART(R, ...)                                                      \
  R r;                                                                                \
  _Pragma("GCC unroll 4") for (int i = 0; i < kParts; ++i) r.part[i] = (__VA_ARGS__); \
  return r
#define KVFLASH_SPLIT_BINARY(op)                                                                 \
  template <class V, class E>                                                                    \
  [[gnu::always_inline]] inline V16Split<V, E> operator op(V16Split<V, E> a, V16Split<V, E> b) { \
    KVFLASH_PER_PART(decltype(a), a.part[i] op b.part[i]);                                       \
  }                                                                                              \
  template <class V, class E>                                                                    \
  [[gnu::always_inline]] inline V16Split<V, E> operator op(V16Split<V, E> a,                     \
                                                           std::type_identity_t<E> s) {          \
    KVFLASH_PER_PART(decltype(a), a.part[i] op s);                                               \
  }                                                                                              \
  template <class V, class E>                                                                    \
  [[gnu::always_inline]] inline V16Split<V, E> operator op(std::type_identity_t<E> s,            \
                                                           V16Split<V, E> a) {                   \
    KVFLASH_PER_PART(decltype(a), s op a.part[i]);                                               \
  }                                                                                              \
  template <class V, class E>                                                                    \
  [[gnu::always_inline]] inline V16Split<V, E>& operator op##=(V16Split<V, E>& a,                \
                                                               V16Split<V, E> b) {               \
    _Pragma("GCC unroll 4") for (int i = 0; i < kParts; ++i) a.part[i] = a.part[i] op b.part[i]; \
    return a;                                                                                    \
  }
KVFLASH_SPLIT_BINARY(+)
KVFLASH_SPLIT_BINARY(-)
KVFLASH_SPLIT_BINARY(*)
KVFLASH_SPLIT_BINARY(/)
KVFLASH_SPLIT_BINARY(&)
KVFLASH_SPLIT_BINARY(|)
KVFLASH_SPLIT_BINARY(^)
#undef KVFLASH_SPLIT_BINARY
#define KVFLASH_SPLIT_COMPARE(op)                                                               \
  template <class V, class E>                                                                   \
  [[gnu::always_inline]] inline v16i operator op(V16Split<V, E> a, V16Split<V, E> b) {          \
    KVFLASH_PER_PART(v16i, (vni)(a.part[i] op b.part[i]));                                      \
  }                                                                                             \
  template <class V, class E>                                                                   \
  [[gnu::always_inline]] inline v16i operator op(V16Split<V, E> a, std::type_identity_t<E> s) { \
    const V b = V{} + s;                                                                        \
    KVFLASH_PER_PART(v16i, (vni)(a.part[i] op b));                                              \
  }
KVFLASH_SPLIT_COMPARE(<)
KVFLASH_SPLIT_COMPARE(>)
KVFLASH_SPLIT_COMPARE(<=)
KVFLASH_SPLIT_COMPARE(>=)
KVFLASH_SPLIT_COMPARE(==)
KVFLASH_SPLIT_COMPARE(!=)
#undef KVFLASH_SPLIT_COMPARE
template <class V, class E>
[[gnu::always_inline]] inline V16Split<V, E> operator<<(V16Split<V, E> a, int n) {
  KVFLASH_PER_PART(decltype(a), a.part[i] << n);
}
template <class V, class E>
[[gnu::always_inline]] inline V16Split<V, E> operator>>(V16Split<V, E> a, int n) {
  KVFLASH_PER_PART(decltype(a), a.part[i] >> n);
}
template <class V, class E>
[[gnu::always_inline]] inline V16Split<V, E> operator~(V16Split<V, E> a) {
  KVFLASH_PER_PART(decltype(a), ~a.part[i]);
}
template <class V, class E>
[[gnu::always_inline]] inline V16Split<V, E> operator-(V16Split<V, E> a) {
  KVFLASH_PER_PART(decltype(a), -a.part[i]);
}
#else
using v16 = float __attribute__((vector_size(64)));
using v16i = int32_t __attribute__((vector_size(64)));
using v16u = uint32_t __attribute__((vector_size(64)));
#endif
static_assert(sizeof(v16) == 64 && sizeof(v16i) == 64 && sizeof(v16u) == 64);
static_assert(kLanes == 16);
static_assert(kKeyChunk % kLanes == 0);
constexpr int32_t kChunkVecs = kKeyChunk / kLanes;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

#if KVFLASH_V16_SPLIT
#if KVFLASH_X86_SPLIT
[[gnu::always_inline]] inline vn load_part(const float* p) {
  return (vn)_mm256_loadu_ps(p);
}
[[gnu::always_inline]] inline void store_part(float* p, vn v) {
  _mm256_storeu_ps(p, (__m256)v);
}
[[gnu::always_inline]] inline vn splat_part(float x) {
  return (vn)_mm256_set1_ps(x);
}
#else
[[gnu::always_inline]] inline vn load_part(const float* p) {
  return vld1q_f32(p);
}
[[gnu::always_inline]] inline void store_part(float* p, vn v) {
  vst1q_f32(p, v);
}
[[gnu::always_inline]] inline vn splat_part(float x) {
  return vdupq_n_f32(x);
}
#endif
[[gnu::always_inline]] inline v16 load(const float* p) {
  KVFLASH_PER_PART(v16, load_part(p + i * kPartLanes));
}
[[gnu::always_inline]] inline void store(float* p, v16 v) {
#pragma GCC unroll 4
  for (int i = 0; i < kParts; ++i) store_part(p + i * kPartLanes, v.part[i]);
}
[[gnu::always_inline]] inline v16 splat(float x) {
  const vn s = splat_part(x);
  KVFLASH_PER_PART(v16, s);
}
[[gnu::always_inline]] inline v16 as_float(v16u u) {
  KVFLASH_PER_PART(v16, (vn)u.part[i]);
}
[[gnu::always_inline]] inline v16u as_uint(v16 f) {
  KVFLASH_PER_PART(v16u, (vnu)f.part[i]);
}
// Lane-wise m ? a : b (m a comparison's mask).
template <class V, class E>
[[gnu::always_inline]] inline V16Split<V, E> select(v16i m, V16Split<V, E> a, V16Split<V, E> b) {
  KVFLASH_PER_PART(decltype(a), m.part[i] ? a.part[i] : b.part[i]);
}
[[gnu::always_inline]] inline v16 vmax(v16 a, v16 b) {  // a > b ? a : b
#if KVFLASH_X86_SPLIT
  KVFLASH_PER_PART(v16, (vn)_mm256_max_ps((__m256)a.part[i], (__m256)b.part[i]));
#else
  KVFLASH_PER_PART(v16, a.part[i] > b.part[i] ? a.part[i] : b.part[i]);
#endif
}
[[gnu::always_inline]] inline v16 to_float(v16i v) {
  KVFLASH_PER_PART(v16, __builtin_convertvector(v.part[i], vn));
}
[[gnu::always_inline]] inline v16i to_int(v16 v) {
  KVFLASH_PER_PART(v16i, __builtin_convertvector(v.part[i], vni));
}
[[gnu::always_inline]] inline v16u as_u(v16i v) {
  KVFLASH_PER_PART(v16u, (vnu)v.part[i]);
}
[[gnu::always_inline]] inline float lane0(v16 v) {
  return v.part[0][0];
}
// Lanes 0 .. 15 (the lane numbers as values).
[[gnu::always_inline]] inline v16i iota16() {
  static constexpr int32_t kIota[kLanes] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  v16i r;
  std::memcpy(&r, kIota, sizeof r);
  return r;
}
#else
inline v16 load(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store(float* p, v16 v) {
  std::memcpy(p, &v, sizeof(v));
}
// A broadcast (v16{} + x would be an addition: -0.0f + 0.0f is not -0.0f).
inline v16 splat(float x) {
  return __builtin_shufflevector(v16{x}, v16{x}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}
inline v16 as_float(v16u u) {
  v16 f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline v16u as_uint(v16 f) {
  v16u u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
template <class M, class V>
[[gnu::always_inline]] inline V select(M m, V a, V b) {
  return m ? a : b;
}
[[gnu::always_inline]] inline v16 vmax(v16 a, v16 b) {
  return a > b ? a : b;
}
[[gnu::always_inline]] inline v16 to_float(v16i v) {
  return __builtin_convertvector(v, v16);
}
[[gnu::always_inline]] inline v16i to_int(v16 v) {
  return __builtin_convertvector(v, v16i);
}
[[gnu::always_inline]] inline v16u as_u(v16i v) {
  return (v16u)v;
}
[[gnu::always_inline]] inline float lane0(v16 v) {
  return v[0];
}
#endif
#if KVFLASH_V16_SPLIT
// Horizontal max / sum: the parts folded, then halving within one part.
template <class Op>
[[gnu::always_inline]] inline float hreduce(v16 v, Op op) {
  vn m = v.part[0];
#pragma GCC unroll 4
  for (int i = 1; i < kParts; ++i) m = op(m, v.part[i]);
#if KVFLASH_X86_SPLIT
  m = op(m, __builtin_shufflevector(m, m, 4, 5, 6, 7, 0, 1, 2, 3));
  m = op(m, __builtin_shufflevector(m, m, 2, 3, 0, 1, 6, 7, 4, 5));
  m = op(m, __builtin_shufflevector(m, m, 1, 0, 3, 2, 5, 4, 7, 6));
#else
  m = op(m, __builtin_shufflevector(m, m, 2, 3, 0, 1));
  m = op(m, __builtin_shufflevector(m, m, 1, 0, 3, 2));
#endif
  return m[0];
}
inline float hmax(v16 v) {
  return hreduce(v, [](vn a, vn b) { return a > b ? a : b; });
}
inline float hsum(v16 v) {
  return hreduce(v, [](vn a, vn b) { return a + b; });
}
#else
// Horizontal max / sum by halving (4 shuffle + op steps instead of 15 scalar ones).
template <class Op>
[[gnu::always_inline]] inline float hreduce(v16 v, Op op) {
  v = op(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  v = op(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
  v = op(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  v = op(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
  return v[0];
}
inline float hmax(v16 v) {
  return hreduce(v, [](v16 a, v16 b) { return a > b ? a : b; });
}
inline float hsum(v16 v) {
  return hreduce(v, [](v16 a, v16 b) { return a + b; });
}
#endif

// exp(x) for x <= 0 (x = -inf gives 0): 2^(x log2 e) split into 2^n * 2^f, f in [-1/2, 1/2],
// 2^f by a degree-6 polynomial (relative error ~2e-7, below float rounding of the sums it feeds).
// Inputs under -87.3 would need a subnormal 2^n; they return 0, which is below the 2^-126
// relative weight any term can have next to the row maximum (weight 1).
[[gnu::always_inline]] inline v16 exp_neg(v16 x) {
  const v16 t = x * 1.44269504088896341f;
  const v16 big = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const v16 n = (t + big) - big;
  const v16 f = t - n;
  v16 p = splat(1.540353039e-4f);
  p = p * f + 1.333355815e-3f;
  p = p * f + 9.618129108e-3f;
  p = p * f + 5.550410866e-2f;
  p = p * f + 2.402265070e-1f;
  p = p * f + 6.931471806e-1f;
  p = p * f + 1.0f;
  const v16i ni = to_int(n);
  const v16u scale = as_u((ni + 127) << 23);
  const v16 r = p * as_float(scale);
  return select(x < -87.3f, splat(0.0f), r);
}

// fp16 -> fp32 for 16 values, exact for normals, subnormals, inf and NaN (the classic
// exponent-rebias construction; denormals through a float subtraction).
inline v16 half_to_float(const uint16_t* h) {
#if defined(__AVX512F__)
  return (v16)_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
#elif KVFLASH_X86_SPLIT
  return {{(vn)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h))),
           (vn)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 8)))}};
#elif KVFLASH_V16_SPLIT
  KVFLASH_PER_PART(v16, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h + 4 * i))));
#else
  v16u w;
  for (int i = 0; i < kLanes; ++i) w[i] = uint32_t{h[i]} << 16;
  const v16u sign = w & 0x80000000u;
  const v16u two_w = w + w;
  const v16 normalized = as_float((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const v16 denormalized = as_float((two_w >> 17) | (126u << 23)) - 0.5f;
  const v16u bits = two_w < (1u << 27) ? as_uint(denormalized) : as_uint(normalized);
  return as_float(sign | bits);
#endif
}

inline float half_to_float1(uint16_t h) {
#if defined(__AVX512F__) || KVFLASH_X86_SPLIT
  return _cvtsh_ss(h);
#elif KVFLASH_V16_SPLIT
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
#else
  const uint32_t w = uint32_t{h} << 16, sign = w & 0x80000000u, two_w = w + w;
  uint32_t bits;
  if (two_w < (1u << 27)) {
    const uint32_t u = (two_w >> 17) | (126u << 23);
    float f;
    std::memcpy(&f, &u, 4);
    f -= 0.5f;
    std::memcpy(&bits, &f, 4);
  } else {
    const uint32_t u = (two_w >> 4) + (0xE0u << 23);
    float f;
    std::memcpy(&f, &u, 4);
    f *= 0x1.0p-112f;
    std::memcpy(&bits, &f, 4);
  }
  bits |= sign;
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
#endif
}

inline uint16_t read_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// 16 bytes widened to 16 int32 lanes.
inline v16i widen_u8(const uint8_t* p) {
#if defined(__AVX512F__)
  return (v16i)_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#elif KVFLASH_X86_SPLIT
  return {{(vni)_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))),
           (vni)_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)))}};
#elif KVFLASH_V16_SPLIT
  const uint8x16_t b = vld1q_u8(p);
  const uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_high_u8(b);
  return {{(vni)vmovl_u16(vget_low_u16(lo)), (vni)vmovl_high_u16(lo),
           (vni)vmovl_u16(vget_low_u16(hi)), (vni)vmovl_high_u16(hi)}};
#else
  v16i r;
  for (int i = 0; i < kLanes; ++i) r[i] = p[i];
  return r;
#endif
}
inline v16i widen_s8(const uint8_t* p) {
#if defined(__AVX512F__)
  return (v16i)_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#elif KVFLASH_X86_SPLIT
  return {{(vni)_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))),
           (vni)_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)))}};
#elif KVFLASH_V16_SPLIT
  const int8x16_t b = vreinterpretq_s8_u8(vld1q_u8(p));
  const int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
  return {{(vni)vmovl_s16(vget_low_s16(lo)), (vni)vmovl_high_s16(lo),
           (vni)vmovl_s16(vget_low_s16(hi)), (vni)vmovl_high_s16(hi)}};
#else
  v16i r;
  for (int i = 0; i < kLanes; ++i) r[i] = static_cast<int8_t>(p[i]);
  return r;
#endif
}

// ---- dequantizers: one row of n stored values (n a multiple of 16) into dst ----------------
// Blocks are read in place through byte pointers (no copy of a block to the stack: a narrow
// store followed by a wide load of the same bytes stalls store forwarding).

[[gnu::always_inline]] inline void deq_f32(const uint8_t* src, int32_t n, float* dst, int32_t vs,
                                           const float*) {
  for (int32_t d = 0; d < n; d += kLanes) {
    v16 v;
    std::memcpy(&v, src + 4 * d, sizeof(v));
    store(dst + d / kLanes * vs, v);
  }
}
[[gnu::always_inline]] inline void deq_f16(const uint8_t* src, int32_t n, float* dst, int32_t vs,
                                           const float*) {
  for (int32_t d = 0; d < n; d += kLanes)
    store(dst + (d) / kLanes * vs, half_to_float(reinterpret_cast<const uint16_t*>(src) + d));
}
[[gnu::always_inline]] inline void deq_bf16(const uint8_t* src, int32_t n, float* dst, int32_t vs,
                                            const float*) {
  for (int32_t d = 0; d < n; d += kLanes) {
#if defined(__AVX512F__)
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * d)));
    store(dst + (d) / kLanes * vs, (v16)_mm512_slli_epi32(w, 16));
#elif KVFLASH_X86_SPLIT
    const auto half = [](const uint8_t* s) {
      return (vn)_mm256_slli_epi32(
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))), 16);
    };
    store(dst + (d) / kLanes * vs, v16{{half(src + 2 * d), half(src + 2 * d + 16)}});
#elif KVFLASH_V16_SPLIT
    const auto bf16 = [&]() -> v16 {
      KVFLASH_PER_PART(v16, (vn)vshll_n_u16(vreinterpret_u16_u8(vld1_u8(src + 2 * d + 8 * i)), 16));
    };
    store(dst + (d) / kLanes * vs, bf16());
#else
    v16u w;
    for (int i = 0; i < kLanes; ++i) w[i] = uint32_t{read_u16(src + 2 * (d + i))} << 16;
    store(dst + (d) / kLanes * vs, as_float(w));
#endif
  }
}
[[gnu::always_inline]] inline void deq_q8_0(const uint8_t* src, int32_t n, float* dst, int32_t vs,
                                            const float*) {
  for (int32_t b = 0; b < n / kQ8_0Values; ++b) {
    const uint8_t* blk = src + b * sizeof(BlockQ8_0);
    const float d = half_to_float1(read_u16(blk));
    const uint8_t* qs = blk + offsetof(BlockQ8_0, qs);
    store(dst + (b * kQ8_0Values) / kLanes * vs, to_float(widen_s8(qs)) * d);
    store(dst + (b * kQ8_0Values + kLanes) / kLanes * vs, to_float(widen_s8(qs + kLanes)) * d);
  }
}
// fp8 -> fp32 for 16 values, exact (formats.hpp): E5M2 is an fp16's top byte; E4M3 sits in an fp16
// with its bits shifted into place, worth 2^-8 of the value (bias 15 instead of 7), and its one NaN
// code per sign has no fp16 twin.
template <KvType T>
inline v16 fp8_to_float(const uint8_t* p) {
  static_assert(is_fp8(T));
#if defined(__AVX512F__)
  const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  if constexpr (T == KvType::fp8_e5m2) {
    return (v16)_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_slli_epi32(c, 8)));
  } else {
    const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
    const __m512i h =
        _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 8),
                        _mm512_slli_epi32(mag, 7));
    const __m512 f =
        _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)), _mm512_set1_ps(256.0f));
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F));
    return (v16)_mm512_mask_mov_ps(f, nan, _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
  }
#elif KVFLASH_X86_SPLIT
  // All 16 as fp16 in 16-bit lanes (the NaN codes made fp16 NaNs there), then 2 x 8 fp16 -> fp32.
  const __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  __m256i h;
  if constexpr (T == KvType::fp8_e5m2) {
    h = _mm256_slli_epi16(c, 8);
  } else {
    const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi16(0x7F));
    h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x80)), 8),
                        _mm256_slli_epi16(mag, 7));
    const __m256i nan = _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F));
    h = _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7E00)));
  }
  v16 r = {{(vn)_mm256_cvtph_ps(_mm256_castsi256_si128(h)),
            (vn)_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))}};
  if constexpr (T == KvType::fp8_e4m3) r = r * 256.0f;
  return r;
#elif KVFLASH_V16_SPLIT
  // As AVX2: 8 values at a time as fp16 in 16-bit lanes, then 2 x 4 fp16 -> fp32.
  const uint8x16_t b = vld1q_u8(p);
  const uint16x8_t c[2] = {vmovl_u8(vget_low_u8(b)), vmovl_high_u8(b)};
  v16 r;
#pragma GCC unroll 2
  for (int k = 0; k < 2; ++k) {
    uint16x8_t h;
    if constexpr (T == KvType::fp8_e5m2) {
      h = vshlq_n_u16(c[k], 8);
    } else {
      const uint16x8_t mag = vandq_u16(c[k], vdupq_n_u16(0x7F));
      h = vorrq_u16(vshlq_n_u16(vandq_u16(c[k], vdupq_n_u16(0x80)), 8), vshlq_n_u16(mag, 7));
      h = vorrq_u16(h, vandq_u16(vceqq_u16(mag, vdupq_n_u16(0x7F)), vdupq_n_u16(0x7E00)));
    }
    r.part[2 * k] = (vn)vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h)));
    r.part[2 * k + 1] = (vn)vcvt_high_f32_f16(vreinterpretq_f16_u16(h));
  }
  if constexpr (T == KvType::fp8_e4m3) r = r * 256.0f;
  return r;
#else
  v16 r;
  for (int i = 0; i < kLanes; ++i)
    r[i] = T == KvType::fp8_e5m2 ? detail::fp8_e5m2_to_fp32_inline(p[i])
                                 : detail::fp8_e4m3_to_fp32_inline(p[i]);
  return r;
#endif
}
template <KvType T>
[[gnu::always_inline]] inline void deq_fp8(const uint8_t* src, int32_t n, float* dst, int32_t vs,
                                           const float*) {
  for (int32_t d = 0; d < n; d += kLanes) store(dst + d / kLanes * vs, fp8_to_float<T>(src + d));
}

// Centroid lookup: table holds the 2^bits scaled centroids (turbo.hpp).
inline v16 lookup(const v16i& code, const v16& table) {
#if defined(__AVX512F__)
  return (v16)_mm512_permutexvar_ps((__m512i)code, (__m512)table);
#elif KVFLASH_X86_SPLIT
  // Entries 0-7 and 8-15 by one vpermps each (bits 0..2), bit 3 picks between them.
  const auto half = [&](vni c) {
    const __m256i i = (__m256i)c;
    const __m256 lo = _mm256_permutevar8x32_ps((__m256)table.part[0], i);
    const __m256 hi = _mm256_permutevar8x32_ps((__m256)table.part[1], i);
    return (vn)_mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
  };
  return {{half(code.part[0]), half(code.part[1])}};
#elif KVFLASH_V16_SPLIT
  // One byte lookup in the 64-byte table per 4 lanes: lane code c reads bytes 4c .. 4c + 3.
  const uint8x16x4_t t = {{(uint8x16_t)table.part[0], (uint8x16_t)table.part[1],
                           (uint8x16_t)table.part[2], (uint8x16_t)table.part[3]}};
  KVFLASH_PER_PART(
      v16, (vn)vqtbl4q_u8(t, (uint8x16_t)(((vnu)code.part[i] & 15u) * 0x04040404u + 0x03020100u)));
#else
  v16 r;
  for (int i = 0; i < kLanes; ++i) r[i] = table[code[i] & (kLanes - 1)];  // bits 0..3, as vpermps
  return r;
#endif
}

// A turbo type's lookup: turbo2 / turbo3 tables repeat every 4 / 8 entries (CentroidTable), so
// in pairs one vpermps of the low half reads them (bits 0..2); turbo4 needs all 16.
template <int Bits>
[[gnu::always_inline]] inline v16 lookup_turbo(const v16i& code, const v16& table) {
#if KVFLASH_X86_SPLIT
  if constexpr (Bits < 4) {
    const __m256 t = (__m256)table.part[0];
    return {{(vn)_mm256_permutevar8x32_ps(t, (__m256i)code.part[0]),
             (vn)_mm256_permutevar8x32_ps(t, (__m256i)code.part[1])}};
  }
#endif
  return lookup(code, table);
}

// q4_0 through the same 16-entry lookup: the block's values d * (q - 8) for q = 0..15 as one
// table (one multiply per block), then one vpermps per 16 values, which reads only the low 4
// bits of each lane, so the low nibbles need no mask. 5 instructions per 32 values where
// convert + FMA took 8; exact (d has 11 significant bits, q - 8 four).
inline v16 q4_0_table(const uint8_t* blk) {
#if KVFLASH_V16_SPLIT
  static constexpr float kValues[kLanes] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
  const v16 kCodes = load(kValues);
#else
  constexpr v16 kCodes = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
#endif
  return kCodes * half_to_float1(read_u16(blk));
}
// Split: d * q - 8d by convert and FMA (exact: d * q has 15 significant bits), fewer
// instructions than two vpermps and a blend per 8 values.
[[gnu::always_inline]] inline void q4_0_values(const uint8_t* blk, v16& a, v16& b) {
#if KVFLASH_V16_SPLIT
  const float d = half_to_float1(read_u16(blk));
  const v16 dd = splat(d), off = splat(-8.0f * d);
  const v16i q = widen_u8(blk + offsetof(BlockQ4_0, qs));
  a = to_float(q & 15) * dd + off;
  b = to_float(q >> 4) * dd + off;
#else
  const v16 table = q4_0_table(blk);
  const v16i q = widen_u8(blk + offsetof(BlockQ4_0, qs));
  a = lookup(q, table);
  b = lookup(q >> 4, table);
#endif
}
[[gnu::always_inline]] inline void deq_q4_0(const uint8_t* src, int32_t n, float* dst, int32_t vs,
                                            const float*) {
  for (int32_t b = 0; b < n / kQ4_0Values; ++b) {
    const uint8_t* blk = src + b * sizeof(BlockQ4_0);
#if KVFLASH_V16_SPLIT
    v16 lo, hi;
    q4_0_values(blk, lo, hi);
    store(dst + (b * kQ4_0Values) / kLanes * vs, lo);
    store(dst + (b * kQ4_0Values + kLanes) / kLanes * vs, hi);
    continue;
#endif
    const v16 table = q4_0_table(blk);
    const v16i q = widen_u8(blk + offsetof(BlockQ4_0, qs));
    store(dst + (b * kQ4_0Values) / kLanes * vs, lookup(q, table));
    store(dst + (b * kQ4_0Values + kLanes) / kLanes * vs, lookup(q >> 4, table));
  }
}

// Codes of 16 consecutive values c*16 .. c*16+15 of a turbo block, from the bit planes of
// blocks.hpp: byte j of the 2-bit plane holds values j, j+32, j+64, j+96; of the 4-bit plane
// values j, j+64; of the 1-bit plane values j, j+16, ..., j+112.
// Only the low 4 bits of each lane are meaningful: the lookup reads bits 0..3 and its 16-entry
// table repeats the 4 or 8 centroids of turbo2 / turbo3, so bits above the code need no mask.
template <int Bits>
[[gnu::always_inline]] inline v16i turbo_codes(const v16i* qs, const v16i& qh, int c) {
  if constexpr (Bits == 4) {
    return qs[c % 4] >> (4 * (c / 4));
  } else if constexpr (Bits == 2) {
    return qs[c % 2] >> (2 * (c / 2));
  } else {
    const v16i lo = qs[c % 2] >> (2 * (c / 2));
    // Bit c of the 1-bit plane moved to bit 2.
    const v16i hi = c >= 2 ? qh >> (c - 2) : qh << (2 - c);
    return (lo & 3) | (hi & ~3);
  }
}

template <int Bits>
[[gnu::always_inline]] inline void deq_turbo(const uint8_t* src, int32_t n, float* dst, int32_t vs,
                                             const float* table) {
  using Block = std::conditional_t<Bits == 2, BlockTurbo2,
                                   std::conditional_t<Bits == 3, BlockTurbo3, BlockTurbo4>>;
  constexpr int kPieces = Bits == 4 ? 4 : 2;  // 16-byte pieces of the 2- or 4-bit plane
  for (int32_t g = 0; g < n / kTurboValues; ++g) {
    const uint8_t* blk = src + g * sizeof(Block);
    // The block's norm folded into its table once: one multiply per block, not per value.
    const v16 scaled = load(table) * half_to_float1(read_u16(blk));
    // Each plane piece is widened once and shifted for every code it holds (the compiler cannot
    // reuse the loads itself: the stores to dst might alias src).
    v16i qs[kPieces];
#pragma GCC unroll 4
    for (int i = 0; i < kPieces; ++i) qs[i] = widen_u8(blk + 2 + i * kLanes);
    const v16i qh = Bits == 3 ? widen_u8(blk + 2 + 32) : v16i{};  // the 1-bit plane of turbo3
#pragma GCC unroll 8
    for (int c = 0; c < kTurboValues / kLanes; ++c)
      store(dst + (g * kTurboValues + c * kLanes) / kLanes * vs,
            lookup_turbo<Bits>(turbo_codes<Bits>(qs, qh, c), scaled));
  }
}

// Where the stored rows of one chunk's keys are, in two forms with one interface (row(j): key j's
// row; from(j): the view that starts at key j; run_end(j, n): the end of the run of rows one
// stride apart that holds key j, at most n: the loops over keys walk runs by stride steps). The
// kernel's readers are compiled for each form (attend picks one per call): StridedRows: every row
// one stride from the one before (a contiguous cache, a chunk inside one page, the gathered staging
// rows): the addressing of a plain strided loop.
struct StridedRows {
  const uint8_t* base = nullptr;
  int64_t stride = 0;
  const uint8_t* row(int32_t j) const { return base + j * stride; }
  StridedRows from(int32_t j) const { return {row(j), stride}; }
  int32_t run_end(int32_t, int32_t n) const { return n; }
};
// GroupedRows: groups of kRowGroup keys, each group's rows one stride apart from group[g], the
// groups from the page table, one lookup per group (pages of a multiple of kRowGroup keys shorter
// than a chunk, chunks starting at multiples of kRowGroup: no group crosses a page). Key j of the
// chunk is key first + j of the groups.
struct GroupedRows {
  const uint8_t* group[kKeyChunk / kRowGroup] = {};
  int64_t stride = 0;
  int32_t first = 0;
  const uint8_t* row(int32_t j) const {
    const auto k = static_cast<uint32_t>(first + j);
    return group[k / kRowGroup] + static_cast<int64_t>(k % kRowGroup) * stride;
  }
  GroupedRows from(int32_t j) const {
    GroupedRows r = *this;
    r.first += j;
    return r;
  }
  int32_t run_end(int32_t j, int32_t n) const {
    const auto k = static_cast<uint32_t>(first + j);
    return std::min<int32_t>(n, j + kRowGroup - static_cast<int32_t>(k % kRowGroup));
  }
};

// Rows to prefetch while a tile is dequantized: the next chunk's K and V rows, one of each per
// dequantized row, into L2 (a burst of prefetches fills the miss queue and stalls).
template <class Rows>
struct Prefetch {
  Rows k, v;
  int64_t k_bytes = 0, v_bytes = 0;
  int32_t n = 0;  // rows to prefetch
};

// Lines from the row's first byte in 64-byte steps: with rows packed token after token, the line
// holding a row's end is the next row's first (prefetched by that row), so each line is asked for
// about once; asking for every line a row touches issued twice the prefetches for small turbo and
// q4_0 rows, and the prefetches themselves became the stall.
inline void prefetch_lines(const uint8_t* row, int64_t bytes) {
  constexpr int64_t kLine = 64;
  for (int64_t b = 0; b < bytes; b += kLine) __builtin_prefetch(row + b, 0, 2);
}

// A tile of n_rows rows (n stored values each) of a chunk: one call per tile, the row decoder
// inlined. Row j's vectors go to dst + j * row_step + k * vs (k-th 16-value vector).
template <void (*Row)(const uint8_t*, int32_t, float*, int32_t, const float*), class Rows>
void deq_rows(Rows src, int32_t n_rows, int32_t n, float* dst, int32_t row_step, int32_t vs,
              const float* table, const Prefetch<Rows>& pf) {
  for (int32_t j0 = 0, j1; j0 < n_rows; j0 = j1) {
    j1 = src.run_end(j0, n_rows);
    const uint8_t* row = src.row(j0);
    for (int32_t j = j0; j < j1; ++j, row += src.stride) {
      if (j < pf.n) {
        prefetch_lines(pf.k.row(j), pf.k_bytes);
        prefetch_lines(pf.v.row(j), pf.v_bytes);
      }
      Row(row, n, dst + static_cast<int64_t>(j) * row_step, vs, table);
    }
  }
}

template <class Rows>
using Dequant = void (*)(Rows, int32_t, int32_t, float*, int32_t, int32_t, const float*,
                         const Prefetch<Rows>&);
template <class Rows>
Dequant<Rows> pick_dequant(KvType t) {
  switch (t) {
    case KvType::f32:
      return deq_rows<deq_f32, Rows>;
    case KvType::f16:
      return deq_rows<deq_f16, Rows>;
    case KvType::bf16:
      return deq_rows<deq_bf16, Rows>;
    case KvType::q8_0:
      return deq_rows<deq_q8_0, Rows>;
    case KvType::q4_0:
      return deq_rows<deq_q4_0, Rows>;
    case KvType::turbo2:
      return deq_rows<deq_turbo<2>, Rows>;
    case KvType::turbo3:
      return deq_rows<deq_turbo<3>, Rows>;
    case KvType::turbo4:
      return deq_rows<deq_turbo<4>, Rows>;
    case KvType::fp8_e4m3:
      return deq_rows<deq_fp8<KvType::fp8_e4m3>, Rows>;
    case KvType::fp8_e5m2:
      return deq_rows<deq_fp8<KvType::fp8_e5m2>, Rows>;
  }
  return nullptr;
}

// The centroids of a turbo type repeated to fill 16 entries (4 x turbo2, 2 x turbo3), so a
// 16-lane permute reads a centroid whatever the bits above the code hold (see turbo_codes).
struct CentroidTable {
  float c[kLanes] = {};
  explicit CentroidTable(KvType t) {
    if (!is_rotated(t)) return;
    const int n = 1 << turbo_bits(t);
    for (int i = 0; i < kLanes; ++i) c[i] = turbo_centroids(t)[i % n];
  }
};

// Sixteen dot products reduced at once: acc[j] holds lane partials of key j; returns the vector
// whose lane j is the sum of acc[j]. Four levels of pairwise shuffle-and-add keep key order.
#if KVFLASH_X86_SPLIT
// Split form (AVX2): two 8 x 8 transposing reductions (lane j of the result from acc[j] and
// acc[j + 4] paired in 128-bit halves first, so that the in-lane shuffles of the last two levels
// leave the keys in order).
[[gnu::always_inline]] inline vn reduce_part(const vn (&s)[kPartLanes]) {
  vn t[4], u[2];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    t[i] = __builtin_shufflevector(s[i], s[i + 4], 0, 1, 2, 3, 8, 9, 10, 11) +
           __builtin_shufflevector(s[i], s[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
#pragma GCC unroll 2
  for (int k = 0; k < 2; ++k)
    u[k] = __builtin_shufflevector(t[2 * k], t[2 * k + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
           __builtin_shufflevector(t[2 * k], t[2 * k + 1], 2, 3, 10, 11, 6, 7, 14, 15);
  return __builtin_shufflevector(u[0], u[1], 0, 2, 8, 10, 4, 6, 12, 14) +
         __builtin_shufflevector(u[0], u[1], 1, 3, 9, 11, 5, 7, 13, 15);
}
#elif KVFLASH_V16_SPLIT
// Split form (NEON): one 4 x 4 transposing reduction.
[[gnu::always_inline]] inline vn reduce_part(const vn (&s)[kPartLanes]) {
  const vn t0 = __builtin_shufflevector(s[0], s[1], 0, 4, 2, 6) +
                __builtin_shufflevector(s[0], s[1], 1, 5, 3, 7);
  const vn t1 = __builtin_shufflevector(s[2], s[3], 0, 4, 2, 6) +
                __builtin_shufflevector(s[2], s[3], 1, 5, 3, 7);
  return __builtin_shufflevector(t0, t1, 0, 1, 4, 5) + __builtin_shufflevector(t0, t1, 2, 3, 6, 7);
}
#else
template <class V>
[[gnu::always_inline]] inline V reduce16(V (&acc)[kLanes]) {
  V x[8], y[4], z[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    x[i] = __builtin_shufflevector(acc[2 * i], acc[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18,
                                   19, 20, 21, 22, 23) +
           __builtin_shufflevector(acc[2 * i], acc[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25,
                                   26, 27, 28, 29, 30, 31);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    y[i] = __builtin_shufflevector(x[2 * i], x[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19,
                                   24, 25, 26, 27) +
           __builtin_shufflevector(x[2 * i], x[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                   23, 28, 29, 30, 31);
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)
    z[i] = __builtin_shufflevector(y[2 * i], y[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21,
                                   24, 25, 28, 29) +
           __builtin_shufflevector(y[2 * i], y[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22,
                                   23, 26, 27, 30, 31);
  return __builtin_shufflevector(z[0], z[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                 30) +
         __builtin_shufflevector(z[0], z[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29,
                                 31);
}
#endif

// The scores' accumulators: one per (row, key) of a step, kAccLanes of them reduced at once.
// Native: 16-lane vectors (reduce16). Split: one native vector each, each FMA adding every part
// of a product into one (16 accumulators of several registers would not fit AVX2's 16 registers
// or NEON's 32); J = kAccLanes / R keys per step.
#if KVFLASH_V16_SPLIT
using vacc = vn;
constexpr int kAccLanes = kPartLanes;
[[gnu::always_inline]] inline void fma_acc(vacc& acc, v16 q, v16 k) {
#pragma GCC unroll 4
  for (int i = 0; i < kParts; ++i) acc += q.part[i] * k.part[i];
}
[[gnu::always_inline]] inline vacc reduce_acc(vacc (&acc)[kAccLanes]) {
  return reduce_part(acc);
}
#else
using vacc = v16;
constexpr int kAccLanes = kLanes;
[[gnu::always_inline]] inline void fma_acc(vacc& acc, v16 q, v16 k) {
  acc += q * k;
}
[[gnu::always_inline]] inline vacc reduce_acc(vacc (&acc)[kAccLanes]) {
  return reduce16(acc);
}
#endif

// Scores of R rows against the kKeyChunk keys of the K tile, J = 16 / R keys at a time. The tile
// is stored (dk / 16, kKeyChunk, 16): the keys' vectors of one 16-dim slice are adjacent, so the
// loads of a step sit at constant offsets from one pointer. Each K vector loaded feeds R rows and
// each Q vector J keys (scoring one row at a time costs a load per FMA). The R x J accumulators
// are reduced at once (reduce16: lane r * J + j = row r, key j); row r's scores land at
// out[r * kKeyChunk + key].
template <int R>
[[gnu::always_inline]] inline void score_rows(const float* q, int32_t dk, const float* ktile,
                                              float* out) {
  constexpr int J = kAccLanes / R;
  static_assert(R * J == kAccLanes && kKeyChunk % J == 0);
  for (int32_t k0 = 0; k0 < kKeyChunk; k0 += J) {
    vacc acc[kAccLanes] = {};
    const float* kt = ktile + (k0 / kLanes) * kLanes * kLanes + (k0 % kLanes) * kLanes;
    for (int32_t d = 0; d < dk; d += kLanes, kt += kKeyChunk * kLanes) {
      v16 kv[J];
#pragma GCC unroll 16
      for (int j = 0; j < J; ++j) kv[j] = load(kt + j * kLanes);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const v16 qv = load(q + static_cast<int64_t>(r) * dk + d);
#pragma GCC unroll 16
        for (int j = 0; j < J; ++j) fma_acc(acc[r * J + j], qv, kv[j]);
      }
    }
    const vacc sums = reduce_acc(acc);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      std::memcpy(out + r * kKeyChunk + k0, reinterpret_cast<const float*>(&sums) + r * J, J * 4);
  }
}

// o[r][0 .. U*16) += sum_j w[r][j] * v[j][0 .. U*16) for R rows (w rows kKeyChunk apart, o rows
// dv apart): the R x U vectors of o stay in registers across the keys, and each V vector loaded
// feeds R rows.
template <int R, int U>
[[gnu::always_inline]] inline void pv_rows(const float* w, int32_t n, const float* v, int32_t dv,
                                           float* o) {
  v16 acc[R][U];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) acc[r][u] = load(o + static_cast<int64_t>(r) * dv + u * kLanes);
  for (int32_t j = 0; j < n; ++j) {
    const float* vr = v + static_cast<int64_t>(j) * dv;
    v16 vv[U];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) vv[u] = load(vr + u * kLanes);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const v16 wj = splat(w[r * kKeyChunk + j]);
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) acc[r][u] += wj * vv[u];
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) store(o + static_cast<int64_t>(r) * dv + u * kLanes, acc[r][u]);
}

// P * V for R rows over the whole of dv: blocks of U vectors (R * U = 16 accumulators, 8 for one
// row), then single vectors for what is left of a dv that is not a multiple of the block.
template <int R>
[[gnu::always_inline]] inline void pv_all(const float* w, int32_t n, const float* vtile, int32_t dv,
                                          float* o) {
  constexpr int U = R == 1 ? 8 : kLanes / R;
  int32_t d0 = 0;
  for (; d0 + U * kLanes <= dv; d0 += U * kLanes) pv_rows<R, U>(w, n, vtile + d0, dv, o + d0);
  for (; d0 < dv; d0 += kLanes) pv_rows<R, 1>(w, n, vtile + d0, dv, o + d0);
}

#include "backends/cpu/attend_fused.inl"
#include "backends/cpu/attend_vnni.inl"

}  // namespace

namespace {

// What stays the same for every head and block of one call.
template <class Rows>
struct Context {
  Dequant<Rows> deq_k, deq_v;
  CentroidTable ck, cv;
  // The fused path (no tiles), where it applies: 1, 2 or 4 rows, whole 32-value units.
  ScoreFused<Rows> score = nullptr;
  PvFused<Rows> pv = nullptr;
#if defined(__AVX512VNNI__)
  // turbo K / V in int16 on the fused path (replacing score / pv where set).
  ScoreVnni<Rows> score_vnni = nullptr;
  PvVnni<Rows> pv_vnni = nullptr;
  TurboInt tk, tv;
#endif
  explicit Context(const AttendParams& p)
      : deq_k(pick_dequant<Rows>(p.k_type)),
        deq_v(pick_dequant<Rows>(p.v_type)),
        ck(p.k_type),
        cv(p.v_type)
#if defined(__AVX512VNNI__)
        ,
        tk(p.k_type, kQ16),
        tv(p.v_type, kCV16)
#endif
  {
    if (p.dk % 32 != 0 || p.dv % 32 != 0) return;
    if (p.n_rows == 1) {
      score = pick_score_fused<1, Rows>(p.k_type);
      pv = pick_pv_fused<1, Rows>(p.v_type);
    } else if (p.n_rows == 2) {
      score = pick_score_fused<2, Rows>(p.k_type);
      pv = pick_pv_fused<2, Rows>(p.v_type);
    } else if (p.n_rows == 4) {
      score = pick_score_fused<4, Rows>(p.k_type);
      pv = pick_pv_fused<4, Rows>(p.v_type);
    }
#if defined(__AVX512VNNI__)
    if (p.n_rows == 1) {
      score_vnni = pick_score_vnni<1, Rows>(p.k_type);
      pv_vnni = pick_pv_vnni<1, Rows>(p.v_type);
    } else if (p.n_rows == 2) {
      score_vnni = pick_score_vnni<2, Rows>(p.k_type);
      pv_vnni = pick_pv_vnni<2, Rows>(p.v_type);
    } else if (p.n_rows == 4) {
      score_vnni = pick_score_vnni<4, Rows>(p.k_type);
      pv_vnni = pick_pv_vnni<4, Rows>(p.v_type);
    }
#endif
  }
};

// P * V for keys [a, b) of the chunk (V rows vrows), every row: the fused path reads the V rows
// itself, the tile path reads the dequantized tile (row j at vtile + j * dv).
template <class Rows>
void pv_keys(const AttendParams& p, const Context<Rows>& ctx, const float* probs,
             const float* vtile, Rows vrows, int32_t a, int32_t b) {
  const int32_t dv = p.dv;
  if (ctx.pv) {
    ctx.pv(probs + a, vrows.from(a), b - a, dv, ctx.cv.c, p.o);
    return;
  }
  const float* vt = vtile + static_cast<int64_t>(a) * dv;
  int32_t r = 0;
  for (; r + 4 <= p.n_rows; r += 4)
    pv_all<4>(probs + r * kKeyChunk + a, b - a, vt, dv, p.o + static_cast<int64_t>(r) * dv);
  for (; r + 2 <= p.n_rows; r += 2)
    pv_all<2>(probs + r * kKeyChunk + a, b - a, vt, dv, p.o + static_cast<int64_t>(r) * dv);
  for (; r < p.n_rows; ++r)
    pv_all<1>(probs + r * kKeyChunk + a, b - a, vt, dv, p.o + static_cast<int64_t>(r) * dv);
}

// Whether a V row holds only finite values (so that 0 * it adds nothing): any all-ones exponent
// (NaN or inf) fails it. Integer bits, so that it vectorizes without reassociating floats.
inline bool finite_row(const float* v, int32_t dv) {
  uint32_t bad = 0;
  for (int32_t d = 0; d < dv; ++d) {
    uint32_t bits;
    std::memcpy(&bits, v + d, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// o[r] += probs[r][j] * V[j] for the chunk's n keys, where a key some row does not see (weight
// 0: hidden by causal, window or a -inf mask, or below exp_neg's range) never enters that row as
// 0 * V when that could change it: a NaN or inf in a hidden key's V row would make the row NaN.
// Keys of weight 0 in every row are skipped; the others go through the fast path in runs, a key
// of weight 0 in some rows included when its V row is finite (0 * V adds exactly nothing then:
// the diagonal of a causal prefill stays on the fast path); only a non-finite V row of such a key
// is added row by row to the rows that weigh it.
template <class Rows>
void pv_chunk(const AttendParams& p, const Context<Rows>& ctx, const float* probs, float* vtile,
              Rows vrows, int32_t n) {
  int32_t zeros[kKeyChunk] = {};  // rows that give key j weight 0
  for (int32_t r = 0; r < p.n_rows; ++r)
    for (int32_t j = 0; j < kKeyChunk; ++j) zeros[j] += probs[r * kKeyChunk + j] == 0.0f;
  int32_t any = 0;
  for (int32_t j = 0; j < n; ++j) any |= zeros[j];
  if (any == 0) return pv_keys(p, ctx, probs, vtile, vrows, 0, n);
  const int32_t dv = p.dv;
  // Key j's V row: in the tile, or dequantized into vtile (the fused path reads its V rows per
  // key and has no tile, so vtile is free there).
  const auto v_row = [&](int32_t j) -> const float* {
    if (!ctx.pv) return vtile + static_cast<int64_t>(j) * dv;
    ctx.deq_v(vrows.from(j), 1, dv, vtile, dv, kLanes, ctx.cv.c, Prefetch<Rows>{});
    return vtile;
  };
  const auto fast = [&](int32_t j) {
    return zeros[j] == 0 || (zeros[j] < p.n_rows && finite_row(v_row(j), dv));
  };
  for (int32_t j = 0; j < n;) {
    if (zeros[j] == p.n_rows) {
      ++j;
      continue;
    }
    int32_t e = j;
    while (e < n && fast(e)) ++e;
    if (e > j) {
      pv_keys(p, ctx, probs, vtile, vrows, j, e);
      j = e;
      continue;
    }
    const float* vr = v_row(j);
    for (int32_t r = 0; r < p.n_rows; ++r) {
      const float w = probs[r * kKeyChunk + j];
      if (w == 0.0f) continue;
      float* o = p.o + static_cast<int64_t>(r) * dv;
      for (int32_t d = 0; d < dv; d += kLanes) store(o + d, load(o + d) + splat(w) * load(vr + d));
    }
    ++j;
  }
}

// Key `key`'s row in a paged pool (base: the head's row in page 0): its page from the table.
inline const uint8_t* paged_row(const uint8_t* base, const int32_t* pages, int64_t page_stride,
                                int32_t page_size, int64_t stride, int64_t key) {
  const int64_t page = key / page_size;
  return base + int64_t{pages[page]} * page_stride + (key - page * page_size) * stride;
}

// The rows of keys c0 .. c0 + kKeyChunk - 1 of one head of a tensor (base: the head's row of key
// 0, or of page 0 of a paged pool; c0 a multiple of kKeyChunk), the page table read only for keys
// below end. Strided: contiguous, or a chunk inside one page (pages of a multiple of kKeyChunk).
// Grouped: one lookup per kRowGroup keys; the groups from end on repeat the one before (their
// rows are never read).
template <class Rows>
Rows chunk_rows(const AttendParams& p, const uint8_t* base, int64_t stride, const int32_t* pages,
                int64_t page_stride, int64_t c0, int64_t end) {
  const auto at = [&](int64_t key) {
    return p.page_size == 0 ? base + key * stride
                            : paged_row(base, pages, page_stride, p.page_size, stride, key);
  };
  if constexpr (std::is_same_v<Rows, StridedRows>) {
    return {at(c0), stride};
  } else {
    Rows r;
    r.stride = stride;
    for (int32_t g = 0; g < kKeyChunk / kRowGroup; ++g) {
      const int64_t key = c0 + int64_t{g} * kRowGroup;
      r.group[g] = g > 0 && key >= end ? r.group[g - 1] : at(key);
    }
    return r;
  }
}

// One KV head, keys [p.kv_begin, p.kv_end).
// q16 / q16_scale: this head's query rows in int16 and their scales (VNNI turbo scores only).
template <class Rows>
void attend_head(const AttendParams& p, const Context<Rows>& ctx,
                 [[maybe_unused]] const int16_t* q16, [[maybe_unused]] v16 q16_scale) {
  const Dequant<Rows> deq_k = ctx.deq_k, deq_v = ctx.deq_v;
  const float* tab_k = ctx.ck.c;
  const float* tab_v = ctx.cv.c;
  const int32_t dk = p.dk, dv = p.dv, G = p.group;
  float* ktile = p.scratch;               // (kKeyChunk, dk)
  float* vtile = ktile + kKeyChunk * dk;  // (kKeyChunk, dv)
  float* probs = vtile + kKeyChunk * dv;  // (n_rows, kKeyChunk)
  const int32_t n_tokens = p.n_rows / G;
  // Keys any row can see: the last query sees the most under causal, the first the oldest under
  // a window. Chunks outside [lo, hi] are skipped without reading them.
  int64_t hi = p.kv_end - 1, lo = p.kv_begin;
  if (p.causal) hi = std::min<int64_t>(hi, p.q_pos0 + n_tokens - 1);
  if (p.window > 0) lo = std::max<int64_t>(lo, p.q_pos0 - p.window + 1);
  if (hi < lo) return;
  // One past the last key any row of this call can see in the range that follows (prefetching).
  const int64_t pf_limit = p.causal ? p.q_pos0 + n_tokens : std::numeric_limits<int64_t>::max();
  const int64_t first = p.kv_begin + (lo - p.kv_begin) / kKeyChunk * kKeyChunk;

  const int64_t k_row_bytes = static_cast<int64_t>(row_size(p.k_type, p.dk_row));
  const int64_t v_row_bytes = static_cast<int64_t>(row_size(p.v_type, p.dv_row));
  for (int64_t c0 = first; c0 <= hi; c0 += kKeyChunk) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(kKeyChunk, p.kv_end - c0));
    // Rows of one head are strided (other heads sit between them in a token-major cache), which
    // the hardware prefetchers follow poorly: ask for the next chunk's K and V rows while this
    // one is dequantized.
    // (Paged: the next chunk starts a block, at a multiple of kKeyChunk, or there is none.)
    const int64_t pf_end = std::min(std::max(p.kv_end, p.prefetch_end), pf_limit);
    const Rows krows = chunk_rows<Rows>(p, p.k, p.k_stride, p.k_pages, p.k_page_stride, c0, c0 + n);
    const Rows vrows = chunk_rows<Rows>(p, p.v, p.v_stride, p.v_pages, p.v_page_stride, c0, c0 + n);
    Prefetch<Rows> pf;
    pf.n = static_cast<int32_t>(std::clamp<int64_t>(pf_end - (c0 + n), 0, kKeyChunk));
    if (pf.n > 0) {
      pf.k =
          chunk_rows<Rows>(p, p.k, p.k_stride, p.k_pages, p.k_page_stride, c0 + n, c0 + n + pf.n);
      pf.v =
          chunk_rows<Rows>(p, p.v, p.v_stride, p.v_pages, p.v_page_stride, c0 + n, c0 + n + pf.n);
      pf.k_bytes = k_row_bytes;
      pf.v_bytes = v_row_bytes;
    }
#if defined(__AVX512VNNI__)
    if (ctx.score_vnni) {
      ctx.score_vnni(q16, q16_scale, dk, krows, n, ctx.tk, probs, pf);
    } else
#endif
        if (ctx.score) {
      ctx.score(p.q, dk, krows, n, tab_k, probs, pf);
    } else {
      // K tile layout (dk / 16, kKeyChunk, 16), see score_rows.
      deq_k(krows, n, dk, ktile, kLanes, kKeyChunk * kLanes, tab_k, pf);
      // Keys past the range score against zeros and are then hidden; zeroing keeps them finite.
      if (n < kKeyChunk)
        for (int32_t d = 0; d < dk; d += kLanes)
          std::memset(ktile + (d * kKeyChunk + n * kLanes), 0,
                      sizeof(float) * (kKeyChunk - n) * kLanes);

      // Raw scores of every row: rows in groups of 4 (then 2, 1) share each K vector they load.
      {
        int32_t r = 0;
        for (; r + 4 <= p.n_rows; r += 4)
          score_rows<4>(p.q + static_cast<int64_t>(r) * dk, dk, ktile, probs + r * kKeyChunk);
        for (; r + 2 <= p.n_rows; r += 2)
          score_rows<2>(p.q + static_cast<int64_t>(r) * dk, dk, ktile, probs + r * kKeyChunk);
        for (; r < p.n_rows; ++r)
          score_rows<1>(p.q + static_cast<int64_t>(r) * dk, dk, ktile, probs + r * kKeyChunk);
      }
    }

    bool any_visible = false;
    for (int32_t r = 0; r < p.n_rows; ++r) {
      const int32_t i = r / G;
      const int64_t pq = p.q_pos0 + i;
      const int64_t vis_hi = std::min<int64_t>(p.causal ? pq : p.kv_end - 1, c0 + n - 1);
      const int64_t vis_lo = p.window > 0 ? std::max<int64_t>(c0, pq - p.window + 1) : c0;
      float* pr = probs + static_cast<int64_t>(r) * kKeyChunk;
      if (vis_hi < vis_lo) {
        std::memset(pr, 0, sizeof(float) * kKeyChunk);
        continue;
      }
      v16 s[kChunkVecs];
      for (int32_t c = 0; c < kChunkVecs; ++c) s[c] = load(pr + c * kLanes);
      float* sv = reinterpret_cast<float*>(s);
      if (p.softcap > 0.0f)
        for (int32_t j = 0; j < kKeyChunk; ++j) sv[j] = p.softcap * std::tanh(sv[j] / p.softcap);
      if (p.alibi) {
        const float slope = p.alibi[r % G];
        for (int32_t j = 0; j < kKeyChunk; ++j) sv[j] += slope * static_cast<float>(c0 + j - pq);
      }
      if (p.mask) {
        const float* mrow = p.mask + i * p.mask_stride + c0;
        // -inf hides the key whatever its K row holds (NaN + -inf is NaN and would poison the
        // maximum).
        for (int32_t j = 0; j < n; ++j) sv[j] = mrow[j] == kNegInf ? kNegInf : sv[j] + mrow[j];
      }
      // Hide keys outside [vis_lo, vis_hi] (causal, window, past the range).
      const int32_t jlo = static_cast<int32_t>(vis_lo - c0);
      const int32_t jhi = static_cast<int32_t>(vis_hi - c0);
      v16 mx = splat(kNegInf);
      const bool whole = jlo == 0 && jhi == kKeyChunk - 1;  // decode: every chunk but the last
      for (int32_t c = 0; c < kChunkVecs; ++c) {
        if (!whole) {
#if KVFLASH_V16_SPLIT
          const v16i pos = iota16() + c * kLanes;
#else
          v16i pos;
          for (int k = 0; k < kLanes; ++k) pos[k] = c * kLanes + k;
#endif
          s[c] = select((pos < jlo) | (pos > jhi), splat(kNegInf), s[c]);
        }
        mx = vmax(mx, s[c]);
      }
      const float row_max = hmax(mx);
      if (row_max == kNegInf) {  // every visible key masked to -inf
        std::memset(pr, 0, sizeof(float) * kKeyChunk);
        continue;
      }
      any_visible = true;
      const float m_new = std::max(p.m[r], row_max);
      // exp_neg (the kernel's own exp) rather than a libm call; 1 exactly when the max holds.
      const float alpha = p.m[r] == kNegInf ? 0.0f
                          : m_new == p.m[r] ? 1.0f
                                            : lane0(exp_neg(splat(p.m[r] - m_new)));
      v16 lsum = {};
      for (int32_t c = 0; c < kChunkVecs; ++c) {
        const v16 e = exp_neg(s[c] - m_new);
        store(pr + c * kLanes, e);
        lsum += e;
      }
      p.l[r] = p.l[r] * alpha + hsum(lsum);
      p.m[r] = m_new;
      if (alpha != 1.0f) {
        float* o = p.o + static_cast<int64_t>(r) * dv;
        for (int32_t d = 0; d < dv; d += kLanes) store(o + d, load(o + d) * alpha);
      }
    }
    if (!any_visible) continue;

#if defined(__AVX512VNNI__)
    if (ctx.pv_vnni) {  // weights of 0 stay 0 in int16 there (see pv_turbo_vnni)
      ctx.pv_vnni(probs, vrows, n, dv, ctx.tv, p.o, reinterpret_cast<int16_t*>(vtile));
      continue;
    }
#endif
    if (!ctx.pv) deq_v(vrows, n, dv, vtile, dv, kLanes, tab_v, Prefetch<Rows>{});
    pv_chunk(p, ctx, probs, vtile, vrows, n);
  }
}

// n bytes from src to dst in 64- and 16-byte pieces, the last piece overlapping the one before it
// (fixed-size copies the compiler makes vector moves of; rows are mostly 34-2048 bytes).
inline void copy_row(uint8_t* dst, const uint8_t* src, int64_t n) {
  if (n < 16) {
    std::memcpy(dst, src, static_cast<size_t>(n));
    return;
  }
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) std::memcpy(dst + i, src + i, 64);
  for (; i + 16 <= n; i += 16) std::memcpy(dst + i, src + i, 16);
  if (i < n) std::memcpy(dst + n - 16, src + n - 16, 16);
}

// A paged call whose pages are not a multiple of kRowGroup keys (attend_gather_bytes): chunk by
// chunk, each head's K and V rows of the chunk are copied from their pages into the staging rows
// (one row after the other), prefetching the head's rows of the next chunk, and the chunk is
// attended there as a contiguous one.
template <typename ForHead, typename Q16, typename Q16Scale>
void attend_gathered(const AttendParams& p, const Context<StridedRows>& ctx, AttendParams& h,
                     const ForHead& for_head, uint8_t* scratch_end, const Q16& q16_of,
                     const Q16Scale& q16_scale_of) {
  const int64_t kr = static_cast<int64_t>(row_size(p.k_type, p.dk_row));
  const int64_t vr = static_cast<int64_t>(row_size(p.v_type, p.dv_row));
  uint8_t* const sk = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch_end) + 63) /
                                                 64 * 64);  // kLanes floats of slack
  uint8_t* const sv = sk + kKeyChunk * kr;
  // Calls fn(key, K row, V row) for keys [lo, hi) of a head, page run by page run (one table
  // read and division per run).
  const auto for_rows = [&](int64_t lo, int64_t hi, int32_t head, const auto& fn) {
    for (int64_t r0 = lo; r0 < hi;) {
      const int64_t r1 = std::min(hi, (r0 / p.page_size + 1) * p.page_size);
      const uint8_t* kp = paged_row(p.k + head * p.k_head_stride, p.k_pages, p.k_page_stride,
                                    p.page_size, p.k_stride, r0);
      const uint8_t* vp = paged_row(p.v + head * p.v_head_stride, p.v_pages, p.v_page_stride,
                                    p.page_size, p.v_stride, r0);
      for (int64_t key = r0; key < r1; ++key, kp += p.k_stride, vp += p.v_stride) fn(key, kp, vp);
      r0 = r1;
    }
  };
  h.k_stride = kr;
  h.v_stride = vr;
  h.page_size = 0;  // the staging rows are contiguous
  for (int64_t c = p.kv_begin; c < p.kv_end; c += kKeyChunk) {
    const int64_t c_end = std::min(p.kv_end, c + kKeyChunk);
    const int64_t next_end = std::min(p.kv_end, c_end + kKeyChunk);
    for (int32_t head = 0; head < p.n_heads; ++head) {
      // The next chunk's rows of this head, prefetched one pair per copied pair (a burst of
      // prefetches fills the miss queue and stalls).
      const uint8_t* next_k[kKeyChunk];
      const uint8_t* next_v[kKeyChunk];
      int32_t n_next = 0;
      for_rows(c_end, next_end, head, [&](int64_t, const uint8_t* kp, const uint8_t* vp) {
        next_k[n_next] = kp;
        next_v[n_next++] = vp;
      });
      for_rows(c, c_end, head, [&](int64_t key, const uint8_t* kp, const uint8_t* vp) {
        const auto j = static_cast<int32_t>(key - c);
        copy_row(sk + j * kr, kp, kr);
        copy_row(sv + j * vr, vp, vr);
        if (j < n_next) {
          prefetch_lines(next_k[j], kr);
          prefetch_lines(next_v[j], vr);
        }
      });
      // Key c + j at staging row j: the base an integer below the staging rows (never read).
      h.k = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(sk) -
                                             static_cast<uintptr_t>(c * kr));
      h.v = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(sv) -
                                             static_cast<uintptr_t>(c * vr));
      h.kv_begin = c;
      h.kv_end = c_end;
      h.prefetch_end = c_end;  // the staging rows are in cache; the next chunk is prefetched above
      for_head(head);
      attend_head(h, ctx, q16_of(head), load(q16_scale_of(head)));
    }
  }
}

}  // namespace

// One call with the chunks' rows in one form (attend picks it).
template <class Rows>
void attend_rows(const AttendParams& p) {
  const Context<Rows> ctx(p);
  // Per KV head, after the tiles and probabilities in scratch: int16 query rows and one scale
  // vector (attend_scratch_floats), made once per call for the VNNI turbo scores.
  float* const head_scratch =
      p.scratch + int64_t{kKeyChunk} * (p.dk + p.dv) + int64_t{p.n_rows} * kKeyChunk;
  const int64_t head_floats = (int64_t{p.n_rows} * p.dk + 1) / 2 + kLanes;
  auto q16_of = [&](int32_t head) {
    return reinterpret_cast<int16_t*>(head_scratch + head * head_floats);
  };
  auto q16_scale_of = [&](int32_t head) {
    return head_scratch + head * head_floats + (head_floats - kLanes);
  };
#if defined(__AVX512VNNI__)
  if (ctx.score_vnni)
    for (int32_t head = 0; head < p.n_heads; ++head) {
      const float* q = p.q + head * p.head_rows * p.dk;
      const float cs = ctx.tk.scale;
      const v16 sc = p.n_rows == 1   ? quantize_q16<1>(q, p.dk, q16_of(head), cs)
                     : p.n_rows == 2 ? quantize_q16<2>(q, p.dk, q16_of(head), cs)
                                     : quantize_q16<4>(q, p.dk, q16_of(head), cs);
      store(q16_scale_of(head), sc);
    }
#endif
  AttendParams h = p;
  h.prefetch_end = p.kv_end;
  const int64_t rows = p.head_rows;
  const auto for_head = [&](int32_t head) {  // the head's query rows, state and slopes
    h.q = p.q + head * rows * p.dk;
    h.o = p.o + head * rows * p.dv;
    h.m = p.m + head * rows;
    h.l = p.l + head * rows;
    h.alibi = p.alibi ? p.alibi + int64_t{head} * p.group : nullptr;
  };
  if constexpr (std::is_same_v<Rows, StridedRows>) {
    if (attend_gather_bytes(p.k_type, p.v_type, p.dk_row, p.dv_row, p.page_size) > 0) {
      attend_gathered(p, ctx, h, for_head,
                      reinterpret_cast<uint8_t*>(head_scratch + int64_t{p.n_heads} * head_floats),
                      q16_of, q16_scale_of);
      return;
    }
  }
  // Block by block, every head: consecutive tokens of all heads are read together. Paged: each
  // chunk's rows found in the page table (chunk_rows; blocks start at multiples of kKeyChunk, the
  // scheduler's splits being whole blocks).
  assert(p.page_size == 0 || p.kv_begin % kKeyChunk == 0);
  for (int64_t b = p.kv_begin; b < p.kv_end; b += p.block_keys) {
    h.kv_begin = b;
    h.kv_end = std::min(p.kv_end, b + p.block_keys);
    for (int32_t head = 0; head < p.n_heads; ++head) {
      h.k = p.k + head * p.k_head_stride;
      h.v = p.v + head * p.v_head_stride;
      for_head(head);
      attend_head(h, ctx, q16_of(head), load(q16_scale_of(head)));
    }
  }
}

void attend(const AttendParams& p) {
  // Pages shorter than a chunk, of a multiple of kRowGroup keys: grouped rows; everything else
  // (contiguous, pages of a multiple of kKeyChunk, gathered pages) strided, as a plain loop.
  if (p.page_size > 0 && p.page_size % kKeyChunk != 0 && p.page_size % kRowGroup == 0)
    attend_rows<GroupedRows>(p);
  else
    attend_rows<StridedRows>(p);
}

}  // namespace kvflash::cpu::KVFLASH_ISA_NS
