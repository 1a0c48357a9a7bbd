// CUDA backend: registers the kernel families (decode: src/backends/cuda/decode).
#include <cuda_runtime.h>

#include "backends/cuda/cuda_backend.hpp"

namespace kvflash::cuda {

void register_kernels(std::vector<KernelCandidate>& out) {
  decode::register_decode(out);
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace kvflash::cuda
