// Launching the CUDA decode kernel (decode_kernel.cuh): its shared-memory attribute and
// occupancy query, and the programmatic launch that the decode and merge grids share. Included by
// the generated instances/ files (one prepare_decode / launch_decode pair per instance) and by
// decode.cu (the merge's launchers).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/decode/decode_kernel.cuh"

namespace kvflash::cuda::decode {

template <KvType KT, KvType VT, int NR, bool KS, bool PR>
cudaError_t prepare_decode(size_t smem, int* ctas_per_sm) {
  cudaError_t e =
      cudaFuncSetAttribute(decode_kernel<KT, VT, NR, KS, PR>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      ctas_per_sm, decode_kernel<KT, VT, NR, KS, PR>, kThreads, smem);
}

// Programmatic (see the kernel's griddepcontrol.wait): back-to-back decode steps (the layers of a
// model) overlap one grid's launch with the previous grid's tail.
template <KvType KT, KvType VT, int NR, bool KS, bool PR>
void launch_decode(const DecodeParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  launch_programmatic(decode_kernel<KT, VT, NR, KS, PR>, p, grid, kThreads, smem, stream);
}

}  // namespace kvflash::cuda::decode
