// What the steps of a CUDA decode CTA share (decode_kernel.cuh and the functions it inlines):
// the thread's place in the CTA, the CTA's key range, a 16-key step's tiles, the lane's row
// offsets, the codebooks, Q's operands and the K split's score exchange. Small structs instead
// of long argument lists; every function that takes them is inlined.
#pragma once

#include <cstdint>

#include "backends/cuda/common/async_copy.cuh"
#include "backends/cuda/common/kv_frags.hpp"
#include "backends/cuda/decode/decode_params.hpp"

namespace kvflash::cuda::decode {

// Where a thread of a decode CTA works (decode_kernel's warp roles), fixed for the CTA's life.
struct CtaCoords {
  int tid, lane, warp;
  int g, t;             // the lane's MMA row (lane / 4) and column (lane % 4)
  int kg, mt, ds;       // the warp's key group, M tile of query rows and V slice
  int nt, dv0;          // V dims per lane and key in P.V (slice_w / 8), the lane's first V dim
  bool active;          // the warp has an (M tile, V slice) to work on
  int seq, kvh, split;  // the CTA's sequence, KV head and KV split
  int row0, rows_here;  // its first query row (of the KV head's rows) and how many it has
};

// The CTA's keys: the sequence's length, and the range k_lo .. k_hi - 1 this split reads.
struct KeyRange {
  int64_t len, k_lo, k_hi;
};

// Whether keys j_first .. j_last are all in the range and visible to every query row (the last
// row hides the oldest keys from the window, the first row the newest from causality), with
// nothing added to their scores (plain). Decided per tile (which step code runs: kMayHide) and,
// in a tile that may hide keys, per 16-key step (whether the step masks anything).
__device__ __forceinline__ bool keys_visible(const DecodeParams& p, const KeyRange& range,
                                             int64_t j_first, int64_t j_last, bool plain) {
  return plain && j_last < range.k_hi && (!p.causal || j_last <= range.len - p.n_q_tokens) &&
         (p.window == 0 || range.len - 1 - j_first < p.window);
}

// One 16-key step's view of the stage: the K and V tiles, the step s in the tile (keys j0 ..
// j0 + 15), and whether nothing is added to the scores (plain: no mask, ALiBi or soft cap).
// (Whether the tile may hide a key from a row is the steps' template argument kMayHide.)
struct StepTiles {
  const uint8_t* ks;
  const uint8_t* vs;
  int s;
  int64_t j0;
  bool plain;
};

// The byte offsets of a lane's K row and V rows from a step's first slot (decode_kernel).
struct RowSlots {
  int k_slot, v_slot0, v_slot1;
};

// The K and V types' codebook tables (turbo: packed lookups and float centroids).
template <KvType KT, KvType VT>
struct Codebooks {
  const TurboLut<KT>& tlut_k;
  const TurboLut<VT>& tlut_v;
  const float* lut_k;
  const float* lut_v;
};

// One n-tile without the K split, float and turbo K: Q^T's B operands of the first four 32-dim
// blocks stay in registers for the whole range (decode_kernel's prologue loads them).
template <KvType KT, int NR, bool KS>
constexpr bool q_in_registers() {
  return NR == 1 && !KS && KT != KvType::q8_0 && KT != KvType::q4_0;
}

// Q's shared memory in the prologue: the staged rows (f32, rotated in place for turbo K), the MMA
// fragments pack_q_fragments writes, and the bias terms or int8 steps per row (qc).
struct QStage {
  float* qs;
  uint4* frag;
  float* qc;
};

// Q's operands: the fragments in shared memory (frag), the bias terms or the int8 rows' steps
// (qc), the first four blocks' fragments in registers (ra, rb: q_in_registers) and the steps of
// the lane's rows 2t, 2t + 1 (step: int8 Q.K^T).
struct QOperands {
  const uint4* frag;
  const float* qc;
  const uint4 (&ra)[4];
  const uint4 (&rb)[4];
  const float (&step)[2];
};

// KS (one n-tile, V dims split: decode_layout's k_split): the buffers through which the warps
// that share keys (same key group) add their partial scores, [key group][V slice][2 buffers][32
// lanes] x 4 floats at the end of the Q region, the one of this step (parity), and the group's
// barrier.
struct KSplitExchange {
  uint8_t* buf;
  int parity;
  __device__ __forceinline__ void barrier(const DecodeParams& p, int kg) const {
    named_barrier(1 + kg, 32 * p.n_dslices);
  }
};

}  // namespace kvflash::cuda::decode
