// One 16-key step of the decode kernel with 9+ query rows per KV head (NR 2: rows as the MMA M
// dimension): S = Q.K^T for 16 keys and two 16-row n-tiles' worth of query rows, the soft cap,
// ALiBi, mask and visibility, the online softmax, and O += P.V. Inlined into decode_kernel
// (decode_kernel.cuh), whose per-CTA constants it takes as arguments.
#pragma once

#include <cstdint>

#include "backends/cuda/decode/decode_cta.cuh"
#include "backends/cuda/decode/decode_device.cuh"
#include "backends/cuda/decode/decode_epilogue.cuh"

namespace kvflash::cuda::decode {

template <KvType KT, KvType VT, bool kMayHide>
__device__ __forceinline__ void rows_as_m_step(const DecodeParams& p, RunState<2>& rs,
                                               const CtaCoords& c, const StepTiles& st,
                                               const uint4* q_frag, const RowSlots& slots,
                                               const KeyRange& range,
                                               const Codebooks<KT, VT>& books) {
  const uint8_t *ks = st.ks, *vs = st.vs;
  const int s = st.s;
  const int64_t j0 = st.j0, k_hi = range.k_hi, len = range.len;
  const bool plain = st.plain;
  const int k_slot = slots.k_slot, v_slot0 = slots.v_slot0, v_slot1 = slots.v_slot1;
  const int row0 = c.row0, mt = c.mt, kvh = c.kvh, seq = c.seq, lane = c.lane, g = c.g, t = c.t,
            nt = c.nt, dv0 = c.dv0, ds = c.ds;
  const TurboLut<KT>& tlut_k = books.tlut_k;
  const TurboLut<VT>& tlut_v = books.tlut_v;
  const float *lut_k = books.lut_k, *lut_v = books.lut_v;
  constexpr bool kBfK = KT == KvType::bf16;
  constexpr bool kBfV = VT == KvType::bf16;
  // S = Q.K^T for 16 keys: n-tile n holds keys j0 + 8n + (0..7); this thread loads key
  // row 8n + g and holds scores of keys 8n + 2t, 8n + 2t + 1 for rows g, g + 8.
  float sc[2][4] = {};
  const uint8_t* krow[2];
#pragma unroll
  for (int n = 0; n < 2; ++n) krow[n] = ks + (16 * s + 8 * n) * p.sk_stride + k_slot;
  const uint4* qf = q_frag + (mt * (p.dkc >> 4)) * 32 + lane;
  if constexpr (is_rotated(KT)) {
    // Per 128-dim group: the scores of the codebook values, then times each key's norm in
    // f32 (2 shuffles and 4 FMUL per n-tile where scaling the K values took 16 HMUL2). The
    // norm of key 8n + 2t + e comes from lane 4 * (2t + e), whose B-operand row it is.
    // Group 0 goes straight into sc (D 128: no further registers), later ones are added.
    const auto group_scores = [&](int gi, float(&acc)[2][4]) {
#pragma unroll 1  // unrolled, the Q fragments of all four blocks are loaded early: spills
      for (int bb = 0; bb < 4; ++bb) {
        const int b = 4 * gi + bb;
        const uint4 a0 = qf[(2 * b) * 32], a1 = qf[(2 * b + 1) * 32];
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const uint4 w = k_frag_turbo<KT>(krow[n], b, t, tlut_k);
          mma16816<false>(acc[n], a0, w.x, w.y);
          mma16816<false>(acc[n], a1, w.z, w.w);
        }
      }
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const float nk = half_to_float(static_cast<uint16_t>(turbo_norm<KT>(krow[n], gi)));
        const float n0 = __shfl_sync(0xffffffffu, nk, 8 * t);
        const float n1 = __shfl_sync(0xffffffffu, nk, 8 * t + 4);
        acc[n][0] *= n0;
        acc[n][1] *= n1;
        acc[n][2] *= n0;
        acc[n][3] *= n1;
      }
    };
    group_scores(0, sc);
    for (int gi = 1; gi < (p.dkc >> 7); ++gi) {
      float part[2][4] = {};
      group_scores(gi, part);
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[n][e] += part[n][e];
    }
  }
  if constexpr (!is_rotated(KT))
  // Unrolled (4 blocks: D 128 in one pass): rolled, the loop's address and counter work
  // was ~16 instructions per block (~60 of ~580 per step for q4_0).
#pragma unroll 4
    for (int b = 0; b < (p.dkc >> 5); ++b) {
      const uint4 a0 = qf[(2 * b) * 32],
                  a1 = qf[(2 * b + 1) * 32];  // shared by both n-tiles
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        if constexpr (KT == KvType::f16 || KT == KvType::bf16) {
          // Stored as the fragment wants it: one 16-byte load is both chunks' B operands.
          const uint4 w = *reinterpret_cast<const uint4*>(krow[n] + 64 * b + 16 * t);
          mma16816<kBfK>(sc[n], a0, w.x, w.y);
          mma16816<kBfK>(sc[n], a1, w.z, w.w);
        } else if constexpr (KT == KvType::q8_0 || KT == KvType::q4_0) {
          const uint4 w = k_frag_quant<KT>(krow[n], b, t);
          mma16816<kBfK>(sc[n], a0, w.x, w.y);
          mma16816<kBfK>(sc[n], a1, w.z, w.w);
        } else if constexpr (KT == KvType::fp8_e4m3) {
          // (e5m2 keeps k_values below: k_frag_fp8, or its bytes permuted into f16 alone,
          // spilled its two-n-tile kernel at the 128-register bound)
          const uint4 w = k_frag_fp8<KT>(krow[n], b, t);
          mma16816<kBfK>(sc[n], a0, w.x, w.y);
          mma16816<kBfK>(sc[n], a1, w.z, w.w);
        } else if constexpr (!is_rotated(KT)) {
          float x[8];
          k_values<KT>(krow[n], b, t, lut_k, x);
          mma16816<kBfK>(sc[n], a0, pack2<kBfK>(x[0], x[1]), pack2<kBfK>(x[2], x[3]));
          mma16816<kBfK>(sc[n], a1, pack2<kBfK>(x[4], x[5]), pack2<kBfK>(x[6], x[7]));
        }
      }
    }

  // Soft cap, ALiBi, mask, visibility; then the online softmax per row.
  const bool all_visible = !kMayHide || keys_visible(p, range, j0, j0 + 15, plain);
  if (!all_visible) {
    int64_t pos[2];
    int tok_row[2];
    float slope[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tok_row[h] = fdiv(min(row0 + mt * 16 + g + 8 * h, p.rows - 1), p.div_group);
      pos[h] = len - p.n_q_tokens + tok_row[h];
      const int r = min(row0 + mt * 16 + g + 8 * h, p.rows - 1);
      slope[h] = p.has_alibi ? __ldg(p.alibi + kvh * p.group + r - tok_row[h] * p.group) : 0.0f;
    }
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        const int64_t j = j0 + 8 * n + 2 * t + (e & 1);
        float x = sc[n][e];
        if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
        if (p.has_alibi) x += slope[h] * static_cast<float>(j - pos[h]);
        // A -inf mask hides the key whatever its K row holds (NaN + -inf would be NaN).
        const float mv =
            p.has_mask && j < k_hi
                ? p.mask[(int64_t{seq} * p.n_q_tokens + tok_row[h]) * p.mask_stride + j]
                : 0.0f;
        x += mv;
        const bool hidden = j >= k_hi || mv == kNegInf || (p.causal && j > pos[h]) ||
                            (p.window > 0 && pos[h] - j >= p.window);
        sc[n][e] = hidden ? kNegInf : x;
      }
  }

  // As in the one-n-tile step (decode_kernel): the cross-lane maxima and the rescale only
  // when a key exceeds its row's running maximum (one vote; most steps at depth).
  float lmx[2];
  bool grows = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lmx[h] = fmaxf(fmaxf(sc[0][2 * h], sc[0][2 * h + 1]), fmaxf(sc[1][2 * h], sc[1][2 * h + 1]));
    grows = grows || lmx[h] > rs.m[h];
  }
  if (__any_sync(0xffffffffu, grows)) {
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = lmx[h];
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(rs.m[h], mx);
      const float ref = state_ref(m_new);
      alpha[h] = exp2_ftz((rs.m[h] - ref) * kLog2e);  // m_run = -inf gives 0
      rs.m[h] = m_new;
      rs.l[h] *= alpha[h];
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      rs.o[i][0] *= alpha[0];
      rs.o[i][1] *= alpha[0];
      rs.o[i][2] *= alpha[1];
      rs.o[i][3] *= alpha[1];
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float ref = state_ref(rs.m[h]);
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pe = exp2_ftz((sc[n][2 * h + e] - ref) * kLog2e);
        sc[n][2 * h + e] = pe;
        sum += pe;
      }
    rs.l[h] += sum;
  }

  // O += P.V: P (rows x 16 keys) is the A operand straight from the score registers; the
  // B operand of dim tile i holds V[key][dv0 + i] for keys 2t, 2t+1 (b0) and 2t+8, 2t+9
  // (b1).
  uint4 pa;
  pa.x = pack2<kBfV>(sc[0][0], sc[0][1]);
  pa.y = pack2<kBfV>(sc[0][2], sc[0][3]);
  pa.z = pack2<kBfV>(sc[1][0], sc[1][1]);
  pa.w = pack2<kBfV>(sc[1][2], sc[1][3]);
  const uint8_t* vrow[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    vrow[kk] = vs + (16 * s + 8 * (kk >> 1)) * p.sv_stride + ((kk & 1) ? v_slot1 : v_slot0);
  // keep01 / keep23: AND masks of the keys some row weighs (weighed_keys), so that the V (and
  // turbo norm) of a key no row weighs never enters O. Called with constants where every key is
  // visible: the ANDs fold away there (and in the tiles that hide nothing, kMayHide false, the
  // masked body is not compiled at all).
  const auto p_dot_v = [&](uint32_t keep01, uint32_t keep23) {
    v_operands<VT>(
        vrow, nt, dv0, g, ds, tlut_v, lut_v,
        [&](uint32_t n01, uint32_t n23) {
          pa.x = h2_mul(pa.x, n01 & keep01);
          pa.y = h2_mul(pa.y, n01 & keep01);
          pa.z = h2_mul(pa.z, n23 & keep23);
          pa.w = h2_mul(pa.w, n23 & keep23);
        },
        [&](int i, uint32_t b0, uint32_t b1) {
          mma16816<kBfV>(rs.o[i], pa, b0 & keep01, b1 & keep23);
        });
  };
  if (all_visible)
    p_dot_v(0xffffffffu, 0xffffffffu);
  else
    p_dot_v(weighed_keys(pa.x | pa.y), weighed_keys(pa.z | pa.w));
}

}  // namespace kvflash::cuda::decode
