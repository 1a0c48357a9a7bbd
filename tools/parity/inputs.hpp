// Random inputs for a case: Q, quantized K/V in the case's layout, mask, sinks, ALiBi slopes.
// Everything is drawn from a generator seeded by (run seed, case name), so a case's inputs do not
// depend on which other cases were selected, and `--seed N -f NAME` reproduces one exactly.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "case.hpp"
#include "guarded_buffer.hpp"
#include "kvflash/problem.hpp"

namespace kvflash::parity {

// splitmix64: small, fast, and the same stream on every platform (the std distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  float uniform() { return static_cast<float>(next() >> 40) * 0x1p-24f; }
  // Zero mean, unit variance, bounded by +-sqrt(12): the sum of four 16-bit uniforms (Irwin-Hall),
  // close enough to a Gaussian for attention inputs and several times cheaper than Box-Muller,
  // which matters at 1M tokens.
  float gaussish();

 private:
  uint64_t state_;
};

// The per-case seed: the run seed mixed with a hash of the case name.
uint64_t case_seed(uint64_t run_seed, std::string_view case_name);

struct CaseInputs {
  AttentionProblem problem;
  uint64_t seed = 0;
  std::vector<int64_t> kv_lens;
  bool pass_kv_lens = false;       // false: tensors().kv_lens is nullptr (every sequence is full)
  std::vector<int32_t> q_offsets;  // ragged queries: tensors().q_offsets (else empty, nullptr)
  std::vector<float> q;  // (total rows, n_q_heads, head_dim.k): q_total_rows (problem.hpp)
  GuardedBuffer k_data;
  GuardedBuffer v_data;
  KvTensor k;
  KvTensor v;
  std::vector<int32_t> page_table;  // paged cases: K's and V's table (k.page_table points here)
  std::vector<float> mask;          // (n_seqs, n_q_tokens, mask_stride)
  int64_t mask_stride = 0;
  std::vector<float> sinks;  // (n_q_heads)
  std::vector<float> alibi;  // (n_q_heads)

  // The input tensors; out and lse are left null for the caller.
  AttentionTensors tensors() const;
  // tensors().q_offsets: the offsets, or nullptr without ragged queries.
  const int32_t* offsets() const { return q_offsets.empty() ? nullptr : q_offsets.data(); }
  // Packed query rows (tokens) of q, out and lse.
  int64_t q_rows() const { return q_total_rows(problem, offsets()); }
};

CaseInputs make_inputs(const ParityCase& c, uint64_t seed);

}  // namespace kvflash::parity
