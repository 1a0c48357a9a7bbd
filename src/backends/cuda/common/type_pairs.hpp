// Which (K type, V type) pairs this build compiled CUDA kernels for (decode and prefill compile
// the same ones). Every CUDA build compiles the default pairs (decode/gen_instances.py's
// DEFAULT_PAIRS: every type with itself and the mixed pairs engines run);
// -DKVFLASH_CUDA_ALL_PAIRS=ON compiles all 100 (releases and measurements), as ggml's
// GGML_CUDA_FA_ALL_QUANTS does. The kernel tables (decode.cu, prefill.cu) and the guards kv_types
// of cuda.decode and cuda.prefill all answer from pair_built(), so selection cannot accept a pair
// whose kernels are missing.
// Plain C++: CPU tests check the guard without a GPU.
#pragma once

#include <array>
#include <iterator>
#include <optional>
#include <string>

#include "kvflash/formats.hpp"
#include "kvflash/problem.hpp"

namespace kvflash::cuda {

struct KvTypePair {
  KvType k;
  KvType v;
};

// The KV types the CUDA kernels do not read (CPU backend only): none since the fp8 types came to
// CUDA (issue 43). A type added to the library before its CUDA kernels is listed here;
// gen_instances.py reads this list: it writes no instance for them and null table entries.
inline constexpr std::array<KvType, 0> kTypesNotOnCuda{};

constexpr bool type_on_cuda(KvType t) {
  for (KvType n : kTypesNotOnCuda)
    if (n == t) return false;
  return true;
}
// The number of types the CUDA kernels read (their pairs: its square), and those types in
// KvType's order.
constexpr int cuda_type_count() {
  return static_cast<int>(kAllKvTypes.size() - std::size(kTypesNotOnCuda));
}
inline constexpr std::array<KvType, cuda_type_count()> kCudaKvTypes = [] {
  std::array<KvType, cuda_type_count()> a{};
  size_t i = 0;
  for (KvType t : kAllKvTypes)
    if (type_on_cuda(t)) a[i++] = t;
  return a;
}();

inline constexpr KvTypePair kDefaultPairs[] = {
#include "backends/cuda/decode/instances/decode_default_pairs.inc"
};

constexpr bool is_default_pair(KvType k, KvType v) {
  for (const KvTypePair& p : kDefaultPairs)
    if (p.k == k && p.v == v) return true;
  return false;
}

// Whether a build with KVFLASH_CUDA_ALL_PAIRS = all_pairs compiled (k, v)'s kernels.
constexpr bool pair_built(KvType k, KvType v, bool all_pairs) {
  return type_on_cuda(k) && type_on_cuda(v) && (all_pairs || is_default_pair(k, v));
}

// This build's KVFLASH_CUDA_ALL_PAIRS.
bool all_pairs_built();

// Why a build with KVFLASH_CUDA_ALL_PAIRS = all_pairs has no kernels for (k, v), naming the
// option and the default pairs; nullopt when it has one.
std::optional<std::string> pair_not_built(KvType k, KvType v, bool all_pairs);

// The guard "kv_types" of cuda.decode and cuda.prefill: pair_not_built for this build and p's
// types.
std::optional<std::string> reject_pair_not_built(const AttentionProblem& p);

}  // namespace kvflash::cuda
