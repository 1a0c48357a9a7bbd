// Launching the CUDA decode kernel (decode_kernel.cuh): its shared-memory attribute and
// occupancy query, and the programmatic launch that the decode and merge grids share. Included by
// the generated instances/ files (one prepare_decode / launch_decode pair per instance) and by
// decode.cu (the merge's launchers).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/decode/decode_kernel.cuh"

namespace kvflash::cuda::decode {

template <KvType KT, KvType VT, int NR, bool KS>
cudaError_t prepare_decode(size_t smem, int* ctas_per_sm) {
  cudaError_t e =
      cudaFuncSetAttribute(decode_kernel<KT, VT, NR, KS>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, decode_kernel<KT, VT, NR, KS>,
                                                       kThreads, smem);
}

// Launches `kernel(p)` as a programmatic dependent of the work before it on `stream`: its grid may
// start while that work finishes, and the kernel's griddepcontrol.wait holds its global reads
// until that work has completed. (Errors surface through cudaPeekAtLastError, as with <<<>>>.)
inline void launch_programmatic(void (*kernel)(DecodeParams), const DecodeParams& p, dim3 grid,
                                int threads, size_t smem, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, kernel, p);
}

// Programmatic (see the kernel's griddepcontrol.wait): back-to-back decode steps (the layers of a
// model) overlap one grid's launch with the previous grid's tail.
template <KvType KT, KvType VT, int NR, bool KS>
void launch_decode(const DecodeParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  launch_programmatic(decode_kernel<KT, VT, NR, KS>, p, grid, kThreads, smem, stream);
}

}  // namespace kvflash::cuda::decode
