// KvType names and the row codecs' dispatch.
#include "kvflash/formats.hpp"

#include <cstring>

#include "formats/formats_internal.hpp"
#include "formats/fp8_inline.hpp"
#include "formats/half_inline.hpp"

namespace kvflash {

std::optional<KvType> kv_type_from_name(std::string_view name) {
  for (KvType t : kAllKvTypes) {
    if (to_string(t) == name) return t;
  }
  return std::nullopt;
}

std::string_view kv_type_names() {
  return "f32, f16, bf16, q8_0, q4_0, turbo2, turbo3, turbo4, fp8_e4m3, fp8_e5m2";
}

void quantize_row(KvType t, const float* src, int64_t n, void* dst) {
  switch (t) {
    case KvType::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case KvType::f16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = detail::fp32_to_fp16_inline(src[i]);
      break;
    }
    case KvType::bf16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = detail::fp32_to_bf16_inline(src[i]);
      break;
    }
    case KvType::q8_0:
      detail::quantize_row_q8_0(src, n, static_cast<BlockQ8_0*>(dst));
      break;
    case KvType::q4_0:
      detail::quantize_row_q4_0(src, n, static_cast<BlockQ4_0*>(dst));
      break;
    case KvType::turbo2:
    case KvType::turbo3:
    case KvType::turbo4:
      detail::quantize_row_turbo(t, src, n, dst);
      break;
    case KvType::fp8_e4m3: {
      auto* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = detail::fp32_to_fp8_e4m3_inline(src[i]);
      break;
    }
    case KvType::fp8_e5m2: {
      auto* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = detail::fp32_to_fp8_e5m2_inline(src[i]);
      break;
    }
  }
}

void dequantize_row(KvType t, const void* src, int64_t n, float* dst) {
  switch (t) {
    case KvType::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case KvType::f16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = detail::fp16_to_fp32_inline(s[i]);
      break;
    }
    case KvType::bf16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = detail::bf16_to_fp32_inline(s[i]);
      break;
    }
    case KvType::q8_0:
      detail::dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), n, dst);
      break;
    case KvType::q4_0:
      detail::dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), n, dst);
      break;
    case KvType::turbo2:
    case KvType::turbo3:
    case KvType::turbo4:
      detail::dequantize_row_turbo(t, src, n, dst);
      break;
    case KvType::fp8_e4m3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = detail::fp8_e4m3_to_fp32_inline(s[i]);
      break;
    }
    case KvType::fp8_e5m2: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = detail::fp8_e5m2_to_fp32_inline(s[i]);
      break;
    }
  }
}

void quantize_rows(KvType t, const float* src, int64_t n_rows, int64_t n, void* dst) {
  const size_t stride = row_size(t, n);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < n_rows; ++r) {
    quantize_row(t, src + r * n, n, d + static_cast<size_t>(r) * stride);
  }
}

void dequantize_row_rotated(KvType t, const void* src, int64_t n, float* dst) {
  if (is_rotated(t)) {
    detail::dequantize_row_turbo_rotated(t, src, n, dst);
  } else {
    dequantize_row(t, src, n, dst);
  }
}

}  // namespace kvflash
