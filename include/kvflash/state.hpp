// The one attention-state type, shared by every kernel and every reducer (CPU and CUDA).
//
// For one query row over a set S of keys with logits s_j (natural-log units) and values v_j:
//   m = max_j s_j                 (-inf when S is empty)
//   l = sum_j exp(s_j - m)        (0 when S is empty)
//   o = sum_j exp(s_j - m) v_j    (unnormalized; 0 when S is empty)
// Merging two states of disjoint key sets gives the state of their union:
//   m = max(ma, mb), o = o_a e^(ma-m) + o_b e^(mb-m), l likewise.
// Empty-state rule: a state with m = -inf contributes weight 0 (the factor is taken as 0, never
// computed as exp(-inf - -inf) = NaN), so merging two empty states gives an empty state, and
// partials that saw only masked keys merge away without a NaN. A sink of -inf is an empty state
// too: an empty row with such a sink gives zeros and lse = -inf.
//
// Host code (the reference, the CPU kernels) uses natural exp and the test in state_weight. The
// GPU kernels use the same rule in base 2 (state_ref, state_weight_exp2, state_final_exp2: one
// ex2 instruction per weight, no test): weights are taken against a reference maximum that is the
// maximum, or 0 when every state is empty, so an empty part weighs exp2(-inf) = 0 and nothing
// computes -inf - -inf.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

// Always inlined on the host too: the CPU kernels are compiled once per instruction set, and an
// out-of-line copy built for AVX-512 must never be what a portable caller links against.
#if defined(__CUDACC__)
#define KVFLASH_HD __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define KVFLASH_HD inline __attribute__((always_inline))
#else
#define KVFLASH_HD inline
#endif

namespace kvflash {

template <class T>
KVFLASH_HD T state_empty_m() {
  return -std::numeric_limits<T>::infinity();
}

// Weight exp(m_part - m_total) of a partial state inside a merge whose maximum is m_total.
template <class T>
KVFLASH_HD T state_weight(T m_part, T m_total) {
  return m_part == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(m_part - m_total);
}

// Merge state b into a: o_a has dv entries. T is float on the GPU and in kernels, double in the
// reference.
template <class T, class OT = T>
KVFLASH_HD void merge_state(OT* o_a, T& m_a, T& l_a, const OT* o_b, T m_b, T l_b, int32_t dv) {
  const T m = m_a > m_b ? m_a : m_b;
  const T wa = state_weight(m_a, m);
  const T wb = state_weight(m_b, m);
  for (int32_t d = 0; d < dv; ++d) o_a[d] = OT(T(o_a[d]) * wa + T(o_b[d]) * wb);
  l_a = l_a * wa + l_b * wb;
  m_a = m;
}

// Turns a state into the attention output and its log-sum-exp, folding in an optional sink
// logit (a key with a logit and no value). Empty (and no sink): zeros and lse = -inf.
template <class T, class OT = T>
KVFLASH_HD void finalize_state(const OT* o, T m, T l, bool has_sink, T sink, int32_t dv, float* out,
                               float* lse) {
  if (has_sink) {
    const T mm = m > sink ? m : sink;
    const T w = state_weight(m, mm);
    l = l * w + state_weight(sink, mm);
    if (l != T(0)) {
      const T inv = T(1) / l;
      for (int32_t d = 0; d < dv; ++d) out[d] = static_cast<float>(T(o[d]) * w * inv);
      if (lse) *lse = static_cast<float>(mm + std::log(l));
      return;
    }
  }
  if (l == T(0)) {
    for (int32_t d = 0; d < dv; ++d) out[d] = 0.0f;
    if (lse) *lse = -std::numeric_limits<float>::infinity();
    return;
  }
  const T inv = T(1) / l;
  for (int32_t d = 0; d < dv; ++d) out[d] = static_cast<float>(T(o[d]) * inv);
  if (lse) *lse = static_cast<float>(m + std::log(l));
}

// ---- The GPU kernels' form of the rule (float, base 2; see the top of this file)

inline constexpr float kStateLog2e = 1.4426950408889634f;

// The reference maximum of a merge whose states' largest m is m_max: m_max, or 0 when every
// state is empty (m_max = -inf), so that it is always finite.
KVFLASH_HD float state_ref(float m_max) {
  return m_max == -std::numeric_limits<float>::infinity() ? 0.0f : m_max;
}

// Weight exp(m_part - ref) of a state against a finite reference (state_ref): 0 for an empty
// state, with no test.
KVFLASH_HD float state_weight_exp2(float m_part, float ref) {
  return exp2f((m_part - ref) * kStateLog2e);
}

// How a state (m, l) becomes the output: out = o * scale, and its lse (natural log), with an
// optional sink logit; as finalize_state: an empty state (no sink, or a sink of -inf) gives
// scale 0 and lse = -inf.
struct StateFinal {
  float scale, lse;
};
KVFLASH_HD StateFinal state_final_exp2(float m, float l, bool has_sink, float sink) {
  float w = 1.0f;
  if (has_sink) {
    const float ref = state_ref(m > sink ? m : sink);
    w = state_weight_exp2(m, ref);
    l = l * w + state_weight_exp2(sink, ref);
    m = ref;
  }
  if (l == 0.0f) return {0.0f, -std::numeric_limits<float>::infinity()};
  return {w / l, m + logf(l)};
}

}  // namespace kvflash

namespace kvflash {

// Merges n partial states into one in two passes (maximum first, then the weighted sums), so the
// result does not depend on the order in which partials finished and n can be anything from 1 up.
// Partial i: o at o + i * o_stride (dv floats), m[i * ml_stride], l[i * ml_stride]. o_out
// receives dv floats.
template <class T>
KVFLASH_HD void merge_states(int64_t n, const float* o, int64_t o_stride, const T* m, const T* l,
                             int32_t dv, float* o_out, T& m_out, T& l_out, int64_t ml_stride = 1) {
  T mx = state_empty_m<T>();
  for (int64_t i = 0; i < n; ++i) mx = m[i * ml_stride] > mx ? m[i * ml_stride] : mx;
  for (int32_t d = 0; d < dv; ++d) o_out[d] = 0.0f;
  T lsum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T w = state_weight(m[i * ml_stride], mx);
    if (w == T(0)) continue;
    lsum += l[i * ml_stride] * w;
    const float* oi = o + i * o_stride;
    for (int32_t d = 0; d < dv; ++d) o_out[d] += static_cast<float>(oi[d] * w);
  }
  m_out = mx;
  l_out = lsum;
}

}  // namespace kvflash
