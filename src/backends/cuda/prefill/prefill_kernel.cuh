// The CUDA prefill kernel: one CTA per (block of 128 query rows, KV head, sequence).
//
// Query rows are (token, head of the GQA group) pairs, token-major as in decode, so every K/V
// tile a CTA loads serves all heads of the group. Each of the 8 warps owns 16 rows. The CTA
// streams the keys its rows may see (prefill_key_range) in tiles of 64 through two shared-memory
// stages (cp.async; the next tile loads while this one computes). f16 / bf16 rows land as the MMA
// operand tile itself; quantized and f32 rows land raw and are decoded, tile by tile, into one f16
// operand tile with the row readers shared with decode (common/kv_values.hpp: k_values, k_dim), so
// no whole-window temporary exists. Both products run on tensor cores (mma.m16n8k16, f32
// accumulation; operands by ldmatrix): S = Q.K^T, then P.V with P taken from S's accumulators in
// registers. The softmax is online in base 2 with the state rule of kvflash/state.hpp (state_ref:
// an empty row's reference is 0, so nothing computes -inf - -inf), and each row is finalized by
// state_final_exp2 (sinks, empty rows, lse). Turbo types are read in the rotated domain: Q is
// rotated as it is staged, the output rotated back in the epilogue.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "backends/cuda/common/async_copy.cuh"
#include "backends/cuda/common/fast_div.hpp"
#include "backends/cuda/common/kv_frags.hpp"
#include "backends/cuda/common/kv_values.hpp"
#include "backends/cuda/common/mma.cuh"
#include "backends/cuda/common/turbo_rotate.cuh"
#include "backends/cuda/prefill/prefill_params.hpp"
#include "backends/cuda/prefill/prefill_plan.hpp"
#include "kvflash/state.hpp"

namespace kvflash::cuda::prefill {

constexpr bool direct_type(KvType t) {
  return t == KvType::f16 || t == KvType::bf16;
}

// The CTA's coordinates and its sequence's facts.
struct PrefillCta {
  int seq, kvh, row0, row_end;
  int64_t len, first_q;  // keys in the sequence; position of query token 0
  PrefillKeyRange keys;
};

// ---------------------------------------------------------------------------------------------
// Steps

// Copies keys [k0, k0 + kTileKeys) of one tensor (rows past `hi` zero-filled) into a stage:
// direct tensors straight into operand rows (`stride` bytes apart), others raw into their slots
// with each row's lead byte. A page table entry outside the pool is read as page 0 and flagged.
template <bool kDirect>
__device__ __forceinline__ void issue_tile(const PrefillParams& p, const TileCopy& c, uint8_t* dst,
                                           uint8_t* leads, int stride, const PrefillCta& cta,
                                           int64_t k0, int tid, int* bad_input) {
  const int total = kTileKeys * c.units;
  for (int i = tid; i < total; i += kThreads) {
    const int r = fdiv(i, c.div_units), u = i - r * c.units;
    const int64_t key = k0 + r;
    const bool valid = key < cta.keys.hi;
    const int64_t kk = valid ? key : 0;
    int64_t off;
    if (p.page_size > 0) {
      const int64_t page_i = kk / p.page_size;
      int32_t page = valid ? c.pages[int64_t{cta.seq} * c.pps + page_i] : 0;
      if (page < 0 || page >= c.n_pages) {
        *bad_input = 1;
        page = 0;
      }
      off = int64_t{page} * c.sp + (kk - page_i * p.page_size) * c.st + int64_t{cta.kvh} * c.sh;
    } else {
      off = int64_t{cta.seq} * c.ss + kk * c.st + int64_t{cta.kvh} * c.sh;
    }
    const uint8_t* row = c.base + off;
    const int lead = static_cast<int>(reinterpret_cast<uintptr_t>(row) & c.lead_mask);
    const uint8_t* src = row - lead + u * c.unit;
    uint8_t* d = dst + r * stride + u * c.unit;
    const int n = valid ? c.unit : 0;
    if (c.unit == 16) {
      cp_async<16>(d, valid ? src : c.base, n);
    } else if (c.unit == 8) {
      cp_async<8>(d, valid ? src : c.base, n);
    } else {
      cp_async<4>(d, valid ? src : c.base, n);
    }
    if constexpr (!kDirect) {
      if (u == 0) leads[r] = static_cast<uint8_t>(lead);
    }
  }
}

// Decodes a stage's raw rows of type T (quantized or f32) into the f16 operand tile: values in
// the storage domain (turbo: rotated, norm x centroid), `dc` computed dims per row.
template <KvType T>
__device__ __forceinline__ void decode_tile(const uint8_t* raw, const uint8_t* leads, int slot,
                                            uint8_t* dst, int stride, int dc, const float* lut,
                                            int tid) {
  if constexpr (T == KvType::f32) {
    const int per_row = dc / 8, total = kTileKeys * per_row;
    for (int i = tid; i < total; i += kThreads) {
      const int r = i / per_row, c = i - r * per_row;
      const float4* s = reinterpret_cast<const float4*>(raw + r * slot + leads[r] + 32 * c);
      const float4 a = s[0], b = s[1];
      const uint4 h = make_uint4(pack2<false>(a.x, a.y), pack2<false>(a.z, a.w),
                                 pack2<false>(b.x, b.y), pack2<false>(b.z, b.w));
      *reinterpret_cast<uint4*>(dst + r * stride + 16 * c) = h;
    }
  } else {
    // Work items: (row, 32-dim block b, thread slot t of k_values).
    const int per_row = dc / 32 * 4, total = kTileKeys * per_row;
    for (int i = tid; i < total; i += kThreads) {
      const int r = i / per_row, bt = i - r * per_row, b = bt >> 2, t = bt & 3;
      float x[8];
      k_values<T>(raw + r * slot + leads[r], b, t, lut, x);
      __half* row = reinterpret_cast<__half*>(dst + r * stride);
      if (k_dim(T, b, t, 1) == k_dim(T, b, t, 0) + 1 && k_dim(T, b, t, 7) == k_dim(T, b, t, 0) + 7) {
        // Eight consecutive dims (q8_0): one 16-byte store.
        *reinterpret_cast<uint4*>(row + k_dim(T, b, t, 0)) =
            make_uint4(pack2<false>(x[0], x[1]), pack2<false>(x[2], x[3]),
                       pack2<false>(x[4], x[5]), pack2<false>(x[6], x[7]));
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) row[k_dim(T, b, t, j)] = __float2half_rn(x[j]);
      }
    }
  }
}

// Q's rows of the CTA into the operand tile (16-bit, K's MMA type), zero past the rows and dims;
// for turbo K rotated group by group (each warp its own 16 rows, through its scratch group).
template <KvType KT>
__device__ __forceinline__ void stage_q(const PrefillParams& p, const PrefillCta& cta,
                                        uint8_t* sq, float* scratch, const uint32_t* sign_words,
                                        int tid) {
  constexpr bool kBf16 = KT == KvType::bf16;
  const auto q_row = [&](int r) -> const float* {
    const int rr = cta.row0 + r, tok = fdiv(rr, p.div_group);
    const int qh = cta.kvh * p.group + rr - tok * p.group;
    return p.q + ((int64_t{cta.seq} * p.n_q_tokens + tok) * p.n_q_heads + qh) * p.dk;
  };
  if constexpr (is_rotated(KT)) {
    const int lane = tid & 31, warp = tid >> 5;
    for (int r = warp * 16; r < warp * 16 + 16; ++r) {
      const bool ok = cta.row0 + r < cta.row_end;
      const float* q = ok ? q_row(r) : nullptr;
      for (int g0 = 0; g0 < p.dkc; g0 += 128) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int d = g0 + lane + 32 * k;
          scratch[lane + 32 * k] = ok && d < p.dk ? q[d] : 0.0f;
        }
        forward_rotate_group(scratch, lane, sign_words);
        __half* dst = reinterpret_cast<__half*>(sq + r * p.q_stride) + g0;
#pragma unroll
        for (int k = 0; k < 4; ++k)
          dst[lane + 32 * k] = __float2half_rn(scratch[lane + 32 * k]);
        __syncwarp();
      }
    }
  } else {
    const int per_row = p.dkc / 4, total = kBlockRows * per_row;
    for (int i = tid; i < total; i += kThreads) {
      const int r = i / per_row, d = 4 * (i - r * per_row);
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (cta.row0 + r < cta.row_end && d < p.dk) {
        const float* q = q_row(r) + d;
        if (p.q_vec4) {
          v = *reinterpret_cast<const float4*>(q);
        } else {
          v = make_float4(q[0], q[1], q[2], q[3]);  // dk is a multiple of 16
        }
      }
      *reinterpret_cast<uint2*>(sq + r * p.q_stride + 2 * d) =
          make_uint2(pack2<kBf16>(v.x, v.y), pack2<kBf16>(v.z, v.w));
    }
  }
}

// A warp's 16 rows: what the score step needs of each of the lane's two rows (g, g + 8).
struct RowFacts {
  int64_t pq[2];       // query positions
  int head[2];         // query heads
  const float* mask[2];
  float slope[2];
  bool valid[2];
};

// S = Q.K^T for the warp's 16 rows and the tile's 64 keys: s[n-tile of 8 keys][4].
template <bool kBf16>
__device__ __forceinline__ void qk_tile(float (&s)[8][4], uint32_t sq_addr, uint32_t sk_addr,
                                        int q_stride, int k_stride, int dkc, int lane) {
#pragma unroll
  for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
  const uint32_t a_base = sq_addr + (lane & 15) * q_stride + (lane >> 4) * 16;
  const uint32_t b_base = sk_addr + ((lane & 7) + ((lane >> 4) << 3)) * k_stride + ((lane >> 3) & 1) * 16;
  for (int kc = 0; kc < dkc / 16; ++kc) {
    const uint4 a = ldmatrix_x4(a_base + 32 * kc);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      const uint4 b = ldmatrix_x4(b_base + np * 16 * k_stride + 32 * kc);
      mma16816<kBf16>(s[2 * np], a, b.x, b.y);
      mma16816<kBf16>(s[2 * np + 1], a, b.z, b.w);
    }
  }
}

// The scores into base-2 logits: scale, softcap, ALiBi, mask, and where the tile needs it the
// visibility test (causal, window, the range's end) as -inf.
__device__ __forceinline__ void score_tile(const PrefillParams& p, float (&s)[8][4],
                                           const RowFacts& rf, int64_t k0, int64_t hi, bool masked,
                                           int t) {
  const bool extras = p.softcap > 0.0f || p.has_alibi || p.has_mask;
  if (!extras && !masked) {
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] *= p.scale_log2;
    return;
  }
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      const int64_t key = k0 + n * 8 + 2 * t + (e & 1);
      float x = s[n][e] * p.scale;
      if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
      if (p.has_alibi) x += rf.slope[r] * static_cast<float>(key - rf.pq[r]);
      if (p.has_mask && key < hi) x += rf.mask[r][key];
      bool vis = true;
      if (masked) {
        vis = key < hi && (!p.causal || key <= rf.pq[r]) &&
              (p.window <= 0 || rf.pq[r] - key < p.window);
      }
      s[n][e] = vis ? x * kStateLog2e : -std::numeric_limits<float>::infinity();
    }
  }
}

// The online softmax over one tile for the lane's two rows: new maxima (base 2), the weights P
// in place of the scores, the running sums and the accumulators rescaled (state_ref's rule).
template <int kVt>
__device__ __forceinline__ void softmax_tile(float (&s)[8][4], float (&m)[2], float (&l)[2],
                                             float (&o)[kVt][4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -std::numeric_limits<float>::infinity();
#pragma unroll
    for (int n = 0; n < 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[r], mx);
    const float ref = state_ref(m_new);
    const float alpha = exp2_ftz(m[r] - ref);
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      s[n][2 * r] = exp2_ftz(s[n][2 * r] - ref);
      s[n][2 * r + 1] = exp2_ftz(s[n][2 * r + 1] - ref);
      sum += s[n][2 * r] + s[n][2 * r + 1];
    }
    l[r] = l[r] * alpha + sum;
    m[r] = m_new;
#pragma unroll
    for (int d = 0; d < kVt; ++d) {
      o[d][2 * r] *= alpha;
      o[d][2 * r + 1] *= alpha;
    }
  }
}

// O += P.V: P from the scores' registers (the accumulator layout of two n-tiles is the A
// operand of one 16-key step), V's B operands by transposed ldmatrix.
template <bool kBf16, int kVt>
__device__ __forceinline__ void pv_tile(float (&o)[kVt][4], const float (&s)[8][4],
                                        uint32_t sv_addr, int v_stride, int dvc, int lane) {
  const uint32_t b_base =
      sv_addr + ((lane & 7) + (((lane >> 3) & 1) << 3)) * v_stride + (lane >> 4) * 16;
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    const uint4 a = make_uint4(pack2<kBf16>(s[2 * kc][0], s[2 * kc][1]),
                               pack2<kBf16>(s[2 * kc][2], s[2 * kc][3]),
                               pack2<kBf16>(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                               pack2<kBf16>(s[2 * kc + 1][2], s[2 * kc + 1][3]));
#pragma unroll
    for (int dp = 0; dp < kVt / 2; ++dp) {
      if (16 * dp < dvc) {
        const uint4 b = ldmatrix_x4_trans(b_base + kc * 16 * v_stride + dp * 32);
        mma16816<kBf16>(o[2 * dp], a, b.x, b.y);
        mma16816<kBf16>(o[2 * dp + 1], a, b.z, b.w);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The kernel

// CTAs per SM the 128-dim instances are built for (__launch_bounds__): 2 caps them at 128
// registers (a few spill), 1 lets them take ~190. (A build flag for the A/B of dev/prefill_gpu.sh.)
#ifndef KVFLASH_PREFILL_CTAS128
#define KVFLASH_PREFILL_CTAS128 2
#endif

// DVB: the instance's V dims (128 or 256), the accumulators' size; the head dims themselves are
// parameters.
template <KvType KT, KvType VT, int DVB>
__global__ void __launch_bounds__(kThreads, DVB <= 128 ? KVFLASH_PREFILL_CTAS128 : 1)
    prefill_kernel(const __grid_constant__ PrefillParams p) {
  constexpr bool kDirectK = direct_type(KT), kDirectV = direct_type(VT);
  constexpr bool kBf16K = KT == KvType::bf16, kBf16V = VT == KvType::bf16;
  constexpr int kVt = DVB / 8;  // n-tiles of 8 V dims

  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float lut_k[16], lut_v[16];
  __shared__ uint32_t sign_words[4];
  __shared__ int bad_input;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;

  PrefillCta cta;
  cta.seq = blockIdx.z;
  cta.kvh = blockIdx.y;
  // Heaviest row blocks first (with causal masking the last rows see the most keys).
  cta.row0 = (p.n_row_blocks - 1 - static_cast<int>(blockIdx.x)) * kBlockRows;
  cta.row_end = min(cta.row0 + kBlockRows, p.rows);
  cta.len = p.kv_lens[cta.seq];
  cta.first_q = cta.len - p.n_q_tokens;
  cta.keys = prefill_key_range(cta.len, p.kv_capacity, p.n_q_tokens, p.group, p.causal, p.window,
                               cta.row0, cta.row_end);
  if (tid < 16) {
    lut_k[tid] = centroid<KT>(tid);
    lut_v[tid] = centroid<VT>(tid);
  }
  if (tid < 4) sign_words[tid] = sign_word(tid);
  if (tid == 0) bad_input = cta.len < 0 || cta.len > p.kv_capacity;
  __syncthreads();

  uint8_t* const sq = smem + p.q_off;
  const auto stage = [&](int s) { return smem + s * p.stage_bytes; };
  const int64_t n_tiles = (cta.keys.hi - cta.keys.lo + kTileKeys - 1) / kTileKeys;
  const auto issue = [&](int64_t j) {
    uint8_t* st = stage(static_cast<int>(j & 1));
    const int64_t k0 = cta.keys.lo + j * kTileKeys;
    issue_tile<kDirectK>(p, p.k, st + p.k_stage_off, st + p.k_lead_off,
                         kDirectK ? p.k_op_stride : p.k_slot, cta, k0, tid, &bad_input);
    issue_tile<kDirectV>(p, p.v, st + p.v_stage_off, st + p.v_lead_off,
                         kDirectV ? p.v_op_stride : p.v_slot, cta, k0, tid, &bad_input);
    cp_async_commit();
  };
  if (n_tiles > 0) issue(0);
  stage_q<KT>(p, cta, sq, reinterpret_cast<float*>(smem + p.scratch_off) + warp * 128, sign_words,
              tid);

  // The lane's two rows.
  RowFacts rf;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int rr = cta.row0 + warp * 16 + g + 8 * r;
    rf.valid[r] = rr < cta.row_end;
    const int rc = rf.valid[r] ? rr : cta.row0;
    const int tok = fdiv(rc, p.div_group);
    rf.head[r] = cta.kvh * p.group + rc - tok * p.group;
    rf.pq[r] = cta.first_q + tok;
    rf.mask[r] = p.has_mask ? p.mask + (int64_t{cta.seq} * p.n_q_tokens + tok) * p.mask_stride
                            : nullptr;
    rf.slope[r] = p.has_alibi ? p.alibi[rf.head[r]] : 0.0f;
  }
  const int64_t pq_lo = cta.first_q + cta.row0 / p.group;
  const int64_t pq_hi = cta.first_q + (cta.row_end - 1) / p.group;

  float o[kVt][4];
#pragma unroll
  for (int d = 0; d < kVt; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  float l[2] = {0.0f, 0.0f};
  const uint32_t sq_addr = smem_addr(sq + warp * 16 * p.q_stride);

  for (int64_t j = 0; j < n_tiles; ++j) {
    cp_async_wait<0>();
    __syncthreads();  // tile j landed for all; every warp is done with tile j - 1
    if (j + 1 < n_tiles) issue(j + 1);
    uint8_t* st = stage(static_cast<int>(j & 1));
    if constexpr (!kDirectK)
      decode_tile<KT>(st + p.k_stage_off, st + p.k_lead_off, p.k_slot, smem + p.k_dec_off,
                      p.k_op_stride, p.dkc, lut_k, tid);
    if constexpr (!kDirectV)
      decode_tile<VT>(st + p.v_stage_off, st + p.v_lead_off, p.v_slot, smem + p.v_dec_off,
                      p.v_op_stride, p.dvc, lut_v, tid);
    if constexpr (!kDirectK || !kDirectV) __syncthreads();
    const uint8_t* sk = kDirectK ? st + p.k_stage_off : smem + p.k_dec_off;
    const uint8_t* sv = kDirectV ? st + p.v_stage_off : smem + p.v_dec_off;

    const int64_t k0 = cta.keys.lo + j * kTileKeys;
    float s[8][4];
    qk_tile<kBf16K>(s, sq_addr, smem_addr(sk), p.q_stride, p.k_op_stride, p.dkc, lane);
    score_tile(p, s, rf, k0, cta.keys.hi,
               prefill_tile_needs_mask(k0, cta.keys.hi, p.causal, p.window, pq_lo, pq_hi), t);
    softmax_tile<kVt>(s, m, l, o);
    pv_tile<kBf16V, kVt>(o, s, smem_addr(sv), p.v_op_stride, p.dvc, lane);
  }

  // Epilogue: each row's state finalized (sinks, empty rows), the outputs staged in shared memory
  // per warp (rotated back for turbo V), then written row by row.
  __syncthreads();  // everyone is done with the tiles; bad_input is final
  float* so = reinterpret_cast<float*>(smem) + warp * 16 * p.out_stride;
  const bool bad = bad_input != 0;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const float m_nat = m[r] / kStateLog2e;
    const StateFinal fin =
        state_final_exp2(m_nat, l[r], p.has_sinks, p.has_sinks ? p.sinks[rf.head[r]] : 0.0f);
    float* orow = so + (g + 8 * r) * p.out_stride;
#pragma unroll
    for (int d = 0; d < kVt; ++d) {
      if (8 * d < p.dvc)
        *reinterpret_cast<float2*>(orow + 8 * d + 2 * t) =
            make_float2(o[d][2 * r] * fin.scale, o[d][2 * r + 1] * fin.scale);
    }
    if (t == 0 && rf.valid[r] && p.lse != nullptr) {
      const int rr = cta.row0 + warp * 16 + g + 8 * r, tok = fdiv(rr, p.div_group);
      p.lse[(int64_t{cta.seq} * p.n_q_tokens + tok) * p.n_q_heads + rf.head[r]] =
          bad ? __int_as_float(0x7fc00000) : fin.lse;
    }
  }
  __syncwarp();
  for (int r = 0; r < 16; ++r) {
    const int rr = cta.row0 + warp * 16 + r;
    if (rr >= cta.row_end) break;
    float* orow = so + r * p.out_stride;
    if constexpr (is_rotated(VT)) {
      for (int g0 = 0; g0 < p.dvc; g0 += 128) inverse_rotate_group(orow + g0, lane, sign_words);
    }
    const int tok = fdiv(rr, p.div_group), qh = cta.kvh * p.group + rr - tok * p.group;
    float* dst = p.out + ((int64_t{cta.seq} * p.n_q_tokens + tok) * p.n_q_heads + qh) * p.dv;
    for (int d = lane; d < p.dv; d += 32) dst[d] = bad ? __int_as_float(0x7fc00000) : orow[d];
  }
}

// The instance's entry points (prefill.cu's table).
template <KvType KT, KvType VT, int DVB>
cudaError_t prepare_prefill(size_t smem) {
  return cudaFuncSetAttribute(prefill_kernel<KT, VT, DVB>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
}
template <KvType KT, KvType VT, int DVB>
void launch_prefill(const PrefillParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  prefill_kernel<KT, VT, DVB><<<grid, kThreads, smem, stream>>>(p);
}

}  // namespace kvflash::cuda::prefill
