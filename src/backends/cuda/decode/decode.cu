// The CUDA decode family's device side on the host: the table of kernel instances (defined in
// the generated instances/ files) and the merge kernel's launchers. Planning, checks and the
// candidate live in decode_host.cpp (plain C++).
#include <cuda_runtime.h>

#include "backends/cuda/decode/decode_launch.cuh"
#include "backends/cuda/decode/decode_merge.cuh"

namespace kvflash::cuda::decode {

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
constexpr MergeLaunch kMerge[8] = {launch_merge<KvType::f32>,    launch_merge<KvType::f16>,
                                   launch_merge<KvType::bf16>,   launch_merge<KvType::q8_0>,
                                   launch_merge<KvType::q4_0>,   launch_merge<KvType::turbo2>,
                                   launch_merge<KvType::turbo3>, launch_merge<KvType::turbo4>};
}  // namespace

MergeLaunch merge_launch(KvType v) {
  return kMerge[static_cast<int>(v)];
}

}  // namespace kvflash::cuda::decode
