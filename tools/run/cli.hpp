// kvflash-run's command line: load a Llama-architecture GGUF model, run a prompt through it
// (prefill in chunks) and generate tokens greedily, with kvflash attention over a KV cache of the
// chosen types; report tokens/s for prefill and decode. In a library so that the tests run it
// in-process.
#pragma once

#include <ostream>

namespace kvflash::tools::run {

inline constexpr int kExitUsage = 2;   // bad flags or inputs
inline constexpr int kExitFailed = 1;  // a model that cannot be loaded or run

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace kvflash::tools::run
