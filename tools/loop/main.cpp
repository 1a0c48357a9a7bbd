// kvflash-loop: a decode step of a whole model (attention of every layer), eager and as one CUDA
// graph: time per token, launch overhead, memory. Everything is in kvflash_loop_lib.
#include <iostream>

#include "loop/cli.hpp"

int main(int argc, char** argv) {
  return kvflash::tools::loop::run_loop_cli(argc, argv, std::cout, std::cerr);
}
