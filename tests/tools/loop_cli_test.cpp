// kvflash-loop's parsing and its memory arithmetic run everywhere; the loop itself needs a CUDA
// device (tests/gpu/loop_test.cpp runs a small one).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "kvflash/device.hpp"
#include "loop/cli.hpp"
#include "loop/loop.hpp"
#include "plan/model.hpp"

namespace kvflash::tools::loop {
namespace {

Expected<LoopArgs> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kvflash-loop");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_loop_args(static_cast<int>(argv.size()), argv.data());
}

TEST(LoopCli, DefaultsAreA32LayerLlamaShapeInQ8_0) {
  auto a = parse({});
  ASSERT_TRUE(a) << a.error().message;
  const LoopConfig& c = a->config;
  EXPECT_EQ(c.model.layers, 32);
  EXPECT_EQ(c.model.q_heads, 32);
  EXPECT_EQ(c.model.kv_heads, 8);
  EXPECT_EQ(c.model.head_dim.k, 128);
  ASSERT_EQ(c.k_types.size(), 32u);
  EXPECT_EQ(c.k_types[31], KvType::q8_0);
  EXPECT_EQ(c.depths, (std::vector<int64_t>{4096, 32768, 131072, 262144}));
  EXPECT_TRUE(c.graphs_on && c.graphs_off);
}

TEST(LoopCli, TypesPerLayerOrOneForAll) {
  auto a = parse({"--layers", "3", "-ctk", "f16,q8_0,turbo3", "-ctv", "q4_0"});
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->config.k_types, (std::vector<KvType>{KvType::f16, KvType::q8_0, KvType::turbo3}));
  EXPECT_EQ(a->config.v_types, (std::vector<KvType>(3, KvType::q4_0)));

  auto bad = parse({"--layers", "3", "-ctk", "f16,q8_0"});
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, ::testing::HasSubstr("-ctk"));
  EXPECT_THAT(bad.error().message, ::testing::HasSubstr("expected one (for every layer) or 3"));
}

TEST(LoopCli, RejectsWhatItCannotRunWithTheFlagNamed) {
  auto g = parse({"--graphs", "maybe"});
  ASSERT_FALSE(g);
  EXPECT_THAT(g.error().message, ::testing::HasSubstr("--graphs"));
  auto both = parse({"--model", "llama-3.1-8b", "--layers", "4"});
  ASSERT_FALSE(both);
  EXPECT_THAT(both.error().message, ::testing::HasSubstr("--model"));
  auto n = parse({"-n", "0"});
  ASSERT_FALSE(n);
  EXPECT_THAT(n.error().message, ::testing::HasSubstr("-n/--tokens"));
}

TEST(LoopMemory, PlannedBytesAreKvflashPlansNumber) {
  plan::ModelShape m;
  m.layers = 32;
  m.q_heads = 32;
  m.kv_heads = 8;
  m.head_dim = {128, 128};
  const int64_t ctx = 262144;
  const std::vector<KvType> k(32, KvType::q8_0), v(32, KvType::q4_0);
  // q8_0: 4 blocks of 34 B per row, q4_0: 4 of 18 B; 8 heads, 32 layers.
  EXPECT_EQ(planned_kv_bytes(m, k, v, ctx), int64_t{32} * ctx * 8 * (136 + 72));
  EXPECT_EQ(planned_kv_bytes(m, k, v, ctx),
            plan::cache_bytes(m, KvType::q8_0, KvType::q4_0, ctx, 1));
  // Mixed layers: the sum of the layers.
  std::vector<KvType> mixed = k;
  mixed[0] = KvType::f16;
  EXPECT_EQ(planned_kv_bytes(m, mixed, v, ctx) - planned_kv_bytes(m, k, v, ctx),
            ctx * 8 * (256 - 136));
}

TEST(LoopCli, WithoutADeviceSaysSoAndFails) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  std::ostringstream out, err;
  const char* argv[] = {"kvflash-loop", "--layers", "2", "-d", "1024"};
  EXPECT_EQ(run_loop_cli(5, argv, out, err), kExitFailure);
  EXPECT_THAT(err.str(), ::testing::HasSubstr("CUDA device"));
}

}  // namespace
}  // namespace kvflash::tools::loop
