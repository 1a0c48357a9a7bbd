// kvflash-plan's numbers against hand-computed ones. Row sizes (formats.hpp): f16 2 B/value;
// q8_0 34 B per 32 values; q4_0 18 B per 32; turbo4/3/2 66/50/34 B per 128 values.
#include <gtest/gtest.h>

#include <cstdint>

#include "plan/model.hpp"
#include "plan/report.hpp"

namespace kvflash::tools::plan {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

ModelShape preset(const char* name) {
  auto m = find_preset("--model", name);
  EXPECT_TRUE(m.ok()) << name;
  return *m;
}

TEST(PlanModel, Llama8BBytesPerToken) {
  const ModelShape m = preset("llama-3.1-8b");
  // f16/f16: 32 layers * 8 KV heads * (128 + 128) values * 2 B = 131072 B per token.
  EXPECT_EQ(token_bytes(m, KvType::f16, KvType::f16), 131072);
  // q8_0: 128 values = 4 blocks * 34 B = 136 B a row; 32 * 8 * (136 + 136) = 69632 B
  // (= 65536 values * 34/32 B).
  EXPECT_EQ(token_bytes(m, KvType::q8_0, KvType::q8_0), 69632);
  // q4_0: 4 blocks * 18 B = 72 B a row; 32 * 8 * 144 = 36864 B.
  EXPECT_EQ(token_bytes(m, KvType::q4_0, KvType::q4_0), 36864);
  // turbo4/3/2: one 128-value group of 66/50/34 B a row; 32 * 8 * 2 * 66 = 33792,
  // 32 * 8 * 2 * 50 = 25600, 32 * 8 * 2 * 34 = 17408.
  EXPECT_EQ(token_bytes(m, KvType::turbo4, KvType::turbo4), 33792);
  EXPECT_EQ(token_bytes(m, KvType::turbo3, KvType::turbo3), 25600);
  EXPECT_EQ(token_bytes(m, KvType::turbo2, KvType::turbo2), 17408);
  // Mixed q8_0 K / turbo3 V: 32 * 8 * (136 + 50) = 47616.
  EXPECT_EQ(token_bytes(m, KvType::q8_0, KvType::turbo3), 47616);
}

TEST(PlanModel, Llama8BMemoryAt128K) {
  const ModelShape m = preset("Llama-3.1-8B");
  // 131072 B/token * 131072 tokens = 2^34 B = 16 GiB; decode reads the same per token.
  EXPECT_EQ(sequence_bytes(m, KvType::f16, KvType::f16, 131072), 16 * kGiB);
  // Batch 4: 64 GiB.
  EXPECT_EQ(cache_bytes(m, KvType::f16, KvType::f16, 131072, 4), 64 * kGiB);
  // turbo3: 25600 * 131072 = 3355443200 B = 3.125 GiB.
  EXPECT_EQ(sequence_bytes(m, KvType::turbo3, KvType::turbo3, 131072), 3355443200);
}

TEST(PlanModel, Llama8BLongestContextFor80G) {
  const ModelShape m = preset("llama-3.1-8b");
  const int64_t budget = 80 * kGiB;  // 85899345920 B
  // f16: 85899345920 / 131072 = 655360 exactly.
  EXPECT_EQ(max_context(m, KvType::f16, KvType::f16, budget, 1), 655360);
  // q8_0: floor(85899345920 / 69632) = floor(1233618.8) = 1233618.
  EXPECT_EQ(max_context(m, KvType::q8_0, KvType::q8_0, budget, 1), 1233618);
  // turbo3: floor(85899345920 / 25600) = floor(3355443.2) = 3355443.
  EXPECT_EQ(max_context(m, KvType::turbo3, KvType::turbo3, budget, 1), 3355443);
  // Batch 4, f16: 20 GiB per sequence / 131072 = 163840.
  EXPECT_EQ(max_context(m, KvType::f16, KvType::f16, budget, 4), 163840);
  // Less than one token: 0.
  EXPECT_EQ(max_context(m, KvType::f16, KvType::f16, 131071, 1), 0);
}

TEST(PlanModel, Llama70B) {
  // 80 layers * 8 KV heads * 256 values * 2 B = 327680 B per token; 32768 tokens: 10 GiB.
  const ModelShape m = preset("llama-3.1-70b");
  EXPECT_EQ(token_bytes(m, KvType::f16, KvType::f16), 327680);
  EXPECT_EQ(sequence_bytes(m, KvType::f16, KvType::f16, 32768), 10 * kGiB);
}

TEST(PlanModel, Qwen3AndMistral) {
  // Qwen3-30B-A3B: 48 layers * 4 KV heads * 256 * 2 B = 98304 B per token.
  EXPECT_EQ(token_bytes(preset("qwen3-30b-a3b"), KvType::f16, KvType::f16), 98304);
  // Mistral-7B v0.3: like Llama-3.1-8B, 131072 B per token, no window: 16 GiB at 131072.
  const ModelShape mistral = preset("MISTRAL-7B");
  EXPECT_EQ(mistral.swa_layers, 0);
  EXPECT_EQ(sequence_bytes(mistral, KvType::f16, KvType::f16, 131072), 16 * kGiB);
}

TEST(PlanModel, GemmaSlidingWindowCaps) {
  const ModelShape m = preset("gemma-3-27b");
  ASSERT_EQ(m.swa_layers, 52);  // 5 of every 6 of 62 layers: 10 global, 52 local
  ASSERT_EQ(m.swa_window, 1024);
  // One layer, f16: 16 KV heads * 256 values * 2 B = 8192 B per token; all 62 layers: 507904.
  EXPECT_EQ(layer_token_bytes(m, KvType::f16, KvType::f16), 8192);
  EXPECT_EQ(token_bytes(m, KvType::f16, KvType::f16), 507904);
  // Within the window every layer holds every token: 507904 * 512 = 260046848.
  EXPECT_EQ(sequence_bytes(m, KvType::f16, KvType::f16, 512), 260046848);
  // At the window: 507904 * 1024 = 520093696.
  EXPECT_EQ(sequence_bytes(m, KvType::f16, KvType::f16, 1024), 520093696);
  // At 131072: 10 global layers * 8192 * 131072 + 52 local layers * 8192 * 1024
  //          = 10737418240 + 436207616 = 11173625856 B (10.41 GiB, not 62/10 times that).
  EXPECT_EQ(sequence_bytes(m, KvType::f16, KvType::f16, 131072), 11173625856);
  // Longest context for 80 GiB: past the window, (85899345920 - 436207616) / (10 * 8192)
  // = 85463138304 / 81920 = 1043251.2 -> 1043251.
  EXPECT_EQ(max_context(m, KvType::f16, KvType::f16, 80 * kGiB, 1), 1043251);
  // A budget below the window's cost: 100 MiB / 507904 = 206.4 -> 206, every layer uncapped.
  EXPECT_EQ(max_context(m, KvType::f16, KvType::f16, 100 << 20, 1), 206);
}

TEST(PlanModel, AllLayersWindowedIsUnbounded) {
  ModelShape m;
  m.layers = 4;
  m.q_heads = 8;
  m.kv_heads = 8;
  m.swa_layers = 4;
  m.swa_window = 4096;
  ASSERT_TRUE(validate(m).ok());
  // 4 * 8 * 256 * 2 = 16384 B per token; the cache stops at 4096 tokens: 64 MiB.
  EXPECT_EQ(sequence_bytes(m, KvType::f16, KvType::f16, 1 << 20), 64 << 20);
  EXPECT_FALSE(max_context(m, KvType::f16, KvType::f16, 1 * kGiB, 1).has_value());
  // 32 MiB holds 2048 tokens, short of the window.
  EXPECT_EQ(max_context(m, KvType::f16, KvType::f16, 32 << 20, 1), 2048);
}

TEST(PlanModel, DeepSeekMlaLatent) {
  const ModelShape m = preset("DeepSeek-V3");
  ASSERT_TRUE(m.mla);
  // One latent of 576 values per token per layer, V ignored:
  // f16: 576 * 2 = 1152 B per layer, * 61 layers = 70272 B per token, whatever the V type.
  EXPECT_EQ(layer_token_bytes(m, KvType::f16, KvType::f16), 1152);
  EXPECT_EQ(token_bytes(m, KvType::f16, KvType::f16), 70272);
  EXPECT_EQ(token_bytes(m, KvType::f16, KvType::f32), 70272);
  // 131072 tokens: 70272 * 131072 = 9210691584 B (8.58 GiB).
  EXPECT_EQ(sequence_bytes(m, KvType::f16, KvType::f16, 131072), 9210691584);
  // q8_0: 576 / 32 = 18 blocks * 34 B = 612 B per layer, * 61 = 37332 B per token.
  EXPECT_EQ(token_bytes(m, KvType::q8_0, KvType::q8_0), 37332);
  // turbo3: 576 pads to 640 values = 5 groups * 50 B = 250 B per layer, * 61 = 15250 B;
  // unpadded 576 * 50/128 = 225 B, so the pad ratio is 250 / 225 = 1.111.
  EXPECT_EQ(token_bytes(m, KvType::turbo3, KvType::turbo3), 15250);
  EXPECT_EQ(layer_token_bytes(m, KvType::turbo3, KvType::turbo3), 250);
  EXPECT_NEAR(250.0 / layer_token_bytes_unpadded(m, KvType::turbo3, KvType::turbo3), 250.0 / 225.0,
              1e-12);
}

TEST(PlanModel, PresetLookupIsCaseInsensitiveAndListsPresets) {
  EXPECT_TRUE(find_preset("--model", "LLAMA-3.1-70B").ok());
  EXPECT_TRUE(find_preset("--model", "deepseek-r1").ok());  // alias
  auto bad = find_preset("--model", "llama-9");
  ASSERT_FALSE(bad.ok());
  for (const Preset& p : presets())
    EXPECT_NE(bad.error().message.find(p.name), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("--model"), std::string::npos);
}

TEST(PlanModel, ValidateNamesTheProblem) {
  ModelShape m;
  m.layers = 8;
  m.q_heads = 32;
  m.kv_heads = 8;
  m.swa_layers = 9;
  m.swa_window = 128;
  EXPECT_NE(validate(m).message().find("--swa-layers"), std::string::npos);
  m.swa_layers = 0;
  m.mla = true;
  m.head_dim = {192, 128};
  EXPECT_TRUE(validate(m).ok());
}

TEST(PlanReport, RowsCarryRatiosAndPadding) {
  PlanRequest req;
  req.model = *find_preset("--model", "llama-3.1-8b");
  req.model.head_dim = {80, 80};  // q8_0 pads 80 values to 96: 3 blocks * 34 = 102 B a row
  req.contexts = {1000};
  req.budget = kGiB;
  req.pairs = {{KvType::f16, KvType::f16}, {KvType::q8_0, KvType::q8_0}};
  auto rows = compute_rows(req);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  const PlanRow& q8 = (*rows)[1];
  // 32 * 8 * (102 + 102) = 52224 B per token; f16: 32 * 8 * 160 * 2 = 81920.
  EXPECT_EQ(q8.bytes_per_token, 52224);
  EXPECT_EQ(q8.kv_bytes, 52224000);
  EXPECT_EQ(q8.read_bytes, 52224000);
  EXPECT_NEAR(q8.vs_f16, 81920.0 / 52224.0, 1e-12);
  EXPECT_NEAR(q8.pad, 96.0 / 80.0, 1e-12);
  EXPECT_EQ((*rows)[0].pad, 1.0);
  EXPECT_EQ(q8.max_context, kGiB / 52224);  // 20560
}

TEST(PlanReport, PairsDiagonalUnlessBothListsGiven) {
  const std::vector<KvType> k = {KvType::q8_0, KvType::q4_0};
  const std::vector<KvType> v = {KvType::turbo3};
  EXPECT_EQ(make_pairs({}, {}, false, false, false).size(), 6u);  // defaults, diagonal
  EXPECT_EQ(make_pairs({}, {}, false, false, false)[3], (TypePair{KvType::turbo4, KvType::turbo4}));
  EXPECT_EQ(make_pairs(k, {}, true, false, false),
            (std::vector<TypePair>{{KvType::q8_0, KvType::q8_0}, {KvType::q4_0, KvType::q4_0}}));
  EXPECT_EQ(
      make_pairs(k, v, true, true, false),
      (std::vector<TypePair>{{KvType::q8_0, KvType::turbo3}, {KvType::q4_0, KvType::turbo3}}));
  // MLA: only K counts.
  EXPECT_EQ(make_pairs(k, v, true, true, true),
            (std::vector<TypePair>{{KvType::q8_0, KvType::q8_0}, {KvType::q4_0, KvType::q4_0}}));
}

}  // namespace
}  // namespace kvflash::tools::plan
