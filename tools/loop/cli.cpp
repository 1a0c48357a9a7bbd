#include "loop/cli.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "common/cli_app.hpp"
#include "common/cli_parse.hpp"
#include "common/table.hpp"
#include "loop/prefill.hpp"
#include "plan/model.hpp"

namespace kvflash::tools::loop {
namespace {

constexpr std::string_view kCtk = "-ctk/--cache-type-k";
constexpr std::string_view kCtv = "-ctv/--cache-type-v";

struct Raw {
  std::string model, layers = "32", heads = "32/8", head_dim = "128";
  std::string ctk = "q8_0", ctv = "q8_0";
  std::string depths = "4096,32768,131072,262144";
  std::string tokens = "20", kernel_reps = "5", graphs = "off,on", seed = "42", format = "md";
  std::string chunk = "1", seqs = "1";
  CLI::Option *o_model, *o_layers, *o_heads, *o_head_dim, *o_ctk, *o_ctv, *o_seqs;
};

// The largest chunk: its queries, outputs and f32 K/V rows are device buffers of a few hundred
// MB at 32 heads of dim 256 and 64 sequences.
constexpr int64_t kMaxChunk = 65536;
constexpr int64_t kMaxSeqs = 64;

// The pairs a prefill run compares, in kvflash-bench's rule: -ctk and -ctv both given: every
// pair; one of them: K = V over its list; neither: default_prefill_types().
std::vector<gpu::KvLayerTypes> prefill_pairs(const std::vector<KvType>& k, bool k_given,
                                             const std::vector<KvType>& v, bool v_given) {
  if (!k_given && !v_given) return default_prefill_types();
  std::vector<gpu::KvLayerTypes> pairs;
  if (k_given && v_given) {
    for (KvType kt : k)
      for (KvType vt : v) pairs.push_back({kt, vt});
  } else {
    for (KvType t : k_given ? k : v) pairs.push_back({t, t});
  }
  return pairs;
}

std::string prefill_default_text() {
  std::string text;
  for (const gpu::KvLayerTypes t : default_prefill_types())
    text += fmt::format("{}{}", text.empty() ? "" : ",", to_string(t.k));
  return text;
}

std::string footer() {
  return fmt::format(
      "Model presets (--model, case-insensitive; full-attention models only): {}.\n"
      "K/V types: {}. Decode steps (--chunk 1): -ctk/-ctv take one type (every layer) or one per\n"
      "layer. Prefill chunks (--chunk N > 1): each type pair in every layer in turn, compared "
      "with\n"
      "f16: -ctk alone or -ctv alone gives K = V, both give every pair (default: {}).\n"
      "Examples:\n"
      "  kvflash-loop                                  32 layers, 32/8 heads, D 128, q8_0\n"
      "  kvflash-loop --model llama-3.1-8b -ctk q8_0 -ctv q4_0 -d 262144\n"
      "  kvflash-loop --layers 4 -ctk f16,q8_0,q4_0,turbo3 -ctv q8_0 -d 4096 -o csv\n"
      "  kvflash-loop --chunk 2048 -d 8192,32768 -n 5  a 2048-token prefill chunk per type\n",
      plan::preset_names(), kv_type_names(), prefill_default_text());
}

}  // namespace

Expected<LoopArgs> parse_loop_args(int argc, const char* const* argv) {
  CLI::App app{
      "kvflash-loop: the attention of every layer of a model per decode step, run eagerly and as "
      "one CUDA graph (time per token, graph overhead over the kernels' own time, memory held "
      "against kvflash-plan's number)"};
  app.footer(footer());
  Raw r;
  r.o_model = app.add_option("-m,--model", r.model, "model preset (instead of the shape flags)")
                  ->type_name("NAME");
  r.o_layers =
      app.add_option("--layers", r.layers, "layers")->type_name("N")->capture_default_str();
  r.o_heads = app.add_option("--heads", r.heads, "query heads/KV heads")
                  ->type_name("Q/KV")
                  ->capture_default_str();
  r.o_head_dim = app.add_option("--head-dim", r.head_dim, "head dim, K/V when they differ")
                     ->type_name("D|K/V")
                     ->capture_default_str();
  r.o_ctk = app.add_option("--ctk,--cache-type-k", r.ctk,
                           "(-ctk) K type, or one per layer; prefill: the K types compared")
                ->type_name("TYPES")
                ->capture_default_str();
  r.o_ctv = app.add_option("--ctv,--cache-type-v", r.ctv,
                           "(-ctv) V type, or one per layer; prefill: the V types compared")
                ->type_name("TYPES")
                ->capture_default_str();
  app.add_option("-d,--depth", r.depths,
                 "tokens in the cache: list or range; the cache is planned for the largest")
      ->type_name("LIST")
      ->capture_default_str();
  app.add_option("--chunk", r.chunk,
                 "query tokens appended and attended per sequence and step: 1 decode steps, "
                 "more a prefill chunk (through gpu::KvCache)")
      ->type_name("N")
      ->capture_default_str();
  r.o_seqs = app.add_option("--seqs", r.seqs, "prefill: sequences per step, each its own chunk")
                 ->type_name("N")
                 ->capture_default_str();
  app.add_option("-n,--tokens", r.tokens,
                 "timed steps (decode tokens or prefill chunks) per "
                 "depth and mode")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--kernel-reps", r.kernel_reps,
                 "timed runs of each layer alone (median summed); prefill: of every layer's "
                 "attention without the appends")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--graphs", r.graphs, "modes: off (eager launches), on (one CUDA graph per step)")
      ->type_name("off,on")
      ->capture_default_str();
  app.add_option("--seed", r.seed, "random inputs")->type_name("N")->capture_default_str();
  app.add_option("-o,--output", r.format, "md, csv or json")
      ->type_name("FORMAT")
      ->capture_default_str();

  LoopArgs out;
  try {
    parse_llama_style(app, argc, argv);
  } catch (const CLI::CallForHelp&) {
    out.help = true;
    out.help_text = app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    return invalid_argument(e.what());
  }

  plan::ModelShape m;
  if (r.o_model->count()) {
    if (r.o_layers->count() || r.o_heads->count() || r.o_head_dim->count())
      return invalid_argument(
          "--model: a preset cannot be combined with --layers, --heads or --head-dim");
    Expected<plan::ModelShape> pm = plan::find_preset("--model", r.model);
    if (!pm) return pm.error();
    m = *pm;
  } else {
    Expected<int64_t> layers = parse_int("--layers", r.layers, 1, 4096);
    if (!layers) return layers.error();
    m.name = "custom";
    m.layers = static_cast<int32_t>(*layers);
    auto heads = parse_heads("--heads", r.heads);
    if (!heads) return heads.error();
    if (heads->size() != 1)
      return invalid_argument(
          fmt::format("--heads: '{}' is not valid; expected one Q/KV pair, e.g. 32/8", r.heads));
    m.q_heads = heads->front().first;
    m.kv_heads = heads->front().second;
    auto dims = parse_head_dims("--head-dim", r.head_dim);
    if (!dims) return dims.error();
    if (dims->size() != 1)
      return invalid_argument(fmt::format(
          "--head-dim: '{}' is not valid; expected one head dim, e.g. 128 or 192/128", r.head_dim));
    m.head_dim = dims->front();
  }
  if (Status s = plan::validate(m); !s) return s.error();
  LoopConfig& c = out.config;
  c.model = m;
  auto chunk = parse_int("--chunk", r.chunk, 1, kMaxChunk);
  if (!chunk) return chunk.error();
  c.chunk = static_cast<int32_t>(*chunk);
  auto seqs = parse_int("--seqs", r.seqs, 1, kMaxSeqs);
  if (!seqs) return seqs.error();
  if (c.chunk == 1 && *seqs != 1)
    return invalid_argument(fmt::format(
        "--seqs: '{}' is not valid with --chunk 1; decode steps run one sequence (give --chunk "
        "N > 1 for prefill chunks of several sequences)",
        r.seqs));
  c.seqs = static_cast<int32_t>(*seqs);
  auto k = parse_types(kCtk, r.ctk);
  if (!k) return k.error();
  auto v = parse_types(kCtv, r.ctv);
  if (!v) return v.error();
  if (c.chunk == 1) {
    auto ke = expand_types(kCtk, *k, m.layers);
    if (!ke) return ke.error();
    auto ve = expand_types(kCtv, *v, m.layers);
    if (!ve) return ve.error();
    c.k_types = *ke;
    c.v_types = *ve;
  } else {
    c.prefill_types = prefill_pairs(*k, r.o_ctk->count() > 0, *v, r.o_ctv->count() > 0);
  }
  auto depths = parse_int_list("-d/--depth", r.depths);
  if (!depths) return depths.error();
  c.depths = *depths;
  if (c.chunk > 1 && prefill_capacity(c.depths, c.chunk) > SupportedSpace::max_kv_len)
    return invalid_argument(fmt::format(
        "-d/--depth and --chunk: the cache must hold the largest depth plus one chunk, {} tokens, "
        "over the {} a sequence may hold",
        prefill_capacity(c.depths, c.chunk), SupportedSpace::max_kv_len));
  auto tokens = parse_int("-n/--tokens", r.tokens, 1, 100000);
  if (!tokens) return tokens.error();
  c.tokens = static_cast<int32_t>(*tokens);
  auto reps = parse_int("--kernel-reps", r.kernel_reps, 1, 1000);
  if (!reps) return reps.error();
  c.kernel_reps = static_cast<int32_t>(*reps);
  c.graphs_off = c.graphs_on = false;
  for (const std::string& g : split(r.graphs, ',')) {
    if (g == "off") {
      c.graphs_off = true;
    } else if (g == "on") {
      c.graphs_on = true;
    } else {
      return invalid_argument(
          fmt::format("--graphs: '{}' is not valid; expected off, on or off,on", r.graphs));
    }
  }
  auto seed = parse_int("--seed", r.seed, 0, INT64_MAX);
  if (!seed) return seed.error();
  c.seed = static_cast<uint64_t>(*seed);
  if (auto f = parse_output_format("-o/--output", r.format); !f) return f.error();
  out.format = r.format;
  return out;
}

std::string render_prefill(const LoopConfig& c, const PrefillReport& rep, OutputFormat format) {
  Table t({{"k", 0, false},
           {"v", 0, false},
           {"depth", 0},
           {"graphs", 0, false},
           {"ms/chunk", 2},
           {"tokens/s", 0},
           {"vs f16", 2},
           {"attention ms", 2},
           {"TFLOP/s", 1},
           {"kernel", 0, false},
           {"graph kernels", 0}});
  for (const PrefillRow& r : rep.rows)
    t.add_row({std::string(to_string(r.types.k)), std::string(to_string(r.types.v)), r.depth,
               std::string(r.graphs ? "on" : "off"), r.ms_per_step, r.tokens_per_s,
               std::isnan(r.vs_f16) ? Cell{std::monostate{}} : Cell{r.vs_f16}, r.attention_ms,
               r.tflops, r.kernel, r.graphs ? Cell{r.kernel_nodes} : Cell{std::monostate{}}});
  if (format != OutputFormat::md) return t.render(format);
  std::string text = fmt::format(
      "kvflash-loop prefill: {}, {} layers, {}/{} heads, head dim {}/{}; chunks of {} tokens x {} "
      "sequence(s) onto each depth; caches of {} tokens per sequence\n",
      c.model.name, c.model.layers, c.model.q_heads, c.model.kv_heads, c.model.head_dim.k,
      c.model.head_dim.v, c.chunk, c.seqs, rep.capacity);
  text += t.markdown() + "\n";
  text +=
      "ms/chunk: median over the timed steps, events around the whole step (lengths += N on the "
      "device, then per layer the chunk's K/V appended, quantized on the device, and its "
      "attention); the lengths are set back to the depth before each step, so every step is the "
      "same work. tokens/s: chunk x sequences per step time; vs f16: over f16/f16's tokens/s at "
      "the same depth and mode. attention ms: every layer's attention alone (no appends, eager), "
      "median; TFLOP/s: 2 (Dk + Dv) per visible causal (query, key) pair over that time.\n\n";
  const GraphCounters& g = rep.counters;
  text += fmt::format(
      "Graph runner: {} eager, {} captures, {} replays, {} resets, {} capture failures.\n",
      g.eager_runs, g.captures, g.replays, g.resets, g.capture_failures);
  return text;
}

int run_loop_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  Expected<LoopArgs> a = parse_loop_args(argc, argv);
  if (!a) {
    err << "kvflash-loop: " << a.error().message << "\n";
    return kExitUsage;
  }
  if (a->help) {
    out << a->help_text;
    return 0;
  }
  const LoopConfig& c = a->config;
  const OutputFormat fmt_out = *parse_output_format("-o/--output", a->format);
  if (c.chunk > 1) {
    Expected<PrefillReport> rep = run_prefill(c);
    if (!rep) {
      err << "kvflash-loop: " << rep.error().message << "\n";
      return kExitFailure;
    }
    out << render_prefill(c, *rep, fmt_out);
    return rep->counters.capture_failures == 0 ? 0 : kExitFailure;
  }
  Expected<LoopReport> rep = run_loop(c);
  if (!rep) {
    err << "kvflash-loop: " << rep.error().message << "\n";
    return kExitFailure;
  }
  Table t({{"depth", 0},
           {"graphs", 0, false},
           {"us/token", 1},
           {"kernels us", 1},
           {"overhead %", 1},
           {"KV GB/s", 0},
           {"graph kernels", 0}});
  for (const LoopRow& r : rep->rows)
    t.add_row({r.depth, std::string(r.graphs ? "on" : "off"), r.us_per_token, r.kernel_sum_us,
               100.0 * r.overhead, r.kv_gbps,
               r.graphs ? Cell{r.kernel_nodes} : Cell{std::monostate{}}});
  if (fmt_out != OutputFormat::md) {
    out << t.render(fmt_out);
    return 0;
  }
  std::string kernels;
  for (size_t l = 0; l < rep->kernels.size(); ++l)
    if (l == 0 || rep->kernels[l] != rep->kernels[l - 1])
      kernels += fmt::format("{}{} (layer {})", kernels.empty() ? "" : ", ", rep->kernels[l], l);
  out << fmt::format("kvflash-loop: {}, {} layers, {}/{} heads, head dim {}/{}; kernels: {}\n",
                     c.model.name, c.model.layers, c.model.q_heads, c.model.kv_heads,
                     c.model.head_dim.k, c.model.head_dim.v, kernels);
  out << t.markdown() << "\n";
  out << "us/token: median over the timed steps, events around the whole step (all layers); "
         "kernels us: the sum of each layer's median time alone; overhead: us/token over that "
         "sum, minus 1 (below 0 when consecutive kernels overlap their start and end, which a "
         "kernel timed alone cannot).\n\n";
  out << rep->memory.table() << "\n";
  const bool same = rep->kv_bytes == rep->plan_bytes;
  out << fmt::format(
      "KV storage {} B; kvflash-plan for this model and {} tokens: {} B ({}).\n"
      "Pool: {} B; the device's free memory fell by {} B when it was created ({}).\n"
      "Graph runner: {} eager, {} captures, {} replays, {} resets, {} capture failures.\n",
      rep->kv_bytes, *std::max_element(c.depths.begin(), c.depths.end()), rep->plan_bytes,
      same ? "equal" : "DIFFERENT", rep->pool_capacity, rep->device_taken,
      rep->device_taken >= rep->pool_capacity ? "the device holds it" : "LESS than the pool",
      rep->counters.eager_runs, rep->counters.captures, rep->counters.replays, rep->counters.resets,
      rep->counters.capture_failures);
  return same && rep->counters.capture_failures == 0 ? 0 : kExitFailure;
}

}  // namespace kvflash::tools::loop
