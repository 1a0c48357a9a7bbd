#include "formats/lloyd_max.hpp"

#include <cmath>
#include <cstddef>
#include <limits>

namespace kvflash {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// Standard normal density; 0 at +-inf.
double phi(double x) {
  return std::isinf(x) ? 0.0 : kInvSqrt2Pi * std::exp(-0.5 * x * x);
}

// P(a < X < b) for X ~ N(0, 1), a < b, computed with the tail (erfc) form on the side away from 0.
double prob(double a, double b) {
  if (a >= 0.0) return 0.5 * (std::erfc(a * kInvSqrt2) - std::erfc(b * kInvSqrt2));
  if (b <= 0.0) return 0.5 * (std::erfc(-b * kInvSqrt2) - std::erfc(-a * kInvSqrt2));
  return 0.5 * (std::erf(b * kInvSqrt2) - std::erf(a * kInvSqrt2));
}

// x * phi(x), 0 at +-inf.
double xphi(double x) {
  return std::isinf(x) ? 0.0 : x * phi(x);
}

std::vector<double> boundaries(const std::vector<double>& c) {
  const size_t n = c.size();
  std::vector<double> b(n + 1);
  b[0] = -kInf;
  b[n] = kInf;
  for (size_t k = 1; k < n; ++k) b[k] = 0.5 * (c[k - 1] + c[k]);
  return b;
}

}  // namespace

std::vector<double> lloyd_step(const std::vector<double>& c) {
  const size_t n = c.size();
  const std::vector<double> b = boundaries(c);
  std::vector<double> next(n);
  for (size_t k = 0; k < n; ++k) {
    next[k] = (phi(b[k]) - phi(b[k + 1])) / prob(b[k], b[k + 1]);
  }
  // N(0, 1) is symmetric: remove the rounding asymmetry so that the codebook stays exactly odd.
  for (size_t k = 0; k < n / 2; ++k) {
    const double m = 0.5 * (next[n - 1 - k] - next[k]);
    next[k] = -m;
    next[n - 1 - k] = m;
  }
  if (n % 2 == 1) next[n / 2] = 0.0;
  return next;
}

std::vector<double> lloyd_max_gaussian(int levels, int iterations) {
  std::vector<double> c(static_cast<size_t>(levels));
  for (int k = 0; k < levels; ++k) {
    c[static_cast<size_t>(k)] = 2.0 * (2.0 * k + 1.0 - levels) / levels;
  }
  for (int it = 0; it < iterations; ++it) {
    std::vector<double> next = lloyd_step(c);
    if (next == c) break;
    c = std::move(next);
  }
  return c;
}

double gaussian_distortion(const std::vector<double>& c) {
  // On [a, b]: int (x - c)^2 phi = int x^2 phi - 2 c int x phi + c^2 int phi, with
  // int x phi = phi(a) - phi(b) and int x^2 phi = P + a phi(a) - b phi(b).
  const std::vector<double> b = boundaries(c);
  double d = 0.0;
  for (size_t k = 0; k < c.size(); ++k) {
    const double lo = b[k], hi = b[k + 1];
    const double p = prob(lo, hi);
    const double m1 = phi(lo) - phi(hi);
    const double m2 = p + xphi(lo) - xphi(hi);
    d += m2 - 2.0 * c[k] * m1 + c[k] * c[k] * p;
  }
  return d;
}

}  // namespace kvflash
