// The TMA-fed, warp-specialized CUDA prefill kernel: a producer warpgroup issues each tile's
// TMA boxes into a ring of stages with full and empty mbarriers; the two MMA warpgroups run the
// steps of prefill_tiles.cuh.
#pragma once

#include <cstdint>

#include "backends/cuda/common/async_copy.cuh"
#include "backends/cuda/common/wgmma.cuh"
#include "backends/cuda/prefill/prefill_tiles.cuh"

namespace kvflash::cuda::prefill {

// One tensor's boxes of a tile into its place in a stage: a direct tensor's 64-dim atoms of each
// box of rows (swizzled), a raw tensor's slots (one box of `slot` bytes per box of rows, from
// the head's row rounded down to 16 bytes). The bytes it will count on the full barrier.
template <TileMode kMode>
__device__ __forceinline__ void tma_tile(const TensorMapBytes* map, uint8_t* dst, int atoms,
                                         int slot, int x, int br, int n_boxes, const int* row,
                                         const int* outer, uint64_t* full) {
  for (int b = 0; b < n_boxes; ++b) {
    if constexpr (kMode == TileMode::direct) {
      for (int a = 0; a < atoms; ++a)
        tma_load_3d(dst + a * kTileKeys * 128 + b * br * 128, map, x + a * 128, row[b], outer[b],
                    full);
    } else {
      tma_load_3d(dst + b * br * slot, map, x, row[b], outer[b], full);
    }
  }
}
template <TileMode kMode>
__device__ __forceinline__ int tma_tile_bytes(int atoms, int slot, int br, int n_boxes) {
  return kMode == TileMode::direct ? n_boxes * atoms * br * 128 : n_boxes * br * slot;
}

// The producer: one thread issues each tile's boxes into the ring's next stage once the MMA
// warps released it (empty), the bytes counted on the stage's full barrier. Boxes wholly past
// the range's end are not loaded (a paged table need not hold their pages): the stage keeps older
// rows there, which the tile's visibility test and hidden-key zeroing keep out of O. A page
// table entry outside the pool is read as page 0 and flagged.
template <TileMode kModeK, TileMode kModeV>
__device__ __forceinline__ void produce_tiles(const PrefillParams& p, const PrefillCta& cta,
                                              int64_t n_tiles, uint8_t* smem, uint64_t* full,
                                              uint64_t* empty, int* bad_input) {
  const int k_atoms = (p.dkc + 63) / 64, v_atoms = (p.dvc + 63) / 64, br = p.tma_box_rows;
  // Dimension 0 of a box: the head's row (direct), rounded down to 16 bytes (raw: the lead).
  const int k_x = (cta.kvh * static_cast<int>(p.k.sh)) & (kModeK == TileMode::raw ? ~15 : ~0);
  const int v_x = (cta.kvh * static_cast<int>(p.v.sh)) & (kModeV == TileMode::raw ? ~15 : ~0);
  bool bad = false;  // (a register: the table's loads of a tile need not wait on a flag store)
  const auto page_of = [&](const TileCopy& c, int64_t key) {
    const int32_t page = __ldg(c.pages + int64_t{cta.seq} * c.pps + key / p.page_size);
    const bool outside = page < 0 || page >= c.n_pages;
    bad |= outside;
    return outside ? 0 : page;
  };
  int s = 0;
  uint32_t phase = 0;
  for (int64_t j = 0; j < n_tiles; ++j) {
    if (j >= p.n_stages) mbar_wait(&empty[s], phase ^ 1u);
    uint8_t* const st = smem + s * p.stage_bytes;
    const int64_t k0 = cta.keys.lo + j * kTileKeys;
    const int64_t end = min(k0 + kTileKeys, cta.keys.hi);
    const int n_boxes = static_cast<int>((end - k0 + br - 1) / br);
    int row[kTileKeys / 16], k_outer[kTileKeys / 16], v_outer[kTileKeys / 16];  // per box
    for (int b = 0; b < n_boxes; ++b) {
      const int64_t key = k0 + b * br;
      row[b] = static_cast<int>(key);
      k_outer[b] = v_outer[b] = cta.seq;
      if (p.page_size > 0) {
        row[b] = static_cast<int>(key % p.page_size);
        k_outer[b] = page_of(p.k, key);
        v_outer[b] = page_of(p.v, key);
      }
    }
    if (bad) *bad_input = 1;  // before the stage's arrival, which releases it to the MMA warps
    mbar_arrive_expect_tx(
        &full[s], static_cast<uint32_t>(tma_tile_bytes<kModeK>(k_atoms, p.k_slot, br, n_boxes) +
                                        tma_tile_bytes<kModeV>(v_atoms, p.v_slot, br, n_boxes)));
    tma_tile<kModeK>(&p.k_map, st + p.k_stage_off, k_atoms, p.k_slot, k_x, br, n_boxes, row,
                     k_outer, &full[s]);
    tma_tile<kModeV>(&p.v_map, st + p.v_stage_off, v_atoms, p.v_slot, v_x, br, n_boxes, row,
                     v_outer, &full[s]);
    if (++s == p.n_stages) {
      s = 0;
      phase ^= 1u;
    }
  }
}

// Warps 0-7: the two MMA warpgroups (prefill_kernel's rows and steps), waiting on each stage's
// full barrier and releasing it (one arrival per warp) once done with it, with no CTA-wide
// barrier per tile; warpgroup 2: the producer (its registers handed to the MMA warpgroups).
// Quantized tiles are decoded by the MMA warps into the decoded set j % 2, then one barrier of
// theirs (every warp decoded tile j, and every warp is done with tile j - 1, which read the
// other set); a stage of raw tiles only is released as soon as it is decoded.
template <KvType KT, KvType VT, int DVB>
__global__ void __launch_bounds__(kTmaThreads, 1)
    prefill_tma_kernel(const __grid_constant__ PrefillParams p) {
  constexpr TileMode kModeK = tile_mode(KT), kModeV = tile_mode(VT);
  static_assert(tma_kernel_pair(kModeK, kModeV, DVB));
  constexpr bool kRawK = kModeK == TileMode::raw, kRawV = kModeV == TileMode::raw;
  constexpr bool kEarlyRelease = kRawK && kRawV;
  constexpr int kMT = m_tiles(DVB), kRows = block_rows(DVB);

  extern __shared__ __align__(128) uint8_t smem_raw[];
  __shared__ uint64_t full[kMaxTmaStages], empty[kMaxTmaStages];
  __shared__ uint32_t sign_words[4];
  __shared__ WeighedMarks marks;
  __shared__ int bad_input;
  uint8_t* const smem = aligned_smem(smem_raw);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2;

  PrefillCta cta;
  if (!prefill_cta(p, kRows, cta)) return;
  if (tid == 0) {
    bad_input = cta.len < 0 || cta.len > p.kv_capacity;
    for (int s = 0; s < p.n_stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kWarps);
    }
    fence_mbarrier_init();
  }
  if (tid < 4) {
    sign_words[tid] = sign_word(tid);
    marks.bits[tid >> 1][tid & 1] = 0u;
  }
  // Raw rows land after the same lead in every slot (prefill_tma_view): each stage's lead bytes
  // are written once.
  if constexpr (kRawK || kRawV) {
    for (int i = tid; i < p.n_stages * kTileKeys; i += kTmaThreads) {
      uint8_t* const st = smem + (i / kTileKeys) * p.stage_bytes;
      if constexpr (kRawK)
        st[p.k_lead_off + i % kTileKeys] = static_cast<uint8_t>((cta.kvh * p.k.sh) & 15);
      if constexpr (kRawV)
        st[p.v_lead_off + i % kTileKeys] = static_cast<uint8_t>((cta.kvh * p.v.sh) & 15);
    }
  }
  __syncthreads();
  const int64_t n_tiles = (cta.keys.hi - cta.keys.lo + kTileKeys - 1) / kTileKeys;

  if (warp >= kWarps) {
    warpgroup_regs_dec<24>();
    if (tid == kThreads)
      produce_tiles<kModeK, kModeV>(p, cta, n_tiles, smem, full, empty, &bad_input);
    return;
  }
  warpgroup_regs_inc<240>();

  uint8_t* const sq = smem + p.q_off;
  stage_q<KT, kRows, qk_dims(KT, DVB)>(
      p, cta, sq, reinterpret_cast<float*>(smem + p.scratch_off) + warp * 128, sign_words, tid);
  fence_proxy_async();  // Q's staging before the tensor cores read it
  mma_warps_sync();

  LaneRows<kMT, v_tiles(DVB)> rows;
  rows.init(cta, warp, g);
  const int64_t pq_lo = cta.first_q + cta.row0 / p.group;
  const int64_t pq_hi = cta.first_q + (cta.row_end - 1) / p.group;
  const uint32_t sq_addr = smem_addr(sq);
  int hidden_calls = 0, s = 0;
  uint32_t phase = 0;
  const auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[stage]);  // this warp's reads of the stage are done
  };
  for (int64_t j = 0; j < n_tiles; ++j) {
    mbar_wait(&full[s], phase);
    uint8_t* const st = smem + s * p.stage_bytes;
    const int64_t k0 = cta.keys.lo + j * kTileKeys;
    const int dec = static_cast<int>(j & 1) * p.dec_stride;
    if constexpr (kRawK || kRawV) {
      if constexpr (kRawK)
        decode_tile<KT>(st + p.k_stage_off, st + p.k_lead_off, p.k_slot, smem + p.k_dec_off + dec,
                        p.dkc, p.k_div_items, tid);
      if constexpr (kRawV)
        decode_tile<VT>(st + p.v_stage_off, st + p.v_lead_off, p.v_slot, smem + p.v_dec_off + dec,
                        p.dvc, p.v_div_items, tid);
      if constexpr (kEarlyRelease) release(s);
      fence_proxy_async();  // the decoded tiles before the tensor cores read them
      mma_warps_sync();
    }
    const uint8_t* sk = kRawK ? smem + p.k_dec_off + dec : st + p.k_stage_off;
    uint8_t* sv = kRawV ? smem + p.v_dec_off + dec : st + p.v_stage_off;
    const bool masked = prefill_tile_needs_mask(k0, cta.keys.hi, p.causal, p.window, pq_lo, pq_hi);
    attend_tile<KT, VT, DVB>(p, cta, rows, sq_addr, sk, sv, k0, masked, marks, hidden_calls, tid);
    if constexpr (!kEarlyRelease) release(s);
    if (++s == p.n_stages) {
      s = 0;
      phase ^= 1u;
    }
  }
  mma_warps_sync();  // every MMA warp is done with the tiles; bad_input is final
  write_rows<VT, DVB>(p, cta, rows, bad_input != 0, smem, sign_words, tid);
}

}  // namespace kvflash::cuda::prefill
