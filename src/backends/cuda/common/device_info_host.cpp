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

std::optional<std::string> reject_no_device(const AttentionProblem&) {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) return std::nullopt;
  return std::string("no CUDA device is visible");
}

std::optional<std::string> reject_arch(const AttentionProblem&) {
  static const int cc = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
      return 0;
    return 10 * major + minor;
  }();
  // Built for sm_90a (Hopper's arch-specific instructions: wgmma), the kernels load on
  // compute capability 9.0 only.
  if (cc == 90) return std::nullopt;
  return fmt::format(
      "the current device is sm_{}; kvflash's CUDA kernels are built for sm_90a (Hopper: H100, "
      "H200)",
      cc);
}

}  // namespace kvflash::cuda
