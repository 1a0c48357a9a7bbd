#include "plan/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/cli_parse.hpp"

namespace kvflash::tools::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double gib(int64_t bytes) {
  return static_cast<double>(bytes) / kGiB;
}

std::string type_name(KvType t) {
  return std::string(to_string(t));
}

bool any_padded(const std::vector<PlanRow>& rows) {
  return std::any_of(rows.begin(), rows.end(), [](const PlanRow& r) { return r.pad > 1.0; });
}

// Whether a ratio of byte counts differs from 1 by more than rounding.
bool is_padded(double ratio) {
  return ratio > 1.0 + 1e-9;
}

// `text` broken into lines of at most `width` characters at spaces, the first line starting with
// `lead` and the others indented under it: notes stay readable in an 100-column terminal.
std::string wrap(std::string_view lead, std::string_view text, size_t width = 100) {
  std::string out(lead), line(lead);
  const std::string indent(lead.size(), ' ');
  for (const std::string& word : split(text, ' ')) {
    if (line.size() > indent.size() && line.size() + 1 + word.size() > width) {
      out += "\n" + indent;
      line = indent;
    } else if (line.size() > lead.size()) {
      out += ' ';
      line += ' ';
    }
    out += word;
    line += word;
  }
  return out + "\n";
}

}  // namespace

std::vector<KvType> default_types() {
  return {KvType::f16, KvType::q8_0, KvType::q4_0, KvType::turbo4, KvType::turbo3, KvType::turbo2};
}

std::vector<TypePair> make_pairs(const std::vector<KvType>& k_types,
                                 const std::vector<KvType>& v_types, bool k_given, bool v_given,
                                 bool mla) {
  std::vector<TypePair> out;
  auto push = [&out](TypePair p) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  if (mla) {
    // V comes out of the K latent, so each K type gives one row whatever -ctv says; the V column
    // repeats the K type.
    for (KvType k : k_given ? k_types : default_types()) push({k, k});
  } else if (k_given && v_given) {
    for (KvType k : k_types)
      for (KvType v : v_types) push({k, v});
  } else {
    const std::vector<KvType>& list = k_given ? k_types : v_given ? v_types : default_types();
    for (KvType t : list) push({t, t});
  }
  return out;
}

Expected<std::vector<PlanRow>> compute_rows(const PlanRequest& req) {
  std::vector<PlanRow> rows;
  const ModelShape& m = req.model;
  const double f16_layer = static_cast<double>(layer_token_bytes(m, KvType::f16, KvType::f16));
  for (int64_t context : req.contexts) {
    for (TypePair p : req.pairs) {
      PlanRow r;
      r.context = context;
      r.types = p;
      r.bytes_per_token = token_bytes(m, p.k, p.v);
      const auto seq = sequence_bytes(m, p.k, p.v, context);
      const auto all = cache_bytes(m, p.k, p.v, context, req.batch);
      if (!seq || !all)
        return invalid_argument(fmt::format(
            "-c/--context: {} tokens x {} sequence(s) of {} B/token overflow a 64-bit byte "
            "count; use a smaller context, batch or model",
            context, req.batch, token_bytes(m, p.k, p.v)));
      r.kv_bytes = *all;
      r.read_bytes = *seq;
      // Full and windowed layers scale alike with the per-layer bytes, so the ratio of one
      // layer's bytes is the ratio of the whole cache at any context.
      const double layer = static_cast<double>(layer_token_bytes(m, p.k, p.v));
      r.vs_f16 = f16_layer / layer;
      r.pad = layer / layer_token_bytes_unpadded(m, p.k, p.v);
      if (!is_padded(r.pad)) r.pad = 1.0;
      if (req.budget) {
        r.max_context = max_context(m, p.k, p.v, *req.budget, req.batch);
        r.unbounded = !r.max_context.has_value();
      }
      rows.push_back(r);
    }
  }
  return rows;
}

std::vector<std::string> notes(const PlanRequest& req, const std::vector<PlanRow>& rows) {
  const ModelShape& m = req.model;
  std::vector<std::string> out;
  if (m.mla)
    out.push_back(fmt::format(
        "MLA: K and V are read from one stored latent of {} values per token per layer (V = its "
        "first {}), so a layer stores row_size(K type, {}) bytes per token; the V type is ignored "
        "(-ctv has no effect) and the V column repeats the K type",
        m.head_dim.k, m.head_dim.v, m.head_dim.k));
  if (m.swa_layers > 0)
    out.push_back(fmt::format(
        "sliding window: {} of the {} layers keep only the last {} tokens; KV memory, max context "
        "and reads count them at min(context, {}); B/token counts every layer (what a token costs "
        "until the window is full)",
        m.swa_layers, m.layers, m.swa_window, m.swa_window));
  if (any_padded(rows))
    out.push_back(
        "pad: stored bytes / useful bytes: a row is stored as whole blocks, the last one "
        "zero-padded (turbo types: 128 values, q8_0/q4_0: 32); the bytes above include it");
  if (req.batch > 1)
    out.push_back(fmt::format(
        "batch {}: KV memory is for all {} sequences; max context is per sequence with all of them "
        "at that length; decode reads are per sequence per generated token",
        req.batch, req.batch));
  auto any_above = [&rows](int64_t limit) {
    return std::any_of(rows.begin(), rows.end(), [limit](const PlanRow& r) {
      return r.context > limit || (r.max_context && *r.max_context > limit);
    });
  };
  if (m.trained_context > 0 && any_above(m.trained_context))
    out.push_back(fmt::format(
        "{} was trained for {} tokens (max_position_embeddings): contexts above that are what "
        "the memory holds, not what the model handles",
        m.name, m.trained_context));
  if (any_above(SupportedSpace::max_kv_len))
    out.push_back(fmt::format("kvflash supports up to {} tokens per sequence (2^32)",
                              SupportedSpace::max_kv_len));
  if (std::any_of(rows.begin(), rows.end(), [](const PlanRow& r) { return r.unbounded; }))
    out.push_back("unlimited: every layer keeps a sliding window, so the cache stops growing");
  return out;
}

Table markdown_table(const PlanRequest& req, const std::vector<PlanRow>& rows) {
  const bool budget = req.budget.has_value();
  const bool pad = any_padded(rows);
  std::vector<Column> cols = {{"context", 0, true}, {"K", 0, false},     {"V", 0, false},
                              {"B/token", 0, true}, {"KV GiB", 2, true}, {"vs f16", 0, true}};
  if (budget) cols.push_back({"max context", 0, true});
  cols.push_back({"read GiB/token", 2, true});
  if (pad) cols.push_back({"pad", 0, true});
  Table t(std::move(cols));
  for (const PlanRow& r : rows) {
    std::vector<Cell> cells = {
        r.context,         type_name(r.types.k), type_name(r.types.v),
        r.bytes_per_token, gib(r.kv_bytes),      fmt::format("{:.2f}x", r.vs_f16)};
    // if/else rather than ?: between Cells: GCC 12 warns (-Wmaybe-uninitialized, a false
    // positive) on a conditional of two std::variant temporaries.
    if (budget && r.unbounded)
      cells.emplace_back(std::string("unlimited"));
    else if (budget)
      cells.emplace_back(*r.max_context);
    cells.emplace_back(gib(r.read_bytes));
    if (pad && r.pad > 1.0)
      cells.emplace_back(fmt::format("{:.2f}x", r.pad));
    else if (pad)
      cells.emplace_back();
    t.add_row(std::move(cells));
  }
  return t;
}

Table data_table(const PlanRequest& req, const std::vector<PlanRow>& rows) {
  Table t({{"model", 0, false},
           {"context", 0, true},
           {"batch", 0, true},
           {"k_type", 0, false},
           {"v_type", 0, false},
           {"bytes_per_token", 0, true},
           {"kv_bytes", 0, true},
           {"vs_f16", 4, true},
           {"budget_bytes", 0, true},
           {"max_context", 0, true},
           {"read_bytes_per_token", 0, true},
           {"pad", 4, true}});
  for (const PlanRow& r : rows) {
    // Empty (CSV) / null (JSON) where a value does not apply: no budget, an unbounded context,
    // an unpadded row.
    const Cell budget = req.budget ? Cell{*req.budget} : Cell{};
    const Cell max_ctx = r.max_context ? Cell{*r.max_context} : Cell{};
    t.add_row({req.model.name, r.context, req.batch, type_name(r.types.k), type_name(r.types.v),
               r.bytes_per_token, r.kv_bytes, r.vs_f16, budget, max_ctx, r.read_bytes,
               r.pad > 1.0 ? Cell{r.pad} : Cell{}});
  }
  return t;
}

std::string render(const PlanRequest& req, const std::vector<PlanRow>& rows) {
  const ModelShape& m = req.model;
  const std::vector<std::string> text_notes = notes(req, rows);
  if (req.format == OutputFormat::csv) return data_table(req, rows).csv();
  if (req.format == OutputFormat::json) {
    // Ordered: the model first, the rows last, as a person reads it.
    nlohmann::ordered_json doc;
    doc["model"] = {
        {"name", m.name},
        {"layers", m.layers},
        {"q_heads", m.q_heads},
        {"kv_heads", m.kv_heads},
        {"head_dim_k", m.head_dim.k},
        {"head_dim_v", m.head_dim.v},
        {"swa_layers", m.swa_layers},
        {"swa_window", m.swa_window},
        {"mla", m.mla},
        {"trained_context", m.trained_context > 0 ? nlohmann::ordered_json(m.trained_context)
                                                  : nlohmann::ordered_json(nullptr)}};
    doc["batch"] = req.batch;
    doc["budget_bytes"] =
        req.budget ? nlohmann::ordered_json(*req.budget) : nlohmann::ordered_json(nullptr);
    doc["notes"] = text_notes;
    // The rows are the data table's, so CSV and JSON carry the same keys.
    doc["rows"] = nlohmann::ordered_json::parse(data_table(req, rows).json());
    return doc.dump(2) + "\n";
  }
  std::string out = fmt::format("{}; batch {}", describe(m), req.batch);
  if (req.budget) out += fmt::format("; budget {:.2f} GiB ({} B)", gib(*req.budget), *req.budget);
  out += "\n\n" + markdown_table(req, rows).markdown() + "\n";
  std::string legend =
      "B/token: bytes one token adds over all layers; KV GiB: the cache of batch x context tokens; "
      "vs f16: f16/f16 bytes / these bytes; ";
  if (req.budget) legend += "max context: the longest context per sequence that fits the budget; ";
  legend +=
      "read GiB/token: bytes one decode step reads per sequence (each layer's stored tokens, "
      "once).";
  out += wrap("", legend);
  for (const std::string& n : text_notes) out += wrap("note: ", n);
  return out;
}

}  // namespace kvflash::tools::plan
