// kvflash-parity: every backend against the float64 reference on one case list.
//
//   kvflash-parity                          correctness of every backend on the "test" set
//   kvflash-parity -b cpu -f 'q4_0' -f kv1000
//   kvflash-parity --mode perf --set long --csv perf.csv
//   kvflash-parity --mode support -b all
//
// The last line is always "N passed, M failed[, K skipped]"; the exit code is 0 only when no case
// failed and at least one passed. With --skip-unavailable, a requested backend that cannot run on
// this machine (not built, no kernel, no CUDA device) is left out, and when none is left the tool
// runs nothing and exits with 77, which CTest's SKIP_RETURN_CODE turns into a skipped test.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "case.hpp"
#include "harness.hpp"
#include "kvflash/device.hpp"
#include "kvflash/registry.hpp"
#include "name_filter.hpp"
#include "report.hpp"

namespace {

using namespace kvflash;
using namespace kvflash::parity;

constexpr int kExitUsage = 2;
constexpr int kExitSkipped = 77;  // --skip-unavailable and no requested backend can run here

// Backends that have at least one candidate built into the library, in enum order.
std::vector<Backend> built_backends() {
  std::set<int> seen;
  for (const KernelCandidate& k : kernel_candidates()) seen.insert(static_cast<int>(k.backend));
  std::vector<Backend> out;
  for (int b : seen) out.push_back(static_cast<Backend>(b));
  return out;
}

std::string names(const std::vector<Backend>& bs) {
  std::string s;
  for (Backend b : bs) {
    if (!s.empty()) s += ", ";
    s += to_string(b);
  }
  return s.empty() ? "none" : s;
}

// Why a built backend cannot run on this machine, or "" when it can.
std::string unavailable_reason(Backend b) {
  if (b == Backend::cuda && cuda_device_count() == 0) return "no CUDA device is visible";
  return {};
}

struct BackendChoice {
  std::vector<Backend> run;
  std::vector<std::string> left_out;  // --skip-unavailable: "<backend>: <why>"
};

// "all": every built backend; a name: that backend, which must be built (asking for a backend
// that is not there is an error, never a silent pass). With skip_unavailable, a backend that
// cannot run here is left out with its reason instead.
std::optional<BackendChoice> resolve_backends(const std::string& which, bool skip_unavailable) {
  const std::vector<Backend> built = built_backends();
  BackendChoice choice;
  std::vector<Backend> asked = built;
  if (which != "all") {
    const std::optional<Backend> b = backend_from_name(which);
    if (!b) {
      fmt::print(stderr, "unknown backend '{}': use cpu, cuda or all\n", which);
      return std::nullopt;
    }
    if (std::find(built.begin(), built.end(), *b) == built.end()) {
      const std::string why =
          fmt::format("backend {} has no kernel in this build (built: {})", which, names(built));
      if (!skip_unavailable) {
        fmt::print(stderr, "{}\n", why);
        return std::nullopt;
      }
      choice.left_out.push_back(
          fmt::format("backend {}: no kernel in this build (built: {})", which, names(built)));
    }
    asked.clear();
    if (choice.left_out.empty()) asked.push_back(*b);
  }
  for (Backend b : asked) {
    const std::string why = skip_unavailable ? unavailable_reason(b) : std::string();
    if (why.empty())
      choice.run.push_back(b);
    else
      choice.left_out.push_back(fmt::format("backend {}: {}", to_string(b), why));
  }
  return choice;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvflash-parity: every backend against the float64 reference"};
  std::string mode_name = "test";
  std::string backend_name = "all";
  std::string set_name = "test";
  std::vector<std::string> filters;
  bool list = false;
  std::string csv_path;
  RunOptions opt;
  app.add_option("--mode", mode_name, "test: correctness; perf: timing; support: registry only")
      ->check(CLI::IsMember({"test", "perf", "support"}))
      ->capture_default_str();
  app.add_option("-b,--backend", backend_name, "cpu, cuda or all (every built backend)")
      ->capture_default_str();
  app.add_option("-f,--filter", filters,
                 "regex searched in the case name; repeat to narrow (a case must match all)");
  app.add_flag("--list", list, "print the selected case names and exit");
  int one_in = 1;
  app.add_option("--one-in", one_in,
                 "keep one case in N of the selection (the 1st, the N+1st, ...): a spread sample, "
                 "for slow builds such as the sanitizer's")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("-s,--set,--list-set", set_name,
                 "case set: test (fast), long (256K-4M tokens), prefill (chunked prefill to 1M "
                 "tokens, paged, for CUDA), all")
      ->check(CLI::IsMember({"test", "long", "prefill", "all"}))
      ->capture_default_str();
  app.add_option("--csv", csv_path, "write one row per case and backend to this file");
  app.add_option("--seed", opt.seed, "run seed; each case's inputs derive from it and its name")
      ->capture_default_str();
  app.add_option("-t,--threads", opt.n_threads, "CPU threads (PlanOptions::n_threads, 0 = all)")
      ->capture_default_str();
  app.add_option("--kernel", opt.force, "force this kernel candidate (SelectOptions::force)");
  app.add_option("--exclude", opt.exclude, "never select this kernel candidate (repeatable)");
  app.add_flag("--all-kernels", opt.all_kernels,
               "run every candidate that accepts a case (forced by name), not only the preferred "
               "one: covers the paths other processors select (e.g. portable vs AVX-512)");
  bool skip_unavailable = false;
  app.add_flag("--skip-unavailable", skip_unavailable,
               "leave out a requested backend that cannot run here (not built, no kernel, no CUDA "
               "device); when none is left, run nothing and exit with 77 (CTest SKIP_RETURN_CODE)");
  app.add_option("--warmup", opt.warmup, "perf: untimed runs per case")->capture_default_str();
  app.add_option("--reps", opt.reps, "perf: timed runs per case (median reported)")
      ->capture_default_str();
  std::string inject_name = "none";
  app.add_option("--inject", inject_name,
                 "self-check of the harness: corrupt the buffers after each run (test mode); "
                 "every case must then FAIL")
      ->check(
          CLI::IsMember(std::vector<std::string>(std::begin(kFaultNames), std::end(kFaultNames))))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  opt.inject =
      static_cast<Fault>(std::find(std::begin(kFaultNames), std::end(kFaultNames), inject_name) -
                         std::begin(kFaultNames));

  opt.mode = mode_name == "perf" ? Mode::perf : mode_name == "support" ? Mode::support : Mode::test;
  const CaseSet set = set_name == "long"      ? CaseSet::long_context
                      : set_name == "prefill" ? CaseSet::prefill
                      : set_name == "all"     ? CaseSet::all
                                              : CaseSet::test;

  std::unique_ptr<NameFilter> filter;
  try {
    filter = std::make_unique<NameFilter>(filters);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bad --filter regex: {}\n", e.what());
    return kExitUsage;
  }
  std::vector<ParityCase> cases;
  int64_t matched = 0;
  for (const ParityCase& c : build_case_set(set))
    if (filter->matches(case_name(c)) && matched++ % one_in == 0) cases.push_back(c);
  if (list) {
    for (const ParityCase& c : cases) fmt::print("{}\n", case_name(c));
    return 0;
  }

  const std::optional<BackendChoice> backends = resolve_backends(backend_name, skip_unavailable);
  if (!backends) return kExitUsage;
  for (const std::string& why : backends->left_out) fmt::print("skipping {}\n", why);
  if (backends->run.empty()) {
    fmt::print("no requested backend can run here: skipped (exit code {})\n", kExitSkipped);
    return kExitSkipped;
  }
  opt.backends = backends->run;
  std::optional<CsvWriter> csv;
  if (!csv_path.empty()) {
    csv.emplace(csv_path);
    if (!csv->ok()) {
      fmt::print(stderr, "cannot write --csv {}\n", csv_path);
      return kExitUsage;
    }
  }

  fmt::print("kvflash-parity: mode {}, set {}, {} cases, backends {}, seed {}, threads {}\n",
             mode_name, set_name, cases.size(), names(opt.backends), opt.seed,
             opt.n_threads == 0 ? std::string("all") : std::to_string(opt.n_threads));
  std::fflush(stdout);

  const auto t0 = std::chrono::steady_clock::now();
  std::map<Outcome, int64_t> count;
  for (const ParityCase& c : cases)
    for (const CaseResult& r : run_case(c, opt)) {
      ++count[r.outcome];
      print_result(stdout, opt.mode, r);
      if (csv) csv->write(r);
    }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  fmt::print("wall time {:.1f} s\n", wall_s);
  std::string summary =
      fmt::format("{} passed, {} failed", count[Outcome::pass], count[Outcome::fail]);
  if (count[Outcome::skip] > 0) summary += fmt::format(", {} skipped", count[Outcome::skip]);
  fmt::print("{}\n", summary);
  return count[Outcome::fail] == 0 && count[Outcome::pass] > 0 ? 0 : 1;
}
