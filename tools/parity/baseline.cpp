#include "baseline.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvflash/formats.hpp"

namespace kvflash::parity {
namespace {

const std::byte* row_ptr(const KvTensor& kv, int32_t page_size, int64_t s, int64_t tok, int64_t h) {
  return static_cast<const std::byte*>(kv.data) + kv_row_offset(kv, page_size, s, tok, h);
}

}  // namespace

void baseline_attention_f32(const AttentionProblem& p, const AttentionTensors& t,
                            const std::vector<int64_t>& lens, float* out, float* lse) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t dk = p.head_dim.k;
  const int64_t dv = p.head_dim.v;
  const int64_t group = p.group();
  const float scale = p.effective_scale();
  // Dequantized rows; turbo rows may need a whole number of 128-value groups of scratch.
  std::vector<float> krow(static_cast<size_t>(padded_values(p.k_type, dk)));
  std::vector<float> vrow(static_cast<size_t>(padded_values(p.v_type, dv)));

  for (int64_t s = 0; s < p.n_seqs; ++s) {
    const int64_t len = lens[static_cast<size_t>(s)];
    // This sequence's queries: packed rows q0 .. q0 + nq - 1 (problem.hpp), mask rows s, 0 .. nq-1.
    const int64_t q0 = q_row_base(t.q_offsets, p.n_q_tokens, s);
    const int64_t nq = q_len(t.q_offsets, p.n_q_tokens, s);
    for (int64_t kvh = 0; kvh < p.n_kv_heads; ++kvh) {
      // Rows r = i * group + g: query token i of q head kvh * group + g.
      const int64_t rows = nq * group;
      std::vector<float> logit(static_cast<size_t>(rows * len), kNegInf);
      auto q_of = [&](int64_t r) {
        const int64_t h = kvh * group + r % group;
        return t.q + ((q0 + r / group) * p.n_q_heads + h) * dk;
      };
      for (int64_t k = 0; k < len; ++k) {
        dequantize_row(p.k_type, row_ptr(t.k, p.page_size, s, k, kvh), dk, krow.data());
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = r / group;
          const int64_t h = kvh * group + r % group;
          const int64_t pq = len - nq + i;
          if (p.causal && k > pq) continue;
          if (p.window > 0 && pq - k >= p.window) continue;
          const float* q = q_of(r);
          float dot = 0.0f;
          for (int64_t d = 0; d < dk; ++d) dot += q[d] * krow[static_cast<size_t>(d)];
          float x = scale * dot;
          if (p.softcap > 0.0f) x = p.softcap * std::tanh(x / p.softcap);
          if (p.has_alibi) x += t.alibi_slopes[h] * static_cast<float>(k - pq);
          if (p.has_mask) x += t.mask[(s * p.n_q_tokens + i) * t.mask_stride + k];
          logit[static_cast<size_t>(r * len + k)] = x;
        }
      }
      // Softmax per row: maximum (sink included), then weights in place of the logits.
      std::vector<float> m(static_cast<size_t>(rows), kNegInf);
      std::vector<float> l(static_cast<size_t>(rows), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        float* x = logit.data() + r * len;
        const float sink = p.has_sinks ? t.sinks[kvh * group + r % group] : kNegInf;
        float mr = sink;
        for (int64_t k = 0; k < len; ++k) mr = std::max(mr, x[k]);
        m[static_cast<size_t>(r)] = mr;
        if (mr == kNegInf) continue;  // no visible key and no sink: the row stays empty
        float lr = p.has_sinks ? std::exp(sink - mr) : 0.0f;
        for (int64_t k = 0; k < len; ++k) {
          x[k] = std::exp(x[k] - mr);
          lr += x[k];
        }
        l[static_cast<size_t>(r)] = lr;
      }
      std::vector<float> acc(static_cast<size_t>(rows * dv), 0.0f);
      for (int64_t k = 0; k < len; ++k) {
        dequantize_row(p.v_type, row_ptr(t.v, p.page_size, s, k, kvh), dv, vrow.data());
        for (int64_t r = 0; r < rows; ++r) {
          if (m[static_cast<size_t>(r)] == kNegInf) continue;
          const float w = logit[static_cast<size_t>(r * len + k)];
          if (w == 0.0f) continue;
          float* a = acc.data() + r * dv;
          for (int64_t d = 0; d < dv; ++d) a[d] += w * vrow[static_cast<size_t>(d)];
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = r / group;
        const int64_t h = kvh * group + r % group;
        const int64_t o = (q0 + i) * p.n_q_heads + h;
        const float mr = m[static_cast<size_t>(r)];
        const float lr = l[static_cast<size_t>(r)];
        // The fp8 V scale (1 for other types) with the normalization: the rows hold V / v_scale.
        const float inv = mr == kNegInf ? 0.0f : p.v_scale / lr;
        for (int64_t d = 0; d < dv; ++d)
          out[o * dv + d] = acc[static_cast<size_t>(r * dv + d)] * inv;
        lse[o] = mr == kNegInf ? kNegInf : mr + std::log(lr);
      }
    }
  }
}

}  // namespace kvflash::parity
