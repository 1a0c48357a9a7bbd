// A plain float32 attention: the error a straightforward same-precision implementation makes on
// the same quantized K/V. The harness bounds each kernel's error relative to it (compare.hpp), and
// its agreement with the float64 reference is itself a check of the reference.
//
// Written from the definition in problem.hpp, independently of src/reference: dequantize each row
// to the original domain, logits in float, two passes (maximum, then weighted sum), no tiling.
#pragma once

#include <cstdint>
#include <vector>

#include "kvflash/problem.hpp"

namespace kvflash::parity {

// t: host tensors (out and lse are ignored; q_offsets read when ragged); lens: tokens of each
// sequence. out receives (rows, n_q_heads, head_dim.v) floats, lse (rows, n_q_heads), rows =
// q_total_rows (problem.hpp).
void baseline_attention_f32(const AttentionProblem& p, const AttentionTensors& t,
                            const std::vector<int64_t>& lens, float* out, float* lse);

}  // namespace kvflash::parity
