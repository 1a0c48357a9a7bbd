#pragma once

#include <vector>

#include "kvflash/registry.hpp"

namespace kvflash::cpu {

// Appends the CPU candidates: decode and prefill for each instruction set built, and the float64
// reference as an opt-in candidate (force "cpu.reference" to use it as the oracle).
void register_kernels(std::vector<KernelCandidate>& out);

}  // namespace kvflash::cpu
