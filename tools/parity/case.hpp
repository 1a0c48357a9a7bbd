// A parity case: one attention problem described by named parameters. The case name is derived
// from the parameters (case_name), never written by hand, so that a name always says exactly what
// ran and two cases can never share a name while differing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvflash/problem.hpp"

namespace kvflash::parity {

// Where the rows (seq, token, head) of the K and V caches sit in memory. Every layout leaves the
// unused rows (tokens past a sequence's length, padding) filled with NaN bit patterns, so a kernel
// that reads outside the cache it was given produces NaN.
enum class KvLayout : uint8_t {
  token_major,  // (seq, token, head) rows back to back: kv_tensor_contiguous
  head_major,   // (seq, head, token), capacity padded so that heads are not back to back
  padded,       // token-major with gaps after each row, each token and each sequence
  seq_inner,    // (token, seq, head): sequences interleaved token by token
};
std::string_view to_string(KvLayout l);

struct ParityCase {
  int32_t n_seqs = 1;
  int32_t n_q_tokens = 1;
  int32_t n_q_heads = 8;
  int32_t n_kv_heads = 2;
  HeadDims head_dim = {128, 128};
  KvType k_type = KvType::f16;
  KvType v_type = KvType::f16;
  int64_t kv_len = 1000;    // tokens of the longest sequence, which is also the kv_capacity
  bool ragged = false;      // sequences hold different lengths (see kv_lens)
  bool empty_last = false;  // the last sequence holds no token at all (a free batch slot)
  bool causal = true;
  bool mask = false;  // random additive mask with some -inf (and one fully hidden query row)
  int64_t window = 0;
  float softcap = 0.0f;
  bool sinks = false;
  bool alibi = false;
  float scale = 0.0f;                    // 0: 1/sqrt(head_dim.k)
  float k_scale = 1.0f, v_scale = 1.0f;  // fp8 K / V: the rows hold K / k_scale, V / v_scale
  KvLayout layout = KvLayout::token_major;
  // > 0: paged K and V (problem.page_size), pages of this many tokens in a pool with spare pages,
  // every sequence's pages in a shuffled order, one table for K and V (read by the CPU and CUDA
  // kernels alike).
  int32_t page_size = 0;
  // Ragged queries (problem.ragged_q, packed q / out / lse): non-empty, one query count per
  // sequence (n_seqs of them, each 0 .. n_q_tokens), with each sequence's KV length in q_kv_lens
  // (overriding ragged / empty_last; kv_len is their maximum). ragged_q_case() builds one.
  std::vector<int32_t> q_lens;
  std::vector<int64_t> q_kv_lens;
  double nmse_bound = kDefaultNmseBound;  // bound on the output NMSE against float64

  static constexpr double kDefaultNmseBound = 1e-5;
};

// e.g. "q1_h32x8_d128_k-q8_0_v-q4_0_kv4096_causal_win256".
std::string case_name(const ParityCase& c);
AttentionProblem to_problem(const ParityCase& c);

// A ragged-query case: sequence s has q_lens[s] queries over kv_lens[s] tokens (n_seqs, n_q_tokens
// and kv_len follow from them).
ParityCase ragged_q_case(ParityCase base, std::vector<int32_t> q_lens,
                         std::vector<int64_t> kv_lens);
// The case's tensors.q_offsets: n_seqs + 1 prefix sums of q_lens; empty without ragged queries.
std::vector<int32_t> q_offsets(const ParityCase& c);

// Tokens held by each sequence. Ragged batches: the first sequence is full (kv_len), the middle
// ones are shorter by uneven amounts, and the last holds max(1, n_q_tokens / 2) tokens, fewer than
// the queries when n_q_tokens >= 2, so that under a causal mask its first queries see no key.
// empty_last: the last sequence holds 0 tokens (every one of its queries sees nothing).
std::vector<int64_t> kv_lens(const ParityCase& c);

// Bytes of the K and V rows that at least one query can see (what a kernel that skips hidden
// tokens must read); the numerator of the effective GB/s in perf mode.
int64_t kv_bytes_visible(const ParityCase& c);

// Case sets. "test" is the default and must stay fast (well under 2 minutes on 2 cores in Release
// for the CPU backend); "long" adds more cases at 256K-1M tokens; "prefill" chunked prefill deep
// in the context, paged, with every feature and ragged batches (meant for the CUDA backend: each
// reference takes seconds on one core); "all" is every set.
enum class CaseSet { test, long_context, prefill, all };
std::vector<ParityCase> build_case_set(CaseSet set);

}  // namespace kvflash::parity
