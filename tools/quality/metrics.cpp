#include "quality/metrics.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace kvflash::quality {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

double nmse(std::span<const double> ref, std::span<const double> x) {
  assert(ref.size() == x.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = x[i] - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
  }
  if (den == 0) return num == 0 ? 0.0 : kInf;
  return num / den;
}

double cosine(std::span<const double> a, std::span<const double> b) {
  assert(a.size() == b.size());
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  if (aa == 0 && bb == 0) return 1.0;
  if (aa == 0 || bb == 0) return 0.0;
  return ab / std::sqrt(aa * bb);
}

double log_sum_exp(std::span<const double> x) {
  double m = -kInf;
  for (double v : x) m = std::max(m, v);
  if (m == -kInf) return -kInf;
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  return m + std::log(s);
}

double kl_divergence(std::span<const double> p, std::span<const double> q) {
  assert(p.size() == q.size());
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    if (q[i] <= 0) return kInf;
    kl += p[i] * std::log(p[i] / q[i]);
  }
  return kl;
}

double kl_divergence_logits(std::span<const double> p_logits, std::span<const double> q_logits) {
  assert(p_logits.size() == q_logits.size());
  const double la = log_sum_exp(p_logits), lb = log_sum_exp(q_logits);
  if (la == -kInf) return 0.0;
  double kl = 0;
  for (size_t i = 0; i < p_logits.size(); ++i) {
    const double lp = p_logits[i] - la;
    const double pi = std::exp(lp);
    if (pi == 0) continue;
    const double lq = q_logits[i] - lb;
    if (lq == -kInf) return kInf;
    kl += pi * (lp - lq);
  }
  // Rounding can leave a tiny negative sum for identical distributions; KL is never negative.
  return std::max(kl, 0.0);
}

}  // namespace kvflash::quality
