// q8_0 / q4_0: golden bytes derived by hand, byte identity with ggml's reference quantizers
// (quantize_row_q8_0_ref / quantize_row_q4_0_ref, restated below from their definition), and the
// documented saturation of a scale that overflows fp16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kvflash/blocks.hpp"
#include "kvflash/formats.hpp"

namespace kvflash {
namespace {

std::vector<uint8_t> quantize(KvType t, const std::vector<float>& x) {
  std::vector<uint8_t> out(row_size(t, static_cast<int64_t>(x.size())));
  quantize_row(t, x.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

// ggml's reference q8_0, one block: amax = max|x|; d = amax / 127; id = d ? 1/d : 0;
// qs = roundf(x * id); d stored as fp16.
void ggml_q8_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t dh = fp32_to_fp16(d);
  std::memcpy(out, &dh, 2);
  for (int j = 0; j < 32; ++j) {
    const int8_t q = static_cast<int8_t>(std::round(x[j] * id));
    std::memcpy(out + 2 + j, &q, 1);
  }
}

// ggml's reference q4_0, one block: max = value of largest magnitude (first on ties);
// d = max / -8; id = d ? 1/d : 0; xi = min(15, (int8_t)(x * id + 8.5f)); low nibbles j < 16.
void ggml_q4_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t dh = fp32_to_fp16(d);
  std::memcpy(out, &dh, 2);
  for (int j = 0; j < 16; ++j) {
    const int xi0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
    const int xi1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[16 + j] * id + 8.5f)));
    out[2 + j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
  }
}

TEST(Q8_0, GoldenBytes) {
  std::vector<float> x(64);
  // Block 0: amax = 127 (x0), so d = 127 / 127 = 1.0f exactly (fp16 0x3C00, bytes 00 3C), id = 1,
  // and q_j = roundf(x_j) (halves away from zero):
  //   x0 = 127 -> 127 = 0x7F     x1 = -127 -> -127 = 0x81   x2 = 2.5 -> 3 = 0x03
  //   x3 = -2.5 -> -3 = 0xFD     x4 = 0.49 -> 0 = 0x00      x5 = -0.5 -> -1 = 0xFF
  //   x6 = 1.5 -> 2 = 0x02       x7 = 100.2 -> 100 = 0x64
  //   x8..x31 = j - 20 = -12..11 -> 0xF4 0xF5 ... 0xFF 0x00 0x01 ... 0x0B
  const float head[8] = {127.0f, -127.0f, 2.5f, -2.5f, 0.49f, -0.5f, 1.5f, 100.2f};
  for (int j = 0; j < 8; ++j) x[j] = head[j];
  for (int j = 8; j < 32; ++j) x[j] = static_cast<float>(j - 20);
  // Block 1: amax = 63.5 (x32 = -63.5), d = 63.5 / 127 = 0.5f exactly (fp16 0x3800, bytes 00 38),
  // id = 2: x32 -> -127 = 0x81; x_{33+k} = 0.25 k (k = 0..30) -> roundf(k / 2) = (k + 1) / 2:
  //   00 01 01 02 02 03 03 ... 0F 0F
  x[32] = -63.5f;
  for (int k = 0; k < 31; ++k) x[33 + k] = 0.25f * static_cast<float>(k);
  const std::vector<uint8_t> expected = {
      // block 0
      0x00, 0x3C, 0x7F, 0x81, 0x03, 0xFD, 0x00, 0xFF, 0x02, 0x64, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8,
      0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
      0x08, 0x09, 0x0A, 0x0B,
      // block 1
      0x00, 0x38, 0x81, 0x00, 0x01, 0x01, 0x02, 0x02, 0x03, 0x03, 0x04, 0x04, 0x05, 0x05, 0x06,
      0x06, 0x07, 0x07, 0x08, 0x08, 0x09, 0x09, 0x0A, 0x0A, 0x0B, 0x0B, 0x0C, 0x0C, 0x0D, 0x0D,
      0x0E, 0x0E, 0x0F, 0x0F};
  EXPECT_EQ(quantize(KvType::q8_0, x), expected);
  std::vector<float> y(64);
  dequantize_row(KvType::q8_0, expected.data(), 64, y.data());
  EXPECT_EQ(y[0], 127.0f);
  EXPECT_EQ(y[7], 100.0f);
  EXPECT_EQ(y[32], -63.5f);
  EXPECT_EQ(y[63], 7.5f);
}

TEST(Q4_0, GoldenBytes) {
  std::vector<float> x(64, 0.0f);
  // Block 0: the largest magnitude is 8, first reached by x0 = -8 (x16 = +8 ties later and loses),
  // so max = -8, d = -8 / -8 = 1.0f (fp16 0x3C00, bytes 00 3C), id = 1 and
  // code = min(15, trunc(x + 8.5)):
  //   x0 = -8 -> 0.5 -> 0    x1 = 7 -> 15.5 -> 15   x2 = 0 -> 8      x3 = -0.5 -> 8.0 -> 8
  //   x4 = -0.6 -> 7.9 -> 7  x5 = 0.49 -> 8.99 -> 8 x6 = 3 -> 11    x7 = -3 -> 5.5 -> 5
  //   x8..x15 = j - 12 = -4..3 -> 4 5 6 7 8 9 10 11
  //   x16 = 8 -> 16.5 -> 16 -> 15   x17 = -7.9 -> 0.6 -> 0   x18 = 1.5 -> 10   x19 = -1.5 -> 7
  //   x20..x31 = (j - 26) / 2 = -3 .. 2.5 -> 5 6 6 7 7 8 8 9 9 10 10 11
  // qs[j] = code_j | code_{16+j} << 4:
  //   F0 0F A8 78 57 68 6B 75 74 85 86 97 98 A9 AA BB
  const float lo[8] = {-8.0f, 7.0f, 0.0f, -0.5f, -0.6f, 0.49f, 3.0f, -3.0f};
  for (int j = 0; j < 8; ++j) x[j] = lo[j];
  for (int j = 8; j < 16; ++j) x[j] = static_cast<float>(j - 12);
  const float hi[4] = {8.0f, -7.9f, 1.5f, -1.5f};
  for (int j = 16; j < 20; ++j) x[j] = hi[j - 16];
  for (int j = 20; j < 32; ++j) x[j] = 0.5f * static_cast<float>(j - 26);
  // Block 1 (values x_{32+j}): the largest magnitude 4 is first reached by x5 = +4 (x30 = -4 and
  // x31 = +4 tie later), so max = 4, d = 4 / -8 = -0.5f (fp16 0xB800, bytes 00 B8), id = -2 and
  // code = min(15, trunc(-2 x + 8.5)):
  //   x0 = 1 -> 6.5 -> 6   x1 = -1.25 -> 11   x2 = 0.25 -> 8   x3 = -0.25 -> 9
  //   x4 = 3.75 -> 1       x5 = 4 -> 0.5 -> 0  x6..x15 = 0 -> 8
  //   x16..x29 = (j - 23) / 2 = -3.5 .. 3 -> 15 14 13 12 11 10 9 8 7 6 5 4 3 2
  //   x30 = -4 -> 16.5 -> 16 -> 15   x31 = 4 -> 0
  // qs: F6 EB D8 C9 B1 A0 98 88 78 68 58 48 38 28 F8 08
  const float b1[6] = {1.0f, -1.25f, 0.25f, -0.25f, 3.75f, 4.0f};
  for (int j = 0; j < 6; ++j) x[32 + j] = b1[j];
  for (int j = 16; j < 30; ++j) x[32 + j] = 0.5f * static_cast<float>(j - 23);
  x[32 + 30] = -4.0f;
  x[32 + 31] = 4.0f;
  const std::vector<uint8_t> expected = {
      0x00, 0x3C, 0xF0, 0x0F, 0xA8, 0x78, 0x57, 0x68, 0x6B,
      0x75, 0x74, 0x85, 0x86, 0x97, 0x98, 0xA9, 0xAA, 0xBB,  // block 0
      0x00, 0xB8, 0xF6, 0xEB, 0xD8, 0xC9, 0xB1, 0xA0, 0x98,
      0x88, 0x78, 0x68, 0x58, 0x48, 0x38, 0x28, 0xF8, 0x08};  // block 1
  EXPECT_EQ(quantize(KvType::q4_0, x), expected);
  std::vector<float> y(64);
  dequantize_row(KvType::q4_0, expected.data(), 64, y.data());
  EXPECT_EQ(y[0], -8.0f);
  EXPECT_EQ(y[16], 7.0f);  // +8 clipped to the top code
  EXPECT_EQ(y[32 + 5], 4.0f);
  EXPECT_EQ(y[32 + 30], -3.5f);  // -4 clipped to the top code: (15 - 8) * -0.5
}

// Random blocks at many scales (fp16 normal and subnormal d, ties in magnitude, blocks with one
// large value): byte-identical to the ggml reference.
TEST(QuantsVsGgml, RandomBlocksByteIdentical) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float scales[] = {1e-7f, 1e-5f, 3e-4f, 0.01f, 1.0f, 37.0f, 1000.0f, 60000.0f, 1e6f};
  float x[32];
  uint8_t ours[34], ref[34];
  for (int it = 0; it < 20000; ++it) {
    const float s = scales[it % 9];
    for (float& v : x) v = s * (it % 3 == 0 ? u(rng) : g(rng));
    if (it % 5 == 0) x[rng() % 32] = -x[rng() % 32];  // possible magnitude tie
    if (it % 7 == 0) x[rng() % 32] *= 20.0f;          // outlier
    if (it % 11 == 0) x[rng() % 32] = std::round(x[rng() % 32]);
    const float amax = [&] {
      float m = 0.0f;
      for (float v : x) m = std::max(m, std::fabs(v));
      return m;
    }();
    if (amax / 127.0f < 65504.0f) {  // ggml's range (beyond it ggml stores inf)
      quantize_row(KvType::q8_0, x, 32, ours);
      ggml_q8_0(x, ref);
      ASSERT_EQ(0, std::memcmp(ours, ref, 34)) << "q8_0 iteration " << it;
    }
    if (amax / 8.0f < 65504.0f) {
      quantize_row(KvType::q4_0, x, 32, ours);
      ggml_q4_0(x, ref);
      ASSERT_EQ(0, std::memcmp(ours, ref, 18)) << "q4_0 iteration " << it;
    }
  }
}

// Documented choice: a scale that would round to fp16 inf is saturated to +-65504 (0x7BFF) and the
// codes saturate, so the block decodes finite (clipped) instead of inf/NaN.
TEST(Quants, ScaleOverflowSaturates) {
  for (float big : {1e7f, 1e30f, std::numeric_limits<float>::max()}) {
    std::vector<float> x(32, 1.0f);
    x[3] = big;
    x[4] = -big;
    x[5] = big / 300.0f;
    BlockQ8_0 q8;
    quantize_row(KvType::q8_0, x.data(), 32, &q8);
    EXPECT_EQ(q8.d, 0x7BFF);
    EXPECT_EQ(q8.qs[3], 127);
    EXPECT_EQ(q8.qs[4], -127);
    std::vector<float> y(32);
    dequantize_row(KvType::q8_0, &q8, 32, y.data());
    EXPECT_EQ(y[3], 127.0f * 65504.0f);
    EXPECT_EQ(y[4], -127.0f * 65504.0f);
    for (float v : y) EXPECT_TRUE(std::isfinite(v));

    BlockQ4_0 q4;
    quantize_row(KvType::q4_0, x.data(), 32, &q4);  // max = +big (first), d = -big / 8 -> -65504
    EXPECT_EQ(q4.d, 0xFBFF);
    dequantize_row(KvType::q4_0, &q4, 32, y.data());
    EXPECT_EQ(y[3], 8.0f * 65504.0f);   // code 0: (0 - 8) * -65504
    EXPECT_EQ(y[4], -7.0f * 65504.0f);  // code 15: (15 - 8) * -65504
    for (float v : y) EXPECT_TRUE(std::isfinite(v));
  }
  // Just inside the range: d = 65504 exactly is kept as is (ggml-identical).
  std::vector<float> x(32, 0.0f);
  x[0] = 65504.0f * 127.0f;
  BlockQ8_0 q8;
  quantize_row(KvType::q8_0, x.data(), 32, &q8);
  EXPECT_EQ(q8.d, 0x7BFF);
  EXPECT_EQ(q8.qs[0], 127);
}

TEST(Quants, TinyScaleGivesZerosNotNaN) {
  for (float tiny : {1e-9f, 1e-30f, 1e-38f, 1e-45f}) {
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = tiny * static_cast<float>(j - 16) / 16.0f;
    for (KvType t : {KvType::q8_0, KvType::q4_0}) {
      std::vector<uint8_t> q = quantize(t, x);
      std::vector<float> y(32);
      dequantize_row(t, q.data(), 32, y.data());
      for (int j = 0; j < 32; ++j) {
        ASSERT_TRUE(std::isfinite(y[j])) << to_string(t) << " " << tiny;
        EXPECT_LE(std::fabs(y[j] - x[j]), tiny) << to_string(t) << " " << tiny;
      }
    }
  }
}

}  // namespace
}  // namespace kvflash
