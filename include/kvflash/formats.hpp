// KV formats. A "row" is the head_dim values of one token of one KV head; it is stored as
// ceil(n / block_values) blocks, the last one zero-padded.
//
//  type    block values  block bytes  layout of one block
//  f32     1             4            IEEE binary32
//  f16     1             2            IEEE binary16
//  bf16    1             2            bfloat16 (round to nearest even from f32)
//  q8_0    32            34           GGUF/ggml block_q8_0: fp16 d, int8 qs[32]; x = d * q
//  q4_0    32            18           GGUF/ggml block_q4_0: fp16 d, qs[16]; value j < 16 in the low
//                                     nibble of qs[j], value j >= 16 in the high nibble of
//                                     qs[j-16]; x = d * (nibble - 8)
//  turbo2  128           34           fp16 norm, 2-bit codes (see turbo.hpp for the bit planes)
//  turbo3  128           50           fp16 norm, 3-bit codes
//  turbo4  128           66           fp16 norm, 4-bit codes
//  fp8_e4m3  1           1            OCP FP8 E4M3 ("e4m3fn": bias 7, no inf, NaN = S.1111.111,
//                                     largest finite 448)
//  fp8_e5m2  1           1            OCP FP8 E5M2 (bias 15, inf and NaN as IEEE binary16's top
//                                     byte, largest finite 57344)
//
// turbo types store a 128-value group x as: y = R x / |x| with R a fixed randomized Walsh-Hadamard
// rotation, each y_i replaced by the nearest Lloyd-Max centroid c_i of a Gaussian N(0, 1/128), and
// norm = |x| / |c| so that the reconstruction x̂ = norm * R^T c keeps |x̂| = |x|.
//
// fp8 types hold x / scale, with one scale per tensor (per layer's K or V) outside the rows, as
// vLLM's fp8 caches do: the attention problem carries it (AttentionProblem::k_scale / v_scale),
// and the row codecs here work at scale 1 (quantize_row writes fp8(x), dequantize_row reads it).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "kvflash/export.h"

namespace kvflash {

enum class KvType : uint8_t {
  f32,
  f16,
  bf16,
  q8_0,
  q4_0,
  turbo2,
  turbo3,
  turbo4,
  fp8_e4m3,
  fp8_e5m2
};

inline constexpr std::array<KvType, 10> kAllKvTypes = {
    KvType::f32,    KvType::f16,    KvType::bf16,   KvType::q8_0,     KvType::q4_0,
    KvType::turbo2, KvType::turbo3, KvType::turbo4, KvType::fp8_e4m3, KvType::fp8_e5m2};

struct KvTypeTraits {
  std::string_view name;
  int32_t block_values;  // values per block
  int32_t block_bytes;   // bytes per block
  int32_t code_bits;     // bits per value of the payload (0 for float types, fp8 included)
  bool rotated;          // stored in the rotated domain (turbo types)
};

constexpr KvTypeTraits traits(KvType t) {
  switch (t) {
    case KvType::f32:
      return {"f32", 1, 4, 0, false};
    case KvType::f16:
      return {"f16", 1, 2, 0, false};
    case KvType::bf16:
      return {"bf16", 1, 2, 0, false};
    case KvType::q8_0:
      return {"q8_0", 32, 34, 8, false};
    case KvType::q4_0:
      return {"q4_0", 32, 18, 4, false};
    case KvType::turbo2:
      return {"turbo2", 128, 34, 2, true};
    case KvType::turbo3:
      return {"turbo3", 128, 50, 3, true};
    case KvType::turbo4:
      return {"turbo4", 128, 66, 4, true};
    case KvType::fp8_e4m3:
      return {"fp8_e4m3", 1, 1, 0, false};
    case KvType::fp8_e5m2:
      return {"fp8_e5m2", 1, 1, 0, false};
  }
  return {"invalid", 0, 0, 0, false};
}

constexpr bool is_valid(KvType t) {
  return static_cast<uint8_t>(t) <= static_cast<uint8_t>(KvType::fp8_e5m2);
}
// The fp8 types: rows of fp8(x / scale) with the scale in the problem.
constexpr bool is_fp8(KvType t) {
  return t == KvType::fp8_e4m3 || t == KvType::fp8_e5m2;
}
constexpr std::string_view to_string(KvType t) {
  return traits(t).name;
}
constexpr bool is_rotated(KvType t) {
  return traits(t).rotated;
}
KVFLASH_API std::optional<KvType> kv_type_from_name(std::string_view name);
// "f32, f16, bf16, q8_0, ..." for error messages.
KVFLASH_API std::string_view kv_type_names();

// Values stored for a row of n values: n rounded up to whole blocks.
constexpr int64_t padded_values(KvType t, int64_t n) {
  const int64_t b = traits(t).block_values;
  return (n + b - 1) / b * b;
}
// Bytes of one row of n values.
constexpr size_t row_size(KvType t, int64_t n) {
  return static_cast<size_t>(padded_values(t, n) / traits(t).block_values) *
         static_cast<size_t>(traits(t).block_bytes);
}
// Bytes per value, padding included, for a row of n values (what the tools report).
constexpr double bytes_per_value(KvType t, int64_t n) {
  return static_cast<double>(row_size(t, n)) / static_cast<double>(n);
}

// One row of n values. dst receives row_size(t, n) bytes.
// q8_0 / q4_0 are byte-identical to ggml's reference quantizers, except where ggml's fp16 scale
// would overflow to inf: such a scale saturates to +-65504 (and the codes saturate), so the block
// decodes clipped but finite; a turbo norm saturates the same way (turbo.hpp). f16 values beyond
// the fp16 range become +-inf (IEEE round to nearest even, as F16C).
KVFLASH_API void quantize_row(KvType t, const float* src, int64_t n, void* dst);
// One row back to n floats in the original domain (turbo: inverse-rotated).
KVFLASH_API void dequantize_row(KvType t, const void* src, int64_t n, float* dst);
// Many rows of n values each; src rows are n floats apart, dst rows row_size(t, n) bytes apart.
KVFLASH_API void quantize_rows(KvType t, const float* src, int64_t n_rows, int64_t n, void* dst);

// Kernels work in the storage domain: for turbo types this writes padded_values(t, n) values
// norm * c (still rotated, no inverse rotation); for all other types it equals dequantize_row
// and writes n values.
KVFLASH_API void dequantize_row_rotated(KvType t, const void* src, int64_t n, float* dst);

// The fixed turbo rotation R, applied in place to each 128-value group of x (n_padded is a
// multiple of 128). rotate_inverse(rotate_forward(x)) == x up to rounding.
inline constexpr int32_t kTurboGroup = 128;
KVFLASH_API void rotate_forward(float* x, int64_t n_padded);
KVFLASH_API void rotate_inverse(float* x, int64_t n_padded);

// fp8 scalar conversions. To fp8: round to nearest even, saturating: a finite value beyond the
// largest finite fp8 and +-inf become +-largest finite (448 for e4m3, 57344 for e5m2), NaN stays
// NaN (e4m3 0x7F, e5m2 0x7E, with the sign) -- CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE,
// ...) bit for bit, so host and device quantize alike. From fp8: exact (every fp8 value is an f32).
KVFLASH_API uint8_t fp32_to_fp8_e4m3(float f);
KVFLASH_API float fp8_e4m3_to_fp32(uint8_t x);
KVFLASH_API uint8_t fp32_to_fp8_e5m2(float f);
KVFLASH_API float fp8_e5m2_to_fp32(uint8_t x);

// fp16 / bf16 scalar conversions, round to nearest even (bit-identical to F16C vcvtps2ph imm=0).
KVFLASH_API uint16_t fp32_to_fp16(float f);
KVFLASH_API float fp16_to_fp32(uint16_t h);
KVFLASH_API uint16_t fp32_to_bf16(float f);
KVFLASH_API float bf16_to_fp32(uint16_t h);

}  // namespace kvflash
