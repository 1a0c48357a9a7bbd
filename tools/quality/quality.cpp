// Command line of kvflash-quality: flags in the habits of llama-bench (-ctk/-ctv, -d, -o), every
// list parsed by tools/common so that errors name the flag and say what to type instead.
#include "quality/quality.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <new>
#include <ostream>
#include <tuple>

#include "common/cli_app.hpp"
#include "common/cli_parse.hpp"
#include "quality/backend_run.hpp"

namespace kvflash::quality {
namespace {

// What the flags hold before they are checked: strings, parsed by tools/common.
struct RawArgs {
  std::string ctk, ctv, depths = "1024,8192,32768", heads = "8/2", head_dim = "128";
  std::string needle_depths = "1K,4K,16K,64K,256K,1M", output = "md", suite = "all";
  std::string backend = "cpu";
  int32_t n_seqs = 4, n_q_tokens = 1, threads = 0, needle_trials = 4, needle_queries = 1;
  std::string seed = std::to_string(kDefaultSeed);
  double needle_weight = kDefaultNeedleWeight;
  bool fast = false, quiet = false;
};

// --fast: the README's main job, about 5 s on 2 idle cores: every default pair at one depth, and
// the needle at three depths. 512K rather than 1M: the 1M haystack alone (generation and one
// quantization per type) takes 5-8 s here, which would break the budget when the cores are shared.
constexpr const char* kFastDepths = "8192";
constexpr const char* kFastNeedleDepths = "4K,64K,512K";
constexpr int64_t kMaxNeedleDepth = int64_t{1} << 24;

void add_flags(CLI::App& app, RawArgs& a) {
  app.add_option("--ctk,--cache-type-k", a.ctk,
                 "K types, comma list (also -ctk); every K type is paired with every V type; "
                 "default: the diagonal f16 bf16 q8_0 q4_0 turbo4 turbo3 turbo2 and the pairs "
                 "q8_0/turbo4 q8_0/turbo3 f16/q4_0");
  app.add_option("--ctv,--cache-type-v", a.ctv, "V types, comma list (also -ctv); default: as K");
  app.add_option("-d,--depths", a.depths,
                 "context lengths of the attention test, lists and "
                 "ranges (1024-32768*2)")
      ->capture_default_str();
  app.add_option("--seqs", a.n_seqs,
                 "sequences of the attention test, each with its own K/V "
                 "(1..64; more query rows, steadier metrics)")
      ->capture_default_str();
  app.add_option("--backend", a.backend,
                 "where the library's attention runs: cpu, or cuda (device copies of the same "
                 "inputs; 9 or more queries go to cuda.prefill)")
      ->capture_default_str();
  app.add_option("-n,--n-queries", a.n_q_tokens,
                 fmt::format("query tokens per sequence (1..{}, --backend cuda 1..{}; causal)",
                             kMaxQueriesCpu, kMaxQueriesCuda))
      ->capture_default_str();
  app.add_option("--heads", a.heads, "query heads / KV heads, e.g. 8/2 or 32/8,8/1")
      ->capture_default_str();
  app.add_option("--head-dim", a.head_dim, "head dims, e.g. 128 or 576/512 (K/V)")
      ->capture_default_str();
  app.add_option("--needle-depths", a.needle_depths, "haystack lengths of the needle test")
      ->capture_default_str();
  app.add_option("--needle-weight", a.needle_weight,
                 "attention weight float64 gives the needle on the original K/V (0.5..0.999): "
                 "how strongly the query matches it")
      ->capture_default_str();
  app.add_option("--needle-trials", a.needle_trials,
                 "needles per depth, at random positions (1..64)")
      ->capture_default_str();
  app.add_option("--needle-queries", a.needle_queries,
                 "query tokens of each needle call: the needle's query at the last position, "
                 "scored, and copies before it (as -n; 9 or more: a prefill kernel)")
      ->capture_default_str();
  app.add_option("--suite", a.suite, "which tests: all, attention or needle")
      ->capture_default_str();
  app.add_option("--seed", a.seed, "seed of the synthetic KV and queries (printed in the report)")
      ->type_name("UINT")
      ->capture_default_str();
  app.add_option("-o,--output", a.output, "md, csv or json")->capture_default_str();
  app.add_option("-t,--threads", a.threads, "CPU threads (0: all)")->capture_default_str();
  app.add_flag("--fast", a.fast,
               fmt::format("a short suite (-d {} --needle-depths {}), about 5 s", kFastDepths,
                           kFastNeedleDepths));
  app.add_flag("-q,--quiet", a.quiet, "no progress line on stderr");
}

Error flag_error(std::string_view flag, std::string_view value, std::string_view allowed) {
  return invalid_argument(fmt::format("{}: '{}' is not valid; {}", flag, value, allowed));
}

Expected<QualityOptions> check(const RawArgs& a, const CLI::App& app) {
  QualityOptions o;
  SuiteConfig& c = o.suite;
  // Parsed here, not by CLI11, which would wrap a negative seed around to 2^64 - n.
  const auto [end, ec] = std::from_chars(a.seed.data(), a.seed.data() + a.seed.size(), c.seed);
  if (a.seed.empty() || ec != std::errc() || end != a.seed.data() + a.seed.size())
    return flag_error("--seed", a.seed, "expected an integer 0..18446744073709551615");
  c.n_threads = a.threads;
  o.fast = a.fast;
  o.progress = !a.quiet;
  const bool depths_set = app.count("--depths") > 0, needles_set = app.count("--needle-depths") > 0;
  if (a.ctk.empty() && a.ctv.empty()) {
    c.pairs = default_pairs();
  } else {
    // A list given for one side only is used for both.
    std::vector<KvType> kt, vt;
    for (auto [flag, text, dst] :
         {std::tuple{"-ctk", &a.ctk, &kt}, std::tuple{"-ctv", &a.ctv, &vt}}) {
      if (text->empty()) continue;
      auto types = tools::parse_types(flag, *text);
      if (!types) return types.error();
      *dst = *types;
    }
    if (kt.empty()) kt = vt;
    if (vt.empty()) vt = kt;
    for (KvType k : kt)
      for (KvType v : vt) c.pairs.push_back({k, v});
  }
  auto depths = tools::parse_int_list("-d", a.fast && !depths_set ? kFastDepths : a.depths);
  if (!depths) return depths.error();
  for (int64_t d : *depths)
    if (d > SupportedSpace::max_kv_len)
      return flag_error("-d", std::to_string(d), "a depth is at most 2^32 tokens");
  c.depths = *depths;
  auto needles = tools::parse_int_list(
      "--needle-depths", a.fast && !needles_set ? kFastNeedleDepths : a.needle_depths);
  if (!needles) return needles.error();
  for (int64_t d : *needles)
    if (d > kMaxNeedleDepth)
      return flag_error("--needle-depths", std::to_string(d),
                        "a needle depth is at most 16M tokens (the haystack is held in memory: "
                        "about 1.7 GB per 1M tokens at head dim 128)");
  c.needle_depths = *needles;
  auto heads = tools::parse_heads("--heads", a.heads);
  if (!heads) return heads.error();
  c.heads = *heads;
  auto dims = tools::parse_head_dims("--head-dim", a.head_dim);
  if (!dims) return dims.error();
  c.head_dims = *dims;
  if (a.backend == "cuda")
    c.backend = Backend::cuda;
  else if (a.backend != "cpu")
    return flag_error("--backend", a.backend, "expected cpu or cuda");
  const int32_t max_q = max_queries(c.backend);
  const std::string q_range =
      fmt::format("expected 1..{} query tokens (--backend {})", max_q, a.backend);
  if (a.n_q_tokens < 1 || a.n_q_tokens > max_q)
    return flag_error("-n", std::to_string(a.n_q_tokens), q_range);
  if (a.needle_queries < 1 || a.needle_queries > max_q)
    return flag_error("--needle-queries", std::to_string(a.needle_queries), q_range);
  for (int64_t d : c.needle_depths)
    if (d < a.needle_queries)
      return flag_error("--needle-depths", std::to_string(d),
                        fmt::format("each needle depth must hold the --needle-queries {} query "
                                    "tokens",
                                    a.needle_queries));
  c.needle_queries = a.needle_queries;
  for (int64_t d : c.depths)
    if (d < a.n_q_tokens)
      return flag_error("-d", std::to_string(d),
                        fmt::format("each depth must hold the -n {} query tokens", a.n_q_tokens));
  c.n_q_tokens = a.n_q_tokens;
  if (a.n_seqs < 1 || a.n_seqs > 64)
    return flag_error("--seqs", std::to_string(a.n_seqs), "expected 1..64 sequences");
  c.n_seqs = a.n_seqs;
  if (!(a.needle_weight >= 0.5 && a.needle_weight <= 0.999))
    return flag_error("--needle-weight", fmt::format("{}", a.needle_weight),
                      "expected a weight in 0.5..0.999, e.g. 0.9");
  c.needle_weight = a.needle_weight;
  if (a.needle_trials < 1 || a.needle_trials > 64)
    return flag_error("--needle-trials", std::to_string(a.needle_trials), "expected 1..64");
  c.needle_trials = a.needle_trials;
  if (a.threads < 0)
    return flag_error("-t", std::to_string(a.threads), "expected 0 (all) or a thread count");
  if (a.suite == "attention")
    o.run_needle = false;
  else if (a.suite == "needle")
    o.run_attention = false;
  else if (a.suite != "all")
    return flag_error("--suite", a.suite, "expected all, attention or needle");
  auto fmt_ = tools::parse_output_format("-o", a.output);
  if (!fmt_) return fmt_.error();
  o.format = *fmt_;
  return o;
}

}  // namespace

std::vector<KvPair> default_pairs() {
  using enum KvType;
  return {{f16, f16},       {bf16, bf16},     {q8_0, q8_0},   {q4_0, q4_0},   {turbo4, turbo4},
          {turbo3, turbo3}, {turbo2, turbo2}, {q8_0, turbo4}, {q8_0, turbo3}, {f16, q4_0}};
}

Expected<QualityOptions> parse_quality_args(int argc, const char* const* argv) {
  CLI::App app{"kvflash-quality", "kvflash-quality"};
  RawArgs a;
  add_flags(app, a);
  // -ctk / -ctv as llama-bench users type them (CLI11 takes one letter after a single dash).
  try {
    tools::parse_llama_style(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    return invalid_argument(e.what());
  }
  return check(a, app);
}

int run_quality(int argc, char** argv, std::ostream& out, std::ostream& err) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view s = argv[i];
    if (s == "-h" || s == "--help") {
      CLI::App app{
          "kvflash-quality: accuracy of each KV type and K/V pair against the float64 "
          "reference, on synthetic KV with outlier channels and RoPE, plus needle retrieval "
          "from 1K to 1M tokens",
          "kvflash-quality"};
      RawArgs a;
      add_flags(app, a);
      out << app.help();
      return 0;
    }
  }
  Expected<QualityOptions> o = parse_quality_args(argc, argv);
  if (!o) {
    err << "kvflash-quality: " << o.error().message << "\n(run with --help for every flag)\n";
    return 2;
  }
  const SuiteConfig& c = o->suite;
  // Before generating anything: a missing device would otherwise show only after the inputs.
  if (Status s = backend_available(c.backend); !s) {
    err << "kvflash-quality: " << s.message() << "\n";
    return 1;
  }
  tools::Progress progress(
      (o->run_attention ? attention_items(c) : 0) + (o->run_needle ? needle_items(c) : 0),
      o->progress);
  std::vector<AttentionRow> attention;
  std::vector<NeedleRow> needle;
  const auto fail = [&](const std::string& message) {
    progress.finish();
    err << "kvflash-quality: " << message << "\n";
    return 1;
  };
  try {
    if (o->run_attention) {
      auto r = run_attention_suite(c, &progress);
      if (!r) return fail(r.error().message);
      attention = std::move(*r);
    }
    if (o->run_needle) {
      auto r = run_needle_suite(c, &progress);
      if (!r) return fail(r.error().message);
      needle = std::move(*r);
    }
  } catch (const std::bad_alloc&) {
    return fail("out of host memory (a smaller --needle-depths or -d needs less)");
  }
  progress.finish();
  out << render_report(*o, attention, needle);
  out.flush();
  return 0;
}

}  // namespace kvflash::quality
