// Fuzz findings on the CPU kernels (issue 40 point 4): a key that a query cannot see (causal
// future, outside the sliding window, masked with -inf, past its sequence) must have no effect on
// that query, whatever its K and V rows hold (NaN and inf included), and a query that sees no key
// and has no sink (or a sink of -inf) returns zeros and lse = -inf. Every CPU candidate that
// serves a case is forced in turn and compared with the float64 reference, which never reads a
// hidden key's value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvflash/reference.hpp"
#include "kvflash/registry.hpp"

namespace kvflash {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Overwrites one stored row with non-finite values: every value of f32 / f16 / bf16 rows, the
// fp16 scale (or norm) of every block of the block types, so that each dequantized value is NaN
// (or +-inf).
void poison_row(KvType t, uint8_t* row, int32_t dim, bool nan) {
  const uint16_t h = nan ? 0x7E00 : 0x7C00;  // fp16 NaN / +inf
  switch (t) {
    case KvType::f32: {
      const float f = nan ? std::numeric_limits<float>::quiet_NaN() : kInf;
      for (int32_t d = 0; d < dim; ++d) std::memcpy(row + 4 * d, &f, 4);
      return;
    }
    case KvType::bf16: {
      const uint16_t b = nan ? 0x7FC0 : 0x7F80;
      for (int32_t d = 0; d < dim; ++d) std::memcpy(row + 2 * d, &b, 2);
      return;
    }
    case KvType::f16:
      for (int32_t d = 0; d < dim; ++d) std::memcpy(row + 2 * d, &h, 2);
      return;
    default: {
      const size_t bytes = row_size(t, dim);
      const size_t block = row_size(t, 1);  // one block
      for (size_t b = 0; b < bytes; b += block) std::memcpy(row + b, &h, 2);
      return;
    }
  }
}

struct HiddenCase {
  std::string name;
  AttentionProblem p;
  std::vector<int64_t> lens;
  // Keys to poison: every (seq, token) for which hidden(seq, token) holds, every KV head.
  bool (*poison)(int64_t seq, int64_t token, const AttentionProblem& p, int64_t len);
  bool mask_hides_poisoned = false;  // the mask is -inf exactly at the poisoned keys
  float sink = 0.0f;
};

struct Buffers {
  std::vector<float> q, mask, sinks;
  std::vector<uint8_t> k, v;
  AttentionTensors t;
};

Buffers make_buffers(const HiddenCase& c, bool nan, uint32_t seed) {
  const AttentionProblem& p = c.p;
  Buffers b;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  b.q.resize(static_cast<size_t>(p.n_seqs) * p.n_q_tokens * p.n_q_heads * p.head_dim.k);
  for (float& x : b.q) x = normal(rng);
  const int64_t rows = p.n_seqs * p.kv_capacity * p.n_kv_heads;
  std::vector<float> kf(static_cast<size_t>(rows) * p.head_dim.k),
      vf(static_cast<size_t>(rows) * p.head_dim.v);
  for (float& x : kf) x = normal(rng);
  for (float& x : vf) x = normal(rng);
  const size_t krow = row_size(p.k_type, p.head_dim.k), vrow = row_size(p.v_type, p.head_dim.v);
  b.k.resize(static_cast<size_t>(rows) * krow);
  b.v.resize(static_cast<size_t>(rows) * vrow);
  quantize_rows(p.k_type, kf.data(), rows, p.head_dim.k, b.k.data());
  quantize_rows(p.v_type, vf.data(), rows, p.head_dim.v, b.v.data());
  if (p.has_mask) b.mask.assign(static_cast<size_t>(p.n_seqs * p.n_q_tokens * p.kv_capacity), 0);
  for (int64_t s = 0; s < p.n_seqs; ++s) {
    const int64_t len = c.lens.empty() ? p.kv_capacity : c.lens[s];
    for (int64_t j = 0; j < p.kv_capacity; ++j) {
      if (!c.poison(s, j, p, len)) continue;
      for (int64_t h = 0; h < p.n_kv_heads; ++h) {
        const int64_t r = (s * p.kv_capacity + j) * p.n_kv_heads + h;
        poison_row(p.k_type, b.k.data() + r * krow, p.head_dim.k, nan);
        poison_row(p.v_type, b.v.data() + r * vrow, p.head_dim.v, nan);
      }
      if (c.mask_hides_poisoned)
        for (int64_t i = 0; i < p.n_q_tokens; ++i)
          b.mask[static_cast<size_t>((s * p.n_q_tokens + i) * p.kv_capacity + j)] = -kInf;
    }
  }
  b.sinks.assign(static_cast<size_t>(p.n_q_heads), c.sink);
  b.t.q = b.q.data();
  b.t.k = kv_tensor_contiguous(b.k.data(), p.k_type, p.head_dim.k, p.n_kv_heads, p.kv_capacity);
  b.t.v = kv_tensor_contiguous(b.v.data(), p.v_type, p.head_dim.v, p.n_kv_heads, p.kv_capacity);
  b.t.kv_lens = c.lens.empty() ? nullptr : c.lens.data();
  if (p.has_mask) {
    b.t.mask = b.mask.data();
    b.t.mask_stride = p.kv_capacity;
  }
  if (p.has_sinks) b.t.sinks = b.sinks.data();
  return b;
}

std::vector<HiddenCase> hidden_cases() {
  std::vector<HiddenCase> cases;
  const KvType types[][2] = {{KvType::f16, KvType::f16},       {KvType::f32, KvType::bf16},
                             {KvType::q8_0, KvType::q4_0},     {KvType::turbo3, KvType::turbo4},
                             {KvType::turbo2, KvType::turbo3}, {KvType::q4_0, KvType::f32}};
  for (const auto& kv : types) {
    const std::string tn = std::string(to_string(kv[0])) + "_" + std::string(to_string(kv[1]));
    for (int32_t group : {1, 2, 4, 8}) {
      AttentionProblem p;
      p.n_seqs = 2;
      p.n_q_heads = 2 * group;
      p.n_kv_heads = 2;
      p.k_type = kv[0];
      p.v_type = kv[1];
      p.kv_capacity = 150;
      // Decode, masked keys (-inf) at every 5th position, some inside each key chunk.
      HiddenCase m{"mask_" + tn + "_g" + std::to_string(group), p, {150, 97}, nullptr};
      m.p.has_mask = true;
      m.mask_hides_poisoned = true;
      m.poison = [](int64_t, int64_t j, const AttentionProblem&, int64_t) { return j % 5 == 2; };
      cases.push_back(m);
      // Decode, sliding window: every key before the window.
      HiddenCase w{"window_" + tn + "_g" + std::to_string(group), p, {150, 97}, nullptr};
      w.p.window = 40;
      w.poison = [](int64_t, int64_t j, const AttentionProblem& q, int64_t len) {
        return j < len - q.window;
      };
      cases.push_back(w);
      // Decode: the keys past each sequence's length (inside the capacity).
      HiddenCase e{"past_len_" + tn + "_g" + std::to_string(group), p, {150, 70}, nullptr};
      e.poison = [](int64_t, int64_t j, const AttentionProblem&, int64_t len) { return j >= len; };
      cases.push_back(e);
      // Speculative / prefill: keys some queries see and others do not (causal); only the
      // queries that see no poisoned key are compared (the reference says NaN for the others).
      for (int32_t nq : {4, 9}) {
        HiddenCase cz{"causal_q" + std::to_string(nq) + "_" + tn + "_g" + std::to_string(group),
                      p,
                      {150, 97},
                      nullptr};
        cz.p.n_q_tokens = nq;
        cz.p.window = 30;
        cz.poison = [](int64_t, int64_t j, const AttentionProblem& q, int64_t len) {
          return j == len - 1 || j < len - q.n_q_tokens - q.window + 2;
        };
        cases.push_back(cz);
      }
    }
    // Every key hidden (masked), a sink of -inf: zeros and lse = -inf.
    AttentionProblem p;
    p.n_q_heads = 4;
    p.n_kv_heads = 2;
    p.k_type = kv[0];
    p.v_type = kv[1];
    p.kv_capacity = 70;
    p.has_mask = true;
    p.has_sinks = true;
    HiddenCase all{"all_hidden_sink_" + tn, p, {}, nullptr};
    all.mask_hides_poisoned = true;
    all.sink = -kInf;
    all.poison = [](int64_t, int64_t, const AttentionProblem&, int64_t) { return true; };
    cases.push_back(all);
    all.name = "all_hidden_nosink_" + tn;
    all.p.has_sinks = false;
    cases.push_back(all);
  }
  return cases;
}

// Every CPU candidate that serves the case (forced), against the reference.
TEST(HiddenKeys, NonFiniteHiddenRowsNeverReachTheOutput) {
  int compared = 0;
  for (const HiddenCase& c : hidden_cases()) {
    for (bool nan : {true, false}) {
      SCOPED_TRACE(c.name + (nan ? " nan" : " inf"));
      Buffers b = make_buffers(c, nan, 7);
      const size_t rows = static_cast<size_t>(c.p.n_seqs) * c.p.n_q_tokens * c.p.n_q_heads;
      std::vector<float> ref_out(rows * c.p.head_dim.v), ref_lse(rows);
      AttentionTensors rt = b.t;
      rt.out = ref_out.data();
      rt.lse = ref_lse.data();
      ASSERT_TRUE(reference_attention(c.p, rt).ok());
      for (const KernelCandidate& k : kernel_candidates()) {
        if (k.backend != Backend::cpu) continue;
        PlanOptions o;
        o.select.force = k.name;
        o.select.read_environment = false;
        o.n_threads = 2;
        if (!select_kernel(c.p, o.select)) continue;
        SCOPED_TRACE(k.name);
        std::vector<float> out(ref_out.size(), 123.0f), lse(ref_lse.size(), 123.0f);
        AttentionTensors t = b.t;
        t.out = out.data();
        t.lse = lse.data();
        const Status s = attention(c.p, t, o);
        ASSERT_TRUE(s.ok()) << s.message();
        int bad = 0;
        for (size_t r = 0; r < rows; ++r) {
          if (std::isnan(ref_lse[r])) continue;  // the query sees a poisoned key
          bool row_finite = true;
          for (int32_t d = 0; d < c.p.head_dim.v; ++d)
            row_finite = row_finite && std::isfinite(ref_out[r * c.p.head_dim.v + d]);
          if (!row_finite) continue;
          if (ref_lse[r] == -kInf) {
            EXPECT_EQ(lse[r], -kInf) << "row " << r;
          } else {
            EXPECT_NEAR(lse[r], ref_lse[r], 2e-2 * (1 + std::fabs(ref_lse[r]))) << "row " << r;
          }
          for (int32_t d = 0; d < c.p.head_dim.v && bad < 3; ++d) {
            const float g = out[r * c.p.head_dim.v + d], w = ref_out[r * c.p.head_dim.v + d];
            if (!(std::fabs(g - w) <= 0.15f + 0.15f * std::fabs(w))) {
              ADD_FAILURE() << "row " << r << " dim " << d << ": " << g << " vs reference " << w;
              ++bad;
            }
          }
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 1000);
}

// The reference itself: the all-hidden rows are zeros and -inf (the rule of state.hpp).
TEST(HiddenKeys, EmptyRowWithMinusInfSinkIsZeroAndMinusInf) {
  for (const HiddenCase& c : hidden_cases()) {
    if (c.name.rfind("all_hidden", 0) != 0) continue;
    SCOPED_TRACE(c.name);
    Buffers b = make_buffers(c, true, 3);
    const size_t rows = static_cast<size_t>(c.p.n_q_heads);
    std::vector<float> out(rows * c.p.head_dim.v, 5.0f), lse(rows, 5.0f);
    b.t.out = out.data();
    b.t.lse = lse.data();
    ASSERT_TRUE(reference_attention(c.p, b.t).ok());
    for (float x : out) EXPECT_EQ(x, 0.0f);
    for (float x : lse) EXPECT_EQ(x, -kInf);
  }
}

}  // namespace
}  // namespace kvflash
