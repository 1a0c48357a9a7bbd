// kvflash-plan run in-process: argument errors name the flag and exit 2, and every output format
// reads back (JSON through nlohmann::json, CSV by its header and column counts).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli_parse.hpp"
#include "plan/cli.hpp"

namespace kvflash::tools::plan {
namespace {

struct CliResult {
  int code;
  std::string out, err;
};

CliResult run(std::vector<std::string> args) {
  args.insert(args.begin(), "kvflash-plan");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  const int code = run_plan(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

// A usage error: exit 2, nothing on stdout, stderr names `flag` and contains `allowed`.
void expect_usage_error(const std::vector<std::string>& args, const std::string& flag,
                        const std::string& allowed) {
  const CliResult r = run(args);
  EXPECT_EQ(r.code, kExitUsage) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(allowed), std::string::npos) << r.err;
}

TEST(PlanCli, BadValuesNameTheFlag) {
  expect_usage_error({"--model", "llama-9"}, "--model", "Llama-3.1-8B");
  expect_usage_error({"--model", "llama-3.1-8b", "-c", "lots"}, "-c/--context", "1024-1048576*2");
  expect_usage_error({"--model", "llama-3.1-8b", "-c", "8589934592"}, "-c/--context", "4294967296");
  expect_usage_error({"--model", "llama-3.1-8b", "--budget", "80X"}, "--budget", "80G");
  expect_usage_error({"--model", "llama-3.1-8b", "--batch", "0"}, "--batch", "from 1 to");
  expect_usage_error({"--model", "llama-3.1-8b", "-ctk", "q5_1"}, "-ctk", "turbo3");
  expect_usage_error({"--model", "llama-3.1-8b", "-ctv", "q9"}, "-ctv", "q8_0");
  expect_usage_error({"--model", "llama-3.1-8b", "-o", "xml"}, "-o", "md, csv or json");
  expect_usage_error({"--layers", "32", "--heads", "32/7"}, "--heads", "KV_HEADS dividing");
  expect_usage_error({"--layers", "32", "--heads", "32/8", "--head-dim", "100"}, "--head-dim",
                     "576/512");
  expect_usage_error({"--layers", "0", "--heads", "32/8"}, "--layers", "from 1 to");
  expect_usage_error(
      {"--layers", "8", "--heads", "32/8", "--swa-layers", "9", "--swa-window", "512"},
      "--swa-layers", "from 0 to 8");
  expect_usage_error({"--layers", "8", "--heads", "32/8", "--swa-layers", "4"}, "--swa-window",
                     "go together");
  expect_usage_error({"--model", "gemma-3-27b", "--layers", "8"}, "--model", "one or the other");
  expect_usage_error({}, "--model", "--layers");
  // 65536 layers * 1024 heads * (576 + 512) * 4 B = 2.9e11 B/token; * 2^32 tokens > 2^63.
  expect_usage_error({"--layers", "65536", "--heads", "1024/1024", "--head-dim", "576/512", "-ctk",
                      "f32", "-c", "4294967296"},
                     "-c/--context", "overflow a 64-bit byte count");
  expect_usage_error({"--model", "llama-3.1-8b", "--frobnicate"}, "--frobnicate", "--help");
}

TEST(PlanCli, HelpExitsZeroAndListsPresets) {
  const CliResult r = run({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("DeepSeek-V3"), std::string::npos);
  EXPECT_NE(r.out.find("-ctk"), std::string::npos);
}

TEST(PlanCli, MarkdownForLlama8B) {
  const CliResult r = run({"--model", "llama-3.1-8b", "-c", "131072", "--budget", "80G"});
  ASSERT_EQ(r.code, 0) << r.err;
  // f16/f16: 131072 B/token, 16.00 GiB, 655360 tokens in 80 GiB, 16.00 GiB read per token.
  EXPECT_NE(r.out.find("|  131072 | f16    | f16    |  131072 |  16.00 |  1.00x |      655360 |    "
                       "      16.00 |"),
            std::string::npos)
      << r.out;
  // turbo3/turbo3: 25600 B/token, 3.125 GiB -> "3.12" (round half to even of the binary value),
  // 5.12x smaller than f16, 3355443 tokens.
  EXPECT_NE(r.out.find("| turbo3 | turbo3 |   25600 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("5.12x |     3355443 |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("| pad"), std::string::npos);  // nothing padded at head dim 128
}

TEST(PlanCli, MarkdownSaysMlaIgnoresV) {
  const CliResult r =
      run({"--model", "deepseek-v3", "-c", "4096", "-ctk", "turbo3", "-ctv", "f16"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("V type is ignored"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| turbo3 | turbo3 |   15250 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1.11x"), std::string::npos) << r.out;  // pad 640 / 576
}

TEST(PlanCli, JsonParsesBack) {
  const CliResult r = run({"--model", "gemma-3-27b", "-c", "512,131072", "--budget", "80GiB",
                           "-ctk", "f16,q8_0", "-ctv", "f16,turbo3", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["model"]["name"], "Gemma-3-27B");
  EXPECT_EQ(doc["model"]["swa_layers"], 52);
  EXPECT_EQ(doc["budget_bytes"], int64_t{80} << 30);
  ASSERT_EQ(doc["rows"].size(), 2u * 4u);  // 2 contexts x every pair of 2 K and 2 V types
  const auto& f16 = doc["rows"][4];        // context 131072, f16/f16
  EXPECT_EQ(f16["context"], 131072);
  EXPECT_EQ(f16["k_type"], "f16");
  EXPECT_EQ(f16["v_type"], "f16");
  EXPECT_EQ(f16["kv_bytes"], int64_t{11173625856});  // see plan_model_test: windowed layers
  EXPECT_EQ(f16["read_bytes_per_token"], int64_t{11173625856});
  EXPECT_EQ(f16["max_context"], 1043251);
  EXPECT_TRUE(f16["pad"].is_null());
  EXPECT_FALSE(doc["notes"].empty());
}

TEST(PlanCli, CsvParsesBack) {
  const CliResult r = run({"--layers", "40", "--heads", "40/8", "--head-dim", "80", "-c",
                           "4096-65536*4", "-ctk", "q8_0,turbo2", "-o", "csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> lines = split(r.out, '\n');
  ASSERT_EQ(lines.size(), 1u + 3u * 2u);  // header + 3 contexts x 2 diagonal pairs
  const std::string header =
      "model,context,batch,k_type,v_type,bytes_per_token,kv_bytes,vs_f16,budget_bytes,"
      "max_context,read_bytes_per_token,pad";
  EXPECT_EQ(lines[0], header);
  const size_t columns = split(header, ',').size();
  for (size_t i = 1; i < lines.size(); ++i) {
    // Empty cells (no budget) must still be there: count separators, not non-empty fields.
    EXPECT_EQ(static_cast<size_t>(std::count(lines[i].begin(), lines[i].end(), ',')) + 1, columns)
        << lines[i];
  }
  // q8_0 at head dim 80: 96 stored values = 3 blocks * 34 B = 102 B a row;
  // 40 * 8 * (102 + 102) = 65280 B per token; 4096 tokens: 267386880 B; pad 96/80 = 1.2;
  // vs f16: 40 * 8 * (80 + 80) * 2 = 102400 B per token, 102400 / 65280 = 1.5686...
  EXPECT_EQ(lines[1], "custom,4096,1,q8_0,q8_0,65280,267386880,1.5686274509803921,,,267386880,1.2");
  // The notes (padding) go to stderr, not into the CSV.
  EXPECT_NE(r.err.find("pad"), std::string::npos);
}

TEST(PlanCli, BatchMultipliesMemoryNotReads) {
  const CliResult r = run({"--model", "llama-3.1-8b", "-c", "131072", "--batch", "4", "--budget",
                           "80G", "-ctk", "f16", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto row = nlohmann::json::parse(r.out)["rows"][0];
  EXPECT_EQ(row["kv_bytes"], int64_t{64} << 30);              // 4 x 16 GiB
  EXPECT_EQ(row["read_bytes_per_token"], int64_t{16} << 30);  // one sequence
  EXPECT_EQ(row["max_context"], 163840);                      // 20 GiB per sequence
}

}  // namespace
}  // namespace kvflash::tools::plan
