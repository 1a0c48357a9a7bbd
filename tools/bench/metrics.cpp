#include "bench/metrics.hpp"

#include <algorithm>

namespace kvflash::bench {

int64_t visible_pairs(int64_t n_q, int64_t kv_len, bool causal, int64_t window) {
  int64_t pairs = 0;
  // One term per query: O(n_q), at most 2^20 iterations, and exact by construction.
  for (int64_t i = 0; i < n_q; ++i) {
    const int64_t pq = kv_len - n_q + i;
    // Keys [first, last] are visible: causal cuts at the query, the window before it.
    const int64_t last = causal ? std::min(pq, kv_len - 1) : kv_len - 1;
    const int64_t first = window > 0 ? std::max<int64_t>(0, pq - window + 1) : 0;
    pairs += std::max<int64_t>(0, last - first + 1);
  }
  return pairs;
}

double attention_flops(const AttentionProblem& p) {
  const double per_pair = 2.0 * (p.head_dim.k + p.head_dim.v);
  return per_pair *
         static_cast<double>(visible_pairs(p.n_q_tokens, p.kv_capacity, p.causal, p.window)) *
         p.n_q_heads * p.n_seqs;
}

double kv_bytes(const AttentionProblem& p) {
  const double row =
      static_cast<double>(row_size(p.k_type, p.head_dim.k) + row_size(p.v_type, p.head_dim.v));
  return static_cast<double>(p.n_seqs) * static_cast<double>(p.kv_capacity) * p.n_kv_heads * row;
}

}  // namespace kvflash::bench
