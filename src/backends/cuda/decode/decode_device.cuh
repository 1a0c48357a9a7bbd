// Device building blocks of the CUDA decode kernel: async copies, the m16n8k16 MMA, the
// per-type decoders from raw shared-memory rows into f16/bf16 fragments (K as the B operand of
// Q.K^T, V as the B operand of P.V; see decode_formats.hpp for the dim orders), the turbo
// codebook lookups and rotations, and the finalization of one output row.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cstdint>

#include "backends/cuda/decode/decode_formats.hpp"
#include "backends/cuda/decode/decode_params.hpp"
#include "kvflash/turbo.hpp"

namespace kvflash::cuda::decode {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kNegInf = -__builtin_huge_valf();

// ---------------------------------------------------------------------------------------------
// Small device helpers

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async of `size` (4, 8 or 16) bytes, `src_bytes` of them read (the rest zero-filled).
// n / f.d for 0 <= n < 2^31 (see FastDiv).
__device__ __forceinline__ int fdiv(int n, const FastDiv& f) {
  return static_cast<int>((__umulhi(static_cast<uint32_t>(n), f.mul) + static_cast<uint32_t>(n)) >>
                          f.shr);
}

template <int kSize>
__device__ __forceinline__ void cp_async(void* dst, const void* src, int src_bytes) {
  if constexpr (kSize == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "n"(kSize), "r"(src_bytes));
  }
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// 2^x for the online softmax (x <= 0 there): one MUFU.EX2. exp2f wraps it in a range fix-up
// (a compare and two conditional multiplies) for results below 2^-126, which a probability that
// small does not need; -inf gives 0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// (x & kMask) | bits as one LOP3. Written in C++ with both constants as immediates it compiles to
// two (a LOP3 encodes one immediate); `bits` comes in a register (opaque_u32) instead.
template <uint32_t kMask>
__device__ __forceinline__ uint32_t and_or(uint32_t x, uint32_t bits) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(x), "n"(kMask), "r"(bits));
  return r;
}
// A constant the compiler keeps in a register rather than folding into each use.
__device__ __forceinline__ uint32_t opaque_u32(uint32_t v) {
  uint32_t r;
  asm("mov.b32 %0, %1;" : "=r"(r) : "r"(v));
  return r;
}

template <bool kBf16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kBf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// D += A.B for one m16n8k16 tile, f32 accumulation.
template <bool kBf16>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint4& a, uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
  }
}

// Integer codes to f16 without conversions: a byte b placed under exponent bits 0x64 reads as
// the half 1024 + b, so (half2 - bias) * scale is the value, rounded once like d * q in f32.
__device__ __forceinline__ uint32_t h2_sub_mul(uint32_t x, uint32_t bias, uint32_t scale) {
  const __half2 r = __hmul2(
      __hsub2(*reinterpret_cast<const __half2*>(&x), *reinterpret_cast<const __half2*>(&bias)),
      *reinterpret_cast<const __half2*>(&scale));
  return *reinterpret_cast<const uint32_t*>(&r);
}
__device__ __forceinline__ uint32_t lop_and_xor(uint32_t x, uint32_t mask, uint32_t c) {
  return (x & mask) ^ c;  // one LOP3
}
inline constexpr uint32_t kH2_1152 = 0x64806480u;  // half2(1152, 1152): 1024 + 128 (int8 bias)
inline constexpr uint32_t kH2_1032 = 0x64086408u;  // half2(1032, 1032): 1024 + 8 (q4_0 bias)
// High nibbles without a shift: a nibble at bits 4-7 under exponent bits 0x54 reads as the half
// 64 + n (the exponent of 64 makes a mantissa step of 16 worth 1), so the bias is 64 + 8.
inline constexpr uint32_t kH2_72 = 0x54805480u;  // half2(72, 72)

// B fragments of K for 32-dim block b, thread t (the k_dim order), for q8_0 and q4_0.
template <KvType T>
__device__ __forceinline__ uint4 k_frag_quant(const uint8_t* row, int b, int t) {
  uint4 r;
  if constexpr (T == KvType::q8_0) {
    const uint8_t* blk = row + 34 * b;
    const uint32_t d = load_u16(blk);
    const uint32_t d2 = d | (d << 16);
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      // bytes q_2k, q_2k+1 -> [q ^ 0x80, 0x64, q' ^ 0x80, 0x64] = half2(1152 + q, 1152 + q')
      const uint32_t x = __byte_perm(load_u16(blk + 2 + 8 * t + 2 * k), 0u, 0x4140u);
      w[k] = h2_sub_mul(lop_and_xor(x, 0x00ff00ffu, 0x64806480u), kH2_1152, d2);
    }
    r = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    const uint8_t* blk = row + 18 * b;
    const uint32_t d = load_u16(blk);
    const uint32_t d2 = d | (d << 16);
    const uint32_t q = __byte_perm(load_u16(blk + 2 + 4 * t), load_u16(blk + 4 + 4 * t), 0x5410u);
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

// P.V B operands for 16 contiguous dims (d0, 16-aligned within a 32-block) of four q8_0 key rows:
// out[i] = {half2(V[k0][d0+i], V[k1][d0+i]), half2(V[k2][d0+i], V[k3][d0+i])}.
template <typename F>
__device__ __forceinline__ void v_frags_q8_0_16(const uint8_t* const (&vrow)[4], int d0, F&& use) {
  uint32_t w[4][8];
  uint32_t dd[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint8_t* blk = vrow[kk] + 34 * (d0 >> 5);
    dd[kk] = load_u16(blk);
    const uint8_t* qs = blk + 2 + (d0 & 31);
#pragma unroll
    for (int m = 0; m < 8; ++m) w[kk][m] = load_u16(qs + 2 * m);
  }
  const uint32_t d01 = __byte_perm(dd[0], dd[1], 0x5410u), d23 = __byte_perm(dd[2], dd[3], 0x5410u);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint32_t sel = (i & 1) ? 0x7531u : 0x5410u;  // byte i of each u16 pair at bytes 0, 2
    const uint32_t x01 = __byte_perm(w[0][i >> 1], w[1][i >> 1], sel);
    const uint32_t x23 = __byte_perm(w[2][i >> 1], w[3][i >> 1], sel);
    use(i, h2_sub_mul(lop_and_xor(x01, 0x00ff00ffu, 0x64806480u), kH2_1152, d01),
        h2_sub_mul(lop_and_xor(x23, 0x00ff00ffu, 0x64806480u), kH2_1152, d23));
  }
}

// P.V B operands of lane n's 16 dims (v_dim16) of four q4_0 key rows in 128-dim slice `slice`:
// use(i, b0, b1) with b0 = half2(V[k0][dim], V[k1][dim]), b1 the same of k2, k3, dim =
// v_dim16(q4_0, n, i). The lane's 8 bytes of its block are 4 u16 loads per row (16 dims, both
// nibbles of each byte), one byte permute per word pairs two rows.
template <typename F>
__device__ __forceinline__ void v_frags_q4_0_16(const uint8_t* const (&vrow)[4], int n, int slice,
                                                F&& use) {
  uint32_t w[4][4], dd[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint8_t* blk = vrow[kk] + 18 * (4 * slice + (n >> 1));
    dd[kk] = load_u16(blk);
    const uint8_t* qs = blk + 2 + 8 * (n & 1);
#pragma unroll
    for (int m = 0; m < 4; ++m) w[kk][m] = load_u16(qs + 2 * m);
  }
  const uint32_t d01 = __byte_perm(dd[0], dd[1], 0x5410u), d23 = __byte_perm(dd[2], dd[3], 0x5410u);
  const uint32_t e_lo = opaque_u32(0x64006400u), e_hi = opaque_u32(0x54005400u);
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    // [k0 byte 2m, k0 byte 2m+1, k1 byte 2m, k1 byte 2m+1]; >> 8: byte 2m+1 of each in place
    const uint32_t x01 = __byte_perm(w[0][m], w[1][m], 0x5410u);
    const uint32_t x23 = __byte_perm(w[2][m], w[3][m], 0x5410u);
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

// Turbo centroids as byte tables for prmt lookups: lo[k] / hi[k] hold the low / high bytes of
// the f16 centroids 4k .. 4k+3, so that one byte permute looks up four codes at once.
template <KvType T>
struct TurboLut {
  uint32_t lo[4], hi[4];

  __device__ __forceinline__ void init();

  // Codes c0..c3 in the selector's nibbles -> {half2(v(c0), v(c1)), half2(v(c2), v(c3))}.
  __device__ __forceinline__ uint2 lookup4(uint32_t s) const {
    uint32_t l, h;
    if constexpr (T == KvType::turbo2) {
      l = __byte_perm(lo[0], 0u, s);
      h = __byte_perm(hi[0], 0u, s);
    } else if constexpr (T == KvType::turbo3) {
      l = __byte_perm(lo[0], lo[1], s);
      h = __byte_perm(hi[0], hi[1], s);
    } else {
      // 16 entries: look up in both halves with the low 3 bits, then pick per byte by bit 3
      // (a sign-replicating prmt turns bit 3 of each nibble into a 0x00 / 0xff byte mask).
      const uint32_t s7 = s & 0x7777u;
      uint32_t m;
      asm("prmt.b32 %0, %1, %2, %3;"
          : "=r"(m)
          : "r"(0x8000u), "r"(0u), "r"(((s >> 3) & 0x1111u) | 0x8888u));
      l = (__byte_perm(lo[0], lo[1], s7) & ~m) | (__byte_perm(lo[2], lo[3], s7) & m);
      h = (__byte_perm(hi[0], hi[1], s7) & ~m) | (__byte_perm(hi[2], hi[3], s7) & m);
    }
    return make_uint2(__byte_perm(l, h, 0x5140u), __byte_perm(l, h, 0x7362u));
  }
};

__device__ __forceinline__ uint32_t h2_mul(uint32_t a, uint32_t b) {
  const __half2 r =
      __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// B fragments of K for 32-dim block b, thread t (the k_dim order), for the turbo types.
template <KvType T>
__device__ __forceinline__ uint4 k_frag_turbo(const uint8_t* row, int b, int t,
                                              const TurboLut<T>& lut) {
  constexpr int kGroupBytes = traits(T).block_bytes;
  const uint8_t* grp = row + kGroupBytes * (b >> 2);
  const uint32_t n = load_u16(grp);
  const uint32_t n2 = n | (n << 16);
  uint2 r0, r1;
  if constexpr (T == KvType::turbo4) {
    const int off = 2 + 16 * (b & 3) + 4 * t;
    const uint32_t w = __byte_perm(load_u16(grp + off), load_u16(grp + off + 2), 0x5410u);
    r0 = lut.lookup4((w & 0x0f0fu) | ((w >> 12) & 0xf0f0u));         // low nibbles 0, 2, 1, 3
    r1 = lut.lookup4(((w >> 4) & 0x0f0fu) | ((w >> 16) & 0xf0f0u));  // high nibbles
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
  return make_uint4(h2_mul(r0.x, n2), h2_mul(r0.y, n2), h2_mul(r1.x, n2), h2_mul(r1.y, n2));
}

// P.V B operands of lane n's 16 dims (v_dim16) of four turbo key rows in group `grp_i` (a
// 128-dim slice): use(i, b0, b1) as v_frags_q4_0_16. turbo2/3: the lane's 4 plane bytes (2 u16
// loads per row; turbo3: the 4 bytes of their high bits, 2 more) give all 16 of its codes, where
// 16 consecutive dims took 16 plane bytes and 16 high-bit bytes; turbo4: 8 bytes, both nibbles.
template <KvType T, typename F>
__device__ __forceinline__ void v_frags_turbo16_packed(const uint8_t* const (&vrow)[4], int n,
                                                       int grp_i, const TurboLut<T>& lut, F&& use) {
  constexpr int kGroupBytes = traits(T).block_bytes;
  constexpr int kWords = T == KvType::turbo4 ? 4 : 2;
  uint32_t w[4][kWords], hq[4][2], nn[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint8_t* grp = vrow[kk] + kGroupBytes * grp_i;
    nn[kk] = load_u16(grp);
    const uint8_t* qs = grp + 2 + (T == KvType::turbo4 ? 8 * n : 4 * n);
#pragma unroll
    for (int m = 0; m < kWords; ++m) w[kk][m] = load_u16(qs + 2 * m);
#pragma unroll
    for (int m = 0; m < 2; ++m)  // high bits of plane bytes 4n + 2m, +1: qh bytes (4n + 2m) & 15
      hq[kk][m] = T == KvType::turbo3 ? load_u16(grp + 34 + ((4 * n + 2 * m) & 15)) : 0u;
  }
  const uint32_t n01 = __byte_perm(nn[0], nn[1], 0x5410u), n23 = __byte_perm(nn[2], nn[3], 0x5410u);
  if constexpr (T == KvType::turbo4) {
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      // nibbles [k0 b, k1 b, k0 b', k1 b'] of bytes b = 8n + 2m, b' = b + 1: low (dims b, b'),
      // then high (dims b + 64, b' + 64)
      const uint32_t s01_lo = (w[0][m] & 0x0f0fu) | ((w[1][m] << 4) & 0xf0f0u);
      const uint32_t s23_lo = (w[2][m] & 0x0f0fu) | ((w[3][m] << 4) & 0xf0f0u);
      const uint32_t s01_hi = ((w[0][m] >> 4) & 0x0f0fu) | (w[1][m] & 0xf0f0u);
      const uint32_t s23_hi = ((w[2][m] >> 4) & 0x0f0fu) | (w[3][m] & 0xf0f0u);
      const uint2 a = lut.lookup4(s01_lo), c = lut.lookup4(s23_lo);
      use(4 * m + 0, h2_mul(a.x, n01), h2_mul(c.x, n23));
      use(4 * m + 1, h2_mul(a.y, n01), h2_mul(c.y, n23));
      const uint2 ah = lut.lookup4(s01_hi), ch = lut.lookup4(s23_hi);
      use(4 * m + 2, h2_mul(ah.x, n01), h2_mul(ch.x, n23));
      use(4 * m + 3, h2_mul(ah.y, n01), h2_mul(ch.y, n23));
    }
  } else {
    const int hs = n >> 2;  // the high bit of plane byte b's code in plane y: bit (b >> 4) + 2y
#pragma unroll
    for (int y = 0; y < 4; ++y) {
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        // codes of plane y of bytes b = 4n + 2m and b + 1 of rows k0, k1: [k0 b, k1 b, k0 b+1,
        // k1 b+1] (dims b + 32y, b + 1 + 32y)
        uint32_t s01 = ((w[0][m] >> (2 * y)) & 0x0303u) | (((w[1][m] >> (2 * y)) << 4) & 0x3030u);
        uint32_t s23 = ((w[2][m] >> (2 * y)) & 0x0303u) | (((w[3][m] >> (2 * y)) << 4) & 0x3030u);
        if constexpr (T == KvType::turbo3) {
          const int sh = hs + 2 * y;
          s01 |= (((hq[0][m] >> sh) & 0x0101u) << 2) | (((hq[1][m] >> sh) & 0x0101u) << 6);
          s23 |= (((hq[2][m] >> sh) & 0x0101u) << 2) | (((hq[3][m] >> sh) & 0x0101u) << 6);
        }
        const uint2 a = lut.lookup4(s01), c = lut.lookup4(s23);
        use(4 * y + 2 * m, h2_mul(a.x, n01), h2_mul(c.x, n23));
        use(4 * y + 2 * m + 1, h2_mul(a.y, n01), h2_mul(c.y, n23));
      }
    }
  }
}

// The unnormalized Walsh-Hadamard transform H of one 128-value group in shared memory, in
// place, by one warp (two butterflies per lane per stage); synchronized before and after.
__device__ __forceinline__ void fwht128(float* x, int lane) {
#pragma unroll
  for (int h = 1; h < 128; h <<= 1) {
    __syncwarp();
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int p = lane + 32 * k;  // pair index 0..63
      const int i = (p / h) * 2 * h + (p % h);
      const float a = x[i], b = x[i + h];
      x[i] = a + b;
      x[i + h] = a - b;
    }
  }
  __syncwarp();
}

__device__ __forceinline__ bool turbo_sign_negative(const uint32_t* sign_words, int i) {
  return (sign_words[i >> 5] >> (i & 31)) & 1u;
}

// In-place inverse turbo rotation R^T y = s . (H y) / sqrt(128) of one group, by one warp.
__device__ __forceinline__ void inverse_rotate_group(float* x, int lane,
                                                     const uint32_t* sign_words) {
  fwht128(x, lane);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = lane + 32 * k;
    x[i] *= turbo_sign_negative(sign_words, i) ? -kTurboInvSqrt128 : kTurboInvSqrt128;
  }
  __syncwarp();
}

// In-place forward turbo rotation R x = H (s . x) / sqrt(128) of one group, by one warp.
__device__ __forceinline__ void forward_rotate_group(float* x, int lane,
                                                     const uint32_t* sign_words) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = lane + 32 * k;
    if (turbo_sign_negative(sign_words, i)) x[i] = -x[i];
  }
  fwht128(x, lane);
#pragma unroll
  for (int k = 0; k < 4; ++k) x[lane + 32 * k] *= kTurboInvSqrt128;
  __syncwarp();
}

template <KvType T>
__device__ __forceinline__ float centroid(int i) {
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

__device__ __forceinline__ uint32_t sign_word(int i) {
  constexpr uint32_t w[4] = {turbo_tables::kTurboSignWords[0], turbo_tables::kTurboSignWords[1],
                             turbo_tables::kTurboSignWords[2], turbo_tables::kTurboSignWords[3]};
  return w[i & 3];
}

template <KvType T>
__device__ __forceinline__ void TurboLut<T>::init() {
#pragma unroll
  for (int k = 0; k < 4; ++k) lo[k] = hi[k] = 0u;
  if constexpr (is_rotated(T)) {
    // Evaluated at compile time: traits() is host code, usable in device code only as a constant.
    constexpr int kCodes = 1 << traits(T).code_bits;
#pragma unroll
    for (int e = 0; e < kCodes; ++e) {
      const uint32_t hb = __half_as_ushort(__float2half_rn(centroid<T>(e)));
      lo[e >> 2] |= (hb & 0xffu) << (8 * (e & 3));
      hi[e >> 2] |= (hb >> 8) << (8 * (e & 3));
    }
  }
}

// Finalizes one row (sinks, lse), in shared memory o[0..dvc), rotated back for turbo V by the
// calling warp, and writes dv outputs. All 32 lanes of the warp call it.
template <KvType VT>
__device__ void finalize_row(const DecodeParams& p, float* o, float m, float l, int64_t out_row,
                             int qhead, int lane, const uint32_t* sign_words) {
  if constexpr (is_rotated(VT)) {
    for (int g = 0; g < p.dvc; g += 128) inverse_rotate_group(o + g, lane, sign_words);
  }
  float w = 1.0f;
  if (p.has_sinks) {
    const float sink = p.sinks[qhead];
    const float mm = fmaxf(m, sink);
    w = m == kNegInf ? 0.0f : exp2f((m - mm) * kLog2e);
    l = l * w + exp2f((sink - mm) * kLog2e);
    m = mm;
  }
  const float inv = l == 0.0f ? 0.0f : w / l;
  float* out = p.out + out_row * p.dv;
  for (int d = lane; d < p.dv; d += 32) out[d] = o[d] * inv;
  if (p.lse != nullptr && lane == 0) p.lse[out_row] = l == 0.0f ? kNegInf : m + logf(l);
}

}  // namespace kvflash::cuda::decode
