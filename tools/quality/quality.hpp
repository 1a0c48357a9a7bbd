// kvflash-quality: how much accuracy each KV type and K/V pair costs, against the float64
// reference, on synthetic KV that looks like real KV (suite.hpp, synthetic.hpp).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/table.hpp"
#include "quality/suite.hpp"

namespace kvflash::quality {

inline constexpr uint64_t kDefaultSeed = 42;

struct QualityOptions {
  SuiteConfig suite;
  tools::OutputFormat format = tools::OutputFormat::md;
  bool run_attention = true;
  bool run_needle = true;
  bool fast = false;
  bool progress = true;
};

// The default pairs: the diagonal of f16, bf16, q8_0, q4_0, turbo4, turbo3, turbo2, then the
// mixed pairs people run (8-bit K is what keeps quality with a small V: FIELD-NOTES).
std::vector<KvPair> default_pairs();

// Parses the command line (argv[0] is the program name). Errors name the flag. `--help` is not
// handled here (run_quality does it).
Expected<QualityOptions> parse_quality_args(int argc, const char* const* argv);

// The report in the requested format. md: a header with the seed, then one table per test. csv:
// one table, a `test` column saying which test a row belongs to (cells of the other test empty),
// the seed in every row. json: {"tool", "seed", "config", "attention": [...], "needle": [...]}.
std::string render_report(const QualityOptions& o, const std::vector<AttentionRow>& attention,
                          const std::vector<NeedleRow>& needle);

// The whole tool: parse, run, print the report on `out`; errors and help on `err` / `out`.
// Returns the process exit status (0 ok, 1 a run error, 2 a usage error).
int run_quality(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace kvflash::quality
