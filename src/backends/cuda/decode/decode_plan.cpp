#include "backends/cuda/decode/decode_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/common/kv_values.hpp"
#include "backends/cuda/decode/decode_params.hpp"
#include "backends/cuda/decode/decode_rules.hpp"

namespace kvflash::cuda::decode {
namespace {
int32_t round_up(int64_t x, int64_t m) {
  return static_cast<int32_t>((x + m - 1) / m * m);
}

}  // namespace

DecodeLayout decode_layout(const AttentionProblem& p) {
  DecodeLayout l;
  l.dkc = computed_dim_k(p.k_type, p.head_dim.k);
  l.dvc = computed_dim_v(p.v_type, p.head_dim.v);
  l.k_row_bytes = static_cast<int32_t>(row_size(p.k_type, p.head_dim.k));
  l.v_row_bytes = static_cast<int32_t>(row_size(p.v_type, p.head_dim.v));
  // V dims per warp: at most 128 (16 accumulator tiles of 8).
  l.n_dslices = l.dvc <= 128 ? 1 : (l.dvc <= 256 ? 2 : 4);
  l.slice_w = l.dvc / l.n_dslices;
  // Query rows: M tiles of 16; the warps left over split each tile's keys.
  const int32_t rows = p.rows_per_kv_head();
  const int32_t max_mtiles = kWarps / l.n_dslices;
  const int32_t need = (rows + 15) / 16;
  l.n_mtiles = 1;
  while (l.n_mtiles < need && l.n_mtiles < max_mtiles) l.n_mtiles *= 2;
  l.row_block = 16 * l.n_mtiles;
  // The kernel's query rows are MMA N tiles of 8 (keys are the M dimension): one of them where
  // it is enough (one token of GQA <= 8) frees its accumulators' registers.
  l.n_qtiles = rows <= 8 ? 1 : 2;
  l.n_row_blocks = (rows + l.row_block - 1) / l.row_block;
  l.n_kgroups = kWarps / (l.n_mtiles * l.n_dslices);

  // Shared-memory rows: room for a 2-byte lead (4-byte copies of 2-aligned rows), the computed
  // dims, and whole 16-byte units; +16 when a multiple of 128 to spread banks.
  const int32_t k_elem =
      static_cast<int32_t>(traits(p.k_type).block_values == 1 ? traits(p.k_type).block_bytes : 0);
  const int32_t k_need = std::max(l.k_row_bytes + 4, k_elem * l.dkc);
  l.sk_stride = round_up(k_need, 16);
  if (l.sk_stride % 128 == 0) l.sk_stride += 16;
  l.sv_stride = round_up(l.v_row_bytes + 4, 16);
  if (l.sv_stride % 128 == 0) l.sv_stride += 16;

  const int32_t k_units = is_rotated(p.k_type) ? l.dkc / 128 : l.dkc / 32;  // split units
  const int32_t k_unit_blocks = is_rotated(p.k_type) ? 4 : 1;
  l.k_split = l.n_qtiles == 1 && l.n_dslices > 1 && k_units % l.n_dslices == 0 &&
              has_k_split_kernel(p.k_type, p.v_type);
  l.k_share = l.k_split ? k_units / l.n_dslices * k_unit_blocks : l.dkc / 32;
  l.int8_qk = uses_int8_qk(p.k_type, p.v_type, l.n_qtiles, l.k_split);

  // Q's fragments: per lane 16 bytes per 16-dim chunk, with int8 Q.K^T per 32-dim block (two
  // int8 planes). q8_0 / q4_0 K with one query n-tile: the query's bias terms per row and 32-dim
  // block follow (int8: the rows' steps); their per-chunk parts (prologue only) follow the
  // staged Q rows in stage 1. (Sized for f16 fragments, q8_0 K / turbo3 V's 128-key tiles missed
  // the 4-CTA stage room below by 256 bytes and halved.)
  l.smem_q_bytes = q_frag_bytes(l.n_mtiles, l.dkc, l.int8_qk);
  const bool fold = folds_k_bias(p.k_type, l.n_qtiles);
  if (fold) l.smem_q_bytes += round_up(int64_t{l.row_block} * (l.dkc / 32) * 4, 128);
  if (l.k_split) l.smem_q_bytes += kScoreXchgBytes;

  const int32_t per_key = l.k_row_bytes + l.v_row_bytes;
  const int32_t quantum = 16 * l.n_kgroups;
  int32_t bk = kStageTargetBytes / per_key / quantum * quantum;
  {
    // Two stages of kCtasPerSm CTAs should fit an SM (1 KB reserved per CTA, and the kernel's
    // static shared memory): fewer keys per tile where the byte target's tiles do not (8 tokens
    // of q4_0: 160 -> 128 keys).
    const int64_t stage_room =
        (int64_t{kSmemPerSm} / kCtasPerSm - 1024 - kStaticSmemBytes - l.smem_q_bytes) / 2;
    const int64_t fit = stage_room / (l.sk_stride + l.sv_stride) / quantum * quantum;
    bk = static_cast<int32_t>(std::min<int64_t>(bk, fit));
  }
  l.bk = std::clamp(bk, quantum, std::max(quantum, kMaxTileKeys));
  const int64_t tiles = int64_t{l.bk} * (l.sk_stride + l.sv_stride);
  const int64_t q_stage =
      int64_t{l.row_block} * l.dkc * 4 + (fold ? int64_t{l.row_block} * (l.dkc / 16) * 4 : 0);
  // Epilogue: every warp's accumulators in fragment order (32 lanes x 68 floats, one n-tile:
  // 36), the merged rows, and per key group m, l and weights, plus the final m, l.
  const int64_t frag_stride = epilogue_frag_stride(l.n_qtiles);
  const int64_t reduce = (int64_t{kWarps} * 32 * frag_stride + int64_t{l.row_block} * l.dvc +
                          int64_t{l.n_kgroups} * l.row_block * 3 + int64_t{l.row_block} * 2) *
                         4;
  // Q is staged in stage 1 while tile 0 arrives in stage 0; the key groups merge across all
  // of the shared memory (Q fragments and stages). Three stages where kCtasPerSm CTAs still fit
  // an SM, else two: resident warps matter more than pipeline depth (the
  // kernel waits on latency at 12-16 warps per SM). Measured on the H200: f16 at 1M tokens fell
  // from 78% to 52% of the read bandwidth at two CTAs per SM; with 24 KB stages and 4 CTAs (128
  // registers) instead of 32 KB and 3, q8_0 / q4_0 / turbo3 at 1M took 13% / 7% / 7% less time and
  // 8 f16 query tokens 13% less (bench/results/2026-11-30-h200-occupancy.md at 24b4e9e).
  for (l.n_stages = kMaxStages; l.n_stages >= 2; --l.n_stages) {
    // Multiples of 128 bytes: TMA boxes land at 128-byte aligned stage and tile starts.
    l.smem_kv_bytes = round_up(
        std::max({tiles, q_stage, (reduce - l.smem_q_bytes + l.n_stages - 1) / l.n_stages}), 128);
    l.smem_total = static_cast<size_t>(l.smem_q_bytes) + size_t(l.n_stages) * l.smem_kv_bytes;
    if (l.n_stages == 2 ||
        kCtasPerSm * (l.smem_total + 1024 + kStaticSmemBytes) <= int64_t{kSmemPerSm})
      break;
  }
  return l;
}

int64_t busiest_sm_tiles(int64_t keys, int64_t ctas_per_split, int64_t splits, int32_t bk,
                         int32_t sm_count) {
  const int64_t chunk = (keys + splits - 1) / splits;
  const int64_t chunk16 = (chunk + 15) / 16 * 16;  // as the kernel rounds it
  const int64_t active = (keys + chunk16 - 1) / chunk16;
  const int64_t per_sm = (ctas_per_split * active + sm_count - 1) / sm_count;
  return (chunk16 + bk - 1) / bk * per_sm;
}

int32_t tile_box(const DecodeLayout& l) {
  return 16 * l.n_kgroups;
}

int32_t tile_step_rows(const DecodeLayout& l) {
  return l.bk / 2 / tile_box(l) * tile_box(l);
}

namespace {

// The wave rule: enough CTAs to fill the SMs, at most `cap` splits (see decode_splits).
int32_t wave_splits(const AttentionProblem& p, const DecodeLayout& l, int32_t sm_count,
                    int32_t ctas_per_sm, int64_t cap) {
  const int64_t base = int64_t{p.n_seqs} * p.n_kv_heads * l.n_row_blocks;
  const int32_t sms = std::max(sm_count, 1);
  const int32_t resident = std::max(ctas_per_sm, 1);
  if (base >= int64_t{sms} * resident) return 1;
  // Whole waves: for r CTAs per SM, the largest split count whose CTAs all fit in one wave of
  // r per SM (a second wave of a few CTAs would double the time, each of them reading a full
  // split alone).
  const auto splits_at = [&](int32_t r) {
    return std::clamp<int64_t>(int64_t{sms} * r / base, 1, cap);
  };
  // Which r, where more than kCtasPerSm fit: the keys at capacity (a window's span if shorter)
  // split into tiles, the busiest SM's tiles for each r from kCtasPerSm up, and the highest r
  // within kSplitLoadSlack of the least. Beyond kCtasPerSm CTAs (16 warps) per SM, more of them
  // hide a little more latency (at equal tiles per SM, 5 instead of 4 took q8_0 K / turbo4 V at
  // 1M 3% less time), but where rounding to whole tiles and whole CTAs per SM gives the busiest
  // SM more tiles it costs them: at 32K, 82 splits of 7 tiles on 5 CTAs per SM (35 tiles) took
  // 4-9% more time than 66 splits of 8 on 4 (32). Fewer than kCtasPerSm are never chosen for
  // tiles: they leave the kernel waiting on latency.
  const int64_t keys = p.window > 0
                           ? std::min<int64_t>(p.kv_capacity, int64_t{p.window} + p.n_q_tokens - 1)
                           : p.kv_capacity;
  const int32_t r_lo = std::min(resident, kCtasPerSm);
  if (keys <= 0 || resident == r_lo) return static_cast<int32_t>(splits_at(resident));
  int64_t least = INT64_MAX;
  for (int32_t r = r_lo; r <= resident; ++r)
    least = std::min(least, busiest_sm_tiles(keys, base, splits_at(r), l.bk, sms));
  for (int32_t r = resident; r > r_lo; --r)
    if (busiest_sm_tiles(keys, base, splits_at(r), l.bk, sms) * 100 <= least * kSplitLoadSlack)
      return static_cast<int32_t>(splits_at(r));
  return static_cast<int32_t>(splits_at(r_lo));
}

}  // namespace

int32_t decode_splits(const AttentionProblem& p, const DecodeLayout& l, int32_t sm_count,
                      int32_t ctas_per_sm) {
  // Never fewer than kMinKeysPerSplit keys per split, never more than kMaxSplits splits.
  const int64_t cap = std::min<int64_t>(
      std::max<int64_t>(1, (p.kv_capacity + kMinKeysPerSplit - 1) / kMinKeysPerSplit), kMaxSplits);
  const int64_t batch_floor =
      p.n_seqs > 1 ? std::min<int64_t>((p.kv_capacity + kBatchSplitKeys - 1) / kBatchSplitKeys, cap)
                   : 1;
  return static_cast<int32_t>(
      std::max<int64_t>(wave_splits(p, l, sm_count, ctas_per_sm, cap), batch_floor));
}

size_t decode_workspace_bytes(const AttentionProblem& p, const DecodeLayout& l, int32_t n_splits) {
  if (n_splits <= 1) return 0;
  return static_cast<size_t>(p.n_seqs) * p.n_kv_heads * n_splits * p.rows_per_kv_head() *
         (static_cast<size_t>(l.dvc) + 2) * sizeof(float);
}

// TileIssue::tma_paged_tile issues a tile's boxes from the lanes of a half warp, one each.
static_assert(kMaxTileKeys <= 16 * kPagedTmaBox);

std::optional<TmaTileView> tma_tile_view(const KvTensor& kv, KvType type, int32_t row_bytes,
                                         int32_t slot, const AttentionProblem& p) {
  if (!tma_copyable(type) || slot > 256) return std::nullopt;
  // The widest lead and the row (a sequence stride that is not a multiple of 16 fails below).
  if (widest_lead16(kv, p) + row_bytes > slot) return std::nullopt;
  return kv_tma_view(kv_tma_tensor(kv), row_bytes, kPagedTmaBox, p);
}

}  // namespace kvflash::cuda::decode
