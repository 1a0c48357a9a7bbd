// q8_0, byte-identical to ggml's quantize_row_q8_0_ref / dequantize_row_q8_0:
//   amax = max_j |x_j|; d = amax / 127; id = d != 0 ? 1 / d : 0; qs_j = roundf(x_j * id);
//   d stored as fp16 (round to nearest even).
// Deviation, only where ggml produces inf: when d rounds to fp16 inf (amax >= 127 * 65520), d is
// saturated to 65504 (the largest finite half), id = 1 / 65504, and the codes saturate at +-127,
// so such a block decodes clipped to +-127 * 65504 instead of to inf/NaN. Codes are clamped to
// [-127, 127] before rounding, which changes nothing in the ggml range (|x_j * id| <= 127 up to
// rounding) and keeps the float -> int conversion defined for any input.
#include <cmath>
#include <cstring>

#include "formats/formats_internal.hpp"

namespace kvflash::detail {

void quantize_block_q8_0(const float* x, BlockQ8_0* y) {
  float amax = 0.0f;
  for (int j = 0; j < kQ8_0Values; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;  // ggml: MAX(amax, fabsf(x_j))
  }
  float d = amax / 127.0f;
  uint16_t dh = fp32_to_fp16(d);
  if ((dh & 0x7FFFu) == 0x7C00u) {
    d = kFp16Max;
    dh = kFp16MaxBits;
  }
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = dh;
  for (int j = 0; j < kQ8_0Values; ++j) {
    float v = x[j] * id;
    v = v > -127.0f ? v : -127.0f;  // NaN -> -127
    v = v < 127.0f ? v : 127.0f;
    y->qs[j] = static_cast<int8_t>(std::round(v));
  }
}

void dequantize_block_q8_0(const BlockQ8_0* x, float* y) {
  const float d = fp16_to_fp32(x->d);
  for (int j = 0; j < kQ8_0Values; ++j) y[j] = static_cast<float>(x->qs[j]) * d;
}

}  // namespace kvflash::detail
