// The CUDA prefill family's table of kernel instances (defined in the generated instances/ files).
// Planning, checks and the candidate live in prefill_host.cpp (plain C++).
#include <cuda_runtime.h>

#include "backends/cuda/common/type_pairs.hpp"
#include "backends/cuda/prefill/prefill_instances.hpp"
#include "backends/cuda/prefill/prefill_merge.cuh"

#ifndef KVFLASH_CUDA_ALL_PAIRS
#error "KVFLASH_CUDA_ALL_PAIRS (0 or 1) must be defined by the build (see common/type_pairs.cpp)"
#endif

namespace kvflash::cuda::prefill {

// Null where this build did not compile the pair (type_pairs.hpp's pair_built, the one list).
template <KvType KT, KvType VT, int DVB>
constexpr PrefillInstance instance() {
  if constexpr (pair_built(KT, VT, KVFLASH_CUDA_ALL_PAIRS != 0))
    return {prepare_prefill<KT, VT, DVB>, launch_prefill<KT, VT, DVB>};
  else
    return {nullptr, nullptr};
}

#include "backends/cuda/prefill/instances/prefill_table.inc"

const PrefillInstance& prefill_instance(KvType k, KvType v, int dv_bucket) {
  return kPrefillInstances[static_cast<int>(k)][static_cast<int>(v)][dv_bucket <= 128   ? 0
                                                                     : dv_bucket <= 256 ? 1
                                                                                        : 2];
}

PrefillMergeLaunch prefill_merge_launch(bool rotated_v) {
  return rotated_v ? launch_prefill_merge<true> : launch_prefill_merge<false>;
}

}  // namespace kvflash::cuda::prefill
