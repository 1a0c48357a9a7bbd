// The CUDA decode kernel: one CTA per (KV split, KV head and query-row block, sequence).
//
// Each CTA streams its contiguous range of keys through shared memory in tiles of raw (still
// quantized) K and V rows, two or three stages deep: quantized tiles of contiguous caches by TMA
// (one tensor copy per tile and tensor onto the stage's mbarrier; the host encodes the tensor
// maps), the others by cp.async (decode_copy.cuh), so
// every KV byte is read from device memory once per KV head: all query heads of the GQA group
// and all query tokens share the tile. Tensor cores do both products transposed (mma.m16n8k16,
// f32 accumulation): S^T = K.Q^T with 16 keys as the M dimension and the query rows (token x
// head of the group) as N tiles of 8, then O^T = V^T.P^T with 16 V dims as M; the scores stay in
// registers and become P^T's B operands through one movmatrix transpose per 8 keys. One token of
// GQA <= 8 fills one N tile (NR = 1): half the MMAs of a 16-row M tile of queries, and half the
// accumulators. K and V are decoded from shared memory straight into fragment registers
// (common/kv_frags.hpp); q8_0 / q4_0 K go in as raw codes, their bias folded into the accumulator's
// start and their scale applied to the f32 scores (the key rows are the lane's own rows); turbo
// types are read in the rotated domain (Q rotated in the prologue; the output is rotated back
// when finalized).
//
// Warps: 4 per CTA, each owning one 16-row block of query rows (NR N tiles of 8), one slice of
// <= 128 V dims, and one of n_kgroups interleaved subsets of each tile's 16-key steps; warps of
// different key subsets are merged through shared memory at the end. A CTA either finalizes its
// rows (one split) or writes its partial state {o, m, l} to the workspace for decode_merge_kernel
// (decode_merge.cuh).
#pragma once

#include <cstdint>
#include <type_traits>

#include "backends/cuda/decode/decode_copy.cuh"
#include "backends/cuda/decode/decode_device.cuh"
#include "backends/cuda/decode/decode_epilogue.cuh"
#include "backends/cuda/decode/decode_instances.hpp"
#include "backends/cuda/decode/decode_step_keys.cuh"
#include "backends/cuda/decode/decode_step_rows.cuh"

namespace kvflash::cuda::decode {

// ---------------------------------------------------------------------------------------------
// The kernel's steps

// Q's rows (f32) into `qs` (stage 1's area) with cp.async, their own commit group, issued before
// the length is read: no registers held, and their latency overlaps the length's and tile 0's
// (they were two round trips one after the other in the prologue). Rows past rows_here and dims
// past dk are zero-filled. The scale is applied when the fragments are packed.
__device__ __forceinline__ void stage_q_rows(const DecodeParams& p, float* qs, int tid, int seq,
                                             int kvh, int row0, int rows_here) {
  const int per_row4 = p.dkc / 4, total4 = p.row_block * per_row4;
  for (int i = tid; i < total4; i += kThreads) {
    const int r = fdiv(i, p.div_q4), d = 4 * (i - r * per_row4);
    const bool ok = r < rows_here && d < p.dk;
    const int rr = row0 + (ok ? r : 0), tok = fdiv(rr, p.div_group);
    const int qh = kvh * p.group + rr - tok * p.group;
    const float* src =
        p.q + ((int64_t{seq} * p.n_q_tokens + tok) * p.n_q_heads + qh) * p.dk + (ok ? d : 0);
    if (p.q_vec4) {
      cp_async<16>(qs + 4 * i, src, ok ? 16 : 0);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) cp_async<4>(qs + 4 * i + e, src + e, ok && d + e < p.dk ? 4 : 0);
    }
  }
  cp_async_commit();
}

// The CTA's keys: the sequence's length (read on the device), and this split's range of the keys
// any row can see: all before len (the last query sits at len - 1), and with a window none
// before the first query's window. Lengths live on the device, where the host cannot check them
// without a sync: hi stops at kv_capacity, so a length outside 0 .. kv_capacity (an engine's
// bug) reads nothing past the cache (a negative one nothing at all), and the epilogue writes NaN
// for its sequence (the CPU backend returns an error for it). Split ranges are multiples of 16
// keys (busiest_sm_tiles on the host counts them so).
__device__ __forceinline__ KeyRange cta_key_range(const DecodeParams& p, int seq, int split) {
  const int64_t len = p.kv_lens[seq];
  int64_t lo = 0, hi = min(len, p.kv_capacity);
  if (p.window > 0) lo = max(int64_t{0}, len - p.n_q_tokens - p.window + 1);
  if (hi < lo) hi = lo;
  const int64_t span = hi - lo + p.n_splits - 1;
  int64_t chunk =
      span < (int64_t{1} << 31) ? fdiv(static_cast<int>(span), p.div_splits) : span / p.n_splits;
  chunk = (chunk + 15) / 16 * 16;
  const int64_t k_lo = min(hi, lo + split * chunk);
  return {len, k_lo, min(hi, k_lo + chunk)};
}

// Waits for a stage's TMA copies (use: the stage's use count, its barrier phase), then zeroes the
// rows past the range's end in its last 16-key step, which the copies filled with whatever the
// tensor holds there, so that they read as zero as the cp.async copies leave them: only in a
// range's last tile, and only where its end is not a multiple of 16 keys from the range's start
// (the end of the sequence; split ranges are multiples of 16). Steps past the end are never
// read. tile_key0, k_hi: the tile's first key, the range's end. Returns whether it zeroed rows
// (then the CTA must pass a barrier before reading them).
__device__ __forceinline__ bool wait_tma_tile(const DecodeParams& p, uint64_t* bar, int use,
                                              uint8_t* kst, int k_tile_bytes, int64_t tile_key0,
                                              int64_t k_hi, int tid) {
  mbar_wait(bar, use & 1);
  const int rows_valid = static_cast<int>(min(int64_t{p.bk}, k_hi - tile_key0));
  const int rows_read = min(p.bk, (rows_valid + 15) & ~15);
  if (rows_valid >= rows_read) return false;
#pragma unroll
  for (int which = 0; which < 2; ++which) {
    if (!(which == 0 ? p.tma_k : p.tma_v)) continue;
    const int sstride = which == 0 ? p.sk_stride : p.sv_stride;
    uint8_t* dst = kst + (which == 0 ? 0 : k_tile_bytes) + rows_valid * sstride;
    const int n16 = (rows_read - rows_valid) * sstride / 16;
    for (int i = tid; i < n16; i += kThreads)
      reinterpret_cast<uint4*>(dst)[i] = make_uint4(0, 0, 0, 0);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// The kernel

// NR: 1 for up to 8 query rows per KV head (S^T = K.Q^T, one N tile of 8 rows), else 2 (S =
// Q.K^T with 16-row M tiles of query rows: two n-tiles' worth). KS (NR 1 only): K's dims split
// between the warps of the V slices (head dims above 128), their partial scores exchanged.
// PR (has_paged_twin pairs: f16 / bf16 K and V): the kernel for paged caches whose pages are
// shorter than a tile, read by copy_tile_paged (the others have no such code: in the contiguous
// float kernels it cost 5-9% at 4K-32K).
template <KvType KT, KvType VT, int NR, bool KS, bool PR>
__global__ void __launch_bounds__(kThreads, (min_ctas_per_sm<KT, VT, NR, KS>()))
    decode_kernel(const __grid_constant__ DecodeParams p) {
  constexpr bool kTma = tma_copyable(KT) || tma_copyable(VT);  // else no TMA code
  static_assert(!PR || (has_paged_twin(KT, VT) && !kTma), "PR: the float pairs' paged twins");

  extern __shared__ __align__(128) uint8_t smem[];  // TMA boxes land at 128-byte boundaries
  __shared__ float lut_k[16], lut_v[16];
  __shared__ uint32_t sign_words[4];
  __shared__ uint64_t tile_bar[kMaxStages];  // per stage: the TMA copies' completion
  // Set when an input on the device is outside its range (the sequence's length past kv_capacity,
  // or a page table entry outside the pool, seen by TileIssue): the epilogue writes NaN rows.
  __shared__ int bad_input;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kvh = fdiv(blockIdx.x, p.div_row_blocks), rb = blockIdx.x - kvh * p.n_row_blocks;
  const int split = blockIdx.y;
  const int seq = blockIdx.z;
  // (The CTA's slots in a KVFLASH_TIMELINE build; unused otherwise.)
  [[maybe_unused]] const int64_t tl_cta =
      (int64_t{blockIdx.z} * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  KVFLASH_TL(tl_cta, 0);

  // Launched as a programmatic dependent of whatever precedes it on the stream (launch_decode):
  // its CTAs may become resident while the previous kernel (say, the last layer's merge) still
  // runs; nothing is read from global memory before that kernel has completed.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  KVFLASH_TL(tl_cta, 1);
  const int row0 = rb * p.row_block;
  const int rows_here = min(p.row_block, p.rows - row0);
  float* const qs = reinterpret_cast<float*>(smem + p.smem_q_bytes + p.smem_kv_bytes);
  stage_q_rows(p, qs, tid, seq, kvh, row0, rows_here);
  const KeyRange range = cta_key_range(p, seq, split);
  const int64_t len = range.len, k_lo = range.k_lo, k_hi = range.k_hi;

  // Shared memory: [Q fragments][stage 0: K tile, V tile][stage 1: ...]
  uint4* q_frag = reinterpret_cast<uint4*>(smem);
  // q8_0 / q4_0 K: the query's bias terms per 32-dim block and row, [block][row_block] (qk step);
  // int8 Q.K^T: the rows' steps. After the Q fragments: 16 bytes per lane and 16-dim chunk, or
  // with int8 Q.K^T per 32-dim block (decode_layout).
  constexpr bool kS8K = int8_qk<KT, VT, NR, KS>();  // Q.K^T on int8 tensor cores
  float* const qc = reinterpret_cast<float*>(smem + q_frag_bytes(p.n_mtiles, p.dkc, kS8K));
  uint8_t* stage_base = smem + p.smem_q_bytes;
  const int k_tile_bytes = p.bk * p.sk_stride;

  if (tid < 16) {
    lut_k[tid] = centroid<KT>(tid);
    lut_v[tid] = centroid<VT>(tid);
  }
  if (tid < 4) sign_words[tid] = sign_word(tid);
  if (tid == 0) bad_input = static_cast<uint64_t>(len) > static_cast<uint64_t>(p.kv_capacity);
  if (kTma && p.tma_bytes > 0 && tid == 0) {
    for (int st = 0; st < p.n_stages; ++st) mbar_init(&tile_bar[st], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  // ---- Warp roles
  const int kg = warp % p.n_kgroups;
  const int item = warp / p.n_kgroups;
  const bool active = item < p.n_mtiles * p.n_dslices;
  const int mt = item % p.n_mtiles, ds = item / p.n_mtiles;
  const int nt = p.slice_w / 8;  // dims per thread per key in P.V (<= 16)
  const int dv0 = ds * p.slice_w + g * nt;

  TurboLut<KT> tlut_k;
  TurboLut<VT> tlut_v;
  tlut_k.init();
  tlut_v.init();

  const uint8_t* k_base = p.k + seq * p.k_ss + kvh * p.k_sh;  // paged: k_ss = 0
  const uint8_t* v_base = p.v + seq * p.v_ss + kvh * p.v_sh;

  // The tile copies (decode_copy.cuh's TileIssue): issue_tile(p, key0, st).
  // Paged tensors in 16-byte units: copy_tile_paged (keys below 2^31) in the PR kernels; the
  // others copy paged tiles by TMA or the general path.
  const bool rows_fast = p.page_size == 0 || (PR && p.kv_capacity < (int64_t{1} << 31));
  const TileIssue<kTma, PR> issue_tile{stage_base,
                                       k_base,
                                       v_base,
                                       tile_bar,
                                       &bad_input,
                                       k_hi,
                                       k_tile_bytes,
                                       kvh,
                                       seq,
                                       tid,
                                       rows_fast && p.k_unit == 16 && p.div_k_units.d <= kThreads,
                                       rows_fast && p.v_unit == 16 && p.div_v_units.d <= kThreads};
  // Byte offset of a row's data inside its slot (the lead; zero for aligned 16- and 8-byte copies):
  // the row address & (U - 1) = (base + key * stride) & (U - 1) = (base & m + key * (stride & m))
  // & m, from per-CTA constants in 32-bit arithmetic. 16-byte leads have stride & 15 = 0 (the
  // host's condition), so it is one constant per CTA. (Paged rows too: pages start 16-byte
  // aligned and page_size * stride is a multiple of 4, resp. 16, as run_decode checks, so a row's
  // address & m is the same as at base + key * stride.)
  const auto lead_mask = [](int unit, bool lead16) { return unit == 4 ? 3u : (lead16 ? 15u : 0u); };
  const uint32_t k_mask = lead_mask(p.k_unit, p.k_lead16), v_mask = lead_mask(p.v_unit, p.v_lead16);
  const uint32_t k_off0 = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(k_base)) & k_mask;
  const uint32_t v_off0 = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(v_base)) & v_mask;
  const uint32_t k_smod = static_cast<uint32_t>(p.k_st) & k_mask;
  const uint32_t v_smod = static_cast<uint32_t>(p.v_st) & v_mask;
  auto k_row_offset = [&](int64_t key) -> int {
    return static_cast<int>((k_off0 + static_cast<uint32_t>(key) * k_smod) & k_mask);
  };
  auto v_row_offset = [&](int64_t key) -> int {
    return static_cast<int>((v_off0 + static_cast<uint32_t>(key) * v_smod) & v_mask);
  };
  // The rows a thread reads in each 16-key step (K: rows 8n + g; V: rows 2t, 2t + 1, 2t + 8,
  // 2t + 9) sit at the same offsets in their slots in every step: keys 8 apart have the same lead
  // (8 * stride & mask is 0: mask 3 with an even stride, or mask 15 with stride % 16 = 0), and
  // every step starts a multiple of 16 keys after k_lo. So the byte offsets of a thread's rows from
  // the step's first slot are per-thread constants: three of them (rows 8 apart differ by 8 slots).
  // (Float rows are always 16-byte aligned, copy_mode: no lead, known at compile time.)
  constexpr bool kFloatK = traits(KT).block_values == 1, kFloatV = traits(VT).block_values == 1;
  const int k_slot = g * p.sk_stride + (kFloatK ? 0 : k_row_offset(k_lo + g));
  const int v_slot0 = 2 * t * p.sv_stride + (kFloatV ? 0 : v_row_offset(k_lo + 2 * t));
  const int v_slot1 =
      kFloatV ? v_slot0 + p.sv_stride : (2 * t + 1) * p.sv_stride + v_row_offset(k_lo + 2 * t + 1);
  static_assert(!KS || NR == 1, "K split: one n-tile only");
  // KS: the warps that share keys exchange their partial scores (decode_step_keys.cuh).
  [[maybe_unused]] KSplitExchange xchg{smem + p.smem_q_bytes - kScoreXchgBytes, 0};

  const int64_t n_keys = k_hi - k_lo;
  const int n_tiles = n_keys + p.bk - 1 < (int64_t{1} << 31)
                          ? fdiv(static_cast<int>(n_keys + p.bk - 1), p.div_bk)
                          : static_cast<int>((n_keys + p.bk - 1) / p.bk);
  const int steps = p.bk / 16;

  // ---- Prologue. Tile 0's copy starts first so that its latency hides behind the Q work: zero
  // stage 0 (bytes past each row's end must read as zero; the copies never write them), issue
  // tile 0, then stage Q in stage 1's area, pack the fragments, and zero stage 1.
  // (Only where a row's computed dims pass its stored bytes: float K with a head dim that is not
  // a multiple of 32. Every other byte the kernel reads is written by the copies.)
  if (p.zero_stages) {
    for (int i = tid * 16; i < p.smem_kv_bytes; i += kThreads * 16)
      *reinterpret_cast<uint4*>(stage_base + i) = make_uint4(0, 0, 0, 0);
    __syncthreads();
  }
  if (n_tiles > 0) issue_tile(p, k_lo, 0);
  KVFLASH_TL(tl_cta, 2);
  cp_async_commit();
  const CtaCoords cta{tid, lane, warp,   g,   t,   kg,    mt,   ds,
                      nt,  dv0,  active, seq, kvh, split, row0, rows_here};
  pack_q_fragments<KT, NR, kS8K>(p, cta, QStage{qs, q_frag, qc}, stage_base, sign_words);
  [[maybe_unused]] float q_step[2] = {0.0f, 0.0f};  // kS8K: the steps of rows 2t, 2t + 1
  if constexpr (kS8K) {
    q_step[0] = qc[2 * (lane & 3)];
    q_step[1] = qc[2 * (lane & 3) + 1];
  }
  // Tiles 1 .. n_stages - 2 follow tile 0 into their stages (one commit group per tile, empty
  // groups past the end, so the wait counts below hold).
  for (int st = 1; st < p.n_stages - 1; ++st) {
    if (st < n_tiles) issue_tile(p, k_lo + int64_t{st} * p.bk, st);
    cp_async_commit();
  }
  // The merge kernel (launched as a programmatic dependent) may start its launch now; it waits
  // for this grid's completion before it reads anything.
  asm volatile("griddepcontrol.launch_dependents;");

  // One n-tile without the K split, float and turbo K: Q^T's B operands of the first four 32-dim
  // blocks (D 128: all of them; 16 registers) stay in registers for the whole range instead of
  // being read from shared memory in every 16-key step. Each step read two words of each lane's
  // 16-byte fragment (lanes 16 bytes apart: 4-way bank conflicts); for q4_0 at 256K those loads
  // were 46% of the shared-load wavefronts, nearly all the bank conflicts and half the L1 load
  // (`bench/results/2026-12-02-h200-qregs-ab at 169ad06`). turbo3 1.07-1.09x at 256K-1M,
  // f16 1.01-1.05x. Not for q8_0 / q4_0 K (with their bias terms in registers too): 0.90-0.93x at
  // 1M and 4K, with a wide spread between calls, unexplained. Blocks past the fourth (D > 128) are
  // read per step.
  constexpr bool kQRegs = q_in_registers<KT, NR, KS>();
  [[maybe_unused]] uint4 qra[4], qrb[4];
  if constexpr (kQRegs) {
    const uint4* qf0 = q_frag + (mt * (p.dkc >> 4)) * 32 + lane;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const bool in = b < (p.dkc >> 5);
      qra[b] = in ? qf0[(2 * b) * 32] : make_uint4(0, 0, 0, 0);
      qrb[b] = in ? qf0[(2 * b + 1) * 32] : make_uint4(0, 0, 0, 0);
    }
  }

  // The running state (declared here, after the prologue): accumulators, and per query row of
  // the lane the running maximum and sum (RunState).
  RunState<NR> rs;
  rs.init();
  [[maybe_unused]] const RowSlots slots{k_slot, v_slot0, v_slot1};
  [[maybe_unused]] const Codebooks<KT, VT> books{tlut_k, tlut_v, lut_k, lut_v};

  // Up to n_stages tiles in flight: refill the stage of tile ti - 1 (consumed before the last
  // iteration's closing barrier) with tile ti + n_stages - 1, then wait for tile ti only.
  const int ahead = p.n_stages - 1;
  for (int ti = 0; ti < n_tiles; ++ti) {
    if (ti + ahead < n_tiles)
      issue_tile(p, k_lo + int64_t{ti + ahead} * p.bk,
                 ti + ahead - fdiv(ti + ahead, p.div_stages) * p.n_stages);
    cp_async_commit();
    if (ahead == 2)
      cp_async_wait<2>();
    else
      cp_async_wait<1>();
    const int use = fdiv(ti, p.div_stages), stage = ti - use * p.n_stages;
    uint8_t* const kst = stage_base + stage * p.smem_kv_bytes;
    const int64_t tile_key0 = k_lo + int64_t{ti} * p.bk;
    const bool zero_filled =
        kTma && p.tma_bytes > 0 &&
        wait_tma_tile(p, &tile_bar[stage], use, kst, k_tile_bytes, tile_key0, k_hi, tid);
    // A tile that TMA copied whole is visible to each thread once its own wait above returns: a
    // CTA barrier is needed only for cp.async copies (each thread waited for its own) and for the
    // zero-filled rows of a range's last tile. (Float rows never go by TMA: their kernels keep
    // the barrier at compile time, code unchanged.) Measured without it where it is not needed:
    // turbo3 1.02-1.03x at 256K-1M, q8_0 K / turbo4 V 1.02x, head dim 256 q4_0 1.02x, q4_0 and
    // q8_0 at 32/8 heads 1.00-1.01x (bench/results/2026-12-03-h200-tile-sync-ab at b16e572).
    if (kFloatK || kFloatV || !(p.tma_k && p.tma_v) || zero_filled) __syncthreads();

    if (ti == 0) KVFLASH_TL(tl_cta, 3);
    const uint8_t* ks = kst;
    const uint8_t* vs = ks + k_tile_bytes;
    // Every key of the tile visible to every row, nothing to add to the scores: the usual case,
    // decided once per tile. Such tiles run steps compiled without the visibility code and the
    // hidden-key masks of P.V (kMayHide false): with both in one step, the masks' code (never run
    // there) cost turbo2-4 at 1M 5-7% on an H100 (docs/cuda-decode.md).
    const bool plain = !p.has_mask && !p.has_alibi && p.softcap == 0.0f;
    const bool tile_visible = keys_visible(p, range, tile_key0, tile_key0 + p.bk - 1, plain);
    const auto steps_of_tile = [&](auto may_hide) {
      constexpr bool kMayHide = decltype(may_hide)::value;
      for (int s = kg; s < steps; s += p.n_kgroups) {
        const int64_t j0 = tile_key0 + 16 * s;
        if (j0 >= k_hi) {
          if constexpr (KS) {
            // Every key group passes its exchange barrier steps / n_kgroups times per tile, also
            // in a range's last tile where one group has a step more than the other (the
            // group's warps stop at the same step: these pair up). The barriers' ids differ by
            // key group, so the hardware needs no padding; compute-sanitizer racecheck does:
            // without it, it reported a hazard in the epilogue (red_w) in 2 of 10 runs, with it
            // in none of 10 (bench/results/2026-12-02-h200-racecheck-pad at f3adb68).
            for (int pad = s; pad < steps; pad += p.n_kgroups) xchg.barrier(p, kg);
          }
          break;
        }

        if constexpr (NR == 1) {
          // Up to 8 query rows per KV head: keys as the M dimension (decode_step_keys.cuh).
          keys_as_m_step<KT, VT, KS, kMayHide>(p, rs, cta, StepTiles{ks, vs, s, j0, plain},
                                               QOperands{q_frag, qc, qra, qrb, q_step}, slots,
                                               range, books, xchg);
        } else {
          // 9+ query rows per KV head: rows as the M dimension (decode_step_rows.cuh).
          rows_as_m_step<KT, VT, kMayHide>(p, rs, cta, StepTiles{ks, vs, s, j0, plain}, q_frag,
                                           slots, range, books);
        }
      }
    };
    // (f32 V: every tile on the masked step, as before: with both step codes the f16 and bf16 K
    // kernels with two n-tiles spilled, 4-8 bytes.)
    constexpr bool kPeel = VT != KvType::f32;
    if (active) {
      if (kPeel && tile_visible)
        steps_of_tile(std::false_type{});
      else
        steps_of_tile(std::true_type{});
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }
  cp_async_wait<0>();
  KVFLASH_TL(tl_cta, 4);

  decode_epilogue<VT, NR>(p, rs, cta, smem, sign_words, &bad_input, tl_cta);
}

}  // namespace kvflash::cuda::decode
