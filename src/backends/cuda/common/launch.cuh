// Kernel launches shared by the CUDA kernel families.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace kvflash::cuda {

// Launches `kernel(p)` as a programmatic dependent of the work before it on `stream`: its grid may
// start while that work finishes, and the kernel's griddepcontrol.wait holds its global reads
// until that work has completed. (Errors surface through cudaPeekAtLastError, as with <<<>>>.)
template <class Params>
void launch_programmatic(void (*kernel)(Params), const Params& p, dim3 grid, int threads,
                         size_t smem, cudaStream_t stream) {
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

}  // namespace kvflash::cuda
