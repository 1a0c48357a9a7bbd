// The float64 reference: dequantize every K/V row to the original domain, then compute the
// attention of problem.hpp in double. It is the oracle for every backend. Slow on purpose: no
// tiling, no split, no approximation.
#pragma once

#include "kvflash/export.h"
#include "kvflash/problem.hpp"
#include "kvflash/status.hpp"

namespace kvflash {

// Same tensors as any backend (host memory). out / lse receive float copies of the double result;
// out_f64 (optional, same shape as out) receives the double result itself. Ragged problems read
// the packed rows of q_offsets (problem.hpp); offsets that break its rules are invalid_argument.
KVFLASH_API Status reference_attention(const AttentionProblem& p, const AttentionTensors& t,
                                       double* out_f64 = nullptr);

}  // namespace kvflash
