// The TMA-fed, warp-specialized CUDA prefill kernel: a producer warpgroup issues each tile's
// TMA boxes into a ring of stages with full and empty mbarriers; the two MMA warpgroups run the
// steps of prefill_tiles.cuh.
#pragma once

#include <cstdint>

#include "backends/cuda/common/async_copy.cuh"
#include "backends/cuda/common/wgmma.cuh"
#include "backends/cuda/prefill/prefill_tiles.cuh"

namespace kvflash::cuda::prefill {

// Box b of a tile (rows b br .. of the stage's tile) of one tensor into its place in a stage: a
// direct tensor's 64-dim atoms (swizzled), a raw tensor's slots (`slot` bytes a row, from the
// head's row rounded down to 16 bytes). `row`, `outer`: the box's coordinates in the tensor map.
template <TileMode kMode, int kKeys>
__device__ __forceinline__ void tma_box(const TensorMapBytes* map, uint8_t* dst, int atoms,
                                        int slot, int x, int br, int b, int row, int outer,
                                        uint64_t* full) {
  if constexpr (kMode == TileMode::direct) {
    for (int a = 0; a < atoms; ++a)
      tma_load_3d(dst + a * kKeys * 128 + b * br * 128, map, x + a * 128, row, outer, full);
  } else {
    tma_load_3d(dst + b * br * slot, map, x, row, outer, full);
  }
}
// The bytes of a tile's n_boxes boxes of one tensor, as its full barrier counts them.
template <TileMode kMode>
__device__ __forceinline__ int tma_tile_bytes(int atoms, int slot, int br, int n_boxes) {
  return kMode == TileMode::direct ? n_boxes * atoms * br * 128 : n_boxes * br * slot;
}

// The producer warp: each tile's boxes go into the ring's next stage once the MMA warps
// released it (empty), issued by lane 0 after it armed the stage's full barrier with their bytes.
// Boxes wholly past the range's end are not loaded (a paged table need not hold their pages): the
// stage keeps older rows there, which the tile's visibility test and hidden-key zeroing keep out
// of O. Paged tensors: the page table entries of 32 boxes (a window: 8 tiles of 64 keys in 16-row
// boxes, whole tiles for every box size and tile) are read at once, one box per lane, and lane 0
// takes each box's from its lane by a shuffle (one thread's table loads, one box after the other,
// held pages of 16 tokens to a third of the contiguous rate); an entry outside the pool is read as
// page 0 and flagged before the arrivals of the window's tiles.
template <TileMode kModeK, TileMode kModeV, int kKeys>
__device__ __forceinline__ void produce_tiles(const PrefillParams& p, const PrefillCta& cta,
                                              int64_t n_tiles, uint8_t* smem, uint64_t* full,
                                              uint64_t* empty, int* bad_input, int lane) {
  const int k_atoms = (p.dkc + 63) / 64, v_atoms = (p.dvc + 63) / 64, br = p.tma_box_rows;
  const int tile_boxes = kKeys / br;
  // Dimension 0 of a box: the head's row (direct), rounded down to 16 bytes (raw: the lead).
  const int k_x = (cta.kvh * static_cast<int>(p.k.sh)) & (kModeK == TileMode::raw ? ~15 : ~0);
  const int v_x = (cta.kvh * static_cast<int>(p.v.sh)) & (kModeV == TileMode::raw ? ~15 : ~0);
  // Paged: the pages of this lane's box (lane) of the current window.
  int32_t k_page = 0, v_page = 0;
  const auto load_window = [&](int64_t first_box) {
    const int64_t key = cta.keys.lo + (first_box + lane) * br;
    bool outside = false;
    if (key < cta.keys.hi) {
      k_page = checked_page(p.k, cta.seq, key / p.page_size, outside);
      v_page = checked_page(p.v, cta.seq, key / p.page_size, outside);
    }
    if (__any_sync(0xffffffffu, outside) && lane == 0) *bad_input = 1;
  };
  int s = 0;
  uint32_t phase = 0;
  for (int64_t j = 0; j < n_tiles; ++j) {
    if (j >= p.n_stages) mbar_wait(&empty[s], phase ^ 1u);
    uint8_t* const st = smem + s * p.stage_bytes;
    const int64_t k0 = cta.keys.lo + j * kKeys;
    const int n_boxes = static_cast<int>((min(k0 + kKeys, cta.keys.hi) - k0 + br - 1) / br);
    if (p.page_size > 0 && (j * tile_boxes) % 32 == 0) load_window(j * tile_boxes);
    if (lane == 0)
      mbar_arrive_expect_tx(
          &full[s], static_cast<uint32_t>(tma_tile_bytes<kModeK>(k_atoms, p.k_slot, br, n_boxes) +
                                          tma_tile_bytes<kModeV>(v_atoms, p.v_slot, br, n_boxes)));
    for (int b = 0; b < n_boxes; ++b) {
      const int64_t key = k0 + b * br;
      int row = static_cast<int>(key), k_outer = cta.seq, v_outer = cta.seq;
      if (p.page_size > 0) {
        const int in_window = static_cast<int>((j * tile_boxes + b) % 32);
        row = static_cast<int>(key % p.page_size);
        k_outer = __shfl_sync(0xffffffffu, k_page, in_window);
        v_outer = __shfl_sync(0xffffffffu, v_page, in_window);
      }
      if (lane == 0) {
        tma_box<kModeK, kKeys>(&p.k_map, st + p.k_stage_off, k_atoms, p.k_slot, k_x, br, b, row,
                               k_outer, &full[s]);
        tma_box<kModeV, kKeys>(&p.v_map, st + p.v_stage_off, v_atoms, p.v_slot, v_x, br, b, row,
                               v_outer, &full[s]);
      }
    }
    __syncwarp();
    if (++s == p.n_stages) {
      s = 0;
      phase ^= 1u;
    }
  }
}

// A tile as the MMA warps see it once acquired: its operand tiles, its stage in the ring, its
// first key and whether it may hide keys.
struct AcquiredTile {
  const uint8_t* sk;
  uint8_t* sv;
  int stage;
  int64_t k0;
  bool masked;
};

// Ping-pong of the two MMA warpgroups (FlashAttention-3's scheduler barriers): a warpgroup issues
// a tile's products only after the other issued its own, so that one's softmax runs under the
// other's MMAs instead of both contending for the tensor cores at once. One token passed through
// two named barriers (warpgroup w waits at kPingPongBarrier + w, the other arrives there):
// warpgroup 1 hands warpgroup 0 the first turn, and warpgroup 0 takes the last token back at the
// end, so that no arrival is left pending. Both warpgroups skip the same turns (`turn` false: an
// issue that holds a barrier of all MMA warps, zero_hidden_v's), so the token stays in step.
inline constexpr int kPingPongBarrier = kMmaBarrier + 1;  // and + 2
template <bool kOn>
struct PingPong {
  int wg;
  __device__ __forceinline__ void start() const {
    if (kOn && wg == 1) named_barrier_arrive(kPingPongBarrier, kThreads);
  }
  __device__ __forceinline__ void take(bool turn) const {
    if (kOn && turn) named_barrier(kPingPongBarrier + wg, kThreads);
  }
  __device__ __forceinline__ void pass(bool turn) const {
    if (kOn && turn) named_barrier_arrive(kPingPongBarrier + (wg ^ 1), kThreads);
  }
  __device__ __forceinline__ void finish() const {
    if (kOn && wg == 0) named_barrier(kPingPongBarrier, kThreads);
  }
};

// Warps 0-7: the two MMA warpgroups (prefill_kernel's rows and steps), waiting on each stage's
// full barrier and releasing it (one arrival per warp) once done with it, with no CTA-wide
// barrier per tile; warpgroup 2: the producer (its first warp; its registers handed to the MMA
// warpgroups).
// Quantized tiles are decoded by the MMA warps into the next decoded set (n_dec of them), then
// one barrier of theirs (every warp decoded tile j, and every warp is done with the tiles that
// read that set before); a stage of raw tiles only is released as soon as it is decoded. In the
// 128-dim instance (tma_overlaps_pv) tile j's Q.K^T and tile j - 1's P.V are issued together and
// tile j's softmax runs while the P.V is in flight; the accumulators are rescaled after it; with
// f16 / bf16 tiles the two warpgroups take turns issuing them (PingPong).
template <KvType KT, KvType VT, int DVB>
__global__ void __launch_bounds__(kTmaThreads, 1)
    prefill_tma_kernel(const __grid_constant__ PrefillParams p) {
  constexpr TileMode kModeK = tile_mode(KT), kModeV = tile_mode(VT);
  static_assert(tma_kernel_pair(kModeK, kModeV, DVB));
  constexpr bool kRawK = kModeK == TileMode::raw, kRawV = kModeV == TileMode::raw;
  constexpr bool kEarlyRelease = kRawK && kRawV;
  constexpr int kMT = m_tiles(DVB), kRows = block_rows(DVB), kKeys = kKeysOf<KT, VT, DVB>;

  extern __shared__ __align__(128) uint8_t smem_raw[];
  __shared__ uint64_t full[kMaxTmaStages], empty[kMaxTmaStages];
  __shared__ uint32_t sign_words[4];
  __shared__ WeighedMarks marks;
  __shared__ int bad_input;
  uint8_t* const smem = aligned_smem(smem_raw);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2;

  PrefillCta cta;
  if (!prefill_cta(p, kRows, kKeys, cta)) return;
  if (tid == 0) {
    bad_input = cta.len < 0 || cta.len > p.kv_capacity;
    for (int s = 0; s < p.n_stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kWarps);
    }
    fence_mbarrier_init();
  }
  if (tid < 4) sign_words[tid] = sign_word(tid);
  marks.clear(tid);
  __syncthreads();
  const int64_t n_tiles = (cta.keys.hi - cta.keys.lo + kKeys - 1) / kKeys;

  // Registers: 32 a thread for the producer (its page-table windows spilled at 24), 232 for the
  // MMA warps (no spill with 64-key tiles; the f16 / bf16 128-key kernel spills 152 bytes:
  // docs/cuda-prefill.md).
  if (warp >= kWarps) {
    warpgroup_regs_dec<32>();
    if (warp == kWarps)
      produce_tiles<kModeK, kModeV, kKeys>(p, cta, n_tiles, smem, full, empty, &bad_input, lane);
    return;
  }
  warpgroup_regs_inc<232>();

  uint8_t* const sq = smem + p.q_off;
  stage_q<KT, kRows, qk_dims(KT, DVB)>(
      p, cta, sq, reinterpret_cast<float*>(smem + p.scratch_off) + warp * 128, sign_words, tid);
  fence_proxy_async();  // Q's staging before the tensor cores read them
  mma_warps_sync();

  LaneRows<kMT, v_tiles(DVB)> rows;
  rows.init(cta, warp, g);
  const int64_t pq_lo = cta.first_q + cta.row0 / p.group;
  const int64_t pq_hi = cta.first_q + (cta.row_end - 1) / p.group;
  const uint32_t sq_addr = smem_addr(sq);
  // Raw rows land after the same lead in every slot (prefill_tma_view: a box starts at the head's
  // row rounded down to 16 bytes).
  const OneLead k_lead{static_cast<int>((cta.kvh * p.k.sh) & 15)};
  const OneLead v_lead{static_cast<int>((cta.kvh * p.v.sh) & 15)};
  int hidden_calls = 0, s = 0, dec_set = 0;
  uint32_t phase = 0;
  const auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[stage]);  // this warp's reads of the stage are done
  };
  // Tile j: its stage landed, its raw tensors decoded into the next set.
  const auto acquire = [&](int64_t j) {
    mbar_wait(&full[s], phase);
    uint8_t* const st = smem + s * p.stage_bytes;
    uint8_t* const dec = smem + dec_set * p.dec_stride;
    if constexpr (kRawK || kRawV) {
      decode_stage<KT, VT>(p, st, dec, k_lead, v_lead, tid);
      if constexpr (kEarlyRelease) release(s);
      fence_proxy_async();  // the decoded tiles before the tensor cores read them
      mma_warps_sync();
    }
    const int64_t k0 = cta.keys.lo + j * kKeys;
    const AcquiredTile tile{
        kRawK ? dec + p.k_dec_off : st + p.k_stage_off,
        kRawV ? dec + p.v_dec_off : st + p.v_stage_off, s, k0,
        prefill_tile_needs_mask(k0, kKeys, cta.keys.hi, p.causal, p.window, pq_lo, pq_hi)};
    if (++s == p.n_stages) {
      s = 0;
      phase ^= 1u;
    }
    if (++dec_set == tma_dec_sets(DVB)) dec_set = 0;  // (the layout's n_dec where tiles decode)
    return tile;
  };

  if constexpr (!tma_overlaps_pv(DVB)) {
    for (int64_t j = 0; j < n_tiles; ++j) {
      const AcquiredTile tile = acquire(j);
      attend_tile<KT, VT, DVB>(p, cta, rows, sq_addr, tile.sk, tile.sv, tile.k0, tile.masked, marks,
                               hidden_calls, tid);
      if constexpr (!kEarlyRelease) release(tile.stage);
    }
  } else if (n_tiles > 0) {
    const PingPong<!kRawK && !kRawV> turns{tid >> 7};
    // A turn issues tile j's Q.K^T and tile j - 1's P.V: skipped where that P.V zeroes hidden
    // keys first (a barrier of all MMA warps).
    const auto pv_turn = [&](const AcquiredTile& t) { return !pv_zeroes_hidden(p, t.masked); };
    const auto issue_qk = [&](float(&sc)[kMT][kKeys / 8][4], const uint8_t* sk) {
      qk_tile<KT == KvType::bf16, kMT, qk_dims(KT, DVB), kKeys>(sc, sq_addr, smem_addr(sk), kRows,
                                                                p.dkc, tid >> 7);
    };
    turns.start();
    AcquiredTile prev = acquire(0);
    uint4 pa[kMT][kKeys / 16];  // P of tile `prev`
    {
      float sc[kMT][kKeys / 8][4], alpha[kMT][2];
      turns.take(true);
      issue_qk(sc, prev.sk);
      turns.pass(true);
      wgmma_wait<0>();
      tile_p<VT, DVB, kKeys>(p, cta, rows, sc, prev.k0, prev.masked, tid & 3, pa, alpha);
    }  // (O is zero: no rescale)
    for (int64_t j = 1; j < n_tiles; ++j) {
      const AcquiredTile tile = acquire(j);
      float sc[kMT][kKeys / 8][4], alpha[kMT][2];
      uint4 pa_next[kMT][kKeys / 16];
      const bool turn = pv_turn(prev);
      turns.take(turn);
      issue_qk(sc, tile.sk);
      fence_pv_operands<DVB>(rows, pa);
      issue_pv<VT, DVB, kKeys>(p, rows, pa, prev.sv, prev.masked, marks, hidden_calls, tid);
      turns.pass(turn);
      wgmma_wait<1>();  // S of tile j; P.V of tile j - 1 may still run
#pragma unroll
      for (int m = 0; m < kMT; ++m) wgmma_fence_operand(flat<kKeys / 2>(sc[m]));
      tile_p<VT, DVB, kKeys>(p, cta, rows, sc, tile.k0, tile.masked, tid & 3, pa_next, alpha);
      wgmma_wait<0>();
      fence_pv_operands<DVB>(rows, pa);
      if constexpr (!kEarlyRelease) release(prev.stage);
      rescale_rows<DVB>(rows, alpha);
#pragma unroll
      for (int m = 0; m < kMT; ++m)
#pragma unroll
        for (int kc = 0; kc < kKeys / 16; ++kc) pa[m][kc] = pa_next[m][kc];
      prev = tile;
    }
    const bool turn = pv_turn(prev);
    turns.take(turn);
    issue_pv<VT, DVB, kKeys>(p, rows, pa, prev.sv, prev.masked, marks, hidden_calls, tid);
    turns.pass(turn);
    turns.finish();
    wgmma_wait<0>();
    if constexpr (!kEarlyRelease) release(prev.stage);
  }
  mma_warps_sync();  // every MMA warp is done with the tiles; bad_input is final
  write_rows<VT, DVB>(p, cta, rows, bad_input != 0, smem, sign_words, tid);
}

}  // namespace kvflash::cuda::prefill
