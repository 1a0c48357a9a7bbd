// kvflash-gen-turbo-tables [PATH]: writes include/kvflash/turbo_tables.hpp (to PATH, or to stdout).
//
// The tables are:
//  - the Lloyd-Max centroids of a standard Gaussian for 4, 8 and 16 levels (turbo2/3/4), computed
//    by src/formats/lloyd_max.cpp in double precision (Lloyd iteration to a fixed point) and
//    printed with 17 significant digits, ascending;
//  - the 128 signs of the turbo rotation as 4 uint32_t words (bit i of the 128-bit string set means
//    s_i = -1), bit i being the lowest bit of the i-th output of splitmix64 seeded with
//    0x6b76666c61736821 ("kvflash!").
// The committed header must be byte-identical to this output (tests/formats checks it).
#include <cstdio>
#include <string>

#include "formats/lloyd_max.hpp"
#include "formats/turbo_tables_gen.hpp"

int main(int argc, char** argv) {
  if (argc > 2) {
    std::fprintf(stderr, "usage: %s [output path]\n", argv[0]);
    return 2;
  }
  const std::string text = kvflash::render_turbo_tables();
  if (argc == 1) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  std::FILE* f = std::fopen(argv[1], "wb");
  if (f == nullptr) {
    std::perror(argv[1]);
    return 1;
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) {
    std::perror(argv[1]);
    return 1;
  }
  return 0;
}
