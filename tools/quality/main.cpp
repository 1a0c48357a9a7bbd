// kvflash-quality: see quality.hpp; everything but main() lives in kvflash_quality_lib.
#include <iostream>

#include "quality/quality.hpp"

int main(int argc, char** argv) {
  return kvflash::quality::run_quality(argc, argv, std::cout, std::cerr);
}
