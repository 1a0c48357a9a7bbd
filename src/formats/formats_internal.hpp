// Per-type row codecs behind the dispatch of formats.cpp. Blocks are written through the structs
// of blocks.hpp, so rows must start at an even address (formats.hpp).
#pragma once

#include <cstdint>
#include <cstring>

#include "kvflash/blocks.hpp"
#include "kvflash/formats.hpp"

namespace kvflash::detail {

// Largest finite fp16, the value a scale/norm that would round to fp16 inf saturates to.
inline constexpr float kFp16Max = 65504.0f;
inline constexpr uint16_t kFp16MaxBits = 0x7BFF;

// One block of 32 values (x holds 32 values, already zero-padded).
void quantize_block_q8_0(const float* x, BlockQ8_0* y);
void dequantize_block_q8_0(const BlockQ8_0* x, float* y);
void quantize_block_q4_0(const float* x, BlockQ4_0* y);
void dequantize_block_q4_0(const BlockQ4_0* x, float* y);

// Rows of n values of a block type of N values (any n >= 0): the last block is quantized from a
// zero-padded copy, and dequantized into a scratch block of which only the row's values are kept.
template <class Block, int N, void (*Quantize)(const float*, Block*)>
void quantize_row_blocks(const float* x, int64_t n, Block* y) {
  const int64_t full = n / N;
  for (int64_t b = 0; b < full; ++b) Quantize(x + b * N, y + b);
  if (const int64_t rest = n - full * N; rest > 0) {
    float buf[N] = {};
    std::memcpy(buf, x + full * N, static_cast<size_t>(rest) * sizeof(float));
    Quantize(buf, y + full);
  }
}
template <class Block, int N, void (*Dequantize)(const Block*, float*)>
void dequantize_row_blocks(const Block* x, int64_t n, float* y) {
  const int64_t full = n / N;
  for (int64_t b = 0; b < full; ++b) Dequantize(x + b, y + b * N);
  if (const int64_t rest = n - full * N; rest > 0) {
    float buf[N];
    Dequantize(x + full, buf);
    std::memcpy(y + full * N, buf, static_cast<size_t>(rest) * sizeof(float));
  }
}

inline void quantize_row_q8_0(const float* x, int64_t n, BlockQ8_0* y) {
  quantize_row_blocks<BlockQ8_0, kQ8_0Values, quantize_block_q8_0>(x, n, y);
}
inline void dequantize_row_q8_0(const BlockQ8_0* x, int64_t n, float* y) {
  dequantize_row_blocks<BlockQ8_0, kQ8_0Values, dequantize_block_q8_0>(x, n, y);
}
inline void quantize_row_q4_0(const float* x, int64_t n, BlockQ4_0* y) {
  quantize_row_blocks<BlockQ4_0, kQ4_0Values, quantize_block_q4_0>(x, n, y);
}
inline void dequantize_row_q4_0(const BlockQ4_0* x, int64_t n, float* y) {
  dequantize_row_blocks<BlockQ4_0, kQ4_0Values, dequantize_block_q4_0>(x, n, y);
}

// turbo rows; t is turbo2, turbo3 or turbo4. dequantize_row_turbo writes n values in the original
// domain, dequantize_row_turbo_rotated writes padded_values(t, n) values in the rotated domain.
void quantize_row_turbo(KvType t, const float* x, int64_t n, void* y);
void dequantize_row_turbo(KvType t, const void* x, int64_t n, float* y);
void dequantize_row_turbo_rotated(KvType t, const void* x, int64_t n, float* y);

}  // namespace kvflash::detail
