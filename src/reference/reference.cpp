// Float64 reference attention. Every K/V row is dequantized to the original domain (turbo types
// inverse-rotated) and every product, exponential and sum is computed in double. No split, no
// approximation: two passes per query row (logits and maximum, then weights and values).
#include "kvflash/reference.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kvflash/state.hpp"

namespace kvflash {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// Bound on logits held at once (rows x keys), so that 1M-token references fit in memory.
constexpr int64_t kMaxLogitsInFlight = int64_t{1} << 24;

const uint8_t* row_ptr(const KvTensor& kv, int32_t page_size, int64_t seq, int64_t token,
                       int64_t head) {
  return static_cast<const uint8_t*>(kv.data) + kv_row_offset(kv, page_size, seq, token, head);
}

}  // namespace

Status reference_attention(const AttentionProblem& p, const AttentionTensors& t, double* out_f64) {
  if (Status s = validate(p); !s) return s;
  if (Status s = validate(p, t); !s) return s;
  if (Status s = validate_q_offsets(p, t.q_offsets); !s) return s;
  if (Status s = validate_kv_lens(p, t.kv_lens); !s) return s;
  if (Status s = validate_page_tables(p, t); !s) return s;

  const int32_t G = p.group();
  const int32_t dk = p.head_dim.k;
  const int32_t dv = p.head_dim.v;
  // The definition: the logit scale (the float the problem states, or 1/sqrt(head_dim.k) in
  // float) on dot(q, k), K and V as stored times their fp8 scales (1 for the other types), in
  // double (not effective_scale(): the kernels fold k_scale into their float scale).
  const double scale =
      p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim.k));
  const double k_scale = p.k_scale, v_scale = p.v_scale;
  std::vector<float> krow(static_cast<size_t>(dk));
  std::vector<float> vrow(static_cast<size_t>(dv));

  for (int64_t s = 0; s < p.n_seqs; ++s) {
    const int64_t len = t.kv_lens ? t.kv_lens[s] : p.kv_capacity;
    // Query i of this sequence is packed row q0 + i of q / out / lse (problem.hpp).
    const int64_t q0 = q_row_base(t.q_offsets, p.n_q_tokens, s);
    const int32_t nq = q_len(t.q_offsets, p.n_q_tokens, s);
    const int64_t n_rows = int64_t{nq} * G;
    const int64_t rows_per_chunk = std::max<int64_t>(
        1, std::min<int64_t>(n_rows, kMaxLogitsInFlight / std::max<int64_t>(len, 1)));

    for (int32_t kvh = 0; kvh < p.n_kv_heads; ++kvh) {
      // Rows of this (sequence, KV head): r = i * G + g, query token i, head kvh * G + g.
      for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_chunk) {
        const int64_t nr = std::min(rows_per_chunk, n_rows - r0);
        std::vector<double> logits(static_cast<size_t>(nr * len));
        std::vector<double> qd(static_cast<size_t>(nr * dk));
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t i = (r0 + r) / G, h = int64_t{kvh} * G + (r0 + r) % G;
          const float* q = t.q + ((q0 + i) * p.n_q_heads + h) * dk;
          for (int32_t d = 0; d < dk; ++d) qd[r * dk + d] = q[d];
        }
        for (int64_t j = 0; j < len; ++j) {
          dequantize_row(p.k_type, row_ptr(t.k, p.page_size, s, j, kvh), dk, krow.data());
          for (int64_t r = 0; r < nr; ++r) {
            double dot = 0;
            for (int32_t d = 0; d < dk; ++d) dot += qd[r * dk + d] * (double{krow[d]} * k_scale);
            logits[r * len + j] = dot;
          }
        }
        std::vector<double> o(static_cast<size_t>(dv));
        std::vector<double> m(static_cast<size_t>(nr), kNegInf), l(static_cast<size_t>(nr), 0.0);
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t i = (r0 + r) / G, h = int64_t{kvh} * G + (r0 + r) % G;
          const int64_t pq = len - nq + i;
          double* lg = logits.data() + r * len;
          const float* mrow =
              p.has_mask ? t.mask + (s * p.n_q_tokens + i) * t.mask_stride : nullptr;
          for (int64_t j = 0; j < len; ++j) {
            // A mask of -inf hides the key like causal and window do: its logit is -inf whatever
            // its K row holds (NaN + -inf would be NaN and poison the maximum).
            const bool hidden =
                (p.causal && j > pq) || (p.window > 0 && pq - j >= p.window) ||
                (mrow != nullptr && mrow[j] == -std::numeric_limits<float>::infinity());
            double x = scale * lg[j];
            if (p.softcap > 0.0f) x = double{p.softcap} * std::tanh(x / double{p.softcap});
            if (p.has_alibi) x += double{t.alibi_slopes[h]} * static_cast<double>(j - pq);
            if (mrow != nullptr) x += double{mrow[j]};
            lg[j] = hidden ? kNegInf : x;
            m[r] = std::max(m[r], lg[j]);
          }
        }
        // Second pass: weights and the weighted sum of values, one V row dequantized per key.
        std::vector<double> acc(static_cast<size_t>(nr * dv), 0.0);
        for (int64_t j = 0; j < len; ++j) {
          bool any = false;
          for (int64_t r = 0; r < nr && !any; ++r) any = logits[r * len + j] != kNegInf;
          if (!any) continue;
          dequantize_row(p.v_type, row_ptr(t.v, p.page_size, s, j, kvh), dv, vrow.data());
          for (int64_t r = 0; r < nr; ++r) {
            const double w = state_weight(logits[r * len + j], m[r]);
            if (w == 0.0) continue;
            l[r] += w;
            for (int32_t d = 0; d < dv; ++d) acc[r * dv + d] += w * (double{vrow[d]} * v_scale);
          }
        }
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t i = (r0 + r) / G, h = int64_t{kvh} * G + (r0 + r) % G;
          const int64_t orow = (q0 + i) * p.n_q_heads + h;
          const double sink = p.has_sinks ? double{t.sinks[h]} : 0.0;
          std::vector<float> of(static_cast<size_t>(dv));
          float lse = 0;
          finalize_state<double>(&acc[r * dv], m[r], l[r], p.has_sinks, sink, dv, of.data(), &lse);
          std::copy(of.begin(), of.end(), t.out + orow * dv);
          if (t.lse) t.lse[orow] = lse;
          if (out_f64) {
            // The double result itself, without the float rounding of finalize_state.
            double mm = m[r], ll = l[r], w = 1.0;
            if (p.has_sinks) {
              mm = std::max(m[r], sink);
              w = state_weight(m[r], mm);
              ll = l[r] * w + state_weight(sink, mm);
            }
            for (int32_t d = 0; d < dv; ++d)
              out_f64[orow * dv + d] = ll == 0.0 ? 0.0 : acc[r * dv + d] * w / ll;
          }
        }
      }
    }
  }
  return {};
}

}  // namespace kvflash
