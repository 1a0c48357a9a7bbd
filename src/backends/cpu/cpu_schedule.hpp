// How the CPU backend cuts one attention call into tasks: a pure host function with named
// thresholds, shared by plan() (workspace size) and run() (the loop), unit-tested.
//
// A task is one (sequence, KV head, query tile, KV split). A query tile holds tile_tokens query
// tokens times the GQA group as rows, so every K/V byte a task reads serves all of those rows.
// Decode (<= kDecodeMaxQTokens tokens) keeps every query token in one tile; prefill cuts tiles of
// about kPrefillTileRows rows. The KV range is split when there are too few tasks to keep every
// thread busy, down to kMinSplitKeys keys per split.
//
// Worked example: decode, 1 sequence, 32/8 heads, 1 token, 131072 keys, 2 threads:
//   tiles = 1, base tasks = 1 * 8 * 1 = 8 >= kTasksPerThread * 2 = 8, so n_splits = 1:
//   each task streams one KV head's 131072 keys; the two threads take four heads each.
// Same with 1 KV head: base tasks = 1, n_splits = min(8, 131072 / 256) = 8 splits of 16384 keys.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kvflash/problem.hpp"

namespace kvflash::cpu {

inline constexpr int32_t kDecodeMaxQTokens = 8;
inline constexpr int32_t kPrefillTileRows = 64;
inline constexpr int32_t kTasksPerThread = 4;
inline constexpr int64_t kMinSplitKeys = 256;

struct CpuSchedule {
  int32_t tile_tokens = 1;  // query tokens per tile
  int32_t n_tiles = 1;      // query tiles per (sequence, KV head)
  int32_t n_splits = 1;     // KV splits per (sequence, KV head, tile)
  int64_t n_tasks = 1;
  int32_t tile_rows() const { return tile_tokens * group; }
  int32_t group = 1;
};

inline CpuSchedule cpu_schedule(const AttentionProblem& p, int32_t n_threads) {
  CpuSchedule s;
  s.group = p.group();
  s.tile_tokens = p.n_q_tokens <= kDecodeMaxQTokens
                      ? p.n_q_tokens
                      : std::clamp(kPrefillTileRows / s.group, 1, p.n_q_tokens);
  s.n_tiles = (p.n_q_tokens + s.tile_tokens - 1) / s.tile_tokens;
  const int64_t base = int64_t{p.n_seqs} * p.n_kv_heads * s.n_tiles;
  const int64_t want = int64_t{kTasksPerThread} * std::max(n_threads, 1);
  const int64_t max_splits = std::max<int64_t>(1, p.kv_capacity / kMinSplitKeys);
  s.n_splits = static_cast<int32_t>(std::clamp<int64_t>((want + base - 1) / base, 1, max_splits));
  s.n_tasks = base * s.n_splits;
  return s;
}

}  // namespace kvflash::cpu
