// The text of include/kvflash/turbo_tables.hpp, as printed by tools/gen/gen_turbo_tables.cpp.
// Lives in the library (not in the tool) so that tests/formats can check that the committed header
// is byte-identical to a fresh rendering. Not used at run time.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace kvflash {

// Seed of the turbo sign vector: the ASCII bytes of "kvflash!" read as a big-endian integer.
inline constexpr uint64_t kTurboSignSeed = 0x6b76666c61736821ull;
// Lloyd iterations run by the generator (lloyd_max_gaussian stops earlier at a fixed point).
inline constexpr int kTurboLloydIterations = 10000;

// splitmix64 (Steele, Lea, Flood 2014): state += 0x9E3779B97F4A7C15, then the output mix.
uint64_t splitmix64_next(uint64_t& state);

// The 128 turbo signs as 4 words: bit (i % 32) of word i / 32 is the lowest bit of the i-th output
// (i = 0 first) of splitmix64 seeded with kTurboSignSeed; a set bit means s_i = -1.
std::array<uint32_t, 4> turbo_sign_words();

// The full header text (Lloyd-Max centroids for 4, 8, 16 levels printed with 17 significant
// digits, and the sign words).
std::string render_turbo_tables();

}  // namespace kvflash
