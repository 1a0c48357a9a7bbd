// Host-side planning of the CUDA prefill family: the CTA's tiles, its shared-memory regions and
// the key range each CTA visits. Pure functions of the problem, plain C++ (built without CUDA
// too), with CPU tests (tests/backends/cuda_prefill_plan_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cuda/common/kv_tma_view.hpp"
#include "backends/cuda/common/routing.hpp"  // min_prefill_q_tokens
#include "kvflash/problem.hpp"

namespace kvflash::cuda::prefill {

// One CTA: 8 warps in two warpgroups, each warpgroup owning m_tiles(dv_bucket) blocks of 64 query
// rows (token x head of the GQA group, token-major as in decode), over tiles of 64 keys (128 where
// both tensors are f16 / bf16 and the dims at most 128: tile_keys); each
// block is one warpgroup MMA (wgmma m64) per 16-dim step, so every K/V operand read from shared
// memory feeds 64 rows. One block per warpgroup (two spilled 264 bytes at V dims 128: the
// accumulators are 2 x (64 + 32) registers per lane). Each warp holds 16 rows of every block of
// its warpgroup.
inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kTileKeys = 64;  // keys per tile, but for tile_keys' 128
inline constexpr int kMaxTileKeys = 128;
constexpr int m_tiles(int) {
  return 1;
}
// The wide instance (V dims above 256, K dims above 256: head dims 512 and 576/512): both
// warpgroups own the same 64 rows, each 256 of the V dims (the accumulators of 512 would not fit
// one warpgroup's registers), and each computes the rows' S = Q.K^T itself; one buffer per tensor
// (a 576-dim K tile is 72 KiB), quantized tiles decoded by the threads straight from global memory
// into the operand tile.
inline constexpr int kWideBucket = 512;
inline constexpr int kWideSliceDims = 256;  // V dims per warpgroup
constexpr bool is_wide(int dv_bucket) {
  return dv_bucket > 256;
}
constexpr int block_rows(int dv_bucket) {  // query rows per CTA
  return is_wide(dv_bucket) ? 64 : 16 * m_tiles(dv_bucket) * kWarps;
}
// The n-tiles (8 V dims) of a warpgroup's accumulators.
constexpr int v_tiles(int dv_bucket) {
  return (is_wide(dv_bucket) ? kWideSliceDims : dv_bucket) / 8;
}
inline constexpr int kStages = 2;  // K/V tiles in flight: the next one loads while one computes
// The TMA kernel (f16 / bf16 K and V): the two MMA warpgroups and a producer warpgroup whose one
// thread issues each tile's copies into a ring of up to kMaxTmaStages stages (as many as fit
// kTmaSmemBudget), each with a full and an empty mbarrier.
inline constexpr int kTmaThreads = kThreads + 128;
inline constexpr int kMaxTmaStages = 4;
inline constexpr int32_t kTmaSmemBudget = 224 * 1024;

// How a tensor's tiles reach the MMA operand tile (16-bit rows):
//   direct   f16 / bf16: cp.async straight into each stage's operand tile;
//   raw      quantized: cp.async of the raw rows into the stage, then decoded on chip into one
//            f16 operand tile;
//   convert  f32: read and converted to f16 by the threads into that operand tile when the tile
//            is used (f32 rows staged raw would take 4x the bytes of f16 ones: 256-dim tiles
//            would not fit).
enum class TileMode { direct, raw, convert };
constexpr TileMode tile_mode(KvType t) {
  if (t == KvType::f16 || t == KvType::bf16) return TileMode::direct;
  return t == KvType::f32 ? TileMode::convert : TileMode::raw;
}

// Keys per tile: 128 where both tensors are read straight into the operand tiles (f16 / bf16) and
// the instance's dims are at most 128 (S of a warpgroup is then m64n128: half the softmax
// reductions, barriers and accumulator rescales per key of 64-key tiles; S 64 + P 32 + O 64
// registers a thread), else kTileKeys (quantized tiles are decoded into sets that would not fit
// at 128 keys; 256 V dims hold 128 accumulators). Splits, stages and the visibility test follow.
constexpr int32_t tile_keys(TileMode k, TileMode v, int32_t dv_bucket) {
  return k == TileMode::direct && v == TileMode::direct && dv_bucket <= 128 ? kMaxTileKeys
                                                                            : kTileKeys;
}

// Whether a pair's tiles may take the TMA kernel: no f32 tensor (its rows are converted when
// used), and quantized ones only in the 128-dim instance (its MMA warps decode the tiles within
// the 232 registers the producer warpgroup leaves them).
constexpr bool tma_kernel_pair(TileMode k, TileMode v, int32_t dv_bucket) {
  if (k == TileMode::convert || v == TileMode::convert || is_wide(dv_bucket)) return false;
  return (k == TileMode::direct && v == TileMode::direct) || dv_bucket <= 128;
}
// Whether the TMA kernel's MMA warps overlap a tile's softmax with the previous tile's P.V (issued
// before the softmax, waited after it): in the 128-dim instance, whose ring holds 3-4 stages. A
// tile's stage and decoded set then stay in use one tile longer: three decoded sets (tile j is
// decoded while P.V of tile j - 1 may still read its set). The 256-dim instance (two stages fit)
// waits for each product before the next step.
constexpr bool tma_overlaps_pv(int32_t dv_bucket) {
  return dv_bucket <= 128;
}
constexpr int32_t tma_dec_sets(int32_t dv_bucket) {
  return tma_overlaps_pv(dv_bucket) ? 3 : 2;
}

// The kernel instances: 128 when both computed dims are at most 128, 256 when both are at most
// 256 (the accumulators of 256 V dims), else the wide one (kWideBucket).
constexpr int32_t dims_bucket(int32_t dkc, int32_t dvc) {
  if (dkc <= 128 && dvc <= 128) return 128;
  return dkc <= 256 && dvc <= 256 ? 256 : kWideBucket;
}
// The Q operand tile's columns, the dims qk_tile steps over (those past dkc read Q's zeros): the
// bucket, or for the wide instance the largest computed K dim of the supported space (576, turbo
// padded to 640). Computed dims above it (or V dims above kWideBucket) are not served.
constexpr int32_t qk_dims(KvType k, int32_t dv_bucket) {
  if (!is_wide(dv_bucket)) return dv_bucket;
  return is_rotated(k) ? 640 : 576;
}

// Operand tiles (Q, and K / V as the MMAs read them) in the 128-byte swizzle of Hopper's warpgroup
// MMA (common/wgmma.cuh): columns in blocks ("atoms") of 64 16-bit values, an atom's rows 128
// bytes each in groups of 8 rows (1024 bytes), the 16-byte chunk c of row r at chunk c ^ (r % 8)
// so that the eight rows an MMA reads at once fall in distinct banks. A tile of `rows` rows (a
// multiple of 8) and `dims` columns takes ceil(dims / 64) atoms of rows x 128 bytes, 1024-byte
// aligned. One formula for the threads that write the tiles and the descriptors that read them.
KVFLASH_HD constexpr int32_t swizzled_offset(int32_t row, int32_t dim, int32_t rows) {
  return (dim >> 6) * rows * 128 + (row >> 3) * 1024 + (row & 7) * 128 +
         ((((dim >> 3) & 7) ^ (row & 7)) << 4) + (dim & 7) * 2;
}
KVFLASH_HD constexpr int32_t swizzled_bytes(int32_t rows, int32_t dims) {
  return (dims + 63) / 64 * rows * 128;
}
inline constexpr int32_t kSwizzleAlign = 1024;

// Shared-memory regions (byte offsets from the dynamic base, which the kernel aligns to
// kSwizzleAlign; operand tiles at multiples of it, the rest 16-byte aligned).
struct PrefillLayout {
  int32_t dkc = 0, dvc = 0;  // computed dims (multiples of 16): K padded to its type's blocks
  int32_t dv_bucket = 128;   // the kernel instance (dims_bucket): its accumulators' V dims
  int32_t k_row_bytes = 0, v_row_bytes = 0;
  TileMode k_mode = TileMode::direct, v_mode = TileMode::direct;
  int32_t k_slot = 0, v_slot = 0;  // bytes per raw row (raw tensors): the row and its lead
  int32_t block_rows = 0;          // query rows per CTA (block_rows(dv_bucket))
  int32_t tile_keys = kTileKeys;   // keys per tile (tile_keys())
  int32_t q_off = 0;               // Q operand tile (block_rows rows x qk_dims)
  // Per stage: K's tile (direct: the operand tile of tile_keys x dkc; raw: slots and their lead
  // bytes), then V's (operand tile of tile_keys x dv_bucket: the P.V MMA reads every column of
  // the instance). Stage s at off + s * stage_bytes.
  int32_t k_stage_off = 0, v_stage_off = 0, stage_bytes = 0;
  int32_t n_stages = kStages;  // stages laid out: more for the TMA kernel (tma_kernel_pair)
  int32_t k_lead_off = 0, v_lead_off = 0;  // per stage: one lead byte per raw row (raw)
  int32_t k_dec_off = 0, v_dec_off = 0;    // the decoded operand tiles (raw, convert)
  // Decoded tiles come in n_dec sets dec_stride bytes apart: for the TMA kernel two (tile j
  // decoded into set j % 2 while the other warpgroup may still read set (j - 1) % 2) or three
  // (tma_overlaps_pv: and P.V of tile j - 1 may still read its set), one else.
  // The wide instance: one stage of the direct tensors' operand tiles, no raw slots (quantized
  // and f32 tiles are decoded from global memory into their k_dec_off / v_dec_off tiles).
  int32_t n_dec = 1, dec_stride = 0;
  int32_t scratch_off = 0;  // turbo K: one 128-float group per warp for Q's rotation (the wide
                            // instance: in K's operand tile, unused until the first tile)
  int32_t out_stride = 0;   // floats per row of the epilogue's output staging
  size_t smem_main = 0, smem_epilogue = 0, smem_total = 0;  // total: + the alignment slack
  int32_t n_row_blocks = 0;                                 // CTAs per (sequence, KV head)
};

// How TMA copies a tensor's tiles for the TMA kernel: kv_tma_view's view (common/kv_tma_view.hpp)
// with one box = box_rows rows x box_bytes: for a direct tensor 128 bytes (one 64-dim atom of the
// operand tile, in its 128-byte swizzle) from the head's row, for a raw one its slot from the
// head's row rounded down to 16 bytes (the row lands after that lead, the same for every row, as
// the raw stage holds it). Paged tensors: boxes never cross a page (box_rows divides page_size
// and kTileKeys; no window, so tiles start at multiples of kTileKeys, which divides tile_keys).
// Nothing where TMA cannot describe it (the kernel without TMA runs): what kv_tma_view refuses, a
// head stride not a multiple of 16 bytes for a direct tensor, a box over 256 bytes or not holding
// the widest lead and the row, pages not a multiple of 16 tokens.
struct PrefillTmaView : KvTmaView {
  int32_t box_rows = 0;
};
bool prefill_tma_view(const KvTmaTensor& kv, int32_t row_bytes, int32_t box_bytes, bool direct,
                      const AttentionProblem& p, PrefillTmaView& view);

// Dims the prefill kernel computes over: float types their own (every supported head dim is a
// multiple of 16), quantized types padded to their block (turbo: the rotation's 128-value group).
int32_t prefill_dim(KvType t, int32_t d);

PrefillLayout prefill_layout(const AttentionProblem& p);

// The keys a CTA of query rows [row0, row_end) visits in a sequence of `len` keys (the kernel's
// formula, the same code): every key any of its rows may see, [lo, hi).
struct PrefillKeyRange {
  int64_t lo = 0, hi = 0;
};
KVFLASH_HD PrefillKeyRange prefill_key_range(int64_t len, int64_t capacity, int32_t n_q_tokens,
                                             int32_t group, bool causal, int64_t window,
                                             int32_t row0, int32_t row_end) {
  const int64_t first_q = len - n_q_tokens;  // position of query token 0
  const int64_t pq_lo = first_q + row0 / group, pq_hi = first_q + (row_end - 1) / group;
  int64_t hi = len < 0 ? 0 : (len < capacity ? len : capacity);
  if (causal && pq_hi + 1 < hi) hi = pq_hi + 1 < 0 ? 0 : pq_hi + 1;
  int64_t lo = 0;
  if (window > 0 && pq_lo - window + 1 > lo) lo = pq_lo - window + 1;
  if (hi < lo) hi = lo;
  return {lo, hi};
}

// KV splits: where the grid (row blocks x KV heads x sequences) would leave SMs idle (a short
// chunk over a long cache: 8 CTAs for 9 query tokens of 32/8 heads), each CTA's key range is cut
// into n_splits runs of whole tiles, one CTA each; they write partial states (o, m, l) to the
// workspace, and prefill_merge_kernel folds them with the state rule and finalizes the rows.
inline constexpr int32_t kMaxPrefillSplits = 64;
inline constexpr int32_t kMinSplitTiles = 4;  // keys per split at least 4 tiles (256)

// Split `split` of `n_splits` of a key range: ceil(tiles / n_splits) whole tiles of `tile`
// keys from lo each (the last may be shorter, trailing ones empty: lo == hi). Every split but the
// one holding the range's end ends on a tile boundary, so no tile of a split reaches past its end.
KVFLASH_HD PrefillKeyRange prefill_split_range(PrefillKeyRange keys, int32_t split,
                                               int32_t n_splits, int32_t tile) {
  if (n_splits <= 1) return keys;
  const int64_t tiles = (keys.hi - keys.lo + tile - 1) / tile;
  const int64_t per = (tiles + n_splits - 1) / n_splits;
  const int64_t lo = keys.lo + split * per * tile, hi = lo + per * tile;
  return {lo < keys.hi ? lo : keys.hi, hi < keys.hi ? hi : keys.hi};
}

// Where the partial states live in the workspace: per (sequence, KV head, split) slot, `rows`
// rows (n_q_tokens x group) of dvc floats of o (unnormalized, in the storage domain: rotated for
// turbo V), then after all slots' o the (m, l) pair of each slot's rows (m in natural-log units,
// as state.hpp's rule). All offsets in floats; o rows and the (m, l) block are 16-byte aligned
// (dvc is a multiple of 16).
struct PrefillParts {
  int64_t n_slots = 0, rows = 0, dvc = 0;
  KVFLASH_HD int64_t slot(int32_t seq, int32_t kvh, int32_t split, int32_t n_kv_heads,
                          int32_t n_splits) const {
    return (int64_t{seq} * n_kv_heads + kvh) * n_splits + split;
  }
  KVFLASH_HD int64_t o_at(int64_t slot, int64_t row) const { return (slot * rows + row) * dvc; }
  KVFLASH_HD int64_t ml_at(int64_t slot, int64_t row) const {
    return n_slots * rows * dvc + (slot * rows + row) * 2;
  }
  KVFLASH_HD int64_t floats() const { return n_slots * rows * (dvc + 2); }
};

// Sequence `seq`'s queries: their first row in q / out / lse and their count. Without ragged
// offsets (null) every sequence has n_q_tokens, rows seq * n_q_tokens on; with them (ragged_q,
// read on the device) rows q_offsets[seq] on, q_offsets[seq + 1] - q_offsets[seq] of them, and
// `ok` is false where the offsets break AttentionTensors' rules for this sequence (a count outside
// 0 .. n_q_tokens, rows outside 0 .. n_seqs * n_q_tokens): the kernel then reads and writes
// nothing for it.
struct SeqQueries {
  int64_t row0 = 0;
  int32_t len = 0;
  bool ok = true;
};
KVFLASH_HD SeqQueries seq_queries(const int32_t* q_offsets, int32_t seq, int32_t n_seqs,
                                  int32_t n_q_tokens) {
  if (q_offsets == nullptr) return {q_row_base(nullptr, n_q_tokens, seq), n_q_tokens, true};
  const int64_t row0 = q_row_base(q_offsets, n_q_tokens, seq);  // problem.hpp: the layout
  const int32_t len = q_len(q_offsets, n_q_tokens, seq);
  const bool ok =
      row0 >= 0 && len >= 0 && len <= n_q_tokens && row0 + len <= int64_t{n_seqs} * n_q_tokens;
  return {row0, ok ? len : 0, ok};
}

// Whether a tile of keys [k0, k0 + tile) needs the per-score visibility test for rows whose
// positions span [pq_lo, pq_hi]: it reaches past the range's end, past the first row's diagonal,
// or before the last row's window.
KVFLASH_HD bool prefill_tile_needs_mask(int64_t k0, int32_t tile, int64_t hi, bool causal,
                                        int64_t window, int64_t pq_lo, int64_t pq_hi) {
  if (k0 + tile > hi) return true;
  if (causal && k0 + tile - 1 > pq_lo) return true;
  if (window > 0 && k0 <= pq_hi - window) return true;
  return false;
}

// KV splits for a problem on a device of `sm_count` SMs (one CTA each): 1 where the grid fills
// them; else the count of least modelled time (whole waves of CTAs, each its share of the tiles
// plus a fixed cost), each split keeping kMinSplitTiles tiles of the longest key range a CTA may
// walk (kv_capacity, or the window plus the chunk), at most kMaxPrefillSplits.
int32_t prefill_splits(const AttentionProblem& p, const PrefillLayout& l, int32_t sm_count);

// The partial-state layout for n_splits (n_splits > 1: the workspace holds parts.floats()).
PrefillParts prefill_parts(const AttentionProblem& p, const PrefillLayout& l, int32_t n_splits);

}  // namespace kvflash::cuda::prefill
