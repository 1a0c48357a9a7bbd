// Runs one case on every selected backend, in one of three modes:
//   test     plan + run each backend, compare with the float64 reference (and report NaN/inf,
//            sentinel damage, lse mismatches, selector/plan disagreement)
//   perf     plan + run with warm-up and repetitions, median time and effective GB/s
//   support  ask the registry whether each backend serves the case, and which kernel; runs nothing
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "case.hpp"
#include "kvflash/registry.hpp"

namespace kvflash::parity {

enum class Mode { test, perf, support };

// Self-check of the harness: a fault injected into the buffers after each run (test mode), which
// the checks must then report. CTest runs each one and expects its message (tools/parity).
enum class Fault { none, nan, overrun, underrun, perturb, row, lse, workspace };
inline constexpr std::string_view kFaultNames[] = {"none",    "nan", "overrun", "underrun",
                                                   "perturb", "row", "lse",     "workspace"};

struct RunOptions {
  Mode mode = Mode::test;
  std::vector<Backend> backends;
  uint64_t seed = 1;
  int32_t n_threads = 0;             // PlanOptions::n_threads (0 = all hardware threads)
  std::string force;                 // SelectOptions::force
  std::vector<std::string> exclude;  // SelectOptions::exclude
  int32_t warmup = 2;                // perf mode
  int32_t reps = 10;                 // perf mode
  Fault inject = Fault::none;
  // Every candidate of each backend whose guards accept the case, forced by name, instead of
  // only the one select_kernel prefers (opt-in candidates such as the reference stay out).
  bool all_kernels = false;
};

enum class Outcome { pass, fail, skip };
const char* to_string(Outcome o);

struct CaseResult {
  ParityCase c;
  std::string name;
  Backend backend = Backend::cpu;
  uint64_t seed = 0;  // the case's own seed (derived from the run seed and the name)
  Outcome outcome = Outcome::fail;
  std::string kernel;   // the candidate chosen, "" when none
  std::string message;  // why it failed or was skipped; notes on a pass
  int32_t n_splits = 0;
  size_t workspace_bytes = 0;
  int64_t empty_rows = -1;  // test: query rows that see nothing (the reference is zero there)
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  double nmse = kNone;
  double nmse_bound = kNone;  // the bound actually applied (case bound + baseline margin)
  double baseline_nmse = kNone;
  double max_abs_err = kNone;
  double worst_row_nmse = kNone;
  double lse_max_err = kNone;
  double time_us = kNone;  // test: one run; perf: median of the repetitions
  double gbps = kNone;     // perf: visible KV bytes / median time
};

// One result per backend in opt.backends, in that order (with all_kernels, one per accepting
// candidate of each backend).
std::vector<CaseResult> run_case(const ParityCase& c, const RunOptions& opt);

}  // namespace kvflash::parity
