// Command line of kvflash-bench, in the habits of llama-bench: every sweep flag takes a comma list
// (or ranges, see common/cli_parse.hpp) and may be repeated; every combination is run. Parsing is
// kept apart from running so tests can check each error message without running a benchmark.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "bench/metrics.hpp"
#include "common/table.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/problem.hpp"

namespace kvflash::bench {

// Usage errors (a bad flag or value) exit with 2, as CLI tools conventionally do; failures while
// running (no kernel, out of memory) with 1.
inline constexpr int kExitUsage = 2;
inline constexpr int kExitFailure = 1;

enum class BackendChoice { cpu, cuda, best };  // best: "--backend auto"

struct KvPair {
  KvType k;
  KvType v;
};

struct BenchOptions {
  BackendChoice backend = BackendChoice::best;
  std::vector<KvPair> pairs;
  std::vector<std::pair<int32_t, int32_t>> heads;  // (query heads, KV heads)
  std::vector<HeadDims> head_dims;
  std::vector<int64_t> depths;
  std::vector<int32_t> n_q;               // query tokens per step
  std::vector<int32_t> batch;             // sequences
  std::vector<int32_t> page_sizes = {0};  // 0: contiguous caches; N: pages of N tokens
  std::vector<int32_t> threads;           // empty: every hardware thread
  RaggedBatch ragged;  // --ragged: one ragged batch instead of the -n / -d / -b sweep
  int32_t reps = 5;
  int32_t warmup = 1;
  tools::OutputFormat format = tools::OutputFormat::md;
  std::string plot_path;  // "" = no plot; else ends in .svg or .png
  uint64_t seed = 42;
  double mem_bw_gbps = 0;  // > 0: use instead of measuring the machine's read bandwidth
  int64_t llc_bytes = 0;   // > 0: last-level cache size to rotate past, instead of sysconf
  bool progress = true;    // progress line on stderr for long sweeps
};

struct ParseResult {
  std::optional<BenchOptions> options;  // nullopt: stop and return exit_code
  int exit_code = 0;
};

// Parses argv (argv[0] is the program name). --help prints to `out` and gives exit code 0; every
// error prints one message naming the flag and what is allowed to `err`, exit code kExitUsage.
ParseResult parse_options(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

// --ragged's value: "issue39" (issue39_batch()), "serving64" / "serving256" (serving_batch()) or a
// comma list of QUERIES:TOKENS per sequence, e.g. "1:4096,512:8192,0:100", each 0 <= QUERIES <=
// TOKENS, TOKENS >= 1. The error names the flag.
Expected<RaggedBatch> parse_ragged(std::string_view flag, const std::string& text);

// The K/V pairs the type flags describe. Both given: every (k, v) pair. Only one given: the
// diagonal (k, k), so "-ctk f16,q4_0" runs f16/f16 and q4_0/q4_0 and not the mixed pairs.
std::vector<KvPair> kv_pairs(const std::vector<KvType>& k, const std::vector<KvType>& v);

// Whether an executable of this name is on PATH (rsvg-convert for --plot FILE.png).
bool on_path(const std::string& program);

}  // namespace kvflash::bench
