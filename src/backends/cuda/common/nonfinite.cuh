// NaN and inf V values in MMA tiles whose rows see different keys. P.V on tensor cores multiplies
// a tile of query rows at once: a row that does not see a key gives it weight 0, and 0 * NaN or
// 0 * inf is NaN, so a NaN or inf in the V row of a key hidden from that row (a causal future key
// of an earlier query, a key masked for some queries) would reach it. Where a tile has such a
// key, cuda.prefill takes its non-finite values as 0 in the MMA (finite_or_zero) and adds each to
// the accumulators of the rows that see the key (prefill_hidden_keys.cuh, nonfinite_v_rows).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace kvflash::cuda {

// The all-ones exponent of f16 (bf16: kBf16) in one half.
template <bool kBf16>
inline constexpr uint32_t kExpBits = kBf16 ? 0x7f80u : 0x7c00u;

// 0xFFFF in each half of x (two f16 or bf16) that holds a NaN or inf, 0 in the others.
template <bool kBf16>
__device__ __forceinline__ uint32_t nonfinite_halves(uint32_t x) {
  constexpr uint32_t e = kExpBits<kBf16>;
  return ((x & e) == e ? 0x0000ffffu : 0u) | ((x & (e << 16)) == (e << 16) ? 0xffff0000u : 0u);
}

// x with its NaN and inf halves replaced by +0.
template <bool kBf16>
__device__ __forceinline__ uint32_t finite_or_zero(uint32_t x) {
  return x & ~nonfinite_halves<kBf16>(x);
}

// Two f16 (bf16: kBf16) values as floats (+-inf and NaN as such).
template <bool kBf16>
__device__ __forceinline__ float2 unpack2(uint32_t x) {
  if constexpr (kBf16) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&x));
  }
}

}  // namespace kvflash::cuda
