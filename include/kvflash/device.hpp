// What the library can tell about the machine's accelerators, for tools and for plan heuristics.
#pragma once

#include <optional>

namespace kvflash {

// Number of CUDA devices visible; 0 when the CUDA backend is not built, or no driver or device
// is present (never an error).
int cuda_device_count();

// Streaming-read bandwidth of CUDA device 0 in GB/s (1e9 bytes/s): a kernel reads a 4 GiB
// buffer (16-byte loads, grid-stride, every SM busy), event-timed after a warm-up pass, best of
// 5. This is the roofline decode kernels are measured against (KV decode only reads).
// nullopt without a device or when the measurement fails (the reason is not an error here).
std::optional<double> cuda_read_bandwidth_gbps();

}  // namespace kvflash
