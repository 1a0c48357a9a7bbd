#include "common/kernel_note.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace kvflash::tools {

std::optional<std::string> portable_kernel_note(std::string_view kernel, bool steered) {
  constexpr std::string_view kSuffix = ".portable";
  if (steered || kernel.size() < kSuffix.size() ||
      kernel.substr(kernel.size() - kSuffix.size()) != kSuffix)
    return std::nullopt;
  return fmt::format(
      "note: the CPU backend runs {} here: this CPU or build has none of the AVX2, AVX-512 and "
      "NEON kernels; expect many times their time",
      kernel);
}

void note_portable_kernel(const Plan& plan) {
  static std::atomic<bool> printed{false};
  if (plan.kernel == nullptr || printed.load()) return;
  const auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  const bool steered = set("KVFLASH_FORCE_KERNEL") || set("KVFLASH_EXCLUDE_KERNELS");
  const std::optional<std::string> note = portable_kernel_note(plan.kernel->name, steered);
  if (note && !printed.exchange(true)) std::fprintf(stderr, "%s\n", note->c_str());
}

}  // namespace kvflash::tools
