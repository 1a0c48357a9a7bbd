// One 16-key step of the decode kernel with up to 8 query rows per KV head (NR 1: keys as the
// MMA M dimension): S^T = K.Q^T for 16 keys and one n-tile of query rows, the soft cap, ALiBi,
// mask and visibility, the online softmax, and O^T += V^T.P^T. Inlined into decode_kernel
// (decode_kernel.cuh), whose per-CTA constants it takes in small structs.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backends/cuda/decode/decode_cta.cuh"
#include "backends/cuda/decode/decode_device.cuh"
#include "backends/cuda/decode/decode_epilogue.cuh"

namespace kvflash::cuda::decode {

template <KvType KT, KvType VT, bool KS, bool kMayHide>
__device__ __forceinline__ void keys_as_m_step(const DecodeParams& p, RunState<1>& rs,
                                               const CtaCoords& c, const StepTiles& stp,
                                               const QOperands& q, const RowSlots& slots,
                                               const KeyRange& range,
                                               const Codebooks<KT, VT>& books,
                                               KSplitExchange& xchg) {
  constexpr int NR = 1;
  constexpr bool kBfK = KT == KvType::bf16;  // Q.K^T in bf16 only for bf16 K, else f16
  constexpr bool kBfV = VT == KvType::bf16;
  constexpr bool kS8K = int8_qk<KT, VT, NR, KS>();
  constexpr bool kQRegs = q_in_registers<KT, NR, KS>();
  constexpr int kKBlockValues = traits(KT).block_values, kKBlockBytes = traits(KT).block_bytes;
  const uint8_t *ks = stp.ks, *vs = stp.vs;
  const int s = stp.s;
  const int64_t j0 = stp.j0, k_hi = range.k_hi, len = range.len;
  const bool plain = stp.plain;
  const int v_slot0 = slots.v_slot0, v_slot1 = slots.v_slot1;
  const int lane = c.lane, g = c.g, t = c.t, kg = c.kg, mt = c.mt, ds = c.ds, nt = c.nt,
            dv0 = c.dv0, row0 = c.row0, kvh = c.kvh, seq = c.seq;
  const uint4* q_frag = q.frag;
  const float* qc = q.qc;
  const auto& qra = q.ra;
  const auto& qrb = q.rb;
  const auto& q_step = q.step;
  const TurboLut<KT>& tlut_k = books.tlut_k;
  const TurboLut<VT>& tlut_v = books.tlut_v;
  const float *lut_k = books.lut_k, *lut_v = books.lut_v;
  // KS (one n-tile, V dims split: decode_layout's k_split): the warps that share keys (same kg)
  // split K's 32-dim blocks between them too (turbo: whole 128-dim groups), k_share blocks each,
  // this one from kb_lo, and add their partial scores (see the step). Its K rows and Q fragments
  // start at block kb_lo (k_slot_nr1, the step's qf), so that its loops are those of an unsplit K
  // of k_share blocks. A kernel of its own: in the one kernel, the exchange's code (if never run)
  // cost head dim 128 1-3% (+15 registers), and a per-warp trip count made ptxas treat the loops
  // as divergent (+22 registers, 2-4%). (The loops' bounds stay expressions of p: the same bound
  // held in a variable took q8_0's kernel from 99 to 126 registers.)
  const int kb_lo = KS ? ds * p.k_share : 0;
  const int k_slot_nr1 = slots.k_slot + kb_lo * 32 / kKBlockValues * kKBlockBytes;
  // S^T = K.Q^T for 16 keys: the keys are the M dimension (this lane loads key rows g and
  // g + 8, the A operand's rows: krow[0], krow[1]) and the query rows the N dimension
  // (n-tile r: rows 8r .. 8r + 7 of the warp's M tile, Q^T's B operands are the Q
  // fragments' halves). The lane holds the scores of keys g (st[r][0..1]) and g + 8
  // (st[r][2..3]) for rows 8r + 2t and 8r + 2t + 1. One n-tile serves up to 8 query rows
  // (one token of GQA <= 8).
  float st[NR][4] = {};
  const uint8_t* krow[2];
#pragma unroll
  for (int n = 0; n < 2; ++n) krow[n] = ks + (16 * s + 8 * n) * p.sk_stride + k_slot_nr1;
  const uint4* qf = q_frag + (mt * (p.dkc >> 4) + 2 * kb_lo) * 32 + lane;
  // One 16-dim chunk: A from the two key rows' B-style fragments (x/y of chunk 0, z/w of
  // chunk 1 of a block), B from the Q fragment (rows g: x, z; rows g + 8: y, w).
  const auto qk = [&](float(&acc)[NR][4], const uint4& w0, const uint4& w1, const uint4& qa,
                      const uint4& qb) {
    const uint4 a0 = make_uint4(w0.x, w1.x, w0.y, w1.y);
    const uint4 a1 = make_uint4(w0.z, w1.z, w0.w, w1.w);
    mma16816<kBfK>(acc[0], a0, qa.x, qa.z);
    mma16816<kBfK>(acc[0], a1, qb.x, qb.z);
  };
  if constexpr (is_rotated(KT)) {
    // Per 128-dim group: the scores of the codebook values, then times each key's norm in
    // f32 (the lane's own rows). Group 0 goes straight into st, later ones are added.
    const auto group_scores = [&](int gi, float(&acc)[NR][4], auto from_regs) {
    // Unrolled: rolled, the loop's address and counter work was ~15 of its 63
    // instructions per block (turbo3). The Q fragments load in order with the MMAs
    // (loaded at the top of the unrolled loop they spill); group 0's are in registers.
#pragma unroll
      for (int bb = 0; bb < 4; ++bb) {
        const int b = 4 * gi + bb;
        uint4 qa, qb;
        if constexpr (decltype(from_regs)::value) {
          qa = qra[bb];
          qb = qrb[bb];
        } else {
          qa = lds128_in_order(qf + (2 * b) * 32);
          qb = lds128_in_order(qf + (2 * b + 1) * 32);
        }
        qk(acc, k_frag_turbo<KT>(krow[0], b, t, tlut_k), k_frag_turbo<KT>(krow[1], b, t, tlut_k),
           qa, qb);
      }
      const float n0 = half_to_float(static_cast<uint16_t>(turbo_norm<KT>(krow[0], gi)));
      const float n1 = half_to_float(static_cast<uint16_t>(turbo_norm<KT>(krow[1], gi)));
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        acc[r][0] *= n0;
        acc[r][1] *= n0;
        acc[r][2] *= n1;
        acc[r][3] *= n1;
      }
    };
    group_scores(0, st, std::bool_constant<kQRegs>{});
    for (int gi = 1; gi < (KS ? p.k_share >> 2 : (p.dkc >> 7)); ++gi) {
      float part[NR][4] = {};
      group_scores(gi, part, std::false_type{});
#pragma unroll
      for (int r = 0; r < NR; ++r)
#pragma unroll
        for (int e = 0; e < 4; ++e) st[r][e] += part[r][e];
    }
  }
  if constexpr (kS8K) {
    // Per 32-dim block two IMMAs (Q's planes hi, lo), 128 hi + lo in s32 (|.| < 2^27),
    // times the block's scale of this lane's key row in f32; the rows' steps at the end.
    const uint4* qf8 = q_frag + lane;
#pragma unroll 4
    for (int b = 0; b < (p.dkc >> 5); ++b) {
      const uint4 qp = qf8[b * 32];
      const frag2 k0 = k_frag_s8<KT>(krow[0], b, t), k1 = k_frag_s8<KT>(krow[1], b, t);
      const uint4 a = make_uint4(k0.x, k1.x, k0.y, k1.y);
      int hi[4] = {0, 0, 0, 0}, lo[4] = {0, 0, 0, 0};
      imma16832(hi, a, qp.x, qp.y);
      imma16832(lo, a, qp.z, qp.w);
      const float s0 = half_to_float(static_cast<uint16_t>(k_scale<KT>(krow[0], b)));
      const float s1 = half_to_float(static_cast<uint16_t>(k_scale<KT>(krow[1], b)));
      st[0][0] = fmaf(s0, static_cast<float>(128 * hi[0] + lo[0]), st[0][0]);
      st[0][1] = fmaf(s0, static_cast<float>(128 * hi[1] + lo[1]), st[0][1]);
      st[0][2] = fmaf(s1, static_cast<float>(128 * hi[2] + lo[2]), st[0][2]);
      st[0][3] = fmaf(s1, static_cast<float>(128 * hi[3] + lo[3]), st[0][3]);
    }
    st[0][0] *= q_step[0];
    st[0][1] *= q_step[1];
    st[0][2] *= q_step[0];
    st[0][3] *= q_step[1];
  }
  if constexpr (!kS8K && folds_k_bias(KT, NR)) {
    // Raw codes (exact in f16) into an accumulator that starts at minus the bias times the
    // query's chunk sums (qc), so the MMA leaves sum(q * (code - bias)) per block; the
    // block's scale of each key row (this lane's own rows) then multiplies it in f32.
    // (One n-tile: one M tile of 16 rows per CTA, row_block = 16, decode_layout.)
    constexpr int kRowBlock1 = 16;
    const float* qcm = qc + kb_lo * kRowBlock1 + mt * 16 + 2 * t;
#pragma unroll 4
    for (int b = 0; b < (KS ? p.k_share : (p.dkc >> 5)); ++b) {
      const uint4 qa = qf[(2 * b) * 32], qb = qf[(2 * b + 1) * 32];
      const uint4 w0 = k_frag_raw<KT>(krow[0], b, t), w1 = k_frag_raw<KT>(krow[1], b, t);
      const float s0 = half_to_float(static_cast<uint16_t>(k_scale<KT>(krow[0], b)));
      const float s1 = half_to_float(static_cast<uint16_t>(k_scale<KT>(krow[1], b)));
      float acc[NR][4];
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        const float2 c = *reinterpret_cast<const float2*>(qcm + b * kRowBlock1 + 8 * r);
        acc[r][0] = acc[r][2] = c.x;
        acc[r][1] = acc[r][3] = c.y;
      }
      qk(acc, w0, w1, qa, qb);
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        st[r][0] = fmaf(s0, acc[r][0], st[r][0]);
        st[r][1] = fmaf(s0, acc[r][1], st[r][1]);
        st[r][2] = fmaf(s1, acc[r][2], st[r][2]);
        st[r][3] = fmaf(s1, acc[r][3], st[r][3]);
      }
    }
  }
  if constexpr (!is_rotated(KT) && KT != KvType::q8_0 && KT != KvType::q4_0) {
    // Unrolled (4 blocks: D 128 in one pass): rolled, the loop's address and counter work
    // was ~16 instructions per block.
    const auto kblock = [&](int b, const uint4& qa, const uint4& qb) {
      uint4 w[2];
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        if constexpr (KT == KvType::f16 || KT == KvType::bf16) {
          // Stored as the fragment wants it: one 16-byte load is both chunks' operands.
          w[n] = *reinterpret_cast<const uint4*>(krow[n] + 64 * b + 16 * t);
        } else if constexpr (is_fp8(KT)) {
          w[n] = k_frag_fp8<KT>(krow[n], b, t);
        } else {
          float x[8];
          k_values<KT>(krow[n], b, t, lut_k, x);
          w[n] = make_uint4(pack2<kBfK>(x[0], x[1]), pack2<kBfK>(x[2], x[3]),
                            pack2<kBfK>(x[4], x[5]), pack2<kBfK>(x[6], x[7]));
        }
      }
      qk(st, w[0], w[1], qa, qb);
    };
    // The first four blocks from registers (kQRegs), the rest (or all) from shared memory.
    constexpr int kFromRegs = kQRegs ? 4 : 0;
#pragma unroll
    for (int b = 0; b < kFromRegs; ++b)
      if (b < (p.dkc >> 5)) kblock(b, qra[b], qrb[b]);
#pragma unroll 4
    for (int b = kFromRegs; b < (KS ? p.k_share : (p.dkc >> 5)); ++b)
      kblock(b, qf[(2 * b) * 32], qf[(2 * b + 1) * 32]);
  }
  if constexpr (KS) {
    // V dims split over the n_dslices warps that share these keys (same kg): each has
    // computed the partial scores of its share of K's blocks (kb_lo), and each adds all
    // the partials in slice order (the same sums, bitwise, in every one of them: the same
    // softmax state), through two buffers per warp: a warp writes one while the other
    // may still be read from the last step.
    float4* xb =
        reinterpret_cast<float4*>(xchg.buf) + (kg * p.n_dslices * 2 + xchg.parity) * 32 + lane;
    xb[ds * 64] = make_float4(st[0][0], st[0][1], st[0][2], st[0][3]);
    xchg.barrier(p, kg);
    float4 sum = xb[0];
    for (int d = 1; d < p.n_dslices; ++d) {
      const float4 v = xb[d * 64];
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    st[0][0] = sum.x;
    st[0][1] = sum.y;
    st[0][2] = sum.z;
    st[0][3] = sum.w;
    xchg.parity ^= 1;
  }
  // Soft cap, ALiBi, mask, visibility; then the online softmax per query row.
  const bool all_visible = !kMayHide || keys_visible(p, range, j0, j0 + 15, plain);
  if (!all_visible) {
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int rr = min(row0 + mt * 16 + 8 * r + 2 * t + e, p.rows - 1);
        const int tok = fdiv(rr, p.div_group);
        const int64_t pos = len - p.n_q_tokens + tok;
        const float slope =
            p.has_alibi ? __ldg(p.alibi + kvh * p.group + rr - tok * p.group) : 0.0f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t j = j0 + g + 8 * h;
          float x = st[r][2 * h + e];
          if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
          if (p.has_alibi) x += slope * static_cast<float>(j - pos);
          // A -inf mask hides the key whatever its K row holds (NaN + -inf would be NaN).
          const float mv = p.has_mask && j < k_hi
                               ? p.mask[(int64_t{seq} * p.n_q_tokens + tok) * p.mask_stride + j]
                               : 0.0f;
          x += mv;
          const bool hidden = j >= k_hi || mv == kNegInf || (p.causal && j > pos) ||
                              (p.window > 0 && pos - j >= p.window);
          st[r][2 * h + e] = hidden ? kNegInf : x;
        }
      }
  }

  // Per query row (a column of S^T): the maximum over the 16 keys across the 8 lanes of the
  // same t, then P in place and the running sum. Once the running maxima settle, no key of
  // a step exceeds its row's running maximum (the same value in the row's 8 lanes): one
  // vote then skips the cross-lane maxima, the rescale factors and the accumulators'
  // rescale (at depth, most steps).
  float lmx[NR][2];
  bool grows = false;
#pragma unroll
  for (int r = 0; r < NR; ++r)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      lmx[r][e] = fmaxf(st[r][e], st[r][2 + e]);
      grows = grows || lmx[r][e] > rs.m[r][e];
    }
  if (__any_sync(0xffffffffu, grows)) {
    float alpha[NR][2];
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float mx = lmx[r][e];
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        const float m_new = fmaxf(rs.m[r][e], mx);
        const float ref = state_ref(m_new);
        alpha[r][e] = exp2_ftz((rs.m[r][e] - ref) * kLog2e);  // m_run = -inf gives 0
        rs.m[r][e] = m_new;
        rs.l[r][e] *= alpha[r][e];
      }
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        rs.o[i][r][0] *= alpha[r][0];
        rs.o[i][r][1] *= alpha[r][1];
        rs.o[i][r][2] *= alpha[r][0];
        rs.o[i][r][3] *= alpha[r][1];
      }
  }
  // P in place and the running sum (this lane's two keys; the lanes' sums are added at
  // the end).
#pragma unroll
  for (int r = 0; r < NR; ++r)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float ref = state_ref(rs.m[r][e]);
      const float p0 = exp2_ftz((st[r][e] - ref) * kLog2e);
      const float p1 = exp2_ftz((st[r][2 + e] - ref) * kLog2e);
      st[r][e] = p0;
      st[r][2 + e] = p1;
      rs.l[r][e] += p0 + p1;
    }

  // O^T += V^T.P^T: P^T's B operands (keys 2t, 2t + 1 and 2t + 8, 2t + 9 of query row g of
  // n-tile r) are the transposes of the lane's packed scores (keys g, g + 8 of rows 2t,
  // 2t + 1); V^T's A operand of M tile m is the former B operands of V-dim tiles 2m (rows
  // g) and 2m + 1 (rows g + 8) that the decoders below produce in order.
  uint32_t pb[NR][2];
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    pb[r][0] = movmatrix_trans(pack2<kBfV>(st[r][0], st[r][1]));
    pb[r][1] = movmatrix_trans(pack2<kBfV>(st[r][2], st[r][3]));
  }
  const uint8_t* vrow[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    vrow[kk] = vs + (16 * s + 8 * (kk >> 1)) * p.sv_stride + ((kk & 1) ? v_slot1 : v_slot0);
  // keep01 / keep23: AND masks of the keys some row weighs (weighed_keys), so that the V (and
  // turbo norm) of a key no row weighs never enters O. Called with constants where every key is
  // visible: the ANDs fold away there (and in the tiles that hide nothing, kMayHide false, the
  // masked body is not compiled at all).
  const auto p_dot_v = [&](uint32_t keep01, uint32_t keep23) {
    uint32_t sv0 = 0, sv1 = 0;
    const auto pv = [&](int i, uint32_t b0, uint32_t b1) {
      if ((i & 1) == 0) {
        sv0 = b0 & keep01;
        sv1 = b1 & keep23;
        return;
      }
      const uint4 a = make_uint4(sv0, b0 & keep01, sv1, b1 & keep23);
      mma16816<kBfV>(rs.o[i >> 1][0], a, pb[0][0], pb[0][1]);
    };
    v_operands<VT>(
        vrow, nt, dv0, g, ds, tlut_v, lut_v,
        [&](uint32_t n01, uint32_t n23) {
#pragma unroll
          for (int r = 0; r < NR; ++r) {
            pb[r][0] = h2_mul(pb[r][0], n01 & keep01);
            pb[r][1] = h2_mul(pb[r][1], n23 & keep23);
          }
        },
        pv);
  };
  if (all_visible) {
    p_dot_v(0xffffffffu, 0xffffffffu);
    return;
  }
  uint32_t or01 = 0, or23 = 0;
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    or01 |= pb[r][0];
    or23 |= pb[r][1];
  }
  p_dot_v(weighed_keys(or01), weighed_keys(or23));
}

}  // namespace kvflash::cuda::decode
