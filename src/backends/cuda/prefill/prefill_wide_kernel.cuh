// The wide CUDA prefill kernel (head dims 512 and 576/512, PrefillLayout's wide instance): 64
// query rows per CTA, owned by both warpgroups, each computing the rows' S = Q.K^T itself and
// P.V over its 256 of the V dims (the accumulators of 512 dims would not fit one warpgroup's
// registers); one operand tile per tensor (a 576-dim K tile takes 72 KiB beside Q's), filled by
// the threads: f16 / bf16 rows by cp.async, quantized rows decoded straight from global memory,
// f32 rows converted. Tile by tile, no copy in flight while the tensor cores work: it serves
// these head dims correctly at a fraction of the 128- and 256-dim kernels' speed.
#pragma once

#include "backends/cuda/prefill/prefill_tiles.cuh"

namespace kvflash::cuda::prefill {

// Keys [k0, k0 + kTileKeys) of one tensor into its operand tile (`dc` computed dims; rows past the
// range's end zero).
template <KvType T>
__device__ __forceinline__ void load_operand_tile(const PrefillParams& p, const TileCopy& c,
                                                  const PrefillCta& cta, int64_t k0, uint8_t* dst,
                                                  int dc, const FastDiv& div_items, int tid,
                                                  int* bad_input) {
  constexpr TileMode kMode = tile_mode(T);
  if constexpr (kMode == TileMode::direct) {
    issue_tile<TileMode::direct, kTileKeys>(p, c, dst, nullptr, 0, cta, k0, tid, bad_input);
    cp_async_commit();
  } else if constexpr (kMode == TileMode::raw) {
    decode_rows<T>(p, c, cta, k0, dst, dc, div_items, tid, bad_input);
  } else {
    convert_tile(p, c, cta, k0, dst, dc, div_items, tid, bad_input);
  }
}

template <KvType KT, KvType VT, int DVB>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_wide_kernel(const __grid_constant__ PrefillParams p) {
  static_assert(is_wide(DVB));
  constexpr int kMT = m_tiles(DVB), kRows = block_rows(DVB);

  extern __shared__ __align__(128) uint8_t smem_raw[];
  __shared__ uint32_t sign_words[4];
  __shared__ WeighedMarks marks;  // zero_hidden_v's
  __shared__ int bad_input;
  uint8_t* const smem = aligned_smem(smem_raw);
  const int tid = threadIdx.x, warp = tid >> 5, g = (tid & 31) >> 2;

  PrefillCta cta;
  static_assert(kKeysOf<KT, VT, DVB> == kTileKeys);
  if (!prefill_cta(p, kRows, kTileKeys, cta)) return;
  start_cta(p, cta, sign_words, marks, bad_input, tid);

  // Q (turbo K: rotated through the scratch inside K's tile, which no tile fills before the first
  // barrier of the loop).
  uint8_t* const sq = smem + p.q_off;
  stage_q<KT, kRows, qk_dims(KT, DVB)>(
      p, cta, sq, reinterpret_cast<float*>(smem + p.scratch_off) + warp * 128, sign_words, tid);

  LaneRows<kMT, v_tiles(DVB)> rows;
  rows.init(cta, warp & 3, g);  // warps w and w + 4: the same rows
  const int64_t pq_lo = cta.first_q + cta.row0 / p.group;
  const int64_t pq_hi = cta.first_q + (cta.row_end - 1) / p.group;
  const uint32_t sq_addr = smem_addr(sq);
  uint8_t* const sk = smem + (tile_mode(KT) == TileMode::direct ? p.k_stage_off : p.k_dec_off);
  uint8_t* const sv = smem + (tile_mode(VT) == TileMode::direct ? p.v_stage_off : p.v_dec_off);
  const int64_t n_tiles = (cta.keys.hi - cta.keys.lo + kTileKeys - 1) / kTileKeys;
  int hidden_calls = 0;
  for (int64_t j = 0; j < n_tiles; ++j) {
    const int64_t k0 = cta.keys.lo + j * kTileKeys;
    __syncthreads();  // every warp is done with tile j - 1 (and Q's scratch)
    load_operand_tile<KT>(p, p.k, cta, k0, sk, p.dkc, p.k_div_items, tid, &bad_input);
    load_operand_tile<VT>(p, p.v, cta, k0, sv, p.dvc, p.v_div_items, tid, &bad_input);
    cp_async_wait<0>();
    fence_proxy_async();  // the tiles (and Q) before the tensor cores read them
    __syncthreads();
    const bool masked =
        prefill_tile_needs_mask(k0, kTileKeys, cta.keys.hi, p.causal, p.window, pq_lo, pq_hi);
    attend_tile<KT, VT, DVB>(p, cta, rows, sq_addr, sk, sv, k0, masked, marks, hidden_calls, tid);
  }
  __syncthreads();  // everyone is done with the tiles; bad_input is final
  write_rows<VT, DVB>(p, cta, rows, bad_input != 0, smem, sign_words, tid);
}

}  // namespace kvflash::cuda::prefill
