// The CUDA decode family's device side on the host: the table of kernel instances (defined in
// the generated instances/ files) and the merge kernel's launchers. Planning, checks and the
// candidate live in decode_host.cpp (plain C++).
#include <cuda_runtime.h>

#include <array>
#include <utility>

#include "backends/cuda/common/type_pairs.hpp"
#include "backends/cuda/decode/decode_launch.cuh"
#include "backends/cuda/decode/decode_merge.cuh"

#ifndef KVFLASH_CUDA_ALL_PAIRS
#error "KVFLASH_CUDA_ALL_PAIRS (0 or 1) must be defined by the build (see common/type_pairs.cpp)"
#endif

namespace kvflash::cuda::decode {

// The table entry of an instance: null where this build did not compile the pair
// (common/type_pairs.hpp; the guard kv_types rejects such a pair before a plan is made), so that
// nothing refers to it.
template <KvType KT, KvType VT, int NR, bool KS>
constexpr DecodeInstance instance() {
  if constexpr (!pair_built(KT, VT, KVFLASH_CUDA_ALL_PAIRS != 0))
    return {nullptr, nullptr, nullptr, nullptr};
  else if constexpr (has_paged_twin(KT, VT))
    return {prepare_decode<KT, VT, NR, KS>, launch_decode<KT, VT, NR, KS>,
            prepare_decode<KT, VT, NR, KS, true>, launch_decode<KT, VT, NR, KS, true>};
  else
    return {prepare_decode<KT, VT, NR, KS>, launch_decode<KT, VT, NR, KS>, nullptr, nullptr};
}

#include "backends/cuda/decode/instances/decode_table.inc"

const DecodeInstance& decode_instance(KvType k, KvType v, int n_qtiles, bool k_split) {
  if (k_split) return kDecodeSplitInstances[static_cast<int>(k)];  // decode_layout: K = V
  return kDecodeInstances[static_cast<int>(k)][static_cast<int>(v)][n_qtiles == 1 ? 0 : 1];
}

namespace {
// A programmatic dependent launch: the merge grid is launched while the decode grid runs (the
// decode kernel allows it after its prologue) and waits in griddepcontrol.wait for the decode
// grid's completion, so the launch latency between the two kernels disappears.
template <KvType VT>
void launch_merge(const DecodeParams& p, dim3 grid, int threads, size_t smem, cudaStream_t stream) {
  if (threads == kMergeThreads)
    launch_programmatic(decode_merge_kernel<VT, kMergeWarps>, p, grid, threads, smem, stream);
  else
    launch_programmatic(decode_merge_kernel<VT, kMergeWarps / 2>, p, grid, threads, smem, stream);
}
// One merge per V type, indexed by KvType (kAllKvTypes is in KvType's order), so that a type
// added to the library cannot index past the table.
template <size_t... I>
constexpr std::array<MergeLaunch, sizeof...(I)> merge_table(std::index_sequence<I...>) {
  static_assert(((static_cast<size_t>(kAllKvTypes[I]) == I) && ...));
  return {launch_merge<kAllKvTypes[I]>...};
}
constexpr auto kMerge = merge_table(std::make_index_sequence<kAllKvTypes.size()>{});
}  // namespace

MergeLaunch merge_launch(KvType v) {
  return kMerge[static_cast<int>(v)];
}

}  // namespace kvflash::cuda::decode
