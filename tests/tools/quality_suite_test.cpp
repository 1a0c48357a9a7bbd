// The quality suite end to end on small problems: the ordering of the formats, the reference on the
// original data, needle retrieval, other head dims and query counts.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "quality/suite.hpp"

namespace kvflash::quality {
namespace {

using enum KvType;

std::map<std::string, AttentionRow> by_pair(const std::vector<AttentionRow>& rows) {
  std::map<std::string, AttentionRow> m;
  for (const AttentionRow& r : rows)
    m.emplace(std::string(to_string(r.pair.k)) + "/" + std::string(to_string(r.pair.v)), r);
  return m;
}

TEST(QualitySuite, FormatsOrderByPrecision) {
  SuiteConfig c;
  c.pairs = {{f32, f32},       {f16, f16},       {q8_0, q8_0},    {q4_0, q4_0},
             {turbo4, turbo4}, {turbo3, turbo3}, {turbo2, turbo2}};
  c.depths = {2048};
  auto rows = run_attention_suite(c);
  ASSERT_TRUE(rows) << rows.error().message;
  ASSERT_EQ(rows->size(), c.pairs.size());
  auto m = by_pair(*rows);
  // f32 K/V: only the kernel's float arithmetic differs from the float64 reference on the same
  // (original) data, and the attention distribution is the same.
  EXPECT_LT(m["f32/f32"].nmse, 1e-9);
  EXPECT_LT(m["f32/f32"].kl_max, 1e-12);
  EXPECT_GT(m["f16/f16"].cos_min, 0.9999);
  for (const char* metric : {"nmse", "kl_mean"}) {
    const auto get = [&](const char* pair) {
      return std::string(metric) == "nmse" ? m[pair].nmse : m[pair].kl_mean;
    };
    EXPECT_LT(get("f32/f32"), get("f16/f16")) << metric;
    EXPECT_LT(get("f16/f16"), get("q8_0/q8_0")) << metric;
    EXPECT_LT(get("q8_0/q8_0"), get("q4_0/q4_0")) << metric;
    EXPECT_LT(get("turbo4/turbo4"), get("turbo3/turbo3")) << metric;
    EXPECT_LT(get("turbo3/turbo3"), get("turbo2/turbo2")) << metric;
    // f16 is far better than turbo2, not marginally.
    EXPECT_LT(get("f16/f16") * 1000, get("turbo2/turbo2")) << metric;
  }
  EXPECT_GT(m["f16/f16"].cos_mean, m["turbo2/turbo2"].cos_mean);
  EXPECT_DOUBLE_EQ(m["q8_0/q8_0"].bits, 8.5);
  EXPECT_DOUBLE_EQ(m["turbo3/turbo3"].bits, 3.125);
}

TEST(QualitySuite, KlDependsOnKeysOnly) {
  SuiteConfig c;
  c.pairs = {{q8_0, f16}, {q8_0, turbo2}, {f16, q4_0}};
  c.depths = {1024};
  auto rows = run_attention_suite(c);
  ASSERT_TRUE(rows) << rows.error().message;
  auto m = by_pair(*rows);
  EXPECT_EQ(m["q8_0/f16"].kl_mean, m["q8_0/turbo2"].kl_mean);
  EXPECT_LT(m["q8_0/f16"].nmse, m["q8_0/turbo2"].nmse);  // V precision shows in the output
  EXPECT_LT(m["f16/q4_0"].kl_max, 1e-5);
}

TEST(QualitySuite, OtherHeadDimsAndQueryCounts) {
  SuiteConfig c;
  c.pairs = {{f16, f16}, {turbo3, q8_0}};
  c.heads = {{4, 1}};
  c.head_dims = {{576, 512}, {64, 64}};
  c.depths = {300};
  c.n_seqs = 2;
  c.n_q_tokens = 4;  // causal: the first query sees 297 keys
  auto rows = run_attention_suite(c);
  ASSERT_TRUE(rows) << rows.error().message;
  ASSERT_EQ(rows->size(), 4u);
  for (const AttentionRow& r : *rows) {
    EXPECT_TRUE(std::isfinite(r.nmse) && std::isfinite(r.kl_max));
    if (r.pair.k == f16)
      EXPECT_LT(r.nmse, 1e-5) << r.dims.k;
    else
      EXPECT_GT(r.nmse, 1e-4) << r.dims.k;
  }
}

TEST(QualitySuite, NeedleRetrievedWithF16AtModerateDepth) {
  SuiteConfig c;
  c.pairs = {{f16, f16}, {turbo2, turbo2}};
  c.needle_depths = {65536};
  c.needle_trials = 4;
  auto rows = run_needle_suite(c);
  ASSERT_TRUE(rows) << rows.error().message;
  ASSERT_EQ(rows->size(), 2u);
  const NeedleRow& f = (*rows)[0];
  EXPECT_EQ(f.pair, (KvPair{f16, f16}));
  EXPECT_EQ(f.trials, 4);
  EXPECT_TRUE(f.pass());
  EXPECT_GT(f.cos_min, 0.99);
  EXPECT_GT(f.weight_min, 0.5);
  // f16 keys change the needle's weight by rounding only.
  EXPECT_NEAR(f.weight_mean, f.weight_ref, 0.01);
  EXPECT_GT(f.cos_ref, 0.99);
  // 2-bit keys lose part of the needle's weight (seeded: the same numbers every run).
  const NeedleRow& t = (*rows)[1];
  EXPECT_LT(t.weight_mean, f.weight_mean - 0.05);
  EXPECT_EQ(t.weight_ref, f.weight_ref);  // the same needles and queries for every pair
}

TEST(QualitySuite, NeedleDepthsShareOneHaystack) {
  SuiteConfig c;
  c.pairs = {{q8_0, q4_0}};
  c.needle_depths = {4096, 1024, 4096};  // unsorted, duplicated
  c.needle_trials = 2;
  EXPECT_EQ(needle_items(c), 2);
  auto rows = run_needle_suite(c);
  ASSERT_TRUE(rows) << rows.error().message;
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].depth, 1024);
  EXPECT_EQ((*rows)[1].depth, 4096);
  for (const NeedleRow& r : *rows) EXPECT_TRUE(r.pass()) << r.depth;
}

}  // namespace
}  // namespace kvflash::quality
