// What one attention call costs, for turning a time into a speed: the KV bytes a decode step
// must read at least once, and the floating-point work of the visible (query, key) pairs under
// the masking rules of problem.hpp.
#pragma once

#include <cstdint>
#include <vector>

#include "kvflash/problem.hpp"

namespace kvflash::bench {

// (query, key) pairs one head of one sequence computes: query i sits at position
// kv_len - n_q + i; causal hides keys after the query, a window > 0 hides keys window or more
// positions before it.
int64_t visible_pairs(int64_t n_q, int64_t kv_len, bool causal, int64_t window);

// 2 * (Dk + Dv) flops per visible pair (q.k and p*v, a multiply-add each), times query heads and
// sequences; every sequence holds kv_capacity tokens (the benchmark's layout).
double attention_flops(const AttentionProblem& p);

// A ragged batch (--ragged): sequence s has q_lens[s] queries, the last of its kv_lens[s] tokens.
// Empty: every sequence has n_q_tokens queries over kv_capacity tokens.
struct RaggedBatch {
  std::vector<int32_t> q_lens;
  std::vector<int64_t> kv_lens;
  bool empty() const { return q_lens.empty(); }
  // Every sequence has the same number of queries, at least one: a batch of sequences with their
  // own lengths (a server's decode step), not ragged queries.
  bool same_queries() const;
};
// The problem of a ragged batch: n_seqs its size, n_q_tokens and kv_capacity its largest counts,
// problem.ragged_q on unless every sequence has the same queries (then the call is a batch
// whose sequences have their own lengths: decode with one query each, as a server runs it).
void apply_ragged(AttentionProblem& p, const RaggedBatch& b);
// attention_flops and kv_bytes summed per sequence of the batch (its own queries and tokens).
double attention_flops(const AttentionProblem& p, const RaggedBatch& b);
double kv_bytes(const AttentionProblem& p, const RaggedBatch& b);
// Issue 39's ragged batch: 16 sequences, 8 decode tokens and 8 prefill chunks of 16-4096 queries,
// caches of 1K-32K tokens (--ragged issue39).
RaggedBatch issue39_batch();
// Issue 43's serving batches, one query per sequence: n sequences of lengths drawn uniformly from
// [lo, hi] (a fixed generator, the same batch on every machine): --ragged serving64 (64 of
// 1K-32K) and serving256 (256 of 1K-4K).
RaggedBatch serving_batch(int32_t n, int64_t lo, int64_t hi);

// Bytes of the K and V caches of all sequences: n_seqs * kv_capacity * n_kv_heads *
// (row_size(k) + row_size(v)). The least a call must read, so bytes / time is the effective
// bandwidth; padding of partial blocks is counted since it is read too.
double kv_bytes(const AttentionProblem& p);

// Decode and speculative steps (up to 8 query tokens) are bound by reading the cache; longer
// query blocks (prefill) by arithmetic. The tool reports GB/s for the first, TFLOP/s for the
// second.
inline constexpr int32_t kMaxDecodeQueries = 8;
// A ragged batch counts as prefill (its chunks dominate the work): TFLOP/s.
inline bool is_decode(const AttentionProblem& p) {
  return p.n_q_tokens <= kMaxDecodeQueries && !p.ragged_q;
}

}  // namespace kvflash::bench
