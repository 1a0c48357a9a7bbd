// The report of kvflash-quality: markdown for people (a header with the seed, a table per test,
// small metrics in scientific notation), CSV / JSON for programs (numbers at full precision).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "quality/quality.hpp"
#include "quality/synthetic.hpp"

namespace kvflash::quality {
namespace {

using tools::Cell;
using tools::Column;
using tools::Table;

std::string dims_text(HeadDims d) {
  return d.k == d.v ? std::to_string(d.k) : fmt::format("{}/{}", d.k, d.v);
}

std::string sci(double x) {
  return fmt::format("{:.2e}", x);
}

std::string result_text(bool pass) {
  return pass ? "PASS" : "FAIL";
}

// `human`: cells as text in the precision a person needs (markdown); otherwise numbers.
Table attention_table(const std::vector<AttentionRow>& rows, bool human) {
  Table t({{"k", 2, false},
           {"v", 2, false},
           {"heads", 0, true},
           {"head_dim", 0, true},
           {"depth", 0, true},
           {"bits", 2, true},
           {"nmse", 2, true},
           {"cos_mean", 6, true},
           {"cos_min", 6, true},
           {"kl_mean", 2, true},
           {"kl_max", 2, true},
           {"kernel", 0, false}});
  for (const AttentionRow& r : rows) {
    const auto num = [&](double x) -> Cell { return human ? Cell{sci(x)} : Cell{x}; };
    t.add_row({std::string(to_string(r.pair.k)), std::string(to_string(r.pair.v)),
               fmt::format("{}/{}", r.q_heads, r.kv_heads), dims_text(r.dims), r.depth, r.bits,
               num(r.nmse), r.cos_mean, r.cos_min, num(r.kl_mean), num(r.kl_max), r.kernel});
  }
  return t;
}

Table needle_table(const std::vector<NeedleRow>& rows) {
  Table t({{"k", 2, false},
           {"v", 2, false},
           {"head_dim", 0, true},
           {"depth", 0, true},
           {"weight", 3, true},
           {"weight_min", 3, true},
           {"weight_f64", 3, true},
           {"cos_min", 3, true},
           {"cos_f64", 3, true},
           {"passed", 0, true},
           {"result", 0, false},
           {"kernel", 0, false}});
  for (const NeedleRow& r : rows)
    t.add_row({std::string(to_string(r.pair.k)), std::string(to_string(r.pair.v)),
               dims_text(r.dims), r.depth, r.weight_mean, r.weight_min, r.weight_ref, r.cos_min,
               r.cos_ref, fmt::format("{}/{}", r.passed, r.trials), result_text(r.pass()),
               r.kernel});
  return t;
}

// One flat CSV table: the union of both tests' columns, `test` first, `seed` last; the needle's
// columns carry a needle_ prefix where the attention test has a column of the same name.
std::string flat_csv(const QualityOptions& o, const std::vector<AttentionRow>& attention,
                     const std::vector<NeedleRow>& needle) {
  std::vector<Column> cols;
  for (const char* n : {"test",
                        "k",
                        "v",
                        "heads",
                        "head_dim",
                        "depth",
                        "bits",
                        "nmse",
                        "cos_mean",
                        "cos_min",
                        "kl_mean",
                        "kl_max",
                        "needle_weight",
                        "needle_weight_min",
                        "needle_weight_f64",
                        "needle_cos_min",
                        "needle_cos_f64",
                        "needle_trials",
                        "needle_passed",
                        "result",
                        "kernel",
                        "seed"})
    cols.push_back({n});
  Table t(std::move(cols));
  const auto seed = static_cast<int64_t>(o.suite.seed);
  const Cell e;
  for (const AttentionRow& r : attention)
    t.add_row({std::string("attention"),
               std::string(to_string(r.pair.k)),
               std::string(to_string(r.pair.v)),
               fmt::format("{}/{}", r.q_heads, r.kv_heads),
               dims_text(r.dims),
               r.depth,
               r.bits,
               r.nmse,
               r.cos_mean,
               r.cos_min,
               r.kl_mean,
               r.kl_max,
               e,
               e,
               e,
               e,
               e,
               e,
               e,
               e,
               r.kernel,
               seed});
  for (const NeedleRow& r : needle)
    t.add_row({std::string("needle"),
               std::string(to_string(r.pair.k)),
               std::string(to_string(r.pair.v)),
               std::string("1/1"),
               dims_text(r.dims),
               r.depth,
               e,
               e,
               e,
               e,
               e,
               e,
               r.weight_mean,
               r.weight_min,
               r.weight_ref,
               r.cos_min,
               r.cos_ref,
               int64_t{r.trials},
               int64_t{r.passed},
               result_text(r.pass()),
               r.kernel,
               seed});
  return t.csv();
}

std::string list_text(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += fmt::format("{}{}", s.empty() ? "" : ",", x);
  return s;
}

std::string heads_text(const SuiteConfig& c) {
  std::string s;
  for (auto [q, kv] : c.heads) s += fmt::format("{}{}/{}", s.empty() ? "" : ",", q, kv);
  return s;
}

std::string head_dims_text(const SuiteConfig& c) {
  std::string s;
  for (HeadDims d : c.head_dims) s += fmt::format("{}{}", s.empty() ? "" : ",", dims_text(d));
  return s;
}

std::string markdown(const QualityOptions& o, const std::vector<AttentionRow>& attention,
                     const std::vector<NeedleRow>& needle) {
  const SuiteConfig& c = o.suite;
  const int32_t dk = c.head_dims.front().k;
  std::string s =
      fmt::format("# kvflash-quality (seed {}; repeat with --seed {})\n\n", c.seed, c.seed);
  s += fmt::format(
      "Synthetic KV: keys with {} of {} channels as outliers ({:.0f}-{:.0f}x the scale) and RoPE "
      "(base {:.0f}), Gaussian values, each query a mix of {} keys plus noise. Every number "
      "compares the library's {} attention on the quantized K/V with float64 attention on the "
      "original f32 K/V.\n",
      outlier_count(dk), dk, SyntheticKv::kOutlierMin, SyntheticKv::kOutlierMax,
      SyntheticKv::kRopeBase, kQueryTargets, c.backend == Backend::cuda ? "CUDA" : "CPU");
  if (o.run_attention) {
    s += fmt::format(
        "\n## Attention (heads {}, head dim {}, depths {}, {} sequence{} x {} query token{})\n\n"
        "bits: K and V bits per value, padding included; nmse: output error energy / output "
        "energy; cos: per output row; kl: KL divergence of each query's attention distribution, "
        "original keys vs quantized keys (nats).\n\n",
        heads_text(c), head_dims_text(c), list_text(c.depths), c.n_seqs, c.n_seqs == 1 ? "" : "s",
        c.n_q_tokens, c.n_q_tokens == 1 ? "" : "s");
    s += attention_table(attention, true).markdown();
  }
  if (o.run_needle) {
    int passed = 0;
    for (const NeedleRow& r : needle) passed += r.pass() ? 1 : 0;
    s += fmt::format(
        "\n## Needle retrieval (1 KV head, {} needles per depth{})\n\nEach query is scaled so "
        "that float64 attention on the original K/V gives its needle {} of the weight; the "
        "question is how much of it each format keeps. weight: attention weight on the needle "
        "(mean, min); cos_min: the lowest cos(output, needle value); a needle passes when cos >= "
        "{} (the needle's value carries >= 81% of the output's energy), a depth when all its "
        "needles pass. *_f64: float64 on the original K/V. {} of {} rows pass.\n\n",
        c.needle_trials,
        c.needle_queries == 1
            ? std::string()
            : fmt::format(", each call {} queries, the last one scored", c.needle_queries),
        c.needle_weight, kNeedlePassCosine, passed, needle.size());
    s += needle_table(needle).markdown();
  }
  return s;
}

}  // namespace

std::string render_report(const QualityOptions& o, const std::vector<AttentionRow>& attention,
                          const std::vector<NeedleRow>& needle) {
  switch (o.format) {
    case tools::OutputFormat::md:
      return markdown(o, attention, needle);
    case tools::OutputFormat::csv:
      return flat_csv(o, attention, needle);
    case tools::OutputFormat::json: {
      const SuiteConfig& c = o.suite;
      nlohmann::ordered_json j;  // keys in the order written, columns in table order
      j["tool"] = "kvflash-quality";
      j["seed"] = c.seed;
      j["config"] = {{"heads", heads_text(c)},
                     {"head_dim", head_dims_text(c)},
                     {"depths", c.depths},
                     {"n_seqs", c.n_seqs},
                     {"n_q_tokens", c.n_q_tokens},
                     {"backend", to_string(c.backend)},
                     {"needle_queries", c.needle_queries},
                     {"needle_depths", c.needle_depths},
                     {"needle_weight_f64", c.needle_weight},
                     {"needle_pass_cosine", kNeedlePassCosine}};
      j["attention"] = nlohmann::ordered_json::parse(attention_table(attention, false).json());
      j["needle"] = nlohmann::ordered_json::parse(needle_table(needle).json());
      return j.dump(2) + "\n";
    }
  }
  return {};
}

}  // namespace kvflash::quality
