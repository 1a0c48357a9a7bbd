// gpu::quantize_rows: the host's quantize_rows on the device, byte for byte. Every float operation
// is the host's, in the host's order, with the rounding written out (__fmul_rn / __fadd_rn: no
// contraction into FMAs, which the host build does not use either), and the fp16 / bf16
// conversions are the host's bit recipes, so a row quantized here equals the same row quantized
// by kvflash::quantize_rows (tests/gpu/quantize_test.cpp compares every byte).
//
// f32 / f16 / bf16: one thread per value. q8_0 / q4_0: one thread per 32-value block, the host's
// loop. turbo: one warp per 128-value group: the sum of squares in double in the host's order (one
// lane), the Walsh-Hadamard butterflies across lanes (each output is the host's a + b or a - b of
// the same two inputs, so the order of stages is all that matters), codes per value, |c|^2 in the
// host's eight lanes, the bit planes written lane by lane.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "backends/cuda/cuda_backend.hpp"
#include "kvflash/blocks.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/turbo.hpp"

namespace kvflash::cuda {
namespace {

// ---- the host's conversions (formats/half_inline.hpp), bit for bit -------------------------

__device__ __forceinline__ uint16_t to_fp16_bits(float f) {
  const uint32_t w = __float_as_uint(f);
  const uint32_t sign = (w >> 16) & 0x8000u;
  const uint32_t a = w & 0x7FFFFFFFu;
  const uint32_t ac = a < 0x47800000u ? a : 0x47800000u;
  const uint32_t normal = (ac - 0x38000000u + 0x0FFFu + ((ac >> 13) & 1u)) >> 13;
  const uint32_t sub = __float_as_uint(__fadd_rn(__uint_as_float(ac), 0.5f)) - 0x3F000000u;
  const uint32_t nan = 0x7E00u | ((a >> 13) & 0x03FFu);
  const uint32_t is_sub = static_cast<uint32_t>(static_cast<int32_t>(ac - 0x38800000u) >> 31);
  const uint32_t is_nan = static_cast<uint32_t>(static_cast<int32_t>(0x7F800000u - a) >> 31);
  uint32_t h = (sub & is_sub) | (normal & ~is_sub);
  h = (nan & is_nan) | (h & ~is_nan);
  return static_cast<uint16_t>(sign | h);
}

__device__ __forceinline__ uint16_t to_bf16_bits(float f) {
  const uint32_t w = __float_as_uint(f);
  if ((w & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((w >> 16) | 0x0040u);
  return static_cast<uint16_t>((w + 0x7FFFu + ((w >> 16) & 1u)) >> 16);
}

constexpr float kFp16Max = 65504.0f;
constexpr uint16_t kFp16MaxBits = 0x7BFFu;

// ---- f32 / f16 / bf16 / fp8 -----------------------------------------------------------------

template <KvType T, typename Dst>
__global__ void quantize_plain(const float* src, int64_t n_rows, int64_t n, Dst dst) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n_rows * n) return;
  const int64_t row = i / n, col = i - row * n;
  uint8_t* out = dst.row(row);
  if (out == nullptr) return;
  const float x = src[i];
  if constexpr (T == KvType::f32) {
    reinterpret_cast<float*>(out)[col] = x;
  } else if constexpr (T == KvType::f16) {
    reinterpret_cast<uint16_t*>(out)[col] = to_fp16_bits(x);
  } else if constexpr (is_fp8(T)) {
    // formats.hpp's rule: round to nearest even, saturating (CUDA's satfinite conversion), NaN
    // with its sign as the one code the row codecs write for it.
    constexpr bool kE4m3 = T == KvType::fp8_e4m3;
    const uint8_t sign = signbit(x) ? 0x80 : 0x00;
    out[col] = isnan(x) ? static_cast<uint8_t>(sign | (kE4m3 ? 0x7F : 0x7E))
                        : static_cast<uint8_t>(__nv_cvt_float_to_fp8(
                              x, __NV_SATFINITE, kE4m3 ? __NV_E4M3 : __NV_E5M2));
  } else {
    reinterpret_cast<uint16_t*>(out)[col] = to_bf16_bits(x);
  }
}

// ---- q8_0 / q4_0: formats/q8_0.cpp and q4_0.cpp --------------------------------------------

__device__ void block_q8_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = fabsf(x[j]);
    amax = amax > a ? amax : a;
  }
  float d = __fdiv_rn(amax, 127.0f);
  uint16_t dh = to_fp16_bits(d);
  if ((dh & 0x7FFFu) == 0x7C00u) {
    d = kFp16Max;
    dh = kFp16MaxBits;
  }
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  out[0] = static_cast<uint8_t>(dh & 0xFF);
  out[1] = static_cast<uint8_t>(dh >> 8);
  for (int j = 0; j < 32; ++j) {
    float v = __fmul_rn(x[j], id);
    v = v > -127.0f ? v : -127.0f;
    v = v < 127.0f ? v : 127.0f;
    out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(roundf(v)));
  }
}

__device__ __forceinline__ uint8_t q4_code(float v) {
  v = v > 0.0f ? v : 0.0f;
  v = v < 15.0f ? v : 15.0f;
  return static_cast<uint8_t>(static_cast<int>(v));
}

__device__ void block_q4_0(const float* x, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float v = x[j];
    if (amax < fabsf(v)) {
      amax = fabsf(v);
      max = v;
    }
  }
  float d = __fdiv_rn(max, -8.0f);
  uint16_t dh = to_fp16_bits(d);
  if ((dh & 0x7FFFu) == 0x7C00u) {
    d = copysignf(kFp16Max, d);
    dh = static_cast<uint16_t>((dh & 0x8000u) | kFp16MaxBits);
  }
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  out[0] = static_cast<uint8_t>(dh & 0xFF);
  out[1] = static_cast<uint8_t>(dh >> 8);
  for (int j = 0; j < 16; ++j) {
    const uint8_t a = q4_code(__fadd_rn(__fmul_rn(x[j], id), 8.5f));
    const uint8_t b = q4_code(__fadd_rn(__fmul_rn(x[16 + j], id), 8.5f));
    out[2 + j] = static_cast<uint8_t>(a | (b << 4));
  }
}

// One thread per block; a row's last block zero-padded when n is not a multiple of 32.
template <KvType T, typename Dst>
__global__ void quantize_blocks(const float* src, int64_t n_rows, int64_t n, Dst dst) {
  const int64_t per_row = (n + 31) / 32;
  const int64_t b = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (b >= n_rows * per_row) return;
  const int64_t row = b / per_row, blk = b % per_row;
  constexpr int kBytes = T == KvType::q8_0 ? 34 : 18;
  const float* x = src + row * n + blk * 32;
  const int64_t valid = min(int64_t{32}, n - blk * 32);
  float buf[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) buf[j] = j < valid ? x[j] : 0.0f;
  uint8_t* const row_out = dst.row(row);
  if (row_out == nullptr) return;
  uint8_t* out = row_out + blk * kBytes;
  if constexpr (T == KvType::q8_0) {
    block_q8_0(buf, out);
  } else {
    block_q4_0(buf, out);
  }
}

// ---- turbo: formats/turbo.cpp ----------------------------------------------------------------

struct TurboTables {
  float centroids[16];
  float boundaries[15];
  uint32_t sign_words[4];
  int levels;
};

constexpr int kG = kTurboGroup;

// One warp per 128-value group; lane L holds values L, L + 32, L + 64, L + 96 (slot s: L + 32s).
template <KvType T, typename Dst>
__global__ void quantize_turbo(const float* src, int64_t n_rows, int64_t n, Dst dst,
                               const TurboTables tt) {
  constexpr int kBytes = T == KvType::turbo2 ? 34 : T == KvType::turbo3 ? 50 : 66;
  __shared__ float cv_s[4][kG];
  __shared__ uint8_t codes_s[4][kG];
  __shared__ double ss_s[4];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;  // 4 warps per block
  const int64_t groups_per_row = (n + kG - 1) / kG;
  const int64_t grp = int64_t{blockIdx.x} * 4 + w;
  if (grp >= n_rows * groups_per_row) return;
  const int64_t row = grp / groups_per_row, g = grp % groups_per_row;
  uint8_t* const row_out = dst.row(row);
  if (row_out == nullptr) return;  // the whole warp: one group, one row
  const float* x = src + row * n + g * kG;
  const int64_t valid = min(int64_t{kG}, n - g * kG);  // the last group is zero-padded
  float v[4];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int i = lane + 32 * s;
    v[s] = i < valid ? x[i] : 0.0f;
    cv_s[w][i] = v[s];
  }
  __syncwarp();
  uint8_t* out = row_out + g * kBytes;
  // Sum of squares in double, i = 0 .. 127 in order (one lane: the host's rounding sequence).
  if (lane == 0) {
    double ss = 0.0;
    for (int i = 0; i < kG; ++i) {
      const double xi = static_cast<double>(cv_s[w][i]);
      ss = __dadd_rn(ss, __dmul_rn(xi, xi));
    }
    ss_s[w] = ss;
  }
  __syncwarp();
  const double ss = ss_s[w];
  if (!(ss > 0.0)) {  // zero (or NaN) group: norm 0, codes 0
    for (int i = lane; i < kBytes; i += 32) out[i] = 0;
    return;
  }
  const double r = sqrt(ss);
  const double inv_r = __ddiv_rn(1.0, r);
  // y = x / |x| in float, times the signs, then the butterflies, then 1/sqrt(128).
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int i = lane + 32 * s;
    float y = __double2float_rn(__dmul_rn(static_cast<double>(v[s]), inv_r));
    const bool neg = (tt.sign_words[i >> 5] >> (i & 31)) & 1u;
    v[s] = neg ? -y : y;  // y * -1.0f is exact
  }
  // Stages h = 1 .. 16 pair lanes L and L ^ h (the lower index is the lane with bit h clear).
#pragma unroll
  for (int h = 1; h < 32; h *= 2) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const float o = __shfl_xor_sync(0xffffffffu, v[s], h);
      v[s] = (lane & h) ? __fsub_rn(o, v[s]) : __fadd_rn(v[s], o);
    }
  }
  // h = 32, 64: slots s and s + h / 32 of the same lane.
  {
    float a = v[0], b = v[1];
    v[0] = __fadd_rn(a, b);
    v[1] = __fsub_rn(a, b);
    a = v[2], b = v[3];
    v[2] = __fadd_rn(a, b);
    v[3] = __fsub_rn(a, b);
    a = v[0], b = v[2];
    v[0] = __fadd_rn(a, b);
    v[2] = __fsub_rn(a, b);
    a = v[1], b = v[3];
    v[1] = __fadd_rn(a, b);
    v[3] = __fsub_rn(a, b);
  }
  // Codes: #{k : y > b_k}, and the centroid.
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int i = lane + 32 * s;
    const float y = __fmul_rn(v[s], kTurboInvSqrt128);
    int code = 0;
    float c = tt.centroids[0];
    for (int k = 0; k < tt.levels - 1; ++k) {
      const bool above = y > tt.boundaries[k];
      code += above ? 1 : 0;
      c = above ? tt.centroids[k + 1] : c;
    }
    codes_s[w][i] = static_cast<uint8_t>(code);
    cv_s[w][i] = c;
  }
  __syncwarp();
  // |c|^2 in eight lanes of 16 terms each (lane l: values l, l + 8, ..., l + 120), then their tree.
  float acc = 0.0f;
  if (lane < 8)
    for (int i = lane; i < kG; i += 8) acc = __fadd_rn(acc, __fmul_rn(cv_s[w][i], cv_s[w][i]));
  float a[8];
#pragma unroll
  for (int l = 0; l < 8; ++l) a[l] = __shfl_sync(0xffffffffu, acc, l);
  const float c2 = __fadd_rn(__fadd_rn(__fadd_rn(a[0], a[1]), __fadd_rn(a[2], a[3])),
                             __fadd_rn(__fadd_rn(a[4], a[5]), __fadd_rn(a[6], a[7])));
  const double scale = __ddiv_rn(r, sqrt(static_cast<double>(c2)));
  const float s = scale < static_cast<double>(kFp16Max) ? __double2float_rn(scale) : kFp16Max;
  const uint16_t norm = to_fp16_bits(s);
  if (lane == 0) {
    out[0] = static_cast<uint8_t>(norm & 0xFF);
    out[1] = static_cast<uint8_t>(norm >> 8);
  }
  const uint8_t* c = codes_s[w];
  if constexpr (T == KvType::turbo2 || T == KvType::turbo3) {
    // 2-bit plane: byte j = codes j, j + 32, j + 64, j + 96 (low 2 bits each).
    out[2 + lane] = static_cast<uint8_t>((c[lane] & 3) | ((c[lane + 32] & 3) << 2) |
                                         ((c[lane + 64] & 3) << 4) | ((c[lane + 96] & 3) << 6));
    if constexpr (T == KvType::turbo3) {
      // 1-bit plane: byte j < 16, bit k = bit 2 of code j + 16k.
      if (lane < 16) {
        uint32_t h = 0;
        for (int k = 0; k < 8; ++k) h |= static_cast<uint32_t>(c[lane + 16 * k] >> 2) << k;
        out[34 + lane] = static_cast<uint8_t>(h);
      }
    }
  } else {
    // 4-bit plane: byte j < 64 = code j | code j + 64 << 4.
    out[2 + lane] = static_cast<uint8_t>(c[lane] | (c[lane + 64] << 4));
    out[2 + 32 + lane] = static_cast<uint8_t>(c[lane + 32] | (c[lane + 96] << 4));
  }
}

TurboTables turbo_tables_of(KvType t) {
  TurboTables tt{};
  tt.levels = 1 << turbo_bits(t);
  for (int k = 0; k < tt.levels; ++k) tt.centroids[k] = turbo_centroids(t)[k];
  for (int k = 0; k + 1 < tt.levels; ++k) tt.boundaries[k] = turbo_boundaries(t)[k];
  for (int i = 0; i < 4; ++i) tt.sign_words[i] = turbo_tables::kTurboSignWords[i];
  return tt;
}

unsigned int blocks_for(int64_t items, int per_block) {
  return static_cast<unsigned int>((items + per_block - 1) / per_block);
}

// Rows one after another at `dst` (gpu::quantize_rows).
struct LinearRows {
  uint8_t* dst;
  int64_t row_bytes;
  __device__ uint8_t* row(int64_t r) const { return dst + r * row_bytes; }
};

// Row r = (seq, i, head) of an append (n_new tokens per sequence) lands at token
// lens[seq] - n_new + i of a cache tensor, contiguous or paged. Nothing is written for a
// sequence marked full (flags[1 + seq], by advance_lengths) or for a token outside 0 ..
// capacity - 1 (then flags[0] is raised).
struct CacheRows {
  uint8_t* data;
  KvTensor kv;
  int32_t page_size;
  int32_t n_new, n_heads;
  int64_t capacity;
  const int64_t* lens;
  int32_t* flags;
  __device__ uint8_t* row(int64_t r) const {
    const int64_t head = r % n_heads, i = (r / n_heads) % n_new;
    const int64_t seq = r / (int64_t{n_heads} * n_new);
    if (flags[1 + seq] != 0) return nullptr;
    const int64_t token = lens[seq] - n_new + i;
    if (token < 0 || token >= capacity) {
      flags[0] = 1;
      return nullptr;
    }
    if (page_size > 0) {  // an entry outside the pool (the attention kernels guard it too)
      const int64_t page = kv.page_table[seq * kv.pages_per_seq + token / page_size];
      if (page < 0 || page >= kv.n_pages) {
        flags[0] = 1;
        return nullptr;
      }
    }
    return data + kv_row_offset(kv, page_size, seq, token, head);
  }
};

template <typename Dst>
Status launch_quantize(KvType t, const float* src, int64_t n_rows, int64_t n, Dst out,
                       cudaStream_t s, const char* what) {
  switch (t) {
    case KvType::f32:
      quantize_plain<KvType::f32><<<blocks_for(n_rows * n, 256), 256, 0, s>>>(src, n_rows, n, out);
      break;
    case KvType::f16:
      quantize_plain<KvType::f16><<<blocks_for(n_rows * n, 256), 256, 0, s>>>(src, n_rows, n, out);
      break;
    case KvType::bf16:
      quantize_plain<KvType::bf16><<<blocks_for(n_rows * n, 256), 256, 0, s>>>(src, n_rows, n, out);
      break;
    case KvType::q8_0:
      quantize_blocks<KvType::q8_0>
          <<<blocks_for(n_rows * ((n + 31) / 32), 128), 128, 0, s>>>(src, n_rows, n, out);
      break;
    case KvType::q4_0:
      quantize_blocks<KvType::q4_0>
          <<<blocks_for(n_rows * ((n + 31) / 32), 128), 128, 0, s>>>(src, n_rows, n, out);
      break;
    case KvType::turbo2:
    case KvType::turbo3:
    case KvType::turbo4: {
      const int64_t groups = n_rows * ((n + kG - 1) / kG);
      const TurboTables tt = turbo_tables_of(t);
      if (t == KvType::turbo2)
        quantize_turbo<KvType::turbo2>
            <<<blocks_for(groups, 4), 128, 0, s>>>(src, n_rows, n, out, tt);
      else if (t == KvType::turbo3)
        quantize_turbo<KvType::turbo3>
            <<<blocks_for(groups, 4), 128, 0, s>>>(src, n_rows, n, out, tt);
      else
        quantize_turbo<KvType::turbo4>
            <<<blocks_for(groups, 4), 128, 0, s>>>(src, n_rows, n, out, tt);
      break;
    }
    case KvType::fp8_e4m3:
      quantize_plain<KvType::fp8_e4m3>
          <<<blocks_for(n_rows * n, 256), 256, 0, s>>>(src, n_rows, n, out);
      break;
    case KvType::fp8_e5m2:
      quantize_plain<KvType::fp8_e5m2>
          <<<blocks_for(n_rows * n, 256), 256, 0, s>>>(src, n_rows, n, out);
      break;
  }
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return Error{ErrorCode::backend_error,
                 std::string(what) + ": launching the kernel: " + cudaGetErrorString(e)};
  return {};
}

// lens[s] += n_new for every sequence where that fits the capacity; where it does not, the
// length stays, the sequence is marked full (flags[1 + s], sticky) and flags[0] is raised.
__global__ void advance_lengths_kernel(int64_t* lens, int32_t n_seqs, int32_t n_new,
                                       int64_t capacity, int32_t* flags) {
  const int s = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (s >= n_seqs) return;
  if (flags[1 + s] != 0) return;
  const int64_t next = lens[s] + n_new;
  if (next > capacity) {
    flags[1 + s] = 1;
    flags[0] = 1;
    return;
  }
  lens[s] = next;
}

}  // namespace

Status quantize_rows(KvType t, const float* src, int64_t n_rows, int64_t n, void* dst,
                     void* stream) {
  if (n_rows < 0 || n < 0)
    return invalid_argument("gpu::quantize_rows: n_rows and n_values must not be negative");
  if (n_rows == 0 || n == 0) return {};
  const LinearRows out{static_cast<uint8_t*>(dst), static_cast<int64_t>(row_size(t, n))};
  return launch_quantize(t, src, n_rows, n, out, static_cast<cudaStream_t>(stream),
                         "gpu::quantize_rows");
}

Status append_rows(KvType t, const float* src, int32_t n_seqs, int32_t n_new, int32_t n_heads,
                   int32_t n_values, const KvTensor& kv, int32_t page_size, int64_t capacity,
                   const int64_t* lens, int32_t* flags, void* stream) {
  if (n_seqs < 0 || n_new < 0 || n_heads < 0 || n_values < 0)
    return invalid_argument("append_rows: counts must not be negative");
  const int64_t n_rows = int64_t{n_seqs} * n_new * n_heads;
  if (n_rows == 0 || n_values == 0) return {};
  const CacheRows out{static_cast<uint8_t*>(const_cast<void*>(kv.data)),
                      kv,
                      page_size,
                      n_new,
                      n_heads,
                      capacity,
                      lens,
                      flags};
  return launch_quantize(t, src, n_rows, n_values, out, static_cast<cudaStream_t>(stream),
                         "gpu::KvCache::append");
}

Status advance_lengths(int64_t* lens, int32_t n_seqs, int32_t n_new, int64_t capacity,
                       int32_t* flags, void* stream) {
  if (n_seqs <= 0) return {};
  advance_lengths_kernel<<<blocks_for(n_seqs, 128), 128, 0, static_cast<cudaStream_t>(stream)>>>(
      lens, n_seqs, n_new, capacity, flags);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return Error{
        ErrorCode::backend_error,
        std::string("gpu::KvCache::begin_step: launching the kernel: ") + cudaGetErrorString(e)};
  return {};
}

}  // namespace kvflash::cuda
