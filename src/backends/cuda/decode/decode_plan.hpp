// Host-side planning of the CUDA decode family: the CTA layout, shared-memory sizes and split
// count for a problem. Pure functions of the problem and the device's size, with CPU tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "backends/cuda/common/kv_tma_view.hpp"
#include "backends/cuda/common/routing.hpp"  // kMaxDecodeQTokens
#include "backends/cuda/common/tile_copy.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/status.hpp"

namespace kvflash::cuda::decode {

inline constexpr int32_t kStageTargetBytes = 24 * 1024;  // raw K+V bytes per pipeline stage
inline constexpr int32_t kMaxTileKeys = 256;
inline constexpr int64_t kMinKeysPerSplit = 64;
inline constexpr size_t kSmemPerSm = 228 * 1024;  // H100/H200 shared memory per SM
inline constexpr int64_t kStaticSmemBytes =
    256;  // the decode kernel's static shared memory, at most
inline constexpr int32_t kMaxSplits = 1024;

struct DecodeLayout {
  int32_t dkc = 0, dvc = 0;
  int32_t k_row_bytes = 0, v_row_bytes = 0;
  int32_t n_dslices = 1, slice_w = 0;
  int32_t n_mtiles = 1, row_block = 16, n_row_blocks = 1;
  int32_t n_qtiles = 2;  // query n-tiles of 8 rows per M tile: 1 when a KV head has <= 8 rows
  int32_t n_kgroups = 4;
  // One n-tile with V dims split (n_dslices > 1) and K's 32-dim blocks (turbo: 128-dim groups)
  // divisible among the slices: the slices' warps split K too (k_split), k_share blocks each
  // (else k_share = all of K's blocks), and exchange their partial scores.
  bool k_split = false;
  int32_t k_share = 0;
  bool int8_qk = false;  // Q.K^T on int8 tensor cores (uses_int8_qk): Q fragments per 32 dims
  int32_t bk = 64;
  int32_t sk_stride = 0, sv_stride = 0;
  int32_t smem_q_bytes = 0;
  int32_t smem_kv_bytes = 0;  // one stage (Q is staged in one; the key groups merge in all)
  int32_t n_stages = 3;
  size_t smem_total = 0;  // dynamic shared memory per CTA
};

DecodeLayout decode_layout(const AttentionProblem& p);

// Rows of a TMA step box: one 16-key step of every key group (a multiple of 16 that divides bk).
// Whole tiles go by one box of bk rows. The last tile of a range that ends inside it goes as the
// step boxes its keys are in when they hold at most tile_step_rows keys (the largest multiple of
// the box up to half a tile: the copies at least halve its bytes), else as one box too: a split
// of 64 keys in 128-256-key tiles (a 4K call's 66 splits) copies 64 rows, while a range that fills
// most of its last tile keeps one copy (four 32-row boxes for 112 of 128 keys measured 0.97x).
int32_t tile_box(const DecodeLayout& l);
int32_t tile_step_rows(const DecodeLayout& l);

// KV splits per (sequence, KV head, row block): enough CTAs to fill `sm_count` x r slots, r =
// `ctas_per_sm`, or where that is above kCtasPerSm, the r from kCtasPerSm up whose busiest SM
// gets the fewest whole tiles at kv_capacity (within kSplitLoadSlack percent; ties to the larger
// r); never more than leaves kMinKeysPerSplit keys per split.
// A batch of several sequences takes at least kv_capacity / kBatchSplitKeys splits: their lengths
// are read on the device and differ, and one CTA per (sequence, KV head) left the longest
// sequences' CTAs running alone at the end. H100, 32/8 heads, D 128, one round of each of four
// floors (issue 43's serving batches, `kvflash-bench --ragged serving64`, 64 sequences of 1K-32K
// tokens): f16 79 -> 91% of the read bandwidth, paged 16 65 -> 89%; q8_0 50 -> 70%; q4_0 40 ->
// 65%; fp8_e4m3 69 -> 84%, turbo3 34 -> 47%; 16 sequences of 32K: q4_0 53 -> 65%, f16 92 -> 90%.
// A floor of 2048 keys gave q8_0 80% at 64 sequences but split the 256 sequences of 1K-4K
// (serving256) in two: 0.83-0.94x there; 8192 kept half the gain.
inline constexpr int64_t kBatchSplitKeys = 4096;
inline constexpr int64_t kSplitLoadSlack = 105;
int32_t decode_splits(const AttentionProblem& p, const DecodeLayout& l, int32_t sm_count,
                      int32_t ctas_per_sm);

// Workspace bytes for the partial states (0 with one split).
// Whole tiles of `bk` keys on the busiest of `sm_count` SMs when `keys` split `splits` ways
// (the kernel's 16-key rounded chunks) for each of `ctas_per_split` (sequence, KV head, row
// block) CTAs.
int64_t busiest_sm_tiles(int64_t keys, int64_t ctas_per_split, int64_t splits, int32_t bk,
                         int32_t sm_count);
size_t decode_workspace_bytes(const AttentionProblem& p, const DecodeLayout& l, int32_t n_splits);

// How TMA copies a tensor's K or V tiles (DecodeParams::k_map): kv_tma_view's view
// (common/kv_tma_view.hpp), one box = box rows x `slot` bytes starting at the head's row rounded
// down to 16 bytes (box starts must be 16-byte aligned; the row lands after its lead, as with
// 16-byte cp.async copies). A paged tensor's boxes are kPagedTmaBox rows, one 16-key step, which
// never cross a page. Nothing where TMA cannot describe it and the tiles are copied with
// cp.async: float rows (their padded slots would need boxes reading into the next head's row:
// measured 0.80x at 1M); slots over 256 bytes (the box limit); the widest lead and the row not
// fitting the slot; whatever kv_tma_view refuses (the kernel finds the page by 32-bit division:
// a capacity under 2^31 keys).
using TmaTileView = KvTmaView;
std::optional<TmaTileView> tma_tile_view(const KvTensor& kv, KvType type, int32_t row_bytes,
                                         int32_t slot, const AttentionProblem& p);

}  // namespace kvflash::cuda::decode
