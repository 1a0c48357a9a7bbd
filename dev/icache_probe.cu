// What cold code costs on the GPU: one warp per SM runs N unrolled, independent FFMAs (N x 16
// bytes of straight-line SASS) and thread 0 stores %globaltimer before and after. Conditions:
//   warm     the same kernel ran just before (the SM's instruction caches and the L2 hold it)
//   l2cold   256 MB written just before (the kernel's code is no longer in the L2)
//   evictN   a different kernel of N KB of code ran just before (the L2 still holds this one)
// Prints the median and max over the CTAs of the in-kernel time, and the event time.
//   nvcc -O3 -arch=sm_90 -std=c++17 dev/icache_probe.cu -o icache_probe && ./icache_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

template <int N, int SALT>
__global__ void straight(float* sink, unsigned long long* t) {
  float a[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) a[k] = threadIdx.x * 1e-3f + k + SALT;
  if (threadIdx.x == 0) t[2 * blockIdx.x] = gtimer();
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("fma.rn.f32 %0, %0, %1, %2;"
                 : "+f"(a[i & 7])
                 : "f"(1.0001f), "f"(1e-7f * (i + SALT)));
  __syncwarp();
  if (threadIdx.x == 0) t[2 * blockIdx.x + 1] = gtimer();
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) s += a[k];
  if (s == 12345.f) sink[threadIdx.x] = s;
}

template <int N, int E>
void evict(float* sink, unsigned long long* t, int sms) {
  straight<E * 64, 1><<<sms, 32>>>(sink, t);
}

template <int N>
void probe(int sms, float* sink, unsigned long long* dt, void* flush, size_t flush_bytes) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<unsigned long long> h(2 * sms);
  const char* names[6] = {"warm", "l2cold", "evict8", "evict16", "evict32", "evict64"};
  for (int cond = 0; cond < 6; ++cond) {
    std::vector<double> med, mx, ev;
    for (int rep = 0; rep < 9; ++rep) {
      straight<N, 0><<<sms, 32>>>(sink, dt);  // warm-up of this kernel
      if (cond == 1) cudaMemsetAsync(flush, rep, flush_bytes);
      if (cond == 2) evict<N, 8>(sink, dt, sms);
      if (cond == 3) evict<N, 16>(sink, dt, sms);
      if (cond == 4) evict<N, 32>(sink, dt, sms);
      if (cond == 5) evict<N, 64>(sink, dt, sms);
      cudaEventRecord(e0);
      straight<N, 0><<<sms, 32>>>(sink, dt);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      cudaMemcpy(h.data(), dt, h.size() * 8, cudaMemcpyDeviceToHost);
      std::vector<double> d(sms);
      for (int c = 0; c < sms; ++c) d[c] = double(h[2 * c + 1] - h[2 * c]) * 1e-3;
      std::sort(d.begin(), d.end());
      med.push_back(d[sms / 2]);
      mx.push_back(d.back());
      ev.push_back(ms * 1e3);
    }
    std::sort(med.begin(), med.end());
    std::sort(mx.begin(), mx.end());
    std::sort(ev.begin(), ev.end());
    printf("| %5d | %6.1f | %-7s | %7.2f | %7.2f | %7.2f |\n", N, N * 16 / 1024.0, names[cond],
           med[4], mx[4], ev[4]);
  }
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* sink;
  unsigned long long* dt;
  void* flush;
  const size_t flush_bytes = size_t{256} << 20;
  cudaMalloc(&sink, 4096);
  cudaMalloc(&dt, 16 * 1024);
  cudaMalloc(&flush, flush_bytes);
  printf(
      "| FFMAs | code KB | cond | CTA median us | CTA max us | event us "
      "|\n|---:|---:|---|---:|---:|---:|\n");
  probe<256>(sms, sink, dt, flush, flush_bytes);
  probe<512>(sms, sink, dt, flush, flush_bytes);
  probe<1024>(sms, sink, dt, flush, flush_bytes);
  probe<1536>(sms, sink, dt, flush, flush_bytes);
  probe<2048>(sms, sink, dt, flush, flush_bytes);
  probe<3072>(sms, sink, dt, flush, flush_bytes);
  probe<4096>(sms, sink, dt, flush, flush_bytes);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    fprintf(stderr, "error: %s\n", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
