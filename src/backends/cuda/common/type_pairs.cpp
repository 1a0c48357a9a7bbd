#include "backends/cuda/common/type_pairs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

// Set by src/backends/cuda/CMakeLists.txt from the CMake option of the same name, for this file
// and for the kernel tables of decode.cu and prefill.cu alike.
#ifndef KVFLASH_CUDA_ALL_PAIRS
#error "KVFLASH_CUDA_ALL_PAIRS (0 or 1) must be defined by the build"
#endif

namespace kvflash::cuda {

namespace {

// "every type with itself, q8_0 K with q4_0/turbo2/turbo3/turbo4 V, ...", from kDefaultPairs.
std::string default_pairs_text() {
  const bool diagonal = std::all_of(kAllKvTypes.begin(), kAllKvTypes.end(), [](KvType t) {
    return !type_on_cuda(t) || is_default_pair(t, t);
  });
  std::string s = diagonal ? "every type with itself" : "";
  for (KvType k : kAllKvTypes) {
    std::string vs;
    for (const KvTypePair& p : kDefaultPairs)
      if (p.k == k && !(diagonal && p.v == k))
        vs += fmt::format("{}{}", vs.empty() ? "" : "/", to_string(p.v));
    if (!vs.empty()) s += fmt::format("{}{} K with {} V", s.empty() ? "" : ", ", to_string(k), vs);
  }
  return s;
}

}  // namespace

bool all_pairs_built() {
  return KVFLASH_CUDA_ALL_PAIRS != 0;
}

std::optional<std::string> pair_not_built(KvType k, KvType v, bool all_pairs) {
  if (pair_built(k, v, all_pairs)) return std::nullopt;
  for (const auto& [field, t] : {std::pair{"k_type", k}, {"v_type", v}})
    if (!type_on_cuda(t))
      return fmt::format("{} {} is not read by the CUDA kernels yet (the CPU backend serves it)",
                         field, to_string(t));
  return fmt::format(
      "k_type {} with v_type {} is not in this build's CUDA instances (the default set: {}); "
      "configure with -DKVFLASH_CUDA_ALL_PAIRS=ON to build all {} pairs",
      to_string(k), to_string(v), default_pairs_text(), cuda_type_count() * cuda_type_count());
}

std::optional<std::string> reject_pair_not_built(const AttentionProblem& p) {
  return pair_not_built(p.k_type, p.v_type, all_pairs_built());
}

}  // namespace kvflash::cuda
