#pragma once

#include <vector>

#include "core/backend.hpp"
#include "kvflash/registry.hpp"

namespace kvflash::cpu {

// Appends the CPU candidates: decode and prefill for each instruction set built, and the float64
// reference as an opt-in candidate (force "cpu.reference" to use it as the oracle).
void register_kernels(std::vector<KernelCandidate>& out);

// The CPU backend as the core sees it: its candidates and its threads (ThreadPool::process()); no
// device services.
const BackendEntry& backend_entry();

}  // namespace kvflash::cpu
