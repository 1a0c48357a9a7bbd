#include "kvflash/device.hpp"

#if defined(KVFLASH_HAS_CUDA)
#include "backends/cuda/cuda_backend.hpp"
#endif

namespace kvflash {

int cuda_device_count() {
#if defined(KVFLASH_HAS_CUDA)
  return cuda::device_count();
#else
  return 0;
#endif
}

std::optional<double> cuda_read_bandwidth_gbps() {
#if defined(KVFLASH_HAS_CUDA)
  if (cuda::device_count() == 0) return std::nullopt;
  return cuda::read_bandwidth_gbps();
#else
  return std::nullopt;
#endif
}

}  // namespace kvflash
