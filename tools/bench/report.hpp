// Turning measured points into what people and programs read: the markdown table (only the
// columns that say something for this run, as llama-bench does), the CSV/JSON table (every field,
// stable names), and the charts for --plot.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/metrics.hpp"
#include "bench/plot.hpp"
#include "bench/runner.hpp"
#include "common/table.hpp"

namespace kvflash::bench {

struct Row {
  AttentionProblem problem;
  RaggedBatch ragged;  // --ragged: each sequence's queries and tokens (problem.ragged_q)
  Timing timing;
  double gbps = 0;                   // KV bytes / median time
  double tflops = 0;                 // attention flops / median time
  double mem_bw_gbps = 0;            // the backend's memory read bandwidth, 0 = unknown
  std::optional<double> pct_mem_bw;  // gbps against it; nullopt when unknown ("n/a")
};

// Fills the speeds of a row from its problem and timing; bandwidth 0 means unknown.
Row make_row(const AttentionProblem& p, const RaggedBatch& ragged, Timing t, double mem_bw_gbps);

// "decode", "spec 4", "prefill 512", "ragged 16" (sequences); paged caches add " paged N" (N
// tokens per page); a batch of sequences with their own lengths (the same queries each) adds
// ", N lens" (its sequences).
std::string test_name(const AttentionProblem& p, const RaggedBatch& ragged = {});
// "32/8" and "128" or "576/512".
std::string heads_name(const AttentionProblem& p);
std::string dims_name(const AttentionProblem& p);

// Every field, for -o csv and -o json; `cpu` names the processor in each row (as llama-bench's
// cpu_info), `seed` the inputs' seed.
tools::Table machine_table(const std::vector<Row>& rows, const std::string& cpu, uint64_t seed);
// For people: only the columns that vary or matter for this run.
tools::Table people_table(const std::vector<Row>& rows, bool show_threads);

// One chart per kind of row present: decode/speculative (KV GB/s) and prefill (TFLOP/s). One
// series per K/V pair; a shape field that differs between rows goes into the series labels,
// one that is the same everywhere into the title.
std::vector<Chart> make_charts(const std::vector<Row>& rows);

}  // namespace kvflash::bench
