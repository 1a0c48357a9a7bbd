// The end of a CUDA decode CTA (decode_kernel.cuh): the warps' running states, and the epilogue
// that merges the key groups' states through shared memory and either finalizes the CTA's rows
// (one split) or writes its partial state for decode_merge_kernel (decode_merge.cuh).
#pragma once

#include <cstdint>

#include "backends/cuda/decode/decode_cta.cuh"
#include "backends/cuda/decode/decode_device.cuh"

namespace kvflash::cuda::decode {

// A warp's running state: O accumulators and, per query row of the lane, the running maximum and
// sum. NR 1 (keys as the M dimension): O^T tiles o[m][0] for the lane's V dims 2m, 2m + 1 (of
// its nt) and rows 2t, 2t + 1 (m[0][e], l[0][e]: row 2t + e). NR 2 (query rows as M): o[i] for
// V-dim tile i, rows g and g + 8 (m[h], l[h]: row g + 8h).
template <int NR>
struct RunState;
template <>
struct RunState<1> {
  float o[8][1][4], m[1][2], l[1][2];
  __device__ void init() {
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i][0][0] = o[i][0][1] = o[i][0][2] = o[i][0][3] = 0.0f;
    m[0][0] = m[0][1] = kNegInf;
    l[0][0] = l[0][1] = 0.0f;
  }
};
template <>
struct RunState<2> {
  float o[16][4], m[2], l[2];
  __device__ void init() {
#pragma unroll
    for (int i = 0; i < 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    m[0] = m[1] = kNegInf;
    l[0] = l[1] = 0.0f;
  }
};

// The epilogue of decode_kernel (see there for the warp roles): full row sums, the key groups
// merged in shared memory (all of the dynamic shared memory: every tile copy has landed and been
// read), then the rows finalized or the partial state written. Inlined: it is the kernel's code,
// kept apart for size. tl_cta names the CTA's timeline slots (KVFLASH_TIMELINE builds only).
template <KvType VT, int NR>
__device__ __forceinline__ void decode_epilogue(const DecodeParams& p, RunState<NR>& rs,
                                                const CtaCoords& c, uint8_t* smem,
                                                const uint32_t* sign_words, const int* bad_input,
                                                [[maybe_unused]] int64_t tl_cta) {
  const int tid = c.tid, lane = c.lane, warp = c.warp, g = c.g, t = c.t, kg = c.kg, mt = c.mt,
            ds = c.ds, nt = c.nt, row0 = c.row0, rows_here = c.rows_here, seq = c.seq, kvh = c.kvh,
            split = c.split;
  const bool active = c.active;
  // ---- Epilogue: full row sums, then merge the key groups through shared memory.
  // (NR 1: a row's keys are spread over the lanes of the same t; NR 2: over the four t.)
  if constexpr (NR == 1) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      rs.l[0][e] += __shfl_xor_sync(0xffffffffu, rs.l[0][e], 4);
      rs.l[0][e] += __shfl_xor_sync(0xffffffffu, rs.l[0][e], 8);
      rs.l[0][e] += __shfl_xor_sync(0xffffffffu, rs.l[0][e], 16);
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rs.l[h] += __shfl_xor_sync(0xffffffffu, rs.l[h], 1);
      rs.l[h] += __shfl_xor_sync(0xffffffffu, rs.l[h], 2);
    }
  }
  // All of the dynamic shared memory (the Q fragments and the stages: every copy has landed and
  // been read) holds: each warp's accumulators in fragment order (lane-major, 64 floats (NR 1:
  // 32) + 4 of padding per lane: 16-byte stores without bank conflicts), the merged rows in
  // natural order, and per key group m, l and merge weights (decode_layout sizes it).
  constexpr int kFragStride = epilogue_frag_stride(NR);
  float* frag = reinterpret_cast<float*>(smem);           // [kWarps][32][kFragStride]
  float* red = frag + kWarps * 32 * kFragStride;          // [row_block][dvc] merged
  float* red_ml = red + p.row_block * p.dvc;              // [n_kgroups][row_block][2]
  float* red_w = red_ml + p.n_kgroups * p.row_block * 2;  // [n_kgroups][row_block]
  float* ml_final = red_w + p.n_kgroups * p.row_block;    // [row_block][2]
  __syncthreads();
  if (active) {
    float* mine = frag + (warp * 32 + lane) * kFragStride;
    if constexpr (NR == 1) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        if (2 * i < nt)
          *reinterpret_cast<float4*>(mine + 4 * i) =
              make_float4(rs.o[i][0][0], rs.o[i][0][1], rs.o[i][0][2], rs.o[i][0][3]);
      if (g == 0 && ds == 0) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int row = mt * 16 + 2 * t + e;
          red_ml[(kg * p.row_block + row) * 2] = rs.m[0][e];
          red_ml[(kg * p.row_block + row) * 2 + 1] = rs.l[0][e];
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i)
        if (i < nt)
          *reinterpret_cast<float4*>(mine + 4 * i) =
              make_float4(rs.o[i][0], rs.o[i][1], rs.o[i][2], rs.o[i][3]);
      if (t == 0 && ds == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = mt * 16 + g + 8 * h;
          red_ml[(kg * p.row_block + row) * 2] = rs.m[h];
          red_ml[(kg * p.row_block + row) * 2 + 1] = rs.l[h];
        }
      }
    }
  }
  __syncthreads();
  // Per row: the merged maximum and sum, and each key group's weight.
  if (tid < rows_here) {
    const int r = tid;
    float mx = kNegInf;
    for (int k2 = 0; k2 < p.n_kgroups; ++k2) mx = fmaxf(mx, red_ml[(k2 * p.row_block + r) * 2]);
    const float ref = state_ref(mx);
    float l = 0.0f;
    for (int k2 = 0; k2 < p.n_kgroups; ++k2) {
      const float w = state_weight_exp2(red_ml[(k2 * p.row_block + r) * 2], ref);
      red_w[k2 * p.row_block + r] = w;
      l += red_ml[(k2 * p.row_block + r) * 2 + 1] * w;
    }
    ml_final[2 * r] = mx;
    // A length outside 0 .. kv_capacity, or a page table entry outside the pool (the kernel
    // read nothing past the cache or the pool for them; the kernel's bad_input): the row's sum
    // becomes NaN, and with it the sequence's outputs and lse, here or in the merge.
    ml_final[2 * r + 1] = *bad_input != 0 ? __int_as_float(0x7fffffff) : l;
  }
  __syncthreads();
  // Merge the key groups into natural order: element (r, d) sits in the warp of row block r / 16
  // and V slice d / slice_w; with d % slice_w = slot * nt + i (q4_0 and turbo V in 128-dim
  // slices: d % 128 = v_dim16(VT, slot, i)) it is, for NR 1 (r % 16 = 2t + e < 8), lane
  // slot * 4 + t, accumulator o[i / 2], entry 2 (i % 2) + e; for NR 2 (r % 16 = g + 8h, slot =
  // 2t + e), lane g * 4 + t, accumulator o[i], entry 2h + e. Accumulator k is stored at 4k.
  constexpr bool kVDim16 = VT == KvType::q4_0 || is_rotated(VT);
  for (int idx = tid; idx < rows_here * p.dvc; idx += kThreads) {
    const int r = fdiv(idx, p.div_dvc), d = idx - r * p.dvc;
    const int rm = r & 15;
    const int ds_r = fdiv(d, p.div_slice_w), rem = d - ds_r * p.slice_w;
    int slot, i;
    if (kVDim16 && nt == 16) {
      v_tile16(VT, rem, slot, i);
    } else {
      slot = fdiv(rem, p.div_nt);
      i = rem - slot * nt;
    }
    const int item_r = ds_r * p.n_mtiles + (r >> 4);
    const int off =
        NR == 1 ? (slot * 4 + (rm >> 1)) * kFragStride + 4 * (i >> 1) + 2 * (i & 1) + (rm & 1)
                : ((rm & 7) * 4 + (slot >> 1)) * kFragStride + 4 * i + 2 * (rm >> 3) + (slot & 1);
    float acc = 0.0f;
    for (int k2 = 0; k2 < p.n_kgroups; ++k2)
      acc +=
          frag[(item_r * p.n_kgroups + k2) * 32 * kFragStride + off] * red_w[k2 * p.row_block + r];
    red[idx] = acc;
  }
  __syncthreads();

  KVFLASH_TL(tl_cta, 5);
  if (p.n_splits == 1) {
    for (int r = warp; r < rows_here; r += kWarps) {
      const int rr = row0 + r, tok = fdiv(rr, p.div_group), qh = kvh * p.group + rr - tok * p.group;
      const int64_t out_row = (int64_t{seq} * p.n_q_tokens + tok) * p.n_q_heads + qh;
      finalize_row<VT>(p, red + r * p.dvc, ml_final[2 * r], ml_final[2 * r + 1], out_row, qh, lane,
                       sign_words);
    }
  } else {
    // Partial state for decode_merge_kernel: o at part_o(seq, kvh, split) [rows][dvc], and m, l
    // at part_ml(...) [rows][2] (all o blocks first, so each o row stays 16-byte aligned).
    const int64_t slot = (int64_t{seq} * p.n_kv_heads + kvh) * p.n_splits + split;
    float* po = p.part + slot * p.rows * p.dvc + int64_t{row0} * p.dvc;
    for (int i = tid; i < rows_here * p.dvc; i += kThreads) po[i] = red[i];
    float* pml = p.part + int64_t{p.n_seqs} * p.n_kv_heads * p.n_splits * p.rows * p.dvc +
                 slot * p.rows * 2 + 2 * row0;
    for (int i = tid; i < rows_here * 2; i += kThreads) pml[i] = ml_final[i];
  }
  KVFLASH_TL(tl_cta, 6);
}

}  // namespace kvflash::cuda::decode
