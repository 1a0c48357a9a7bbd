// The SVG writer: a well-formed document (every element closed, in order), one polyline per
// series, tick labels on the log2 depth axis, escaped text; and the charts made from rows.
#include <gtest/gtest.h>

#include <regex>
#include <vector>

#include "bench/plot.hpp"
#include "bench/report.hpp"

namespace kvflash::bench {
namespace {

// Minimal XML check: tags nest and close in order, attribute quotes balance, no stray '<' or '&'
// in text. Enough to catch a writer that forgets a close tag or an escape.
bool well_formed(const std::string& s, std::string* why) {
  std::vector<std::string> stack;
  size_t i = 0;
  if (s.rfind("<?xml", 0) == 0) i = s.find("?>") + 2;
  while (i < s.size()) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      const std::string ent = s.substr(i, semi == std::string::npos ? 0 : semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;")
        return *why = "bad entity at " + std::to_string(i), false;
      i = semi + 1;
      continue;
    }
    if (s[i] != '<') {
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool in_quote = false;
    while (j < s.size() && (in_quote || s[j] != '>')) {
      if (s[j] == '"') in_quote = !in_quote;
      if (!in_quote && s[j] == '<') return *why = "'<' inside a tag at " + std::to_string(j), false;
      ++j;
    }
    if (j == s.size()) return *why = "unterminated tag", false;
    const std::string tag = s.substr(i + 1, j - i - 1);
    const std::string name =
        tag.substr(tag[0] == '/' ? 1 : 0, tag.find_first_of(" />", 1) - (tag[0] == '/' ? 1 : 0));
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != name)
        return *why = "close </" + name + "> does not match", false;
      stack.pop_back();
    } else if (tag.back() != '/') {
      stack.push_back(name);
    }
    i = j + 1;
  }
  if (!stack.empty()) return *why = "unclosed <" + stack.back() + ">", false;
  return true;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(BenchPlot, WellFormedOnePolylinePerSeries) {
  Chart c;
  c.title = "KV bandwidth vs depth, heads 32/8, D 128, cpu <&>";
  c.y_label = "KV GB/s";
  c.series = {{"f16/f16", {{1024, 10.5}, {4096, 12}, {1048576, 13}}},
              {"q4_0/q4_0", {{1024, 5}, {4096, 6}, {1048576, 7.25}}},
              {"q8_0/turbo3", {{4096, 8}}}};
  const std::string svg = render_svg({c});
  std::string why;
  EXPECT_TRUE(well_formed(svg, &why)) << why;
  EXPECT_EQ(count(svg, "<polyline"), 3u);
  EXPECT_EQ(count(svg, "<svg"), 1u);
  for (const char* label : {">1K<", ">4K<", ">1M<", ">f16/f16<", ">q8_0/turbo3<", ">KV GB/s<"})
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  EXPECT_NE(svg.find("cpu &lt;&amp;&gt;"), std::string::npos);
  // Every coordinate is a finite number.
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(BenchPlot, SinglePointAndEmptyChartsStayWellFormed) {
  Chart one;
  one.series = {{"f16/f16", {{64, 0.5}}}};
  Chart zero;
  zero.series = {{"f16/f16", {{64, 0}}}};
  std::string why;
  const std::string svg = render_svg({one, zero, Chart{}});
  EXPECT_TRUE(well_formed(svg, &why)) << why;
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(BenchPlot, DepthLabels) {
  EXPECT_EQ(depth_label(512), "512");
  EXPECT_EQ(depth_label(4096), "4K");
  EXPECT_EQ(depth_label(1 << 20), "1M");
  EXPECT_EQ(depth_label(1536), "1536");
}

TEST(BenchPlot, ChartsFromRows) {
  auto row = [](KvType k, int64_t depth, int32_t nq, double us) {
    AttentionProblem p;
    p.k_type = p.v_type = k;
    p.kv_capacity = depth;
    p.n_q_tokens = nq;
    Timing t{"cpu.x", Backend::cpu, 2, 1, {us}};
    return make_row(p, {}, t, 20.0);
  };
  const std::vector<Row> rows = {row(KvType::f16, 1024, 1, 100), row(KvType::f16, 4096, 1, 400),
                                 row(KvType::q4_0, 1024, 1, 50), row(KvType::q4_0, 4096, 1, 200),
                                 row(KvType::f16, 4096, 512, 9000)};
  const std::vector<Chart> charts = make_charts(rows);
  ASSERT_EQ(charts.size(), 2u);  // decode (GB/s) and prefill (TFLOP/s)
  ASSERT_EQ(charts[0].series.size(), 2u);
  EXPECT_EQ(charts[0].series[0].label, "f16/f16");
  EXPECT_NE(charts[0].title.find("heads 32/8"), std::string::npos);
  EXPECT_NE(charts[0].title.find("D 128"), std::string::npos);
  EXPECT_NE(charts[0].title.find("cpu"), std::string::npos);
  // f16 at 1024: 1024 * 8 * 512 bytes in 100 us.
  EXPECT_DOUBLE_EQ(charts[0].series[0].points[0].second, 1024.0 * 8 * 512 / 100e-6 / 1e9);
  EXPECT_EQ(charts[1].y_label, "TFLOP/s");
  ASSERT_EQ(charts[1].series.size(), 1u);
}

}  // namespace
}  // namespace kvflash::bench
