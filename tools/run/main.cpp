// kvflash-run: a Llama-architecture GGUF model with kvflash attention over a compressed KV cache.
// Everything is in kvflash_run_lib (run_cli), so the tests run the same code in-process.
#include <iostream>

#include "run/cli.hpp"

int main(int argc, char** argv) {
  return kvflash::tools::run::run_cli(argc, argv, std::cout, std::cerr);
}
