// A note the tools print once, on stderr, when the CPU backend runs a portable kernel because
// this machine or build offers no faster one (no AVX2 or AVX-512 kernels for it; NEON kernels are
// to come), so that nobody takes its times for kvflash's CPU speed.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kvflash/registry.hpp"

namespace kvflash::tools {

// The note for a chosen kernel: nothing unless its name is of the portable family
// ("cpu.decode.portable", "cpu.prefill.portable"), or when the choice was steered
// (KVFLASH_FORCE_KERNEL or KVFLASH_EXCLUDE_KERNELS set: the portable kernel was asked for).
std::optional<std::string> portable_kernel_note(std::string_view kernel, bool steered);

// Prints portable_kernel_note for the plan's kernel, the first time it applies in this process.
void note_portable_kernel(const Plan& plan);

}  // namespace kvflash::tools
