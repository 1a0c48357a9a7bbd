// CUDA backend entry points (host side). Built only when nvcc is found (KVFLASH_HAS_CUDA).
#pragma once

#include <optional>
#include <vector>

#include "kvflash/registry.hpp"

namespace kvflash::cuda {

// Appends the CUDA candidates. The skeleton registers none yet; the decode family (issue 4)
// and prefill family add theirs here.
void register_kernels(std::vector<KernelCandidate>& out);

// Number of CUDA devices visible, 0 when the driver or a device is missing (never an error).
int device_count();

// Streaming-read bandwidth of device 0 in GB/s (see kvflash/device.hpp); nullopt on failure.
std::optional<double> read_bandwidth_gbps();

}  // namespace kvflash::cuda
