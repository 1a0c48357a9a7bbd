#include "backends/cpu/cpu_schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace kvflash::cpu {
namespace {

AttentionProblem decode(int32_t kv_heads, int64_t kv) {
  AttentionProblem p;
  p.n_q_heads = 32;
  p.n_kv_heads = kv_heads;
  p.kv_capacity = kv;
  return p;
}

TEST(CpuSchedule, WorkedExampleFromTheHeader) {
  CpuSchedule s = cpu_schedule(decode(8, 131072), 2);
  EXPECT_EQ(s.tile_tokens, 1);
  EXPECT_EQ(s.n_tiles, 1);
  EXPECT_EQ(s.n_splits, 32);
  EXPECT_EQ(s.n_tasks, 32);
  EXPECT_EQ(s.tile_rows(), 4);
  EXPECT_EQ(s.task_rows(), 32);

  CpuSchedule one = cpu_schedule(decode(1, 131072), 2);
  EXPECT_EQ(one.n_splits, 32);
  EXPECT_EQ(one.tile_rows(), 32);
  EXPECT_EQ(one.task_rows(), 32);
}

TEST(CpuSchedule, ShortContextIsNotSplitBelowTheMinimum) {
  EXPECT_EQ(cpu_schedule(decode(1, 300), 16).n_splits, 1);
  EXPECT_EQ(cpu_schedule(decode(1, 1), 16).n_splits, 1);
  EXPECT_EQ(cpu_schedule(decode(1, 1024), 16).n_splits, 4);
  // Splits of kSplitKeys keys where that keeps every thread busy, shorter ones where it does not.
  EXPECT_EQ(cpu_schedule(decode(1, 8192), 2).n_splits, 4);
  EXPECT_EQ(cpu_schedule(decode(1, 32768), 2).n_splits, 16);
  EXPECT_EQ(cpu_schedule(decode(1, 8192), 16).n_splits, 16);
  EXPECT_EQ(cpu_schedule(decode(1, 4096), 16).n_splits, 16);
  // A batch of sequences already gives enough tasks.
  AttentionProblem b = decode(8, 1 << 20);
  b.n_seqs = 64;
  EXPECT_EQ(cpu_schedule(b, 2).n_splits, 1);
}

TEST(CpuSchedule, DecodeKeepsEveryQueryTokenInOneTile) {
  AttentionProblem p = decode(8, 4096);
  p.n_q_tokens = kDecodeMaxQTokens;
  CpuSchedule s = cpu_schedule(p, 2);
  EXPECT_EQ(s.n_tiles, 1);
  EXPECT_EQ(s.tile_rows(), kDecodeMaxQTokens * 4);
}

TEST(CpuSchedule, PrefillTilesCoverEveryToken) {
  AttentionProblem p = decode(8, 4096);
  for (int32_t nq : {9, 16, 17, 100, 4096}) {
    p.n_q_tokens = nq;
    CpuSchedule s = cpu_schedule(p, 2);
    EXPECT_EQ(s.tile_tokens, std::min(kPrefillTileRows / 4, nq));
    EXPECT_GE(int64_t{s.n_tiles} * s.tile_tokens, nq);
    EXPECT_LT(int64_t{s.n_tiles - 1} * s.tile_tokens, nq);
  }
  // A group larger than the tile still gets one token per tile.
  p.n_q_heads = 128;
  p.n_kv_heads = 1;
  p.n_q_tokens = 9;
  EXPECT_EQ(cpu_schedule(p, 2).tile_tokens, 1);
}

}  // namespace
}  // namespace kvflash::cpu
