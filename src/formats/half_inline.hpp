// fp16 / bf16 scalar conversions, inline so that the row loops of formats.cpp vectorize (the
// public functions of formats.hpp call these). Pure integer code (plus one float addition for the
// fp16 subnormals), branch-free selects so that row loops vectorize, independent of the MXCSR
// flush-to-zero / denormals-are-zero modes, bit-identical to F16C (vcvtps2ph with imm 0, i.e.
// round to nearest even, and vcvtph2ps), NaN payloads included: fp32 -> fp16 keeps the top 10
// payload bits and sets the quiet bit; fp16 -> fp32 keeps the payload (and sets the quiet bit).
#pragma once

#include <bit>
#include <cstdint>

namespace kvflash::detail {

inline uint16_t fp32_to_fp16_inline(float f) {
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (w >> 16) & 0x8000u;
  const uint32_t a = w & 0x7FFFFFFFu;
  // |f| >= 65536, inf and NaN are first clamped to 65536, which the normal path turns into inf.
  const uint32_t ac = a < 0x47800000u ? a : 0x47800000u;
  // Normal halfs (|f| >= 2^-14): rebias the exponent (127 -> 15) and round the 23-bit mantissa to
  // 10 bits, to nearest even; a carry out of the mantissa bumps the exponent, up to inf (0x7C00)
  // for |f| >= 65520.
  const uint32_t normal = (ac - 0x38000000u + 0x0FFFu + ((ac >> 13) & 1u)) >> 13;
  // Subnormal halfs (|f| < 2^-14): 0.5f + |f| has ulp 2^-24, the half subnormal step, so the
  // hardware addition rounds |f| to the half grid (to nearest even); its low mantissa bits are the
  // half bits (0x400 when it rounds up to the smallest normal). Unaffected by FTZ/DAZ: an fp32
  // subnormal |f| maps to 0 either way and the sum is normal.
  const uint32_t sub = std::bit_cast<uint32_t>(std::bit_cast<float>(ac) + 0.5f) - 0x3F000000u;
  // NaN: quiet, top 10 payload bits kept.
  const uint32_t nan = 0x7E00u | ((a >> 13) & 0x03FFu);
  // The selects are all-ones / zero masks from arithmetic shifts rather than ternaries: with a
  // ternary the compiler sinks the float addition into one arm, cannot if-convert it back
  // (-ftrapping-math), and the row loops stop vectorizing.
  const uint32_t is_sub = static_cast<uint32_t>(static_cast<int32_t>(ac - 0x38800000u) >> 31);
  const uint32_t is_nan = static_cast<uint32_t>(static_cast<int32_t>(0x7F800000u - a) >> 31);
  uint32_t h = (sub & is_sub) | (normal & ~is_sub);
  h = (nan & is_nan) | (h & ~is_nan);
  return static_cast<uint16_t>(sign | h);
}

inline float fp16_to_fp32_inline(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x03FFu;
  // Masks as in fp32_to_fp16_inline: e == 0 (zero / subnormal) and e == 31 (inf / NaN).
  const uint32_t is_sub = static_cast<uint32_t>(static_cast<int32_t>(e - 1u) >> 31);
  const uint32_t is_special = static_cast<uint32_t>(static_cast<int32_t>(30u - e) >> 31);
  // Normal: rebias 15 -> 127; inf / NaN: exponent 255 (143 + 112), NaN gets the quiet bit.
  const uint32_t quiet = ((0u - m) >> 31) << 22;
  const uint32_t normal =
      ((e + 112u + (is_special & 112u)) << 23) | (m << 13) | (is_special & quiet);
  // Subnormal (and zero): m * 2^-24 exactly, as a normal float (or +0).
  const uint32_t sub = std::bit_cast<uint32_t>(static_cast<float>(m) * 5.9604644775390625e-8f);
  return std::bit_cast<float>(sign | (sub & is_sub) | (normal & ~is_sub));
}

inline uint16_t fp32_to_bf16_inline(float f) {
  const uint32_t w = std::bit_cast<uint32_t>(f);
  // NaN: keep the top payload bits and force the quiet bit so that it stays a NaN.
  if ((w & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((w >> 16) | 0x0040u);
  // Round to nearest even; overflows to inf as it should. fp32 subnormals are rounded, not flushed.
  return static_cast<uint16_t>((w + 0x7FFFu + ((w >> 16) & 1u)) >> 16);
}

inline float bf16_to_fp32_inline(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

}  // namespace kvflash::detail
