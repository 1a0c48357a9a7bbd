#include "bench/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "bench/metrics.hpp"

namespace kvflash::bench {
namespace {

using tools::Cell;
using tools::Column;

std::string pair_name(const AttentionProblem& p) {
  return fmt::format("{}/{}", to_string(p.k_type), to_string(p.v_type));
}

// Median with its range, at a precision that keeps 3-4 significant digits.
std::string us_cell(const Timing& t) {
  const int prec = t.median() < 100 ? 1 : 0;
  return fmt::format("{:.{}f} ({:.{}f}-{:.{}f})", t.median(), prec, t.us.front(), prec, t.us.back(),
                     prec);
}

}  // namespace

Row make_row(const AttentionProblem& p, const RaggedBatch& ragged, Timing t, double mem_bw_gbps) {
  Row r{p, ragged, std::move(t), 0, 0, mem_bw_gbps, std::nullopt};
  const double s = r.timing.median() * 1e-6;
  r.gbps = kv_bytes(p, ragged) / s / 1e9;
  r.tflops = attention_flops(p, ragged) / s / 1e12;
  if (mem_bw_gbps > 0) r.pct_mem_bw = 100.0 * r.gbps / mem_bw_gbps;
  return r;
}

std::string test_name(const AttentionProblem& p, const RaggedBatch& ragged) {
  const std::string paged = p.page_size > 0 ? fmt::format(" paged {}", p.page_size) : "";
  if (p.ragged_q) return fmt::format("ragged {}{}", p.n_seqs, paged);
  const std::string lens = ragged.empty() ? "" : fmt::format(", {} lens", p.n_seqs);
  if (p.n_q_tokens == 1) return "decode" + paged + lens;
  if (is_decode(p)) return fmt::format("spec {}{}{}", p.n_q_tokens, paged, lens);
  return fmt::format("prefill {}{}{}", p.n_q_tokens, paged, lens);
}

std::string heads_name(const AttentionProblem& p) {
  return fmt::format("{}/{}", p.n_q_heads, p.n_kv_heads);
}

std::string dims_name(const AttentionProblem& p) {
  return p.head_dim.k == p.head_dim.v ? fmt::format("{}", p.head_dim.k)
                                      : fmt::format("{}/{}", p.head_dim.k, p.head_dim.v);
}

tools::Table machine_table(const std::vector<Row>& rows, const std::string& cpu, uint64_t seed) {
  tools::Table t({{"backend"},    {"kernel"},     {"cpu_info"},   {"k_type"},     {"v_type"},
                  {"n_q_heads"},  {"n_kv_heads"}, {"head_dim_k"}, {"head_dim_v"}, {"batch"},
                  {"depth"},      {"n_q"},        {"test"},       {"threads"},    {"splits"},
                  {"reps"},       {"copies"},     {"us_median"},  {"us_min"},     {"us_max"},
                  {"kv_bytes"},   {"gbps"},       {"flops"},      {"tflops"},     {"mem_bw_gbps"},
                  {"pct_mem_bw"}, {"seed"},       {"host_us"}});
  for (const Row& r : rows) {
    const AttentionProblem& p = r.problem;
    auto i = [](auto v) { return Cell{static_cast<int64_t>(v)}; };
    t.add_row({std::string(to_string(r.timing.backend)),
               r.timing.kernel,
               cpu,
               std::string(to_string(p.k_type)),
               std::string(to_string(p.v_type)),
               i(p.n_q_heads),
               i(p.n_kv_heads),
               i(p.head_dim.k),
               i(p.head_dim.v),
               i(p.n_seqs),
               i(p.kv_capacity),
               i(p.n_q_tokens),
               test_name(p, r.ragged),
               i(r.timing.threads),
               i(r.timing.splits),
               i(r.timing.us.size()),
               i(r.timing.copies),
               r.timing.median(),
               r.timing.us.front(),
               r.timing.us.back(),
               kv_bytes(p, r.ragged),
               r.gbps,
               attention_flops(p, r.ragged),
               r.tflops,
               r.mem_bw_gbps > 0 ? Cell{r.mem_bw_gbps} : Cell{},
               r.pct_mem_bw ? Cell{*r.pct_mem_bw} : Cell{},
               i(seed),
               r.timing.host_us.empty() ? Cell{} : Cell{Timing::median_of(r.timing.host_us)}});
  }
  return t;
}

tools::Table people_table(const std::vector<Row>& rows, bool show_threads) {
  const bool any_decode =
      std::any_of(rows.begin(), rows.end(), [](const Row& r) { return is_decode(r.problem); });
  const bool any_prefill =
      std::any_of(rows.begin(), rows.end(), [](const Row& r) { return !is_decode(r.problem); });
  const bool show_batch =
      std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.problem.n_seqs != 1; });
  std::vector<Column> cols = {{"backend", 0, false}, {"kernel", 0, false}, {"K", 0, false},
                              {"V", 0, false},       {"heads", 0, true},   {"D", 0, true}};
  if (show_batch) cols.push_back({"batch", 0, true});
  cols.push_back({"depth", 0, true});
  cols.push_back({"test", 0, false});
  if (show_threads) cols.push_back({"threads", 0, true});
  cols.push_back({"µs/call (min-max)", 0, true});
  if (any_decode) cols.push_back({"KV GB/s", 1, true});
  if (any_prefill) cols.push_back({"TFLOP/s", 3, true});
  if (any_decode) cols.push_back({"% mem BW", 1, true});

  tools::Table t(cols);
  for (const Row& r : rows) {
    const AttentionProblem& p = r.problem;
    const bool dec = is_decode(p);
    std::vector<Cell> c = {
        std::string(to_string(r.timing.backend)), r.timing.kernel, std::string(to_string(p.k_type)),
        std::string(to_string(p.v_type)),         heads_name(p),   dims_name(p)};
    if (show_batch) c.push_back(int64_t{p.n_seqs});
    c.push_back(int64_t{p.kv_capacity});
    c.push_back(test_name(p, r.ragged));
    if (show_threads) c.push_back(int64_t{r.timing.threads});
    c.push_back(us_cell(r.timing));
    if (any_decode) c.push_back(dec ? Cell{r.gbps} : Cell{});
    if (any_prefill) c.push_back(dec ? Cell{} : Cell{r.tflops});
    if (any_decode)
      c.push_back(!dec ? Cell{} : r.pct_mem_bw ? Cell{*r.pct_mem_bw} : Cell{std::string("n/a")});
    t.add_row(std::move(c));
  }
  return t;
}

std::vector<Chart> make_charts(const std::vector<Row>& rows) {
  std::vector<Chart> charts;
  for (const bool decode : {true, false}) {
    std::vector<const Row*> sel;
    for (const Row& r : rows)
      if (is_decode(r.problem) == decode) sel.push_back(&r);
    if (sel.empty()) continue;
    // Each shape field: in the title when all rows share it, else in every series label.
    using Field = std::string (*)(const Row&);
    const std::vector<std::pair<std::string, Field>> fields = {
        {"heads ", [](const Row& r) { return heads_name(r.problem); }},
        {"D ", [](const Row& r) { return dims_name(r.problem); }},
        {"batch ", [](const Row& r) { return std::to_string(r.problem.n_seqs); }},
        {"", [](const Row& r) { return test_name(r.problem, r.ragged); }},
        {"threads ", [](const Row& r) { return std::to_string(r.timing.threads); }},
        {"", [](const Row& r) { return std::string(to_string(r.timing.backend)); }}};
    std::string title = decode ? "KV bandwidth vs depth" : "prefill TFLOP/s vs depth";
    std::vector<bool> varies;
    for (const auto& [prefix, get] : fields) {
      std::set<std::string> values;
      for (const Row* r : sel) values.insert(get(*r));
      varies.push_back(values.size() > 1);
      // Batch 1 is the usual case: say nothing about it.
      if (values.size() == 1 && !(prefix == "batch " && *values.begin() == "1"))
        title += fmt::format(", {}{}", prefix, *values.begin());
    }
    Chart c;
    c.title = title;
    c.y_label = decode ? "KV GB/s (KV bytes / median time)" : "TFLOP/s";
    std::map<std::string, size_t> index;  // series label -> position, in first-seen order
    for (const Row* r : sel) {
      std::string label = pair_name(r->problem);
      for (size_t f = 0; f < fields.size(); ++f)
        if (varies[f]) label += fmt::format(" {}{}", fields[f].first, fields[f].second(*r));
      auto [it, fresh] = index.try_emplace(label, c.series.size());
      if (fresh) c.series.push_back({label, {}});
      c.series[it->second].points.emplace_back(static_cast<double>(r->problem.kv_capacity),
                                               decode ? r->gbps : r->tflops);
    }
    for (Series& s : c.series) std::sort(s.points.begin(), s.points.end());
    charts.push_back(std::move(c));
  }
  return charts;
}

}  // namespace kvflash::bench
