#include "backends/cuda/prefill/prefill_plan.hpp"

#include <algorithm>

namespace kvflash::cuda::prefill {

namespace {

constexpr int32_t round_up(int64_t x, int32_t m) {
  return static_cast<int32_t>((x + m - 1) / m * m);
}

// Bytes of a raw row's slot: the row after a lead of up to 15 bytes (16-byte copies from the row
// start rounded down) or 3 (4-byte copies), as decode's copy_mode reads it; an odd number of
// 16-byte units apart so that consecutive rows start in different banks.
constexpr int32_t raw_slot(int32_t row_bytes) {
  int32_t s = round_up(row_bytes + 16, 16);
  if (s % 32 == 0) s += 16;
  return s;
}

}  // namespace

int32_t prefill_dim(KvType t, int32_t d) {
  // fp8 rows are decoded as the quantized types' are, 32 dims at a time (the dims past the row
  // zero): head dim 80 computes as 96, as q8_0's does.
  if (is_fp8(t)) return round_up(d, 32);
  if (traits(t).block_values == 1) return round_up(d, 16);
  return static_cast<int32_t>(padded_values(t, d));
}

PrefillLayout prefill_layout(const AttentionProblem& p) {
  PrefillLayout l;
  l.dkc = prefill_dim(p.k_type, p.head_dim.k);
  l.dvc = prefill_dim(p.v_type, p.head_dim.v);
  l.dv_bucket = dims_bucket(l.dkc, l.dvc);
  l.block_rows = block_rows(l.dv_bucket);
  l.k_row_bytes = static_cast<int32_t>(row_size(p.k_type, p.head_dim.k));
  l.v_row_bytes = static_cast<int32_t>(row_size(p.v_type, p.head_dim.v));
  l.k_mode = tile_mode(p.k_type);
  l.v_mode = tile_mode(p.v_type);
  l.k_slot = l.k_mode == TileMode::raw ? raw_slot(l.k_row_bytes) : 0;
  l.v_slot = l.v_mode == TileMode::raw ? raw_slot(l.v_row_bytes) : 0;
  l.tile_keys = tile_keys(l.k_mode, l.v_mode, l.dv_bucket);
  const int32_t k_tile = swizzled_bytes(l.tile_keys, l.dkc);
  const int32_t v_tile = swizzled_bytes(l.tile_keys, l.dv_bucket);
  const int64_t rows = int64_t{p.n_q_tokens} * p.group();
  l.n_row_blocks = static_cast<int32_t>((rows + l.block_rows - 1) / l.block_rows);
  l.out_stride = l.dvc + 4;
  l.smem_epilogue = size_t(l.block_rows) * l.out_stride * 4;

  int32_t off = 0;
  l.q_off = off;
  off += swizzled_bytes(l.block_rows, qk_dims(p.k_type, l.dv_bucket));  // see qk_tile
  if (is_wide(l.dv_bucket)) {
    // One operand tile per tensor: a direct tensor's at its stage offset, the others' at their
    // decoded offset; the turbo scratch inside K's.
    l.n_stages = 1;
    off = round_up(off, kSwizzleAlign);
    (l.k_mode == TileMode::direct ? l.k_stage_off : l.k_dec_off) = off;
    l.scratch_off = is_rotated(p.k_type) ? off : 0;
    off += k_tile;
    (l.v_mode == TileMode::direct ? l.v_stage_off : l.v_dec_off) = off;
    off += v_tile;
    l.stage_bytes = 0;
    l.smem_main = static_cast<size_t>(off);
    l.smem_total = std::max(l.smem_main, l.smem_epilogue) + kSwizzleAlign;
    return l;
  }
  // One stage: K's tile (operand tile, or raw slots and their leads), then V's; operand tiles
  // at multiples of kSwizzleAlign (so every stage starts at one).
  int32_t stage = 0;
  const auto stage_tensor = [&](TileMode mode, int32_t op_tile, int32_t slot, int32_t& data,
                                int32_t& lead) {
    if (mode == TileMode::direct) {
      stage = round_up(stage, kSwizzleAlign);
      data = off + stage;
      stage += op_tile;
    }
    if (mode == TileMode::raw) {
      stage = round_up(stage, 128);  // (TMA's boxes land at 128-byte aligned addresses)
      data = off + stage;
      stage += l.tile_keys * slot;
      lead = off + stage;
      stage += l.tile_keys;
      stage = round_up(stage, 16);
    }
  };
  stage_tensor(l.k_mode, k_tile, l.k_slot, l.k_stage_off, l.k_lead_off);
  stage_tensor(l.v_mode, v_tile, l.v_slot, l.v_stage_off, l.v_lead_off);
  l.stage_bytes = round_up(stage, kSwizzleAlign);
  const int32_t dec =
      (l.k_mode != TileMode::direct ? k_tile : 0) + (l.v_mode != TileMode::direct ? v_tile : 0);
  const int32_t scratch = is_rotated(p.k_type) ? kWarps * 128 * 4 : 0;
  // A pair that may run the TMA kernel: two or three decoded sets, as many stages as the budget
  // holds.
  if (tma_kernel_pair(l.k_mode, l.v_mode, l.dv_bucket)) {
    l.n_dec = dec == 0 ? 1 : tma_dec_sets(l.dv_bucket);
    const int32_t fit = (kTmaSmemBudget - off - l.n_dec * dec - scratch) / l.stage_bytes;
    l.n_stages = std::clamp(fit, kStages, kMaxTmaStages);
  }
  off += l.n_stages * l.stage_bytes;
  l.dec_stride = dec;
  if (l.k_mode != TileMode::direct) l.k_dec_off = off;
  if (l.v_mode != TileMode::direct) l.v_dec_off = off + (l.k_mode != TileMode::direct ? k_tile : 0);
  off += l.n_dec * dec;
  if (scratch > 0) {
    l.scratch_off = off;
    off += scratch;
  }
  l.smem_main = static_cast<size_t>(off);
  l.smem_total = std::max(l.smem_main, l.smem_epilogue) + kSwizzleAlign;
  return l;
}

bool prefill_tma_view(const KvTmaTensor& kv, int32_t row_bytes, int32_t box_bytes, bool direct,
                      const AttentionProblem& p, PrefillTmaView& v) {
  if (box_bytes % 16 != 0 || box_bytes > 256 || (direct && kv.stride_head % 16 != 0)) return false;
  if (!direct && 15 + row_bytes > box_bytes) return false;  // the widest lead and the row
  const std::optional<KvTmaView> view = kv_tma_view(kv, row_bytes, 16, p);
  if (!view) return false;
  static_cast<KvTmaView&>(v) = *view;
  v.box_rows = p.page_size <= 0        ? kTileKeys
               : p.page_size % 64 == 0 ? 64
               : p.page_size % 32 == 0 ? 32
                                       : 16;
  return true;
}

int32_t prefill_splits(const AttentionProblem& p, const PrefillLayout& l, int32_t sm_count) {
  const int64_t ctas = int64_t{l.n_row_blocks} * p.n_kv_heads * p.n_seqs;
  if (ctas >= sm_count) return 1;
  int64_t keys = p.kv_capacity;
  if (p.window > 0) keys = std::min<int64_t>(keys, p.window + p.n_q_tokens);
  const int64_t tiles = (keys + l.tile_keys - 1) / l.tile_keys;
  const int64_t max_s =
      std::max<int64_t>(1, std::min<int64_t>(tiles / kMinSplitTiles, kMaxPrefillSplits));
  // The splits of least modelled time: waves of CTAs (ceil(ctas s / SMs)), each walking its share
  // of the tiles plus a fixed kMinSplitTiles (Q's staging, the pipeline's fill, the epilogue);
  // the fewest on a tie. (One wave filled as far as it goes was the rule before: 72 CTAs on 132
  // SMs then ran unsplit, at half the device.)
  const auto cost = [&](int64_t s) {
    return (ctas * s + sm_count - 1) / sm_count * ((tiles + s - 1) / s + kMinSplitTiles);
  };
  int64_t best = 1;
  for (int64_t s = 2; s <= max_s; ++s)
    if (cost(s) < cost(best)) best = s;
  return static_cast<int32_t>(best);
}

PrefillParts prefill_parts(const AttentionProblem& p, const PrefillLayout& l, int32_t n_splits) {
  PrefillParts parts;
  parts.n_slots = int64_t{p.n_seqs} * p.n_kv_heads * n_splits;
  parts.rows = int64_t{p.n_q_tokens} * p.group();
  parts.dvc = l.dvc;
  return parts;
}

}  // namespace kvflash::cuda::prefill
