// CUDA backend: registers the kernel families (src/backends/cuda/decode, prefill) and binds the
// device services to the core's interface (src/core/backend.hpp).
#include <cuda_runtime.h>

#include "backends/cuda/cuda_backend.hpp"

namespace kvflash::cuda {

void register_kernels(std::vector<KernelCandidate>& out) {
  decode::register_decode(out);
  prefill::register_prefill(out);
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

const BackendEntry& backend_entry() {
  static constexpr DeviceServices services{
      .device_count = device_count,
      .read_bandwidth_gbps = read_bandwidth_gbps,
      .current_device = current_device,
      .malloc_device = malloc_device,
      .free_device = free_device,
      .create_stream = create_stream,
      .destroy_stream = destroy_stream,
      .synchronize_stream = synchronize_stream,
      .copy = copy,
      .fill = fill,
      .spin = spin,
      .time_ms = time_ms,
      .capture_graph = capture_graph,
      .launch_graph = launch_graph,
      .destroy_graph = destroy_graph,
      .last_error = last_error,
      .quantize_rows = quantize_rows,
      .dequantize_rows = dequantize_rows,
      .append_rows = append_rows,
      .advance_lengths = advance_lengths,
      .memory_info = memory_info,
  };
  static constexpr BackendEntry entry{
      .id = Backend::cuda,
      .register_kernels = register_kernels,
      .host_threads = nullptr,
      .device = &services,
  };
  return entry;
}

}  // namespace kvflash::cuda
