// kvflash-plan: KV cache memory, longest context and decode reads per KV type for a model shape.
// Everything is in kvflash_plan_lib (run_plan), so the tests run the same code in-process.
#include <iostream>

#include "plan/cli.hpp"

int main(int argc, char** argv) {
  return kvflash::tools::plan::run_plan(argc, argv, std::cout, std::cerr);
}
