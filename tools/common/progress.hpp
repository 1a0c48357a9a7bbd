// A progress line on stderr for sweeps longer than a few seconds: silent for the first
// kQuietSeconds (short runs print nothing), then "\r[k/N] label  elapsed, ~remaining" at most a
// few times a second; finish() clears it. Never written to stdout, so tables stay clean.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kvflash::tools {

class Progress {
 public:
  static constexpr double kQuietSeconds = 2.0;
  explicit Progress(int64_t total, bool enabled = true);
  void step(const std::string& label);  // call after finishing one item
  void finish();

 private:
  using clock = std::chrono::steady_clock;
  int64_t total_, done_ = 0;
  bool enabled_, shown_ = false;
  clock::time_point start_, last_;
};

}  // namespace kvflash::tools
