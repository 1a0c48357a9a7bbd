#include "plan/cli.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <string>
#include <vector>

#include "common/cli_app.hpp"
#include "common/cli_parse.hpp"
#include "common/table.hpp"
#include "plan/model.hpp"
#include "plan/report.hpp"

namespace kvflash::tools::plan {
namespace {

constexpr std::string_view kCtk = "-ctk/--cache-type-k";
constexpr std::string_view kCtv = "-ctv/--cache-type-v";

struct Args {
  std::string model, layers, heads, head_dim, swa_layers, swa_window;
  bool mla = false;
  std::string context = "8192,32768,131072";
  std::string batch = "1", budget, ctk, ctv, format = "md";
  CLI::Option *o_model, *o_layers, *o_heads, *o_head_dim, *o_swa_layers, *o_swa_window, *o_mla;
  CLI::Option *o_budget, *o_ctk, *o_ctv;
};

std::string footer() {
  return fmt::format(
      "Model presets (--model, case-insensitive): {}.\n"
      "K/V types: {}. Default list for both: f16,q8_0,q4_0,turbo4,turbo3,turbo2.\n"
      "Pairs: with both -ctk and -ctv, every K x V pair; with one of them, or neither, the same\n"
      "type for K and V over that list (or the default list). MLA models ignore -ctv.\n"
      "Examples:\n"
      "  kvflash-plan --model llama-3.1-8b -c 131072 --budget 80G\n"
      "  kvflash-plan --model gemma-3-27b -c 4096-1048576*4 --budget 24GiB -o csv\n"
      "  kvflash-plan --layers 40 --heads 40/8 --head-dim 128 -ctk q8_0 -ctv q4_0,turbo3\n",
      preset_names(), kv_type_names());
}

void add_options(CLI::App& app, Args& a) {
  app.footer(footer());
  a.o_model =
      app.add_option("-m,--model", a.model, "model preset: " + preset_names())->type_name("NAME");
  a.o_layers =
      app.add_option("--layers", a.layers, "explicit shape: transformer layers")->type_name("N");
  a.o_heads = app.add_option("--heads", a.heads, "explicit shape: query heads/KV heads, e.g. 32/8")
                  ->type_name("Q/KV");
  a.o_head_dim = app.add_option("--head-dim", a.head_dim,
                                "explicit shape: head dim, K/V when they differ (default 128)")
                     ->type_name("D|K/V");
  a.o_swa_layers = app.add_option("--swa-layers", a.swa_layers,
                                  "explicit shape: how many layers use a sliding window")
                       ->type_name("N");
  a.o_swa_window =
      app.add_option("--swa-window", a.swa_window, "explicit shape: the sliding window in tokens")
          ->type_name("W");
  a.o_mla = app.add_flag("--mla", a.mla,
                         "explicit shape: K and V read from one stored latent of head-dim K "
                         "values (V = its first head-dim V values), e.g. --head-dim 576/512");
  app.add_option("-c,--context", a.context,
                 "context lengths in tokens: list or range, e.g. 8192,131072 or 4096-1048576*2")
      ->type_name("LIST")
      ->capture_default_str();
  app.add_option("--batch", a.batch, "sequences in the batch, all at the context length")
      ->type_name("N")
      ->capture_default_str();
  a.o_budget = app.add_option("--budget", a.budget,
                              "memory for the KV cache, e.g. 80G or 141GiB (powers of 1024)")
                   ->type_name("SIZE");
  a.o_ctk = app.add_option("--ctk,--cache-type-k", a.ctk, "(-ctk) K types, comma list")
                ->type_name("TYPES");
  a.o_ctv = app.add_option("--ctv,--cache-type-v", a.ctv, "(-ctv) V types, comma list")
                ->type_name("TYPES");
  app.add_option("-o,--output", a.format, "md, csv or json")
      ->type_name("FORMAT")
      ->capture_default_str();
}

Expected<ModelShape> build_model(const Args& a) {
  const bool explicit_shape = a.o_layers->count() || a.o_heads->count() || a.o_head_dim->count() ||
                              a.o_swa_layers->count() || a.o_swa_window->count() ||
                              a.o_mla->count();
  if (a.o_model->count()) {
    if (explicit_shape)
      return invalid_argument(
          "--model: a preset cannot be combined with --layers, --heads, --head-dim, "
          "--swa-layers, --swa-window or --mla; give one or the other");
    return find_preset("--model", a.model);
  }
  if (explicit_shape && !a.o_layers->count())
    return invalid_argument("--layers: required with an explicit shape, e.g. --layers 32");
  if (explicit_shape && !a.o_heads->count())
    return invalid_argument("--heads: required with an explicit shape, e.g. --heads 32/8");
  if (!explicit_shape)
    return invalid_argument(
        fmt::format("give a model: --model NAME ({}) or an explicit shape: --layers N --heads Q/KV "
                    "[--head-dim D] [--swa-layers N --swa-window W] [--mla]",
                    preset_names()));
  ModelShape m;
  auto layers = parse_int("--layers", a.layers, 1, 65536);
  if (!layers) return layers.error();
  m.layers = static_cast<int32_t>(*layers);
  auto heads = parse_heads("--heads", a.heads);
  if (!heads) return heads.error();
  if (heads->size() != 1)
    return invalid_argument(
        fmt::format("--heads: '{}' is not valid; expected one Q/KV pair, e.g. 32/8", a.heads));
  m.q_heads = heads->front().first;
  m.kv_heads = heads->front().second;
  if (a.o_head_dim->count()) {
    auto dims = parse_head_dims("--head-dim", a.head_dim);
    if (!dims) return dims.error();
    if (dims->size() != 1)
      return invalid_argument(fmt::format(
          "--head-dim: '{}' is not valid; expected one head dim, e.g. 128 or 576/512", a.head_dim));
    m.head_dim = dims->front();
  }
  if (a.o_swa_layers->count() != a.o_swa_window->count())
    return invalid_argument(
        "--swa-layers and --swa-window go together: how many layers use a sliding window, and "
        "its length in tokens");
  if (a.o_swa_layers->count()) {
    auto n = parse_int("--swa-layers", a.swa_layers, 0, m.layers);
    if (!n) return n.error();
    auto w = parse_int("--swa-window", a.swa_window, 1, SupportedSpace::max_kv_len);
    if (!w) return w.error();
    m.swa_layers = static_cast<int32_t>(*n);
    m.swa_window = *w;
  }
  m.mla = a.mla;
  if (Status s = validate(m); !s) return s.error();
  return m;
}

Expected<PlanRequest> build_request(const Args& a) {
  PlanRequest req;
  auto model = build_model(a);
  if (!model) return model.error();
  req.model = *model;
  auto contexts = parse_int_list("-c/--context", a.context);
  if (!contexts) return contexts.error();
  for (int64_t c : *contexts)
    if (c > SupportedSpace::max_kv_len)
      return invalid_argument(fmt::format(
          "-c/--context: '{}' is not valid; kvflash supports up to {} tokens per sequence", c,
          SupportedSpace::max_kv_len));
  req.contexts = *contexts;
  auto batch = parse_int("--batch", a.batch, 1, SupportedSpace::max_seqs);
  if (!batch) return batch.error();
  req.batch = *batch;
  if (a.o_budget->count()) {
    auto budget = parse_bytes("--budget", a.budget);
    if (!budget) return budget.error();
    req.budget = *budget;
  }
  std::vector<KvType> k_types, v_types;
  if (a.o_ctk->count()) {
    auto t = parse_types(kCtk, a.ctk);
    if (!t) return t.error();
    k_types = *t;
  }
  if (a.o_ctv->count()) {
    auto t = parse_types(kCtv, a.ctv);
    if (!t) return t.error();
    v_types = *t;
  }
  req.pairs =
      make_pairs(k_types, v_types, a.o_ctk->count() > 0, a.o_ctv->count() > 0, req.model.mla);
  auto format = parse_output_format("-o/--output", a.format);
  if (!format) return format.error();
  req.format = *format;
  return req;
}

}  // namespace

int run_plan(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "kvflash-plan: KV cache memory per K/V type for a model shape, the longest context that "
      "fits a memory budget, and the bytes decode reads per generated token",
      "kvflash-plan"};
  Args a;
  add_options(app, a);
  try {
    parse_llama_style(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a ParseError with exit code 0; everything else is a usage error.
    const int code = app.exit(e, out, err);
    return code == 0 ? 0 : kExitUsage;
  }
  auto req = build_request(a);
  if (!req) {
    err << "kvflash-plan: " << req.error().message << "\n";
    return kExitUsage;
  }
  auto rows = compute_rows(*req);
  if (!rows) {
    err << "kvflash-plan: " << rows.error().message << "\n";
    return kExitUsage;
  }
  out << render(*req, *rows);
  // CSV has no room for notes without breaking its readers: they go to stderr.
  if (req->format == OutputFormat::csv)
    for (const std::string& n : notes(*req, *rows)) err << "note: " << n << "\n";
  return 0;
}

}  // namespace kvflash::tools::plan
