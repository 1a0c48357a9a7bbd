// A tiny sweep end to end, in-process: every output format reads back with the expected rows and
// fields, the plot has one line per K/V pair, and per-row failures are reported, not fatal.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "bench/options.hpp"
#include "bench_test_util.hpp"
#include "kvflash/device.hpp"

namespace kvflash::bench {
namespace {

using testing::quick;
using testing::run_tool;

const std::vector<std::string> kSweep = {"-ctk", "f16,q4_0", "-d", "64,128", "-r", "2"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// RFC 4180 fields: commas inside quotes, "" for a quote.
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"')
      out.back() += line[++i];
    else if (c == '"')
      quoted = !quoted;
    else if (c == ',' && !quoted)
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

TEST(BenchSweep, JsonParsesWithExpectedRowsAndFields) {
  const auto r = run_tool(quick(with(kSweep, {"-o", "json"})));
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // stdout is pure JSON
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 4u);
  std::set<std::pair<std::string, int64_t>> seen;
  for (const auto& row : j) {
    for (const char* key :
         {"backend",    "kernel",      "k_type",     "v_type", "n_q_heads", "n_kv_heads",
          "head_dim_k", "head_dim_v",  "batch",      "depth",  "n_q",       "threads",
          "splits",     "us_median",   "us_min",     "us_max", "kv_bytes",  "gbps",
          "tflops",     "mem_bw_gbps", "pct_mem_bw", "seed",   "host_us"})
      EXPECT_TRUE(row.contains(key)) << key;
    EXPECT_EQ(row["backend"], "cpu");
    EXPECT_EQ(row["k_type"], row["v_type"]);
    EXPECT_EQ(row["n_q_heads"], 32);
    EXPECT_EQ(row["n_q"], 1);
    EXPECT_EQ(row["reps"], 2);
    EXPECT_GE(row["splits"].get<int64_t>(), 1);
    EXPECT_TRUE(row["kernel"].get<std::string>().rfind("cpu.", 0) == 0);
    const double med = row["us_median"], lo = row["us_min"], hi = row["us_max"];
    EXPECT_GT(med, 0);
    EXPECT_LE(lo, med);
    EXPECT_LE(med, hi);
    EXPECT_GT(row["gbps"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(row["mem_bw_gbps"].get<double>(), 10.0);
    EXPECT_NEAR(row["pct_mem_bw"].get<double>(), 10.0 * row["gbps"].get<double>(), 1e-9);
    seen.insert({row["k_type"].get<std::string>(), row["depth"].get<int64_t>()});
  }
  EXPECT_EQ(seen, (std::set<std::pair<std::string, int64_t>>{
                      {"f16", 64}, {"f16", 128}, {"q4_0", 64}, {"q4_0", 128}}));
  // The header (machine, bandwidth) went to stderr, keeping stdout parseable.
  EXPECT_NE(r.err.find("memory read bandwidth"), std::string::npos);
  // KV bytes: depth 64, 8 KV heads, f16 rows of 256 bytes for K and V.
  EXPECT_EQ(j[0]["kv_bytes"].get<double>(), 64.0 * 8 * 512);
}

// --ragged runs one packed batch per K/V pair on the CPU and reports TFLOP/s over each sequence's
// visible pairs.
TEST(BenchSweep, RaggedBatchRunsAndCountsItsOwnFlops) {
  const auto r = run_tool(quick({"--backend", "cpu", "-ctk", "f16", "--heads", "4/2", "-r", "2",
                                 "--warmup", "0", "--ragged", "1:64,0:10,40:40", "-o", "json"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["test"], "ragged 3");
  EXPECT_EQ(j[0]["batch"], 3);
  EXPECT_EQ(j[0]["n_q"], 40);
  EXPECT_EQ(j[0]["depth"], 64);
  // 64 + 0 + 40 * 41 / 2 visible pairs, 4 query heads, 2 * (128 + 128) flops each.
  EXPECT_DOUBLE_EQ(j[0]["flops"].get<double>(), (64.0 + 820.0) * 4 * 512);
  EXPECT_NEAR(j[0]["tflops"].get<double>(),
              j[0]["flops"].get<double>() / (j[0]["us_median"].get<double>() * 1e-6) / 1e12, 1e-9);
}

// A batch whose sequences have the same queries (one each) and their own lengths is a batch of
// decode steps: GB/s over each sequence's own tokens, not the longest one's.
TEST(BenchSweep, BatchWithOwnLengthsIsDecode) {
  const auto r =
      run_tool(quick({"--backend", "cpu", "-ctk", "q8_0", "--heads", "4/2", "-r", "2", "--warmup",
                      "0", "--ragged", "1:64,1:10,1:40", "--page-size", "16", "-o", "json"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["test"], "decode paged 16, 3 lens");
  EXPECT_EQ(j[0]["n_q"], 1);
  EXPECT_EQ(j[0]["depth"], 64);
  // 114 tokens of 2 KV heads, q8_0 K and V rows of 4 blocks of 34 bytes.
  EXPECT_DOUBLE_EQ(j[0]["kv_bytes"].get<double>(), 114.0 * 2 * 2 * 136);
  EXPECT_GT(j[0]["gbps"].get<double>(), 0);
}

TEST(BenchSweep, CsvReadsBack) {
  const auto r = run_tool(quick(with(kSweep, {"-o", "csv"})));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream in(r.out);
  std::vector<std::vector<std::string>> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(csv_fields(line));
  ASSERT_EQ(lines.size(), 5u);  // header + 4 rows
  const std::vector<std::string>& header = lines[0];
  auto col = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << name;
    return static_cast<size_t>(it - header.begin());
  };
  for (size_t i = 1; i < lines.size(); ++i) {
    ASSERT_EQ(lines[i].size(), header.size()) << "row " << i;
    for (const char* num : {"depth", "n_q", "us_median", "us_min", "us_max", "gbps", "tflops",
                            "kv_bytes", "pct_mem_bw"}) {
      const std::string& f = lines[i][col(num)];
      size_t used = 0;
      EXPECT_NO_THROW((void)std::stod(f, &used)) << num << " = '" << f << "'";
      EXPECT_EQ(used, f.size()) << num << " = '" << f << "'";
    }
  }
  EXPECT_EQ(lines[1][col("k_type")], "f16");
  EXPECT_EQ(lines[1][col("depth")], "64");
  EXPECT_EQ(lines[4][col("k_type")], "q4_0");
  EXPECT_EQ(lines[4][col("depth")], "128");
}

TEST(BenchSweep, MarkdownTableWithHeaderAndPlot) {
  const std::string svg =
      (std::filesystem::temp_directory_path() / "kvflash_bench_test_plot.svg").string();
  std::remove(svg.c_str());
  // Measures the read bandwidth this time (no --mem-bw); the 1 MiB cache keeps the buffer small.
  const auto r = run_tool(with(kSweep, {"--llc-bytes", "1M", "--no-progress", "--plot", svg}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("memory read bandwidth: CPU "), std::string::npos) << r.out;
  // The GPU figure is measured where a CUDA device exists, "n/a" elsewhere.
  EXPECT_NE(r.out.find(cuda_device_count() > 0 ? " GB/s\n" : "GPU n/a"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" · GPU "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| backend | kernel"), std::string::npos);
  EXPECT_NE(r.out.find("KV GB/s"), std::string::npos);
  EXPECT_EQ(r.out.find("TFLOP/s |"), std::string::npos);  // no prefill rows, no TFLOP/s column
  std::ifstream f(svg);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("<?xml", 0), 0u);
  size_t polylines = 0;
  for (size_t pos = 0; (pos = text.find("<polyline", pos)) != std::string::npos; ++pos) ++polylines;
  EXPECT_EQ(polylines, 2u);  // f16/f16 and q4_0/q4_0
  EXPECT_NE(text.find("heads 32/8"), std::string::npos);
  std::remove(svg.c_str());
}

TEST(BenchSweep, PngThroughRsvgConvert) {
  if (!on_path("rsvg-convert")) GTEST_SKIP() << "rsvg-convert (librsvg2-bin) is not installed";
  const std::string png =
      (std::filesystem::temp_directory_path() / "kvflash_bench_test_plot.png").string();
  std::remove(png.c_str());
  const auto r = run_tool(quick({"-ctk", "f16", "-d", "64", "-r", "1", "--plot", png}));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ifstream f(png, std::ios::binary);
  char magic[4] = {};
  f.read(magic, 4);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  EXPECT_FALSE(std::filesystem::exists(png + ".svg.tmp"));  // the intermediate SVG is removed
  std::remove(png.c_str());
}

TEST(BenchSweep, PrefillRowsReportTflops) {
  const auto r = run_tool(
      quick({"-ctk", "q8_0", "-d", "32,64", "-n", "16", "-r", "1", "--warmup", "0", "-o", "json"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["test"], "prefill 16");
  EXPECT_GT(j[0]["tflops"].get<double>(), 0);
  EXPECT_TRUE(j[0]["kernel"].get<std::string>().find("prefill") != std::string::npos);
}

TEST(BenchSweep, DepthBelowQueryTokensIsSkippedWithANote) {
  const auto r =
      run_tool(quick({"-ctk", "f16", "-d", "8,64", "-n", "16", "-r", "1", "-o", "json"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).size(), 1u);
  EXPECT_NE(r.err.find("skipped depth 8 with -n 16"), std::string::npos) << r.err;
}

TEST(BenchSweep, RowFailuresAreReportedNotFatal) {
  // 9 GiB of f32 KV for one row: over the tool's 8 GiB cap, refused before allocating; the other
  // row still runs and the exit code says something failed.
  const auto r = run_tool(
      quick({"-ctk", "f32", "--heads", "9/9", "-d", "64,1048576", "-r", "1", "-o", "json"}));
  EXPECT_EQ(r.rc, kExitFailure);
  EXPECT_EQ(nlohmann::json::parse(r.out).size(), 1u);
  EXPECT_NE(r.err.find("1 of 2 rows failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("GiB"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvflash::bench
