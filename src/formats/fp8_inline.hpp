// fp8 (OCP E4M3 "fn" and E5M2) scalar conversions, inline for the row codecs and the CPU kernels'
// scalar paths; formats.hpp documents them (round to nearest even, saturating to the largest
// finite value, NaN kept: CUDA's __NV_SATFINITE conversions).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "formats/half_inline.hpp"

namespace kvflash::detail {

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr float kFp8E5m2Max = 57344.0f;

// |f| (finite, <= the largest finite value of the format) to the format's magnitude bits: an
// exponent field of E bits with bias Bias and M mantissa bits, rounded to nearest even. Values
// below the smallest normal are subnormals of step 2^(1 - Bias - M).
template <int M, int Bias>
uint8_t fp8_magnitude(float a) {
  if (a == 0.0f) return 0;
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the leading bit is 2^(e - 1)
  e = std::max(e - 1, 1 - Bias);
  // a / 2^(e - M) is exact (a power-of-two scale), nearbyint rounds to nearest even.
  auto q = static_cast<int>(std::nearbyint(std::ldexp(a, M - e)));
  if (q == (2 << M)) {  // rounded up to the next binade
    q = 1 << M;
    ++e;
  }
  if (q < (1 << M)) return static_cast<uint8_t>(q);  // subnormal (e == 1 - Bias): field 0
  return static_cast<uint8_t>(((e + Bias) << M) | (q - (1 << M)));
}

// Round to nearest even, saturating: NaN keeps its sign and becomes NanCode; |f| at or past the
// largest finite value (inf included) becomes MaxCode.
template <int M, int Bias, uint8_t MaxCode, uint8_t NanCode>
uint8_t fp32_to_fp8(float f, float max) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return sign | NanCode;
  const float a = std::fabs(f);
  if (a >= max) return sign | MaxCode;
  return sign | fp8_magnitude<M, Bias>(a);
}
inline uint8_t fp32_to_fp8_e4m3_inline(float f) {
  return fp32_to_fp8<3, 7, 0x7E, 0x7F>(f, kFp8E4m3Max);  // 448 = 0x7E
}
inline uint8_t fp32_to_fp8_e5m2_inline(float f) {
  return fp32_to_fp8<2, 15, 0x7B, 0x7E>(f, kFp8E5m2Max);  // 57344 = 0x7B
}

// E4M3 as the fp16 with the same sign, exponent and mantissa bits shifted into place (bias 15
// instead of 7: the value over 2^8), so every code, subnormals included, converts exactly; the
// one NaN code per sign has no fp16 twin and is returned as NaN.
inline uint16_t fp8_e4m3_as_fp16_bits(uint8_t x) {
  return static_cast<uint16_t>(((x & 0x80) << 8) | ((x & 0x7F) << 7));
}
inline float fp8_e4m3_to_fp32_inline(uint8_t x) {
  if ((x & 0x7F) == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  return fp16_to_fp32_inline(fp8_e4m3_as_fp16_bits(x)) * 256.0f;
}
// E5M2 is the top byte of an fp16.
inline float fp8_e5m2_to_fp32_inline(uint8_t x) {
  return fp16_to_fp32_inline(static_cast<uint16_t>(x << 8));
}

}  // namespace kvflash::detail
