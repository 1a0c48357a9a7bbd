// Runs kvflash-bench in-process with captured output, for the bench_*.cpp tests.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.hpp"

namespace kvflash::bench::testing {

struct BenchRun {
  int rc = -1;
  std::string out, err;
};

inline BenchRun run_tool(std::vector<std::string> args) {
  args.insert(args.begin(), "kvflash-bench");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::ostringstream out, err;
  BenchRun r;
  r.rc = run_bench(static_cast<int>(args.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// Small and fast: no bandwidth measurement (given), a 1 MiB "cache" so rotation stays tiny, no
// progress line.
inline std::vector<std::string> quick(std::vector<std::string> args) {
  for (const char* a : {"--mem-bw", "10", "--llc-bytes", "1M", "--no-progress"}) args.push_back(a);
  return args;
}

}  // namespace kvflash::bench::testing
