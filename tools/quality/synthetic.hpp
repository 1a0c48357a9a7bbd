// Synthetic KV that looks like real KV, generated from a seed.
//
// What real caches show and what this reproduces:
//  - Keys have a few outlier channels, 10-20x the scale of the others (KVQuant, KIVI). They are
//  what
//    hurts block quantizers: a q4_0 block of 32 values that holds one outlier spends its 16 levels
//    on the outlier and rounds its other 31 values to a few codes. Here: outlier_count(d) channels
//    (4 of 128), in whole RoPE pairs of the low-frequency half (where real outliers sit: slowly
//    rotating pairs keep their magnitude), with a per-head mean direction (mu) plus noise:
//    k_c = s * (mu_c + 0.5 z), s uniform in [10, 20]. Other channels are N(0, 1).
//  - Keys are stored after RoPE: channel pairs (i, i + d/2) (the rotate-half layout of Llama and
//    NeoX) rotate by pos * theta_i, theta_i = base^(-2i/d), base 500000 (Llama 3).
//  - Values are roughly Gaussian, each channel with its own scale in [0.5, 2].
// Every row comes from a counter-based generator keyed by (seed, stream, head, position), so any
// slice can be generated alone, in any order or thread, and is the same bytes every time.
#pragma once

#include <cstdint>
#include <vector>

#include "kvflash/problem.hpp"

namespace kvflash::quality {

// splitmix64's finalizer: a bijective 64-bit mix, the basis of every random number here.
uint64_t mix64(uint64_t x);

// A small deterministic generator for one row: uniform and N(0, 1) draws.
class RowRng {
 public:
  RowRng(uint64_t seed, uint64_t stream, uint64_t head, uint64_t index);
  uint64_t next();
  double uniform();  // in (0, 1)
  double normal();

 private:
  uint64_t state_;
};

// Random streams, so that keys, values and queries never share draws. A sequence number goes in
// the high 32 bits (stream_id), so sequence 0 draws exactly what a single sequence does.
enum class Stream : uint64_t { head_style = 1, key, value, query, needle };
inline uint64_t stream_id(Stream s, int32_t seq) {
  return static_cast<uint64_t>(s) | (static_cast<uint64_t>(seq) << 32);
}

// Outlier channels for head dim d: d/32 rounded down to an even count (whole RoPE pairs), at least
// 2: 4 of 128, 2 of 64, 18 of 576.
int32_t outlier_count(int32_t d);

class SyntheticKv {
 public:
  static constexpr double kRopeBase = 500000.0;
  static constexpr double kOutlierMin = 10.0, kOutlierMax = 20.0;
  static constexpr double kOutlierNoise = 0.5;  // relative to the outlier's mean magnitude

  SyntheticKv(uint64_t seed, HeadDims dims, int32_t n_kv_heads);

  HeadDims dims() const { return dims_; }
  // Keys / values of tokens [pos0, pos0 + n) of KV head `head` of sequence `seq`, n rows of
  // dims().k / dims().v floats. Sequences share the heads' style (outlier channels, scales), as
  // the prompts of one model do, and differ in their tokens. `s` other than key / value gives
  // independent rows of the same style (needles).
  void keys(int32_t head, int64_t pos0, int64_t n, float* dst, Stream s = Stream::key,
            int32_t seq = 0) const;
  void values(int32_t head, int64_t pos0, int64_t n, float* dst, Stream s = Stream::value,
              int32_t seq = 0) const;
  // Both, for a whole (token, head) layout of one sequence: dst rows are (pos, head) contiguous,
  // as kv_tensor_contiguous expects; n_threads workers (0 = 1). v_dst may be null (keys only).
  void fill(int64_t n_tokens, float* k_dst, float* v_dst, int n_threads, int32_t seq = 0) const;

  // Per-channel key scale of a head (1 for ordinary channels, s for outliers).
  const std::vector<float>& key_scale(int32_t head) const { return heads_[head].k_scale; }
  std::vector<int32_t> outlier_channels(int32_t head) const;
  // The coordinates in which queries match keys: the key with each channel divided by its scale
  // (whiten), and a query q_w built there maps back to q = q_w / scale (unwhiten_query), so that
  // q . k = q_w . whiten(k). Every channel then counts alike and the outlier channels act as the
  // near-constant bias they are in real caches; a query aligned with raw keys would instead let
  // the outliers' magnitude and RoPE phase decide every match. RoPE pairs share a scale, so both
  // commute with RoPE.
  void whiten(int32_t head, const float* key, float* dst) const;
  void unwhiten_query(int32_t head, const double* q_w, double* q) const;

 private:
  struct HeadStyle {
    std::vector<float> k_scale, k_mean, v_scale;
  };
  uint64_t seed_;
  HeadDims dims_;
  std::vector<HeadStyle> heads_;
  static constexpr int64_t kRopeBlock = 256;
  std::vector<double> theta_;                // per RoPE pair, radians per token
  std::vector<double> rope_cos_, rope_sin_;  // (kRopeBlock, pair): angle lo * theta_i
};

}  // namespace kvflash::quality
