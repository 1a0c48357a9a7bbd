// The CUDA prefill family's host-side plan, tested on the CPU: the shared-memory layout (regions
// inside the CTA's budget, aligned, disjoint) for every type pair and head dim it serves, and the
// key range and masking rule the kernel uses, against a brute-force walk of every (row, key).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cuda/common/type_pairs.hpp"
#include "backends/cuda/prefill/prefill_plan.hpp"

namespace kvflash::cuda::prefill {
namespace {

AttentionProblem problem(KvType k, KvType v, HeadDims d) {
  AttentionProblem p;
  p.k_type = k;
  p.v_type = v;
  p.head_dim = d;
  p.n_q_tokens = 100;
  p.kv_capacity = 1000;
  return p;
}

struct Region {
  int64_t lo, hi;
};

TEST(CudaPrefillLayout, RegionsAreAlignedDisjointAndFitTheDevice) {
  for (KvType k : kCudaKvTypes) {
    for (KvType v : kCudaKvTypes) {
      for (HeadDims d : SupportedSpace::head_dims) {
        const AttentionProblem p = problem(k, v, d);
        const PrefillLayout l = prefill_layout(p);
        if (is_wide(l.dv_bucket)) continue;  // WideLayout... below
        SCOPED_TRACE(describe(p));
        EXPECT_EQ(l.dkc % 16, 0);
        EXPECT_EQ(l.dvc % 16, 0);
        EXPECT_GE(l.dkc, d.k);
        EXPECT_GE(l.dvc, d.v);
        EXPECT_LE(l.dvc, l.dv_bucket);
        EXPECT_LE(l.dkc, l.dv_bucket);
        EXPECT_EQ(l.block_rows, block_rows(l.dv_bucket));
        // 128-key tiles for f16 / bf16 pairs up to 128 dims, 64 for the rest.
        EXPECT_EQ(l.tile_keys,
                  l.k_mode == TileMode::direct && l.v_mode == TileMode::direct && l.dv_bucket <= 128
                      ? 128
                      : kTileKeys);
        const int64_t k_tile = swizzled_bytes(l.tile_keys, l.dkc);
        const int64_t v_tile = swizzled_bytes(l.tile_keys, l.dv_bucket);
        std::vector<Region> r = {{l.q_off, l.q_off + swizzled_bytes(l.block_rows, l.dv_bucket)}};
        std::vector<int64_t> operand_tiles = {l.q_off};
        // Two stages for the kernel with its threads' copies; as many as fit for the TMA
        // kernel's ring.
        EXPECT_GE(l.n_stages, kStages);
        EXPECT_LE(l.n_stages, kMaxTmaStages);
        if (!tma_kernel_pair(l.k_mode, l.v_mode, l.dv_bucket)) {
          EXPECT_EQ(l.n_stages, kStages);
        } else if (tma_overlaps_pv(l.dv_bucket)) {
          // A tile's stage stays in use until the next tile's softmax is done: a third stage
          // keeps a copy in flight.
          EXPECT_GE(l.n_stages, 3);
        }
        for (int s = 0; s < l.n_stages; ++s) {
          const int64_t base = int64_t{s} * l.stage_bytes;
          const auto staged = [&](TileMode mode, int64_t op_tile, int32_t slot, int32_t data,
                                  int32_t lead) {
            if (mode == TileMode::direct) {
              r.push_back({base + data, base + data + op_tile});
              operand_tiles.push_back(base + data);
            }
            if (mode == TileMode::raw) {
              EXPECT_EQ(data % 128, 0);  // TMA boxes land there
              r.push_back({base + data, base + data + int64_t{l.tile_keys} * slot});
              r.push_back({base + lead, base + lead + l.tile_keys});
            }
          };
          staged(l.k_mode, k_tile, l.k_slot, l.k_stage_off, l.k_lead_off);
          staged(l.v_mode, v_tile, l.v_slot, l.v_stage_off, l.v_lead_off);
          EXPECT_LE(base + l.stage_bytes, int64_t{l.k_stage_off} + (s + 1) * l.stage_bytes);
        }
        // Decoded tiles: two or three sets (tma_overlaps_pv) for a pair that may run the TMA
        // kernel, one else.
        const bool decoded = l.k_mode != TileMode::direct || l.v_mode != TileMode::direct;
        EXPECT_EQ(l.n_dec, tma_kernel_pair(l.k_mode, l.v_mode, l.dv_bucket) && decoded
                               ? (tma_overlaps_pv(l.dv_bucket) ? 3 : 2)
                               : 1);
        for (int set = 0; set < l.n_dec; ++set) {
          const int64_t o = int64_t{set} * l.dec_stride;
          if (l.k_mode != TileMode::direct) {
            r.push_back({l.k_dec_off + o, l.k_dec_off + o + k_tile});
            operand_tiles.push_back(l.k_dec_off + o);
          }
          if (l.v_mode != TileMode::direct) {
            r.push_back({l.v_dec_off + o, l.v_dec_off + o + v_tile});
            operand_tiles.push_back(l.v_dec_off + o);
          }
        }
        if (is_rotated(k)) r.push_back({l.scratch_off, l.scratch_off + kWarps * 128 * 4});
        std::sort(r.begin(), r.end(), [](Region a, Region b) { return a.lo < b.lo; });
        for (size_t i = 0; i < r.size(); ++i) {
          EXPECT_EQ(r[i].lo % 16, 0) << "region " << i;
          EXPECT_LE(r[i].hi, static_cast<int64_t>(l.smem_main));
          if (i > 0) {
            EXPECT_LE(r[i - 1].hi, r[i].lo) << "regions " << i - 1 << ", " << i;
          }
        }
        // Operand tiles start where the swizzle's 8-row groups do (the descriptors' rule).
        for (int64_t off : operand_tiles) EXPECT_EQ(off % kSwizzleAlign, 0) << off;
        EXPECT_EQ(l.stage_bytes % kSwizzleAlign, 0);
        // Raw slots hold the widest lead (15 bytes) and the row.
        if (l.k_mode == TileMode::raw) {
          EXPECT_GE(l.k_slot, l.k_row_bytes + 15);
        }
        if (l.v_mode == TileMode::raw) {
          EXPECT_GE(l.v_slot, l.v_row_bytes + 15);
        }
        EXPECT_GE(l.smem_total, l.smem_epilogue + kSwizzleAlign);
        EXPECT_GE(l.smem_total, l.smem_main + kSwizzleAlign);
        // The whole CTA fits the Hopper opt-in limit (227 KB) with its static shared memory.
        EXPECT_LE(l.smem_total + 256, size_t{227} * 1024);
      }
    }
  }
}

// The wide instance (head dims 512 and 576/512): Q's tile of qk_dims columns, one operand tile per
// tensor (direct: at its stage offset; quantized and f32: at the decoded offset), the turbo
// scratch inside K's tile, for every type pair, within the device's shared memory.
TEST(CudaPrefillLayout, WideLayoutHoldsOneTilePerTensorAndFitsTheDevice) {
  for (KvType k : kCudaKvTypes) {
    for (KvType v : kCudaKvTypes) {
      for (HeadDims d : {HeadDims{512, 512}, HeadDims{576, 512}}) {
        const AttentionProblem p = problem(k, v, d);
        SCOPED_TRACE(describe(p));
        const PrefillLayout l = prefill_layout(p);
        ASSERT_EQ(l.dv_bucket, kWideBucket);
        EXPECT_FALSE(tma_kernel_pair(l.k_mode, l.v_mode, l.dv_bucket));
        EXPECT_EQ(l.block_rows, 64);
        EXPECT_EQ(l.n_stages, 1);
        EXPECT_LE(l.dkc, qk_dims(k, l.dv_bucket));
        EXPECT_LE(l.dvc, kWideBucket);
        EXPECT_EQ(v_tiles(l.dv_bucket) * 8 * 2, kWideBucket);  // two warpgroups' slices
        const int32_t k_at = l.k_mode == TileMode::direct ? l.k_stage_off : l.k_dec_off;
        const int32_t v_at = l.v_mode == TileMode::direct ? l.v_stage_off : l.v_dec_off;
        const std::vector<Region> r = {
            {l.q_off, l.q_off + swizzled_bytes(64, qk_dims(k, l.dv_bucket))},
            {k_at, k_at + swizzled_bytes(kTileKeys, l.dkc)},
            {v_at, v_at + swizzled_bytes(kTileKeys, kWideBucket)}};
        for (size_t i = 0; i < r.size(); ++i) {
          EXPECT_EQ(r[i].lo % kSwizzleAlign, 0) << "region " << i;
          EXPECT_LE(r[i].hi, static_cast<int64_t>(l.smem_main));
          if (i > 0) {
            EXPECT_LE(r[i - 1].hi, r[i].lo) << "regions " << i - 1 << ", " << i;
          }
        }
        if (is_rotated(k)) {
          EXPECT_GE(l.scratch_off, r[1].lo);
          EXPECT_LE(l.scratch_off + kWarps * 128 * 4, r[1].hi);
        }
        EXPECT_EQ(l.out_stride, l.dvc + 4);
        EXPECT_GE(l.smem_total, l.smem_epilogue + kSwizzleAlign);
        EXPECT_GE(l.smem_total, l.smem_main + kSwizzleAlign);
        EXPECT_LE(l.smem_total + 256, size_t{227} * 1024);
        EXPECT_EQ(l.n_row_blocks, (p.n_q_tokens * p.group() + 63) / 64);
      }
    }
  }
}

// The TMA kernel's view of a direct tensor: boxes of one 64-dim atom (128 bytes) from the head's
// row, whole tiles of a contiguous tensor, page-sized (a divisor of the tile) for a paged one;
// nothing where TMA cannot describe the tensor.
TEST(CudaPrefillTma, ViewDescribesTheTensorOrNothing) {
  AttentionProblem p = problem(KvType::f16, KvType::f16, {128, 128});
  p.n_kv_heads = 8;
  p.n_seqs = 2;
  p.kv_capacity = 4096;
  KvTmaTensor t;
  t.data = 0x10000;
  t.stride_head = 256;
  t.stride_token = 8 * 256;
  t.stride_seq = t.stride_token * 4096;
  PrefillTmaView v;
  ASSERT_TRUE(prefill_tma_view(t, 256, 128, true, p, v));
  EXPECT_EQ(v.extent, 8 * 256);
  EXPECT_EQ(v.rows, 4096);
  EXPECT_EQ(v.outer, 2);
  EXPECT_EQ(v.outer_stride, t.stride_seq);
  EXPECT_EQ(v.box_rows, kTileKeys);
  // A window: still whole tiles (a contiguous box starts at any key).
  p.window = 100;
  EXPECT_TRUE(prefill_tma_view(t, 256, 128, true, p, v));
  p.window = 0;
  // Strides and addresses TMA cannot take.
  for (const auto& bad : std::vector<KvTmaTensor>{
           {0x10008, 2048, 256, 2048 * 4096, 0, 0},      // data not 16-byte aligned
           {0x10000, 2056, 256, 2056 * 4096, 0, 0},      // token stride
           {0x10000, 2048, 264, 2048 * 4096, 0, 0},      // head stride (heads past the token row)
           {0x10000, 2048, 256, 2048 * 4096 + 8, 0, 0},  // sequence stride
           {0x10000, 256, 4096 * 256, 256, 0, 0}}) {     // heads outside one token's row
    EXPECT_FALSE(prefill_tma_view(bad, 256, 128, true, p, v))
        << bad.stride_token << " " << bad.stride_head;
  }
  // Paged: boxes of the largest of 64, 32, 16 rows that divides the page; no window.
  p.page_size = 16;
  t.stride_page = t.stride_token * 16;
  t.n_pages = 100;
  for (const auto& [page, box] : std::vector<std::pair<int32_t, int32_t>>{
           {16, 16}, {32, 32}, {48, 16}, {64, 64}, {128, 64}, {256, 64}}) {
    p.page_size = page;
    t.stride_page = t.stride_token * page;
    ASSERT_TRUE(prefill_tma_view(t, 256, 128, true, p, v)) << page;
    EXPECT_EQ(v.box_rows, box) << page;
    EXPECT_EQ(v.rows, page);
    EXPECT_EQ(v.outer, 100);
    EXPECT_EQ(v.outer_stride, t.stride_page);
    EXPECT_EQ(kTileKeys % v.box_rows, 0);
  }
  // Raw rows: a box of the slot from the head's row rounded down to 16 bytes (any head stride),
  // at most 256 bytes, holding the widest lead and the row.
  p.page_size = 0;
  KvTmaTensor raw = t;
  raw.stride_head = 136;  // q8_0 rows of 128 values
  raw.stride_token = 8 * 136;
  raw.stride_seq = raw.stride_token * 4096;
  EXPECT_TRUE(prefill_tma_view(raw, 136, 176, false, p, v));
  EXPECT_EQ(v.box_rows, kTileKeys);
  EXPECT_FALSE(prefill_tma_view(raw, 136, 176, true, p, v));   // a direct box needs head % 16
  EXPECT_FALSE(prefill_tma_view(raw, 136, 144, false, p, v));  // the lead and row do not fit
  EXPECT_FALSE(prefill_tma_view(raw, 272, 304, false, p, v));  // over 256 bytes
  p.page_size = 8;
  EXPECT_FALSE(prefill_tma_view(t, 256, 128, true, p, v));
  p.page_size = 64;
  p.window = 100;
  EXPECT_FALSE(prefill_tma_view(t, 256, 128, true, p, v));
  p.window = 0;
  t.n_pages = 0;
  EXPECT_FALSE(prefill_tma_view(t, 256, 128, true, p, v));
  t.n_pages = 100;
  p.page_size = 0;
  p.kv_capacity = int64_t{1} << 31;
  EXPECT_FALSE(prefill_tma_view(t, 256, 128, true, p, v));
}

TEST(CudaPrefillLayout, SwizzledTilesPlaceEveryValueOnceAndSpreadBanks) {
  for (int32_t rows : {64, 128, 256}) {
    for (int32_t dims : {64, 80, 128, 256}) {
      std::vector<int> used(static_cast<size_t>(swizzled_bytes(rows, dims)) / 2, 0);
      for (int32_t r = 0; r < rows; ++r)
        for (int32_t d = 0; d < dims; ++d) {
          const int32_t off = swizzled_offset(r, d, rows);
          ASSERT_EQ(off % 2, 0);
          ASSERT_LT(off, swizzled_bytes(rows, dims));
          EXPECT_EQ(used[size_t(off / 2)]++, 0) << r << ", " << d;
          // Eight consecutive values of a row stay one 16-byte chunk (the copies' unit).
          if (d % 8) {
            EXPECT_EQ(off, swizzled_offset(r, d - 1, rows) + 2);
          }
        }
      // The 16-byte chunk of the same columns in eight consecutive rows: eight distinct banks.
      for (int32_t r0 = 0; r0 < rows; r0 += 8)
        for (int32_t d = 0; d < dims; d += 8) {
          std::vector<int> quads;
          for (int32_t r = r0; r < r0 + 8; ++r)
            quads.push_back(swizzled_offset(r, d, rows) / 16 % 8);
          std::sort(quads.begin(), quads.end());
          EXPECT_EQ(std::unique(quads.begin(), quads.end()), quads.end());
        }
    }
  }
}

TEST(CudaPrefillLayout, RowBlocksCoverEveryRowOfTheGroup) {
  AttentionProblem p = problem(KvType::f16, KvType::f16, {128, 128});
  p.n_q_heads = 32;
  p.n_kv_heads = 8;
  for (int32_t n : {9, 31, 32, 33, 1000, 2048}) {
    p.n_q_tokens = n;
    const int64_t rows = int64_t{n} * 4;
    const int64_t br = prefill_layout(p).block_rows;
    EXPECT_EQ(prefill_layout(p).n_row_blocks, (rows + br - 1) / br) << n;
  }
}

// Brute force: every key that any row of [row0, row_end) sees.
PrefillKeyRange visible_keys(int64_t len, int64_t cap, int32_t n_q, int32_t group, bool causal,
                             int64_t window, int32_t row0, int32_t row_end) {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (int32_t r = row0; r < row_end; ++r) {
    const int64_t pq = len - n_q + r / group;
    for (int64_t k = 0; k < std::min(len, cap); ++k) {
      if (causal && k > pq) continue;
      if (window > 0 && pq - k >= window) continue;
      lo = std::min(lo, k);
      hi = std::max(hi, k + 1);
    }
  }
  return {lo, hi};
}

TEST(CudaPrefillKeys, RangeHoldsEveryVisibleKeyAndNoWholeTileOfHiddenOnes) {
  for (bool causal : {false, true}) {
    for (int64_t window : {int64_t{0}, int64_t{1}, int64_t{37}, int64_t{200}}) {
      for (int32_t group : {1, 4}) {
        for (int32_t n_q : {9, 50, 300}) {
          for (int64_t len : {int64_t{5}, int64_t{n_q}, int64_t{n_q} + 77, int64_t{900}}) {
            const int32_t rows = n_q * group;
            for (int32_t row0 = 0; row0 < rows; row0 += block_rows(128)) {
              const int32_t row_end = std::min(rows, row0 + block_rows(128));
              const PrefillKeyRange got =
                  prefill_key_range(len, 1000, n_q, group, causal, window, row0, row_end);
              const PrefillKeyRange want =
                  visible_keys(len, 1000, n_q, group, causal, window, row0, row_end);
              SCOPED_TRACE(testing::Message()
                           << "causal " << causal << " window " << window << " group " << group
                           << " n_q " << n_q << " len " << len << " row0 " << row0);
              EXPECT_LE(got.lo, got.hi);
              if (want.lo > want.hi) continue;  // no row sees a key: any empty or masked range
              EXPECT_EQ(got.hi, want.hi);
              EXPECT_EQ(got.lo, want.lo);
            }
          }
        }
      }
    }
  }
}

TEST(CudaPrefillKeys, LengthsOutsideTheCacheReadNothingPastIt) {
  const PrefillKeyRange past = prefill_key_range(5000, 1000, 16, 1, false, 0, 0, 16);
  EXPECT_EQ(past.hi, 1000);
  const PrefillKeyRange negative = prefill_key_range(-7, 1000, 16, 1, true, 0, 0, 16);
  EXPECT_EQ(negative.hi, 0);
  EXPECT_LE(negative.lo, negative.hi);
}

// A tile the rule leaves unmasked has every (row, key) visible.
TEST(CudaPrefillKeys, UnmaskedTilesHaveNoHiddenScore) {
  for (int32_t tile : {kTileKeys, kMaxTileKeys})
    for (bool causal : {false, true}) {
      for (int64_t window : {int64_t{0}, int64_t{100}, int64_t{500}}) {
        const int64_t hi = 1900;
        for (int64_t pq_lo : {int64_t{700}, int64_t{1200}}) {
          const int64_t pq_hi = pq_lo + 31;
          int masked = 0;
          for (int64_t k0 = 0; k0 < hi; k0 += 7) {
            if (prefill_tile_needs_mask(k0, tile, hi, causal, window, pq_lo, pq_hi)) {
              ++masked;
              continue;
            }
            for (int64_t pq = pq_lo; pq <= pq_hi; ++pq)
              for (int64_t k = k0; k < k0 + tile; ++k) {
                ASSERT_LT(k, hi);
                if (causal) {
                  ASSERT_LE(k, pq);
                }
                if (window > 0) {
                  ASSERT_LT(pq - k, window);
                }
              }
          }
          EXPECT_GT(masked, 0);
        }
      }
    }
}

}  // namespace
}  // namespace kvflash::cuda::prefill

namespace kvflash::cuda::prefill {
namespace {

TEST(CudaPrefillQueries, RowsOfEachSequenceDenseAndRagged) {
  const SeqQueries dense = seq_queries(nullptr, 3, 5, 100);
  EXPECT_EQ(dense.row0, 300);
  EXPECT_EQ(dense.len, 100);
  EXPECT_TRUE(dense.ok);
  const int32_t offsets[] = {0, 0, 1, 8, 108, 140};
  const int32_t want_len[] = {0, 1, 7, 100, 32};
  for (int32_t s = 0; s < 5; ++s) {
    const SeqQueries q = seq_queries(offsets, s, 5, 100);
    EXPECT_TRUE(q.ok) << s;
    EXPECT_EQ(q.row0, offsets[s]) << s;
    EXPECT_EQ(q.len, want_len[s]) << s;
  }
}

TEST(CudaPrefillQueries, OffsetsBreakingTheRulesMarkTheSequence) {
  // A count above n_q_tokens, a decreasing step, a negative start, rows past n_seqs * n_q_tokens.
  const int32_t too_many[] = {0, 11, 12};
  EXPECT_FALSE(seq_queries(too_many, 0, 2, 10).ok);
  EXPECT_TRUE(seq_queries(too_many, 1, 2, 10).ok);
  const int32_t decreasing[] = {0, 5, 3};
  EXPECT_FALSE(seq_queries(decreasing, 1, 2, 10).ok);
  const int32_t negative[] = {-4, 2, 3};
  EXPECT_FALSE(seq_queries(negative, 0, 2, 10).ok);
  // Counts within 0 .. 20, but sequence 1's rows end at 45, past the 2 x 20 rows a caller holds.
  const int32_t past_end[] = {25, 30, 45};
  EXPECT_TRUE(seq_queries(past_end, 0, 2, 20).ok);
  EXPECT_FALSE(seq_queries(past_end, 1, 2, 20).ok);
  // A sequence with bad offsets has no rows.
  EXPECT_EQ(seq_queries(past_end, 1, 2, 20).len, 0);
}

// The splits of a key range: in order, disjoint, covering it exactly, every split but the one
// holding the range's end ending on a tile boundary (so no tile crosses into the next split).
TEST(CudaPrefillSplits, RangesPartitionTheKeysInWholeTiles) {
  for (int64_t lo : {int64_t{0}, int64_t{37}, int64_t{4096}}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{1000},
                      int64_t{131072} + 5}) {
      for (int32_t splits : {1, 2, 3, 7, 16, 64})
        for (int32_t tile : {kTileKeys, kMaxTileKeys}) {
          const PrefillKeyRange keys{lo, lo + n};
          int64_t next = lo, nonempty = 0;
          for (int32_t s = 0; s < splits; ++s) {
            const PrefillKeyRange r = prefill_split_range(keys, s, splits, tile);
            ASSERT_EQ(r.lo, next) << "lo " << lo << " n " << n << " split " << s << "/" << splits;
            ASSERT_LE(r.lo, r.hi);
            if (r.hi != keys.hi) {
              EXPECT_EQ((r.hi - keys.lo) % tile, 0);
            }
            nonempty += r.hi > r.lo;
            next = r.hi;
          }
          EXPECT_EQ(next, keys.hi);
          EXPECT_LE(nonempty, splits);
        }
    }
  }
}

TEST(CudaPrefillSplits, OnlyGridsSmallerThanTheDeviceSplit) {
  AttentionProblem p = problem(KvType::q8_0, KvType::q8_0, {128, 128});
  p.n_q_heads = 32;
  p.n_kv_heads = 8;
  p.causal = true;
  p.kv_capacity = 131072;
  // 9 queries of 32/8 heads: 36 rows, one row block per KV head, 8 CTAs on 132 SMs.
  p.n_q_tokens = 9;
  EXPECT_EQ(prefill_splits(p, prefill_layout(p), 132), 16);
  // 2048 queries: 8192 rows, 32 row blocks x 8 heads fill the device.
  p.n_q_tokens = 2048;
  EXPECT_EQ(prefill_splits(p, prefill_layout(p), 132), 1);
  // A short cache keeps kMinSplitTiles tiles per split.
  p.n_q_tokens = 9;
  p.kv_capacity = 8 * kTileKeys;
  EXPECT_EQ(prefill_splits(p, prefill_layout(p), 132), 8 / kMinSplitTiles);
  p.kv_capacity = kTileKeys;
  EXPECT_EQ(prefill_splits(p, prefill_layout(p), 132), 1);
  // A window bounds the keys a CTA walks, whatever the capacity.
  p.kv_capacity = 1 << 20;
  p.window = 1024 - 9;
  EXPECT_EQ(prefill_splits(p, prefill_layout(p), 132), 1024 / kTileKeys / kMinSplitTiles);
  // One CTA on a large device: capped.
  p.window = 0;
  p.n_kv_heads = 1;
  p.n_q_heads = 1;
  EXPECT_EQ(prefill_splits(p, prefill_layout(p), 1000), kMaxPrefillSplits);
  // 36 queries of 128/1 heads at 576/512 over 32K keys (the wide instance, 64 rows per CTA): 72
  // CTAs on 132 SMs split too (unsplit, 60 SMs idled: 2x the time of 33 queries on an H100);
  // 9 splits take 5 waves of 57 tiles where 7 take 4 of 74 and 11 take 6 of 47.
  AttentionProblem mla = problem(KvType::f16, KvType::f16, {576, 512});
  mla.n_q_heads = 128;
  mla.n_kv_heads = 1;
  mla.causal = true;
  mla.kv_capacity = 32768;
  mla.n_q_tokens = 36;
  ASSERT_EQ(prefill_layout(mla).n_row_blocks, 72);
  EXPECT_EQ(prefill_splits(mla, prefill_layout(mla), 132), 9);
  mla.n_q_tokens = 33;  // 66 CTAs: two splits fill the device exactly
  EXPECT_EQ(prefill_splits(mla, prefill_layout(mla), 132), 2);
}

TEST(CudaPrefillSplits, PartialStatesHaveDisjointAlignedPlaces) {
  AttentionProblem p = problem(KvType::turbo3, KvType::turbo3, {128, 128});
  p.n_seqs = 3;
  p.n_q_heads = 8;
  p.n_kv_heads = 2;
  p.n_q_tokens = 5;
  const PrefillLayout l = prefill_layout(p);
  const int32_t splits = 3;
  const PrefillParts parts = prefill_parts(p, l, splits);
  EXPECT_EQ(parts.rows, 20);
  std::vector<int> used(static_cast<size_t>(parts.floats()), 0);
  for (int32_t seq = 0; seq < p.n_seqs; ++seq)
    for (int32_t kvh = 0; kvh < p.n_kv_heads; ++kvh)
      for (int32_t s = 0; s < splits; ++s)
        for (int64_t row = 0; row < parts.rows; ++row) {
          const int64_t slot = parts.slot(seq, kvh, s, p.n_kv_heads, splits);
          const int64_t o = parts.o_at(slot, row), ml = parts.ml_at(slot, row);
          EXPECT_EQ(o % 4, 0);  // 16-byte float4 rows
          for (int64_t i = 0; i < parts.dvc; ++i) ++used[static_cast<size_t>(o + i)];
          ++used[static_cast<size_t>(ml)];
          ++used[static_cast<size_t>(ml + 1)];
        }
  EXPECT_TRUE(std::all_of(used.begin(), used.end(), [](int u) { return u == 1; }));
}

}  // namespace
}  // namespace kvflash::cuda::prefill
