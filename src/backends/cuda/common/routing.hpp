// Which CUDA kernel family serves a call, by its query tokens per sequence: cuda.decode up to
// kMaxDecodeQTokens, cuda.prefill from kMinPrefillQTokens (and every ragged call: cuda.decode reads
// no per-sequence query counts). Each family's guard reads these, so the two sides cannot overlap
// or leave a gap.
//
// The crossover, measured on an H100 (2026-12-06, 32/8 heads, D 128, f16 and q8_0 at 4K, 32K and
// 128K keys; cuda.decode forced up to 64 tokens beside cuda.prefill with its KV splits, same run;
// docs/cuda-prefill.md has the table): cuda.decode is the faster up to 32 tokens at every depth
// (f16 at 128K: 621 against 710 us at 32 tokens), cuda.prefill from 48 tokens at 32K and 128K
// (713 against 892 us at 128K); at 4K they meet at 64.
#pragma once

#include <cstdint>

namespace kvflash::cuda {

inline constexpr int32_t kMaxDecodeQTokens = 32;
inline constexpr int32_t kMinPrefillQTokens = kMaxDecodeQTokens + 1;

}  // namespace kvflash::cuda
