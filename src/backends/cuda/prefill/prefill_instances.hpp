// The prefill kernel instances: one per (K type, V type, V-dim bucket 128, 256 or 512), defined in
// the generated files instances/{default_pairs,all_pairs}/ (generator: decode/gen_instances.py; a
// build compiles one of the two sets, KVFLASH_CUDA_ALL_PAIRS, with the same pairs as decode).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/prefill/prefill_params.hpp"
#include "kvflash/formats.hpp"

namespace kvflash::cuda::prefill {

struct PrefillInstance {
  cudaError_t (*prepare)(size_t smem);  // raises the kernel's dynamic shared-memory limit
  void (*launch)(const PrefillParams& p, dim3 grid, size_t smem, cudaStream_t stream);
};

// The instance for a type pair and V-dim bucket (PrefillLayout::dv_bucket); null functions for a
// pair this build did not compile (the guard kv_types rejects it first).
const PrefillInstance& prefill_instance(KvType k, KvType v, int dv_bucket);

// The split merge (prefill_merge.cuh), for turbo V (rotated back) or any other V type.
using PrefillMergeLaunch = void (*)(const PrefillParams& p, dim3 grid, size_t smem,
                                    cudaStream_t stream);
PrefillMergeLaunch prefill_merge_launch(bool rotated_v);

template <KvType KT, KvType VT, int DVB>
cudaError_t prepare_prefill(size_t smem);
template <KvType KT, KvType VT, int DVB>
void launch_prefill(const PrefillParams& p, dim3 grid, size_t smem, cudaStream_t stream);

}  // namespace kvflash::cuda::prefill
