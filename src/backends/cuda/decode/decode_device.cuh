// Device building blocks of the CUDA decode kernel: V's MMA operands, the finalization of one
// output row, Q's fragments (async copies, MMAs and the turbo rotation: ../common/). The per-type
// decoders from raw shared-memory rows into f16 fragments (K as the B operand of Q.K^T, V as the B
// operand of P.V) and the turbo codebook lookups are in common/kv_frags.hpp, host-testable; the dim
// orders in common/kv_values.hpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/common/async_copy.cuh"
#include "backends/cuda/common/kv_frags.hpp"
#include "backends/cuda/common/kv_values.hpp"
#include "backends/cuda/common/mma.cuh"
#include "backends/cuda/common/turbo_rotate.cuh"
#include "backends/cuda/decode/decode_cta.cuh"
#include "backends/cuda/decode/decode_params.hpp"
#include "backends/cuda/decode/decode_rules.hpp"
#include "kvflash/turbo.hpp"

namespace kvflash::cuda::decode {

inline constexpr float kLog2e = kStateLog2e;
inline constexpr float kNegInf = -__builtin_huge_valf();

// Diagnostics build (-DKVFLASH_TIMELINE, dev/timeline_gpu.sh): thread 0 of each CTA stores
// the global timer (ns) at phase k of its kernel, 8 slots per CTA, the decode CTAs first and the
// merge CTAs after them; decode_host.cpp prints the last call's phases at exit. Nothing otherwise.
#ifdef KVFLASH_TIMELINE
#define KVFLASH_TL(cta, k)                                             \
  do {                                                                 \
    if (threadIdx.x == 0 && p.tl != nullptr) {                         \
      unsigned long long t_;                                           \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)::"memory"); \
      p.tl[int64_t(cta) * 8 + (k)] = t_;                               \
    }                                                                  \
  } while (0)
#else
#define KVFLASH_TL(cta, k) \
  do {                     \
  } while (0)
#endif

// V's operands for a 16-key step: the four key rows vrow (keys 2t, 2t + 1, 2t + 8, 2t + 9 of
// the step) give, for each of the lane's nt V dims (dim tiles i = 0 .. nt - 1, in order),
// use(i, b0, b1) with b0 = half2(V[2t][d], V[2t + 1][d]) and b1 the same of keys 2t + 8, 2t + 9,
// d the tile's dim in column g (16 consecutive dims for f16, bf16 and q8_0; q4_0 and turbo the
// v_dim16 order, which the epilogue puts back). Turbo rows through the packed decoder come out
// as codebook values: scale_p(n01, n23) first gets the rows' norms (keys 2t, 2t + 1 and 2t + 8,
// 2t + 9) to scale P with, 4 HMUL2 per 16 keys where scaling the V values took 32.
// (nt, dv0, g, ds: the lane's V dims per key, its first dim, its MMA column and its V slice;
// tlut_v / lut_v the V type's codebook tables.)
template <KvType VT, typename ScaleP, typename Use>
__device__ __forceinline__ void v_operands(const uint8_t* const (&vrow)[4], int nt, int dv0, int g,
                                           int ds, const TurboLut<VT>& tlut_v, const float* lut_v,
                                           ScaleP&& scale_p, Use&& use) {
  constexpr bool kBfV = VT == KvType::bf16;

  bool done = false;
  if constexpr (VT == KvType::f16 || VT == KvType::bf16) {
    if (nt == 16) {
      // Two 16-byte loads per key, then pairs of keys interleaved with byte permutes (no
      // conversion: the MMA takes these bits).
      uint32_t w[4][8];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint4 lo = *reinterpret_cast<const uint4*>(vrow[kk] + 2 * dv0);
        const uint4 hi = *reinterpret_cast<const uint4*>(vrow[kk] + 2 * dv0 + 16);
        w[kk][0] = lo.x, w[kk][1] = lo.y, w[kk][2] = lo.z, w[kk][3] = lo.w;
        w[kk][4] = hi.x, w[kk][5] = hi.y, w[kk][6] = hi.z, w[kk][7] = hi.w;
      }
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t sel = (i & 1) ? 0x7632u : 0x5410u;  // high or low halves of both
        use(i, __byte_perm(w[0][i >> 1], w[1][i >> 1], sel),
            __byte_perm(w[2][i >> 1], w[3][i >> 1], sel));
      }
      done = true;
    }
  }
  if constexpr (VT == KvType::q8_0) {
    if (nt == 16) {
      v_frags_q8_0_16(vrow, dv0, use);
      done = true;
    }
  }
  if constexpr (is_fp8(VT)) {
    if (nt == 16) {
      v_frags_fp8_16<VT>(vrow, dv0, use);
      done = true;
    }
  }
  if constexpr (VT == KvType::q4_0) {
    if (nt == 16) {
      v_frags_q4_0_16(vrow, g, ds, use);
      done = true;
    }
  }
  if constexpr (is_rotated(VT)) {
    if (nt == 16) {
      scale_p(__byte_perm(turbo_norm<VT>(vrow[0], ds), turbo_norm<VT>(vrow[1], ds), 0x5410u),
              __byte_perm(turbo_norm<VT>(vrow[2], ds), turbo_norm<VT>(vrow[3], ds), 0x5410u));
      v_frags_turbo16_packed<VT>(vrow, g, ds, tlut_v, use);
      done = true;
    }
  }
  if (!done) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      if (i < nt) {  // nt is even (slice widths are multiples of 16)
        const int d = dv0 + i;
        use(i, pack2<kBfV>(v_value<VT>(vrow[0], d, lut_v), v_value<VT>(vrow[1], d, lut_v)),
            pack2<kBfV>(v_value<VT>(vrow[2], d, lut_v), v_value<VT>(vrow[3], d, lut_v)));
      }
    }
  }
}

// Finalizes one row (sinks, lse), in shared memory o[0..dvc), rotated back for turbo V by the
// calling warp, and writes dv outputs. All 32 lanes of the warp call it.
template <KvType VT>
__device__ void finalize_row(const DecodeParams& p, float* o, float m, float l, int64_t out_row,
                             int qhead, int lane, const uint32_t* sign_words) {
  if constexpr (is_rotated(VT)) {
    for (int g = 0; g < p.dvc; g += 128) inverse_rotate_group(o + g, lane, sign_words);
  }
  const StateFinal f = state_final_exp2(m, l, p.has_sinks, p.has_sinks ? p.sinks[qhead] : 0.0f);
  float* out = p.out + out_row * p.dv;
  // fp8 V: its rows hold V / v_scale (only there: the other instances keep their registers)
  const float scale = is_fp8(VT) ? f.scale * p.v_scale : f.scale;
  for (int d = lane; d < p.dv; d += 32) out[d] = o[d] * scale;
  if (p.lse != nullptr && lane == 0) p.lse[out_row] = f.lse;
}

// Whether the decode kernel computes Q.K^T on int8 tensor cores (mma m16n8k32 .s8): q8_0 or q4_0
// K with one n-tile, no K split, turbo V. The raw codes are the A operand as stored (q4_0: as
// 16 (c - 8), k_frag_s8), Q two int8 planes (15 bits) with a step per row (pack_q_fragments'
// kS8). Measured on the H200 for q8_0 K (bench/results/2026-12-04-h200-imma-q8k at 3dde832): turbo
// V, whose codebook lookups fill the integer pipe, 1.05-1.16x at 1M tokens (GQA 8: 1.08-1.12x)
// and 1.22x at D 256; q8_0 and q4_0 V, whose steps wait on memory at depth, 0.82-0.95x at 1M (with
// more DRAM traffic, not explained): they keep the f16 path, as do f16 and bf16 V (0.98-1.05x).
// q4_0 K with turbo V: 1.04-1.12x at 1M (bench/results/2026-12-05-h200-lookups-room-q4k-ab at
// 6e57796).
template <KvType KT, KvType VT, int NR, bool KS>
constexpr bool int8_qk() {
  return uses_int8_qk(KT, VT, NR, KS);
}

// The CTAs per SM a kernel is compiled for (its launch bound: at most 65536 / (kThreads x CTAs)
// registers): five for the int8 Q.K^T kernels, which fit them in 96 registers (the split count
// takes the occupancy the runtime reports, prepare_decode), kCtasPerSm for the others. (Left to
// chance, the int8 kernels went from 95 to 109 registers when the paged copy paths came in: four
// CTAs.)
template <KvType KT, KvType VT, int NR, bool KS>
constexpr int min_ctas_per_sm() {
  return int8_qk<KT, VT, NR, KS>() ? 5 : kCtasPerSm;
}

// The prologue's Q work, after Q's rows have been staged (as f32) in `qs`: rotated for turbo K,
// scaled and packed into the MMA fragments (q_frag), and for q8_0 / q4_0 K with one n-tile the
// query's bias terms per block and row (qc); stage 1 zeroed where the layout asks for it.
// kS8 (q8_0 / q4_0 K, one n-tile, no K split: Q.K^T on int8 tensor cores): instead, per 32-dim
// block b and lane (row g, thread t) one uint4 at q_frag[b * 32 + lane] of Q's two int8 planes
// (hi: x, y; lo: z, w; dims 32b + s8_dim<KT>(t, 0 .. 7), k_frag_s8's), and per row its step (the
// value of one unit of the planes times one unit of K's operand: scale and kS8Unit included) at
// qc[row].
template <KvType KT, int NR, bool kS8 = false>
__device__ __forceinline__ void pack_q_fragments(const DecodeParams& p, const CtaCoords& cta,
                                                 const QStage& q, uint8_t* stage_base,
                                                 const uint32_t* sign_words) {
  const int tid = cta.tid, lane = cta.lane, warp = cta.warp, rows_here = cta.rows_here;
  float* const qs = q.qs;
  uint4* const q_frag = q.frag;
  float* const qc = q.qc;
  constexpr bool kBfK = KT == KvType::bf16;
  // Q rows (rotated for turbo K) as f32, then scaled and packed into fragments.
  cp_async_wait<1>();  // Q's group: tile 0 may still be in flight
  __syncthreads();
  if constexpr (kS8) {
    static_assert(NR == 1 && (KT == KvType::q8_0 || KT == KvType::q4_0),
                  "int8 Q.K^T: q8_0 or q4_0 K, one n-tile");
    const int blocks = p.dkc >> 5;
    for (int r = warp; r < 8; r += kWarps) {  // the n-tile's 8 rows (past rows_here: zeros)
      const float* qr = qs + r * p.dkc;
      float amax = 0.0f;
      for (int d = lane; d < p.dkc; d += 32) amax = fmaxf(amax, fabsf(qr[d] * p.scale));
#pragma unroll
      for (int x = 16; x > 0; x >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, x));
      const float inv = amax > 0.0f ? kQS8Steps / amax : 0.0f;
      if (lane == 0) qc[r] = amax / kQS8Steps * kS8Unit<KT>;
      for (int i = lane; i < blocks * 4; i += 32) {
        const int b = i >> 2, tt = i & 3;
        int hi[8], lo[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const QS8 v = q_s8_split(qr[32 * b + s8_dim<KT>(tt, j)] * p.scale * inv);
          hi[j] = v.hi;
          lo[j] = v.lo;
        }
        q_frag[b * 32 + r * 4 + tt] =
            make_uint4(s8_word(hi[0], hi[1], hi[2], hi[3]), s8_word(hi[4], hi[5], hi[6], hi[7]),
                       s8_word(lo[0], lo[1], lo[2], lo[3]), s8_word(lo[4], lo[5], lo[6], lo[7]));
      }
    }
    __syncthreads();
    return;  // (zero_stages: float K only)
  }
  if constexpr (is_rotated(KT)) {
    // Only the rows that are there: the others are zero, and so are their rotations (one token
    // of GQA 4 stages 16 rows, 4 of them real). turbo3 K at 4K tokens 1.05-1.17x, 32K 1.01-1.07x
    // (bench/results/2026-12-03-h200-bmma-k at aa08061, section 3).
    const int groups = rows_here * (p.dkc / 128);
    for (int gi = warp; gi < groups; gi += kWarps)
      forward_rotate_group(qs + gi * 128, lane, sign_words);
    __syncthreads();
  }
  // q8_0 / q4_0 K with one n-tile: the raw codes' bias terms (k_frag_raw), per row and 16-dim
  // chunk minus the bias times the sum of the query's values as packed (scaled, rounded to f16):
  // qch[chunk][row] from the lanes' packed values (in stage 1 after the staged rows), then
  // qc[block][row] = both chunks' sum.
  constexpr bool kFold = folds_k_bias(KT, NR);
  float* const qch = qs + p.row_block * p.dkc;
  const int chunks = p.dkc / 16;
  for (int i = tid; i < p.n_mtiles * chunks * 32; i += kThreads) {  // whole warps per item row
    const int ln = i & 31, mt = fdiv(i >> 5, p.div_chunks), c = (i >> 5) - mt * chunks;
    const int gg = ln >> 2, tt = ln & 3;
    uint32_t regs[4];
    float part[2] = {0.0f, 0.0f};  // rows gg, gg + 8
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const int r = mt * 16 + gg + ((reg & 1) ? 8 : 0);
      const int kslot = 2 * tt + ((reg & 2) ? 8 : 0);
      float v2[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int ks = kslot + h;
        const int j = 4 * (c & 1) + 2 * (ks >> 3) + (ks & 1);
        const int d = k_dim(KT, c >> 1, (ks & 7) >> 1, j);
        v2[h] = qs[r * p.dkc + d] * p.scale;
      }
      regs[reg] = pack2<kBfK>(v2[0], v2[1]);
      if constexpr (kFold) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&regs[reg]));
        part[reg & 1] += f.x + f.y;
      }
    }
    q_frag[i] = make_uint4(regs[0], regs[1], regs[2], regs[3]);
    if constexpr (kFold) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        part[h] += __shfl_xor_sync(0xffffffffu, part[h], 1);
        part[h] += __shfl_xor_sync(0xffffffffu, part[h], 2);
        if (tt == 0) qch[c * p.row_block + mt * 16 + gg + 8 * h] = -k_raw_bias<KT>(c & 1) * part[h];
      }
    }
  }
  __syncthreads();
  if constexpr (kFold) {
    for (int i = tid; i < p.row_block * (p.dkc / 32); i += kThreads) {
      const int b = i / p.row_block, r = i - b * p.row_block;
      qc[i] = qch[2 * b * p.row_block + r] + qch[(2 * b + 1) * p.row_block + r];
    }
    __syncthreads();
  }
  if (p.zero_stages) {
    for (int i = tid * 16; i < (p.n_stages - 1) * p.smem_kv_bytes; i += kThreads * 16)
      *reinterpret_cast<uint4*>(stage_base + p.smem_kv_bytes + i) = make_uint4(0, 0, 0, 0);
    __syncthreads();
  }
}

}  // namespace kvflash::cuda::decode
