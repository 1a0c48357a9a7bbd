// What one attention call costs, for turning a time into a speed: the KV bytes a decode step
// must read at least once, and the floating-point work of the visible (query, key) pairs under
// the masking rules of problem.hpp.
#pragma once

#include <cstdint>

#include "kvflash/problem.hpp"

namespace kvflash::bench {

// (query, key) pairs one head of one sequence computes: query i sits at position
// kv_len - n_q + i; causal hides keys after the query, a window > 0 hides keys window or more
// positions before it.
int64_t visible_pairs(int64_t n_q, int64_t kv_len, bool causal, int64_t window);

// 2 * (Dk + Dv) flops per visible pair (q.k and p*v, a multiply-add each), times query heads and
// sequences; every sequence holds kv_capacity tokens (the benchmark's layout).
double attention_flops(const AttentionProblem& p);

// Bytes of the K and V caches of all sequences: n_seqs * kv_capacity * n_kv_heads *
// (row_size(k) + row_size(v)). The least a call must read, so bytes / time is the effective
// bandwidth; padding of partial blocks is counted since it is read too.
double kv_bytes(const AttentionProblem& p);

// Decode and speculative steps (up to 8 query tokens) are bound by reading the cache; longer
// query blocks (prefill) by arithmetic. The tool reports GB/s for the first, TFLOP/s for the
// second.
inline constexpr int32_t kMaxDecodeQueries = 8;
inline bool is_decode(const AttentionProblem& p) {
  return p.n_q_tokens <= kMaxDecodeQueries;
}

}  // namespace kvflash::bench
