// The turbo formats (turbo2, turbo3, turbo4): what kernels need to work in the rotated domain.
//
// Rotation. One 128-value group x is rotated by
//     R x   = H (s ⊙ x) / sqrt(128)
//     R^T y = s ⊙ (H y) / sqrt(128)
// where H is the 128x128 Sylvester Walsh-Hadamard matrix in natural order, H[i][j] =
// (-1)^popcount(i & j) (H = H^T, H H = 128 I, so R is orthogonal and R^-1 = R^T), and s is the
// fixed sign vector turbo_sign(i) (see turbo_tables.hpp for how it is derived). rotate_forward and
// rotate_inverse (formats.hpp) compute exactly this, in float, in place, for each 128-value group:
//     forward: x_i *= s_i; FWHT; x_i *= kTurboInvSqrt128
//     inverse: FWHT; x_i *= s_i * kTurboInvSqrt128   (s_i * kTurboInvSqrt128 is exact)
// where FWHT is the in-place fast Walsh-Hadamard transform: for h = 1, 2, 4, ..., 64, for every
// pair (i, i + h) with (i & h) == 0: (x_i, x_{i+h}) <- (x_i + x_{i+h}, x_i - x_{i+h}).
// Because R is orthogonal, dot(q, x) == dot(R q, R x): attention kernels rotate the query once and
// dot it with the stored (rotated) keys; the output accumulated from rotated values is rotated
// back with R^T at the end.
//
// Quantization of a group x (n not a multiple of 128: the last group is zero-padded):
//  1. r = |x| (accumulated in double). r == 0 (or NaN): norm 0, all codes 0, the group decodes
//     to zeros.
//  2. y = R (x / r) (x_i * (1 / r) computed in double, rounded to float; then rotate_forward), so
//     |y| = 1 and y_i ~ N(0, 1/128) for a generic x.
//  3. code_i = number of boundaries b_k (turbo_boundaries, the midpoints of neighbouring
//     centroids) with y_i > b_k: the nearest centroid, ties to the lower one.
//  4. c_i = turbo_centroids(t)[code_i] (the N(0, 1/128) codebook), |c|^2 summed in float and
//     norm = fp16(float(r / |c|)) (the division in double), so that x̂ = norm * R^T c has
//     |x̂| = |x| up to the fp16 rounding.
//     A norm above the fp16 range saturates to 65504 (the largest finite half): the group decodes
//     with its direction kept and its length clipped, never to inf/NaN. Below the fp16 range it
//     rounds (to a subnormal half or 0), as fp32_to_fp16 does.
// Codes are packed in bit planes, see blocks.hpp. Decoding in the rotated domain
// (dequantize_row_rotated): y_i = norm * turbo_centroids(t)[code_i] for all padded values; in the
// original domain (dequantize_row): R^T of that, then the first n values.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "kvflash/blocks.hpp"
#include "kvflash/export.h"
#include "kvflash/formats.hpp"
#include "kvflash/turbo_tables.hpp"

namespace kvflash {

// sqrt(128) and 1/sqrt(128) as the nearest double / float.
inline constexpr double kTurboSqrt128 = 11.313708498984761;
inline constexpr float kTurboInvSqrt128 = 0.0883883476483184405f;

// Bits per code: 2, 3, 4 for turbo2, turbo3, turbo4; 0 for the other types.
constexpr int turbo_bits(KvType t) {
  switch (t) {
    case KvType::turbo2:
      return 2;
    case KvType::turbo3:
      return 3;
    case KvType::turbo4:
      return 4;
    default:
      return 0;
  }
}

// s_i, i in 0..127: +1.0f or -1.0f.
constexpr float turbo_sign(int i) {
  return ((turbo_tables::kTurboSignWords[i >> 5] >> (i & 31)) & 1u) != 0 ? -1.0f : 1.0f;
}

namespace detail {
template <size_t N>
constexpr std::array<float, N> turbo_scaled(const double (&c)[N]) {
  std::array<float, N> out{};
  for (size_t k = 0; k < N; ++k) out[k] = static_cast<float>(c[k] / kTurboSqrt128);
  return out;
}
template <size_t N>
constexpr std::array<float, N - 1> turbo_midpoints(const std::array<float, N>& c) {
  std::array<float, N - 1> out{};
  for (size_t k = 0; k + 1 < N; ++k) out[k] = 0.5f * (c[k] + c[k + 1]);
  return out;
}
}  // namespace detail

// The N(0, 1/128) codebooks: float(Lloyd-Max N(0, 1) centroid / sqrt(128)), ascending.
inline constexpr std::array<float, 4> kTurbo2Centroids =
    detail::turbo_scaled(turbo_tables::kLloydMaxGaussian4);
inline constexpr std::array<float, 8> kTurbo3Centroids =
    detail::turbo_scaled(turbo_tables::kLloydMaxGaussian8);
inline constexpr std::array<float, 16> kTurbo4Centroids =
    detail::turbo_scaled(turbo_tables::kLloydMaxGaussian16);
// Decision boundaries: 0.5f * (c_k + c_{k+1}) in float, ascending.
inline constexpr std::array<float, 3> kTurbo2Boundaries = detail::turbo_midpoints(kTurbo2Centroids);
inline constexpr std::array<float, 7> kTurbo3Boundaries = detail::turbo_midpoints(kTurbo3Centroids);
inline constexpr std::array<float, 15> kTurbo4Boundaries =
    detail::turbo_midpoints(kTurbo4Centroids);

// The 2^turbo_bits(t) centroids of t, ascending; nullptr for a non-turbo type.
KVFLASH_API const float* turbo_centroids(KvType t);
// The 2^turbo_bits(t) - 1 decision boundaries of t, ascending; nullptr for a non-turbo type.
KVFLASH_API const float* turbo_boundaries(KvType t);

// Code i (0..127) of one turbo block (BlockTurbo2/3/4 per t), read with the bit-plane formulas
// of blocks.hpp.
inline int turbo_code(KvType t, const void* block, int i) {
  const auto* b = static_cast<const uint8_t*>(block) + 2;  // skip the fp16 norm
  switch (t) {
    case KvType::turbo2:
      return (b[i % 32] >> (2 * (i / 32))) & 3;
    case KvType::turbo3:
      return ((b[i % 32] >> (2 * (i / 32))) & 3) | (((b[32 + i % 16] >> (i / 16)) & 1) << 2);
    case KvType::turbo4:
      return (b[i % 64] >> (4 * (i / 64))) & 15;
    default:
      return 0;
  }
}

}  // namespace kvflash
