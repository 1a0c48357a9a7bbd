#include <iostream>

#include "bench/bench.hpp"

int main(int argc, char** argv) {
  return kvflash::bench::run_bench(argc, argv, std::cout, std::cerr);
}
