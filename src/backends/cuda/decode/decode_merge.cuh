// The split merge of the CUDA decode family: one CTA per (sequence, KV head, query row) folds the
// n_splits partial states the decode grid wrote to the workspace and finalizes the row. Launched
// by decode.cu as a programmatic dependent of the decode grid.
#pragma once

#include <cstdint>

#include "backends/cuda/decode/decode_device.cuh"
#include "backends/cuda/decode/decode_params.hpp"

namespace kvflash::cuda::decode {

// Merges the n_splits partial states of one (sequence, KV head, row) per CTA and finalizes it.
// Warp w of W (8 or 16: merge_warps) takes splits w, w + W, ...,
// kMergeBatch of them per round with all their loads (m, l and o; lanes hold 4 dims each, 16-byte
// loads) in flight at once, and folds each round into its running state like the online softmax;
// the warps' states meet in shared memory. Up to kMergeWarps * kMergeBatch = 128 splits take one
// memory round trip after the decode grid. (Sixteen warps for every split count made 8-token
// calls at 4K slower: 256 merge CTAs of mostly idle warps. W is a compile-time constant: with a
// run-time warp count the loads of a round spill.)
template <KvType VT, int W>
__global__ void __launch_bounds__(32 * W) decode_merge_kernel(const DecodeParams p) {
  constexpr int kBatch = kMergeBatch;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ uint32_t sign_words[4];
  __shared__ float warp_m[W], warp_l[W];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int n_warps = W;
#ifdef KVFLASH_TIMELINE
  const int64_t tl_cta = p.tl_merge0 + blockIdx.x;
#endif
  KVFLASH_TL(tl_cta, 0);
  if (tid < 4) sign_words[tid] = sign_word(tid);
  const int64_t row_id = blockIdx.x;  // over seqs x kv heads x rows
  // (seqs x kv heads x rows < 2^31: the plan caps sequences at 65535)
  const int head_row = fdiv(static_cast<int>(row_id), p.div_rows);  // seq * n_kv_heads + kvh
  const int r = static_cast<int>(row_id) - head_row * p.rows;
  const int seq = fdiv(head_row, p.div_kv_heads);
  const int kvh = head_row - seq * p.n_kv_heads;
  const int64_t slot0 = (int64_t{seq} * p.n_kv_heads + kvh) * p.n_splits;
  const float* ml = p.part + int64_t{p.n_seqs} * p.n_kv_heads * p.n_splits * p.rows * p.dvc +
                    slot0 * p.rows * 2 + 2 * r;
  const int64_t ml_stride = int64_t{p.rows} * 2;
  const float* po = p.part + slot0 * p.rows * p.dvc + int64_t{r} * p.dvc;
  const int64_t o_stride = int64_t{p.rows} * p.dvc;
  const int nv4 = p.dvc / 4;
  // Launched as a programmatic dependent of the decode grid: whatever follows on the stream (the
  // next layer's decode grid) may launch now and wait in its own griddepcontrol.wait for this
  // grid to complete.
  asm volatile("griddepcontrol.launch_dependents;");
  // (No code-warming pass before the wait: running the merge's code once with its global
  // accesses off while the decode grid finished (6769673) made isolated 4K calls 5-7% faster but
  // a 32-layer decode step at 4K 6-10% slower, bench/results/2026-12-03-h200-loop-bisect at
  // 81dc2e0.)
  asm volatile("griddepcontrol.wait;" ::: "memory");
  KVFLASH_TL(tl_cta, 1);

  float m_w = kNegInf, l_w = 0.0f;
  float4 acc[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s0 = warp; s0 < p.n_splits; s0 += n_warps * kBatch) {
    float ms[kBatch], ls[kBatch];
    float4 v[4][kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int s = s0 + b * n_warps;
      const bool ok = s < p.n_splits;
      ms[b] = ok ? ml[s * ml_stride] : kNegInf;
      ls[b] = ok ? ml[s * ml_stride + 1] : 0.0f;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int d4 = lane + 32 * k;
        v[k][b] = ok && d4 < nv4 ? reinterpret_cast<const float4*>(po + s * o_stride)[d4]
                                 : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
    float m_new = m_w;
#pragma unroll
    for (int b = 0; b < kBatch; ++b) m_new = fmaxf(m_new, ms[b]);
    const float ref = state_ref(m_new);
    const float keep = state_weight_exp2(m_w, ref);
    float w[kBatch];
    l_w *= keep;
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      w[b] = state_weight_exp2(ms[b], ref);
      l_w += ls[b] * w[b];
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float4 a = make_float4(acc[k].x * keep, acc[k].y * keep, acc[k].z * keep, acc[k].w * keep);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        a.x += v[k][b].x * w[b];
        a.y += v[k][b].y * w[b];
        a.z += v[k][b].z * w[b];
        a.w += v[k][b].w * w[b];
      }
      acc[k] = a;
    }
    m_w = m_new;
  }
  if (lane == 0) {
    warp_m[warp] = m_w;
    warp_l[warp] = l_w;
  }
  __syncthreads();
  float mx = kNegInf;
#pragma unroll
  for (int i = 0; i < n_warps; ++i) mx = fmaxf(mx, warp_m[i]);
  const float ref = state_ref(mx);
  const float f = state_weight_exp2(m_w, ref);  // this warp's weight (0 when it saw nothing)
  float* red = reinterpret_cast<float*>(smem);  // [n_warps][dvc]
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int d4 = lane + 32 * k;
    if (d4 < nv4)
      reinterpret_cast<float4*>(red + warp * p.dvc)[d4] =
          make_float4(acc[k].x * f, acc[k].y * f, acc[k].z * f, acc[k].w * f);
  }
  __syncthreads();
  for (int d = tid; d < p.dvc; d += 32 * W) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < n_warps; ++i) sum += red[i * p.dvc + d];
    red[d] = sum;
  }
  __syncthreads();
  if (warp == 0) {
    float l = 0.0f;
#pragma unroll
    for (int i = 0; i < n_warps; ++i) l += warp_l[i] * state_weight_exp2(warp_m[i], ref);
    const int tok = fdiv(r, p.div_group), qh = kvh * p.group + r - tok * p.group;
    const int64_t out_row = (int64_t{seq} * p.n_q_tokens + tok) * p.n_q_heads + qh;
    finalize_row<VT>(p, red, mx, l, out_row, qh, lane, sign_words);
    KVFLASH_TL(tl_cta, 2);
  }
}

}  // namespace kvflash::cuda::decode
