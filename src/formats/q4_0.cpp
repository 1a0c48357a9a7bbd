// q4_0, byte-identical to ggml's quantize_row_q4_0_ref / dequantize_row_q4_0:
//   max = the value of largest magnitude (the first one on ties: scan j = 0..31 with
//   `if (amax < fabsf(v))`); d = max / -8; id = d != 0 ? 1 / d : 0;
//   for j < 16: xi0 = min(15, (int8_t)(x_j * id + 8.5f)), xi1 = min(15, (int8_t)(x_{16+j} * id +
//   8.5f)); qs[j] = xi0 | (xi1 << 4); d stored as fp16 (round to nearest even).
// Deviation, only where ggml produces inf: when d rounds to fp16 inf (|max| >= 8 * 65520), d is
// saturated to -+65504 (the largest finite half, sign of max / -8) and id = 1 / d, so such a block
// decodes clipped to [-8 * 65504, 7 * 65504] (mirrored for a negative max) instead of to inf/NaN.
// x * id + 8.5f is clamped to [0, 15] before the truncation, which equals ggml's
// min(15, (int8_t)...) in the ggml range (x * id + 8.5f in [0.5, 16.5] up to rounding) and keeps
// the float -> int conversion defined for any input.
#include <cmath>
#include <cstring>

#include "formats/formats_internal.hpp"

namespace kvflash::detail {
namespace {

inline uint8_t q4_code(float v) {
  v = v > 0.0f ? v : 0.0f;  // NaN -> 0
  v = v < 15.0f ? v : 15.0f;
  return static_cast<uint8_t>(static_cast<int>(v));
}

}  // namespace

void quantize_block_q4_0(const float* x, BlockQ4_0* y) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < kQ4_0Values; ++j) {
    const float v = x[j];
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      max = v;
    }
  }
  float d = max / -8.0f;
  uint16_t dh = fp32_to_fp16(d);
  if ((dh & 0x7FFFu) == 0x7C00u) {
    d = std::copysign(kFp16Max, d);
    dh = static_cast<uint16_t>((dh & 0x8000u) | kFp16MaxBits);
  }
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = dh;
  for (int j = 0; j < kQ4_0Values / 2; ++j) {
    const uint8_t xi0 = q4_code(x[j] * id + 8.5f);
    const uint8_t xi1 = q4_code(x[kQ4_0Values / 2 + j] * id + 8.5f);
    y->qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
  }
}

void dequantize_block_q4_0(const BlockQ4_0* x, float* y) {
  const float d = fp16_to_fp32(x->d);
  for (int j = 0; j < kQ4_0Values / 2; ++j) {
    y[j] = static_cast<float>((x->qs[j] & 15) - 8) * d;
    y[j + kQ4_0Values / 2] = static_cast<float>((x->qs[j] >> 4) - 8) * d;
  }
}

}  // namespace kvflash::detail
