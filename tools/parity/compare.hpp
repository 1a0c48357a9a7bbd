// Comparison of a backend's output with the float64 reference. Every value is looked at: a NaN or
// inf anywhere is counted and reported, never skipped.
#pragma once

#include <cstdint>
#include <string>

#include "kvflash/problem.hpp"

namespace kvflash::parity {

// A kernel may be worse than the float64 reference, but not by more than kBaselineFactor times
// the NMSE of a plain float32 implementation on the same quantized K/V (STYLE 10; the factor is
// on a squared error, so 4 means 2x in RMS, FlashAttention-3's margin). The case's NMSE bound is
// added as an absolute floor, since the float32 baseline can be almost exact.
inline constexpr double kBaselineFactor = 4.0;
// One wrong row among thousands hardly moves the global NMSE, nor does a whole sequence whose
// outputs are small next to another's (a 1M-token average beside a 1-token sequence). Each row on
// its own must stay within this multiple of the bound: rounding errors are relative, so rows share
// about the same NMSE (in a batch of equal sequences the worst row is within 2x of the global NMSE
// on the CPU backend), and 10 leaves room for the spread among thousands of rows.
inline constexpr double kRowBoundFactor = 10.0;
// When the whole reference output is zero, NMSE is undefined; the output must then be this close.
inline constexpr double kZeroReferenceMaxAbs = 1e-6;

struct Comparison {
  int64_t non_finite = 0;        // NaN or inf values in out
  std::string first_non_finite;  // e.g. "out[seq 0, token 3, head 5, dim 17] = nan"
  double sum_ref2 = 0.0;         // sum(ref^2)
  double nmse = 0.0;             // sum((out - ref)^2) / sum(ref^2), over finite values
  double max_abs_err = 0.0;
  double worst_row_nmse = 0.0;     // over rows whose reference is not all zero
  std::string worst_row;           // "seq s, token i, head h"
  int64_t zero_rows = 0;           // rows whose reference is all zero
  int64_t zero_rows_not_zero = 0;  // rows the reference leaves zero (query sees nothing) that
                                   // are not exactly zero
  std::string first_zero_row_not_zero;

  // lse (only when both the kernel and the reference wrote it)
  bool lse_checked = false;
  int64_t lse_bad = 0;
  std::string first_lse_bad;
  double lse_max_err = 0.0;  // over rows where the reference is finite
};

// out: the kernel's (rows, n_q_heads, head_dim.v) floats, rows = q_total_rows(p, q_offsets)
// (q_offsets: tensors.q_offsets, nullptr unless ragged); ref: the reference's float64 output of
// the same shape.
Comparison compare_output(const AttentionProblem& p, const int32_t* q_offsets, const float* out,
                          const double* ref);

// lse: the kernel's (rows, n_q_heads); ref_lse: the reference's. Where the reference is -inf the
// kernel must be -inf; elsewhere finite and within tol * max(1, |ref|).
void compare_lse(const AttentionProblem& p, const int32_t* q_offsets, const float* lse,
                 const float* ref_lse, double tol, Comparison& c);

// "seq s, token i, head h" of a flat row index (q_row_base(s) + i) * n_q_heads + h.
std::string row_label(const AttentionProblem& p, const int32_t* q_offsets, int64_t row);

}  // namespace kvflash::parity
