// The counts speeds are computed from, against hand-computed cases: visible (query, key) pairs
// under problem.hpp's causal and window rules, attention flops, KV bytes, rotation copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "bench/metrics.hpp"
#include "bench/runner.hpp"

namespace kvflash::bench {
namespace {

TEST(BenchMetrics, VisiblePairs) {
  EXPECT_EQ(visible_pairs(1, 100, true, 0), 100);          // decode sees the whole cache
  EXPECT_EQ(visible_pairs(4, 4, true, 0), 1 + 2 + 3 + 4);  // fresh prompt: a triangle
  EXPECT_EQ(visible_pairs(2, 5, true, 0), 4 + 5);          // queries at positions 3 and 4
  EXPECT_EQ(visible_pairs(3, 5, false, 0), 15);            // no mask: everything
  EXPECT_EQ(visible_pairs(4, 4, true, 2), 1 + 2 + 2 + 2);  // window 2: itself and one before
  EXPECT_EQ(visible_pairs(2, 5, false, 2), 3 + 2);     // no causal cut: keys after the query count
  EXPECT_EQ(visible_pairs(3, 2, true, 0), 0 + 1 + 2);  // a query before position 0 sees nothing
  EXPECT_EQ(visible_pairs(512, 512, true, 0), 512 * 513 / 2);
  // Chunked prefill (kvflash-bench -n 2048 -d 8192): every query sees the 6144 keys before the
  // chunk, and the chunk's own triangle.
  EXPECT_EQ(visible_pairs(2048, 8192, true, 0), 2048 * 6144 + 2048 * 2049 / 2);
  EXPECT_EQ(visible_pairs(2048, 8192, false, 0), 2048 * 8192);
  // A window of 1000 keys inside a chunk: each query sees itself and the 999 before it.
  EXPECT_EQ(visible_pairs(2048, 8192, true, 1000), 2048 * 1000);
  // A window longer than the cache changes nothing; without the causal cut, keys after the
  // query count too: query i (position 6144 + i) sees keys 6144 + i - 999 .. 8191.
  EXPECT_EQ(visible_pairs(2048, 8192, true, 100000), visible_pairs(2048, 8192, true, 0));
  EXPECT_EQ(visible_pairs(2048, 8192, false, 1000), 2048 * 1000 + 2047 * 2048 / 2);
}

// A ragged batch counts each sequence's own visible pairs and tokens (hand-computed here, causal,
// 32 query heads of D 128: 512 flops per pair and head).
TEST(BenchMetrics, RaggedFlopsAndBytesPerSequence) {
  AttentionProblem p;
  const RaggedBatch b{{2, 0, 1, 3}, {5, 7, 1, 3}};
  apply_ragged(p, b);
  EXPECT_TRUE(p.ragged_q);
  EXPECT_EQ(p.n_seqs, 4);
  EXPECT_EQ(p.n_q_tokens, 3);
  EXPECT_EQ(p.kv_capacity, 7);
  // Queries at 3, 4 (4 + 5 keys); none; at 0 (1 key); at 0, 1, 2 (1 + 2 + 3): 16 pairs.
  EXPECT_DOUBLE_EQ(attention_flops(p, b), 16.0 * 512 * 32);
  // 16 tokens of 8 KV heads, f16 K and V rows of 256 bytes each.
  EXPECT_DOUBLE_EQ(kv_bytes(p, b), 16.0 * 8 * 512);
  p.causal = false;  // every query sees its whole cache: 2 * 5 + 1 * 1 + 3 * 3 = 20 pairs
  EXPECT_DOUBLE_EQ(attention_flops(p, b), 20.0 * 512 * 32);
  // Equal sequences give the uniform count.
  AttentionProblem u;
  u.n_seqs = 3;
  u.n_q_tokens = 4;
  u.kv_capacity = 100;
  const RaggedBatch same{{4, 4, 4}, {100, 100, 100}};
  AttentionProblem r = u;
  apply_ragged(r, same);
  EXPECT_FALSE(r.ragged_q);  // the same queries per sequence: a batch with its own lengths
  EXPECT_DOUBLE_EQ(attention_flops(r, same), attention_flops(u));
  EXPECT_DOUBLE_EQ(kv_bytes(r, same), kv_bytes(u));
  EXPECT_DOUBLE_EQ(attention_flops(u, RaggedBatch{}), attention_flops(u));
}

TEST(BenchMetrics, Issue39BatchIsSixteenSequencesOfOneTo4096QueriesOver1KTo32K) {
  const RaggedBatch b = issue39_batch();
  ASSERT_EQ(b.q_lens.size(), 16u);
  ASSERT_EQ(b.kv_lens.size(), 16u);
  EXPECT_EQ(*std::min_element(b.q_lens.begin(), b.q_lens.end()), 1);
  EXPECT_EQ(*std::max_element(b.q_lens.begin(), b.q_lens.end()), 4096);
  EXPECT_EQ(*std::min_element(b.kv_lens.begin(), b.kv_lens.end()), 1024);
  EXPECT_EQ(*std::max_element(b.kv_lens.begin(), b.kv_lens.end()), 32768);
  for (size_t s = 0; s < 16; ++s) EXPECT_LE(b.q_lens[s], b.kv_lens[s]) << s;
}

// A server's decode step: one query per sequence, each over its own tokens; not ragged queries,
// so it is timed and reported as decode (GB/s over each sequence's tokens).
TEST(BenchMetrics, ServingBatchesAreDecodeStepsOverDrawnLengths) {
  for (auto [n, lo, hi] : {std::tuple{64, 1024, 32768}, std::tuple{256, 1024, 4096}}) {
    const RaggedBatch b = serving_batch(n, lo, hi);
    ASSERT_EQ(b.q_lens.size(), size_t(n));
    EXPECT_TRUE(b.same_queries());
    EXPECT_EQ(std::count(b.q_lens.begin(), b.q_lens.end(), 1), n);
    const auto [mn, mx] = std::minmax_element(b.kv_lens.begin(), b.kv_lens.end());
    EXPECT_GE(*mn, lo);
    EXPECT_LE(*mx, hi);
    // Drawn, not one length: the spread covers most of the range.
    EXPECT_GT(*mx - *mn, (hi - lo) / 2);
    EXPECT_EQ(serving_batch(n, lo, hi).kv_lens, b.kv_lens);  // the same batch every time
    AttentionProblem p;
    apply_ragged(p, b);
    EXPECT_FALSE(p.ragged_q);
    EXPECT_TRUE(is_decode(p));
    EXPECT_EQ(p.kv_capacity, *mx);
    double tokens = 0;
    for (int64_t len : b.kv_lens) tokens += double(len);
    EXPECT_DOUBLE_EQ(kv_bytes(p, b), tokens * 8 * 512);  // 8 KV heads, f16 rows of 256 bytes
  }
  EXPECT_FALSE((RaggedBatch{{0, 0}, {5, 6}}.same_queries()));  // no queries: still ragged
  EXPECT_FALSE((RaggedBatch{{1, 2}, {5, 6}}.same_queries()));
}

TEST(BenchMetrics, AttentionFlops) {
  AttentionProblem p;  // 32/8 heads, D 128, causal
  p.kv_capacity = 1024;
  // Decode: 2 * (128 + 128) flops per key, 1024 keys, 32 query heads.
  EXPECT_DOUBLE_EQ(attention_flops(p), 2.0 * 256 * 1024 * 32);
  // Prefill of a fresh 512-token prompt, MLA dims, 2 sequences of 4 heads:
  // 2 * (576 + 512) * (512 * 513 / 2) * 4 * 2 = 2176 * 131328 * 8.
  p.n_q_tokens = 512;
  p.kv_capacity = 512;
  p.n_q_heads = 4;
  p.n_kv_heads = 1;
  p.n_seqs = 2;
  p.head_dim = {576, 512};
  EXPECT_DOUBLE_EQ(attention_flops(p), 2286157824.0);
  p.causal = false;
  EXPECT_DOUBLE_EQ(attention_flops(p), 2.0 * 1088 * 512 * 512 * 4 * 2);
}

TEST(BenchMetrics, KvBytes) {
  AttentionProblem p;
  p.n_seqs = 2;
  p.kv_capacity = 1000;
  p.k_type = KvType::f16;   // 128 values * 2 bytes = 256
  p.v_type = KvType::q4_0;  // 4 blocks of 18 bytes = 72
  EXPECT_DOUBLE_EQ(kv_bytes(p), 2.0 * 1000 * 8 * (256 + 72));
  p.head_dim = {64, 64};
  p.k_type = p.v_type = KvType::turbo3;  // one whole 128-value group: 50 bytes, padding read too
  EXPECT_DOUBLE_EQ(kv_bytes(p), 2.0 * 1000 * 8 * (50 + 50));
  EXPECT_TRUE(is_decode(p));
  p.n_q_tokens = 9;
  EXPECT_FALSE(is_decode(p));
}

TEST(BenchMetrics, RotationCopies) {
  const int64_t mib = 1 << 20;
  EXPECT_EQ(rotation_copies(4 * mib, 32 * mib, 100, 8192 * mib), 16);   // 2 x LLC / copy
  EXPECT_EQ(rotation_copies(4 * mib, 32 * mib, 6, 8192 * mib), 6);      // no more than the calls
  EXPECT_EQ(rotation_copies(4 * mib, 32 * mib, 100, 20 * mib), 5);      // nor than the budget
  EXPECT_EQ(rotation_copies(512 * mib, 32 * mib, 100, 8192 * mib), 1);  // already > 2 x LLC
  EXPECT_EQ(rotation_copies(512 * mib, 32 * mib, 100, 100 * mib), 1);   // at least one
}

}  // namespace
}  // namespace kvflash::bench
