// fp16 / bf16 conversions: bit-identical to F16C (exhaustively for the halfs, on millions of
// floats the other way), and round to nearest even for bf16.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kvflash/formats.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define KVFLASH_TEST_X86 1
#endif

namespace kvflash {
namespace {

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
float from_bits(uint32_t w) {
  return std::bit_cast<float>(w);
}

#ifdef KVFLASH_TEST_X86
// _mm_cvtps_ph rather than _cvtss_sh, which clang writes with a C99 compound literal.
__attribute__((target("f16c"))) uint16_t hw_fp32_to_fp16(float f) {
  const __m128i h = _mm_cvtps_ph(_mm_set_ss(f), 0);  // imm 0: round to nearest even
  return static_cast<uint16_t>(_mm_extract_epi16(h, 0));
}
__attribute__((target("f16c"))) float hw_fp16_to_fp32(uint16_t h) {
  return _cvtsh_ss(h);
}
// CPUID leaf 1, ECX bit 29: clang 14's __builtin_cpu_supports does not know "f16c".
bool have_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

TEST(Half, KnownValues) {
  EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(0.5f), 0x3800);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65519.996f), 0x7BFF);  // below the midpoint 65520
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);    // midpoint, ties to even (= inf)
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24 -> 0
  EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);         // tie between 1 and 2 -> 2
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie -> even
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(3.0f, -11)), 0x3C02);  // tie -> even
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  const uint16_t nan = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);

  EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(bits(fp16_to_fp32(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7E00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7C01)));  // signalling half NaN stays a NaN
}

TEST(Half, RoundTripAllHalfs) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF) != 0) << h;
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), h) << "half 0x" << std::hex << h;
  }
}

#ifdef KVFLASH_TEST_X86
TEST(Half, MatchesF16cOnAllHalfs) {
  if (!have_f16c()) GTEST_SKIP() << "no F16C on this processor";
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t hh = static_cast<uint16_t>(h);
    const float hw = hw_fp16_to_fp32(hh);
    ASSERT_EQ(bits(fp16_to_fp32(hh)), bits(hw)) << "half 0x" << std::hex << h;
    ASSERT_EQ(fp32_to_fp16(hw), hw_fp32_to_fp16(hw)) << "half 0x" << std::hex << h;
  }
}

TEST(Half, MatchesF16cOnRandomFloats) {
  if (!have_f16c()) GTEST_SKIP() << "no F16C on this processor";
  std::mt19937_64 rng(1234);
  std::vector<uint32_t> words;
  // Special values and the rounding edges.
  for (uint32_t w : {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u,
                     0x7F800001u, 0x7FBFFFFFu, 0xFFFFFFFFu, 0x00000001u, 0x807FFFFFu, 0x477FE000u,
                     0x477FEFFFu, 0x477FF000u, 0x477FF001u, 0x47800000u, 0x38800000u, 0x387FFFFFu,
                     0x33000000u, 0x33000001u, 0x32FFFFFFu, 0x7F7FFFFFu}) {
    words.push_back(w);
  }
  // Uniform bit patterns (every exponent, NaNs and infs included).
  for (int i = 0; i < 3'000'000; ++i) words.push_back(static_cast<uint32_t>(rng()));
  // Around the half range: exponents of 2^-26 .. 2^17 with random mantissas, low bits near ties.
  std::uniform_int_distribution<uint32_t> exp(101, 143);
  for (int i = 0; i < 2'000'000; ++i) {
    uint32_t m = static_cast<uint32_t>(rng()) & 0x7FFFFFu;
    if (i % 2 == 0) m = (m & ~0x1FFFu) | (0x1000u + (static_cast<uint32_t>(rng()) % 3) - 1);
    words.push_back((static_cast<uint32_t>(rng() & 1) << 31) | (exp(rng) << 23) | m);
  }
  for (uint32_t w : words) {
    const float f = from_bits(w);
    ASSERT_EQ(fp32_to_fp16(f), hw_fp32_to_fp16(f)) << "float bits 0x" << std::hex << w;
  }
}
#endif

#ifdef KVFLASH_TEST_X86
// The conversions do not depend on the MXCSR flush-to-zero / denormals-are-zero modes.
TEST(Half, IndependentOfFtzDaz) {
  if (!have_f16c()) GTEST_SKIP() << "no F16C on this processor";
  std::vector<uint16_t> to16(65536);
  std::vector<uint32_t> to32(65536);
  std::mt19937_64 rng(3);
  std::vector<float> floats(1 << 20);
  for (float& f : floats) f = from_bits(static_cast<uint32_t>(rng()) & 0x387FFFFFu);  // < 2^-14
  std::vector<uint16_t> ref(floats.size());
  for (size_t i = 0; i < floats.size(); ++i) ref[i] = hw_fp32_to_fp16(floats[i]);
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040u);  // FTZ | DAZ
  for (uint32_t h = 0; h < 65536; ++h) to32[h] = bits(fp16_to_fp32(static_cast<uint16_t>(h)));
  std::vector<uint16_t> got(floats.size());
  for (size_t i = 0; i < floats.size(); ++i) got[i] = fp32_to_fp16(floats[i]);
  _mm_setcsr(csr);
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(to32[h], bits(hw_fp16_to_fp32(static_cast<uint16_t>(h)))) << h;
  }
  for (size_t i = 0; i < floats.size(); ++i) ASSERT_EQ(got[i], ref[i]) << bits(floats[i]);
}
#endif

// The row loops (vectorized) agree with the scalar conversions.
TEST(Half, RowsMatchScalar) {
  std::mt19937_64 rng(4);
  const int64_t n = 1 << 20;
  std::vector<float> x(static_cast<size_t>(n));
  for (float& f : x) f = from_bits(static_cast<uint32_t>(rng()));
  for (int i = 0; i < 65536; ++i)
    x[static_cast<size_t>(i)] = fp16_to_fp32(static_cast<uint16_t>(i));
  std::vector<uint16_t> h(static_cast<size_t>(n));
  std::vector<float> back(static_cast<size_t>(n));
  quantize_row(KvType::f16, x.data(), n, h.data());
  dequantize_row(KvType::f16, h.data(), n, back.data());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i], fp32_to_fp16(x[i])) << i;
    ASSERT_EQ(bits(back[i]), bits(fp16_to_fp32(h[i]))) << i;
  }
  quantize_row(KvType::bf16, x.data(), n, h.data());
  dequantize_row(KvType::bf16, h.data(), n, back.data());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i], fp32_to_bf16(x[i])) << i;
    ASSERT_EQ(bits(back[i]), bits(bf16_to_fp32(h[i]))) << i;
  }
}

// The nearest bf16 of f (ties to even), by comparing the two neighbours in double.
uint16_t bf16_nearest(float f) {
  const uint32_t w = bits(f);
  const uint32_t lo = w & 0xFFFF0000u;
  const uint32_t hi = lo + 0x10000u;
  const double dlo = std::fabs(static_cast<double>(f) - static_cast<double>(from_bits(lo)));
  const double dhi = (hi & 0x7F800000u) == 0x7F800000u
                         ? 0x1p128 - std::fabs(static_cast<double>(f))  // inf counts as 2^128
                         : std::fabs(static_cast<double>(f) - static_cast<double>(from_bits(hi)));
  if (dlo < dhi) return static_cast<uint16_t>(lo >> 16);
  if (dhi < dlo) return static_cast<uint16_t>(hi >> 16);
  return static_cast<uint16_t>(((lo >> 16) & 1u) == 0 ? lo >> 16 : hi >> 16);
}

TEST(Bf16, KnownValues) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3F82);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(from_bits(0x7F800001u)))));  // low payload
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(fp32_to_bf16(f), h);
    }
  }
}

TEST(Bf16, NearestEvenOnRandomFloats) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 2'000'000; ++i) {
    uint32_t w = static_cast<uint32_t>(rng());
    if (i % 2 == 0) w = (w & ~0xFFFFu) | 0x8000u;  // exact ties
    const float f = from_bits(w);
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_bf16(f), bf16_nearest(f)) << "float bits 0x" << std::hex << w;
  }
}

}  // namespace
}  // namespace kvflash
