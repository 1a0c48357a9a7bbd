#include <fmt/format.h>

#include "backends/cuda/common/device_info.hpp"

namespace kvflash::cuda {

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
    return v;
  }();
  return n;
}

size_t max_smem_optin() {
  static const size_t n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return size_t{0};
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      return size_t{0};
    return static_cast<size_t>(v);
  }();
  return n;
}

Status cuda_error(cudaError_t e, const char* what) {
  return Error{ErrorCode::internal, fmt::format("{}: {}", what, cudaGetErrorString(e))};
}

}  // namespace kvflash::cuda
