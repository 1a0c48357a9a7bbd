// Small pieces both kvflash-loop modes (decode steps, prefill chunks) use: the median of timed
// steps, an error prefixed with what was being done, and the key a captured step folds into its
// shape signature.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kvflash/status.hpp"

namespace kvflash::tools::loop {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline Error at(const std::string& what, const Error& e) {
  return Error{e.code, fmt::format("{}: {}", what, e.message)};
}

// What a captured step bakes in besides the problem (layer count, types, buffer addresses), as one
// FNV-1a hash for ShapeSignature::key: a different buffer or layer count is a different graph.
class StepKey {
 public:
  void mix(uint64_t x) { key_ = (key_ ^ x) * 1099511628211ull; }
  void mix(const void* p) { mix(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))); }
  uint64_t value() const { return key_; }

 private:
  uint64_t key_ = 1469598103934665603ull;
};

}  // namespace kvflash::tools::loop
