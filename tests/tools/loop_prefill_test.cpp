// kvflash-loop's prefill mode (--chunk N > 1) on the CPU: its options, its step schedule (what is
// appended, at which lengths the attention runs), its FLOP and tokens/s arithmetic, the ratios to
// f16 and the report. The run itself needs a CUDA device (without one it says so and fails).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "kvflash/device.hpp"
#include "kvflash/graph_runner.hpp"
#include "loop/cli.hpp"
#include "loop/prefill.hpp"

namespace kvflash::tools::loop {
namespace {

using ::testing::HasSubstr;

Expected<LoopArgs> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kvflash-loop");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_loop_args(static_cast<int>(argv.size()), argv.data());
}

std::vector<std::pair<KvType, KvType>> pairs_of(const LoopConfig& c) {
  std::vector<std::pair<KvType, KvType>> p;
  for (const gpu::KvLayerTypes t : c.prefill_types) p.emplace_back(t.k, t.v);
  return p;
}

TEST(LoopPrefillCli, ChunkOneIsTheDecodeModeAsBefore) {
  auto a = parse({"--layers", "3", "-ctk", "f16,q8_0,turbo3", "-ctv", "q4_0"});
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->config.chunk, 1);
  EXPECT_EQ(a->config.seqs, 1);
  EXPECT_TRUE(a->config.prefill_types.empty());
  EXPECT_EQ(a->config.k_types, (std::vector<KvType>{KvType::f16, KvType::q8_0, KvType::turbo3}));
}

TEST(LoopPrefillCli, WithoutTypesComparesTheDefaultsStartingWithF16) {
  auto a = parse({"--chunk", "2048", "--seqs", "2"});
  ASSERT_TRUE(a) << a.error().message;
  const LoopConfig& c = a->config;
  EXPECT_EQ(c.chunk, 2048);
  EXPECT_EQ(c.seqs, 2);
  ASSERT_EQ(c.prefill_types.size(), default_prefill_types().size());
  EXPECT_EQ(c.prefill_types.front().k, KvType::f16);
  EXPECT_EQ(c.prefill_types.front().v, KvType::f16);
  // Each type in every layer in turn: the decode mode's per-layer lists are not used.
  EXPECT_TRUE(c.k_types.empty());
}

TEST(LoopPrefillCli, OneSideGivesKEqualsVBothGiveEveryPair) {
  using enum KvType;
  auto k_only = parse({"--chunk", "512", "--layers", "3", "-ctk", "f16,q8_0"});
  ASSERT_TRUE(k_only) << k_only.error().message;
  EXPECT_EQ(pairs_of(k_only->config),
            (std::vector<std::pair<KvType, KvType>>{{f16, f16}, {q8_0, q8_0}}));
  auto v_only = parse({"--chunk", "512", "-ctv", "turbo3"});
  ASSERT_TRUE(v_only) << v_only.error().message;
  EXPECT_EQ(pairs_of(v_only->config), (std::vector<std::pair<KvType, KvType>>{{turbo3, turbo3}}));
  // A list of two K types for 3 layers is a per-layer error in the decode mode, a sweep here.
  auto both = parse({"--chunk", "512", "--layers", "3", "-ctk", "f16,q8_0", "-ctv", "q4_0,f16"});
  ASSERT_TRUE(both) << both.error().message;
  EXPECT_EQ(pairs_of(both->config), (std::vector<std::pair<KvType, KvType>>{
                                        {f16, q4_0}, {f16, f16}, {q8_0, q4_0}, {q8_0, f16}}));
}

TEST(LoopPrefillCli, RejectsWhatItCannotRunWithTheFlagNamed) {
  for (const char* bad : {"0", "65537", "x"}) {
    auto a = parse({"--chunk", bad});
    ASSERT_FALSE(a) << bad;
    EXPECT_THAT(a.error().message, HasSubstr("--chunk")) << bad;
  }
  auto seqs = parse({"--seqs", "4"});  // decode steps run one sequence
  ASSERT_FALSE(seqs);
  EXPECT_THAT(seqs.error().message, HasSubstr("--seqs"));
  EXPECT_THAT(seqs.error().message, HasSubstr("--chunk"));
  auto zero = parse({"--chunk", "16", "--seqs", "0"});
  ASSERT_FALSE(zero);
  EXPECT_THAT(zero.error().message, HasSubstr("--seqs"));
  // 2^32 tokens of context leave no room for the chunk.
  auto full = parse({"--chunk", "2048", "-d", "4096,4294967296"});
  ASSERT_FALSE(full);
  EXPECT_THAT(full.error().message, HasSubstr("-d/--depth and --chunk"));
  EXPECT_THAT(full.error().message, HasSubstr("4294969344"));
  EXPECT_TRUE(parse({"--chunk", "2048", "-d", "4294965248"}));  // exactly 2^32 with the chunk
}

TEST(LoopPrefillSchedule, FillAppendsChunksUpToTheDepth) {
  EXPECT_EQ(fill_appends(4096, 2048), (std::vector<int32_t>{2048, 2048}));
  EXPECT_EQ(fill_appends(5000, 2048), (std::vector<int32_t>{2048, 2048, 904}));
  EXPECT_EQ(fill_appends(100, 2048), (std::vector<int32_t>{100}));
  EXPECT_TRUE(fill_appends(0, 16).empty());
  for (const int64_t depth : {1, 17, 1000, 262144, 262145}) {
    const std::vector<int32_t> n = fill_appends(depth, 2048);
    EXPECT_EQ(std::accumulate(n.begin(), n.end(), int64_t{0}), depth);
    for (const int32_t x : n) {
      EXPECT_GE(x, 1);
      EXPECT_LE(x, 2048);
    }
  }
}

TEST(LoopPrefillSchedule, EveryStepAppendsOneChunkAfterTheDepth) {
  const ChunkStep s = chunk_step(8192, 2048, 3);
  EXPECT_EQ(s.kv_before, 8192);
  EXPECT_EQ(s.kv_after, 8192 + 2048);
  EXPECT_EQ(s.appended, 3 * 2048);  // per layer, all sequences
  EXPECT_EQ(s.first_query, 8192);
  EXPECT_EQ(s.last_query, 8192 + 2047);
  // The problem's rule: the queries are the last n_q_tokens positions of kv_after.
  EXPECT_EQ(s.kv_after - s.first_query, 2048);
  // The caches hold the largest depth plus one chunk, whatever the order of the depths.
  EXPECT_EQ(prefill_capacity({32768, 4096, 8192}, 2048), 32768 + 2048);
  // Timed graph steps are replays only: the warm-up covers the runner's eager steps and capture.
  EXPECT_GT(kPrefillWarmupSteps, GraphStepper::kEagerRunsBeforeCapture);
}

// (query, key) pairs counted one by one: query i of the chunk at position d + i sees keys 0..d+i.
int64_t brute_pairs(int64_t depth, int64_t chunk) {
  int64_t n = 0;
  for (int64_t pq = depth; pq < depth + chunk; ++pq)
    for (int64_t pk = 0; pk < depth + chunk; ++pk) n += pk <= pq ? 1 : 0;
  return n;
}

TEST(LoopPrefillMath, FlopsCountTheVisibleCausalPairsOfEveryLayer) {
  plan::ModelShape m;
  m.layers = 32;
  m.q_heads = 32;
  m.kv_heads = 8;
  m.head_dim = {128, 128};
  for (const auto& [depth, chunk] : {std::pair<int64_t, int32_t>{0, 16}, {100, 16}, {4096, 64}}) {
    const double per_pair = 2.0 * (128 + 128) * 32 /*q heads*/ * 2 /*seqs*/ * 32 /*layers*/;
    EXPECT_DOUBLE_EQ(chunk_flops(m, 2, chunk, depth), per_pair * double(brute_pairs(depth, chunk)))
        << depth << " " << chunk;
  }
  // A 2048-token chunk after 8192 tokens: N d + N (N + 1) / 2 pairs per head.
  m.head_dim = {192, 128};
  const double pairs = 2048.0 * 8192 + 2048.0 * 2049 / 2;
  EXPECT_DOUBLE_EQ(chunk_flops(m, 1, 2048, 8192), 2.0 * (192 + 128) * 32 * 32 * pairs);
}

TEST(LoopPrefillMath, TokensPerSecondAndRatiosToF16) {
  EXPECT_DOUBLE_EQ(prefill_tokens_per_second(2048, 2, 100.0), 2 * 2048 / 0.1);
  using enum KvType;
  auto row = [](KvType k, KvType v, int64_t depth, bool graphs, double tps) {
    PrefillRow r;
    r.types = {k, v};
    r.depth = depth;
    r.graphs = graphs;
    r.tokens_per_s = tps;
    return r;
  };
  std::vector<PrefillRow> rows = {
      row(q8_0, q8_0, 4096, false, 1500), row(f16, f16, 4096, false, 1000),
      row(f16, f16, 4096, true, 2000),    row(q8_0, q8_0, 4096, true, 1000),
      row(q8_0, q8_0, 8192, false, 900),  row(f16, q8_0, 4096, false, 500)};
  set_f16_ratios(rows);
  EXPECT_DOUBLE_EQ(rows[0].vs_f16, 1.5);  // same depth, same mode
  EXPECT_DOUBLE_EQ(rows[1].vs_f16, 1.0);
  EXPECT_DOUBLE_EQ(rows[3].vs_f16, 0.5);    // against the graph row, not the eager one
  EXPECT_TRUE(std::isnan(rows[4].vs_f16));  // no f16 at 8192
  EXPECT_DOUBLE_EQ(rows[5].vs_f16, 0.5);    // f16 K alone is not f16
}

PrefillReport fake_report() {
  PrefillReport rep;
  rep.capacity = 10240;
  PrefillRow f;
  f.types = {KvType::f16, KvType::f16};
  f.depth = 8192;
  f.ms_per_step = 20.0;
  f.tokens_per_s = prefill_tokens_per_second(2048, 1, f.ms_per_step);
  f.attention_ms = 16.0;
  f.tflops = 123.4;
  f.kernel = "cuda.prefill";
  PrefillRow q = f;
  q.types = {KvType::q4_0, KvType::q4_0};
  q.graphs = true;
  q.kernel_nodes = 96;
  rep.rows = {f, q};
  set_f16_ratios(rep.rows);
  rep.counters.captures = 1;
  return rep;
}

TEST(LoopPrefillReport, TablesCarryEveryColumnAndLeaveMissingRatiosEmpty) {
  auto a = parse({"--chunk", "2048", "-d", "8192"});
  ASSERT_TRUE(a) << a.error().message;
  const PrefillReport rep = fake_report();
  const nlohmann::json j =
      nlohmann::json::parse(render_prefill(a->config, rep, OutputFormat::json));
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["k"], "f16");
  EXPECT_EQ(j[0]["graphs"], "off");
  EXPECT_DOUBLE_EQ(j[0]["tokens/s"].get<double>(), 2048 / 0.02);
  EXPECT_DOUBLE_EQ(j[0]["vs f16"].get<double>(), 1.0);
  EXPECT_TRUE(j[0]["graph kernels"].is_null());
  EXPECT_EQ(j[1]["v"], "q4_0");
  EXPECT_TRUE(j[1]["vs f16"].is_null());  // no f16 row in graph mode
  EXPECT_EQ(j[1]["graph kernels"], 96);
  const std::string md = render_prefill(a->config, rep, OutputFormat::md);
  EXPECT_THAT(md, HasSubstr("chunks of 2048 tokens x 1 sequence(s)"));
  EXPECT_THAT(md, HasSubstr("caches of 10240 tokens"));
  EXPECT_THAT(md, HasSubstr("| cuda.prefill"));
  EXPECT_THAT(md, HasSubstr("1 captures"));
}

TEST(LoopPrefillCli, WithoutADeviceSaysSoAndFails) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  std::ostringstream out, err;
  const char* argv[] = {"kvflash-loop", "--layers", "2", "-d", "1024", "--chunk", "64"};
  EXPECT_EQ(run_loop_cli(7, argv, out, err), kExitFailure);
  EXPECT_THAT(err.str(), HasSubstr("CUDA device"));
  EXPECT_TRUE(out.str().empty());
}

}  // namespace
}  // namespace kvflash::tools::loop
