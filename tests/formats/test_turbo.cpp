// turbo2/3/4: the rotation against its matrix definition, the sign vector and codebooks against
// their derivations (and the committed generated header against the generator), the Lloyd fixed
// point, the distortion on random unit vectors, the norm correction, nearest-centroid codes and
// the bit-plane layout.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "formats/lloyd_max.hpp"
#include "formats/turbo_tables_gen.hpp"
#include "kvflash/blocks.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/turbo.hpp"
#include "kvflash/turbo_tables.hpp"

namespace kvflash {
namespace {

constexpr KvType kTurboTypes[] = {KvType::turbo2, KvType::turbo3, KvType::turbo4};

// Lloyd-Max distortions of N(0, 1) (Max 1960) for 4, 8, 16 levels.
double lloyd_max_reference_distortion(KvType t) {
  switch (t) {
    case KvType::turbo2:
      return 0.1175;
    case KvType::turbo3:
      return 0.03454;
    default:
      return 0.009497;
  }
}

std::vector<double> committed(int levels) {
  switch (levels) {
    case 4:
      return {std::begin(turbo_tables::kLloydMaxGaussian4),
              std::end(turbo_tables::kLloydMaxGaussian4)};
    case 8:
      return {std::begin(turbo_tables::kLloydMaxGaussian8),
              std::end(turbo_tables::kLloydMaxGaussian8)};
    default:
      return {std::begin(turbo_tables::kLloydMaxGaussian16),
              std::end(turbo_tables::kLloydMaxGaussian16)};
  }
}

int levels(KvType t) {
  return 1 << turbo_bits(t);
}

// Code i of a turbo block, straight from the formulas of blocks.hpp.
int code_at(KvType t, const uint8_t* block, int i) {
  const uint8_t* qs = block + 2;
  switch (t) {
    case KvType::turbo2:
      return (qs[i % 32] >> (2 * (i / 32))) & 3;
    case KvType::turbo3:
      return ((qs[i % 32] >> (2 * (i / 32))) & 3) | (((qs[32 + i % 16] >> (i / 16)) & 1) << 2);
    default:
      return (qs[i % 64] >> (4 * (i / 64))) & 15;
  }
}

// R x in double from the definition: H (s ⊙ x) / sqrt(128), H[i][j] = (-1)^popcount(i & j).
std::vector<double> rotate_reference(const std::vector<double>& x, bool inverse) {
  std::vector<double> y(128, 0.0);
  for (int i = 0; i < 128; ++i) {
    double acc = 0.0;
    for (int j = 0; j < 128; ++j) {
      const double h = (std::popcount(static_cast<unsigned>(i & j)) & 1) ? -1.0 : 1.0;
      acc += h * (inverse ? x[j] : turbo_sign(j) * x[j]);
    }
    y[i] = (inverse ? turbo_sign(i) : 1.0) * acc / std::sqrt(128.0);
  }
  return y;
}

std::vector<float> unit_gaussian(std::mt19937_64& rng, int n) {
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(n));
  double ss = 0.0;
  for (double& e : v) {
    e = g(rng);
    ss += e * e;
  }
  std::vector<float> x(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(v[i] / std::sqrt(ss));
  return x;
}

TEST(TurboTables, SignsFromSplitmix64) {
  // Independent restatement: splitmix64 seeded with "kvflash!", bit i = lowest bit of output i.
  uint64_t state = 0x6b76666c61736821ull;
  int minus = 0;
  for (int i = 0; i < 128; ++i) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float expected = (z & 1) ? -1.0f : 1.0f;
    ASSERT_EQ(turbo_sign(i), expected) << i;
    minus += (z & 1) ? 1 : 0;
  }
  EXPECT_GT(minus, 40);  // a genuinely mixed sign vector
  EXPECT_LT(minus, 88);
  EXPECT_EQ(std::string("kvflash!").size(), 8u);
  uint64_t seed = 0;
  for (char c : std::string("kvflash!")) seed = (seed << 8) | static_cast<uint8_t>(c);
  EXPECT_EQ(seed, 0x6b76666c61736821ull);
}

TEST(TurboTables, MatchFreshLloydMaxRun) {
  for (int l : {4, 8, 16}) {
    const std::vector<double> fresh = lloyd_max_gaussian(l, kTurboLloydIterations);
    const std::vector<double> c = committed(l);
    ASSERT_EQ(fresh.size(), c.size());
    for (size_t k = 0; k < c.size(); ++k) EXPECT_NEAR(c[k], fresh[k], 1e-12) << l << " " << k;
  }
}

TEST(TurboTables, LloydFixedPointAndDistortion) {
  for (KvType t : kTurboTypes) {
    const std::vector<double> c = committed(levels(t));
    const std::vector<double> next = lloyd_step(c);
    for (size_t k = 0; k < c.size(); ++k) EXPECT_NEAR(next[k], c[k], 1e-9) << to_string(t);
    for (size_t k = 0; k + 1 < c.size(); ++k) EXPECT_LT(c[k], c[k + 1]);
    for (size_t k = 0; k < c.size(); ++k) EXPECT_EQ(c[k], -c[c.size() - 1 - k]);
    const double d = gaussian_distortion(c);
    std::cout << "[ lloyd ] " << to_string(t) << " N(0,1) distortion " << d << "\n";
    EXPECT_NEAR(d, lloyd_max_reference_distortion(t), 0.01 * lloyd_max_reference_distortion(t));
  }
  // The distortion function itself: 1 level at 0 is the variance; 2 levels at +-sqrt(2/pi) give
  // 1 - 2/pi.
  EXPECT_NEAR(gaussian_distortion({0.0}), 1.0, 1e-12);
  const double a = std::sqrt(2.0 / M_PI);
  EXPECT_NEAR(gaussian_distortion({-a, a}), 1.0 - 2.0 / M_PI, 1e-12);
  const std::vector<double> two = lloyd_max_gaussian(2, 100);
  EXPECT_NEAR(two[1], a, 1e-12);
}

// The committed include/kvflash/turbo_tables.hpp is byte-identical to the generator's output.
// It is generated on x86-64: elsewhere the solver's last bits differ (AArch64 fuses a * b + c into
// one rounding, and libm's erf differs), while every build uses the committed tables.
TEST(TurboTables, CommittedHeaderIsUpToDate) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the committed tables are generated on x86-64";
#endif
  std::string here = __FILE__;  // .../tests/formats/test_turbo.cpp
  const std::string suffix = "tests/formats/test_turbo.cpp";
  ASSERT_GE(here.size(), suffix.size());
  ASSERT_EQ(here.substr(here.size() - suffix.size()), suffix) << here;
  const std::string path =
      here.substr(0, here.size() - suffix.size()) + "include/kvflash/turbo_tables.hpp";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), render_turbo_tables())
      << "stale " << path << ": regenerate with kvflash-gen-turbo-tables " << path;
}

TEST(TurboTables, PublicCodebooks) {
  EXPECT_EQ(kTurboSqrt128, std::sqrt(128.0));
  EXPECT_EQ(kTurboInvSqrt128, static_cast<float>(1.0 / std::sqrt(128.0)));
  for (KvType t : kTurboTypes) {
    const float* c = turbo_centroids(t);
    const float* b = turbo_boundaries(t);
    ASSERT_NE(c, nullptr);
    ASSERT_NE(b, nullptr);
    const std::vector<double> ref = committed(levels(t));
    for (int k = 0; k < levels(t); ++k) {
      EXPECT_EQ(c[k], static_cast<float>(ref[k] / std::sqrt(128.0))) << to_string(t) << k;
    }
    for (int k = 0; k + 1 < levels(t); ++k) {
      EXPECT_LT(c[k], b[k]);
      EXPECT_LT(b[k], c[k + 1]);
      EXPECT_EQ(b[k], 0.5f * (c[k] + c[k + 1]));
    }
  }
  EXPECT_EQ(turbo_bits(KvType::turbo2), 2);
  EXPECT_EQ(turbo_bits(KvType::turbo3), 3);
  EXPECT_EQ(turbo_bits(KvType::turbo4), 4);
  EXPECT_EQ(turbo_bits(KvType::q4_0), 0);
  EXPECT_EQ(turbo_centroids(KvType::f16), nullptr);
  EXPECT_EQ(turbo_boundaries(KvType::q8_0), nullptr);
}

TEST(TurboRotation, MatchesMatrixDefinition) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> g(0.0, 1.0);
  for (int rep = 0; rep < 8; ++rep) {
    std::vector<double> xd(128);
    for (double& v : xd) v = g(rng);
    std::vector<float> x(256);  // two groups: the second one is rotated on its own
    for (int i = 0; i < 128; ++i) x[i] = x[128 + i] = static_cast<float>(xd[i]);
    for (int i = 0; i < 128; ++i) xd[i] = x[i];
    std::vector<float> y = x;
    rotate_forward(y.data(), 256);
    const std::vector<double> ref = rotate_reference(xd, false);
    for (int i = 0; i < 128; ++i) {
      ASSERT_NEAR(y[i], ref[i], 1e-5) << i;
      ASSERT_EQ(y[i], y[128 + i]);
    }
    std::vector<double> yd(y.begin(), y.begin() + 128);
    const std::vector<double> back_ref = rotate_reference(yd, true);
    std::vector<float> back = y;
    rotate_inverse(back.data(), 256);
    for (int i = 0; i < 128; ++i) {
      ASSERT_NEAR(back[i], back_ref[i], 1e-5) << i;
      ASSERT_NEAR(back[i], x[i], 1e-5) << i;  // R^T R = I
    }
  }
  // Basis vectors: R e_0 = s_0 * (1, 1, ..., 1) / sqrt(128) (row 0 of H is all ones).
  std::vector<float> e(128, 0.0f);
  e[0] = 1.0f;
  rotate_forward(e.data(), 128);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(e[i], turbo_sign(0) * kTurboInvSqrt128);
}

TEST(Turbo, DistortionOnRandomUnitVectors) {
  constexpr int kVectors = 20000;
  for (KvType t : kTurboTypes) {
    std::mt19937_64 rng(2024);
    double sum = 0.0;
    std::vector<uint8_t> q(row_size(t, 128));
    std::vector<float> y(128);
    for (int v = 0; v < kVectors; ++v) {
      const std::vector<float> x = unit_gaussian(rng, 128);
      quantize_row(t, x.data(), 128, q.data());
      dequantize_row(t, q.data(), 128, y.data());
      double e = 0.0;
      for (int i = 0; i < 128; ++i) e += (static_cast<double>(x[i]) - y[i]) * (x[i] - y[i]);
      sum += e;
    }
    const double d = sum / kVectors;
    const double ref = lloyd_max_reference_distortion(t);
    std::cout << "[ distortion ] " << to_string(t) << " mean |x - x^|^2 = " << d << " (Lloyd-Max "
              << ref << ", ratio " << d / ref << ")\n";
    RecordProperty(std::string(to_string(t)) + "_distortion", std::to_string(d));
    EXPECT_NEAR(d, ref, 0.10 * ref) << to_string(t);
  }
}

// |x̂| = |x| up to the fp16 rounding of the stored norm.
TEST(Turbo, NormIsPreserved) {
  std::mt19937_64 rng(77);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (KvType t : kTurboTypes) {
    for (float scale : {1e-2f, 1.0f, 30.0f, 300.0f}) {  // norms within the fp16 range
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<float> x(128);
        for (float& v : x) v = scale * g(rng);
        if (rep % 5 == 0) x[rep % 128] *= 50.0f;  // an outlier
        std::vector<uint8_t> q(row_size(t, 128));
        quantize_row(t, x.data(), 128, q.data());
        std::vector<float> y(128);
        dequantize_row(t, q.data(), 128, y.data());
        double nx = 0.0, ny = 0.0;
        for (int i = 0; i < 128; ++i) {
          nx += static_cast<double>(x[i]) * x[i];
          ny += static_cast<double>(y[i]) * y[i];
        }
        // fp16 relative rounding <= 2^-11, plus float rounding of the decode.
        ASSERT_NEAR(std::sqrt(ny) / std::sqrt(nx), 1.0, std::ldexp(1.0, -11) + 1e-5)
            << to_string(t) << " scale " << scale;
      }
    }
  }
}

// Codes are the nearest centroids of y = R x / |x| (computed here in double from the matrix
// definition), the stored norm is |x| / |c|, and the rotated decode is norm * c.
TEST(Turbo, CodesNormAndRotatedDecode) {
  std::mt19937_64 rng(31);
  std::normal_distribution<double> g(0.0, 1.0);
  for (KvType t : kTurboTypes) {
    const float* c = turbo_centroids(t);
    for (int64_t n : {80, 128, 200}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = static_cast<float>(3.0 * g(rng));
      std::vector<uint8_t> q(row_size(t, n));
      quantize_row(t, x.data(), n, q.data());
      const int64_t padded = padded_values(t, n);
      std::vector<float> yr(static_cast<size_t>(padded));
      dequantize_row_rotated(t, q.data(), n, yr.data());
      std::vector<float> yo(static_cast<size_t>(n));
      dequantize_row(t, q.data(), n, yo.data());
      for (int64_t g0 = 0; g0 < padded; g0 += 128) {
        const uint8_t* block = q.data() + (g0 / 128) * traits(t).block_bytes;
        std::vector<double> xd(128, 0.0);
        double ss = 0.0;
        for (int64_t i = g0; i < std::min(n, g0 + 128); ++i) {
          xd[i - g0] = x[i];
          ss += static_cast<double>(x[i]) * x[i];
        }
        for (double& v : xd) v /= std::sqrt(ss);
        const std::vector<double> y = rotate_reference(xd, false);
        double c2 = 0.0;
        for (int i = 0; i < 128; ++i) {
          const int code = code_at(t, block, i);
          ASSERT_EQ(code, turbo_code(t, block, i));
          int best = 0;
          for (int k = 1; k < levels(t); ++k) {
            if (std::fabs(y[i] - c[k]) < std::fabs(y[i] - c[best])) best = k;
          }
          // Away from a boundary (float vs double rotation), the code is the nearest centroid.
          if (std::fabs(std::fabs(y[i] - c[best]) - std::fabs(y[i] - c[code])) > 1e-6) {
            ASSERT_EQ(code, best) << to_string(t) << " i=" << i << " y=" << y[i];
          }
          c2 += static_cast<double>(c[code]) * c[code];
        }
        uint16_t norm_bits;
        std::memcpy(&norm_bits, block, 2);
        const double norm = fp16_to_fp32(norm_bits);
        EXPECT_NEAR(norm, std::sqrt(ss) / std::sqrt(c2), std::ldexp(norm, -11)) << to_string(t);
        // Rotated decode: exactly norm * c[code].
        for (int i = 0; i < 128; ++i) {
          ASSERT_EQ(yr[g0 + i], static_cast<float>(norm) * c[code_at(t, block, i)]);
        }
        // Original-domain decode: R^T of the rotated decode.
        std::vector<float> back(yr.begin() + g0, yr.begin() + g0 + 128);
        rotate_inverse(back.data(), 128);
        for (int64_t i = g0; i < std::min(n, g0 + 128); ++i) ASSERT_EQ(yo[i], back[i - g0]);
      }
    }
  }
}

// Hand-packed blocks decode through the documented bit planes.
TEST(Turbo, BitPlaneLayout) {
  for (KvType t : kTurboTypes) {
    std::vector<uint8_t> block(static_cast<size_t>(traits(t).block_bytes), 0);
    const uint16_t one = fp32_to_fp16(1.0f);
    std::memcpy(block.data(), &one, 2);
    int codes[128];
    for (int i = 0; i < 128; ++i) codes[i] = (i * 7 + i / 16) % levels(t);
    uint8_t* qs = block.data() + 2;
    for (int i = 0; i < 128; ++i) {
      switch (t) {
        case KvType::turbo2:
          qs[i % 32] |= static_cast<uint8_t>(codes[i] << (2 * (i / 32)));
          break;
        case KvType::turbo3:
          qs[i % 32] |= static_cast<uint8_t>((codes[i] & 3) << (2 * (i / 32)));
          qs[32 + i % 16] |= static_cast<uint8_t>((codes[i] >> 2) << (i / 16));
          break;
        default:
          qs[i % 64] |= static_cast<uint8_t>(codes[i] << (4 * (i / 64)));
          break;
      }
    }
    std::vector<float> y(128);
    dequantize_row_rotated(t, block.data(), 128, y.data());
    for (int i = 0; i < 128; ++i) {
      ASSERT_EQ(y[i], turbo_centroids(t)[codes[i]]) << to_string(t) << " i=" << i;
      ASSERT_EQ(turbo_code(t, block.data(), i), codes[i]);
    }
    // Quantizing the original-domain decode R^T c finds y = c / |c| again: its codes are those
    // of c_i / |c| (equal to codes[i] unless the rescaling crosses a boundary).
    std::vector<float> x(128);
    dequantize_row(t, block.data(), 128, x.data());
    std::vector<uint8_t> again(block.size());
    quantize_row(t, x.data(), 128, again.data());
    double c2 = 0.0;
    for (int i = 0; i < 128; ++i) c2 += std::pow(turbo_centroids(t)[codes[i]], 2.0);
    for (int i = 0; i < 128; ++i) {
      const double yi = turbo_centroids(t)[codes[i]] / std::sqrt(c2);
      int expected = 0;
      for (int k = 0; k + 1 < levels(t); ++k) expected += yi > turbo_boundaries(t)[k] ? 1 : 0;
      ASSERT_EQ(code_at(t, again.data(), i), expected) << to_string(t) << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace kvflash
