// The quality suite: every K/V pair against the float64 reference on synthetic KV (synthetic.hpp).
//
// Attention: for each heads x head dim x depth, the library's CPU attention on the quantized K/V is
// compared with reference_attention on the ORIGINAL f32 K/V (so the numbers are what the format
// costs, not kernel rounding alone): output NMSE over the whole output, cosine per output row
// (mean, min), and per query row the KL divergence of the attention distribution from the original
// keys (p) to the dequantized keys (q) (mean, max).
//
// Needle: a one-KV-head problem (so 1M tokens stays cheap) where one key, planted at a random
// position in a haystack of `depth` synthetic tokens, is what the query looks for; the output
// should be dominated by the needle's value. See kDefaultNeedleWeight and kNeedlePassCosine. Each
// depth tries needle_trials needles at different positions (one needle is a single noisy trial).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/progress.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/registry.hpp"
#include "kvflash/status.hpp"

namespace kvflash::quality {

struct KvPair {
  KvType k, v;
  friend bool operator==(KvPair, KvPair) = default;
};

// Query shape. Each query row mixes kQueryTargets key directions with noise, in the coordinates
// where queries match keys (SyntheticKv::whiten), then is scaled so that its largest logit sits T
// above the median logit of the keys it sees, T = ln(visible keys) + uniform(-kQuerySpread,
// kQuerySpread). Measured (seed 42, 1K-32K tokens): the top key takes 7% to 70% of the weight, 2
// to ~170 keys share it effectively; peaked but not one-hot, at every depth.
inline constexpr int kQueryTargets = 3;
inline constexpr double kQuerySpread = 2.0;
inline constexpr double kQueryNoise = 0.5;  // norm of the noise added to the unit mix

// Needle strength: each needle's query is scaled so that float64 attention over the ORIGINAL keys
// gives the needle this weight (the rest goes to the haystack): strong enough that f16 retrieves
// at every depth and head dim with room to spare, not so strong (one-hot) that no logit error can
// matter. A fixed logit margin instead would make retrieval depend on the head dim and the
// haystack's spread as much as on the format. The question each row answers is then how much of
// the 0.9 a format keeps; to hold it at depth, the logits must grow (ln N), and so do the logit
// errors of lossy keys.
inline constexpr double kDefaultNeedleWeight = 0.9;
// PASS when cos(out, v_needle) >= 0.9: the needle's value then carries cos^2 = 81% of the output's
// energy, i.e. the output is the needle's value with a minority of something else mixed in; at 0.7
// (half the energy) a downstream layer could not tell the needle's value from another token's.
// Weight spread thinly over the haystack averages out (values are zero-mean), so the cosine fails
// when other keys take concentrated weight (a wrong retrieval); the weight column shows the loss
// of weight itself.
inline constexpr double kNeedlePassCosine = 0.9;

struct SuiteConfig {
  uint64_t seed = 1;
  std::vector<KvPair> pairs;
  std::vector<std::pair<int32_t, int32_t>> heads = {{8, 2}};
  std::vector<HeadDims> head_dims = {{128, 128}};
  std::vector<int64_t> depths = {1024, 8192, 32768};
  int32_t n_seqs = 4;  // sequences, each its own K/V: more query rows, steadier metrics
  int32_t n_q_tokens = 1;
  // Where the library's attention runs (backend_run.hpp); the float64 reference, the KL of the
  // keys and the needles' float64 outcomes are host computations either way.
  Backend backend = Backend::cpu;
  std::vector<int64_t> needle_depths;
  double needle_weight = kDefaultNeedleWeight;
  int32_t needle_trials = 4;  // needles per depth, each at its own random position
  // Query tokens of each needle call: the needle's query at the last position (which sees the whole
  // haystack, and alone is scored) and copies of it at the positions before, so that 9 or more
  // put the needle through the backend's prefill kernel (causal: earlier copies see less).
  int32_t needle_queries = 1;
  int32_t n_threads = 0;  // 0: all hardware threads
};

struct AttentionRow {
  KvPair pair;
  int32_t q_heads, kv_heads;
  HeadDims dims;
  int64_t depth;
  double bits;  // K and V bits per value, padding included
  double nmse, cos_mean, cos_min, kl_mean, kl_max;
  std::string kernel;  // what the registry chose for the library's run
};

struct NeedleRow {
  KvPair pair;
  HeadDims dims;
  int64_t depth;
  int32_t trials, passed;  // needles tried at this depth (random positions), and how many passed
  double weight_mean;      // attention weight on the needle, quantized run: exp(s_needle - lse)
  double weight_min;
  double weight_ref;   // mean weight from the original K in float64 (the ideal)
  double cos_min;      // min over trials of cos(out, v_needle), quantized run
  double cos_ref;      // the same for float64 attention on the original K/V
  std::string kernel;  // what the registry chose for the library's runs
  bool pass() const { return passed == trials; }
};

// Work items, for a progress line: one per (config, pair).
int64_t attention_items(const SuiteConfig& c);
int64_t needle_items(const SuiteConfig& c);

Expected<std::vector<AttentionRow>> run_attention_suite(const SuiteConfig& c,
                                                        tools::Progress* progress = nullptr);
Expected<std::vector<NeedleRow>> run_needle_suite(const SuiteConfig& c,
                                                  tools::Progress* progress = nullptr);

class SyntheticKv;
// The queries of the attention test, (n_seqs, n_q_tokens, n_q_heads, head_dim.k), for problem p
// over the keys kf of gen ((n_seqs, kv_capacity, n_kv_heads, head_dim.k) floats): see
// kQueryTargets.
std::vector<float> make_queries(const SuiteConfig& c, const AttentionProblem& p,
                                const SyntheticKv& gen, const float* kf);

// Rows of `n` values of type t quantized by `threads` workers (quantize_rows on contiguous slices).
void quantize_parallel(KvType t, const float* src, int64_t rows, int32_t n, void* dst, int threads);
int resolve_threads(int32_t requested);

}  // namespace kvflash::quality
