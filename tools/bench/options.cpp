#include "bench/options.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "common/cli_app.hpp"
#include "common/cli_parse.hpp"

namespace kvflash::bench {
namespace {

constexpr const char* kFooter = R"(
Every list flag takes a comma list and may be repeated (-d 4096 -d 32768 = -d 4096,32768); integer
lists also take ranges FIRST-LAST*FACTOR or FIRST-LAST+STEP (-d 1024-1048576*2). Every combination
is run. K/V pairs: with both -ctk and -ctv every (K, V) pair is run; with only one of them, the
diagonal (-ctk f16,q4_0 runs f16/f16 and q4_0/q4_0).
Rows report the median time per call (min-max), decode speed as effective KV bandwidth (KV bytes
read / time; -n <= 8) and prefill speed as TFLOP/s (-n > 8), against the machine's read bandwidth
measured once per run.)";

Error usage_error(std::string_view flag, std::string_view text, std::string_view allowed) {
  return invalid_argument(fmt::format("{}: '{}' is not valid; {}", flag, text, allowed));
}

// A list of integers in [lo, hi] (lists and ranges as in common/cli_parse.hpp).
template <class T>
Expected<std::vector<T>> int_list(std::string_view flag, const std::string& text, int64_t lo,
                                  int64_t hi, std::string_view what) {
  auto list = tools::parse_int_list(flag, text);
  if (!list) return list.error();
  std::vector<T> out;
  for (int64_t v : *list) {
    if (v < lo || v > hi)
      return usage_error(flag, std::to_string(v), fmt::format("{} must be {} .. {}", what, lo, hi));
    out.push_back(static_cast<T>(v));
  }
  return out;
}

// One integer >= lo (repetitions, warm-up calls).
Expected<int32_t> count(std::string_view flag, const std::string& text, int32_t lo) {
  int32_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < lo || v > 1000000)
    return usage_error(flag, text, fmt::format("expected an integer {} .. 1000000", lo));
  return v;
}

}  // namespace

std::vector<KvPair> kv_pairs(const std::vector<KvType>& k, const std::vector<KvType>& v) {
  std::vector<KvPair> out;
  if (k.empty() || v.empty()) {
    for (KvType t : k.empty() ? v : k) out.push_back({t, t});
    return out;
  }
  for (KvType kt : k)
    for (KvType vt : v) out.push_back({kt, vt});
  return out;
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  for (const std::string& dir : tools::split(path, ':'))
    if (access((dir + "/" + program).c_str(), X_OK) == 0) return true;
  return false;
}

ParseResult parse_options(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "kvflash-bench: attention speed over compressed KV caches, per backend, KV type "
      "pair, shape and depth",
      "kvflash-bench"};
  app.footer(kFooter);
  std::string backend = "auto", ctk, ctv, heads = "32/8", head_dim = "128", depth = "4096,32768";
  std::string n_q = "1", batch = "1", page_size = "0", reps = "5", warmup = "1", threads,
              output = "md", plot;
  std::string llc;
  BenchOptions o;
  // Sweep flags collect every occurrence, joined by commas (llama-bench: "-d 1 -d 2" = "-d 1,2").
  auto list = [&](const std::string& names, std::string& var, const std::string& help) {
    return app.add_option(names, var, help)->join(',')->capture_default_str();
  };
  app.add_option("--backend", backend, "cpu, cuda or auto (the best backend the registry has)")
      ->capture_default_str();
  list("--ctk,--cache-type-k", ctk,
       "-ctk: K cache types (f32, f16, bf16, q8_0, q4_0, turbo2, turbo3, turbo4); default "
       "f16,q8_0,q4_0,turbo3");
  list("--ctv,--cache-type-v", ctv, "-ctv: V cache types (default: the same as -ctk, diagonal)");
  list("--heads", heads, "query heads / KV heads, e.g. 32/8 (GQA), 32/32, 128/1");
  list("--head-dim", head_dim, "head dim, e.g. 128, or K/V dims such as 576/512");
  list("-d,--depth,--n-depth", depth, "KV tokens per sequence (lists, ranges)");
  list("-n,--n-query", n_q, "query tokens per step: 1 decode, 2..8 speculative, more = prefill");
  list("-b,--batch", batch, "sequences per call");
  list("--page-size", page_size,
       "tokens per KV page: 0 = contiguous caches; N = paged caches (shuffled page tables, as a "
       "serving engine's)");
  app.add_option("-r,--repetitions", reps, "timed calls per row (median, min, max reported)")
      ->capture_default_str();
  app.add_option("--warmup", warmup, "untimed calls per row before timing")->capture_default_str();
  list("-t,--threads", threads, "CPU threads (default: every hardware thread)");
  app.add_option("-o,--output", output, "md, csv or json (on stdout)")->capture_default_str();
  app.add_option("--plot", plot, "draw speed against depth into FILE.svg or FILE.png");
  app.add_option("--seed", o.seed, "seed of the random inputs")->capture_default_str();
  app.add_option("--mem-bw", o.mem_bw_gbps,
                 "memory read bandwidth in GB/s for the percentage column (default: measured)");
  app.add_option("--llc-bytes", llc,
                 "last-level cache to rotate inputs past, e.g. 32M (default: from sysconf)");
  std::string ragged;
  app.add_option("--ragged", ragged,
                 "one ragged batch instead of the -n/-d/-b sweep: QUERIES:TOKENS per sequence, "
                 "comma-separated (e.g. 1:32768,512:4096,0:100), or issue39 (16 sequences, 1-4096 "
                 "queries, 1K-32K tokens); TFLOP/s over each sequence's visible pairs. Every "
                 "sequence with the same queries (serving64: 64 sequences of 1K-32K tokens, "
                 "serving256: 256 of 1K-4K, one query each) is a batch of decode steps: GB/s over "
                 "each sequence's own tokens");
  bool no_progress = false;
  app.add_flag("--no-progress", no_progress, "no progress line on stderr");

  try {
    kvflash::tools::parse_llama_style(app, argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return {std::nullopt, 0};
  } catch (const CLI::ParseError& e) {
    err << "kvflash-bench: " << e.what() << "\nRun with --help for the flags.\n";
    return {std::nullopt, kExitUsage};
  }

  // Each value is checked here, so every message names the flag the user typed and what is
  // allowed; the first error stops parsing.
  auto fail = [&](const Error& e) {
    err << "kvflash-bench: " << e.message << "\n";
    return ParseResult{std::nullopt, kExitUsage};
  };
  if (backend == "cpu")
    o.backend = BackendChoice::cpu;
  else if (backend == "cuda")
    o.backend = BackendChoice::cuda;
  else if (backend == "auto")
    o.backend = BackendChoice::best;
  else
    return fail(usage_error("--backend", backend, "expected cpu, cuda or auto"));

  std::vector<KvType> kt, vt;
  if (!ctk.empty()) {
    auto r = tools::parse_types("-ctk", ctk);
    if (!r) return fail(r.error());
    kt = *r;
  }
  if (!ctv.empty()) {
    auto r = tools::parse_types("-ctv", ctv);
    if (!r) return fail(r.error());
    vt = *r;
  }
  if (kt.empty() && vt.empty()) kt = {KvType::f16, KvType::q8_0, KvType::q4_0, KvType::turbo3};
  o.pairs = kv_pairs(kt, vt);

  auto h = tools::parse_heads("--heads", heads);
  if (!h) return fail(h.error());
  o.heads = *h;
  auto hd = tools::parse_head_dims("--head-dim", head_dim);
  if (!hd) return fail(hd.error());
  o.head_dims = *hd;

  auto d = int_list<int64_t>("-d", depth, 1, SupportedSpace::max_kv_len, "the depth in tokens");
  if (!d) return fail(d.error());
  o.depths = *d;
  auto nq = int_list<int32_t>("-n", n_q, 1, SupportedSpace::max_q_tokens, "query tokens per step");
  if (!nq) return fail(nq.error());
  o.n_q = *nq;
  auto b = int_list<int32_t>("-b", batch, 1, SupportedSpace::max_seqs, "sequences per call");
  if (!b) return fail(b.error());
  o.batch = *b;
  // 0 (contiguous) may stand among the page sizes: "0,16" compares both.
  o.page_sizes.clear();
  std::string paged;
  for (const std::string& item : tools::split(page_size, ','))
    if (item == "0")
      o.page_sizes.push_back(0);
    else
      paged += (paged.empty() ? "" : ",") + item;
  if (!paged.empty()) {
    auto ps = int_list<int32_t>("--page-size", paged, 1, 1 << 30, "tokens per page (or 0)");
    if (!ps) return fail(ps.error());
    o.page_sizes.insert(o.page_sizes.end(), ps->begin(), ps->end());
  }
  if (!threads.empty()) {
    auto t = int_list<int32_t>("-t", threads, 1, 4096, "the thread count");
    if (!t) return fail(t.error());
    o.threads = *t;
  }
  auto r = count("-r", reps, 1);
  if (!r) return fail(r.error());
  o.reps = *r;
  auto w = count("--warmup", warmup, 0);
  if (!w) return fail(w.error());
  o.warmup = *w;
  auto f = tools::parse_output_format("-o", output);
  if (!f) return fail(f.error());
  o.format = *f;
  if (!llc.empty()) {
    auto l = tools::parse_bytes("--llc-bytes", llc);
    if (!l) return fail(l.error());
    o.llc_bytes = *l;
  }
  if (o.mem_bw_gbps < 0)
    return fail(usage_error("--mem-bw", fmt::format("{}", o.mem_bw_gbps),
                            "expected GB/s > 0 (or leave it out to measure)"));

  if (!plot.empty()) {
    auto ends_with = [&](std::string_view s) {
      return plot.size() > s.size() && plot.compare(plot.size() - s.size(), s.size(), s) == 0;
    };
    if (!ends_with(".svg") && !ends_with(".png"))
      return fail(usage_error("--plot", plot, "expected a file name ending in .svg or .png"));
    // Checked before the sweep, so a long run does not end without its picture.
    if (ends_with(".png") && !on_path("rsvg-convert"))
      return fail(usage_error("--plot", plot,
                              "a .png needs rsvg-convert (Debian package librsvg2-bin: apt-get "
                              "install librsvg2-bin); or write an .svg"));
    o.plot_path = plot;
  }
  if (!ragged.empty()) {
    auto rb = parse_ragged("--ragged", ragged);
    if (!rb) return fail(rb.error());
    o.ragged = *rb;
  }
  o.progress = !no_progress;
  return {o, 0};
}

Expected<RaggedBatch> parse_ragged(std::string_view flag, const std::string& text) {
  if (text == "issue39") return issue39_batch();
  if (text == "serving64") return serving_batch(64, 1024, 32768);
  if (text == "serving256") return serving_batch(256, 1024, 4096);
  constexpr std::string_view kAllowed =
      "expected issue39, serving64, serving256 or QUERIES:TOKENS per sequence, "
      "comma-separated, 0 <= QUERIES <= TOKENS, 1 <= TOKENS";
  RaggedBatch b;
  for (const std::string& item : tools::split(text, ',')) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) return usage_error(flag, item, kAllowed);
    int64_t q = -1, kv = -1;
    const std::string qs = item.substr(0, colon), ks = item.substr(colon + 1);
    auto [qp, qe] = std::from_chars(qs.data(), qs.data() + qs.size(), q);
    auto [kp, ke] = std::from_chars(ks.data(), ks.data() + ks.size(), kv);
    if (qe != std::errc() || ke != std::errc() || qp != qs.data() + qs.size() ||
        kp != ks.data() + ks.size() || q < 0 || kv < 1 || q > kv ||
        q > SupportedSpace::max_q_tokens || kv > SupportedSpace::max_kv_len)
      return usage_error(flag, item, kAllowed);
    b.q_lens.push_back(static_cast<int32_t>(q));
    b.kv_lens.push_back(kv);
  }
  if (b.q_lens.empty() || b.q_lens.size() > size_t(SupportedSpace::max_seqs))
    return usage_error(flag, text,
                       fmt::format("expected 1 .. {} sequences", SupportedSpace::max_seqs));
  return b;
}

}  // namespace kvflash::bench
