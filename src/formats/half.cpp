// The public fp16 / bf16 / fp8 conversions of formats.hpp; the definitions are in half_inline.hpp
// and fp8_inline.hpp.
#include "formats/fp8_inline.hpp"
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
uint8_t fp32_to_fp8_e4m3(float f) {
  return detail::fp32_to_fp8_e4m3_inline(f);
}
float fp8_e4m3_to_fp32(uint8_t x) {
  return detail::fp8_e4m3_to_fp32_inline(x);
}
uint8_t fp32_to_fp8_e5m2(float f) {
  return detail::fp32_to_fp8_e5m2_inline(f);
}
float fp8_e5m2_to_fp32(uint8_t x) {
  return detail::fp8_e5m2_to_fp32_inline(x);
}

}  // namespace kvflash
