// The decode kernel instances: one per (K type, V type, query n-tiles 1 or 2), and the K-split
// ones, each with a twin for paged caches where K and V are float types (PR), defined in the
// generated files instances/{default_pairs,all_pairs}/ (generator: gen_instances.py beside this
// file; a build compiles one of the two sets, KVFLASH_CUDA_ALL_PAIRS).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/decode/decode_params.hpp"
#include "kvflash/formats.hpp"

namespace kvflash::cuda::decode {

struct DecodeInstance {
  // Raises the kernel's dynamic shared-memory limit and reports CTAs per SM at that size.
  cudaError_t (*prepare)(size_t smem, int* ctas_per_sm);
  void (*launch)(const DecodeParams& p, dim3 grid, size_t smem, cudaStream_t stream);
  // The twin for paged caches (has_paged_twin: f16 / bf16 K and V, decode_kernel's PR); null for
  // the other pairs, whose kernels serve both layouts.
  cudaError_t (*prepare_paged)(size_t smem, int* ctas_per_sm);
  void (*launch_paged)(const DecodeParams& p, dim3 grid, size_t smem, cudaStream_t stream);
};

// The instance for a type pair and n_qtiles (1 or 2); with k_split (decode_layout: one n-tile,
// K = V, not f32) the one that splits K between V slices. Null functions for a pair this build did
// not compile (common/type_pairs.hpp: pair_built; cuda.decode's guard kv_types rejects it).
const DecodeInstance& decode_instance(KvType k, KvType v, int n_qtiles, bool k_split);

// The launcher of the split merge (and finalize) kernel for V type v.
using MergeLaunch = void (*)(const DecodeParams& p, dim3 grid, int threads, size_t smem,
                             cudaStream_t stream);
MergeLaunch merge_launch(KvType v);

// KS: the one-n-tile kernel (NR 1) with K split between the V slices' warps
// (DecodeParams::k_split). PR: the paged-cache twin of a float pair's kernel.
template <KvType KT, KvType VT, int NR, bool KS, bool PR = false>
cudaError_t prepare_decode(size_t smem, int* ctas_per_sm);
template <KvType KT, KvType VT, int NR, bool KS, bool PR = false>
void launch_decode(const DecodeParams& p, dim3 grid, size_t smem, cudaStream_t stream);

}  // namespace kvflash::cuda::decode
