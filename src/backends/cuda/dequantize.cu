// gpu::dequantize_rows: the host's dequantize_row on the device, bit for bit. The scalar
// conversions are the host's own constexpr recipes (formats/half_inline.hpp, fp8_inline.hpp: NaN
// payloads included), each block value is the host's one float multiply, and the turbo inverse
// rotation is the host's butterflies in the host's stage order (common/turbo_rotate.cuh: each
// output the a + b or a - b of the same two inputs) times the same +-1/sqrt(128), so a row
// dequantized here equals kvflash::dequantize_row's floats (tests/gpu/quantize_test.cpp compares
// their bits).
//
// Every type but turbo: one thread per value. turbo: one warp per 128-value group, decoded into
// shared memory (norm * centroid), rotated back there, its first n values of the row written.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backends/cuda/common/turbo_rotate.cuh"
#include "backends/cuda/cuda_backend.hpp"
#include "formats/fp8_inline.hpp"
#include "formats/half_inline.hpp"
#include "kvflash/blocks.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/turbo.hpp"

namespace kvflash::cuda {
namespace {

__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// Value col of one row: every type whose values stand alone or in 32-value blocks.
template <KvType T>
__device__ __forceinline__ float value_at(const uint8_t* row, int64_t col) {
  if constexpr (T == KvType::f32) {
    return reinterpret_cast<const float*>(row)[col];
  } else if constexpr (T == KvType::f16) {
    return detail::fp16_to_fp32_inline(load_u16(row + 2 * col));
  } else if constexpr (T == KvType::bf16) {
    return detail::bf16_to_fp32_inline(load_u16(row + 2 * col));
  } else if constexpr (T == KvType::fp8_e4m3) {
    return detail::fp8_e4m3_to_fp32_inline(row[col]);
  } else if constexpr (T == KvType::fp8_e5m2) {
    return detail::fp8_e5m2_to_fp32_inline(row[col]);
  } else if constexpr (T == KvType::q8_0) {
    const uint8_t* b = row + (col / 32) * sizeof(BlockQ8_0);
    const float d = detail::fp16_to_fp32_inline(load_u16(b));
    return __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + col % 32])), d);
  } else {  // q4_0: byte j holds values j (low nibble) and j + 16 (high)
    const uint8_t* b = row + (col / 32) * sizeof(BlockQ4_0);
    const float d = detail::fp16_to_fp32_inline(load_u16(b));
    const int j = static_cast<int>(col % 32);
    const int code = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
    return __fmul_rn(static_cast<float>(code - 8), d);
  }
}

template <KvType T>
__global__ void dequantize_values(const uint8_t* src, int64_t row_bytes, int64_t n_rows,
                                  int64_t n, float* dst) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n_rows * n) return;
  const int64_t row = i / n, col = i - row * n;
  dst[i] = value_at<T>(src + row * row_bytes, col);
}

constexpr int kG = kTurboGroup;
constexpr int kGroupsPerBlock = 4;  // one warp each

// The code of value i of a turbo block (formats/turbo.cpp's packing).
template <KvType T>
__device__ __forceinline__ int turbo_code(const uint8_t* block, int i) {
  const uint8_t* qs = block + 2;
  if constexpr (T == KvType::turbo2) {
    return (qs[i % 32] >> (2 * (i / 32))) & 3;
  } else if constexpr (T == KvType::turbo3) {
    const uint8_t* qh = qs + 32;
    return ((qs[i % 32] >> (2 * (i / 32))) & 3) | (((qh[i % 16] >> (i / 16)) & 1) << 2);
  } else {
    return (qs[i % 64] >> (4 * (i / 64))) & 15;
  }
}

struct TurboDecodeTables {
  float centroids[16];
  uint32_t sign_words[4];
};

template <KvType T>
__global__ void dequantize_turbo(const uint8_t* src, int64_t row_bytes, int64_t n_rows, int64_t n,
                                 float* dst, const TurboDecodeTables tt) {
  __shared__ float y_s[kGroupsPerBlock][kG];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int64_t groups_per_row = (n + kG - 1) / kG;
  const int64_t grp = int64_t{blockIdx.x} * kGroupsPerBlock + w;
  if (grp >= n_rows * groups_per_row) return;  // the whole warp: one group
  const int64_t row = grp / groups_per_row, g = grp % groups_per_row;
  // (sizeof, not traits(T): traits reads a host table, which device code cannot.)
  constexpr int64_t kBlockBytes = T == KvType::turbo2   ? sizeof(BlockTurbo2)
                                  : T == KvType::turbo3 ? sizeof(BlockTurbo3)
                                                        : sizeof(BlockTurbo4);
  const uint8_t* block = src + row * row_bytes + g * kBlockBytes;
  const float norm = detail::fp16_to_fp32_inline(load_u16(block));
  float* y = y_s[w];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int i = lane + 32 * s;
    y[i] = __fmul_rn(norm, tt.centroids[turbo_code<T>(block, i)]);
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

template <KvType T>
void launch_values(const uint8_t* src, int64_t row_bytes, int64_t n_rows, int64_t n, float* dst,
                   cudaStream_t s) {
  dequantize_values<T><<<blocks_for(n_rows * n, 256), 256, 0, s>>>(src, row_bytes, n_rows, n, dst);
}

template <KvType T>
void launch_turbo(const uint8_t* src, int64_t row_bytes, int64_t n_rows, int64_t n, float* dst,
                  cudaStream_t s) {
  TurboDecodeTables tt{};
  for (int k = 0; k < (1 << turbo_bits(T)); ++k) tt.centroids[k] = turbo_centroids(T)[k];
  for (int i = 0; i < 4; ++i) tt.sign_words[i] = turbo_tables::kTurboSignWords[i];
  const int64_t groups = n_rows * ((n + kG - 1) / kG);
  dequantize_turbo<T><<<blocks_for(groups, kGroupsPerBlock), 32 * kGroupsPerBlock, 0, s>>>(
      src, row_bytes, n_rows, n, dst, tt);
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
      launch_values<KvType::f32>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::f16:
      launch_values<KvType::f16>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::bf16:
      launch_values<KvType::bf16>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::q8_0:
      launch_values<KvType::q8_0>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::q4_0:
      launch_values<KvType::q4_0>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::fp8_e4m3:
      launch_values<KvType::fp8_e4m3>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::fp8_e5m2:
      launch_values<KvType::fp8_e5m2>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::turbo2:
      launch_turbo<KvType::turbo2>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::turbo3:
      launch_turbo<KvType::turbo3>(in, rb, n_rows, n, dst, s);
      break;
    case KvType::turbo4:
      launch_turbo<KvType::turbo4>(in, rb, n_rows, n, dst, s);
      break;
  }
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return Error{ErrorCode::backend_error,
                 std::string("gpu::dequantize_rows: launching the kernel: ") + cudaGetErrorString(e)};
  return {};
}

}  // namespace kvflash::cuda
