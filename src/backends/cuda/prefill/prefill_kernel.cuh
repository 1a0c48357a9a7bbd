// The CUDA prefill kernels and their entry points: one CTA per (block of query rows, KV head,
// sequence), the steps of prefill_tiles.cuh (S = Q.K^T and P.V on the warpgroup MMA, the online
// softmax with state.hpp's rule, quantized tiles decoded on chip by decode's fragment decoders, no
// whole-window temporary). Two ways to feed them: this file's kernel, whose threads copy each
// tile (cp.async; f32 rows converted as they are read) into two stages, for every pair and
// layout; and the TMA-fed, warp-specialized kernel of prefill_tma_kernel.cuh for the pairs of
// tma_kernel_pair whose tensors prefill_tma_view describes. launch_prefill picks by p.tma; head
// dims above 256 (the wide bucket) run prefill_wide_kernel.cuh's kernel.
#pragma once

#include "backends/cuda/prefill/prefill_tiles.cuh"
#include "backends/cuda/prefill/prefill_tma_kernel.cuh"
#include "backends/cuda/prefill/prefill_wide_kernel.cuh"

namespace kvflash::cuda::prefill {

// DVB: the instance's V dims (128 or 256), the accumulators' size; the head dims themselves are
// parameters. Each warp owns kMT = m_tiles(DVB) M tiles of 16 rows.
template <KvType KT, KvType VT, int DVB>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_kernel(const __grid_constant__ PrefillParams p) {
  constexpr TileMode kModeK = tile_mode(KT), kModeV = tile_mode(VT);
  constexpr int kMT = m_tiles(DVB), kRows = block_rows(DVB), kKeys = kKeysOf<KT, VT, DVB>;
  // (decoded and converted tiles are kTileKeys rows: only f16 / bf16 pairs have longer tiles)
  static_assert(kKeys == kTileKeys || (kModeK == TileMode::direct && kModeV == TileMode::direct));

  extern __shared__ __align__(128) uint8_t smem_raw[];
  __shared__ uint32_t sign_words[4];
  __shared__ WeighedMarks marks;  // zero_hidden_v's
  __shared__ int bad_input;
  uint8_t* const smem = aligned_smem(smem_raw);
  const int tid = threadIdx.x, warp = tid >> 5, g = (tid & 31) >> 2;

  PrefillCta cta;
  if (!prefill_cta(p, kRows, kKeys, cta)) return;
  start_cta(p, cta, sign_words, marks, bad_input, tid);

  uint8_t* const sq = smem + p.q_off;
  const auto stage = [&](int s) { return smem + s * p.stage_bytes; };
  const int64_t n_tiles = (cta.keys.hi - cta.keys.lo + kKeys - 1) / kKeys;
  const auto issue = [&](int64_t j) {
    uint8_t* st = stage(static_cast<int>(j & 1));
    const int64_t k0 = cta.keys.lo + j * kKeys;
    if constexpr (kModeK != TileMode::convert)
      issue_tile<kModeK, kKeys>(p, p.k, st + p.k_stage_off, st + p.k_lead_off, p.k_slot, cta, k0,
                                tid, &bad_input);
    if constexpr (kModeV != TileMode::convert)
      issue_tile<kModeV, kKeys>(p, p.v, st + p.v_stage_off, st + p.v_lead_off, p.v_slot, cta, k0,
                                tid, &bad_input);
    cp_async_commit();
  };
  if (n_tiles > 0) issue(0);
  stage_q<KT, kRows, qk_dims(KT, DVB)>(
      p, cta, sq, reinterpret_cast<float*>(smem + p.scratch_off) + warp * 128, sign_words, tid);

  LaneRows<kMT, v_tiles(DVB)> rows;
  rows.init(cta, warp, g);
  const int64_t pq_lo = cta.first_q + cta.row0 / p.group;
  const int64_t pq_hi = cta.first_q + (cta.row_end - 1) / p.group;
  const uint32_t sq_addr = smem_addr(sq);
  int hidden_calls = 0;

  for (int64_t j = 0; j < n_tiles; ++j) {
    cp_async_wait<0>();
    fence_proxy_async();  // the copies (and Q's staging) before the tensor cores read them
    __syncthreads();      // tile j landed for all; every warp is done with tile j - 1
    if (j + 1 < n_tiles) issue(j + 1);
    uint8_t* st = stage(static_cast<int>(j & 1));
    const int64_t k0 = cta.keys.lo + j * kKeys;
    decode_stage<KT, VT>(p, st, smem, RowLeads{st + p.k_lead_off}, RowLeads{st + p.v_lead_off},
                         tid);
    if constexpr (kModeK == TileMode::convert)
      convert_tile(p, p.k, cta, k0, smem + p.k_dec_off, p.dkc, p.k_div_items, tid, &bad_input);
    if constexpr (kModeV == TileMode::convert)
      convert_tile(p, p.v, cta, k0, smem + p.v_dec_off, p.dvc, p.v_div_items, tid, &bad_input);
    if constexpr (kModeK != TileMode::direct || kModeV != TileMode::direct) {
      fence_proxy_async();
      __syncthreads();
    }
    const uint8_t* sk = kModeK == TileMode::direct ? st + p.k_stage_off : smem + p.k_dec_off;
    uint8_t* sv = kModeV == TileMode::direct ? st + p.v_stage_off : smem + p.v_dec_off;
    const bool masked =
        prefill_tile_needs_mask(k0, kKeys, cta.keys.hi, p.causal, p.window, pq_lo, pq_hi);
    attend_tile<KT, VT, DVB>(p, cta, rows, sq_addr, sk, sv, k0, masked, marks, hidden_calls, tid);
  }
  __syncthreads();  // everyone is done with the tiles; bad_input is final
  write_rows<VT, DVB>(p, cta, rows, bad_input != 0, smem, sign_words, tid);
}

// The instance's entry points (prefill.cu's table): pairs of tma_kernel_pair with p.tma run the
// TMA kernel, the wide bucket the wide kernel (prefill_wide_kernel.cuh).
template <KvType KT, KvType VT, int DVB>
constexpr bool has_tma_kernel() {
  return tma_kernel_pair(tile_mode(KT), tile_mode(VT), DVB);
}
template <KvType KT, KvType VT, int DVB>
cudaError_t prepare_prefill(size_t smem) {
  const auto allow = [&](auto kernel) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem));
  };
  if constexpr (is_wide(DVB)) {
    return allow(prefill_wide_kernel<KT, VT, DVB>);
  } else {
    if constexpr (has_tma_kernel<KT, VT, DVB>()) {
      if (cudaError_t e = allow(prefill_tma_kernel<KT, VT, DVB>); e != cudaSuccess) return e;
    }
    return allow(prefill_kernel<KT, VT, DVB>);
  }
}
template <KvType KT, KvType VT, int DVB>
void launch_prefill(const PrefillParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  if constexpr (is_wide(DVB)) {
    prefill_wide_kernel<KT, VT, DVB><<<grid, kThreads, smem, stream>>>(p);
  } else {
    if constexpr (has_tma_kernel<KT, VT, DVB>()) {
      if (p.tma) {
        prefill_tma_kernel<KT, VT, DVB><<<grid, kTmaThreads, smem, stream>>>(p);
        return;
      }
    }
    prefill_kernel<KT, VT, DVB><<<grid, kThreads, smem, stream>>>(p);
  }
}

}  // namespace kvflash::cuda::prefill
