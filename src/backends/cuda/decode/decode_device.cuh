// Device building blocks of the CUDA decode kernel: async copies, the m16n8k16 MMA, the turbo
// rotations and the finalization of one output row. The per-type decoders from raw shared-memory
// rows into f16 fragments (K as the B operand of Q.K^T, V as the B operand of P.V) and the turbo
// codebook lookups are in decode_frags.hpp, host-testable; the dim orders in decode_formats.hpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/decode/decode_formats.hpp"
#include "backends/cuda/decode/decode_frags.hpp"
#include "backends/cuda/decode/decode_params.hpp"
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

// ---------------------------------------------------------------------------------------------
// Small device helpers

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async of `size` (4, 8 or 16) bytes, `src_bytes` of them read (the rest zero-filled).
// n / f.d for 0 <= n < 2^31 (see FastDiv).
__device__ __forceinline__ int fdiv(int n, const FastDiv& f) {
  return static_cast<int>((__umulhi(static_cast<uint32_t>(n), f.mul) + static_cast<uint32_t>(n)) >>
                          f.shr);
}

template <int kSize>
__device__ __forceinline__ void cp_async(void* dst, const void* src, int src_bytes) {
  if constexpr (kSize == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "n"(kSize), "r"(src_bytes));
  }
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// The tile copy by the tensor-memory accelerator (TMA): one thread issues a tensor copy per K / V
// tile (cp.async.bulk.tensor, the box described by a tensor map the host encodes per call), whose
// completion counts bytes on the stage's mbarrier; every thread waits on the barrier's phase.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}
// Arrives (the one expected arrival) and adds `bytes` to the transaction count of this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
// Waits for the completion of the barrier's phase of parity `parity` (0 for its first use).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// Orders this thread's earlier shared-memory accesses (generic proxy: loads, stores, cp.async)
// before its later tensor copies (async proxy) into the same bytes.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// The box at (c0, c1, c2) of the tensor map at `map` (a kernel parameter's address) into dst,
// completing on `bar`.
__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, int c0, int c1, int c2,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%2, %3, %4}], [%5];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

// 2^x for the online softmax (x <= 0 there): one MUFU.EX2. exp2f wraps it in a range fix-up
// (a compare and two conditional multiplies) for results below 2^-126, which a probability that
// small does not need; -inf gives 0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <bool kBf16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kBf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The transpose of an 8x8 matrix of 16-bit values held as one m8n8 fragment (lane 4r + c holds
// row r, columns 2c, 2c + 1): afterwards the lane holds row r of the transpose.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// A 16-byte shared-memory load kept in program order with the MMAs (both are volatile asm), so
// that the compiler does not hoist every Q fragment of an unrolled K loop to its top (which
// spills at the register bound); ptxas still schedules it for latency.
__device__ __forceinline__ uint4 lds128_in_order(const uint4* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_addr(p)));
  return v;
}

// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (whole warps).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// D += A.B for one m16n8k16 tile, f32 accumulation.
template <bool kBf16>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint4& a, uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
  }
}

// D = A.B (+ D) for one m16n8k32 tile of int8 values, s32 accumulation.
__device__ __forceinline__ void imma16832(int (&d)[4], const uint4& a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

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

// The unnormalized Walsh-Hadamard transform H of one 128-value group in shared memory, in
// place, by one warp (two butterflies per lane per stage); synchronized before and after.
__device__ __forceinline__ void fwht128(float* x, int lane) {
#pragma unroll
  for (int h = 1; h < 128; h <<= 1) {
    __syncwarp();
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int p = lane + 32 * k;  // pair index 0..63
      const int i = (p / h) * 2 * h + (p % h);
      const float a = x[i], b = x[i + h];
      x[i] = a + b;
      x[i + h] = a - b;
    }
  }
  __syncwarp();
}

__device__ __forceinline__ bool turbo_sign_negative(const uint32_t* sign_words, int i) {
  return (sign_words[i >> 5] >> (i & 31)) & 1u;
}

// In-place inverse turbo rotation R^T y = s . (H y) / sqrt(128) of one group, by one warp.
__device__ __forceinline__ void inverse_rotate_group(float* x, int lane,
                                                     const uint32_t* sign_words) {
  fwht128(x, lane);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = lane + 32 * k;
    x[i] *= turbo_sign_negative(sign_words, i) ? -kTurboInvSqrt128 : kTurboInvSqrt128;
  }
  __syncwarp();
}

// In-place forward turbo rotation R x = H (s . x) / sqrt(128) of one group, by one warp.
__device__ __forceinline__ void forward_rotate_group(float* x, int lane,
                                                     const uint32_t* sign_words) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = lane + 32 * k;
    if (turbo_sign_negative(sign_words, i)) x[i] = -x[i];
  }
  fwht128(x, lane);
#pragma unroll
  for (int k = 0; k < 4; ++k) x[lane + 32 * k] *= kTurboInvSqrt128;
  __syncwarp();
}

__device__ __forceinline__ uint32_t sign_word(int i) {
  constexpr uint32_t w[4] = {turbo_tables::kTurboSignWords[0], turbo_tables::kTurboSignWords[1],
                             turbo_tables::kTurboSignWords[2], turbo_tables::kTurboSignWords[3]};
  return w[i & 3];
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
  for (int d = lane; d < p.dv; d += 32) out[d] = o[d] * f.scale;
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

// The prologue's Q work, after Q's rows have been staged (as f32) in `qs`: rotated for turbo K,
// scaled and packed into the MMA fragments (q_frag), and for q8_0 / q4_0 K with one n-tile the
// query's bias terms per block and row (qc); stage 1 zeroed where the layout asks for it.
// kS8 (q8_0 / q4_0 K, one n-tile, no K split: Q.K^T on int8 tensor cores): instead, per 32-dim
// block b and lane (row g, thread t) one uint4 at q_frag[b * 32 + lane] of Q's two int8 planes
// (hi: x, y; lo: z, w; dims 32b + s8_dim<KT>(t, 0 .. 7), k_frag_s8's), and per row its step (the
// value of one unit of the planes times one unit of K's operand: scale and kS8Unit included) at
// qc[row].
template <KvType KT, int NR, bool kS8 = false>
__device__ __forceinline__ void pack_q_fragments(const DecodeParams& p, float* qs, uint4* q_frag,
                                                 float* qc, uint8_t* stage_base, int tid, int lane,
                                                 int warp, const uint32_t* sign_words,
                                                 int rows_here) {
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
