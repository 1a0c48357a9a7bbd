// fp8 KV types (issue 43): every code of E4M3 and E5M2 decodes to the value the OCP formats define
// (computed here from the bit fields in double), every finite code encodes back to itself, ties
// round to the even code, values past the largest finite one and infinities saturate to it, NaN
// stays NaN; and the row codecs are the scalar ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kvflash/formats.hpp"

namespace kvflash {
namespace {

struct Fp8Format {
  int exp_bits, man_bits, bias;
  double max;
  bool has_inf;  // E5M2: IEEE-style inf and NaN codes; E4M3 ("fn"): one NaN code per sign
  uint8_t (*encode)(float);
  float (*decode)(uint8_t);
};

const Fp8Format kE4m3 = {4, 3, 7, 448.0, false, fp32_to_fp8_e4m3, fp8_e4m3_to_fp32};
const Fp8Format kE5m2 = {5, 2, 15, 57344.0, true, fp32_to_fp8_e5m2, fp8_e5m2_to_fp32};

// The value of a code from its fields: NaN, +-inf, subnormal or normal.
double defined_value(const Fp8Format& f, uint8_t c) {
  const int sign = c >> 7, e = (c >> f.man_bits) & ((1 << f.exp_bits) - 1),
            m = c & ((1 << f.man_bits) - 1);
  const int top = (1 << f.exp_bits) - 1;
  double v = 0.0;
  if (f.has_inf && e == top) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (!f.has_inf && e == top && m == (1 << f.man_bits) - 1) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(m, 1 - f.bias - f.man_bits);
  } else {
    v = std::ldexp((1 << f.man_bits) + m, e - f.bias - f.man_bits);
  }
  return sign ? -v : v;
}

class Fp8 : public ::testing::TestWithParam<const Fp8Format*> {};

TEST_P(Fp8, EveryCodeDecodesToItsDefinedValueAndEncodesBack) {
  const Fp8Format& f = *GetParam();
  int finite = 0;
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const double want = defined_value(f, code);
    const float got = f.decode(code);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      EXPECT_TRUE(std::isnan(f.decode(f.encode(got))));
      continue;
    }
    EXPECT_EQ(double{got}, want) << c;
    if (std::isinf(want)) continue;
    ++finite;
    EXPECT_EQ(f.encode(got), code) << c << " " << got;  // -0 included
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << c;
  }
  EXPECT_EQ(finite, f.has_inf ? 256 - 8 : 256 - 2);
  EXPECT_EQ(double{f.decode(f.encode(1e30f))}, f.max);
  EXPECT_EQ(double{f.decode(f.encode(-1e30f))}, -f.max);
}

TEST_P(Fp8, RoundsToNearestEvenAndSaturates) {
  const Fp8Format& f = *GetParam();
  // Between every pair of neighbouring non-negative finite codes: the midpoint goes to the code
  // with the even mantissa, a point just beside it to the nearer code.
  std::vector<double> values;
  for (int c = 0; c < 128; ++c) {
    const double v = defined_value(f, static_cast<uint8_t>(c));
    if (std::isfinite(v)) values.push_back(v);
  }
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    const double lo = values[i], hi = values[i + 1], mid = (lo + hi) / 2;
    const uint8_t even = (f.encode(static_cast<float>(lo)) & 1) == 0
                             ? f.encode(static_cast<float>(lo))
                             : f.encode(static_cast<float>(hi));
    EXPECT_EQ(f.encode(static_cast<float>(mid)), even) << lo << " .. " << hi;
    EXPECT_EQ(f.encode(static_cast<float>(mid - (hi - lo) / 8)), f.encode(static_cast<float>(lo)));
    EXPECT_EQ(f.encode(static_cast<float>(mid + (hi - lo) / 8)), f.encode(static_cast<float>(hi)));
    EXPECT_EQ(f.encode(static_cast<float>(-mid)), even | 0x80) << lo << " .. " << hi;
  }
  // Saturation: past the largest finite value, at the midpoint to the next binade step, inf.
  const uint8_t max_code = f.encode(static_cast<float>(f.max));
  EXPECT_EQ(double{f.decode(max_code)}, f.max);
  for (double v : {f.max * 1.03, f.max * 1.1, f.max * 4, 1e38})
    EXPECT_EQ(f.encode(static_cast<float>(v)), max_code) << v;
  EXPECT_EQ(f.encode(std::numeric_limits<float>::infinity()), max_code);
  EXPECT_EQ(f.encode(-std::numeric_limits<float>::infinity()), max_code | 0x80);
  EXPECT_TRUE(std::isnan(f.decode(f.encode(std::numeric_limits<float>::quiet_NaN()))));
  // Below half the smallest subnormal: zero of the same sign; the smallest float subnormal too.
  const double tiny = std::ldexp(1.0, 1 - f.bias - f.man_bits);
  EXPECT_EQ(f.encode(static_cast<float>(tiny * 0.49)), 0);
  EXPECT_EQ(f.encode(static_cast<float>(-tiny * 0.49)), 0x80);
  EXPECT_EQ(f.encode(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(f.encode(static_cast<float>(tiny * 0.5)), 0);  // a tie: to the even code 0
  EXPECT_EQ(f.encode(static_cast<float>(tiny * 0.51)), 1);
}

TEST_P(Fp8, RowCodecsAreTheScalarOnes) {
  const Fp8Format& f = *GetParam();
  const KvType t = &f == &kE4m3 ? KvType::fp8_e4m3 : KvType::fp8_e5m2;
  std::vector<float> x(80);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(std::sin(0.7 * double(i)) * std::pow(2.0, double(i % 13) - 6));
  std::vector<uint8_t> row(row_size(t, 80));
  ASSERT_EQ(row.size(), 80u);
  quantize_row(t, x.data(), 80, row.data());
  std::vector<float> y(80);
  dequantize_row(t, row.data(), 80, y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(row[i], f.encode(x[i])) << i;
    EXPECT_EQ(y[i], f.decode(row[i])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8, ::testing::Values(&kE4m3, &kE5m2),
                         [](const ::testing::TestParamInfo<const Fp8Format*>& i) {
                           return std::string(i.param == &kE4m3 ? "e4m3" : "e5m2");
                         });

}  // namespace
}  // namespace kvflash
