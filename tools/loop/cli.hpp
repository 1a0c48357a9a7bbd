// kvflash-loop's command line. run_loop_cli is the whole tool with its streams passed in, so the
// tests run it in-process; parse_loop_args is its parsing alone.
#pragma once

#include <ostream>
#include <string>

#include "common/table.hpp"
#include "kvflash/status.hpp"
#include "loop/loop.hpp"
#include "loop/prefill.hpp"

namespace kvflash::tools::loop {

// Exit codes: 0 success (or --help), 1 the run failed (no device, ...), 2 usage error (the
// message names the flag and what is allowed).
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

struct LoopArgs {
  LoopConfig config;
  std::string format = "md";
  bool help = false;
  std::string help_text;
};
Expected<LoopArgs> parse_loop_args(int argc, const char* const* argv);

// The prefill mode's report: a table (md, csv, json); md adds a header line saying the shape, a
// note on what each column measures, and the graph runner's counters.
std::string render_prefill(const LoopConfig& c, const PrefillReport& rep,
                           tools::OutputFormat format);

int run_loop_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace kvflash::tools::loop
