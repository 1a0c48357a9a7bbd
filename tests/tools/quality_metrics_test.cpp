// The metrics of kvflash-quality on hand-made inputs with hand-computed answers.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "quality/metrics.hpp"

namespace kvflash::quality {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(QualityMetrics, KlOfIdenticalDistributionsIsZero) {
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  EXPECT_EQ(kl_divergence(p, p), 0.0);
  const std::vector<double> logits = {3.0, -1.0, 0.5, 12.0, -40.0};
  EXPECT_EQ(kl_divergence_logits(logits, logits), 0.0);
  // A constant shift of every logit is the same distribution.
  std::vector<double> shifted = logits;
  for (double& x : shifted) x += 1000.0;
  EXPECT_NEAR(kl_divergence_logits(logits, shifted), 0.0, 1e-12);
}

TEST(QualityMetrics, KlOfAKnownPair) {
  // KL((1/2, 1/2) || (1/4, 3/4)) = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3).
  const std::vector<double> p = {0.5, 0.5}, q = {0.25, 0.75};
  const double expected = 0.5 * std::log(4.0 / 3.0);
  EXPECT_NEAR(kl_divergence(p, q), expected, 1e-15);
  // The same from logits: softmax(0, 0) = p, softmax(0, ln 3) = q.
  EXPECT_NEAR(
      kl_divergence_logits(std::vector<double>{0.0, 0.0}, std::vector<double>{0.0, std::log(3.0)}),
      expected, 1e-15);
  // KL is not symmetric: KL(q || p) = 1/4 ln(1/2) + 3/4 ln(3/2).
  EXPECT_NEAR(kl_divergence(q, p), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-15);
}

TEST(QualityMetrics, KlEdgeCases) {
  // 0 log 0 = 0; mass where q has none is infinite.
  EXPECT_NEAR(kl_divergence(std::vector<double>{1.0, 0.0}, std::vector<double>{0.5, 0.5}),
              std::log(2.0), 1e-15);
  EXPECT_EQ(kl_divergence(std::vector<double>{0.5, 0.5}, std::vector<double>{1.0, 0.0}), kInf);
  EXPECT_EQ(kl_divergence_logits(std::vector<double>{0.0, 0.0}, std::vector<double>{0.0, -kInf}),
            kInf);
  // Hidden keys (-inf in both) carry no mass.
  EXPECT_NEAR(kl_divergence_logits(std::vector<double>{0.0, 0.0, -kInf},
                                   std::vector<double>{0.0, std::log(3.0), -kInf}),
              0.5 * std::log(4.0 / 3.0), 1e-15);
}

TEST(QualityMetrics, LogSumExp) {
  EXPECT_NEAR(log_sum_exp(std::vector<double>{0.0, 0.0}), std::log(2.0), 1e-15);
  EXPECT_NEAR(log_sum_exp(std::vector<double>{1000.0, 1000.0}), 1000.0 + std::log(2.0), 1e-12);
  EXPECT_EQ(log_sum_exp(std::vector<double>{}), -kInf);
  EXPECT_EQ(log_sum_exp(std::vector<double>{-kInf, -kInf}), -kInf);
}

TEST(QualityMetrics, NmseOnKnownVectors) {
  const std::vector<double> ref = {1.0, 2.0, 2.0};  // energy 9
  EXPECT_EQ(nmse(ref, ref), 0.0);
  EXPECT_NEAR(nmse(ref, std::vector<double>{1.0, 2.0, 3.0}), 1.0 / 9.0, 1e-15);
  EXPECT_NEAR(nmse(ref, std::vector<double>{0.0, 0.0, 0.0}), 1.0, 1e-15);
  EXPECT_NEAR(nmse(ref, std::vector<double>{-1.0, -2.0, -2.0}), 4.0, 1e-15);
  EXPECT_EQ(nmse(std::vector<double>{0.0}, std::vector<double>{0.0}), 0.0);
  EXPECT_EQ(nmse(std::vector<double>{0.0}, std::vector<double>{1.0}), kInf);
}

TEST(QualityMetrics, CosineOnKnownVectors) {
  EXPECT_NEAR(cosine(std::vector<double>{1, 2, 3}, std::vector<double>{2, 4, 6}), 1.0, 1e-15);
  EXPECT_NEAR(cosine(std::vector<double>{1, 2, 3}, std::vector<double>{-1, -2, -3}), -1.0, 1e-15);
  EXPECT_EQ(cosine(std::vector<double>{1, 0}, std::vector<double>{0, 1}), 0.0);
  EXPECT_NEAR(cosine(std::vector<double>{1, 1}, std::vector<double>{1, 0}), std::sqrt(0.5), 1e-15);
  EXPECT_EQ(cosine(std::vector<double>{0, 0}, std::vector<double>{0, 0}), 1.0);
  EXPECT_EQ(cosine(std::vector<double>{0, 0}, std::vector<double>{1, 0}), 0.0);
}

TEST(QualityMetrics, DotAndSummary) {
  const std::vector<double> a = {1, 2, 3, 4, 5};
  const std::vector<float> b = {1, 1, 1, 1, 2};
  EXPECT_EQ(dot(a.data(), b.data(), 5), 20.0);
  Summary s;
  for (double x : {3.0, -1.0, 4.0}) s.add(x);
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.mean(), 2.0);
  EXPECT_EQ(s.min, -1.0);
  EXPECT_EQ(s.max, 4.0);
}

}  // namespace
}  // namespace kvflash::quality
