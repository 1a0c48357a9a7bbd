// Which CUDA kernel family serves a call, by its query tokens per sequence: cuda.prefill from
// min_prefill_q_tokens (and every ragged call: cuda.decode reads no per-sequence query counts),
// cuda.decode below. cuda.decode's kernels serve 1 .. kMaxDecodeQTokens (its guard): where both
// guards pass, the registry takes cuda.prefill (the higher priority), so cuda.decode runs 9-32
// tokens only when forced (KVFLASH_FORCE_KERNEL, A/B runs and its tests).
//
// The crossover, measured on an H100 (2026-12-06, 32/8 heads, D 128, one sequence at 4K, 32K and
// 128K keys; cuda.prefill forced below it as one ragged sequence; dev/routing_gpu.sh,
// bench/baselines/h100-routing-71a2dac/): with both tensors f16 / bf16 cuda.prefill is the faster
// from 5 tokens (128K: 200 us at 8 tokens against decode's 218-220 at 5-8; 4K: 25.7 against
// 26.4-29.0; at 4 tokens decode 23.9 / 66.5 against 25.7 / 69.1 at 4K / 32K); with a quantized
// tensor from 9 (q8_0 128K: decode 171 us at 8 tokens against prefill's 313, 323 at 9 against
// 314-317); at 9-32 tokens cuda.prefill is 0.31-0.96x of decode's time for both. Paged caches
// whose pages are not a multiple of 64 tokens (cuda.prefill's TMA boxes then shrink to 32 or 16
// rows) from 17 (page 16, 5-12 tokens: prefill 516 us at 128K f16 against decode's 238-404,
// 429 against 347 for q8_0 at 9; decode doubles its M tiles at 17).
#pragma once

#include <cstdint>

#include "kvflash/formats.hpp"

namespace kvflash::cuda {

inline constexpr int32_t kMaxDecodeQTokens = 32;

constexpr int32_t min_prefill_q_tokens(KvType k, KvType v, int32_t page_size) {
  if (page_size > 0 && page_size % 64 != 0) return 17;
  const auto half = [](KvType t) { return t == KvType::f16 || t == KvType::bf16; };
  return half(k) && half(v) ? 5 : 9;
}

}  // namespace kvflash::cuda
