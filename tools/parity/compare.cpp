#include "compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvflash::parity {

std::string row_label(const AttentionProblem& p, const int32_t* q_offsets, int64_t row) {
  const int64_t h = row % p.n_q_heads;
  const int64_t token = row / p.n_q_heads;
  // The last sequence whose rows start at or before token (sequences of 0 queries start where
  // the next one does).
  int64_t lo = 0, hi = p.n_seqs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (q_row_base(q_offsets, p.n_q_tokens, mid) <= token)
      lo = mid;
    else
      hi = mid - 1;
  }
  return fmt::format("seq {}, token {}, head {}", lo,
                     token - q_row_base(q_offsets, p.n_q_tokens, lo), h);
}

Comparison compare_output(const AttentionProblem& p, const int32_t* q_offsets, const float* out,
                          const double* ref) {
  Comparison c;
  const int64_t dv = p.head_dim.v;
  const int64_t rows = q_total_rows(p, q_offsets) * p.n_q_heads;
  double sum_err2 = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double row_err2 = 0.0;
    double row_ref2 = 0.0;
    bool row_nonzero = false;
    for (int64_t d = 0; d < dv; ++d) {
      const float o = out[r * dv + d];
      const double e = ref[r * dv + d];
      row_ref2 += e * e;
      row_nonzero = row_nonzero || o != 0.0f;
      if (!std::isfinite(o)) {
        if (c.non_finite++ == 0)
          c.first_non_finite =
              fmt::format("out[{}, dim {}] = {}", row_label(p, q_offsets, r), d, o);
        continue;
      }
      const double err = static_cast<double>(o) - e;
      row_err2 += err * err;
      c.max_abs_err = std::max(c.max_abs_err, std::abs(err));
    }
    sum_err2 += row_err2;
    c.sum_ref2 += row_ref2;
    if (row_ref2 == 0.0) {
      // The reference is zero only for a query that sees no key and has no sink (problem.hpp):
      // the output must be exactly zero, not merely small.
      ++c.zero_rows;
      if (row_nonzero && c.zero_rows_not_zero++ == 0)
        c.first_zero_row_not_zero = row_label(p, q_offsets, r);
      continue;
    }
    const double row_nmse = row_err2 / row_ref2;
    if (row_nmse > c.worst_row_nmse || c.worst_row.empty()) {
      c.worst_row_nmse = row_nmse;
      c.worst_row = row_label(p, q_offsets, r);
    }
  }
  if (c.sum_ref2 > 0.0)
    c.nmse = sum_err2 / c.sum_ref2;
  else
    c.nmse = sum_err2 == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return c;
}

void compare_lse(const AttentionProblem& p, const int32_t* q_offsets, const float* lse,
                 const float* ref_lse, double tol, Comparison& c) {
  c.lse_checked = true;
  const int64_t rows = q_total_rows(p, q_offsets) * p.n_q_heads;
  for (int64_t r = 0; r < rows; ++r) {
    const float got = lse[r];
    const float want = ref_lse[r];
    std::string bad;
    if (std::isinf(want) && want < 0.0f) {
      if (!(std::isinf(got) && got < 0.0f))
        bad = fmt::format("{} where the reference is -inf", got);
    } else if (!std::isfinite(got)) {
      bad = fmt::format("{} where the reference is {}", got, want);
    } else {
      const double err = std::abs(static_cast<double>(got) - static_cast<double>(want));
      c.lse_max_err = std::max(c.lse_max_err, err);
      if (err > tol * std::max(1.0, std::abs(static_cast<double>(want))))
        bad = fmt::format("{} where the reference is {} (error {:.3g})", got, want, err);
    }
    if (!bad.empty() && c.lse_bad++ == 0)
      c.first_lse_bad = fmt::format("lse[{}] = {}", row_label(p, q_offsets, r), bad);
  }
}

}  // namespace kvflash::parity
