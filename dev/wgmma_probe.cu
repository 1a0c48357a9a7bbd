// Probe for the Hopper prefill kernel (issue 39): warpgroup MMA (wgmma) on 128-byte-swizzled
// shared-memory tiles, checked against the CPU, then its raw rate in an attention-shaped loop.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a dev/wgmma_probe.cu -o wgmma_probe
//   ./wgmma_probe
//
// 1. check: one warpgroup, Q (64 x 128) and K, V (64 keys x 128) f16 written into shared memory in
//    the 128B-swizzle layout (what TMA's CU_TENSOR_MAP_SWIZZLE_128B writes): S = Q.K^T by SS wgmma
//    (both operands K-major, descriptors), then O = P.V with P = f16(S / 16) from S's accumulators
//    as register A fragments (RS wgmma) and V MN-major (transposed B). Which descriptor strides
//    make V right is what the probe finds out: it tries the candidates and says which match.
// 2. rate: per CTA NWG consumer warpgroups of 64 query rows over one resident K / V tile of 128
//    keys: S = Q.K^T (m64n128, 8 k-steps), P packed, O += P.V (m64n128, 8 k-steps), ITER times;
//    TFLOP/s over 132 x CTAs_per_SM CTAs, with and without an exp2 per score (the softmax's MUFU
//    load).
// dev/wgmma_ops.inc holds the inline-PTX wrappers (generated; long register lists).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "wgmma_ops.inc"

#define CK(x)                                                                \
  do {                                                                       \
    cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess) {                                                 \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)

// Byte offset of element (row, col) of a tile of `rows` rows x 64 f16 (128 B) in the 128B
// swizzle: 16-byte chunk c of row r lands at chunk c ^ (r % 8); 8-row groups 1024 B apart. A
// 128-column tile is two such tiles, columns 64.. at + rows * 128.
__host__ __device__ inline int sw128(int row, int col, int rows) {
  const int atom = col / 64, c = col % 64;
  return atom * rows * 128 + (row / 8) * 1024 + (row % 8) * 128 + (((c / 8) ^ (row % 8)) * 16) +
         (c % 8) * 2;
}

__device__ inline uint64_t desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t(addr >> 4) & 0x3fff) | (uint64_t((lbo >> 4) & 0x3fff) << 16) |
         (uint64_t((sbo >> 4) & 0x3fff) << 32) | (uint64_t(1) << 62);
}
__device__ inline uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ inline void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ inline void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ inline void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ inline void fence_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ inline uint32_t pack_h2(float a, float b) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <int N>
__device__ inline void warpgroup_reg_keep(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---------------------------------------------------------------------------------------------
// 1. check

constexpr int kCheckKeys = 64, kD = 128;

__global__ void check_kernel(const __half* q, const __half* k, const __half* v, float* s_out,
                             float* o_out, uint32_t v_lbo, uint32_t v_sbo) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* sq = smem;                    // 64 x 128: 16 KB
  uint8_t* sk = smem + 64 * kD * 2;      // 64 x 128
  uint8_t* sv = smem + 2 * 64 * kD * 2;  // 64 x 128
  const int tid = threadIdx.x;
  for (int i = tid; i < 64 * kD; i += blockDim.x) {
    const int r = i / kD, c = i % kD;
    *reinterpret_cast<__half*>(sq + sw128(r, c, 64)) = q[i];
    *reinterpret_cast<__half*>(sk + sw128(r, c, kCheckKeys)) = k[i];
    *reinterpret_cast<__half*>(sv + sw128(r, c, kCheckKeys)) = v[i];
  }
  fence_async_smem();
  __syncthreads();

  float s[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = 0.f;
  wg_fence();
#pragma unroll
  for (int kc = 0; kc < kD / 16; ++kc) {
    const uint32_t off = (kc / 4) * 64 * 128 + (kc % 4) * 32;
    wgmma_ss_m64n64(s, desc(smem_u32(sq) + off, 16, 1024), desc(smem_u32(sk) + off, 16, 1024), 1);
  }
  wg_commit();
  wg_wait<0>();

  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n8 = 0; n8 < 8; ++n8) {
    const int r0 = 16 * warp + g, c0 = 8 * n8 + 2 * t;
    s_out[r0 * 64 + c0] = s[n8 * 4 + 0];
    s_out[r0 * 64 + c0 + 1] = s[n8 * 4 + 1];
    s_out[(r0 + 8) * 64 + c0] = s[n8 * 4 + 2];
    s_out[(r0 + 8) * 64 + c0 + 1] = s[n8 * 4 + 3];
  }

  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  uint32_t pa[kCheckKeys / 16][4];
#pragma unroll
  for (int kc = 0; kc < kCheckKeys / 16; ++kc) {
    pa[kc][0] = pack_h2(s[8 * kc + 0] / 16, s[8 * kc + 1] / 16);
    pa[kc][1] = pack_h2(s[8 * kc + 2] / 16, s[8 * kc + 3] / 16);
    pa[kc][2] = pack_h2(s[8 * kc + 4] / 16, s[8 * kc + 5] / 16);
    pa[kc][3] = pack_h2(s[8 * kc + 6] / 16, s[8 * kc + 7] / 16);
  }
  wg_fence();
  // keys 16 kc..: rows of V's tile, 8-row groups of 1024 B
#pragma unroll
  for (int kc = 0; kc < kCheckKeys / 16; ++kc)
    wgmma_rs_m64n128_tb(o, pa[kc], desc(smem_u32(sv) + kc * 16 * 128, v_lbo, v_sbo), 1);
  wg_commit();
  wg_wait<0>();
#pragma unroll
  for (int n8 = 0; n8 < 16; ++n8) {
    const int r0 = 16 * warp + g, c0 = 8 * n8 + 2 * t;
    o_out[r0 * kD + c0] = o[n8 * 4 + 0];
    o_out[r0 * kD + c0 + 1] = o[n8 * 4 + 1];
    o_out[(r0 + 8) * kD + c0] = o[n8 * 4 + 2];
    o_out[(r0 + 8) * kD + c0 + 1] = o[n8 * 4 + 3];
  }
}

// ---------------------------------------------------------------------------------------------
// 2. rate

constexpr int kRateKeys = 128;

template <int NWG, bool kExp>
__global__ void __launch_bounds__(128 * NWG, 1) rate_kernel(int iters, float* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* sk = smem;                           // 128 keys x 128: 32 KB
  uint8_t* sv = smem + kRateKeys * kD * 2;      // 32 KB
  uint8_t* sq = smem + 2 * kRateKeys * kD * 2;  // NWG x 64 x 128
  const int tid = threadIdx.x, wg = tid / 128;
  for (int i = tid; i < kRateKeys * kD / 2; i += blockDim.x)
    reinterpret_cast<uint32_t*>(sk)[i] = reinterpret_cast<uint32_t*>(sv)[i] =
        0x3c003c00u ^ (i & 0x00ff00ffu);
  for (int i = tid; i < NWG * 64 * kD / 2; i += blockDim.x)
    reinterpret_cast<uint32_t*>(sq)[i] = 0x2c002c00u;
  fence_async_smem();
  __syncthreads();
  const uint32_t q_addr = smem_u32(sq) + wg * 64 * kD * 2, k_addr = smem_u32(sk),
                 v_addr = smem_u32(sv);
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  for (int it = 0; it < iters; ++it) {
    float s[64];
    wg_fence();
#pragma unroll
    for (int kc = 0; kc < kD / 16; ++kc) {
      const uint32_t qo = (kc / 4) * 64 * 128 + (kc % 4) * 32;
      const uint32_t ko = (kc / 4) * kRateKeys * 128 + (kc % 4) * 32;
      wgmma_ss_m64n128(s, desc(q_addr + qo, 16, 1024), desc(k_addr + ko, 16, 1024), kc > 0);
    }
    wg_commit();
    wg_wait<0>();
    if constexpr (kExp) {
#pragma unroll
      for (int i = 0; i < 64; ++i) s[i] = exp2f(s[i] * 1e-3f);
    }
    uint32_t pa[kRateKeys / 16][4];
#pragma unroll
    for (int kc = 0; kc < kRateKeys / 16; ++kc) {
      pa[kc][0] = pack_h2(s[8 * kc + 0], s[8 * kc + 1]);
      pa[kc][1] = pack_h2(s[8 * kc + 2], s[8 * kc + 3]);
      pa[kc][2] = pack_h2(s[8 * kc + 4], s[8 * kc + 5]);
      pa[kc][3] = pack_h2(s[8 * kc + 6], s[8 * kc + 7]);
    }
    wg_fence();
#pragma unroll
    for (int kc = 0; kc < kRateKeys / 16; ++kc)
      wgmma_rs_m64n128_tb(o, pa[kc], desc(v_addr + kc * 16 * 128, kRateKeys * 128, 1024), 1);
    wg_commit();
    wg_wait<0>();
  }
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) acc += o[i];
  if (acc == 1234.5f) sink[tid] = acc;  // keeps the work
}

template <int NWG, bool kExp>
void time_rate(int sms) {
  const size_t smem = 2 * kRateKeys * kD * 2 + NWG * 64 * kD * 2;
  CK(cudaFuncSetAttribute(rate_kernel<NWG, kExp>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(smem)));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rate_kernel<NWG, kExp>, 128 * NWG,
                                                   smem));
  float* sink;
  CK(cudaMalloc(&sink, 4096 * 4));
  const int iters = 2000, grid = sms * per_sm;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int rep = 0; rep < 6; ++rep) {
    CK(cudaEventRecord(a));
    rate_kernel<NWG, kExp><<<grid, 128 * NWG, smem>>>(iters, sink);
    CK(cudaGetLastError());
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t;
    CK(cudaEventElapsedTime(&t, a, b));
    if (rep > 0) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double flops = 4.0 * 64 * kRateKeys * kD * NWG * double(iters) * grid;
  std::printf("rate: %d warpgroups x 64 rows, %d CTA/SM, exp2 %s: %.0f TFLOP/s (%.3f ms)\n", NWG,
              per_sm, kExp ? "yes" : "no ", flops / (ms[ms.size() / 2] * 1e-3) / 1e12,
              ms[ms.size() / 2]);
  CK(cudaFree(sink));
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  // check
  std::vector<__half> q(64 * kD), k(64 * kD), v(64 * kD);
  std::vector<float> qf(64 * kD), kf(64 * kD), vf(64 * kD);
  srand(12345);
  auto rnd = [] { return (rand() / float(RAND_MAX)) * 2.f - 1.f; };
  for (int i = 0; i < 64 * kD; ++i) {
    q[i] = __float2half(rnd());
    k[i] = __float2half(rnd());
    v[i] = __float2half(rnd());
    qf[i] = __half2float(q[i]);
    kf[i] = __half2float(k[i]);
    vf[i] = __half2float(v[i]);
  }
  std::vector<double> s_ref(64 * 64), o_ref(64 * kD, 0.0);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 64; ++c) {
      double a = 0;
      for (int d = 0; d < kD; ++d) a += double(qf[r * kD + d]) * kf[c * kD + d];
      s_ref[r * 64 + c] = a;
    }
  __half *dq, *dk, *dv;
  float *ds, *dout;
  CK(cudaMalloc(&dq, 64 * kD * 2));
  CK(cudaMalloc(&dk, 64 * kD * 2));
  CK(cudaMalloc(&dv, 64 * kD * 2));
  CK(cudaMalloc(&ds, 64 * 64 * 4));
  CK(cudaMalloc(&dout, 64 * kD * 4));
  CK(cudaMemcpy(dq, q.data(), 64 * kD * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dk, k.data(), 64 * kD * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv, v.data(), 64 * kD * 2, cudaMemcpyHostToDevice));
  CK(cudaFuncSetAttribute(check_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          3 * 64 * kD * 2));
  // V descriptor candidates (MN-major, 128B swizzle): LBO, SBO in bytes.
  const uint32_t cand[][2] = {{kCheckKeys * 128, 1024},
                              {1024, kCheckKeys * 128},
                              {16, 1024},
                              {1024, 16},
                              {kCheckKeys * 128, 16}};
  for (const auto& c : cand) {
    CK(cudaMemset(ds, 0xff, 64 * 64 * 4));
    CK(cudaMemset(dout, 0xff, 64 * kD * 4));
    check_kernel<<<1, 128, 3 * 64 * kD * 2>>>(dq, dk, dv, ds, dout, c[0], c[1]);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> s(64 * 64), o(64 * kD);
    CK(cudaMemcpy(s.data(), ds, s.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost));
    double es = 0, ns = 0, eo = 0, no = 0;
    for (int i = 0; i < 64 * 64; ++i) {
      es += (s[i] - s_ref[i]) * (s[i] - s_ref[i]);
      ns += s_ref[i] * s_ref[i];
    }
    for (int r = 0; r < 64; ++r)
      for (int d = 0; d < kD; ++d) {
        double a = 0;
        for (int c2 = 0; c2 < kCheckKeys; ++c2)
          a += double(__half2float(__float2half(s[r * 64 + c2] / 16))) * vf[c2 * kD + d];
        eo += (o[r * kD + d] - a) * (o[r * kD + d] - a);
        no += a * a;
      }
    std::printf("check: S nmse %.3g; V desc lbo %u sbo %u: O nmse %.3g %s\n", es / ns, c[0], c[1],
                eo / no, eo / no < 1e-5 ? "MATCH" : "");
  }
  time_rate<1, false>(prop.multiProcessorCount);
  time_rate<2, false>(prop.multiProcessorCount);
  time_rate<3, false>(prop.multiProcessorCount);
  time_rate<2, true>(prop.multiProcessorCount);
  time_rate<3, true>(prop.multiProcessorCount);
  return 0;
}
