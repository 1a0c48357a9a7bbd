#include "run/device_ops.hpp"

namespace kvflash::tools::run::ops {
namespace {

constexpr int kThreads = 256;

__global__ void embed_rows_kernel(const int32_t* ids, const float* table, float* x, int64_t e) {
  const int64_t t = blockIdx.x;
  const float* src = table + static_cast<int64_t>(ids[t]) * e;
  for (int64_t i = threadIdx.x; i < e; i += blockDim.x) x[t * e + i] = src[i];
}

// One block per row; the sum of squares in double, as the CPU path.
__global__ void rms_norm_kernel(const float* x, const float* g, float* y, int64_t d, float eps) {
  const float* xr = x + blockIdx.x * d;
  float* yr = y + blockIdx.x * d;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += double(xr[i]) * xr[i];
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  __shared__ double part[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) total += part[w];
  const auto inv = static_cast<float>(1.0 / sqrt(total / static_cast<double>(d) + eps));
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = xr[i] * inv * g[i];
}

__global__ void rope_table_kernel(const int64_t* seq_len, int64_t n, int32_t head_dim, double base,
                                  double scale, float2* cs) {
  const int32_t half = head_dim / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * half) return;
  const int64_t t = idx / half;
  const auto i = static_cast<int32_t>(idx % half);
  const double p = static_cast<double>(*seq_len - n + t) / scale;
  const double theta = p * pow(base, -2.0 * i / head_dim);
  double s = 0.0, c = 0.0;
  sincos(theta, &s, &c);
  cs[idx] = make_float2(static_cast<float>(c), static_cast<float>(s));
}

__global__ void rope_rotate_kernel(float* x, const float2* cs, int32_t heads, int32_t head_dim) {
  const int32_t half = head_dim / 2;
  const int64_t t = blockIdx.x;
  for (int32_t j = threadIdx.x; j < heads * half; j += blockDim.x) {
    const int32_t h = j / half, i = j % half;
    const float2 r = cs[t * half + i];
    float* v = x + (t * heads + h) * head_dim + 2 * i;
    const float a = v[0], b = v[1];
    v[0] = a * r.x - b * r.y;
    v[1] = a * r.y + b * r.x;
  }
}

__global__ void silu_mul_kernel(float* g, const float* u, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

unsigned blocks_for(int64_t count) {
  return static_cast<unsigned>((count + kThreads - 1) / kThreads);
}

}  // namespace

cudaError_t embed_rows(const int32_t* ids, const float* table, float* x, int64_t n, int64_t e,
                       cudaStream_t stream) {
  embed_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(ids, table, x, e);
  return cudaGetLastError();
}

cudaError_t rms_norm_rows(const float* x, const float* g, float* y, int64_t n, int64_t d, float eps,
                          cudaStream_t stream) {
  rms_norm_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(x, g, y, d, eps);
  return cudaGetLastError();
}

cudaError_t rope_table(const int64_t* seq_len, int64_t n, int32_t head_dim, double base,
                       double scale, float2* cs, cudaStream_t stream) {
  rope_table_kernel<<<blocks_for(n * (head_dim / 2)), kThreads, 0, stream>>>(seq_len, n, head_dim,
                                                                             base, scale, cs);
  return cudaGetLastError();
}

cudaError_t rope_rotate(float* x, const float2* cs, int64_t n, int32_t heads, int32_t head_dim,
                        cudaStream_t stream) {
  rope_rotate_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(x, cs, heads, head_dim);
  return cudaGetLastError();
}

cudaError_t silu_mul(float* g, const float* u, int64_t count, cudaStream_t stream) {
  silu_mul_kernel<<<blocks_for(count), kThreads, 0, stream>>>(g, u, count);
  return cudaGetLastError();
}

}  // namespace kvflash::tools::run::ops
