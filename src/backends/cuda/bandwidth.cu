// Streaming-read bandwidth probe: the roofline for decode, which only reads the KV cache.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_backend.hpp"

namespace kvflash::cuda {
namespace {

constexpr size_t kProbeBytes = size_t{4} << 30;  // far past the 60 MB L2
constexpr int kPasses = 5;
constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 4;

// Every thread XORs the 16-byte words of a grid-stride walk, so each byte is read once and the
// loads cannot be removed; one word per thread is written only if the XOR hits a value the
// filled buffer never produces (never, in practice), keeping writes out of the measurement.
__global__ void read_kernel(const uint4* __restrict__ src, size_t n, uint4* sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint4 v = __ldcs(src + i);  // streaming: do not keep it in L2
    acc.x ^= v.x;
    acc.y ^= v.y;
    acc.z ^= v.z;
    acc.w ^= v.w;
  }
  if ((acc.x & acc.y & acc.z & acc.w) == 0xFFFFFFFFu) sink[threadIdx.x] = acc;
}

}  // namespace

std::optional<double> read_bandwidth_gbps() {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) return {};
  void* buf = nullptr;
  uint4* sink = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::optional<double> best;
  if (cudaMalloc(&buf, kProbeBytes) == cudaSuccess &&
      cudaMalloc(reinterpret_cast<void**>(&sink), kThreads * sizeof(uint4)) == cudaSuccess &&
      cudaMemset(buf, 0x5A, kProbeBytes) == cudaSuccess && cudaEventCreate(&start) == cudaSuccess &&
      cudaEventCreate(&stop) == cudaSuccess) {
    const size_t n = kProbeBytes / sizeof(uint4);
    const int blocks = sms * kBlocksPerSm;
    read_kernel<<<blocks, kThreads>>>(static_cast<const uint4*>(buf), n, sink);  // warm-up
    for (int pass = 0; pass < kPasses; ++pass) {
      cudaEventRecord(start);
      read_kernel<<<blocks, kThreads>>>(static_cast<const uint4*>(buf), n, sink);
      cudaEventRecord(stop);
      if (cudaEventSynchronize(stop) != cudaSuccess) break;
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      if (ms > 0) {
        const double gbps = static_cast<double>(kProbeBytes) / (ms * 1e-3) / 1e9;
        best = std::max(best.value_or(0.0), gbps);
      }
    }
  }
  if (cudaGetLastError() != cudaSuccess) best.reset();
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  cudaFree(sink);
  cudaFree(buf);
  return best;
}

}  // namespace kvflash::cuda
