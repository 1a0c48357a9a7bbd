// Tensor-core and transcendental building blocks of the CUDA kernels, as thin wrappers of their
// PTX: a one-instruction exp2, f16/bf16 packing, the m8n8 transpose, ldmatrix, mma.sync m16n8k16
// (f16 or bf16, f32 accumulation) and m16n8k32 (int8, s32 accumulation).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace kvflash::cuda {

// 2^x for the online softmax (x <= 0 there): one MUFU.EX2. exp2f wraps it in a range fix-up
// (a compare and two conditional multiplies) for results below 2^-126, which a probability that
// small does not need; -inf gives 0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
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

// Keys that some row of an MMA tile weighs, as an AND mask for their V operands. p_or is the OR
// of the lane's P words (f16 or bf16 pairs of keys 2t, 2t + 1, or 2t + 8, 2t + 9, for each of its
// rows); the lanes of the same t (lane bits 2..4) hold the tile's other rows. Each half of the
// result is 0xFFFF where a row weighs that key and 0 where every row gives it weight +-0: a key
// hidden from every row (masked, outside the window) then enters O.P.V as 0 * 0, not 0 * V,
// whatever its V holds (NaN or inf in an engine's unused cells would make O NaN). For finite V the
// result is unchanged: those products were zeros already.
__device__ __forceinline__ uint32_t weighed_keys(uint32_t p_or) {
  p_or |= __shfl_xor_sync(0xffffffffu, p_or, 4);
  p_or |= __shfl_xor_sync(0xffffffffu, p_or, 8);
  p_or |= __shfl_xor_sync(0xffffffffu, p_or, 16);
  return ((p_or & 0x00007fffu) != 0u ? 0x0000ffffu : 0u) |
         ((p_or & 0x7fff0000u) != 0u ? 0xffff0000u : 0u);
}

// The transpose of an 8x8 matrix of 16-bit values held as one m8n8 fragment (lane 4r + c holds
// row r, columns 2c, 2c + 1): afterwards the lane holds row r of the transpose.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// Four 8x8 matrices of 16-bit values from shared memory, lane l giving the address of row l % 8
// of matrix l / 8 (16 contiguous bytes): r[i] is matrix i as an m8n8 fragment (lane 4r + c: row r,
// columns 2c, 2c + 1), or with .trans its transpose. Row-major Q / K tiles give mma.m16n8k16's
// A and (K as N x K) B operands directly, V's rows (keys x dims) its B operands transposed.
__device__ __forceinline__ uint4 ldmatrix_x4(uint32_t addr) {
  uint4 r;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(addr));
  return r;
}
__device__ __forceinline__ uint4 ldmatrix_x4_trans(uint32_t addr) {
  uint4 r;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(addr));
  return r;
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

// D = A.B (+ D) for one m16n8k32 tile of int8 values, s32 accumulation.
__device__ __forceinline__ void imma16832(int (&d)[4], const uint4& a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

}  // namespace kvflash::cuda
