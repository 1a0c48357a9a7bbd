// The decode family's layout rules, each written once for the host (decode_layout, the instance
// list) and the kernels (their shared-memory regions and code paths), so the two cannot disagree.
#pragma once

#include <cstdint>

#include "kvflash/formats.hpp"
#include "kvflash/state.hpp"  // KVFLASH_HD

namespace kvflash::cuda::decode {

// Whether the decode kernel computes Q.K^T on int8 tensor cores (mma m16n8k32 .s8; why and when:
// int8_qk in decode_device.cuh): q8_0 or q4_0 K, one query n-tile, no K split, turbo V. For the
// host's layout (Q's fragments take half the bytes: one 16-byte word per lane and 32-dim block)
// and the kernel instances alike.
constexpr bool uses_int8_qk(KvType k, KvType v, int n_qtiles, bool k_split) {
  return (k == KvType::q8_0 || k == KvType::q4_0) && is_rotated(v) && n_qtiles == 1 && !k_split;
}

// The K = V types with a kernel that splits K's dims between the V slices (decode_layout's
// k_split: one query n-tile, head dims above 128). gen_instances.py reads this list to write those
// instances, so the list below is the one place that names them (keep it one line per type).
inline constexpr KvType kKSplitTypes[] = {
    KvType::f16,    KvType::bf16,   KvType::q8_0,   KvType::q4_0,
    KvType::turbo2, KvType::turbo3, KvType::turbo4,
};

// The types whose K/V pairs have a paged-cache twin of each kernel (decode_kernel's PR: float
// rows of pages shorter than a tile, copy_tile_paged): both K and V in this list. (f32's
// two-n-tile twin spilled registers: f32 pages take the general path. fp8 rows are float rows at
// half the bytes: on the general path, one run per page, pages of 16 took 1.3-1.6x the
// contiguous time at 32K-1M.) gen_instances.py reads this list to write those instances.
inline constexpr KvType kPagedTwinTypes[] = {KvType::f16, KvType::bf16, KvType::fp8_e4m3,
                                             KvType::fp8_e5m2};

constexpr bool has_paged_twin(KvType k, KvType v) {
  bool kin = false, vin = false;
  for (KvType t : kPagedTwinTypes) {
    kin = kin || t == k;
    vin = vin || t == v;
  }
  return kin && vin;
}

// Whether the build has a K-split kernel for this (K, V) pair (it may still be outside a trimmed
// build: pair_built).
constexpr bool has_k_split_kernel(KvType k, KvType v) {
  if (k != v) return false;
  for (KvType t : kKSplitTypes)
    if (t == k) return true;
  return false;
}

// Whether a type's tiles may be copied by TMA (tma_tile_view; the kernels compile the TMA code
// only where K or V may): quantized rows. Float rows keep cp.async: their padded slots would
// need boxes reading into the next head's row (measured 0.80x at 1M).
constexpr bool tma_copyable(KvType t) {
  return traits(t).block_values > 1;
}

// Rows of a paged tensor's TMA box: one 16-key step, so that no box crosses a page (pages of a
// multiple of 16 tokens; tiles start at multiples of 16 keys where no window is set).
inline constexpr int32_t kPagedTmaBox = 16;

// q8_0 / q4_0 K with one query n-tile enter the MMAs as raw codes, their bias folded into the
// accumulator's start: the query's bias terms per row and 32-dim block live after Q's fragments
// (pack_q_fragments), and their per-chunk parts after the staged Q rows.
constexpr bool folds_k_bias(KvType k, int n_qtiles) {
  return n_qtiles == 1 && (k == KvType::q8_0 || k == KvType::q4_0);
}

// Bytes of Q's MMA fragments at the start of shared memory: per M tile and lane 16 bytes per
// 16-dim chunk of the computed K dims, with int8 Q.K^T per 32-dim block (two int8 planes).
KVFLASH_HD constexpr int32_t q_frag_bytes(int32_t n_mtiles, int32_t dkc, bool int8_qk) {
  return n_mtiles * (dkc / (int8_qk ? 32 : 16)) * 32 * 16;
}

// Floats per lane of a warp's accumulators in the epilogue's fragment-order buffer: 64 (one
// n-tile: 32) and 4 of padding, so that 16-byte stores meet no bank conflicts.
constexpr int epilogue_frag_stride(int n_qtiles) {
  return n_qtiles == 1 ? 36 : 68;
}

}  // namespace kvflash::cuda::decode
