// What the CUDA kernels' host code asks of the current device, read once (0 where no device
// answers), and CUDA errors as kvflash errors. Plain C++.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <optional>
#include <string>

#include "kvflash/problem.hpp"
#include "kvflash/status.hpp"

namespace kvflash::cuda {

// SMs of the current device.
int sm_count();
// Shared memory per CTA the current device allows a kernel to opt in to, in bytes.
size_t max_smem_optin();
// A failed CUDA call as an internal error naming what failed.
Status cuda_error(cudaError_t e, const char* what);

// The guards every CUDA kernel family starts with (KernelCandidate::guards "cuda_device" and
// "compute_capability"): a visible device, and sm_90 or newer (the kernels use Hopper
// instructions and are built for sm_90 and its PTX).
std::optional<std::string> reject_no_device(const AttentionProblem&);
std::optional<std::string> reject_arch(const AttentionProblem&);

}  // namespace kvflash::cuda
