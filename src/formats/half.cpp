// The public fp16 / bf16 conversions of formats.hpp; the definitions are in half_inline.hpp.
#include "formats/half_inline.hpp"
#include "kvflash/formats.hpp"

namespace kvflash {

uint16_t fp32_to_fp16(float f) {
  return detail::fp32_to_fp16_inline(f);
}
float fp16_to_fp32(uint16_t h) {
  return detail::fp16_to_fp32_inline(h);
}
uint16_t fp32_to_bf16(float f) {
  return detail::fp32_to_bf16_inline(f);
}
float bf16_to_fp32(uint16_t h) {
  return detail::bf16_to_fp32_inline(h);
}

}  // namespace kvflash
