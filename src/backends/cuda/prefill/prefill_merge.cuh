// The split merge of the CUDA prefill family: one warp per (sequence, KV head, query row) folds
// the n_splits partial states the prefill grid wrote (write_partial, laid out as PrefillParts)
// with the state rule of kvflash/state.hpp (state_ref, state_weight_exp2, state_final_exp2: the
// same rule as every other merge and finalize) and writes the row: rotated back for turbo V,
// sinks, out and lse. Rows past a ragged sequence's queries, and sequences whose offsets break
// the rules, are skipped, as the prefill grid skipped them.
#pragma once

#include <cstdint>
#include <limits>

#include "backends/cuda/common/fast_div.hpp"
#include "backends/cuda/common/turbo_rotate.cuh"
#include "backends/cuda/prefill/prefill_params.hpp"
#include "backends/cuda/prefill/prefill_plan.hpp"
#include "kvflash/state.hpp"

namespace kvflash::cuda::prefill {

// Dynamic shared memory: one row of dvc floats per warp (the merged o, rotated in place).
template <bool kRotatedV>
__global__ void __launch_bounds__(kThreads)
    prefill_merge_kernel(const __grid_constant__ PrefillParams p) {
  extern __shared__ __align__(16) float merged[];
  __shared__ uint32_t sign_words[4];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (kRotatedV && tid < 4) sign_words[tid] = sign_word(tid);
  if (kRotatedV) __syncthreads();

  // The warp's row: (sequence x KV head) x rows, fewer than 2^31 (the plan splits only grids
  // smaller than the device).
  const int id = static_cast<int>(blockIdx.x) * kWarps + warp;
  if (id >= p.n_seqs * p.n_kv_heads * p.rows) return;
  const int head_row = fdiv(id, p.div_rows), r = id - head_row * p.rows;
  const int seq = fdiv(head_row, p.div_kv_heads), kvh = head_row - seq * p.n_kv_heads;
  const SeqQueries sq = seq_queries(p.q_offsets, seq, p.n_seqs, p.n_q_tokens);
  if (r >= sq.len * p.group) return;
  const int tok = fdiv(r, p.div_group), qh = kvh * p.group + r - tok * p.group;
  const int64_t slot0 = p.parts.slot(seq, kvh, 0, p.n_kv_heads, p.n_splits);

  // The reference: the largest m of the splits.
  float m_max = -std::numeric_limits<float>::infinity();
  for (int s = lane; s < p.n_splits; s += 32)
    m_max = fmaxf(m_max, p.part[p.parts.ml_at(slot0 + s, r)]);
#pragma unroll
  for (int k = 16; k > 0; k >>= 1) m_max = fmaxf(m_max, __shfl_xor_sync(0xffffffffu, m_max, k));
  const float ref = state_ref(m_max);

  // o and l folded with each split's weight, 256 dims at a time: lanes hold float4s d4 = c + lane,
  // c + lane + 32.
  const int nv4 = p.dvc / 4;
  float* row = merged + warp * p.dvc;
  float l = 0.0f;
  for (int c = 0; c < nv4; c += 64) {
    float4 acc[2] = {make_float4(0.f, 0.f, 0.f, 0.f), make_float4(0.f, 0.f, 0.f, 0.f)};
    l = 0.0f;
    for (int s = 0; s < p.n_splits; ++s) {
      const float* ml = p.part + p.parts.ml_at(slot0 + s, r);
      const float w = state_weight_exp2(ml[0], ref);
      l += ml[1] * w;
      const float4* o = reinterpret_cast<const float4*>(p.part + p.parts.o_at(slot0 + s, r));
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int d4 = c + lane + 32 * k;
        if (d4 < nv4) {
          const float4 v = o[d4];
          acc[k].x += v.x * w;
          acc[k].y += v.y * w;
          acc[k].z += v.z * w;
          acc[k].w += v.w * w;
        }
      }
    }
#pragma unroll
    for (int k = 0; k < 2; ++k)
      if (c + lane + 32 * k < nv4) reinterpret_cast<float4*>(row)[c + lane + 32 * k] = acc[k];
  }
  __syncwarp();
  if constexpr (kRotatedV) {
    for (int g0 = 0; g0 < p.dvc; g0 += 128) inverse_rotate_group(row + g0, lane, sign_words);
  }
  const StateFinal fin = state_final_exp2(m_max, l, p.has_sinks, p.has_sinks ? p.sinks[qh] : 0.0f);
  const int64_t out_row = (sq.row0 + tok) * p.n_q_heads + qh;
  float* dst = p.out + out_row * p.dv;
  const float scale = fin.scale * p.v_scale;  // (fp8 V: its rows hold V / v_scale)
  for (int d = lane; d < p.dv; d += 32) dst[d] = row[d] * scale;
  if (lane == 0 && p.lse != nullptr) p.lse[out_row] = fin.lse;
}

template <bool kRotatedV>
void launch_prefill_merge(const PrefillParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  prefill_merge_kernel<kRotatedV><<<grid, kThreads, smem, stream>>>(p);
}

}  // namespace kvflash::cuda::prefill
