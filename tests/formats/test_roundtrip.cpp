// Every type: names, sizes, round trips over the head dims of kvflash (and n not a multiple of the
// block), zero padding, zero rows, huge and tiny magnitudes, bounds of the writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvflash/blocks.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/turbo.hpp"

namespace kvflash {
namespace {

constexpr int64_t kHeadDims[] = {64, 80, 96, 112, 128, 192, 256, 512, 576};
constexpr int64_t kOddDims[] = {1, 5, 31, 33, 100, 130, 200, 300};

// Distortion per coordinate of the N(0,1) Lloyd-Max quantizers (turbo2/3/4), with some margin
// for the norm correction and finite-dimension effects.
double turbo_bound(KvType t) {
  switch (t) {
    case KvType::turbo2:
      return 0.1175;
    case KvType::turbo3:
      return 0.03454;
    case KvType::turbo4:
      return 0.009497;
    default:
      return 0.0;
  }
}

std::vector<float> random_row(std::mt19937_64& rng, int64_t n, float scale) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = scale * g(rng);
  return x;
}

std::vector<uint8_t> quantize(KvType t, const std::vector<float>& x) {
  std::vector<uint8_t> out(row_size(t, static_cast<int64_t>(x.size())));
  quantize_row(t, x.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

std::vector<float> dequantize(KvType t, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, q.data(), n, y.data());
  return y;
}

// Half the spacing of the fp16 / bf16 grid at the value h (bits), i.e. half an ulp.
double half_ulp_f16(uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  return std::ldexp(1.0, std::max(e, 1) - 25 - 1);
}
double half_ulp_bf16(uint16_t h) {
  const int e = (h >> 7) & 0xFF;
  return std::ldexp(1.0, std::max(e, 1) - 127 - 7 - 1);
}

// Checks the per-value bounds of a round trip x -> q -> y of type t.
void check_round_trip(KvType t, const std::vector<float>& x, const std::vector<uint8_t>& q,
                      const std::vector<float>& y, const std::string& what) {
  const int64_t n = static_cast<int64_t>(x.size());
  for (float v : y) ASSERT_TRUE(std::isfinite(v)) << what;
  switch (t) {
    case KvType::f32:
      ASSERT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float))) << what;
      break;
    case KvType::f16:
    case KvType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, q.data() + 2 * i, 2);
        const double tol = t == KvType::f16 ? half_ulp_f16(h) : half_ulp_bf16(h);
        ASSERT_LE(std::fabs(static_cast<double>(x[i]) - y[i]), tol) << what << " i=" << i;
      }
      break;
    case KvType::q8_0:
    case KvType::q4_0: {
      // |x - d16 q| <= |x - d q| + |q| |d - d16| with |x - d q| <= d / 2 (round to nearest), d the
      // float scale before the fp16 rounding and d16 the stored one. q4_0 has codes -8..7 of
      // max / -8: a value beyond 7.5 |d| on the side opposite to max is clipped to the top code
      // (error up to |d|, ggml's behaviour).
      const bool q8 = t == KvType::q8_0;
      const int bv = 32;
      const size_t bb = q8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
      for (int64_t b = 0; b * bv < n; ++b) {
        float amax = 0.0f, max = 0.0f;
        for (int64_t i = b * bv; i < std::min(n, (b + 1) * bv); ++i) {
          if (amax < std::fabs(x[i])) {
            amax = std::fabs(x[i]);
            max = x[i];
          }
        }
        const double d = q8 ? amax / 127.0 : max / -8.0;
        uint16_t dh;
        std::memcpy(&dh, q.data() + b * bb, 2);
        const double d16 = fp16_to_fp32(dh);
        for (int64_t i = b * bv; i < std::min(n, (b + 1) * bv); ++i) {
          double xi = x[i];
          if (!q8 && d != 0.0) xi = std::clamp(xi / d, -8.0, 7.0) * d;  // clipped top code
          const double tol = 0.5 * std::fabs(d) * (1 + 1e-6) + (q8 ? 127 : 8) * std::fabs(d - d16);
          ASSERT_LE(std::fabs(xi - y[i]), tol) << what << " i=" << i << " d=" << d;
          if (!q8) {
            ASSERT_LE(std::fabs(x[i] - y[i]), std::fabs(d) + 8 * std::fabs(d - d16));
          }
        }
      }
      break;
    }
    case KvType::turbo2:
    case KvType::turbo3:
    case KvType::turbo4: {
      // Whole-row relative squared error (random Gaussian rows), bounded by 1.6 x the
      // per-coordinate Lloyd-Max distortion: the expected value is about 1.03 x of it.
      double err = 0.0, ref = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        err += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
        ref += static_cast<double>(x[i]) * x[i];
      }
      const double bound = 1.6 * turbo_bound(t) * (n < 128 ? 128.0 / static_cast<double>(n) : 1.0);
      ASSERT_LE(err, bound * ref) << what;
      break;
    }
    case KvType::fp8_e4m3:
    case KvType::fp8_e5m2: {
      // Round to nearest: within half a step of x's binade (subnormal steps below the smallest
      // normal); beyond the largest finite value, saturated to it.
      const bool e4 = t == KvType::fp8_e4m3;
      const double max = e4 ? 448.0 : 57344.0;
      const int m = e4 ? 3 : 2, min_exp = e4 ? -6 : -14;
      for (int64_t i = 0; i < n; ++i) {
        const double xi = x[i], ax = std::fabs(xi);
        if (ax >= max) {
          ASSERT_EQ(y[i], std::copysign(max, xi)) << what << " i=" << i;
          continue;
        }
        int e = 0;
        std::frexp(ax, &e);
        const double half_step = std::ldexp(1.0, std::max(e - 1, min_exp) - m - 1);
        ASSERT_LE(std::fabs(xi - y[i]), half_step) << what << " i=" << i;
      }
      break;
    }
  }
}

TEST(Formats, NamesRoundTrip) {
  for (KvType t : kAllKvTypes) {
    ASSERT_TRUE(kv_type_from_name(to_string(t)).has_value());
    EXPECT_EQ(*kv_type_from_name(to_string(t)), t);
    EXPECT_NE(kv_type_names().find(to_string(t)), std::string_view::npos);
  }
  EXPECT_FALSE(kv_type_from_name("q4_1").has_value());
  EXPECT_FALSE(kv_type_from_name("").has_value());
  EXPECT_FALSE(kv_type_from_name("F16").has_value());
  EXPECT_EQ(kv_type_names(),
            "f32, f16, bf16, q8_0, q4_0, turbo2, turbo3, turbo4, fp8_e4m3, fp8_e5m2");
}

TEST(Formats, RowSizes) {
  EXPECT_EQ(row_size(KvType::turbo2, 128), 34u);
  EXPECT_EQ(row_size(KvType::turbo3, 128), 50u);
  EXPECT_EQ(row_size(KvType::turbo4, 128), 66u);
  EXPECT_EQ(row_size(KvType::q8_0, 32), 34u);
  EXPECT_EQ(row_size(KvType::q4_0, 32), 18u);
  EXPECT_EQ(row_size(KvType::f16, 80), 160u);
  EXPECT_EQ(row_size(KvType::bf16, 576), 1152u);
  EXPECT_EQ(row_size(KvType::f32, 80), 320u);
  EXPECT_EQ(row_size(KvType::fp8_e4m3, 128), 128u);
  EXPECT_EQ(row_size(KvType::fp8_e5m2, 576), 576u);
  EXPECT_EQ(row_size(KvType::q8_0, 80), 3u * 34u);  // padded to 96
  EXPECT_EQ(row_size(KvType::q4_0, 80), 3u * 18u);
  EXPECT_EQ(row_size(KvType::turbo3, 80), 50u);        // padded to 128
  EXPECT_EQ(row_size(KvType::turbo2, 576), 5u * 34u);  // padded to 640
  EXPECT_EQ(row_size(KvType::turbo4, 192), 2u * 66u);
  EXPECT_EQ(padded_values(KvType::turbo4, 576), 640);
  EXPECT_EQ(padded_values(KvType::q4_0, 112), 128);
  EXPECT_EQ(padded_values(KvType::f16, 112), 112);
  for (KvType t : kAllKvTypes) {
    for (int64_t n : kHeadDims) {
      EXPECT_EQ(row_size(t, n) % static_cast<size_t>(traits(t).block_bytes), 0u);
      EXPECT_EQ(padded_values(t, n) % traits(t).block_values, 0);
      EXPECT_GE(padded_values(t, n), n);
      EXPECT_LT(padded_values(t, n) - n, traits(t).block_values);
    }
  }
  EXPECT_EQ(sizeof(BlockQ8_0), 34u);
  EXPECT_EQ(sizeof(BlockTurbo3), 50u);
}

TEST(Formats, RoundTripAllTypesAllDims) {
  std::mt19937_64 rng(42);
  std::vector<int64_t> dims(std::begin(kHeadDims), std::end(kHeadDims));
  dims.insert(dims.end(), std::begin(kOddDims), std::end(kOddDims));
  for (KvType t : kAllKvTypes) {
    for (int64_t n : dims) {
      for (float scale : {1e-3f, 1.0f, 100.0f}) {
        for (int rep = 0; rep < 4; ++rep) {
          const std::vector<float> x = random_row(rng, n, scale);
          const std::vector<uint8_t> q = quantize(t, x);
          const std::vector<float> y = dequantize(t, q, n);
          check_round_trip(t, x, q, y,
                           std::string(to_string(t)) + " n=" + std::to_string(n) +
                               " scale=" + std::to_string(scale));
        }
      }
    }
  }
}

// A partial last block is quantized as the row zero-padded to whole blocks.
TEST(Formats, PartialBlocksAreZeroPadded) {
  std::mt19937_64 rng(5);
  for (KvType t : kAllKvTypes) {
    for (int64_t n : {1, 17, 31, 33, 80, 100, 130, 200, 576}) {
      std::vector<float> x = random_row(rng, n, 1.0f);
      std::vector<float> padded = x;
      padded.resize(static_cast<size_t>(padded_values(t, n)), 0.0f);
      const std::vector<uint8_t> q = quantize(t, x);
      const std::vector<uint8_t> qp = quantize(t, padded);
      ASSERT_EQ(q, qp) << to_string(t) << " n=" << n;
    }
  }
}

// quantize_row writes exactly row_size bytes; dequantize_row n values; dequantize_row_rotated
// padded_values (turbo) or n values.
TEST(Formats, WritesStayInBounds) {
  std::mt19937_64 rng(6);
  constexpr uint8_t kCanary = 0xA5;
  for (KvType t : kAllKvTypes) {
    for (int64_t n : {1, 33, 80, 128, 130, 576}) {
      const std::vector<float> x = random_row(rng, n, 1.0f);
      const size_t rs = row_size(t, n);
      std::vector<uint8_t> q(rs + 64, kCanary);
      quantize_row(t, x.data(), n, q.data());
      for (size_t i = rs; i < q.size(); ++i) ASSERT_EQ(q[i], kCanary) << to_string(t);
      const size_t written = static_cast<size_t>(is_rotated(t) ? padded_values(t, n) : n);
      for (bool rotated : {false, true}) {
        std::vector<float> y(static_cast<size_t>(padded_values(t, n)) + 16, -7.0f);
        if (rotated) {
          dequantize_row_rotated(t, q.data(), n, y.data());
        } else {
          dequantize_row(t, q.data(), n, y.data());
        }
        const size_t end = rotated ? written : static_cast<size_t>(n);
        for (size_t i = 0; i < end; ++i) ASSERT_NE(y[i], -7.0f) << to_string(t) << " i=" << i;
        for (size_t i = end; i < y.size(); ++i) ASSERT_EQ(y[i], -7.0f) << to_string(t);
      }
    }
  }
}

TEST(Formats, QuantizeRowsMatchesQuantizeRow) {
  std::mt19937_64 rng(8);
  for (KvType t : kAllKvTypes) {
    for (int64_t n : {80, 128, 200}) {
      const int64_t rows = 5;
      const std::vector<float> x = random_row(rng, rows * n, 2.0f);
      const size_t rs = row_size(t, n);
      std::vector<uint8_t> all(rs * rows), one(rs);
      quantize_rows(t, x.data(), rows, n, all.data());
      for (int64_t r = 0; r < rows; ++r) {
        quantize_row(t, x.data() + r * n, n, one.data());
        ASSERT_EQ(0, std::memcmp(all.data() + r * rs, one.data(), rs)) << to_string(t);
      }
    }
  }
}

TEST(Formats, ZeroRowsDecodeToZeros) {
  for (KvType t : kAllKvTypes) {
    for (int64_t n : {64, 80, 576}) {
      for (float z : {0.0f, -0.0f}) {
        const std::vector<float> x(static_cast<size_t>(n), z);
        const std::vector<uint8_t> q = quantize(t, x);
        const std::vector<float> y = dequantize(t, q, n);
        for (float v : y) ASSERT_EQ(v, 0.0f) << to_string(t);
        std::vector<float> yr(static_cast<size_t>(padded_values(t, n)));
        dequantize_row_rotated(t, q.data(), n, yr.data());
        for (float v : yr) ASSERT_EQ(v, 0.0f) << to_string(t);
      }
    }
  }
  // One zero group among non-zero ones.
  std::vector<float> x(384, 1.0f);
  std::fill(x.begin() + 128, x.begin() + 256, 0.0f);
  for (KvType t : kAllKvTypes) {
    const std::vector<float> y = dequantize(t, quantize(t, x), 384);
    for (int i = 128; i < 256; ++i) ASSERT_EQ(y[i], 0.0f) << to_string(t);
    for (float v : y) ASSERT_FALSE(std::isnan(v)) << to_string(t);
  }
}

// Magnitudes far from 1: outputs stay NaN-free; within each type's range the bounds still hold.
TEST(Formats, HugeAndTinyMagnitudes) {
  std::mt19937_64 rng(9);
  for (KvType t : kAllKvTypes) {
    for (float scale : {1e-30f, 1e-12f, 1e-6f, 1e3f, 3e4f, 1e12f, 1e30f}) {
      for (int64_t n : {80, 128, 576}) {
        const std::vector<float> x = random_row(rng, n, scale);
        const std::vector<uint8_t> q = quantize(t, x);
        const std::vector<float> y = dequantize(t, q, n);
        std::vector<float> yr(static_cast<size_t>(padded_values(t, n)));
        dequantize_row_rotated(t, q.data(), n, yr.data());
        for (float v : y) ASSERT_FALSE(std::isnan(v)) << to_string(t) << " " << scale;
        for (float v : yr) ASSERT_FALSE(std::isnan(v)) << to_string(t) << " " << scale;
        const std::string what = std::string(to_string(t)) + " scale=" + std::to_string(scale);
        // In range: f16 (|x| < 65504), q8_0 / q4_0 / turbo (scale not above fp16), bf16 / f32
        // always.
        const bool in_range = [&] {
          switch (t) {
            case KvType::f32:
            case KvType::bf16:
            case KvType::fp8_e4m3:  // saturates: check_round_trip's rule covers every scale
            case KvType::fp8_e5m2:
              return true;
            case KvType::f16:
              return scale <= 1e3f;
            case KvType::q8_0:
            case KvType::q4_0:
              return scale <= 3e4f;
            default:
              return scale >= 1e-6f && scale <= 1e3f;
          }
        }();
        if (in_range) check_round_trip(t, x, q, y, what);
        if (is_rotated(t) && scale >= 1e12f) {
          // Saturated norm: every group decodes finite with |x̂| = 65504 |c|.
          for (float v : y) ASSERT_TRUE(std::isfinite(v)) << what;
          uint16_t norm;
          std::memcpy(&norm, q.data(), 2);
          EXPECT_EQ(norm, 0x7BFF) << what;
        }
        if (is_rotated(t) && scale <= 1e-12f) {
          // The norm underflows fp16: zeros.
          for (float v : y) ASSERT_EQ(v, 0.0f) << what;
        }
        if ((t == KvType::q8_0 || t == KvType::q4_0) && scale >= 1e12f) {
          for (float v : y) ASSERT_TRUE(std::isfinite(v)) << what;
        }
      }
    }
  }
}

TEST(Formats, RotatedDequantizeIsPlainForNonTurbo) {
  std::mt19937_64 rng(10);
  for (KvType t : kAllKvTypes) {
    if (is_rotated(t)) continue;
    const std::vector<float> x = random_row(rng, 80, 1.0f);
    const std::vector<uint8_t> q = quantize(t, x);
    const std::vector<float> y = dequantize(t, q, 80);
    std::vector<float> yr(80);
    dequantize_row_rotated(t, q.data(), 80, yr.data());
    EXPECT_EQ(y, yr) << to_string(t);
  }
}

}  // namespace
}  // namespace kvflash
