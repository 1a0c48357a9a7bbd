// Lloyd-Max scalar quantizer of a standard Gaussian N(0, 1), in double precision. Used by the
// generator of include/kvflash/turbo_tables.hpp (tools/gen/gen_turbo_tables.cpp) and by the tests
// that check the committed tables. Not used at run time.
#pragma once

#include <vector>

namespace kvflash {

// One Lloyd iteration for N(0, 1): the boundaries are the midpoints of neighbouring centroids
// (the outer ones are -inf and +inf) and each new centroid is the conditional mean of N(0, 1) on
// its interval [a, b]: (phi(a) - phi(b)) / (Phi(b) - Phi(a)), with erf/erfc/exp closed forms
// (the tail form erfc is used on the side away from 0 for accuracy). c must be ascending; the
// result is ascending and made exactly symmetric (c[k] = -c[L-1-k]).
std::vector<double> lloyd_step(const std::vector<double>& c);

// The Lloyd-Max codebook of `levels` centroids (ascending) after `iterations` Lloyd steps from an
// evenly spread start (c_k = 2 * (2k + 1 - levels) / levels). The iteration stops early once a
// step changes nothing (an exact fixed point), which gives the same result as running on.
// Deterministic for a given libm.
std::vector<double> lloyd_max_gaussian(int levels, int iterations);

// Mean squared error per coordinate of quantizing N(0, 1) with the codebook c (ascending) and
// nearest-centroid (midpoint) boundaries: sum_k int_{b_k}^{b_k+1} (x - c_k)^2 phi(x) dx.
double gaussian_distortion(const std::vector<double>& c);

}  // namespace kvflash
