// The fragment decoders of the CUDA decode kernel, for the device and, with the same code, for the
// host (the intrinsics they use have host equivalents below), so that a CPU test checks every
// operand they build against the row readers of common/kv_values.hpp: K rows into the B operands
// of Q.K^T (k_frag_quant, k_frag_turbo: the k_dim order), V rows into the B operands of P.V
// (v_frags_q8_0_16: 16 consecutive dims; v_frags_q4_0_16, v_frags_turbo16_packed: the v_dim16
// order). Values come out as half2 bit patterns: (code - bias) * scale in f16, or for turbo the
// codebook value alone in f16: the kernel applies a turbo row's norm (one per 128-dim group) to
// the f32 scores (K) or to P (V), a few multiplies per 16 keys where scaling every value took 32
// (turbo_norm reads it).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "backends/cuda/common/kv_values.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/turbo.hpp"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <vector_types.h>
#endif

namespace kvflash::cuda {

// Four and two 32-bit registers: CUDA's uint4 / uint2 where CUDA is, the same layout elsewhere.
#if defined(__CUDACC__)
using frag4 = ::uint4;
using frag2 = ::uint2;
KVFLASH_HD frag4 make_frag4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  return make_uint4(x, y, z, w);
}
KVFLASH_HD frag2 make_frag2(uint32_t x, uint32_t y) {
  return make_uint2(x, y);
}
#else
struct frag4 {
  uint32_t x, y, z, w;
};
struct frag2 {
  uint32_t x, y;
};
inline frag4 make_frag4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  return {x, y, z, w};
}
inline frag2 make_frag2(uint32_t x, uint32_t y) {
  return {x, y};
}
#endif

// __byte_perm: byte k of the result is byte (s >> 4k) & 7 of the 8 bytes {b, a} (a the low word).
KVFLASH_HD uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, s);
#else
  const uint64_t x = (uint64_t{b} << 32) | a;
  uint32_t r = 0;
  for (int k = 0; k < 4; ++k)
    r |= static_cast<uint32_t>((x >> (8 * ((s >> (4 * k)) & 7u))) & 0xffu) << (8 * k);
  return r;
#endif
}
// byte_perm for a selector whose nibbles have bit 3 clear and whose bits 16-31 may hold anything:
// PTX prmt reads bits 0-15 only, where __byte_perm first ANDs the selector with 0x7777 (one more
// instruction when the compiler cannot see that the bits are clear).
KVFLASH_HD uint32_t prmt_raw(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
  return r;
#else
  return byte_perm(a, b, s);
#endif
}
// (x & kMask) | bits as one LOP3. Written in C++ with both constants as immediates it compiles to
// two (a LOP3 encodes one immediate); `bits` comes in a register (opaque_u32) instead.
template <uint32_t kMask>
KVFLASH_HD uint32_t and_or(uint32_t x, uint32_t bits) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(x), "n"(kMask), "r"(bits));
  return r;
#else
  return (x & kMask) | bits;
#endif
}
// A constant the compiler keeps in a register rather than folding into each use.
KVFLASH_HD uint32_t opaque_u32(uint32_t v) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("mov.b32 %0, %1;" : "=r"(r) : "r"(v));
  return r;
#else
  return v;
#endif
}

// (a * b) / 2^32 + c in 32 bits (mad.hi.u32): one IMAD.HI, which issues to the FMA pipe and not
// to the integer (ALU) pipe that the codebook lookups fill. With b = m * 2^(32 - r) it is
// ((a * m) >> r) + c for a * m < 2^(32 + r): a shift right, a multiply and an add off that pipe.
KVFLASH_HD uint32_t mad_hi(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("mad.hi.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
#else
  return static_cast<uint32_t>((uint64_t{a} * b) >> 32) + c;
#endif
}

// Integer codes to f16 without conversions: a byte b placed under exponent bits 0x64 reads as
// the half 1024 + b, so (half2 - bias) * scale is the value, rounded once like d * q in f32.
KVFLASH_HD uint32_t h2_sub_mul(uint32_t x, uint32_t bias, uint32_t scale) {
#if defined(__CUDA_ARCH__)
  const __half2 r = __hmul2(
      __hsub2(*reinterpret_cast<const __half2*>(&x), *reinterpret_cast<const __half2*>(&bias)),
      *reinterpret_cast<const __half2*>(&scale));
  return *reinterpret_cast<const uint32_t*>(&r);
#else
  uint32_t r = 0;
  for (int k = 0; k < 2; ++k) {
    const auto h = [&](uint32_t v) { return half_to_float(static_cast<uint16_t>(v >> (16 * k))); };
    const uint16_t diff = fp32_to_fp16(static_cast<float>(double{h(x)} - double{h(bias)}));
    r |= uint32_t{fp32_to_fp16(half_to_float(diff) * h(scale))} << (16 * k);
  }
  return r;
#endif
}
KVFLASH_HD uint32_t h2_mul(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  const __half2 r =
      __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
#else
  uint32_t r = 0;
  for (int k = 0; k < 2; ++k) {
    const float p = half_to_float(static_cast<uint16_t>(a >> (16 * k))) *
                    half_to_float(static_cast<uint16_t>(b >> (16 * k)));
    r |= uint32_t{fp32_to_fp16(p)} << (16 * k);
  }
  return r;
#endif
}
KVFLASH_HD uint32_t lop_and_xor(uint32_t x, uint32_t mask, uint32_t c) {
  return (x & mask) ^ c;  // one LOP3
}
inline constexpr uint32_t kH2_1152 = 0x64806480u;  // half2(1152, 1152): 1024 + 128 (int8 bias)
inline constexpr uint32_t kH2_1032 = 0x64086408u;  // half2(1032, 1032): 1024 + 8 (q4_0 bias)
// High nibbles without a shift: a nibble at bits 4-7 under exponent bits 0x54 reads as the half
// 64 + n (the exponent of 64 makes a mantissa step of 16 worth 1), so the bias is 64 + 8.
inline constexpr uint32_t kH2_72 = 0x54805480u;  // half2(72, 72)

// B fragments of K for 32-dim block b, thread t (the k_dim order), for q8_0 and q4_0.
template <KvType T>
KVFLASH_HD frag4 k_frag_quant(const uint8_t* row, int b, int t) {
  frag4 r;
  if constexpr (T == KvType::q8_0) {
    const uint8_t* blk = row + 34 * b;
    const uint32_t d = load_u16(blk);
    const uint32_t d2 = d | (d << 16);
    uint32_t w[4];
    KVFLASH_UNROLL
    for (int k = 0; k < 4; ++k) {
      // bytes q_2k, q_2k+1 -> [q ^ 0x80, 0x64, q' ^ 0x80, 0x64] = half2(1152 + q, 1152 + q')
      const uint32_t x = byte_perm(load_u16(blk + 2 + 8 * t + 2 * k), 0u, 0x4140u);
      w[k] = h2_sub_mul(lop_and_xor(x, 0x00ff00ffu, 0x64806480u), kH2_1152, d2);
    }
    r = make_frag4(w[0], w[1], w[2], w[3]);
  } else {
    const uint8_t* blk = row + 18 * b;
    const uint32_t d = load_u16(blk);
    const uint32_t d2 = d | (d << 16);
    const uint32_t q = byte_perm(load_u16(blk + 2 + 4 * t), load_u16(blk + 4 + 4 * t), 0x5410u);
    const uint32_t q8 = q >> 8;
    const uint32_t e_lo = opaque_u32(0x64006400u), e_hi = opaque_u32(0x54005400u);
    // nibbles of bytes 0 and 2 (and 1 and 3), low then high: the order 0, 2, 1, 3 of k_dim
    r.x = h2_sub_mul(and_or<0x000f000fu>(q, e_lo), kH2_1032, d2);
    r.y = h2_sub_mul(and_or<0x000f000fu>(q8, e_lo), kH2_1032, d2);
    r.z = h2_sub_mul(and_or<0x00f000f0u>(q, e_hi), kH2_72, d2);
    r.w = h2_sub_mul(and_or<0x00f000f0u>(q8, e_hi), kH2_72, d2);
  }
  return r;
}

// The same operands as k_frag_quant before the bias and scale: q8_0 half2(1152 + q) (1024 + the
// code + 128) in all four; q4_0 half2(1032 + n - 8) = 1024 + n in x, y (low nibbles, k_dim values
// 0-3) and 64 + n in z, w (high nibbles, values 4-7). All exact in f16. The kernel folds the
// bias into the MMA's accumulator (minus the bias times the sum of the query's values, per
// 16-dim chunk) and applies the block's scale, k_scale, to the f32 result.
template <KvType T>
KVFLASH_HD frag4 k_frag_raw(const uint8_t* row, int b, int t) {
  frag4 r;
  if constexpr (T == KvType::q8_0) {
    const uint8_t* blk = row + 34 * b;
    uint32_t w[4];
    KVFLASH_UNROLL
    for (int k = 0; k < 4; ++k)
      w[k] = lop_and_xor(byte_perm(load_u16(blk + 2 + 8 * t + 2 * k), 0u, 0x4140u), 0x00ff00ffu,
                         0x64806480u);
    r = make_frag4(w[0], w[1], w[2], w[3]);
  } else {
    const uint8_t* blk = row + 18 * b;
    const uint32_t q = byte_perm(load_u16(blk + 2 + 4 * t), load_u16(blk + 4 + 4 * t), 0x5410u);
    const uint32_t q8 = q >> 8;
    const uint32_t e_lo = opaque_u32(0x64006400u), e_hi = opaque_u32(0x54005400u);
    r.x = and_or<0x000f000fu>(q, e_lo);
    r.y = and_or<0x000f000fu>(q8, e_lo);
    r.z = and_or<0x00f000f0u>(q, e_hi);
    r.w = and_or<0x00f000f0u>(q8, e_hi);
  }
  return r;
}
// The biases of k_frag_raw's values for the 16-dim chunks of a 32-dim block: chunk 0 (values
// 0-3 of k_dim) and chunk 1 (values 4-7).
template <KvType T>
constexpr float k_raw_bias(int chunk) {
  return T == KvType::q8_0 ? 1152.0f : (chunk == 0 ? 1032.0f : 72.0f);
}
// The f16 bits of block b's scale.
template <KvType T>
KVFLASH_HD uint32_t k_scale(const uint8_t* row, int b) {
  return load_u16(row + (T == KvType::q8_0 ? 34 : 18) * b);
}

// q8_0 / q4_0 K on int8 tensor cores (mma m16n8k32 .s8: the one-token kernel's Q.K^T, keys as
// M): the A operand of 32-dim block b for thread t of one key row, x for A columns 4t .. 4t + 3
// and y for columns 16 + 4t .. 16 + 4t + 3, holds the dims s8_dim<T>(t, 0 .. 3) and
// s8_dim<T>(t, 4 .. 7) of the block; Q's B operand words pair the same dims.
// - q8_0: the raw codes of dims 8t .. 8t + 7 as they are stored (the k_dim order of the f16 path,
//   so both take the same Q dims per lane): two u16 loads and a byte permute per word.
// - q4_0: bytes 4t .. 4t + 3 hold dims 4t .. 4t + 3 (low nibbles) and 16 + 4t .. 16 + 4t + 3
//   (high nibbles), the MMA's own column order. Each code c goes to the high nibble of its byte
//   with bit 3 flipped: as int8 that is exactly 16 (c - 8), the dequantized value over d / 16,
//   with no bias term and no sign extension (one shift and two LOP3 per 8 codes); the kernel's
//   row step carries the 1/16 (kS8Unit).
template <KvType T>
KVFLASH_HD int s8_dim(int t, int j) {
  if constexpr (T == KvType::q8_0) return 8 * t + j;
  return j < 4 ? 4 * t + j : 16 + 4 * t + (j - 4);
}
template <KvType T>
inline constexpr float kS8Unit = T == KvType::q8_0 ? 1.0f : 1.0f / 16.0f;
template <KvType T>
KVFLASH_HD frag2 k_frag_s8(const uint8_t* row, int b, int t) {
  if constexpr (T == KvType::q8_0) {
    const uint8_t* q = row + 34 * b + 2 + 8 * t;
    return make_frag2(byte_perm(load_u16(q), load_u16(q + 2), 0x5410u),
                      byte_perm(load_u16(q + 4), load_u16(q + 6), 0x5410u));
  } else {
    static_assert(T == KvType::q4_0, "int8 K operands: q8_0 or q4_0");
    const uint8_t* q = row + 18 * b + 2 + 4 * t;
    const uint32_t w = byte_perm(load_u16(q), load_u16(q + 2), 0x5410u);
    return make_frag2(lop_and_xor(w << 4, 0xf0f0f0f0u, 0x80808080u),
                      lop_and_xor(w, 0xf0f0f0f0u, 0x80808080u));
  }
}
// A query value x, already divided by its row's step (|x| <= kQS8Steps), as two int8 planes:
// n = round(x) = 128 hi + lo with |hi| <= 127 and |lo| <= 64, so sum(k * n) = 128 sum(k * hi) +
// sum(k * lo) takes two IMMAs. 15 bits per value: |x - n| <= 1/2 of a step of amax / 16256,
// finer than f16's 11-bit mantissa at the row's larger values.
inline constexpr float kQS8Steps = 16256.0f;  // 127 x 128
struct QS8 {
  int hi, lo;
};
KVFLASH_HD QS8 q_s8_split(float x) {
  const float c = fminf(fmaxf(x, -kQS8Steps), kQS8Steps);
  const int n = static_cast<int>(rintf(c));
  const int hi = static_cast<int>(rintf(static_cast<float>(n) * (1.0f / 128.0f)));
  return {hi, n - 128 * hi};
}
// Four int8 values as one operand word, value k in byte k.
KVFLASH_HD uint32_t s8_word(int v0, int v1, int v2, int v3) {
  return (static_cast<uint32_t>(v0) & 0xffu) | ((static_cast<uint32_t>(v1) & 0xffu) << 8) |
         ((static_cast<uint32_t>(v2) & 0xffu) << 16) | ((static_cast<uint32_t>(v3) & 0xffu) << 24);
}

// Two fp8 codes (bytes 0 and 1 of x) as half2 (byte 0 the low half), exactly: through the
// conversions Ada and Hopper have for them (cvt f16x2 from e4m3x2 / e5m2x2); elsewhere E5M2 as
// the top byte of an fp16 (one PRMT) and E4M3 through fp8_to_float.
template <KvType T>
KVFLASH_HD uint32_t fp8x2_h2(uint32_t x) {
  static_assert(is_fp8(T));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t r;
  if constexpr (T == KvType::fp8_e4m3)
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(static_cast<uint16_t>(x)));
  else
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(r) : "h"(static_cast<uint16_t>(x)));
  return r;
#else
  if constexpr (T == KvType::fp8_e5m2) {
    return byte_perm(x, 0u, 0x1404u);  // [0, b0, 0, b1]
  } else {
#if defined(__CUDA_ARCH__)
    return uint32_t{__half_as_ushort(__float2half_rn(fp8_to_float<T>(x & 0xffu)))} |
           (uint32_t{__half_as_ushort(__float2half_rn(fp8_to_float<T>((x >> 8) & 0xffu)))} << 16);
#else
    return uint32_t{fp32_to_fp16(fp8_to_float<T>(x & 0xffu))} |
           (uint32_t{fp32_to_fp16(fp8_to_float<T>((x >> 8) & 0xffu))} << 16);
#endif
  }
#endif
}

// B fragments of fp8 K for 32-dim block b, thread t: the eight codes of dims 32b + 8t .. + 7 (the
// float types' k_dim order; the rows sit 16-byte aligned, copy_mode's rule for float types).
template <KvType T>
KVFLASH_HD frag4 k_frag_fp8(const uint8_t* row, int b, int t) {
  const uint32_t* p = reinterpret_cast<const uint32_t*>(row + 32 * b + 8 * t);
  const uint32_t lo = p[0], hi = p[1];
  return make_frag4(fp8x2_h2<T>(lo), fp8x2_h2<T>(lo >> 16), fp8x2_h2<T>(hi), fp8x2_h2<T>(hi >> 16));
}

// P.V B operands for 16 contiguous dims (d0, a multiple of 16) of four fp8 key rows, as
// v_frags_q8_0_16: out[i] = {half2(V[k0][d0+i], V[k1][d0+i]), half2(V[k2][d0+i], V[k3][d0+i])}.
template <KvType T, typename F>
KVFLASH_HD void v_frags_fp8_16(const uint8_t* const (&vrow)[4], int d0, F&& use) {
  // Four dims at a time (one 4-byte word of each row): the registers of 16 values, not 64.
  KVFLASH_UNROLL
  for (int m = 0; m < 4; ++m) {
    uint32_t w[4];
    KVFLASH_UNROLL
    for (int kk = 0; kk < 4; ++kk) w[kk] = reinterpret_cast<const uint32_t*>(vrow[kk] + d0)[m];
    KVFLASH_UNROLL
    for (int e = 0; e < 4; ++e) {
      const uint32_t sel = ((4u + e) << 4) | e;  // [k0's byte e, k1's byte e]
      use(4 * m + e, fp8x2_h2<T>(byte_perm(w[0], w[1], sel)),
          fp8x2_h2<T>(byte_perm(w[2], w[3], sel)));
    }
  }
}

// P.V B operands for 16 contiguous dims (d0, 16-aligned within a 32-block) of four q8_0 key rows:
// out[i] = {half2(V[k0][d0+i], V[k1][d0+i]), half2(V[k2][d0+i], V[k3][d0+i])}.
template <typename F>
KVFLASH_HD void v_frags_q8_0_16(const uint8_t* const (&vrow)[4], int d0, F&& use) {
  uint32_t w[4][8];
  uint32_t dd[4];
  KVFLASH_UNROLL
  for (int kk = 0; kk < 4; ++kk) {
    const uint8_t* blk = vrow[kk] + 34 * (d0 >> 5);
    dd[kk] = load_u16(blk);
    const uint8_t* qs = blk + 2 + (d0 & 31);
    KVFLASH_UNROLL
    for (int m = 0; m < 8; ++m) w[kk][m] = load_u16(qs + 2 * m);
  }
  const uint32_t d01 = byte_perm(dd[0], dd[1], 0x5410u), d23 = byte_perm(dd[2], dd[3], 0x5410u);
  KVFLASH_UNROLL
  for (int i = 0; i < 16; ++i) {
    const uint32_t sel = (i & 1) ? 0x7531u : 0x5410u;  // byte i of each u16 pair at bytes 0, 2
    const uint32_t x01 = byte_perm(w[0][i >> 1], w[1][i >> 1], sel);
    const uint32_t x23 = byte_perm(w[2][i >> 1], w[3][i >> 1], sel);
    use(i, h2_sub_mul(lop_and_xor(x01, 0x00ff00ffu, 0x64806480u), kH2_1152, d01),
        h2_sub_mul(lop_and_xor(x23, 0x00ff00ffu, 0x64806480u), kH2_1152, d23));
  }
}

// P.V B operands of lane n's 16 dims (v_dim16) of four q4_0 key rows in 128-dim slice `slice`:
// use(i, b0, b1) with b0 = half2(V[k0][dim], V[k1][dim]), b1 the same of k2, k3, dim =
// v_dim16(q4_0, n, i). The lane's 8 bytes of its block are 4 u16 loads per row (16 dims, both
// nibbles of each byte), one byte permute per word pairs two rows.
template <typename F>
KVFLASH_HD void v_frags_q4_0_16(const uint8_t* const (&vrow)[4], int n, int slice, F&& use) {
  uint32_t w[4][4], dd[4];
  KVFLASH_UNROLL
  for (int kk = 0; kk < 4; ++kk) {
    const uint8_t* blk = vrow[kk] + 18 * (4 * slice + (n >> 1));
    dd[kk] = load_u16(blk);
    const uint8_t* qs = blk + 2 + 8 * (n & 1);
    KVFLASH_UNROLL
    for (int m = 0; m < 4; ++m) w[kk][m] = load_u16(qs + 2 * m);
  }
  const uint32_t d01 = byte_perm(dd[0], dd[1], 0x5410u), d23 = byte_perm(dd[2], dd[3], 0x5410u);
  const uint32_t e_lo = opaque_u32(0x64006400u), e_hi = opaque_u32(0x54005400u);
  KVFLASH_UNROLL
  for (int m = 0; m < 4; ++m) {
    // [k0 byte 2m, k0 byte 2m+1, k1 byte 2m, k1 byte 2m+1]; >> 8: byte 2m+1 of each in place
    const uint32_t x01 = byte_perm(w[0][m], w[1][m], 0x5410u);
    const uint32_t x23 = byte_perm(w[2][m], w[3][m], 0x5410u);
    const uint32_t y01 = x01 >> 8, y23 = x23 >> 8;
    use(4 * m + 0, h2_sub_mul(and_or<0x000f000fu>(x01, e_lo), kH2_1032, d01),
        h2_sub_mul(and_or<0x000f000fu>(x23, e_lo), kH2_1032, d23));
    use(4 * m + 1, h2_sub_mul(and_or<0x000f000fu>(y01, e_lo), kH2_1032, d01),
        h2_sub_mul(and_or<0x000f000fu>(y23, e_lo), kH2_1032, d23));
    use(4 * m + 2, h2_sub_mul(and_or<0x00f000f0u>(x01, e_hi), kH2_72, d01),
        h2_sub_mul(and_or<0x00f000f0u>(x23, e_hi), kH2_72, d23));
    use(4 * m + 3, h2_sub_mul(and_or<0x00f000f0u>(y01, e_hi), kH2_72, d01),
        h2_sub_mul(and_or<0x00f000f0u>(y23, e_hi), kH2_72, d23));
  }
}

template <KvType T>
KVFLASH_HD float centroid(int i) {
  // Local constexpr copies: host constants are not visible in device code, their values are.
  if constexpr (T == KvType::turbo2) {
    constexpr std::array<float, 4> c = kTurbo2Centroids;
    return c[i & 3];
  } else if constexpr (T == KvType::turbo3) {
    constexpr std::array<float, 8> c = kTurbo3Centroids;
    return c[i & 7];
  } else if constexpr (T == KvType::turbo4) {
    constexpr std::array<float, 16> c = kTurbo4Centroids;
    return c[i & 15];
  } else {
    return 0.0f;
  }
}

// Turbo centroids as byte tables for prmt lookups: lo[k] / hi[k] hold the low / high bytes of
// the f16 centroids 4k .. 4k+3 (turbo4: of the positive ones, 8 + 4k .. 8 + 4k + 3; lookup4
// makes the negative ones from them), so that one byte permute looks up four codes at once.
template <KvType T>
struct TurboLut {
  uint32_t lo[4], hi[4];

  KVFLASH_HD void init();

  // Codes c0..c3 in the selector's nibbles -> {half2(v(c0), v(c1)), half2(v(c2), v(c3))}.
  KVFLASH_HD frag2 lookup4(uint32_t s) const {
    uint32_t l, h;
    if constexpr (T == KvType::turbo2) {
      l = byte_perm(lo[0], 0u, s);
      h = byte_perm(hi[0], 0u, s);
    } else if constexpr (T == KvType::turbo3) {
      l = byte_perm(lo[0], lo[1], s);
      h = byte_perm(hi[0], hi[1], s);
    } else {
      // 16 entries, symmetric (c[15 - i] = -c[i], exactly): lo[0..1] / hi[0..1] hold the
      // magnitudes c[8 + j]; code c reads magnitude j = (c & 7) ^ (c < 8 ? 7 : 0), negative
      // below 8 (the sign bit ORed into the high byte). Two table lookups and the sign's byte
      // permute where both halves of the table took four lookups and a byte mask: 10 operations
      // per four codes instead of 12, and four table registers instead of eight.
      const uint32_t up = (s >> 3) & 0x1111u;         // per code: 1 from code 8 up
      const uint32_t j = ~(s ^ (up * 7u)) & 0x7777u;  // one LOP3
      l = byte_perm(lo[0], lo[1], j);
      h = byte_perm(hi[0], hi[1], j) | byte_perm(0x80u, 0u, up);  // 0x80 below code 8
    }
    return halves(l, h);
  }

  // turbo3: lookup4 for a selector whose bits 16-31 may hold anything (its nibbles have bit 3
  // clear), as mad_hi leaves them.
  KVFLASH_HD frag2 lookup4_raw(uint32_t s) const {
    return halves(prmt_raw(lo[0], lo[1], s), prmt_raw(hi[0], hi[1], s));
  }

  // Four looked-up low bytes l and high bytes h -> the f16 pairs {v0, v1}, {v2, v3}.
  KVFLASH_HD static frag2 halves(uint32_t l, uint32_t h) {
    return make_frag2(byte_perm(l, h, 0x5140u), byte_perm(l, h, 0x7362u));
  }
};

// The f16 bits of a turbo row's norm for 128-dim group grp_i.
template <KvType T>
KVFLASH_HD uint32_t turbo_norm(const uint8_t* row, int grp_i) {
  constexpr int kGroupBytes = traits(T).block_bytes;  // a constant: traits() is host code
  return load_u16(row + kGroupBytes * grp_i);
}

// B fragments of K for 32-dim block b, thread t (the k_dim order), for the turbo types: codebook
// values (times the group's norm, turbo_norm, they are the row's values).
template <KvType T>
KVFLASH_HD frag4 k_frag_turbo(const uint8_t* row, int b, int t, const TurboLut<T>& lut) {
  constexpr int kGroupBytes = traits(T).block_bytes;
  const uint8_t* grp = row + kGroupBytes * (b >> 2);
  frag2 r0, r1;
  if constexpr (T == KvType::turbo4) {
    const int off = 2 + 16 * (b & 3) + 4 * t;
    const uint32_t w = byte_perm(load_u16(grp + off), load_u16(grp + off + 2), 0x5410u);
    // Selectors x + (x >> 12) of the masked nibbles, one mad_hi each (FMA pipe): low nibbles of
    // bytes 0, 2, 1, 3, then the high ones. (lookup4 masks what it reads of bits 0-15.)
    const uint32_t x0 = w & 0x0f0f0f0fu, x1 = (w >> 4) & 0x0f0f0f0fu;
    r0 = lut.lookup4(mad_hi(x0, 1u << 20, x0));
    r1 = lut.lookup4(mad_hi(x1, 1u << 20, x1));
  } else {
    const int i0 = 8 * (b & 3) + 2 * t;
    const uint32_t q = load_u16(grp + 2 + i0);
    uint32_t s0 = q & 0x3333u, s1 = (q >> 2) & 0x3333u;  // planes 0, 2 and 1, 3 of bytes 0, 1
    if constexpr (T == KvType::turbo3) {
      const uint32_t h = uint32_t{load_u16(grp + 34 + (i0 & 15))} >> (i0 >> 4);
      s0 |= (h & 0x1111u) << 2;
      s1 |= ((h >> 2) & 0x1111u) << 2;
    }
    r0 = lut.lookup4(s0);
    r1 = lut.lookup4(s1);
  }
  return make_frag4(r0.x, r0.y, r1.x, r1.y);
}

// A K fragment (k_frag_quant, k_frag_turbo: values j = 0..7 of 32-dim block b for thread t, at
// dims k_dim(T, b, t, j)) as pairs of consecutive dims: word k holds dims dim[k] and dim[k] + 1
// (low half first). Runs of k_frag_run_words<T>() words sit at consecutive dims (dim[k + 1] =
// dim[k] + 2 inside a run), so a row of an f16 operand tile takes them in 16-byte (q8_0 and the
// float types), 8-byte (q4_0, turbo4) or 4-byte (turbo2, turbo3) stores: the prefill kernel's
// tile decode, with the same decoders as decode's fragments.
template <KvType T>
constexpr int k_frag_run_words() {
  if constexpr (T == KvType::q4_0 || T == KvType::turbo4) return 2;
  if constexpr (T == KvType::turbo2 || T == KvType::turbo3) return 1;
  return 4;
}
template <KvType T>
KVFLASH_HD void k_frag_dim_words(const frag4& f, int b, int t, int (&dim)[4], uint32_t (&w)[4]) {
  const int d0 = k_dim(T, b, t, 0);
  if constexpr (T == KvType::q4_0 || T == KvType::turbo4) {
    // Values 0-3 are dims d0 + 0, 2, 1, 3 (x: 0 and 2, y: 1 and 3), values 4-7 the same at d4.
    const int d4 = k_dim(T, b, t, 4);
    dim[0] = d0, dim[1] = d0 + 2, dim[2] = d4, dim[3] = d4 + 2;
    w[0] = byte_perm(f.x, f.y, 0x5410u), w[1] = byte_perm(f.x, f.y, 0x7632u);
    w[2] = byte_perm(f.z, f.w, 0x5410u), w[3] = byte_perm(f.z, f.w, 0x7632u);
  } else if constexpr (T == KvType::turbo2 || T == KvType::turbo3) {
    // x: dims d0, d0 + 64; y: d0 + 1, d0 + 65; z: d0 + 32, d0 + 96; w: d0 + 33, d0 + 97.
    dim[0] = d0, dim[1] = d0 + 64, dim[2] = d0 + 32, dim[3] = d0 + 96;
    w[0] = byte_perm(f.x, f.y, 0x5410u), w[1] = byte_perm(f.x, f.y, 0x7632u);
    w[2] = byte_perm(f.z, f.w, 0x5410u), w[3] = byte_perm(f.z, f.w, 0x7632u);
  } else {
    dim[0] = d0, dim[1] = d0 + 2, dim[2] = d0 + 4, dim[3] = d0 + 6;
    w[0] = f.x, w[1] = f.y, w[2] = f.z, w[3] = f.w;
  }
}

// P.V B operands of lane n's 16 dims (v_dim16) of four turbo key rows in group `grp_i` (a
// 128-dim slice): use(i, b0, b1) as v_frags_q4_0_16, codebook values (times each row's norm,
// turbo_norm, they are the rows' values). turbo2/3: the lane's 4 plane bytes (2 u16
// loads per row; turbo3: the 4 bytes of their high bits, 2 more) give all 16 of its codes, where
// 16 consecutive dims took 16 plane bytes and 16 high-bit bytes; turbo4: 8 bytes, both nibbles.
template <KvType T, typename F>
KVFLASH_HD void v_frags_turbo16_packed(const uint8_t* const (&vrow)[4], int n, int grp_i,
                                       const TurboLut<T>& lut, F&& use) {
  constexpr int kGroupBytes = traits(T).block_bytes;
  constexpr int kWords = T == KvType::turbo4 ? 4 : 2;
  uint32_t w[4][kWords], hq[4][2];
  KVFLASH_UNROLL
  for (int kk = 0; kk < 4; ++kk) {
    const uint8_t* grp = vrow[kk] + kGroupBytes * grp_i;
    const uint8_t* qs = grp + 2 + (T == KvType::turbo4 ? 8 * n : 4 * n);
    KVFLASH_UNROLL
    for (int m = 0; m < kWords; ++m) w[kk][m] = load_u16(qs + 2 * m);
    KVFLASH_UNROLL
    for (int m = 0; m < 2; ++m)  // high bits of plane bytes 4n + 2m, +1: qh bytes (4n + 2m) & 15
      hq[kk][m] = T == KvType::turbo3 ? load_u16(grp + 34 + ((4 * n + 2 * m) & 15)) : 0u;
  }
  if constexpr (T == KvType::turbo4) {
    KVFLASH_UNROLL
    for (int m = 0; m < 4; ++m) {
      // nibbles [k0 b, k1 b, k0 b', k1 b'] of bytes b = 8n + 2m, b' = b + 1: low (dims b, b'),
      // then high (dims b + 64, b' + 64)
      const uint32_t s01_lo = (w[0][m] & 0x0f0fu) | ((w[1][m] << 4) & 0xf0f0u);
      const uint32_t s23_lo = (w[2][m] & 0x0f0fu) | ((w[3][m] << 4) & 0xf0f0u);
      const uint32_t s01_hi = ((w[0][m] >> 4) & 0x0f0fu) | (w[1][m] & 0xf0f0u);
      const uint32_t s23_hi = ((w[2][m] >> 4) & 0x0f0fu) | (w[3][m] & 0xf0f0u);
      const frag2 a = lut.lookup4(s01_lo), c = lut.lookup4(s23_lo);
      use(4 * m + 0, a.x, c.x);
      use(4 * m + 1, a.y, c.y);
      const frag2 ah = lut.lookup4(s01_hi), ch = lut.lookup4(s23_hi);
      use(4 * m + 2, ah.x, ch.x);
      use(4 * m + 3, ah.y, ch.y);
    }
  } else if constexpr (T == KvType::turbo2) {
    KVFLASH_UNROLL
    for (int y = 0; y < 4; ++y) {
      KVFLASH_UNROLL
      for (int m = 0; m < 2; ++m) {
        // codes of plane y of bytes b = 4n + 2m and b + 1 of rows k0, k1: [k0 b, k1 b, k0 b+1,
        // k1 b+1] (dims b + 32y, b + 1 + 32y)
        const uint32_t s01 =
            ((w[0][m] >> (2 * y)) & 0x0303u) | (((w[1][m] >> (2 * y)) << 4) & 0x3030u);
        const uint32_t s23 =
            ((w[2][m] >> (2 * y)) & 0x0303u) | (((w[3][m] >> (2 * y)) << 4) & 0x3030u);
        const frag2 a = lut.lookup4(s01), c = lut.lookup4(s23);
        use(4 * y + 2 * m, a.x, c.x);
        use(4 * y + 2 * m + 1, a.y, c.y);
      }
    }
  } else {
    // turbo3: per pair of rows (k0, k1 and k2, k3) and word m, the two rows' plane bytes
    // b = 4n + 2m, b + 1 as one word x: [k0 b, k0 b+1, k1 b, k1 b+1]; plane y's codes are bits
    // 2y, 2y + 1 of each byte, and each code's high bit (bit (b >> 4) + 2y of high-bit byte
    // b & 15) goes to bit 2 of its byte. The selector [k0 b, k1 b, k0 b+1, k1 b+1] takes nibbles 0
    // and 2 of the masked word and nibbles 4 and 6 (shifted down by 12): one select-LOP3 (21% fewer
    // PTX instructions in the step's V part than building each selector from the four rows' words).
    const int hs = n >> 2;
    KVFLASH_UNROLL
    for (int m = 0; m < 2; ++m) {
      uint32_t wp[2], hp[2];
      KVFLASH_UNROLL
      for (int pr = 0; pr < 2; ++pr) {
        wp[pr] = byte_perm(w[2 * pr][m], w[2 * pr + 1][m], 0x5410u);
        hp[pr] = byte_perm(hq[2 * pr][m], hq[2 * pr + 1][m], 0x5410u) >> hs;
      }
      KVFLASH_UNROLL
      for (int y = 0; y < 4; ++y) {
        uint32_t sel[2];
        KVFLASH_UNROLL
        for (int pr = 0; pr < 2; ++pr) {
          const uint32_t h = y == 0 ? hp[pr] << 2 : hp[pr] >> (2 * y - 2);
          const uint32_t x = ((wp[pr] >> (2 * y)) & 0x03030303u) | (h & 0x04040404u);
          sel[pr] = mad_hi(x, 1u << 20, x);  // x + (x >> 12): nibbles 0, 4, 2, 6 of x (bits 0-15)
        }
        const frag2 a = lut.lookup4_raw(sel[0]), c = lut.lookup4_raw(sel[1]);
        use(4 * y + 2 * m, a.x, c.x);
        use(4 * y + 2 * m + 1, a.y, c.y);
      }
    }
  }
}

template <KvType T>
KVFLASH_HD void TurboLut<T>::init() {
  KVFLASH_UNROLL
  for (int k = 0; k < 4; ++k) lo[k] = hi[k] = 0u;
  if constexpr (is_rotated(T)) {
    // Evaluated at compile time: traits() is host code, usable in device code only as a constant.
    // turbo4 (lookup4): only the eight positive centroids, c[8 + j] at entry j.
    constexpr int kCodes = 1 << traits(T).code_bits;
    constexpr int kFirst = T == KvType::turbo4 ? 8 : 0;
    KVFLASH_UNROLL
    for (int e = 0; e < kCodes - kFirst; ++e) {
#if defined(__CUDA_ARCH__)
      const uint32_t hb = __half_as_ushort(__float2half_rn(centroid<T>(kFirst + e)));
#else
      const uint32_t hb = fp32_to_fp16(centroid<T>(kFirst + e));
#endif
      lo[e >> 2] |= (hb & 0xffu) << (8 * (e & 3));
      hi[e >> 2] |= (hb >> 8) << (8 * (e & 3));
    }
  }
}

}  // namespace kvflash::cuda
