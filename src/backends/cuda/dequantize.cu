// gpu::dequantize_rows: the host's dequantize_row on the device. Each value is read as the
// kernels read it (common/kv_values.hpp's v_value: the host's one float multiply per block value,
// checked on the CPU against the host bit for bit), and the turbo inverse rotation is the host's
// butterflies in the host's stage order (common/turbo_rotate.cuh: each output the a + b or a - b
// of the same two inputs) times the same +-1/sqrt(128), so a row dequantized here has
// kvflash::dequantize_row's floats, NaN where the host has NaN (tests/gpu/quantize_test.cpp
// compares their bits).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backends/cuda/common/kv_values.hpp"
#include "backends/cuda/common/turbo_rotate.cuh"
#include "backends/cuda/cuda_backend.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/turbo.hpp"

namespace kvflash::cuda {
namespace {

// Every type but turbo: value col of the row as the kernels read it (common/kv_values.hpp's
// v_value, checked on the CPU against dequantize_row_rotated bit for bit).
template <KvType T>
__global__ void dequantize_values(const uint8_t* src, int64_t row_bytes, int64_t n_rows, int64_t n,
                                  float* dst) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n_rows * n) return;
  const int64_t row = i / n, col = i - row * n;
  dst[i] = v_value<T>(src + row * row_bytes, static_cast<int>(col), nullptr);
}

constexpr int kG = kTurboGroup;
constexpr int kGroupsPerBlock = 4;  // one warp each

struct TurboDecodeTables {
  float centroids[16];
  uint32_t sign_words[4];
};

// turbo: one warp per 128-value group: norm * centroid (v_value, the rotated domain) into shared
// memory, rotated back there, the row's first n values written.
template <KvType T>
__global__ void dequantize_turbo(const uint8_t* src, int64_t row_bytes, int64_t n_rows, int64_t n,
                                 float* dst, const TurboDecodeTables tt) {
  __shared__ float y_s[kGroupsPerBlock][kG];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int64_t groups_per_row = (n + kG - 1) / kG;
  const int64_t grp = int64_t{blockIdx.x} * kGroupsPerBlock + w;
  if (grp >= n_rows * groups_per_row) return;  // the whole warp: one group
  const int64_t row = grp / groups_per_row, g = grp % groups_per_row;
  const uint8_t* row_src = src + row * row_bytes;
  float* y = y_s[w];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int i = lane + 32 * s;
    y[i] = v_value<T>(row_src, static_cast<int>(g * kG) + i, tt.centroids);
  }
  inverse_rotate_group(y, lane, tt.sign_words);
  const int64_t valid = min(int64_t{kG}, n - g * kG);  // the last group's padding is not written
  float* out = dst + row * n + g * kG;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int i = lane + 32 * s;
    if (i < valid) out[i] = y[i];
  }
}

unsigned int blocks_for(int64_t items, int per_block) {
  return static_cast<unsigned int>((items + per_block - 1) / per_block);
}

// The kernel of type T over the rows: one thread per value, or for turbo one warp per group.
template <KvType T>
void launch(const uint8_t* src, int64_t row_bytes, int64_t n_rows, int64_t n, float* dst,
            cudaStream_t s) {
  if constexpr (is_rotated(T)) {
    TurboDecodeTables tt{};
    for (int k = 0; k < (1 << turbo_bits(T)); ++k) tt.centroids[k] = turbo_centroids(T)[k];
    for (int i = 0; i < 4; ++i) tt.sign_words[i] = turbo_tables::kTurboSignWords[i];
    const int64_t groups = n_rows * ((n + kG - 1) / kG);
    dequantize_turbo<T><<<blocks_for(groups, kGroupsPerBlock), 32 * kGroupsPerBlock, 0, s>>>(
        src, row_bytes, n_rows, n, dst, tt);
  } else {
    dequantize_values<T>
        <<<blocks_for(n_rows * n, 256), 256, 0, s>>>(src, row_bytes, n_rows, n, dst);
  }
}

}  // namespace

Status dequantize_rows(KvType t, const void* src, int64_t n_rows, int64_t n, float* dst,
                       void* stream) {
  if (n_rows < 0 || n < 0)
    return invalid_argument("gpu::dequantize_rows: n_rows and n_values must not be negative");
  if (n_rows == 0 || n == 0) return {};
  const auto* in = static_cast<const uint8_t*>(src);
  const auto rb = static_cast<int64_t>(row_size(t, n));
  const auto s = static_cast<cudaStream_t>(stream);
  switch (t) {
    case KvType::f32:
      launch<KvType::f32>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::f16:
      launch<KvType::f16>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::bf16:
      launch<KvType::bf16>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::q8_0:
      launch<KvType::q8_0>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::q4_0:
      launch<KvType::q4_0>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::turbo2:
      launch<KvType::turbo2>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::turbo3:
      launch<KvType::turbo3>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::turbo4:
      launch<KvType::turbo4>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::fp8_e4m3:
      launch<KvType::fp8_e4m3>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::fp8_e5m2:
      launch<KvType::fp8_e5m2>(in, rb, n_rows, n, dst, s);
      break;
  }
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return Error{
        ErrorCode::backend_error,
        std::string("gpu::dequantize_rows: launching the kernel: ") + cudaGetErrorString(e)};
  return {};
}

}  // namespace kvflash::cuda
