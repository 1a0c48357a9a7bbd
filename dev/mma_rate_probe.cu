// How fast the H200's tensor cores run mma.sync of each operand type, as one question for the
// turbo decode: could K's scores come from the codes' bit planes (binary AND+POPC MMAs, no
// codebook lookups on the integer pipe) instead of f16 operands built by byte permutes?
// Each kernel: every warp runs ITERS x 4 independent MMAs of one shape (the accumulators of
// chain k feed chain k's next MMA), 8 warps per CTA, 4 CTAs per SM. Prints the rate as MMAs per
// SM per cycle and as dense TOPS (2 ops per multiply-add; binary: one AND+POPC per bit pair),
// and checks one MMA's result on known operands (all-ones bits: 256 per output).
//   nvcc -O3 -arch=sm_90 -std=c++17 dev/mma_rate_probe.cu -o mma_rate_probe && ./mma_rate_probe
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#define CK(x)                                                             \
  do {                                                                    \
    cudaError_t e_ = (x);                                                 \
    if (e_ != cudaSuccess) {                                              \
      printf("%s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      return 1;                                                           \
    }                                                                     \
  } while (0)

enum Shape { kF16 = 0, kS8 = 1, kS4 = 2, kB1 = 3 };

template <int S>
__device__ __forceinline__ void mma(unsigned (&d)[4], const unsigned (&a)[4],
                                    const unsigned (&b)[2]) {
  if constexpr (S == kF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (S == kS8) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (S == kS4) {
    asm volatile(
        "mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc {%0,%1,%2,%3}, "
        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

template <int S>
__global__ void rate(unsigned* out, int iters, unsigned seed) {
  unsigned a[4], b[2], d[4][4];
  for (int k = 0; k < 4; ++k) a[k] = seed * (threadIdx.x + 3 * k + 1);
  for (int k = 0; k < 2; ++k) b[k] = seed ^ (threadIdx.x * 7 + k);
  for (int c = 0; c < 4; ++c)
    for (int k = 0; k < 4; ++k) d[c][k] = 0;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < 4; ++c) mma<S>(d[c], a, b);
  }
  unsigned x = 0;
  for (int c = 0; c < 4; ++c)
    for (int k = 0; k < 4; ++k) x ^= d[c][k];
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

// One MMA of all-ones operands (f16: 1.0; s8/s4: 1; b1: all bits set), every output read back.
template <int S>
__global__ void once(unsigned* out) {
  const unsigned one =
      S == kF16 ? 0x3c003c00u : (S == kS8 ? 0x01010101u : (S == kS4 ? 0x11111111u : 0xffffffffu));
  unsigned a[4] = {one, one, one, one}, b[2] = {one, one}, d[4] = {0, 0, 0, 0};
  mma<S>(d, a, b);
  for (int k = 0; k < 4; ++k) out[threadIdx.x * 4 + k] = d[k];
}

template <int S>
int run(const char* name, int kdim, int sms, int clock_khz) {
  const int ctas = sms * 4, threads = 256, iters = 4096;
  unsigned* out;
  CK(cudaMalloc(&out, sizeof(unsigned) * ctas * threads));
  once<S><<<1, 32>>>(out);
  CK(cudaGetLastError());
  unsigned h[128];
  CK(cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost));
  const unsigned want_i = kdim;  // every output: the sum of k products of 1 x 1
  bool ok = true;
  for (int i = 0; i < 128; ++i) {
    if (S == kF16) {
      float f;
      memcpy(&f, &h[i], 4);
      ok = ok && f == static_cast<float>(kdim);
    } else {
      ok = ok && h[i] == want_i;
    }
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  rate<S><<<ctas, threads>>>(out, iters / 8, 1u);  // warm-up
  CK(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int r = 0; r < 5; ++r) {
    CK(cudaEventRecord(e0));
    rate<S><<<ctas, threads>>>(out, iters, 12345u + r);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (ms < best) best = ms;
  }
  const double mmas = double(ctas) * (threads / 32) * iters * 4;
  const double per_sm_cycle = mmas / sms / (best * 1e-3 * clock_khz * 1e3);
  const double tops = mmas * 16 * 8 * kdim * 2 / (best * 1e-3) / 1e12;
  printf("| %s | m16n8k%d | %.3f | %.2f | %.0f | %s |\n", name, kdim, best, per_sm_cycle, tops,
         ok ? "yes" : "NO");
  CK(cudaFree(out));
  return 0;
}

int main() {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    printf("no CUDA device\n");
    return 1;
  }
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  printf("%s, %d SMs, clock attribute %d MHz (rates per cycle use it)\n\n", prop.name,
         prop.multiProcessorCount, clock_khz / 1000);
  printf("| operands | shape | best ms | MMAs per SM per cycle | dense TOPS | all-ones check |\n");
  printf("|---|---|---:|---:|---:|---|\n");
  const int sms = prop.multiProcessorCount;
  int rc = 0;
  rc |= run<kF16>("f16 -> f32", 16, sms, clock_khz);
  rc |= run<kS8>("s8 -> s32", 32, sms, clock_khz);
  rc |= run<kS4>("s4 -> s32", 64, sms, clock_khz);
  rc |= run<kB1>("b1 AND+POPC -> s32", 256, sms, clock_khz);
  return rc;
}
