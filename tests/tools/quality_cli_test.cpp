// The command line of kvflash-quality: flags, errors that name the flag, and every output format
// read back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "quality/quality.hpp"

namespace kvflash::quality {
namespace {

using ::testing::HasSubstr;

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

Expected<QualityOptions> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kvflash-quality");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_quality_args(static_cast<int>(argv.size()), argv.data());
}

// A tiny suite: 2 x 2 pairs, one depth, one needle per depth.
const std::vector<std::string> kTiny = {"-ctk", "f16,q8_0",        "-ctv",  "f16,turbo3",      "-d",
                                        "512",  "--needle-depths", "1K,2K", "--needle-trials", "1",
                                        "-q"};

std::vector<std::string> tiny(std::vector<std::string> more) {
  std::vector<std::string> a = kTiny;
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

TEST(QualityCli, Defaults) {
  auto o = parse({});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->suite.pairs, default_pairs());
  EXPECT_EQ(o->suite.pairs.size(), 10u);
  EXPECT_EQ(o->suite.seed, kDefaultSeed);
  EXPECT_EQ(o->suite.depths, (std::vector<int64_t>{1024, 8192, 32768}));
  EXPECT_EQ(o->suite.needle_depths.back(), 1 << 20);
  EXPECT_EQ(o->format, tools::OutputFormat::md);
}

TEST(QualityCli, PairsAreEveryKWithEveryV) {
  auto o = parse({"-ctk", "q8_0,f16", "-ctv", "turbo4,turbo3,q4_0"});
  ASSERT_TRUE(o) << o.error().message;
  ASSERT_EQ(o->suite.pairs.size(), 6u);
  EXPECT_EQ(o->suite.pairs[0], (KvPair{KvType::q8_0, KvType::turbo4}));
  EXPECT_EQ(o->suite.pairs[5], (KvPair{KvType::f16, KvType::q4_0}));
  auto k_only = parse({"-ctk=turbo2"});  // V defaults to the K list
  ASSERT_TRUE(k_only) << k_only.error().message;
  EXPECT_EQ(k_only->suite.pairs, (std::vector<KvPair>{{KvType::turbo2, KvType::turbo2}}));
  auto long_names = parse({"--cache-type-k", "q4_0", "--cache-type-v", "f16", "--seed", "7"});
  ASSERT_TRUE(long_names) << long_names.error().message;
  EXPECT_EQ(long_names->suite.pairs, (std::vector<KvPair>{{KvType::q4_0, KvType::f16}}));
  EXPECT_EQ(long_names->suite.seed, 7u);
}

TEST(QualityCli, FastIsSmallerAndExplicitFlagsWin) {
  auto fast = parse({"--fast"});
  ASSERT_TRUE(fast) << fast.error().message;
  EXPECT_EQ(fast->suite.depths.size(), 1u);
  EXPECT_EQ(fast->suite.needle_depths.size(), 3u);
  auto both = parse({"--fast", "-d", "2048,4096"});
  ASSERT_TRUE(both) << both.error().message;
  EXPECT_EQ(both->suite.depths, (std::vector<int64_t>{2048, 4096}));
}

TEST(QualityCli, ErrorsNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"-ctk", "q5_0"}, {"-ctk", "q5_0", "turbo3"}},
      {{"-ctv", "f16,fp8"}, {"-ctv", "fp8", "turbo4"}},
      {{"-d", "abc"}, {"-d", "abc", "1024-1048576*2"}},
      {{"--heads", "8/3"}, {"--heads", "8/3", "dividing"}},
      {{"--head-dim", "100"}, {"--head-dim", "100", "576/512"}},
      {{"--needle-depths", "0"}, {"--needle-depths", "'0'"}},
      {{"-n", "0"}, {"-n", "1..256"}},
      {{"--seqs", "65"}, {"--seqs", "65", "1..64"}},
      {{"-n", "8", "-d", "4"}, {"-d", "'4'", "-n 8"}},
      {{"--needle-weight", "1.5"}, {"--needle-weight", "1.5", "0.5..0.999"}},
      {{"--needle-trials", "0"}, {"--needle-trials", "1..64"}},
      {{"--suite", "speed"}, {"--suite", "speed", "attention"}},
      {{"-o", "xml"}, {"-o", "xml", "md, csv or json"}},
      {{"-t", "-2"}, {"-t"}},
      {{"--seed", "abc"}, {"--seed", "abc", "integer"}},
      {{"--seed", "-3"}, {"--seed", "-3"}},
      {{"--no-such-flag"}, {"--no-such-flag"}},
  };
  for (const auto& [args, expect] : cases) {
    const RunResult r = run(args);
    EXPECT_EQ(r.rc, 2) << args[0];
    EXPECT_TRUE(r.out.empty()) << args[0];
    for (const std::string& e : expect) EXPECT_THAT(r.err, HasSubstr(e)) << args[0];
  }
}

TEST(QualityCli, Help) {
  const RunResult r = run({"--help"});
  EXPECT_EQ(r.rc, 0);
  for (const char* flag : {"--ctk", "--ctv", "--depths", "--needle-depths", "--seed", "--fast",
                           "--output", "--head-dim"})
    EXPECT_THAT(r.out, HasSubstr(flag));
}

TEST(QualityCli, MarkdownHasTheSeedAndBothTables) {
  const RunResult r = run(tiny({"--seed", "1234"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("seed 1234"));
  EXPECT_THAT(r.out, HasSubstr("--seed 1234"));
  EXPECT_THAT(r.out, HasSubstr("| k "));
  EXPECT_THAT(r.out, HasSubstr("## Attention"));
  EXPECT_THAT(r.out, HasSubstr("## Needle retrieval"));
  EXPECT_THAT(r.out, HasSubstr("| q8_0 | turbo3 |"));
  // Another seed, other numbers; the same seed, the same report.
  EXPECT_NE(run(tiny({"--seed", "99"})).out, r.out);
  EXPECT_EQ(run(tiny({"--seed", "1234"})).out, r.out);
}

TEST(QualityCli, JsonParsesBack) {
  const RunResult r = run(tiny({"-o", "json", "--seed", "5"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["seed"], 5);
  EXPECT_EQ(j["tool"], "kvflash-quality");
  ASSERT_EQ(j["attention"].size(), 4u);
  ASSERT_EQ(j["needle"].size(), 8u);  // 4 pairs x 2 depths
  const auto& a = j["attention"][3];
  EXPECT_EQ(a["k"], "q8_0");
  EXPECT_EQ(a["v"], "turbo3");
  EXPECT_EQ(a["depth"], 512);
  EXPECT_TRUE(a["nmse"].is_number());
  EXPECT_TRUE(a["kl_max"].is_number());
  EXPECT_LT(a["nmse"].get<double>(), 1.0);
  const auto& n = j["needle"][0];
  EXPECT_TRUE(n["weight"].is_number());
  EXPECT_EQ(n["passed"], "1/1");
  EXPECT_EQ(n["result"], "PASS");
  EXPECT_EQ(j["config"]["needle_pass_cosine"], 0.9);
}

std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> f(1);
  bool quoted = false;
  for (char ch : line) {
    if (ch == '"')
      quoted = !quoted;
    else if (ch == ',' && !quoted)
      f.emplace_back();
    else
      f.back() += ch;
  }
  return f;
}

TEST(QualityCli, CsvParsesBack) {
  const RunResult r = run(tiny({"-o", "csv"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const std::vector<std::string> header = csv_fields(line);
  EXPECT_EQ(header.front(), "test");
  EXPECT_EQ(header.back(), "seed");
  int attention = 0, needle = 0;
  while (std::getline(in, line)) {
    const std::vector<std::string> f = csv_fields(line);
    ASSERT_EQ(f.size(), header.size()) << line;
    EXPECT_EQ(f.back(), std::to_string(kDefaultSeed));
    if (f[0] == "attention") {
      ++attention;
      EXPECT_NO_THROW((void)std::stod(f[7])) << line;  // nmse
    } else {
      EXPECT_EQ(f[0], "needle");
      ++needle;
    }
  }
  EXPECT_EQ(attention, 4);
  EXPECT_EQ(needle, 8);
}

}  // namespace
}  // namespace kvflash::quality
