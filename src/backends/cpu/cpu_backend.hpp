#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "kvflash/registry.hpp"

namespace kvflash::cpu {

// Appends the CPU candidates: decode and prefill for each instruction set built, and the float64
// reference as an opt-in candidate (force "cpu.reference" to use it as the oracle).
void register_kernels(std::vector<KernelCandidate>& out);

// The warning a plan on the portable kernel prints once per process where it is all this machine
// has (issue 44: 15-20x slower than the AVX2, AVX-512 and NEON kernels), or nullopt: built_simd,
// whether the library has vector kernels (x86-64: AVX2, AVX-512; AArch64: NEON); cpu_simd, whether
// this processor runs one of them. A portable plan forced on a machine that has them
// (KVFLASH_FORCE_KERNEL, the tests) prints nothing.
std::optional<std::string> portable_only_warning(bool built_simd, bool cpu_simd);

// The CPU backend as the core sees it: its candidates and its threads (ThreadPool::process()); no
// device services.
const BackendEntry& backend_entry();

}  // namespace kvflash::cpu
