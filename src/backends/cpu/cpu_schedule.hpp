// How the CPU backend cuts one attention call into tasks: a pure host function with named
// thresholds, shared by plan() (workspace size) and run() (the loop), unit-tested.
//
// A task is one (sequence, query tile, KV split) and covers every KV head: it walks its KV range in
// blocks of kHeadBlockKeys tokens and, within a block, visits every KV head, so that a
// token-major cache (token, head, dim) is read as one sequential stream per task (the hardware
// prefetchers and the TLB see whole pages) instead of one 2 KB-strided stream per head.
// A query tile holds tile_tokens query tokens times the GQA group as rows per KV head, so every
// K/V byte a task reads serves all of those rows. Decode (<= kDecodeMaxQTokens tokens) keeps
// every query token in one tile; prefill cuts tiles of about kPrefillTileRows rows per head. The
// KV range is split when there are too few tasks to keep every thread busy: into about
// kTasksPerThread tasks per thread, but not below kSplitKeys keys per split unless that leaves a
// thread idle, and never below kMinSplitKeys.
//
// Worked example: decode, 1 sequence, 32/8 heads, 1 token, 131072 keys, 2 threads:
//   tiles = 1, base tasks = 1, want kTasksPerThread * 2 = 32 tasks, so n_splits = 32: each task
//   streams 4096 consecutive tokens of all 8 KV heads (4 query rows per head). 16 tasks per
//   thread rather than 4: on a shared 2-core VM whose cores run at different speeds, 128K-token
//   turbo3 decode took 7-12% less time (bench/results/2026-11-30-cpu-epyc-2core-decode-fused.md at
//   43812eb).
// 32768 keys: 32768 / kSplitKeys = 16 splits of 2048 keys. Each split costs a start-up (its
//   first block is not prefetched; its partial state is zeroed, written and merged; the parts
//   were not timed apart): 2048 rather than 256 keys per split took 36% less time for turbo3 at
//   8K and 5% at 32K, f16 9% / 3% (2 threads, dev/ab_bench.sh, 4 rounds). 16 threads at 8192
//   keys: 4 splits would idle 12 of them, so 16 splits (>= kMinSplitKeys each).
// Short context: 300 keys -> max(1, 300 / 256) = 1 split.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kvflash/problem.hpp"

namespace kvflash::cpu {

inline constexpr int32_t kDecodeMaxQTokens = 8;
inline constexpr int32_t kPrefillTileRows = 64;
inline constexpr int32_t kTasksPerThread = 16;
inline constexpr int64_t kMinSplitKeys = 256;
inline constexpr int64_t kSplitKeys = 2048;
inline constexpr int64_t kHeadBlockKeys = 64;  // = kKeyChunk: one chunk per head per block

struct CpuSchedule {
  int32_t group = 1;  // query heads per KV head
  int32_t n_kv_heads = 1;
  int32_t tile_tokens = 1;  // query tokens per tile
  int32_t n_tiles = 1;      // query tiles per sequence
  int32_t n_splits = 1;     // KV splits per (sequence, tile)
  int64_t n_tasks = 1;
  int32_t tile_rows() const { return tile_tokens * group; }  // rows per KV head
  int64_t task_rows() const { return int64_t{tile_rows()} * n_kv_heads; }
};

inline CpuSchedule cpu_schedule(const AttentionProblem& p, int32_t n_threads) {
  CpuSchedule s;
  s.group = p.group();
  s.n_kv_heads = p.n_kv_heads;
  s.tile_tokens = p.n_q_tokens <= kDecodeMaxQTokens
                      ? p.n_q_tokens
                      : std::clamp(kPrefillTileRows / s.group, 1, p.n_q_tokens);
  s.n_tiles = (p.n_q_tokens + s.tile_tokens - 1) / s.tile_tokens;
  const int64_t base = int64_t{p.n_seqs} * s.n_tiles;
  const int64_t want = int64_t{kTasksPerThread} * std::max(n_threads, 1);
  const int64_t one_per_thread = (std::max(n_threads, 1) + base - 1) / base;
  const int64_t max_splits =
      std::max<int64_t>(1, std::min(p.kv_capacity / kMinSplitKeys,
                                    std::max(one_per_thread, p.kv_capacity / kSplitKeys)));
  s.n_splits = static_cast<int32_t>(std::clamp<int64_t>((want + base - 1) / base, 1, max_splits));
  s.n_tasks = base * s.n_splits;
  return s;
}

}  // namespace kvflash::cpu
