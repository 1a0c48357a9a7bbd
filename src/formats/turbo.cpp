// turbo2/3/4: the randomized Walsh-Hadamard rotation and the per-group codec (see turbo.hpp for
// the exact definition). Plain fixed-size loops over 128 values, written to auto-vectorize.
#include "kvflash/turbo.hpp"

#include <cmath>
#include <cstring>

#include "formats/formats_internal.hpp"

namespace kvflash {
namespace {

constexpr int kG = kTurboGroup;

struct TurboSigns {
  float s[kG];         // s_i
  float s_scaled[kG];  // s_i / sqrt(128)
};
constexpr TurboSigns make_signs() {
  TurboSigns t{};
  for (int i = 0; i < kG; ++i) {
    t.s[i] = turbo_sign(i);
    t.s_scaled[i] = turbo_sign(i) * kTurboInvSqrt128;
  }
  return t;
}
constexpr TurboSigns kSigns = make_signs();

// In-place unnormalized fast Walsh-Hadamard transform of 128 values (natural order).
inline void fwht128(float* x) {
  for (int h = 1; h < kG; h *= 2) {
    for (int i = 0; i < kG; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

inline void rotate_forward_group(float* x) {
  for (int i = 0; i < kG; ++i) x[i] *= kSigns.s[i];
  fwht128(x);
  for (int i = 0; i < kG; ++i) x[i] *= kTurboInvSqrt128;
}

inline void rotate_inverse_group(float* x) {
  fwht128(x);
  for (int i = 0; i < kG; ++i) x[i] *= kSigns.s_scaled[i];
}

// Codes of one group: code_i = #{k : y_i > b_k} (the boundaries ascend, so the select chain also
// picks c[code_i] without a gather), and |c|^2 (returned), summed in 8 fixed float lanes.
template <int kLevels>
float nearest_codes(const float* y, const float* boundaries, const float* centroids,
                    uint8_t* codes) {
  float cv[kG];
  for (int i = 0; i < kG; ++i) {
    const float v = y[i];
    int code = 0;
    float c = centroids[0];
    for (int k = 0; k < kLevels - 1; ++k) {
      const bool above = v > boundaries[k];
      code += above ? 1 : 0;
      c = above ? centroids[k + 1] : c;
    }
    codes[i] = static_cast<uint8_t>(code);
    cv[i] = c;
  }
  float acc[8] = {};
  for (int i = 0; i < kG; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += cv[i + l] * cv[i + l];
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void pack_codes(KvType t, const uint8_t* codes, uint16_t norm, void* block) {
  switch (t) {
    case KvType::turbo2: {
      auto* b = static_cast<BlockTurbo2*>(block);
      b->norm = norm;
      for (int j = 0; j < 32; ++j) {
        b->qs[j] = static_cast<uint8_t>(codes[j] | (codes[j + 32] << 2) | (codes[j + 64] << 4) |
                                        (codes[j + 96] << 6));
      }
      break;
    }
    case KvType::turbo3: {
      auto* b = static_cast<BlockTurbo3*>(block);
      b->norm = norm;
      for (int j = 0; j < 32; ++j) {
        b->qs[j] = static_cast<uint8_t>((codes[j] & 3) | ((codes[j + 32] & 3) << 2) |
                                        ((codes[j + 64] & 3) << 4) | ((codes[j + 96] & 3) << 6));
      }
      for (int j = 0; j < 16; ++j) {
        uint32_t h = 0;
        for (int k = 0; k < 8; ++k) h |= static_cast<uint32_t>(codes[j + 16 * k] >> 2) << k;
        b->qh[j] = static_cast<uint8_t>(h);
      }
      break;
    }
    case KvType::turbo4: {
      auto* b = static_cast<BlockTurbo4*>(block);
      b->norm = norm;
      for (int j = 0; j < 64; ++j) b->qs[j] = static_cast<uint8_t>(codes[j] | (codes[j + 64] << 4));
      break;
    }
    default:
      break;
  }
}

// y_i = norm * centroid[code_i], rotated domain, 128 values.
void decode_rotated(KvType t, const void* block, float* y) {
  const float* c = turbo_centroids(t);
  uint16_t norm_bits;
  std::memcpy(&norm_bits, block, sizeof norm_bits);
  const float norm = fp16_to_fp32(norm_bits);
  uint8_t codes[kG];
  switch (t) {
    case KvType::turbo2: {
      const auto* b = static_cast<const BlockTurbo2*>(block);
      for (int i = 0; i < kG; ++i) codes[i] = (b->qs[i % 32] >> (2 * (i / 32))) & 3;
      break;
    }
    case KvType::turbo3: {
      const auto* b = static_cast<const BlockTurbo3*>(block);
      for (int i = 0; i < kG; ++i) {
        codes[i] = static_cast<uint8_t>(((b->qs[i % 32] >> (2 * (i / 32))) & 3) |
                                        (((b->qh[i % 16] >> (i / 16)) & 1) << 2));
      }
      break;
    }
    case KvType::turbo4: {
      const auto* b = static_cast<const BlockTurbo4*>(block);
      for (int i = 0; i < kG; ++i) codes[i] = (b->qs[i % 64] >> (4 * (i / 64))) & 15;
      break;
    }
    default:
      std::memset(codes, 0, sizeof codes);
      break;
  }
  for (int i = 0; i < kG; ++i) y[i] = norm * c[codes[i]];
}

void quantize_group(KvType t, const float* x, void* block) {
  double ss = 0.0;
  for (int i = 0; i < kG; ++i) ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  uint8_t codes[kG] = {};
  if (!(ss > 0.0)) {  // zero (or NaN) group: norm 0, codes 0, decodes to zeros
    pack_codes(t, codes, 0, block);
    return;
  }
  const double r = std::sqrt(ss);
  const double inv_r = 1.0 / r;
  float y[kG];
  for (int i = 0; i < kG; ++i) y[i] = static_cast<float>(static_cast<double>(x[i]) * inv_r);
  rotate_forward_group(y);
  float c2 = 0.0f;
  switch (t) {
    case KvType::turbo2:
      c2 = nearest_codes<4>(y, kTurbo2Boundaries.data(), kTurbo2Centroids.data(), codes);
      break;
    case KvType::turbo3:
      c2 = nearest_codes<8>(y, kTurbo3Boundaries.data(), kTurbo3Centroids.data(), codes);
      break;
    case KvType::turbo4:
      c2 = nearest_codes<16>(y, kTurbo4Boundaries.data(), kTurbo4Centroids.data(), codes);
      break;
    default:
      break;
  }
  // |c| > 0: no centroid is 0. The norm saturates to the largest finite half.
  const double scale = r / std::sqrt(static_cast<double>(c2));
  const float s =
      scale < static_cast<double>(detail::kFp16Max) ? static_cast<float>(scale) : detail::kFp16Max;
  pack_codes(t, codes, fp32_to_fp16(s), block);
}

}  // namespace

const float* turbo_centroids(KvType t) {
  switch (t) {
    case KvType::turbo2:
      return kTurbo2Centroids.data();
    case KvType::turbo3:
      return kTurbo3Centroids.data();
    case KvType::turbo4:
      return kTurbo4Centroids.data();
    default:
      return nullptr;
  }
}

const float* turbo_boundaries(KvType t) {
  switch (t) {
    case KvType::turbo2:
      return kTurbo2Boundaries.data();
    case KvType::turbo3:
      return kTurbo3Boundaries.data();
    case KvType::turbo4:
      return kTurbo4Boundaries.data();
    default:
      return nullptr;
  }
}

void rotate_forward(float* x, int64_t n_padded) {
  for (int64_t g = 0; g + kG <= n_padded; g += kG) rotate_forward_group(x + g);
}

void rotate_inverse(float* x, int64_t n_padded) {
  for (int64_t g = 0; g + kG <= n_padded; g += kG) rotate_inverse_group(x + g);
}

namespace detail {

void quantize_row_turbo(KvType t, const float* x, int64_t n, void* y) {
  const size_t bytes = static_cast<size_t>(traits(t).block_bytes);
  auto* out = static_cast<uint8_t*>(y);
  int64_t g = 0;
  for (; g + kG <= n; g += kG, out += bytes) quantize_group(t, x + g, out);
  if (g < n) {
    float buf[kG] = {};
    std::memcpy(buf, x + g, static_cast<size_t>(n - g) * sizeof(float));
    quantize_group(t, buf, out);
  }
}

void dequantize_row_turbo_rotated(KvType t, const void* x, int64_t n, float* y) {
  const size_t bytes = static_cast<size_t>(traits(t).block_bytes);
  const auto* in = static_cast<const uint8_t*>(x);
  const int64_t padded = padded_values(t, n);
  for (int64_t g = 0; g < padded; g += kG, in += bytes) decode_rotated(t, in, y + g);
}

void dequantize_row_turbo(KvType t, const void* x, int64_t n, float* y) {
  const size_t bytes = static_cast<size_t>(traits(t).block_bytes);
  const auto* in = static_cast<const uint8_t*>(x);
  int64_t g = 0;
  for (; g + kG <= n; g += kG, in += bytes) {
    decode_rotated(t, in, y + g);
    rotate_inverse_group(y + g);
  }
  if (g < n) {
    float buf[kG];
    decode_rotated(t, in, buf);
    rotate_inverse_group(buf);
    std::memcpy(y + g, buf, static_cast<size_t>(n - g) * sizeof(float));
  }
}

}  // namespace detail
}  // namespace kvflash
