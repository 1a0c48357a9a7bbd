// What the CUDA kernels' host code asks of the current device, read once (0 where no device
// answers), and CUDA errors as kvflash errors. Plain C++.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kvflash/status.hpp"

namespace kvflash::cuda {

// SMs of the current device.
int sm_count();
// Shared memory per CTA the current device allows a kernel to opt in to, in bytes.
size_t max_smem_optin();
// A failed CUDA call as an internal error naming what failed.
Status cuda_error(cudaError_t e, const char* what);

}  // namespace kvflash::cuda
