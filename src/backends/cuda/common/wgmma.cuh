// Hopper's warpgroup MMA (wgmma, sm_90a) as thin wrappers of its PTX, and the shared-memory
// descriptors of its operand tiles: 128-byte swizzled tiles as prefill_plan.hpp's swizzled_offset
// lays them out (what TMA's CU_TENSOR_MAP_SWIZZLE_128B writes too). Verified on an H100 by
// dev/wgmma_probe.cu (S and O against the CPU; the MN-major descriptor strides found there).
//
// A warpgroup (4 consecutive warps from a warp index divisible by 4) issues each wgmma together;
// the accumulators of an m64nN product are, per warp w of the group, rows 16 w .. 16 w + 15 in
// mma.sync m16n8's C layout for each 8-column group: d[4 n8 + e] = row g (+8 for e >= 2), column
// 8 n8 + 2 t + (e & 1). A register operand (P) is mma.sync m16n8k16's A fragment.
//
// Built for other targets than sm_90a, the wrappers trap: the host routes nothing there
// (cuda.prefill's compute-capability guard).
//
// Each wrapper is one instruction, its PTX text spliced from the shape, the element type and
// the operand lists (KVFLASH_WGMMA_SS / _RS below).
#pragma once

#include <cstdint>

#include "backends/cuda/common/async_copy.cuh"  // fence_proxy_async: writes before wgmma reads

namespace kvflash::cuda {

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVFLASH_WGMMA_TRAP 1
#endif

// The descriptor of a 128-byte swizzled tile at shared address `addr` (1024-byte aligned up to
// the k-step offset inside an atom): `lbo` bytes between 64-column atoms along an MN-major
// operand's N (ignored for K-major), `sbo` bytes between 8-row groups (1024 in this layout).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t(addr >> 4) & 0x3fff) | (uint64_t((lbo >> 4) & 0x3fff) << 16) |
         (uint64_t((sbo >> 4) & 0x3fff) << 32) | (uint64_t(1) << 62);
}

// Before a warpgroup's first wgmma that reads registers written since its last wgmma.
__device__ __forceinline__ void wgmma_fence() {
#ifndef KVFLASH_WGMMA_TRAP
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifndef KVFLASH_WGMMA_TRAP
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most N committed groups of this warpgroup are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifndef KVFLASH_WGMMA_TRAP
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// Registers that an in-flight wgmma reads or writes (accumulators, register A operands) held in
// place around its issue and its wait: the empty asm "writes" each register, so the compiler
// moves no access of them across the fence (CUTLASS's warpgroup_fence_operand). Needed where other
// work runs between a wgmma's commit and its wait.
template <int N>
__device__ __forceinline__ void wgmma_fence_operand(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
__device__ __forceinline__ void wgmma_fence_operand(uint4& a) {
  asm volatile("" : "+r"(a.x), "+r"(a.y), "+r"(a.z), "+r"(a.w)::"memory");
}

// Warp specialization: a warpgroup gives registers back (a producer that only issues copies) or
// takes them (the MMA warpgroups), all its threads together; the kernel's launch bound sets the
// pool (its threads x its per-thread count) that the warpgroups' new counts share.
template <int kRegs>
__device__ __forceinline__ void warpgroup_regs_dec() {
#ifndef KVFLASH_WGMMA_TRAP
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void warpgroup_regs_inc() {
#ifndef KVFLASH_WGMMA_TRAP
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// D (64 x N, f32) = A (64 x 16) . B (N x 16)^T (+ D when accumulate), A and B K-major tiles in
// shared memory (descriptors).
template <int N, bool kBf16>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate);
// D (64 x N, f32) += A (64 x 16, registers) . B (16 x N), B an MN-major tile in shared memory
// (its rows are the K dimension, N contiguous: V's tile of keys x dims).
template <int N, bool kBf16>
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[N / 2], const uint4& a, uint64_t b);

#ifdef KVFLASH_WGMMA_TRAP
template <int N, bool kBf16>
__device__ __forceinline__ void wgmma_ss(float (&)[N / 2], uint64_t, uint64_t, int) {
  __trap();
}
template <int N, bool kBf16>
__device__ __forceinline__ void wgmma_rs_tb(float (&)[N / 2], const uint4&, uint64_t) {
  __trap();
}
#else
// A lane's N / 2 accumulators as asm output operands %0 .. %(N/2 - 1) (D), and their numbers
// in the instruction's register vector (R), each list the one before it and the rest.
#define KVFLASH_WGMMA_D32                                                                         \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KVFLASH_WGMMA_D64                                                                          \
  KVFLASH_WGMMA_D32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), \
      "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]),   \
      "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),   \
      "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]),   \
      "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KVFLASH_WGMMA_D128                                                                         \
  KVFLASH_WGMMA_D64, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), \
      "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),   \
      "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),   \
      "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),   \
      "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),   \
      "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),            \
      "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),          \
      "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),          \
      "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),          \
      "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define KVFLASH_WGMMA_R32                                                                          \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25," \
  "%26,%27,%28,%29,%30,%31"
#define KVFLASH_WGMMA_R64                                                                      \
  KVFLASH_WGMMA_R32                                                                            \
  ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%" \
  "54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define KVFLASH_WGMMA_R128                                                                     \
  KVFLASH_WGMMA_R64                                                                            \
  ",%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%" \
  "86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106," \
  "%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124," \
  "%125,%126,%127"
// One instruction of shape m64nNk16, f32 accumulators, A and B of TYPE ("f16" or "bf16").
// SS: A and B descriptors, D scaled by the predicate from `accumulate` (operands A, B, P); RS: A
// from four registers and B an MN-major (transposed) descriptor (A_B: their operands), D
// accumulated.
#define KVFLASH_WGMMA_SS(N, TYPE, R, D, A, B, P)                                               \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" P                                          \
               ", 0;\n"                                                                        \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" R "}, %" A \
               ", %" B ", p, 1, 1, 0, 0;\n}\n"                                                 \
               : D                                                                             \
               : "l"(a), "l"(b), "r"(accumulate))
#define KVFLASH_WGMMA_RS(N, TYPE, R, D, A_B)                                                    \
  asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" R "}, " A_B \
               ", 1, 1, 1, 1;\n"                                                                \
               : D                                                                              \
               : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(b))

template <>
__device__ __forceinline__ void wgmma_ss<64, false>(float (&d)[32], uint64_t a, uint64_t b,
                                                    int accumulate) {
  KVFLASH_WGMMA_SS(64, "f16", KVFLASH_WGMMA_R32, KVFLASH_WGMMA_D32, "32", "33", "34");
}
template <>
__device__ __forceinline__ void wgmma_ss<64, true>(float (&d)[32], uint64_t a, uint64_t b,
                                                   int accumulate) {
  KVFLASH_WGMMA_SS(64, "bf16", KVFLASH_WGMMA_R32, KVFLASH_WGMMA_D32, "32", "33", "34");
}
template <>
__device__ __forceinline__ void wgmma_ss<128, false>(float (&d)[64], uint64_t a, uint64_t b,
                                                     int accumulate) {
  KVFLASH_WGMMA_SS(128, "f16", KVFLASH_WGMMA_R64, KVFLASH_WGMMA_D64, "64", "65", "66");
}
template <>
__device__ __forceinline__ void wgmma_ss<128, true>(float (&d)[64], uint64_t a, uint64_t b,
                                                    int accumulate) {
  KVFLASH_WGMMA_SS(128, "bf16", KVFLASH_WGMMA_R64, KVFLASH_WGMMA_D64, "64", "65", "66");
}
template <>
__device__ __forceinline__ void wgmma_rs_tb<128, false>(float (&d)[64], const uint4& a,
                                                        uint64_t b) {
  KVFLASH_WGMMA_RS(128, "f16", KVFLASH_WGMMA_R64, KVFLASH_WGMMA_D64, "{%64,%65,%66,%67}, %68");
}
template <>
__device__ __forceinline__ void wgmma_rs_tb<128, true>(float (&d)[64], const uint4& a, uint64_t b) {
  KVFLASH_WGMMA_RS(128, "bf16", KVFLASH_WGMMA_R64, KVFLASH_WGMMA_D64, "{%64,%65,%66,%67}, %68");
}
template <>
__device__ __forceinline__ void wgmma_rs_tb<256, false>(float (&d)[128], const uint4& a,
                                                        uint64_t b) {
  KVFLASH_WGMMA_RS(256, "f16", KVFLASH_WGMMA_R128, KVFLASH_WGMMA_D128,
                   "{%128,%129,%130,%131}, %132");
}
template <>
__device__ __forceinline__ void wgmma_rs_tb<256, true>(float (&d)[128], const uint4& a,
                                                       uint64_t b) {
  KVFLASH_WGMMA_RS(256, "bf16", KVFLASH_WGMMA_R128, KVFLASH_WGMMA_D128,
                   "{%128,%129,%130,%131}, %132");
}
#undef KVFLASH_WGMMA_SS
#undef KVFLASH_WGMMA_RS
#undef KVFLASH_WGMMA_D32
#undef KVFLASH_WGMMA_R32
#undef KVFLASH_WGMMA_D64
#undef KVFLASH_WGMMA_R64
#undef KVFLASH_WGMMA_D128
#undef KVFLASH_WGMMA_R128
#endif

}  // namespace kvflash::cuda
