// The quality metrics, in double. Small and separate so that tests can check them on hand-made
// inputs.
#pragma once

#include <cstdint>
#include <limits>
#include <span>

namespace kvflash::quality {

// Normalized mean squared error sum((x - ref)^2) / sum(ref^2): 0 when x == ref; 1 for x = 0.
// ref all zero: 0 if x is too, +inf otherwise.
double nmse(std::span<const double> ref, std::span<const double> x);

// Cosine similarity of a and b; 1 when both are zero (the same vector), 0 when only one is.
double cosine(std::span<const double> a, std::span<const double> b);

// log(sum(exp(x))), stable; -inf for an empty span or all -inf.
double log_sum_exp(std::span<const double> x);

// KL(p || q) = sum p_i log(p_i / q_i) of two probability vectors, with 0 log 0 = 0; +inf where
// p_i > 0 = q_i.
double kl_divergence(std::span<const double> p, std::span<const double> q);

// KL(softmax(p_logits) || softmax(q_logits)), computed from the logits without forming the
// probabilities' logarithms by division: sum p_i ((a_i - lse_a) - (b_i - lse_b)).
double kl_divergence_logits(std::span<const double> p_logits, std::span<const double> q_logits);

// dot(a, b) in double with four partial sums (independent chains keep the FPU busy: the needle
// test takes several passes over 1M keys).
inline double dot(const double* a, const float* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  const int64_t n4 = n - n % 4;
  int64_t i = 0;
  for (; i < n4; i += 4) {
    s0 += a[i] * double{b[i]};
    s1 += a[i + 1] * double{b[i + 1]};
    s2 += a[i + 2] * double{b[i + 2]};
    s3 += a[i + 3] * double{b[i + 3]};
  }
  for (; i < n; ++i) s0 += a[i] * double{b[i]};
  return (s0 + s1) + (s2 + s3);
}

// Mean, minimum and maximum of a stream of values.
struct Summary {
  double sum = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  int64_t n = 0;
  void add(double x) {
    sum += x;
    min = x < min ? x : min;
    max = x > max ? x : max;
    ++n;
  }
  double mean() const { return n > 0 ? sum / static_cast<double>(n) : 0.0; }
};

}  // namespace kvflash::quality
