#include "core/backend.hpp"

#include <string>

namespace kvflash {

const DeviceServices* device_services() {
  static const DeviceServices* const services = [] {
    for (const BackendEntry* b : built_backends())
      if (b->device != nullptr) return b->device;
    return static_cast<const DeviceServices*>(nullptr);
  }();
  return services;
}

Error no_device_backend(const std::string& what) {
  return unsupported(what + ": kvflash was built without CUDA");
}

}  // namespace kvflash
