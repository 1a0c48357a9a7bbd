// Division by a divisor fixed per launch, on the GPU in three instructions (FastDiv), the magic
// number found on the host; shared by every CUDA kernel family.
#pragma once

#include <cstdint>

namespace kvflash::cuda {

// n / d and n % d for 0 <= n < 2^31 with one multiply-high, an add and a shift, the magic number
// found on the host (fast_div below; the round-up method of Granlund and Montgomery):
// q = (umulhi(n, mul) + n) >> shr with shr = ceil(log2 d), mul = floor(2^32 (2^shr - d) / d) + 1.
// The kernels' divisors (head dims, GQA group, splits, tile sizes) are constant per launch, and
// an integer division on the GPU is a ~20-instruction dependent sequence: the decode prologue and
// epilogue did about fifty per thread.
struct FastDiv {
  int32_t d = 1;
  uint32_t mul = 1;
  uint32_t shr = 0;
};
constexpr FastDiv fast_div(int32_t d) {
  FastDiv f;
  f.d = d;
  uint32_t s = 0;
  while ((uint64_t{1} << s) < static_cast<uint64_t>(d)) ++s;
  f.shr = s;
  f.mul = static_cast<uint32_t>(
      ((uint64_t{1} << 32) * ((uint64_t{1} << s) - static_cast<uint64_t>(d))) /
          static_cast<uint64_t>(d) +
      1);
  return f;
}
// The quotient as the kernels compute it (host copy for tests; the device uses __umulhi).
constexpr int32_t fast_div_host(int32_t n, FastDiv f) {
  const uint32_t hi = static_cast<uint32_t>((uint64_t{static_cast<uint32_t>(n)} * f.mul) >> 32);
  return static_cast<int32_t>((hi + static_cast<uint32_t>(n)) >> f.shr);
}

#if defined(__CUDACC__)
// n / f.d for 0 <= n < 2^31 (see FastDiv).
__device__ __forceinline__ int fdiv(int n, const FastDiv& f) {
  return static_cast<int>((__umulhi(static_cast<uint32_t>(n), f.mul) + static_cast<uint32_t>(n)) >>
                          f.shr);
}
#endif

}  // namespace kvflash::cuda
