// The synthetic KV of kvflash-quality: deterministic for a seed, outlier channels where the header
// says, RoPE structure, Gaussian-like values, and queries that make attention peaked but not
// one-hot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "quality/metrics.hpp"
#include "quality/suite.hpp"
#include "quality/synthetic.hpp"

namespace kvflash::quality {
namespace {

constexpr HeadDims kD128 = {128, 128};

TEST(QualitySynthetic, DeterministicForASeed) {
  const SyntheticKv a(7, kD128, 2), b(7, kD128, 2), c(8, kD128, 2);
  std::vector<float> ka(64 * 128), kb(64 * 128), kc(64 * 128), va(64 * 128), vb(64 * 128);
  a.keys(1, 1000, 64, ka.data());
  b.keys(1, 1000, 64, kb.data());
  c.keys(1, 1000, 64, kc.data());
  a.values(0, 5, 64, va.data());
  b.values(0, 5, 64, vb.data());
  EXPECT_EQ(ka, kb);
  EXPECT_EQ(va, vb);
  EXPECT_NE(ka, kc);
  EXPECT_EQ(a.outlier_channels(1), b.outlier_channels(1));
}

TEST(QualitySynthetic, SequencesShareTheStyleNotTheTokens) {
  const SyntheticKv g(7, kD128, 1);
  std::vector<float> s0(16 * 128), s1(16 * 128), plain(16 * 128);
  g.keys(0, 100, 16, s0.data(), Stream::key, 0);
  g.keys(0, 100, 16, s1.data(), Stream::key, 1);
  g.keys(0, 100, 16, plain.data());
  EXPECT_EQ(s0, plain);  // sequence 0 is what a single sequence draws
  EXPECT_NE(s0, s1);
  // The outlier channels are the same in both: large in both sequences.
  for (int32_t c : g.outlier_channels(0)) {
    double e0 = 0, e1 = 0;
    for (int t = 0; t < 16; ++t) {
      e0 += double{s0[t * 128 + c]} * s0[t * 128 + c];
      e1 += double{s1[t * 128 + c]} * s1[t * 128 + c];
    }
    EXPECT_GT(e0, 16 * 25.0) << c;
    EXPECT_GT(e1, 16 * 25.0) << c;
  }
}

TEST(QualitySynthetic, AnySliceIsTheSameBytes) {
  // Rows come from a counter-based generator: a slice generated alone equals the same rows of a
  // longer run, across a RoPE block boundary too, and fill() lays out exactly these rows.
  const SyntheticKv g(3, kD128, 2);
  std::vector<float> all(600 * 128), part(50 * 128);
  g.keys(1, 0, 600, all.data());
  g.keys(1, 230, 50, part.data());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + 230 * 128));
  std::vector<float> kf(600 * 2 * 128), vf(600 * 2 * 128), v1(128);
  g.fill(600, kf.data(), vf.data(), 2);
  for (int64_t t : {0, 255, 256, 599}) {
    EXPECT_TRUE(std::equal(all.begin() + t * 128, all.begin() + (t + 1) * 128,
                           kf.begin() + (t * 2 + 1) * 128))
        << t;
    g.values(1, t, 1, v1.data());
    EXPECT_TRUE(std::equal(v1.begin(), v1.end(), vf.begin() + (t * 2 + 1) * 128)) << t;
  }
}

TEST(QualitySynthetic, KeysHaveOutlierChannelsInRopePairs) {
  EXPECT_EQ(outlier_count(128), 4);
  EXPECT_EQ(outlier_count(64), 2);
  EXPECT_EQ(outlier_count(576), 18);
  const SyntheticKv g(11, kD128, 2);
  constexpr int64_t n = 4096;
  std::vector<float> k(n * 128);
  for (int32_t h = 0; h < 2; ++h) {
    const std::vector<int32_t> out = g.outlier_channels(h);
    ASSERT_EQ(out.size(), 4u);
    // Whole RoPE pairs (i, i + 64) of the low-frequency half.
    for (int32_t c : out) {
      const int32_t partner = c < 64 ? c + 64 : c - 64;
      EXPECT_NE(std::find(out.begin(), out.end(), partner), out.end()) << c;
      EXPECT_GE(c % 64, 32) << c;
    }
    g.keys(h, 0, n, k.data());
    std::vector<double> rms(128, 0.0);
    for (int64_t t = 0; t < n; ++t)
      for (int32_t c = 0; c < 128; ++c) rms[c] += double{k[t * 128 + c]} * k[t * 128 + c] / n;
    double normal_max = 0, outlier_min = 1e30;
    for (int32_t c = 0; c < 128; ++c) {
      const bool is_out = std::find(out.begin(), out.end(), c) != out.end();
      if (is_out)
        outlier_min = std::min(outlier_min, std::sqrt(rms[c]));
      else
        normal_max = std::max(normal_max, std::sqrt(rms[c]));
    }
    EXPECT_GT(normal_max, 0.9);
    EXPECT_LT(normal_max, 1.1);
    // 10-20x scale; per channel RMS at least ~0.75x of it (a mean of about 1/sqrt(2) per channel
    // plus 0.5 noise).
    EXPECT_GT(outlier_min, 7.0 * normal_max);
  }
}

TEST(QualitySynthetic, OutlierPairsRotateWithPosition) {
  // Undoing the RoPE rotation pos * theta_i (theta_i = base^(-2i/d)) of an outlier pair recovers
  // its fixed mean direction: the de-rotated mean keeps most of the pair's magnitude, where the
  // mean of the stored pairs over many turns cancels out.
  const SyntheticKv g(5, kD128, 1);
  const std::vector<int32_t> out = g.outlier_channels(0);
  constexpr int64_t n = 1 << 16, step = 64;
  std::vector<float> k(128);
  for (int32_t c : out) {
    if (c >= 64) continue;
    const double theta = std::pow(SyntheticKv::kRopeBase, -2.0 * c / 128.0);
    double mx = 0, my = 0, rx = 0, ry = 0;
    for (int64_t pos = 0; pos < n; pos += step) {
      g.keys(0, pos, 1, k.data());
      const double a = -static_cast<double>(pos) * theta, x = k[c], y = k[c + 64];
      mx += (x * std::cos(a) - y * std::sin(a)) / (n / step);
      my += (x * std::sin(a) + y * std::cos(a)) / (n / step);
      rx += x / (n / step);
      ry += y / (n / step);
    }
    const double scale = g.key_scale(0)[c];
    EXPECT_GT(std::hypot(mx, my), 0.9 * scale) << c;
    if (theta * n > 8 * std::numbers::pi) {
      EXPECT_LT(std::hypot(rx, ry), 0.3 * scale) << c;
    }
  }
}

TEST(QualitySynthetic, ValuesAreRoughlyGaussian) {
  const SyntheticKv g(9, kD128, 1);
  constexpr int64_t n = 8192;
  std::vector<float> v(n * 128);
  g.values(0, 0, n, v.data());
  for (int32_t c = 0; c < 128; c += 17) {
    double m = 0, m2 = 0, m4 = 0;
    for (int64_t t = 0; t < n; ++t) m += v[t * 128 + c] / double(n);
    for (int64_t t = 0; t < n; ++t) {
      const double d = v[t * 128 + c] - m;
      m2 += d * d / n;
      m4 += d * d * d * d / n;
    }
    const double sd = std::sqrt(m2);
    EXPECT_GT(sd, 0.45) << c;
    EXPECT_LT(sd, 2.1) << c;
    EXPECT_LT(std::abs(m), 0.1 * sd) << c;
    EXPECT_NEAR(m4 / (m2 * m2), 3.0, 0.3) << c;  // Gaussian kurtosis
  }
}

TEST(QualitySynthetic, QueriesArePeakedButNotOneHot) {
  SuiteConfig c;
  AttentionProblem p;
  p.n_q_heads = 8;
  p.n_kv_heads = 2;
  p.kv_capacity = 8192;
  const SyntheticKv g(c.seed, p.head_dim, p.n_kv_heads);
  std::vector<float> kf(8192 * 2 * 128), vf(kf.size());
  g.fill(8192, kf.data(), vf.data(), 2);
  const std::vector<float> q = make_queries(c, p, g, kf.data());
  ASSERT_EQ(q.size(), 8u * 128u);
  Summary top;
  std::vector<double> logits(8192);
  for (int32_t h = 0; h < 8; ++h) {
    for (int64_t j = 0; j < 8192; ++j) {
      std::vector<double> qd(q.begin() + h * 128, q.begin() + (h + 1) * 128);
      logits[j] = p.effective_scale() * dot(qd.data(), kf.data() + (j * 2 + h / 4) * 128, 128);
    }
    const double lse = log_sum_exp(logits);
    top.add(std::exp(*std::max_element(logits.begin(), logits.end()) - lse));
  }
  EXPECT_GT(top.min, 0.02);
  EXPECT_LT(top.max, 0.99);
  EXPECT_GT(top.mean(), 0.1);
  EXPECT_LT(top.mean(), 0.9);
}

}  // namespace
}  // namespace kvflash::quality
