// The turbo types' rotation on the GPU (Q rotated in a prologue, outputs rotated back when
// finalized): the Walsh-Hadamard transform of a 128-value group by one warp and the fixed sign
// flips, the rotation of the host's kvflash/turbo.hpp.
#pragma once

#include <cstdint>

#include "kvflash/turbo.hpp"

namespace kvflash::cuda {

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

__device__ __forceinline__ uint32_t sign_word(int i) {
  constexpr uint32_t w[4] = {turbo_tables::kTurboSignWords[0], turbo_tables::kTurboSignWords[1],
                             turbo_tables::kTurboSignWords[2], turbo_tables::kTurboSignWords[3]};
  return w[i & 3];
}

}  // namespace kvflash::cuda
