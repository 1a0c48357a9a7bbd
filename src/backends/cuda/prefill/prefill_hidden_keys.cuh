// Hidden keys in cuda.prefill's P.V: the V rows of keys no row of the CTA weighs are zeroed in the
// operand tile, and NaN or inf V values of keys some rows weigh and others do not reach only the
// rows that weigh them (zero_hidden_v, nonfinite_v_rows; common/nonfinite.cuh). With the MMA
// warps' barrier, which the kernels use between their steps too.
#pragma once

#include <cstdint>

#include "backends/cuda/common/async_copy.cuh"
#include "backends/cuda/common/nonfinite.cuh"
#include "backends/cuda/prefill/prefill_plan.hpp"

namespace kvflash::cuda::prefill {

// The MMA warps' own barrier (all of the CTA in prefill_kernel; the TMA kernel's producer
// warpgroup never joins it).
inline constexpr int kMmaBarrier = 1;
__device__ __forceinline__ void mma_warps_sync() {
  named_barrier(kMmaBarrier, kThreads);
}

// The keys of a 16-key chunk that a lane's P operand words weigh (P != 0), as bits 0-15: lane
// (g, t) holds keys 2t, 2t + 1 in a's halves and 2t + 8, 2t + 9 in b's (of one row, or OR-ed
// over rows).
__device__ __forceinline__ uint32_t weighed_key_bits(uint32_t a, uint32_t b, int t) {
  return ((a & 0xffffu) ? 1u : 0u) << (2 * t) | ((a >> 16) ? 1u : 0u) << (2 * t + 1) |
         ((b & 0xffffu) ? 1u : 0u) << (2 * t + 8) | ((b >> 16) ? 1u : 0u) << (2 * t + 9);
}

// The marks of zero_hidden_v: two sets, used by alternate calls (`call`: the CTA's count of them),
// so that the set a call reads is never cleared while a faster warp already marks the next call's.
struct WeighedMarks {
  uint32_t bits[2][kMaxTileKeys / 32];
  // Keys some row weighs whose V row holds a NaN or inf (same two sets).
  uint32_t nonfinite[2][kMaxTileKeys / 32];
  // Both sets cleared (before the CTA's first barrier).
  __device__ __forceinline__ void clear(int tid) {
    if (tid < 2 * kMaxTileKeys / 32) {
      bits[tid / (kMaxTileKeys / 32)][tid % (kMaxTileKeys / 32)] = 0u;
      nonfinite[tid / (kMaxTileKeys / 32)][tid % (kMaxTileKeys / 32)] = 0u;
    }
  }
};

// zero_hidden_v's rare path, where keys some rows weigh hold NaN or inf in V (bad: their marks):
// each lane adds those values to its accumulators of the rows that weigh the key (P != 0, the
// row's keys gathered over its four lanes): +inf, -inf or NaN, which the sum of several makes
// what the reference's is (inf - inf: NaN). Then, after a barrier of the MMA warps, the values
// become 0 in the operand tile, so that the P.V MMA reads finite values only. The accumulators:
// o[m][j] holds rows g, g + 8 of M tile m (elements 0, 1 and 2, 3), dims dim0 + 8 j + 2 t (+1).
// (A call, its operands copied in and out: inlined, its code made the f16 and turbo instances
// spill 4-40 bytes more, CUDA 13.0.)
template <int kMT, int kVt>
struct PvAccumulators {
  float o[kMT][kVt][4];
};
template <int kMT, int kKeys>
struct PvOperands {
  uint4 pa[kMT][kKeys / 16];
};
template <bool kBf16, int kMT, int kVt, int kKeys>
__device__ __noinline__ PvAccumulators<kMT, kVt> nonfinite_v_rows(PvAccumulators<kMT, kVt> acc,
                                                                  const PvOperands<kMT, kKeys> ops,
                                                                  uint8_t* sv, int v_atoms,
                                                                  int dim0, const uint32_t* bad,
                                                                  int tid, int lane) {
  const auto& pa = ops.pa;
  auto& o = acc.o;
  constexpr int kWords = kKeys / 32;
  const int t = lane & 3;
#pragma unroll
  for (int m = 0; m < kMT; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // seen: the bad keys row r (g or g + 8) of M tile m weighs.
      uint32_t seen[kWords];
#pragma unroll
      for (int w = 0; w < kWords; ++w) seen[w] = 0u;
#pragma unroll
      for (int kc = 0; kc < kKeys / 16; ++kc) {
        const uint32_t a = r == 0 ? pa[m][kc].x : pa[m][kc].y;
        const uint32_t b = r == 0 ? pa[m][kc].z : pa[m][kc].w;
        seen[kc >> 1] |= weighed_key_bits(a, b, t) << (16 * (kc & 1));
      }
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
        seen[w] |= __shfl_xor_sync(0xffffffffu, seen[w], 1);
        seen[w] |= __shfl_xor_sync(0xffffffffu, seen[w], 2);
        for (uint32_t x = seen[w] & bad[w]; x != 0u; x &= x - 1u) {
          const int key = 32 * w + __ffs(static_cast<int>(x)) - 1;
#pragma unroll
          for (int j = 0; j < kVt; ++j) {
            const int d = dim0 + 8 * j + 2 * t;
            const uint32_t v2 = *reinterpret_cast<const uint32_t*>(
                sv + swizzled_offset(key, d & ~7, kKeys) + 2 * (d & 7));
            const uint32_t f = nonfinite_halves<kBf16>(v2);
            if (f == 0u) continue;
            const float2 v = unpack2<kBf16>(v2 & f);
            o[m][j][2 * r] += v.x;
            o[m][j][2 * r + 1] += v.y;
          }
        }
      }
    }
  mma_warps_sync();
  // The keys' NaN and inf values as 0 (the P.V MMA then reads finite values only).
  for (int i = tid; i < kKeys * v_atoms * 8; i += kThreads) {
    const int key = i / (v_atoms * 8), chunk = i - key * v_atoms * 8;
    if (((bad[key >> 5] >> (key & 31)) & 1u) == 0u) continue;
    uint4* const c = reinterpret_cast<uint4*>(sv + swizzled_offset(key, 8 * chunk, kKeys));
    const uint4 v = *c;
    *c = make_uint4(finite_or_zero<kBf16>(v.x), finite_or_zero<kBf16>(v.y),
                    finite_or_zero<kBf16>(v.z), finite_or_zero<kBf16>(v.w));
  }
  fence_proxy_async();
  mma_warps_sync();
  return acc;
}

// Keys of the tile that no row of the CTA weighs (masked for all, outside the window or the
// range) get their V rows zeroed in the operand tile, so that whatever those rows hold (NaN or
// inf in an engine's unused cells) enters O as 0 * 0, not 0 * V. Across the MMA warps (two
// barriers): only tiles that may hide keys. The P.V product reads V for all 64 rows of a
// warpgroup at once, so a key some rows weigh and others do not would bring its NaN or inf
// values to the others as 0 * NaN: the scan marks the weighed keys whose V chunks hold one, and
// where a tile has any (rare: two more barriers), nonfinite_v_rows gives them to the rows that
// weigh them and sets them to 0 in the tile (common/nonfinite.cuh).
template <bool kBf16, int kMT, int kVt, int kKeys>
__device__ __forceinline__ void zero_hidden_v(const uint4 (&pa)[kMT][kKeys / 16],
                                              float (&o)[kMT][kVt][4], uint8_t* sv, int v_atoms,
                                              int dim0, WeighedMarks& marks, int call, int tid,
                                              int lane) {
  constexpr int kWords = kKeys / 32;
  // Lane (g, t) holds keys 16 kc + 2 t (+1) in .x / .y (rows g, g + 8), + 8 in .z / .w; word w
  // marks keys 32 w .. 32 w + 31.
  uint32_t words[kWords];
#pragma unroll
  for (int w = 0; w < kWords; ++w) words[w] = 0u;
#pragma unroll
  for (int kc = 0; kc < kKeys / 16; ++kc) {
    uint32_t a = 0, b = 0;
#pragma unroll
    for (int m = 0; m < kMT; ++m) {
      a |= pa[m][kc].x | pa[m][kc].y;
      b |= pa[m][kc].z | pa[m][kc].w;
    }
    words[kc >> 1] |= weighed_key_bits(a, b, lane & 3) << (16 * (kc & 1));
  }
  uint32_t* const mine = marks.bits[call & 1];
  uint32_t* const bad = marks.nonfinite[call & 1];
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    words[w] = __reduce_or_sync(0xffffffffu, words[w]);
    if (lane == 0) atomicOr(&mine[w], words[w]);
  }
  mma_warps_sync();
  // Every MMA warp read the other sets in the previous call (before this barrier) and marks them
  // again only in the next call (after the one below): they are cleared here.
  if (tid < kWords) marks.bits[(call + 1) & 1][tid] = marks.nonfinite[(call + 1) & 1][tid] = 0u;
    // Each key's row: its v_atoms x 8 chunks of 16 bytes (8 dims each), zeroed where no row weighs
    // the key, else scanned. (Not unrolled: at the register bound of the quantized kernels that
    // spilled.)
#pragma unroll 1
  for (int i = tid; i < kKeys * v_atoms * 8; i += kThreads) {
    const int key = i / (v_atoms * 8), chunk = i - key * v_atoms * 8;
    uint4* const c = reinterpret_cast<uint4*>(sv + swizzled_offset(key, 8 * chunk, kKeys));
    if ((mine[key >> 5] >> (key & 31)) & 1u) {
      const uint4 v = *c;
      if ((nonfinite_halves<kBf16>(v.x) | nonfinite_halves<kBf16>(v.y) |
           nonfinite_halves<kBf16>(v.z) | nonfinite_halves<kBf16>(v.w)) != 0u)
        atomicOr(&bad[key >> 5], 1u << (key & 31));
      continue;
    }
    *c = make_uint4(0u, 0u, 0u, 0u);
  }
  fence_proxy_async();
  mma_warps_sync();
  uint32_t any_bad = 0;
#pragma unroll
  for (int w = 0; w < kWords; ++w) any_bad |= bad[w];
  if (any_bad != 0u) {
    PvAccumulators<kMT, kVt> acc;
    PvOperands<kMT, kKeys> ops;
#pragma unroll
    for (int m = 0; m < kMT; ++m) {
#pragma unroll
      for (int j = 0; j < kVt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc.o[m][j][e] = o[m][j][e];
#pragma unroll
      for (int kc = 0; kc < kKeys / 16; ++kc) ops.pa[m][kc] = pa[m][kc];
    }
    acc = nonfinite_v_rows<kBf16, kMT, kVt, kKeys>(acc, ops, sv, v_atoms, dim0, bad, tid, lane);
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
      for (int j = 0; j < kVt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[m][j][e] = acc.o[m][j][e];
  }
}

}  // namespace kvflash::cuda::prefill
