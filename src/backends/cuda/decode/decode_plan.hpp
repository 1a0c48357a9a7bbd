// Host-side planning of the CUDA decode family: the CTA layout, shared-memory sizes and split
// count for a problem. Pure functions of the problem and the device's size, with CPU tests.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvflash/problem.hpp"

namespace kvflash::cuda::decode {

inline constexpr int32_t kMaxDecodeQTokens = 8;
inline constexpr int32_t kStageTargetBytes = 32 * 1024;  // raw K+V bytes per pipeline stage
inline constexpr int32_t kMaxTileKeys = 256;
inline constexpr int64_t kMinKeysPerSplit = 64;
inline constexpr size_t kSmemPerSm = 228 * 1024;  // H100/H200 shared memory per SM
inline constexpr int32_t kMaxSplits = 1024;

// Quantized K / V tiles decoded once per tile into an f16 tile in shared memory, which the
// warps then read as they read f16 rows (instead of every warp decoding its own fragments).
enum class DecodeStage : uint8_t { none = 0, k = 1, v = 2, kv = 3 };
// KVFLASH_CUDA_DECODE_STAGE = none | k | v | kv (read once; default none).
DecodeStage decode_stage_from_environment();

struct DecodeLayout {
  int32_t dkc = 0, dvc = 0;
  int32_t k_row_bytes = 0, v_row_bytes = 0;
  int32_t n_dslices = 1, slice_w = 0;
  int32_t n_mtiles = 1, row_block = 16, n_row_blocks = 1;
  int32_t n_kgroups = 4;
  int32_t bk = 64;
  int32_t sk_stride = 0, sv_stride = 0;
  int32_t smem_q_bytes = 0;
  int32_t smem_kv_bytes = 0;  // one stage (Q is staged in one; the key groups merge in all)
  int32_t n_stages = 3;
  bool stage_k = false, stage_v = false;  // decoded f16 tiles (see DecodeStage)
  int32_t fk_stride = 0, fv_stride = 0;   // their row strides in bytes
  int32_t smem_f16_bytes = 0;             // both f16 tiles, after the stages
  size_t smem_total = 0;                  // dynamic shared memory per CTA
};

DecodeLayout decode_layout(const AttentionProblem& p, DecodeStage stage);
inline DecodeLayout decode_layout(const AttentionProblem& p) {
  return decode_layout(p, decode_stage_from_environment());
}

// KV splits per (sequence, KV head, row block): enough CTAs to fill `sm_count` x `ctas_per_sm`
// slots, never more than leaves kMinKeysPerSplit keys per split at kv_capacity.
int32_t decode_splits(const AttentionProblem& p, const DecodeLayout& l, int32_t sm_count,
                      int32_t ctas_per_sm);

// Workspace bytes for the partial states (0 with one split).
size_t decode_workspace_bytes(const AttentionProblem& p, const DecodeLayout& l, int32_t n_splits);

}  // namespace kvflash::cuda::decode
