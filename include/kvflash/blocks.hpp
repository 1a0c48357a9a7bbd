// Byte layouts of the quantized blocks, shared by the CPU reference, the CPU kernels and the CUDA
// kernels. q8_0 and q4_0 are byte-identical to GGUF/ggml. Plain structs of bytes, no alignment
// beyond 2, so that a row of blocks can start at any even address.
#pragma once

#include <cstdint>

namespace kvflash {

inline constexpr int kQ8_0Values = 32;
inline constexpr int kQ4_0Values = 32;
inline constexpr int kTurboValues = 128;

struct BlockQ8_0 {
  uint16_t d;              // fp16 scale: max|x| / 127
  int8_t qs[kQ8_0Values];  // x_j = d * qs[j]
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;                   // fp16 scale: (value of largest magnitude) / -8
  uint8_t qs[kQ4_0Values / 2];  // x_j = d * ((qs[j % 16] >> (4 * (j / 16))) & 15) - 8)
};
static_assert(sizeof(BlockQ4_0) == 18);

// turbo blocks: one 128-value rotated group. Codes are stored in bit planes so that byte j of a
// plane holds values j, j+32, j+64, j+96 (2-bit plane) or j, j+64 (4-bit), which lets SIMD and
// GPU code unpack 32 consecutive codes with one shift and mask.
//   turbo2: code_i = (qs[i % 32] >> (2 * (i / 32))) & 3
//   turbo3: code_i = ((qs[i % 32] >> (2 * (i / 32))) & 3) | (((qh[i % 16] >> (i / 16)) & 1) << 2)
//   turbo4: code_i = (qs[i % 64] >> (4 * (i / 64))) & 15
// Reconstruction in the rotated domain: y_i = norm * centroid[code_i] / sqrt(128).
struct BlockTurbo2 {
  uint16_t norm;  // fp16, corrected: |x| / |c|
  uint8_t qs[32];
};
struct BlockTurbo3 {
  uint16_t norm;
  uint8_t qs[32];
  uint8_t qh[16];
};
struct BlockTurbo4 {
  uint16_t norm;
  uint8_t qs[64];
};
static_assert(sizeof(BlockTurbo2) == 34);
static_assert(sizeof(BlockTurbo3) == 50);
static_assert(sizeof(BlockTurbo4) == 66);

}  // namespace kvflash
