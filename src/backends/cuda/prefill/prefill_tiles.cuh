// The steps both CUDA prefill kernels share (prefill_kernel.cuh: the kernel whose threads copy
// the tiles; prefill_tma_kernel.cuh: the TMA-fed, warp-specialized one): the CTA's coordinates,
// the tile copies and decoders, Q's staging, S = Q.K^T, the scores and online softmax, P.V (the
// hidden-key zeroing before it: prefill_hidden_keys.cuh) and the epilogue.
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
#include "backends/cuda/common/tile_copy.hpp"
#include "backends/cuda/common/turbo_rotate.cuh"
#include "backends/cuda/common/wgmma.cuh"
#include "backends/cuda/prefill/prefill_hidden_keys.cuh"
#include "backends/cuda/prefill/prefill_params.hpp"
#include "backends/cuda/prefill/prefill_plan.hpp"
#include "kvflash/state.hpp"

namespace kvflash::cuda::prefill {

// The CTA's coordinates and its sequence's facts.
struct PrefillCta {
  int seq, kvh, row0, row_end;  // rows: (token, head of the group) pairs of this KV head
  int64_t q_row0;               // the sequence's first query row in q / out / lse
  int32_t q_len;                // its query tokens (n_q_tokens, or its ragged count)
  int64_t len, first_q;         // keys in the sequence; position of query token 0
  PrefillKeyRange keys;
};

// ---------------------------------------------------------------------------------------------
// Steps

// Entry `page_i` of a tensor's page table for sequence `seq`: an entry outside the pool reads as
// page 0 and sets `outside` (the guard of every prefill copy).
__device__ __forceinline__ int32_t checked_page(const TileCopy& c, int seq, int64_t page_i,
                                                bool& outside) {
  const int32_t page = __ldg(c.pages + int64_t{seq} * c.pps + page_i);
  const bool bad = page < 0 || page >= c.n_pages;
  outside |= bad;
  return bad ? 0 : page;
}

// The start of row `key` of a tensor for the CTA's sequence and KV head (valid: key < hi; others
// get the base, never read). A page table entry outside the pool is read as page 0 and flagged.
__device__ __forceinline__ const uint8_t* tile_row(const PrefillParams& p, const TileCopy& c,
                                                   const PrefillCta& cta, int64_t key, bool valid,
                                                   int* bad_input) {
  if (!valid) return c.base;
  int64_t off;
  if (p.page_size > 0) {
    const int64_t page_i = key / p.page_size;
    bool outside = false;
    const int32_t page = checked_page(c, cta.seq, page_i, outside);
    if (outside) *bad_input = 1;
    off = int64_t{page} * c.sp + (key - page_i * p.page_size) * c.st + int64_t{cta.kvh} * c.sh;
  } else {
    off = int64_t{cta.seq} * c.ss + key * c.st + int64_t{cta.kvh} * c.sh;
  }
  return c.base + off;
}

// Copies keys [k0, k0 + kKeys) of one tensor (rows past the range's end zero-filled) into a
// stage: direct tensors straight into the swizzled operand tile (16-byte copies: one chunk
// each), raw ones into their slots (`stride` bytes apart) with each row's lead byte. Only the
// row's bytes are read (unit_bytes_in_row; the rest of a slot's last unit is zero-filled).
template <TileMode kMode, int kKeys>
__device__ __forceinline__ void issue_tile(const PrefillParams& p, const TileCopy& c, uint8_t* dst,
                                           uint8_t* leads, int stride, const PrefillCta& cta,
                                           int64_t k0, int tid, int* bad_input) {
  const int total = kKeys * c.units;
  for (int i = tid; i < total; i += kThreads) {
    const int r = fdiv(i, c.div_units), u = i - r * c.units;
    const bool valid = k0 + r < cta.keys.hi;
    const uint8_t* row = tile_row(p, c, cta, k0 + r, valid, bad_input);
    const int lead = static_cast<int>(reinterpret_cast<uintptr_t>(row) & c.lead_mask);
    const int n = valid ? unit_bytes_in_row(lead, c.row_bytes, c.unit, u) : 0;
    const uint8_t* src = n > 0 ? row - lead + u * c.unit : c.base;
    uint8_t* d = kMode == TileMode::direct ? dst + swizzled_offset(r, (u * c.unit) >> 1, kKeys)
                                           : dst + r * stride + u * c.unit;
    if (c.unit == 16) {
      cp_async<16>(d, src, n);
    } else if (c.unit == 8) {
      cp_async<8>(d, src, n);
    } else {
      cp_async<4>(d, src, n);
    }
    if constexpr (kMode == TileMode::raw) {
      if (u == 0) leads[r] = static_cast<uint8_t>(lead);
    }
  }
}

// f32 rows of keys [k0, k0 + kTileKeys) read and converted to f16 into the operand tile (zero
// past the range's end): eight values (one swizzle chunk) per work item, `dc` dims per row.
__device__ __forceinline__ void convert_tile(const PrefillParams& p, const TileCopy& c,
                                             const PrefillCta& cta, int64_t k0, uint8_t* dst,
                                             int dc, const FastDiv& div_items, int tid,
                                             int* bad_input) {
  const int per_row = dc / 8, total = kTileKeys * per_row;
  for (int i = tid; i < total; i += kThreads) {
    const int r = fdiv(i, div_items), k8 = i - r * per_row;
    const bool valid = k0 + r < cta.keys.hi;
    uint4 h = make_uint4(0u, 0u, 0u, 0u);
    if (valid) {
      const float4* s =
          reinterpret_cast<const float4*>(tile_row(p, c, cta, k0 + r, true, bad_input)) + 2 * k8;
      const float4 a = s[0], b = s[1];
      h = make_uint4(pack2<false>(a.x, a.y), pack2<false>(a.z, a.w), pack2<false>(b.x, b.y),
                     pack2<false>(b.z, b.w));
    }
    *reinterpret_cast<uint4*>(dst + swizzled_offset(r, 8 * k8, kTileKeys)) = h;
  }
}

// One work item of a decoded tile: 32-dim block b of a row, thread slot t (eight values): decode's
// K fragment decoders give them as f16 pairs (turbo: centroids, times the group's norm here).
// kEmpty: rows outside the range (src null) get zeros. (A row's format is the same for K and V,
// so V tiles go through K's fragment decoders too.)
template <KvType T, bool kEmpty>
__device__ __forceinline__ frag4 item_frag(const uint8_t* src, int b, int t,
                                           const TurboLut<T>& tlut) {
  frag4 f = make_frag4(0u, 0u, 0u, 0u);
  if (!kEmpty || src != nullptr) {
    if constexpr (is_rotated(T)) {
      f = k_frag_turbo<T>(src, b, t, tlut);
      const uint32_t n = turbo_norm<T>(src, b >> 2), n2 = n | (n << 16);
      f = make_frag4(h2_mul(f.x, n2), h2_mul(f.y, n2), h2_mul(f.z, n2), h2_mul(f.w, n2));
    } else if constexpr (is_fp8(T)) {
      f = k_frag_fp8<T>(src, b, t);
    } else {
      f = k_frag_quant<T>(src, b, t);
    }
  }
  return f;
}

// An item's values (item_frag) into row r of the f16 operand tile `dst` (storage domain: turbo
// rotated): k_frag_dim_words puts them in dim order.
template <KvType T>
__device__ __forceinline__ void store_item(const frag4& f, int r, int b, int t, uint8_t* dst) {
  int dim[4];
  uint32_t w[4];
  k_frag_dim_words<T>(f, b, t, dim, w);
  // A run of 2 kRun values starts at a multiple of 2 kRun dims: one swizzle chunk holds it.
  const auto at = [&](int d) { return dst + swizzled_offset(r, d, kTileKeys); };
  constexpr int kRun = k_frag_run_words<T>();
  if constexpr (kRun == 4) {
    *reinterpret_cast<uint4*>(at(dim[0])) = make_uint4(w[0], w[1], w[2], w[3]);
  } else if constexpr (kRun == 2) {
    *reinterpret_cast<uint2*>(at(dim[0])) = make_uint2(w[0], w[1]);
    *reinterpret_cast<uint2*>(at(dim[2])) = make_uint2(w[2], w[3]);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) *reinterpret_cast<uint32_t*>(at(dim[k])) = w[k];
  }
}

// Where a stage's raw rows start in their slots: after one lead for every row (the TMA kernel's
// boxes: the head's offset in the token's row, the same for each), or after each row's own lead
// byte (the threads' copies).
struct OneLead {
  int lead;
  __device__ __forceinline__ int operator()(int) const { return lead; }
};
struct RowLeads {
  const uint8_t* leads;
  __device__ __forceinline__ int operator()(int r) const { return leads[r]; }
};

// A raw tile of quantized type T decoded into the f16 operand tile `dst`, item by item (items:
// row, 32-dim block, thread slot, as item_frag's; `dc` computed dims per row). (Reading every
// item of both tensors into registers before storing any, so that all their shared-memory loads
// are in flight together, ran the quantized TMA kernel 0.88-0.95x: H100, 2026-12-06.) fp8 rows
// hold exactly their `live` dims (no block padding): items past them are zero, not read.
template <KvType T, class Leads>
__device__ __forceinline__ void decode_items(const uint8_t* raw, Leads leads, int slot,
                                             uint8_t* dst, int dc, int live,
                                             const FastDiv& div_items, int tid) {
  const int per_row = dc / 32 * 4, total = kTileKeys * per_row;
  TurboLut<T> tlut;
  if constexpr (is_rotated(T)) tlut.init();
  for (int i = tid; i < total; i += kThreads) {
    const int r = fdiv(i, div_items), bt = i - r * per_row, b = bt >> 2, t = bt & 3;
    const uint8_t* src = raw + r * slot + leads(r);
    if constexpr (is_fp8(T))
      store_item<T>(item_frag<T, true>(32 * b + 8 * t < live ? src : nullptr, b, t, tlut), r, b, t,
                    dst);
    else
      store_item<T>(item_frag<T, false>(src, b, t, tlut), r, b, t, dst);
  }
}

// A stage's raw tiles (K's, V's or both: the tensors of TileMode::raw) decoded into the operand
// tiles at `dec` (+ k_dec_off, v_dec_off).
template <KvType KT, KvType VT, class KLeads, class VLeads>
__device__ __forceinline__ void decode_stage(const PrefillParams& p, const uint8_t* st,
                                             uint8_t* dec, KLeads k_leads, VLeads v_leads,
                                             int tid) {
  if constexpr (tile_mode(KT) == TileMode::raw)
    decode_items<KT>(st + p.k_stage_off, k_leads, p.k_slot, dec + p.k_dec_off, p.dkc, p.dk,
                     p.k_div_items, tid);
  if constexpr (tile_mode(VT) == TileMode::raw)
    decode_items<VT>(st + p.v_stage_off, v_leads, p.v_slot, dec + p.v_dec_off, p.dvc, p.dv,
                     p.v_div_items, tid);
}

// The same for keys [k0, k0 + kTileKeys) read straight from the tensor in global memory (the wide
// instance, which stages no raw rows); rows past the range's end zero.
template <KvType T>
__device__ __forceinline__ void decode_rows(const PrefillParams& p, const TileCopy& c,
                                            const PrefillCta& cta, int64_t k0, uint8_t* dst, int dc,
                                            const FastDiv& div_items, int tid, int* bad_input) {
  const int per_row = dc / 32 * 4, total = kTileKeys * per_row;
  TurboLut<T> tlut;
  if constexpr (is_rotated(T)) tlut.init();
  for (int i = tid; i < total; i += kThreads) {
    const int r = fdiv(i, div_items), bt = i - r * per_row, b = bt >> 2, t = bt & 3;
    const bool valid = k0 + r < cta.keys.hi;
    const uint8_t* src = valid ? tile_row(p, c, cta, k0 + r, true, bad_input) : nullptr;
    store_item<T>(item_frag<T, true>(src, b, t, tlut), r, b, t, dst);
  }
}

// Q's rows of the CTA (kRows of them) into the swizzled operand tile (16-bit, K's MMA type) of
// kDims columns (the instance's: qk_tile's steps past dkc read the zeros), zero past the rows
// and dims; for turbo K rotated group by group (each warp its own rows, through its scratch
// group).
template <KvType KT, int kRows, int kDims>
__device__ __forceinline__ void stage_q(const PrefillParams& p, const PrefillCta& cta, uint8_t* sq,
                                        float* scratch, const uint32_t* sign_words, int tid) {
  constexpr bool kBf16 = KT == KvType::bf16;
  const auto q_row = [&](int r) -> const float* {
    const int rr = cta.row0 + r, tok = fdiv(rr, p.div_group);
    const int qh = cta.kvh * p.group + rr - tok * p.group;
    return p.q + ((cta.q_row0 + tok) * p.n_q_heads + qh) * p.dk;
  };
  if constexpr (is_rotated(KT)) {
    constexpr int kWarpRows = kRows / kWarps;
    const int lane = tid & 31, warp = tid >> 5;
    for (int r = warp * kWarpRows; r < (warp + 1) * kWarpRows; ++r) {
      const bool ok = cta.row0 + r < cta.row_end;
      const float* q = ok ? q_row(r) : nullptr;
      for (int g0 = 0; g0 < kDims; g0 += 128) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int d = g0 + lane + 32 * k;
          scratch[lane + 32 * k] = ok && d < p.dk ? q[d] : 0.0f;
        }
        forward_rotate_group(scratch, lane, sign_words);
#pragma unroll
        for (int k = 0; k < 4; ++k)
          *reinterpret_cast<__half*>(sq + swizzled_offset(r, g0 + lane + 32 * k, kRows)) =
              __float2half_rn(scratch[lane + 32 * k]);
        __syncwarp();
      }
    }
  } else {
    const int per_row = kDims / 4, total = kRows * per_row;
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
      *reinterpret_cast<uint2*>(sq + swizzled_offset(r, d, kRows)) =
          make_uint2(pack2<kBf16>(v.x, v.y), pack2<kBf16>(v.z, v.w));
    }
  }
}

// The CTA-relative row of a warp's local row i (0 .. 16 kMT): warpgroup warp / 4 owns kMT
// blocks of 64 rows, and wgmma gives warp w % 4 rows 16 (w % 4) .. + 15 of each block.
template <int kMT>
__device__ __forceinline__ int warp_row(int warp, int i) {
  return (warp >> 2) * kMT * 64 + (i >> 4) * 64 + (warp & 3) * 16 + (i & 15);
}

template <int N>
__device__ __forceinline__ float (&flat(float (&a)[N / 4][4]))[N] {
  return *reinterpret_cast<float(*)[N]>(&a);
}

// S = Q.K^T for the warpgroup's kMT blocks of 64 rows and the tile's kKeys keys:
// s[m][n-tile][4] (the lane's part, mma.sync's C layout), issued as one committed group (the
// caller waits). One wgmma m64(kKeys)k16 per block and 16-dim step, Q and K read from their
// swizzled tiles (q_rows rows; K: kKeys). The steps run to kMaxDkc (a
// branch between two wgmma would end their chain: the compiler then waits on each); those past
// dkc read Q's zero columns for both operands (stage_q zero-fills Q to kMaxDkc).
template <bool kBf16, int kMT, int kMaxDkc, int kKeys>
__device__ __forceinline__ void qk_tile(float (&s)[kMT][kKeys / 8][4], uint32_t sq_addr,
                                        uint32_t sk_addr, int q_rows, int dkc, int wg) {
  wgmma_fence();
#pragma unroll
  for (int m = 0; m < kMT; ++m) {
    const uint32_t q_block = sq_addr + (wg * kMT + m) * 64 * 128;  // 64 rows = 8 groups of 1024
#pragma unroll
    for (int kc = 0; kc < kMaxDkc / 16; ++kc) {
      const uint32_t col = (kc >> 2) * q_rows * 128 + (kc & 3) * 32;
      const uint32_t k_at =
          16 * kc < dkc ? sk_addr + (kc >> 2) * kKeys * 128 + (kc & 3) * 32 : sq_addr + col;
      wgmma_ss<kKeys, kBf16>(flat<kKeys / 2>(s[m]), sw128_desc(q_block + col, 16, 1024),
                             sw128_desc(k_at, 16, 1024), kc > 0);
    }
  }
  wgmma_commit();
}

// The scores of one M tile into base-2 logits: scale, softcap, ALiBi, mask, and where the tile
// needs it the visibility test (causal, window, the range's end) as -inf. rr: the lane's two rows
// (g, g + 8) of the M tile.
template <int kNt>
__device__ __forceinline__ void score_tile(const PrefillParams& p, const PrefillCta& cta,
                                           float (&s)[kNt][4], const int (&rr)[2], int64_t k0,
                                           bool masked, int t) {
  const bool extras = p.softcap > 0.0f || p.has_alibi || p.has_mask;
  if (!extras && !masked) {
#pragma unroll
    for (int n = 0; n < kNt; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] *= p.scale_log2;
    return;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = min(rr[r], cta.row_end - 1), tok = fdiv(row, p.div_group);
    const int64_t pq = cta.first_q + tok;
    const float slope = p.has_alibi ? p.alibi[cta.kvh * p.group + row - tok * p.group] : 0.0f;
    const float* mask =
        p.has_mask ? p.mask + (int64_t{cta.seq} * p.n_q_tokens + tok) * p.mask_stride : nullptr;
#pragma unroll
    for (int n = 0; n < kNt; ++n) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int64_t key = k0 + n * 8 + 2 * t + c;
        float x = s[n][2 * r + c] * p.scale;
        if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
        if (p.has_alibi) x += slope * static_cast<float>(key - pq);
        bool vis = true;
        if (p.has_mask && key < cta.keys.hi) {
          const float mv = mask[key];
          x += mv;
          vis = mv != -std::numeric_limits<float>::infinity();  // whatever the K row holds
        }
        if (masked) {
          vis = vis && key < cta.keys.hi && (!p.causal || key <= pq) &&
                (p.window <= 0 || pq - key < p.window);
        }
        s[n][2 * r + c] = vis ? x * kStateLog2e : -std::numeric_limits<float>::infinity();
      }
    }
  }
}

// The online softmax over one tile for the lane's two rows of an M tile: new maxima (base 2), the
// weights P in place of the scores, the running sums, and each row's factor `alpha` for its
// accumulators (rescale_o; state_ref's rule: an empty row's reference is 0).
template <int kNt>
__device__ __forceinline__ void softmax_tile(float (&s)[kNt][4], float (&m)[2], float (&l)[2],
                                             float (&alpha)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -std::numeric_limits<float>::infinity();
#pragma unroll
    for (int n = 0; n < kNt; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[r], mx);
    const float ref = state_ref(m_new);
    alpha[r] = exp2_ftz(m[r] - ref);
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < kNt; ++n) {
      s[n][2 * r] = exp2_ftz(s[n][2 * r] - ref);
      s[n][2 * r + 1] = exp2_ftz(s[n][2 * r + 1] - ref);
      sum += s[n][2 * r] + s[n][2 * r + 1];
    }
    l[r] = l[r] * alpha[r] + sum;
    m[r] = m_new;
  }
}

// The accumulators of an M tile's two rows of the lane times their softmax factors.
template <int kVt>
__device__ __forceinline__ void rescale_o(float (&o)[kVt][4], const float (&alpha)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int d = 0; d < kVt; ++d) {
      o[d][2 * r] *= alpha[r];
      o[d][2 * r + 1] *= alpha[r];
    }
}

// P of one M tile as the A operands of P.V's 16-key steps (the accumulator layout of two n-tiles
// is the A operand of one step), packed to 16 bits as soon as the softmax made it, so that the f32
// scores do not stay live beside the accumulators.
template <bool kBf16, int kNt>
__device__ __forceinline__ void pack_p(uint4 (&pa)[kNt / 2], const float (&s)[kNt][4]) {
#pragma unroll
  for (int kc = 0; kc < kNt / 2; ++kc)
    pa[kc] = make_uint4(pack2<kBf16>(s[2 * kc][0], s[2 * kc][1]),
                        pack2<kBf16>(s[2 * kc][2], s[2 * kc][3]),
                        pack2<kBf16>(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                        pack2<kBf16>(s[2 * kc + 1][2], s[2 * kc + 1][3]));
}

// O += P.V for the warpgroup's kMT blocks, issued as one committed group (the caller waits): one
// wgmma m64n(8 kVt)k16 per block and 16-key step, P from registers (pack_p), V's swizzled tile
// read as the MN-major B operand (keys are its rows, its 64-dim atoms kKeys x 128 bytes apart).
template <bool kBf16, int kMT, int kVt, int kKeys>
__device__ __forceinline__ void pv_tile(float (&o)[kMT][kVt][4], const uint4 (&pa)[kMT][kKeys / 16],
                                        uint32_t sv_addr) {
  wgmma_fence();
#pragma unroll
  for (int m = 0; m < kMT; ++m)
#pragma unroll
    for (int kc = 0; kc < kKeys / 16; ++kc)
      wgmma_rs_tb<8 * kVt, kBf16>(flat<4 * kVt>(o[m]), pa[m][kc],
                                  sw128_desc(sv_addr + kc * 16 * 128, kKeys * 128, 1024));
  wgmma_commit();
}

// ---------------------------------------------------------------------------------------------
// The kernels' common parts

// The CTA's coordinates and key range from its block index; false where it has no work (rows
// past its sequence's queries, or ragged offsets that break the rules: nothing read or written).
__device__ __forceinline__ bool prefill_cta(const PrefillParams& p, int rows, int tile,
                                            PrefillCta& cta) {
  cta.seq = blockIdx.z;
  cta.kvh = blockIdx.y;
  // Heaviest row blocks first (with causal masking the last rows see the most keys); the splits
  // of a row block side by side.
  const int block = fdiv(static_cast<int>(blockIdx.x), p.div_splits);
  const int split = static_cast<int>(blockIdx.x) - block * p.n_splits;
  cta.row0 = (p.n_row_blocks - 1 - block) * rows;
  const SeqQueries sq_info = seq_queries(p.q_offsets, cta.seq, p.n_seqs, p.n_q_tokens);
  cta.q_row0 = sq_info.row0;
  cta.q_len = sq_info.len;
  if (!sq_info.ok || cta.row0 >= cta.q_len * p.group) return false;
  cta.row_end = min(cta.row0 + rows, cta.q_len * p.group);
  cta.len = p.kv_lens[cta.seq];
  cta.first_q = cta.len - cta.q_len;
  cta.keys = prefill_split_range(prefill_key_range(cta.len, p.kv_capacity, cta.q_len, p.group,
                                                   p.causal, p.window, cta.row0, cta.row_end),
                                 split, p.n_splits, tile);
  return true;
}

// The shared state a kernel whose threads copy the tiles sets before its first barrier: the turbo
// sign words, zero_hidden_v's marks, and the bad-input flag (a device length outside 0 ..
// kv_capacity).
__device__ __forceinline__ void start_cta(const PrefillParams& p, const PrefillCta& cta,
                                          uint32_t* sign_words, WeighedMarks& marks, int& bad_input,
                                          int tid) {
  if (tid < 4) sign_words[tid] = sign_word(tid);
  if (tid == 0) bad_input = cta.len < 0 || cta.len > p.kv_capacity;
  marks.clear(tid);
  __syncthreads();
}

// A lane's rows and their softmax state: the accumulators o (storage domain), the running maxima
// (base 2) and sums, for row g + 8 r of the warp's 16 in each of its kMT blocks.
template <int kMT, int kVt>
struct LaneRows {
  int row[kMT][2];  // the rows (CTA's row0 included)
  float o[kMT][kVt][4];
  float m[kMT][2], l[kMT][2];

  __device__ __forceinline__ void init(const PrefillCta& cta, int warp, int g) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        row[mt][r] = cta.row0 + warp_row<kMT>(warp, 16 * mt + g + 8 * r);
        m[mt][r] = -std::numeric_limits<float>::infinity();
        l[mt][r] = 0.0f;
      }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int d = 0; d < kVt; ++d) o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
  }
};

// A tile's P (the A operands of P.V, pack_p) from its scores S (qk_tile's, waited): scale,
// visibility and extras (score_tile), the online softmax (the rows' maxima and sums; the factors
// for their accumulators in `alpha`, applied by rescale_o).
template <KvType VT, int DVB, int kKeys>
__device__ __forceinline__ void tile_p(const PrefillParams& p, const PrefillCta& cta,
                                       LaneRows<m_tiles(DVB), v_tiles(DVB)>& st,
                                       float (&s)[m_tiles(DVB)][kKeys / 8][4], int64_t k0,
                                       bool masked, int t, uint4 (&pa)[m_tiles(DVB)][kKeys / 16],
                                       float (&alpha)[m_tiles(DVB)][2]) {
#pragma unroll
  for (int m = 0; m < m_tiles(DVB); ++m) {
    score_tile<kKeys / 8>(p, cta, s[m], st.row[m], k0, masked, t);
    softmax_tile<kKeys / 8>(s[m], st.m[m], st.l[m], alpha[m]);
    pack_p<VT == KvType::bf16, kKeys / 8>(pa[m], s[m]);
  }
}
template <int DVB>
__device__ __forceinline__ void rescale_rows(LaneRows<m_tiles(DVB), v_tiles(DVB)>& st,
                                             const float (&alpha)[m_tiles(DVB)][2]) {
#pragma unroll
  for (int m = 0; m < m_tiles(DVB); ++m) rescale_o<v_tiles(DVB)>(st.o[m], alpha[m]);
}

// O += P.V of a tile issued (pv_tile; the caller waits), the V rows of keys no row weighs zeroed
// first where the tile may hide keys (`hidden_calls` counts zero_hidden_v's calls). The wide
// instance: each warpgroup's P.V over its slice of V's dims.
// Whether a tile's P.V first zeroes the V rows of hidden keys (zero_hidden_v: two barriers of all
// MMA warps): tiles that may hide keys, and every tile under a mask.
__device__ __forceinline__ bool pv_zeroes_hidden(const PrefillParams& p, bool masked) {
  return masked || p.has_mask;
}
template <KvType VT, int DVB, int kKeys>
__device__ __forceinline__ void issue_pv(const PrefillParams& p,
                                         LaneRows<m_tiles(DVB), v_tiles(DVB)>& st,
                                         const uint4 (&pa)[m_tiles(DVB)][kKeys / 16], uint8_t* sv,
                                         bool masked, WeighedMarks& marks, int& hidden_calls,
                                         int tid) {
  constexpr int kMT = m_tiles(DVB), kVt = v_tiles(DVB);
  // (the wide instance: the warpgroup's slice starts kWideSliceDims / 64 atoms into V's tile)
  const int dim0 = is_wide(DVB) ? (tid >> 7) * kWideSliceDims : 0;
  if (pv_zeroes_hidden(p, masked))
    zero_hidden_v<VT == KvType::bf16, kMT, kVt, kKeys>(pa, st.o, sv, DVB / 64, dim0, marks,
                                                       hidden_calls++, tid, tid & 31);
  const uint32_t v_slice = static_cast<uint32_t>(dim0 / 64) * kKeys * 128;
  pv_tile<VT == KvType::bf16, kMT, kVt, kKeys>(st.o, pa, smem_addr(sv) + v_slice);
}

// The operands of an in-flight P.V (the accumulators, P) held in place around its issue and its
// wait (wgmma_fence_operand), where other work runs between them.
template <int DVB, int kPk>
__device__ __forceinline__ void fence_pv_operands(LaneRows<m_tiles(DVB), v_tiles(DVB)>& st,
                                                  uint4 (&pa)[m_tiles(DVB)][kPk]) {
#pragma unroll
  for (int m = 0; m < m_tiles(DVB); ++m) {
    wgmma_fence_operand(flat<4 * v_tiles(DVB)>(st.o[m]));
#pragma unroll
    for (int kc = 0; kc < kPk; ++kc) wgmma_fence_operand(pa[m][kc]);
  }
}

// Keys per tile of an instance (tile_keys: 128 for f16 / bf16 pairs up to 128 dims).
template <KvType KT, KvType VT, int DVB>
inline constexpr int kKeysOf = tile_keys(tile_mode(KT), tile_mode(VT), DVB);

// One tile's S = Q.K^T, scores, online softmax and O += P.V for a warpgroup's rows (sk, sv: the
// tile's operand tiles), each product waited before the next step. The wide instance: both
// warpgroups compute the same rows' S, each P.V over its slice of V's dims.
template <KvType KT, KvType VT, int DVB>
__device__ __forceinline__ void attend_tile(const PrefillParams& p, const PrefillCta& cta,
                                            LaneRows<m_tiles(DVB), v_tiles(DVB)>& st,
                                            uint32_t sq_addr, const uint8_t* sk, uint8_t* sv,
                                            int64_t k0, bool masked, WeighedMarks& marks,
                                            int& hidden_calls, int tid) {
  constexpr int kMT = m_tiles(DVB), kKeys = kKeysOf<KT, VT, DVB>;
  constexpr bool kWide = is_wide(DVB);
  uint4 pa[kMT][kKeys / 16];
  {
    float s[kMT][kKeys / 8][4];
    float alpha[kMT][2];
    qk_tile<KT == KvType::bf16, kMT, qk_dims(KT, DVB), kKeys>(
        s, sq_addr, smem_addr(sk), block_rows(DVB), p.dkc, kWide ? 0 : tid >> 7);
    wgmma_wait<0>();
    tile_p<VT, DVB, kKeys>(p, cta, st, s, k0, masked, tid & 3, pa, alpha);
    rescale_rows<DVB>(st, alpha);
  }
  issue_pv<VT, DVB, kKeys>(p, st, pa, sv, masked, marks, hidden_calls, tid);
  wgmma_wait<0>();
}

// Epilogue (the MMA warps, after a barrier of theirs: the tiles are done, bad_input is final):
// each row's state finalized (sinks, empty rows), the outputs staged in shared memory per warp
// (rotated back for turbo V), then written row by row. A split CTA (n_splits > 1) instead writes
// its rows' partial states (PrefillParts) the same way: o as accumulated (storage domain, not
// rotated), m in natural-log units and l beside it, for prefill_merge_kernel. Bad input: NaN in
// out and lse (in o and l of a partial state, so that the merged row is NaN too).
//
// The wide instance: warps w and w + 4 hold the same rows, each its warpgroup's slice of the dims
// [d0, d1); they stage into the same rows, each its own columns, and write those (the first
// warpgroup the rows' m, l and lse).
template <KvType VT, int DVB>
__device__ __forceinline__ void write_rows(const PrefillParams& p, const PrefillCta& cta,
                                           const LaneRows<m_tiles(DVB), v_tiles(DVB)>& st, bool bad,
                                           uint8_t* smem, const uint32_t* sign_words, int tid) {
  constexpr int kMT = m_tiles(DVB), kVt = v_tiles(DVB), kWarpRows = 16 * kMT;
  constexpr bool kWide = is_wide(DVB);
  // (warp: of the warp's rows; the dims [d0, d1) it writes)
  const int lane = tid & 31, warp = kWide ? (tid >> 5) & 3 : tid >> 5, g = lane >> 2, t = lane & 3;
  const int d0 = kWide ? (tid >> 7) * kWideSliceDims : 0;
  const auto d1 = [&] { return kWide ? min(d0 + kWideSliceDims, p.dvc) : p.dvc; };
  const bool partial = p.n_splits > 1;
  const float nan = __int_as_float(0x7fc00000);
  float* so = reinterpret_cast<float*>(smem) + warp * kWarpRows * p.out_stride;
  // The CTA's partial-state slot (split worked out again from blockIdx: a register held through
  // the tile loop spilled).
  const int x = static_cast<int>(blockIdx.x);
  const int64_t slot = p.parts.slot(cta.seq, cta.kvh, x - fdiv(x, p.div_splits) * p.n_splits,
                                    p.n_kv_heads, p.n_splits);
#pragma unroll
  for (int m = 0; m < kMT; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lr = st.l[m][r];
      lr += __shfl_xor_sync(0xffffffffu, lr, 1);
      lr += __shfl_xor_sync(0xffffffffu, lr, 2);
      const int row = st.row[m][r], tok = fdiv(row, p.div_group);
      const int qh = cta.kvh * p.group + row - tok * p.group;
      const bool valid = row < cta.row_end;
      const StateFinal fin = partial ? StateFinal{1.0f, 0.0f}
                                     : state_final_exp2(st.m[m][r] / kStateLog2e, lr, p.has_sinks,
                                                        p.has_sinks && valid ? p.sinks[qh] : 0.0f);
      // (fp8 V: its rows hold V / v_scale; a partial state is scaled where it is merged)
      const float out_scale = partial ? 1.0f : is_fp8(VT) ? fin.scale * p.v_scale : fin.scale;
      float* orow = so + (16 * m + g + 8 * r) * p.out_stride + d0;
#pragma unroll
      for (int d = 0; d < kVt; ++d) {
        if (d0 + 8 * d < p.dvc)
          *reinterpret_cast<float2*>(orow + 8 * d + 2 * t) =
              make_float2(st.o[m][d][2 * r] * out_scale, st.o[m][d][2 * r + 1] * out_scale);
      }
      if (t == 0 && valid && (!kWide || tid < 128)) {
        if (partial) {
          float* ml = p.part + p.parts.ml_at(slot, row);
          ml[0] = st.m[m][r] / kStateLog2e;
          ml[1] = bad ? nan : lr;
        } else if (p.lse != nullptr) {
          p.lse[(cta.q_row0 + tok) * p.n_q_heads + qh] = bad ? nan : fin.lse;
        }
      }
    }
  }
  __syncwarp();
  for (int r = 0; r < kWarpRows; ++r) {
    const int row = cta.row0 + warp_row<kMT>(warp, r);
    if (row >= cta.row_end) break;
    float* orow = so + r * p.out_stride;
    if (partial) {
      float4* dst = reinterpret_cast<float4*>(p.part + p.parts.o_at(slot, row));
      for (int d4 = d0 / 4 + lane; d4 < d1() / 4; d4 += 32)
        dst[d4] = bad ? make_float4(nan, nan, nan, nan) : reinterpret_cast<const float4*>(orow)[d4];
      continue;
    }
    if constexpr (is_rotated(VT)) {
      for (int g0 = d0; g0 < d1(); g0 += 128) inverse_rotate_group(orow + g0, lane, sign_words);
    }
    const int tok = fdiv(row, p.div_group), qh = cta.kvh * p.group + row - tok * p.group;
    float* dst = p.out + ((cta.q_row0 + tok) * p.n_q_heads + qh) * p.dv;
    for (int d = d0 + lane; d < (kWide ? min(d1(), p.dv) : p.dv); d += 32)
      dst[d] = bad ? nan : orow[d];
  }
}

// The dynamic shared memory from a kSwizzleAlign boundary (smem_total has the slack).
__device__ __forceinline__ uint8_t* aligned_smem(uint8_t* raw) {
  return raw + ((kSwizzleAlign - (smem_addr(raw) & (kSwizzleAlign - 1))) & (kSwizzleAlign - 1));
}

}  // namespace kvflash::cuda::prefill
