// The launch description of the CUDA prefill family, shared by the host (prefill_host.cpp) and
// the kernel instances (prefill_kernel.cuh). Plain data, passed by value to the kernels.
#pragma once

#include <cstdint>

#include "backends/cuda/common/fast_div.hpp"
#include "backends/cuda/common/tensor_map.hpp"
#include "backends/cuda/prefill/prefill_plan.hpp"

namespace kvflash::cuda::prefill {

// How one tensor's tile rows are copied into shared memory (from decode's copy_mode): `unit`-byte
// copies (16, 8 or 4), `units` per row, starting `lead` = address & lead_mask bytes before the
// row (16-byte copies of rows that are not 16-byte aligned, or 4-byte copies of 2-byte aligned
// rows); the row's data sits `lead` bytes into its slot.
struct TileCopy {
  const uint8_t* base;
  const int32_t* pages;    // paged layout: the sequences' page tables (pps entries each)
  int64_t st, sh, ss, sp;  // strides: token, head, sequence (contiguous), page (paged)
  int32_t pps, n_pages;
  int32_t units;
  int16_t unit, lead_mask;  // (16 bits: the struct keeps its size, so PrefillParams its offsets)
  int32_t row_bytes;
  FastDiv div_units;
};

// New fields go at the end: the kernels read the fields in place (a __grid_constant__
// parameter), and moving the offsets of those the tile loops read changes how ptxas groups
// their loads (at 9957741 a field added mid-struct coincided with the f16 TMA kernel running
// 2-4% slower; its tile loop's PTX differed only there).
struct alignas(64) PrefillParams {  // (the tensor maps: 64-byte aligned)
  const float* q;
  const int64_t* kv_lens;
  const int32_t* q_offsets;  // ragged_q: the packed rows' offsets per sequence; else null
  const float* mask;
  const float* sinks;
  const float* alibi;
  float* out;
  float* lse;
  TileCopy k, v;
  int64_t kv_capacity, window, mask_stride;
  int32_t page_size;
  int32_t n_seqs, n_q_tokens, n_q_heads, n_kv_heads, group, rows, n_row_blocks;
  int32_t dk, dv, dkc, dvc;
  // Shared-memory layout (PrefillLayout).
  int32_t block_rows, k_slot, v_slot;
  int32_t q_off, k_stage_off, v_stage_off, stage_bytes, k_lead_off, v_lead_off, k_dec_off,
      v_dec_off, scratch_off, out_stride;
  float scale, scale_log2, softcap;
  float v_scale;  // AttentionProblem::v_scale: the output's factor (fp8 V; else 1)
  uint8_t causal, has_mask, has_sinks, has_alibi, q_vec4;
  FastDiv div_group;
  FastDiv k_div_items, v_div_items;  // decoded tiles: work items (32-dim block, thread) per row
  // KV splits (prefill_splits): n_splits CTAs per row block (grid x = row blocks x n_splits);
  // with more than one, partial states go to `part` (the workspace, laid out as `parts`) and
  // prefill_merge_kernel finalizes the rows (one warp each: div_rows, div_kv_heads).
  float* part;
  PrefillParts parts;
  int32_t n_splits;
  FastDiv div_splits, div_rows, div_kv_heads;
  // The TMA kernel (tma: a tma_kernel_pair whose tensors prefill_tma_view describes): the maps of
  // K's and V's boxes (tma_box_rows rows; direct: 128 bytes, swizzled; raw: the slot), the stages
  // of its ring.
  TensorMapBytes k_map, v_map;
  int32_t tma_box_rows, n_stages;
  uint8_t tma;
  int32_t dec_stride;  // bytes between the decoded sets (PrefillLayout::dec_stride)
};

}  // namespace kvflash::cuda::prefill
