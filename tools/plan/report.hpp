// kvflash-plan's rows and their rendering: one row per (context, K type, V type) with the bytes
// per token, the KV memory of the batch, the compression against f16/f16, the longest context
// that fits the budget and the bytes one decode step reads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/table.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/status.hpp"
#include "plan/model.hpp"

namespace kvflash::tools::plan {

struct TypePair {
  KvType k = KvType::f16;
  KvType v = KvType::f16;
  friend bool operator==(TypePair, TypePair) = default;
};

// The default type list of -ctk and -ctv.
std::vector<KvType> default_types();
// Which K/V pairs to report. Both lists given explicitly: every K x V pair. Otherwise the same
// type for K and V (diagonal pairs) over the list that was given (-ctk or -ctv alone), or over the
// defaults: six mixed-type lists would give 36 rows, which hides the answer. MLA: only the K list
// counts (V is read from the K latent). Duplicates are dropped, order kept.
std::vector<TypePair> make_pairs(const std::vector<KvType>& k_types,
                                 const std::vector<KvType>& v_types, bool k_given, bool v_given,
                                 bool mla);

struct PlanRequest {
  ModelShape model;
  std::vector<int64_t> contexts;
  int64_t batch = 1;
  std::optional<int64_t> budget;  // bytes for the KV cache; none: no max-context column
  std::vector<TypePair> pairs;
  OutputFormat format = OutputFormat::md;
};

struct PlanRow {
  int64_t context = 0;
  TypePair types;
  int64_t bytes_per_token = 0;         // all layers, padding included, window not applied
  int64_t kv_bytes = 0;                // batch sequences of `context` tokens
  double vs_f16 = 1.0;                 // f16/f16 bytes / these bytes (the same at every context)
  std::optional<int64_t> max_context;  // per sequence, given the batch; only with a budget
  bool unbounded = false;              // with a budget: every layer is windowed, any context fits
  int64_t read_bytes = 0;              // one decode step of one sequence at `context`
  double pad = 1.0;                    // stored / useful bytes (> 1 when rows are padded)
};

// One row per context and pair, in that order; an error names --context (or the model flags)
// when a cache would not fit in 64-bit byte counts.
Expected<std::vector<PlanRow>> compute_rows(const PlanRequest& req);
// What a reader must know to read the numbers right (MLA, sliding windows, padding, batch).
std::vector<std::string> notes(const PlanRequest& req, const std::vector<PlanRow>& rows);
// The table for people: GiB with 2 decimals, the max-context column only with a budget, the pad
// column only when some row is padded.
Table markdown_table(const PlanRequest& req, const std::vector<PlanRow>& rows);
// The table for programs: exact bytes, a fixed set of columns (null / empty where not
// applicable), so every run has the same schema.
Table data_table(const PlanRequest& req, const std::vector<PlanRow>& rows);
// The whole stdout text in req.format. md: a heading line, the table and the notes. csv: the
// data table alone (notes go to stderr). json: {"model": {...}, "batch", "budget_bytes",
// "notes": [...], "rows": [...]}.
std::string render(const PlanRequest& req, const std::vector<PlanRow>& rows);

}  // namespace kvflash::tools::plan
