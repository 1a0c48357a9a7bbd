// The launch description of the CUDA decode family, shared by the host planner (decode.cu) and
// the kernel instances (decode_kernel.cuh). Plain data, passed by value to the kernels.
#pragma once

#include <cstdint>

#include "backends/cuda/common/fast_div.hpp"
#include "backends/cuda/common/tensor_map.hpp"

namespace kvflash::cuda::decode {

inline constexpr int kThreads = 128;  // 4 warps per CTA
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kMaxStages = 3;  // shared-memory stages of raw K/V tiles (2 in flight)
// The K-split kernel (one n-tile, V dims split over warps: decode_layout's k_split): the warps
// that share keys split K's dims too and exchange their partial scores, [key group][V slice][2
// buffers][32 lanes] x 4 floats, at the end of the Q region.
inline constexpr int kScoreXchgBytes = kWarps * 2 * 32 * 16;
// CTAs per SM the decode kernel is built for (__launch_bounds__: at most 128 registers) and its
// shared-memory stages are sized for. (5 CTAs at 96 registers for the one-n-tile kernel over
// quantized K/V, measured: q8_0 at 1M tokens 15% slower, q4_0 / turbo at 32K 6-10% slower,
// bench/results/2026-12-01-h200-five-ctas-ab at 239461c.)
inline constexpr int kCtasPerSm = 4;
// The split merge: 16 warps per CTA (one CTA per query row), 8 splits per warp per round: up to
// 128 splits in one round (the 4-CTA plan takes 66 at 32/8 heads on 132 SMs; 8 warps took two).
inline constexpr int kMergeThreads = 512;
inline constexpr int kMergeWarps = kMergeThreads / 32;
inline constexpr int kMergeBatch = 8;
// Warps of a merge CTA: 8, or 16 where 8 would take two rounds (kMergeBatch splits per warp and
// round).
constexpr int merge_warps(int n_splits) {
  return n_splits > kMergeBatch * kMergeWarps / 2 ? kMergeWarps : kMergeWarps / 2;
}

struct DecodeParams {
  // Tile copies by TMA (tma_k / tma_v set), the tensor viewed as [seq][token][bytes of all
  // heads], at coordinates (head * stride_head rounded down to 16, key, sequence); box starts must
  // be 16-byte aligned, so a row lands after its lead (k_lead16 / v_lead16 set). Boxes are rows
  // sk_stride / sv_stride bytes wide (the shared-memory slot): k_map / v_map bk rows (a whole
  // tile), k_step_map / v_step_map tma_box rows (tile_box: one 16-key step per key group, for the
  // last tile of a range that ends inside it with at most tma_step_rows keys: tile_step_rows).
  // tma_bytes / tma_step_bytes: both tensors' bytes of one box, the transaction count of a
  // stage's barrier per box.
  TensorMapBytes k_map, v_map, k_step_map, v_step_map;
  uint8_t tma_k, tma_v;
  int32_t tma_bytes, tma_step_bytes, tma_box, tma_step_rows;

  const float* q;
  const uint8_t* k;
  const uint8_t* v;
  const int64_t* kv_lens;
  const float* mask;
  const float* sinks;
  const float* alibi;
  float* out;
  float* lse;
  float* part;  // workspace: partial states, see part_o / part_ml below
#ifdef KVFLASH_TIMELINE
  unsigned long long* tl;  // diagnostics: per-CTA phase timestamps (KVFLASH_TL)
  int64_t tl_merge0;       // the first merge CTA's slot (after the decode grid's CTAs)
#endif

  int64_t k_st, k_sh, k_ss;  // K strides in bytes: token, head, sequence
  int64_t v_st, v_sh, v_ss;
  // Paged K/V (page_size > 0): row (seq, token, head) at k + k_pages[seq * k_pps + token /
  // page_size] * k_sp + (token % page_size) * k_st + head * k_sh (k_ss = 0).
  const int32_t* k_pages;
  const int32_t* v_pages;
  int64_t k_sp, v_sp;
  int32_t page_size, k_pps, v_pps;
  int32_t k_np, v_np;  // pages in the pool (n_pages, at most 2^31 - 1: entries are int32)
  int64_t mask_stride;
  int64_t window;
  float scale;
  float softcap;

  int32_t n_seqs, n_q_tokens, n_q_heads, n_kv_heads, group, rows;  // rows = n_q_tokens * group
  int32_t dk, dv;                                                  // the problem's head dims
  int32_t dkc, dvc;  // computed dims: padded to the type's block (turbo: 128), K to 32
  int32_t k_row_bytes, v_row_bytes;
  int32_t k_unit, v_unit;  // cp.async unit for the tile copy: 16, 8 or 4 bytes
  // 16-byte units from the row's start rounded down to 16 (rows at any even address whose token
  // stride is a multiple of 16: the lead, address & 15, is the same for every row of a CTA).
  uint8_t k_lead16, v_lead16;
  int32_t sk_stride, sv_stride;  // shared-memory row strides in bytes (multiples of 16)
  int32_t bk;                    // keys per shared-memory tile (multiple of 16 * n_kgroups)
  int32_t row_block;             // query rows per CTA (16 * n_mtiles)
  int32_t n_row_blocks;
  int32_t n_mtiles, n_dslices, n_kgroups;  // warps = n_mtiles * n_dslices * n_kgroups <= 4
  int32_t slice_w;                         // V dims per warp slice (dvc / n_dslices, multiple of 8)
  // The K-split kernel (decode_layout's k_split): each V slice's warp takes k_share of K's
  // 32-dim blocks. Else k_share = dkc / 32.
  int32_t k_share;
  int32_t n_splits;       // KV splits per (sequence, KV head, row block)
  int32_t smem_q_bytes;   // Q fragments
  int32_t smem_kv_bytes;  // one stage of K and V tiles
  int32_t n_stages;       // 3, or 2 where three do not fit
  uint8_t causal, has_mask, has_sinks, has_alibi;
  uint8_t q_vec4;       // q and its rows are 16-byte aligned: 16-byte loads in the prologue
  uint8_t zero_stages;  // K rows are read past their stored bytes (zero padding dims)
  // Divisors of the kernels' index arithmetic (fast_div of the field named).
  FastDiv div_row_blocks, div_splits, div_group, div_bk, div_q4 /* dkc / 4 */,
      div_chunks /* dkc / 16 */, div_dvc, div_slice_w, div_nt /* slice_w / 8 */, div_rows,
      div_kv_heads, div_stages;
  FastDiv div_k_units, div_v_units;  // copy units per K / V row (see copy_rows)
  int32_t k_pass, v_pass;            // rows per pass of the tile copy: kThreads / units
  int64_t kv_capacity;  // a length outside 0 .. kv_capacity reads no key and gives NaN rows
  FastDiv div_page;     // page_size (paged tensors: copy_tile_paged, the paged TMA boxes)
  float v_scale;        // AttentionProblem::v_scale: the output's factor (fp8 V; else 1)
};

}  // namespace kvflash::cuda::decode
