// The CUDA decode family's planner, tested on the CPU: its layout and split choices over the
// supported space, the tile copy's units and the TMA views of the caches, FastDiv.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/common/kv_values.hpp"  // computed dims
#include "backends/cuda/common/type_pairs.hpp"
#include "backends/cuda/decode/decode_params.hpp"
#include "backends/cuda/decode/decode_plan.hpp"

namespace kvflash::cuda::decode {
namespace {

AttentionProblem problem(int32_t q_tokens, int32_t qh, int32_t kvh, HeadDims d, int64_t cap) {
  AttentionProblem p;
  p.n_q_tokens = q_tokens;
  p.n_q_heads = qh;
  p.n_kv_heads = kvh;
  p.head_dim = d;
  p.kv_capacity = cap;
  return p;
}

TEST(CudaDecodePlan, LayoutWorkedExamples) {
  // 32/8 heads, D 128, one token: 4 rows in one M tile, 4 key groups, 64-key f16 tiles.
  DecodeLayout l = decode_layout(problem(1, 32, 8, {128, 128}, 32768));
  EXPECT_EQ(l.n_mtiles, 1);
  EXPECT_EQ(l.n_dslices, 1);
  EXPECT_EQ(l.n_kgroups, 4);
  EXPECT_EQ(l.bk, 64);
  EXPECT_EQ(l.n_row_blocks, 1);
  EXPECT_EQ(l.n_qtiles, 1);  // keys as the MMA M dimension, the 4 rows one N tile
  EXPECT_EQ(l.n_stages, 2);  // f16 stages fit an SM three times at most
  // 8 tokens x GQA 8 = 64 rows: four M tiles, one warp each.
  l = decode_layout(problem(8, 32, 4, {128, 128}, 32768));
  EXPECT_EQ(l.n_mtiles, 4);
  EXPECT_EQ(l.n_kgroups, 1);
  EXPECT_EQ(l.n_qtiles, 2);
  // 8 tokens x GQA 4 = 32 rows: the epilogue's merge spans the Q fragments too, and tiles are
  // cut to fit, so that four CTAs fit an SM.
  for (KvType t : {KvType::f16, KvType::q8_0, KvType::q4_0, KvType::turbo3}) {
    AttentionProblem p = problem(8, 32, 8, {128, 128}, 32768);
    p.k_type = p.v_type = t;
    l = decode_layout(p);
    SCOPED_TRACE(to_string(t));
    EXPECT_EQ(l.n_mtiles, 2);
    EXPECT_LE(4 * (l.smem_total + 1024 + kStaticSmemBytes), size_t{228} * 1024);
  }
  // D 256, one token: two V slices of 128, and K split between them (4 blocks each; turbo one
  // 128-dim group each).
  for (KvType t : {KvType::f16, KvType::q8_0, KvType::turbo3}) {
    AttentionProblem p = problem(1, 32, 8, {256, 256}, 32768);
    p.k_type = p.v_type = t;
    l = decode_layout(p);
    SCOPED_TRACE(to_string(t));
    EXPECT_EQ(l.n_dslices, 2);
    EXPECT_TRUE(l.k_split);
    EXPECT_EQ(l.k_share, 4);
  }
  // q8_0 K / turbo V, one token: Q.K^T on int8 tensor cores, whose Q fragments (one 16-byte word
  // per lane and 32-dim block) take half the f16 ones' bytes. That room is what gives turbo3 V
  // the 128-key tiles of two stages at four CTAs per SM (sized for f16 fragments they missed the
  // stage room by 256 bytes: 64-key tiles); D 256 64 keys (was 32).
  for (auto [d, keys] : {std::pair{128, 128}, {256, 64}}) {
    AttentionProblem p = problem(1, 32, 8, {d, d}, 32768);
    p.k_type = KvType::q8_0;
    p.v_type = KvType::turbo3;
    l = decode_layout(p);
    SCOPED_TRACE(d);
    EXPECT_TRUE(l.int8_qk);
    EXPECT_EQ(l.smem_q_bytes, d / 32 * 32 * 16 + 2 * d);  // + the steps (bias-term room)
    EXPECT_EQ(l.bk, keys);
    EXPECT_EQ(l.n_stages, 2);
    EXPECT_LE(4 * (l.smem_total + 1024 + kStaticSmemBytes), size_t{228} * 1024);
  }
  // MLA 576/512: four V slices of 128, one M tile per CTA (18 K blocks: not split by 4).
  l = decode_layout(problem(1, 128, 1, {576, 512}, 4096));
  EXPECT_EQ(l.n_dslices, 4);
  EXPECT_FALSE(l.k_split);
  EXPECT_EQ(l.slice_w, 128);
  EXPECT_EQ(l.n_mtiles, 1);
  EXPECT_EQ(l.n_row_blocks, 8);
}

TEST(CudaDecodePlan, EveryPointOfTheSpaceHasAConsistentLayout) {
  for (HeadDims d : SupportedSpace::head_dims)
    for (KvType kt : kCudaKvTypes)
      for (KvType vt : kCudaKvTypes)
        for (int32_t q : {1, 2, 8})
          for (auto [qh, kvh] : {std::pair{32, 8}, {32, 4}, {8, 8}, {64, 1}}) {
            AttentionProblem p = problem(q, qh, kvh, d, 100000);
            p.k_type = kt;
            p.v_type = vt;
            const DecodeLayout l = decode_layout(p);
            SCOPED_TRACE(describe(p));
            EXPECT_EQ(l.n_mtiles * l.n_dslices * l.n_kgroups, 4);
            EXPECT_EQ(l.slice_w * l.n_dslices, l.dvc);
            EXPECT_EQ(l.slice_w % 16, 0);  // the one-tile kernel pairs V-dim tiles of 8
            EXPECT_EQ(l.n_qtiles, p.rows_per_kv_head() <= 8 ? 1 : 2);
            // The one-n-tile kernel's bias terms sit 16 floats per block (kRowBlock1).
            if (l.n_qtiles == 1) {
              EXPECT_EQ(l.row_block, 16);
            }
            // Q fragments, then (q8_0 / q4_0 K, one n-tile) the bias terms per row and block;
            // stages start 128-byte aligned (TMA). Stage 1 holds the staged Q rows (f32) and
            // after them the bias terms per row and 16-dim chunk.
            const bool fold = l.n_qtiles == 1 && (kt == KvType::q8_0 || kt == KvType::q4_0);
            // One n-tile with V dims split, K's blocks (turbo: 128-dim groups) divisible among
            // the slices, one K/V type: K split too, the partial scores' exchange at the Q region's
            // end.
            const int32_t units = l.dkc / (is_rotated(kt) ? 128 : 32);
            // (Kernels for the K = V types of decode_rules.hpp's kKSplitTypes: f32 and fp8 have
            // none.)
            EXPECT_EQ(l.k_split, l.n_qtiles == 1 && l.n_dslices > 1 && units % l.n_dslices == 0 &&
                                     kt == vt && kt != KvType::f32 && !is_fp8(kt));
            EXPECT_EQ(l.k_share * (l.k_split ? l.n_dslices : 1), l.dkc / 32);
            if (l.k_split) {
              EXPECT_LE(l.n_dslices * l.n_kgroups, kWarps);  // [warp][2][32] float4 slots
            }
            // int8 Q.K^T: q8_0 or q4_0 K, turbo V, one n-tile, unsplit K; its Q fragments hold
            // 32 dims per lane's 16 bytes.
            EXPECT_EQ(l.int8_qk, (kt == KvType::q8_0 || kt == KvType::q4_0) && is_rotated(vt) &&
                                     l.n_qtiles == 1 && !l.k_split);
            EXPECT_GE(l.smem_q_bytes, l.n_mtiles * (l.dkc / (l.int8_qk ? 32 : 16)) * 32 * 16 +
                                          (fold ? l.row_block * (l.dkc / 32) * 4 : 0) +
                                          (l.k_split ? kScoreXchgBytes : 0));
            EXPECT_EQ(l.smem_q_bytes % 128, 0);
            EXPECT_GE(l.smem_kv_bytes,
                      l.row_block * l.dkc * 4 + (fold ? l.row_block * (l.dkc / 16) * 4 : 0));
            EXPECT_GE(l.smem_kv_bytes, l.bk * (l.sk_stride + l.sv_stride));
            // The epilogue's key-group merge spans all of it: every warp's accumulators (32 lanes
            // x 68 floats, one n-tile 36), the merged rows, m, l and weights per key group.
            const size_t reduce = (4 * 32 * (l.n_qtiles == 1 ? 36 : 68) + l.row_block * l.dvc +
                                   l.n_kgroups * l.row_block * 3 + l.row_block * 2) *
                                  sizeof(float);
            EXPECT_GE(l.smem_total, reduce);
            EXPECT_EQ(l.smem_kv_bytes % 128, 0);
            EXPECT_LE(l.slice_w, 128);
            EXPECT_EQ(l.dkc % 32, 0);
            EXPECT_EQ(l.bk % (16 * l.n_kgroups), 0);
            // TMA boxes: whole 16-key steps that tile bk, each box's start in shared memory
            // 128-byte aligned (the copy's condition), at most 256 rows (the box limit).
            const int32_t box = tile_box(l);
            EXPECT_EQ(box % 16, 0);
            EXPECT_EQ(l.bk % box, 0);
            EXPECT_LE(box, 256);
            EXPECT_EQ(box * l.sk_stride % 128, 0);
            EXPECT_EQ(box * l.sv_stride % 128, 0);
            EXPECT_EQ(tile_step_rows(l) % box, 0);
            EXPECT_LE(2 * tile_step_rows(l), l.bk);
            EXPECT_EQ(l.sk_stride % 16, 0);
            EXPECT_EQ(l.sv_stride % 16, 0);
            EXPECT_GE(l.sk_stride, l.k_row_bytes + 4);
            EXPECT_GE(l.n_row_blocks * l.row_block, p.rows_per_kv_head());
            EXPECT_LE(l.smem_total, size_t{227} * 1024) << "over the H100/H200 opt-in limit";
          }
}

TEST(CudaDecodePlan, MergeTakesEverySplitInOneRoundUpTo128) {
  EXPECT_EQ(merge_warps(1), 8);
  EXPECT_EQ(merge_warps(64), 8);
  EXPECT_EQ(merge_warps(66), 16);  // 4 CTAs x 132 SMs / 8 KV heads
  EXPECT_EQ(merge_warps(1024), 16);
  for (int n = 1; n <= 128; ++n) EXPECT_GE(merge_warps(n) * kMergeBatch, n) << n;
}

TEST(CudaDecodePlan, SplitsFillTheMachineAndKeepSplitsNonTrivial) {
  AttentionProblem p = problem(1, 32, 8, {128, 128}, 1 << 20);
  DecodeLayout l = decode_layout(p);
  EXPECT_EQ(decode_splits(p, l, 132, 3), 49);  // 8 x 49 = 392 CTAs: one wave of 396 slots
  p.kv_capacity = 100;                         // at most 2 splits of >= 64 keys
  EXPECT_EQ(decode_splits(p, l, 132, 3), 2);
  p.kv_capacity = 1;
  EXPECT_EQ(decode_splits(p, l, 132, 3), 1);
  p = problem(1, 32, 8, {128, 128}, 4096);
  p.n_seqs = 64;  // 512 CTAs already fill 396 slots
  EXPECT_EQ(decode_splits(p, l, 132, 3), 1);
  EXPECT_EQ(decode_workspace_bytes(p, l, 1), 0u);
  EXPECT_EQ(decode_workspace_bytes(p, l, 3), size_t{64} * 8 * 3 * 4 * (128 + 2) * 4);
  // A batch takes at least capacity / kBatchSplitKeys splits (its lengths differ on the device),
  // never under the wave rule, never more than the 64-key floor or kMaxSplits allow; one
  // sequence keeps the wave rule.
  p.kv_capacity = 32768;
  EXPECT_EQ(decode_splits(p, l, 132, 3), 32768 / kBatchSplitKeys);
  p.kv_capacity = 4097;
  EXPECT_EQ(decode_splits(p, l, 132, 3), 2);
  p.kv_capacity = int64_t{1} << 30;
  EXPECT_EQ(decode_splits(p, l, 132, 3), kMaxSplits);
  p.n_seqs = 2;  // 16 CTAs: the wave rule's 24 splits are more than the floor's 8
  p.kv_capacity = 32768;
  EXPECT_EQ(decode_splits(p, l, 132, 3), 24);
  p.n_seqs = 1;
  p.kv_capacity = 1 << 20;
  EXPECT_EQ(decode_splits(p, l, 132, 3), 49);
}

// Above four CTAs per SM, the split count that gives the busiest SM the fewest whole tiles:
// q8_0 K / turbo4 V (64-key tiles, five CTAs per SM) at 32K tokens in 82 splits is 400 keys
// (7 tiles) per CTA and five CTAs on most SMs, 35 tiles; 66 splits of 512 keys on four, 32.
// At 1M both come to ~1000 tiles and the five CTAs per SM stay.
TEST(CudaDecodePlan, SplitsAboveFourCtasPerSmTakeTheFewestTilesPerSm) {
  AttentionProblem p = problem(1, 32, 8, {128, 128}, 32768);
  p.k_type = KvType::q8_0;
  p.v_type = KvType::turbo4;
  const DecodeLayout l = decode_layout(p);
  ASSERT_EQ(l.bk, 64);
  EXPECT_EQ(busiest_sm_tiles(32768, 8, 82, 64, 132), 35);
  EXPECT_EQ(busiest_sm_tiles(32768, 8, 66, 64, 132), 32);
  EXPECT_EQ(busiest_sm_tiles(100, 8, 2, 64, 132), 1);  // 2 x 8 CTAs, one 64-key tile each
  EXPECT_EQ(decode_splits(p, l, 132, 5), 66);
  EXPECT_EQ(decode_splits(p, l, 132, 4), 66);
  p.kv_capacity = 4096;  // 64 splits (the 64-key floor) either way
  EXPECT_EQ(decode_splits(p, l, 132, 5), 64);
  p.kv_capacity = 1 << 20;
  EXPECT_EQ(decode_splits(p, l, 132, 5), 82);
  p.kv_capacity = 1 << 17;  // 25 tiles x 5 against 32 x 4
  EXPECT_EQ(decode_splits(p, l, 132, 5), 82);
  // A window bounds the keys: 32K of them at 1M capacity split as 32K.
  p.kv_capacity = 1 << 20;
  p.window = 32768;
  EXPECT_EQ(decode_splits(p, l, 132, 5), 66);
  // Four or fewer CTAs per SM: the whole-wave count, whatever the tiles (f16 at 3 per SM).
  p = problem(1, 32, 8, {128, 128}, 4096);
  EXPECT_EQ(decode_splits(p, decode_layout(p), 132, 3), 49);
}

}  // namespace
}  // namespace kvflash::cuda::decode

namespace kvflash::cuda::decode {
namespace {

// The tile copy's unit per layout, and for 16-byte leads: every row of every (sequence, head)
// fits its units, and the units fit the shared-memory slot (the kernel copies units * 16 bytes
// from the row start rounded down to 16 into each slot).
TEST(CudaDecodePlan, CopyModeFitsEveryRowAndSlot) {
  const auto* base = reinterpret_cast<const uint8_t*>(uintptr_t{1} << 20);  // 256-byte aligned
  auto mode = [&](KvType t, int32_t kvh, int64_t offset) {
    AttentionProblem p = problem(1, 4 * kvh, kvh, {128, 128}, 4096);
    p.k_type = p.v_type = t;
    const DecodeLayout l = decode_layout(p);
    const KvTensor kv = kv_tensor_contiguous(base + offset, t, 128, kvh, 4096);
    return copy_mode("k", kv, t, l.k_row_bytes, l.sk_stride, p);
  };
  struct Want {
    KvType t;
    int32_t kvh;
    int32_t unit;
    bool lead16;
    int32_t units;
  };
  // 8 heads: token strides 576 (q4_0), 1088 (q8_0), 400 (turbo3), multiples of 16: leads.
  // One head: the token stride is the row (72, 136, 50 bytes): 8- and 4-byte units.
  for (const Want& w : {Want{KvType::f16, 8, 16, false, 16}, Want{KvType::q4_0, 8, 16, true, 5},
                        Want{KvType::q8_0, 8, 16, true, 9}, Want{KvType::turbo3, 8, 16, true, 4},
                        Want{KvType::turbo4, 8, 16, true, 5}, Want{KvType::turbo2, 8, 16, true, 3},
                        Want{KvType::q4_0, 1, 8, false, 9}, Want{KvType::q8_0, 1, 8, false, 17},
                        Want{KvType::turbo3, 1, 4, false, 13}}) {
    SCOPED_TRACE(std::string(to_string(w.t)) + " kv heads " + std::to_string(w.kvh));
    Expected<CopyMode> m = mode(w.t, w.kvh, 0);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->unit, w.unit);
    EXPECT_EQ(m->lead16, w.lead16);
    EXPECT_EQ(m->units, w.units);
  }
  // Every quantized type, 1-9 heads, 2 sequences, data at every even offset in 16 bytes.
  for (KvType t : kAllKvTypes) {
    if (traits(t).block_values == 1) continue;
    for (int32_t kvh = 1; kvh <= 9; ++kvh)
      for (int64_t offset = 0; offset < 16; offset += 2) {
        AttentionProblem p = problem(1, 4 * kvh, kvh, {128, 128}, 4096);
        p.k_type = p.v_type = t;
        p.n_seqs = 2;
        const DecodeLayout l = decode_layout(p);
        const KvTensor kv = kv_tensor_contiguous(base + offset, t, 128, kvh, 4096);
        Expected<CopyMode> m = copy_mode("k", kv, t, l.k_row_bytes, l.sk_stride, p);
        SCOPED_TRACE(describe(p) + " offset " + std::to_string(offset));
        if (!m.ok()) {  // 4-byte units need a 4-byte aligned data pointer
          EXPECT_NE(offset % 4, 0) << m.error().message;
          continue;
        }
        EXPECT_LE(m->units * m->unit, l.sk_stride);
        if (!m->lead16) continue;
        EXPECT_EQ(kv.stride_token % 16, 0);
        for (int64_t s = 0; s < p.n_seqs; ++s)
          for (int64_t h = 0; h < kvh; ++h) {
            const auto row =
                reinterpret_cast<uintptr_t>(kv.data) + s * kv.stride_seq + h * kv.stride_head;
            EXPECT_EQ(row % 2, 0u);
            EXPECT_LE(static_cast<int64_t>(row & 15) + l.k_row_bytes, int64_t{m->units} * 16);
          }
      }
  }
}

// TMA tile copies (tma_tile_view): quantized caches of 16-byte aligned token rows, contiguous or in
// pages of a multiple of 16 tokens, get a view whose boxes, from each head's row rounded down to 16
// bytes, hold the row in the slot; everything TMA cannot describe is left to cp.async.
TEST(CudaDecodePlan, TmaTileViewCoversAlignedQuantizedCachesOnly) {
  const auto* base = reinterpret_cast<const uint8_t*>(uintptr_t{1} << 20);  // 256-byte aligned
  auto setup = [&](KvType t, int32_t kvh, int32_t seqs) {
    AttentionProblem p = problem(1, 4 * kvh, kvh, {128, 128}, 4096);
    p.k_type = p.v_type = t;
    p.n_seqs = seqs;
    return p;
  };
  // 8 heads of every quantized type, one or two sequences: the token row of all heads, the leads
  // ((72 h) & 15 = 8 for q4_0; up to 14 for turbo) fit the slot.
  for (KvType t : kAllKvTypes) {
    if (traits(t).block_values == 1) continue;
    for (int32_t seqs : {1, 2}) {
      const AttentionProblem p = setup(t, 8, seqs);
      const DecodeLayout l = decode_layout(p);
      const KvTensor kv = kv_tensor_contiguous(base, t, 128, 8, 4096);
      SCOPED_TRACE(describe(p));
      const std::optional<TmaTileView> v = tma_tile_view(kv, t, l.k_row_bytes, l.sk_stride, p);
      ASSERT_TRUE(v.has_value());
      EXPECT_EQ(v->extent, 8 * l.k_row_bytes);
      EXPECT_EQ(v->extent, kv.stride_token);
      EXPECT_EQ(v->rows, 4096);
      EXPECT_EQ(v->outer, seqs);
      if (seqs > 1) {
        EXPECT_EQ(v->outer_stride, kv.stride_seq);
      }
      EXPECT_EQ(v->outer_stride % 16, 0);
      for (int64_t h = 0; h < 8; ++h)
        EXPECT_LE(((h * kv.stride_head) & 15) + l.k_row_bytes, l.sk_stride) << "head " << h;
    }
  }
  const AttentionProblem q4 = setup(KvType::q4_0, 8, 1);
  const DecodeLayout l = decode_layout(q4);
  const KvTensor kv = kv_tensor_contiguous(base, KvType::q4_0, 128, 8, 4096);
  auto view = [&](const KvTensor& k, const AttentionProblem& p, int32_t slot) {
    return tma_tile_view(k, p.k_type, l.k_row_bytes, slot, p).has_value();
  };
  EXPECT_TRUE(view(kv, q4, l.sk_stride));
  // Paged: the pool as [page][token in page][row bytes], boxes of one 16-key step; pages not a
  // multiple of 16 tokens, or a window (its range starts anywhere), are left to cp.async.
  for (const int32_t page : {16, 64, 256}) {
    AttentionProblem paged = q4;
    paged.page_size = page;
    const KvTensor pool = kv_tensor_paged(base, KvType::q4_0, 128, 8, page, 300, nullptr, 1);
    const std::optional<TmaTileView> v =
        tma_tile_view(pool, KvType::q4_0, l.k_row_bytes, l.sk_stride, paged);
    ASSERT_TRUE(v.has_value()) << page;
    EXPECT_EQ(v->rows, page);
    EXPECT_EQ(v->outer, 300);
    EXPECT_EQ(v->outer_stride, pool.stride_page);
    paged.window = 100;
    EXPECT_FALSE(view(pool, paged, l.sk_stride)) << page;
  }
  for (const int32_t page : {1, 7, 8, 24}) {
    AttentionProblem paged = q4;
    paged.page_size = page;
    EXPECT_FALSE(view(kv_tensor_paged(base, KvType::q4_0, 128, 8, page, 300, nullptr, 1), paged,
                      l.sk_stride))
        << page;
  }
  // Float rows, an unaligned data pointer, a slot without room for the lead.
  const AttentionProblem f16 = setup(KvType::f16, 8, 1);
  EXPECT_FALSE(tma_tile_view(kv_tensor_contiguous(base, KvType::f16, 128, 8, 4096), KvType::f16,
                             256, decode_layout(f16).sk_stride, f16)
                   .has_value());
  KvTensor shifted = kv;
  shifted.data = base + 8;
  EXPECT_FALSE(view(shifted, q4, l.sk_stride));
  EXPECT_FALSE(view(kv, q4, 72));
  // One head: the token stride is the 72-byte row, not a multiple of 16.
  const AttentionProblem one = setup(KvType::q4_0, 1, 1);
  EXPECT_FALSE(view(kv_tensor_contiguous(base, KvType::q4_0, 128, 1, 4096), one, l.sk_stride));
  // Head-major rows (each head's tokens contiguous): the heads are not inside one token's row.
  KvTensor head_major = kv;
  head_major.stride_token = 80;
  head_major.stride_head = 80 * 4096;
  EXPECT_FALSE(view(head_major, q4, l.sk_stride));
  // Two sequences 8 bytes off a multiple of 16 apart.
  const AttentionProblem two = setup(KvType::q4_0, 8, 2);
  KvTensor odd_seq = kv;
  odd_seq.stride_seq += 8;
  EXPECT_FALSE(view(odd_seq, two, l.sk_stride));
}

// The kernels divide by launch constants with fast_div's magic numbers: exact for every
// numerator in [0, 2^31) (tested: every divisor up to 4096 against every numerator up to 65536,
// then powers of two, their neighbours and random divisors against the extremes and random
// numerators).
TEST(CudaDecodeFastDiv, QuotientIsExactForEveryNonNegativeInt) {
  for (int32_t d = 1; d <= 4096; ++d) {
    const FastDiv f = fast_div(d);
    for (int32_t n = 0; n <= 65536; ++n)
      if (fast_div_host(n, f) != n / d)
        FAIL() << n << " / " << d << " gave " << fast_div_host(n, f);
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> any(0, INT32_MAX);
  std::vector<int32_t> divisors;
  for (int s = 0; s < 31; ++s)
    for (const int32_t e : {-1, 0, 1}) divisors.push_back((int32_t{1} << s) + e);
  for (int i = 0; i < 200; ++i) divisors.push_back(any(rng) | 1);
  for (const int32_t d : divisors) {
    if (d < 1) continue;
    const FastDiv f = fast_div(d);
    std::vector<int32_t> ns = {
        0, 1, d - 1, d, INT32_MAX, INT32_MAX - 1, INT32_MAX / d * d, INT32_MAX / d * d - 1};
    for (int i = 0; i < 2000; ++i) ns.push_back(any(rng));
    for (const int32_t n : ns) {
      if (n >= 0) {
        ASSERT_EQ(fast_div_host(n, f), n / d) << n << " / " << d;
      }
    }
  }
}

}  // namespace
}  // namespace kvflash::cuda::decode
