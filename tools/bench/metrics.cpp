#include "bench/metrics.hpp"

#include <algorithm>
#include <random>

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

namespace {

// One sequence of n_q queries over kv_len tokens, every query head.
double sequence_flops(const AttentionProblem& p, int64_t n_q, int64_t kv_len) {
  const double per_pair = 2.0 * (p.head_dim.k + p.head_dim.v);
  return per_pair * static_cast<double>(visible_pairs(n_q, kv_len, p.causal, p.window)) *
         p.n_q_heads;
}

double token_bytes(const AttentionProblem& p) {
  return static_cast<double>(row_size(p.k_type, p.head_dim.k) + row_size(p.v_type, p.head_dim.v)) *
         p.n_kv_heads;
}

}  // namespace

double attention_flops(const AttentionProblem& p) {
  return sequence_flops(p, p.n_q_tokens, p.kv_capacity) * p.n_seqs;
}

double kv_bytes(const AttentionProblem& p) {
  return static_cast<double>(p.n_seqs) * static_cast<double>(p.kv_capacity) * token_bytes(p);
}

void apply_ragged(AttentionProblem& p, const RaggedBatch& b) {
  p.n_seqs = static_cast<int32_t>(b.q_lens.size());
  p.n_q_tokens = std::max(1, *std::max_element(b.q_lens.begin(), b.q_lens.end()));
  p.kv_capacity = std::max<int64_t>(1, *std::max_element(b.kv_lens.begin(), b.kv_lens.end()));
  p.ragged_q = !b.same_queries();
}

bool RaggedBatch::same_queries() const {
  return !q_lens.empty() && q_lens[0] > 0 &&
         std::all_of(q_lens.begin(), q_lens.end(), [&](int32_t q) { return q == q_lens[0]; });
}

double attention_flops(const AttentionProblem& p, const RaggedBatch& b) {
  if (b.empty()) return attention_flops(p);
  double flops = 0;
  for (size_t s = 0; s < b.q_lens.size(); ++s)
    flops += sequence_flops(p, b.q_lens[s], b.kv_lens[s]);
  return flops;
}

double kv_bytes(const AttentionProblem& p, const RaggedBatch& b) {
  if (b.empty()) return kv_bytes(p);
  double tokens = 0;
  for (int64_t len : b.kv_lens) tokens += static_cast<double>(len);
  return tokens * token_bytes(p);
}

RaggedBatch issue39_batch() {
  return {{1, 1, 1, 1, 1, 1, 1, 1, 16, 64, 256, 512, 1024, 2048, 4096, 4096},
          {1024, 2048, 4096, 8192, 16384, 32768, 32768, 16384, 2048, 4096, 8192, 16384, 32768, 8192,
           4096, 32768}};
}

RaggedBatch serving_batch(int32_t n, int64_t lo, int64_t hi) {
  // mt19937_64's output is fixed by the standard; uniform_int_distribution's is not, so the draw
  // is a plain modulo (its bias is below 1e-14 for spans this small).
  std::mt19937_64 rng(43);
  RaggedBatch b;
  for (int32_t s = 0; s < n; ++s) {
    b.q_lens.push_back(1);
    b.kv_lens.push_back(lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)));
  }
  return b;
}

}  // namespace kvflash::bench
