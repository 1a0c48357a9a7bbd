// kvflash-quality on another backend: --backend, the query counts each allows (prefill-sized on
// CUDA), --needle-queries and its scoring of the last query, and the kernel each row names. The
// CUDA runs themselves need a device (without one the tool says so and fails before any work).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kvflash/device.hpp"
#include "quality/backend_run.hpp"
#include "quality/quality.hpp"

namespace kvflash::quality {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

Expected<QualityOptions> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kvflash-quality");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_quality_args(static_cast<int>(argv.size()), argv.data());
}

struct RunResult {
  int rc;
  std::string out, err;
};

RunResult run(std::vector<std::string> args) {
  args.insert(args.begin(), "kvflash-quality");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  const int rc = run_quality(static_cast<int>(argv.size()), argv.data(), out, err);
  return {rc, out.str(), err.str()};
}

TEST(QualityBackend, CpuByDefaultWithOneNeedleQuery) {
  auto o = parse({});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->suite.backend, Backend::cpu);
  EXPECT_EQ(o->suite.needle_queries, 1);
}

TEST(QualityBackend, CudaTakesPrefillSizedQueryCounts) {
  auto o = parse({"--backend", "cuda", "-n", "4096", "-d", "4096,8192", "--seqs", "1"});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->suite.backend, Backend::cuda);
  EXPECT_EQ(o->suite.n_q_tokens, kMaxQueriesCuda);
  EXPECT_GT(max_queries(Backend::cuda), max_queries(Backend::cpu));
  auto needle = parse({"--backend", "cuda", "--needle-queries", "2048", "--needle-depths", "4K"});
  ASSERT_TRUE(needle) << needle.error().message;
  EXPECT_EQ(needle->suite.needle_queries, 2048);
}

TEST(QualityBackend, ErrorsNameTheFlagAndTheBackendsRange) {
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"--backend", "gpu"}, {"--backend", "gpu", "cpu or cuda"}},
      {{"-n", "257", "-d", "1024"}, {"-n", "'257'", "1..256", "--backend cpu"}},
      {{"--backend", "cuda", "-n", "4097", "-d", "8192"}, {"-n", "'4097'", "1..4096"}},
      {{"--backend", "cuda", "-n", "2048", "-d", "1024"}, {"-d", "'1024'", "-n 2048"}},
      {{"--needle-queries", "0"}, {"--needle-queries", "1..256"}},
      {{"--backend", "cuda", "--needle-queries", "16", "--needle-depths", "8,1K"},
       {"--needle-depths", "'8'", "--needle-queries 16"}},
  };
  for (const auto& [args, expect] : cases) {
    const RunResult r = run(args);
    EXPECT_EQ(r.rc, 2) << args[0] << " " << args[1];
    EXPECT_TRUE(r.out.empty()) << args[0];
    for (const std::string& e : expect)
      EXPECT_THAT(r.err, HasSubstr(e)) << args[0] << " " << args[1];
  }
}

TEST(QualityBackend, CudaWithoutADeviceSaysSoBeforeAnyWork) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  const RunResult r = run({"--backend", "cuda", "-n", "64", "-d", "1024", "-q"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_THAT(r.err, HasSubstr("--backend cuda: no CUDA device"));
}

// The needle's query repeated over 256 positions of a 512-token haystack: only the last sees the
// whole haystack, and its outcome is the one-query outcome up to the kernels' rounding. The first
// copies see only about half of it, so scoring another row would lose needles.
TEST(QualityBackend, NeedleQueriesScoreTheLastQueryAndNameTheKernel) {
  const std::vector<std::string> base = {
      "-ctk", "f16", "--suite", "needle", "--needle-depths", "512", "--needle-trials",
      "4",    "-o",  "json",    "-q"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = base;
    a.insert(a.end(), more.begin(), more.end());
    return run(a);
  };
  const RunResult one = with({}), many = with({"--needle-queries", "256"});
  ASSERT_EQ(one.rc, 0) << one.err;
  ASSERT_EQ(many.rc, 0) << many.err;
  const nlohmann::json j1 = nlohmann::json::parse(one.out), jn = nlohmann::json::parse(many.out);
  ASSERT_EQ(j1["needle"].size(), 1u);
  ASSERT_EQ(jn["needle"].size(), 1u);
  EXPECT_EQ(jn["config"]["needle_queries"], 256);
  EXPECT_EQ(jn["config"]["backend"], "cpu");
  const auto &a = j1["needle"][0], &b = jn["needle"][0];
  EXPECT_EQ(b["result"], "PASS");
  EXPECT_NEAR(b["weight"].get<double>(), a["weight"].get<double>(), 1e-4);
  EXPECT_NEAR(b["weight_min"].get<double>(), a["weight_min"].get<double>(), 1e-4);
  EXPECT_NEAR(b["cos_min"].get<double>(), a["cos_min"].get<double>(), 1e-4);
  EXPECT_THAT(a["kernel"].get<std::string>(), StartsWith("cpu."));
  EXPECT_THAT(b["kernel"].get<std::string>(), StartsWith("cpu."));
}

TEST(QualityBackend, AttentionRowsNameTheirKernel) {
  const RunResult r =
      run({"-ctk", "q8_0", "--suite", "attention", "-d", "512", "-n", "16", "-o", "json", "-q"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["attention"].size(), 1u);
  EXPECT_THAT(j["attention"][0]["kernel"].get<std::string>(), StartsWith("cpu."));
}

}  // namespace
}  // namespace kvflash::quality
