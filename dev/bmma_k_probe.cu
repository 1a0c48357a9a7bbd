// A prototype of turbo2 K scores on the binary tensor cores, to check the idea of
// bench/results/2026-12-03-h200-turbo-alu-bound/ (at 0f3b3b4) before it goes into the decode
// kernel: no codebook lookups, the stored rows as the A operand of BMMA m16n8k256 AND+POPC.
//
// A symmetric 4-level codebook {-B, -A, A, B} (code = b0 + 2 b1, ascending) is linear in the
// code's bits: c = -B + (B - A) b0 + (A + B) b1. So q.k = norm * (-B sum(q) + (B - A) sum(q b0)
// + (A + B) sum(q b1)). Q goes to P-bit fixed point per head (two's complement, scale per
// head); each sum is sum_p w_p popc(Q plane p AND the key's b0 / b1 bits), w_p = 2^p (the top
// plane -2^(P-1)). A turbo2 row's 32 plane bytes are 256 bits, bit 8j + 2y + s = bit s of the
// code of dim j + 32y: one k256 A tile per key, used as stored. B: per Q plane one n-tile of 8
// columns, column 2h + s = head h's plane bits at the positions of bit s (zero elsewhere). The
// planes run from the top down, the accumulator doubled between them (I = 2 I + popc), so the
// weights cost one integer add per accumulator and plane.
//
// Checks the scores of N random keys (random codes and norms) and 4 random query heads against
// float64 for P = 8..16 and prints the NMSE; the decode kernel's bar is 1e-5.
//   nvcc -O3 -arch=sm_90 -std=c++20 -I include dev/bmma_k_probe.cu -o p && ./p
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kvflash/turbo.hpp"

namespace {

constexpr int kHeads = 4, kDim = 128, kRowBytes = 34, kMaxPlanes = 16;

#define CK(x)                                                             \
  do {                                                                    \
    cudaError_t e_ = (x);                                                 \
    if (e_ != cudaSuccess) {                                              \
      printf("%s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      return 1;                                                           \
    }                                                                     \
  } while (0)

__device__ __forceinline__ void bmma(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                     const int (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc {%0,%1,%2,%3}, "
      "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c[0]), "r"(c[1]),
        "r"(c[2]), "r"(c[3]));
}

__device__ __forceinline__ uint32_t load_u32_unaligned(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// One warp per 16 keys. bfrag: [plane][lane][2] (the B fragments, built on the host here; the
// kernel's prologue would build them once per CTA). qsum[h]: sum of head h's fixed-point values.
__global__ void scores_bmma(const uint8_t* k, int n_keys, const uint32_t* bfrag, int planes,
                            const float* scale, const int* qsum, float ca, float cb, float* out) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int key0 = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * 16;
  if (key0 >= n_keys) return;
  const uint8_t* r0 = k + int64_t{key0 + g} * kRowBytes + 2;
  const uint8_t* r1 = k + int64_t{key0 + g + 8} * kRowBytes + 2;
  // A: rows g, g + 8; k 32t..32t+31 (plane bytes 4t..4t+3) and 128 + 32t.. (16 + 4t..).
  const uint32_t a[4] = {load_u32_unaligned(r0 + 4 * t), load_u32_unaligned(r1 + 4 * t),
                         load_u32_unaligned(r0 + 16 + 4 * t), load_u32_unaligned(r1 + 16 + 4 * t)};
  int acc[4] = {0, 0, 0, 0};
  for (int p = planes - 1; p >= 0; --p) {
    const uint32_t* bp = bfrag + (p * 32 + lane) * 2;
    int c[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) c[e] = p == planes - 1 ? 0 : 2 * acc[e];
    bmma(acc, a, bp[0], bp[1], c);
    if (p == planes - 1) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] = -acc[e];  // the sign plane weighs -2^(P-1)
    }
  }
  // acc: (key g, head t, s 0), (key g, head t, s 1), the same for key g + 8.
  const float sc = scale[t];
  const float qs = static_cast<float>(qsum[t]);
#pragma unroll
  for (int hk = 0; hk < 2; ++hk) {
    const uint8_t* row = k + int64_t{key0 + g + 8 * hk} * kRowBytes;
    const float norm = __half2float(*reinterpret_cast<const __half*>(row));
    const float i0 = static_cast<float>(acc[2 * hk]), i1 = static_cast<float>(acc[2 * hk + 1]);
    out[int64_t{key0 + g + 8 * hk} * kHeads + t] =
        norm * sc * ((cb - ca) * i0 + (ca + cb) * i1 - cb * qs);
  }
}

}  // namespace

int main() {
  const auto& cent = kvflash::kTurbo2Centroids;  // ascending, symmetric
  const float ca = cent[2], cb = cent[3];
  if (cent[0] != -cb || cent[1] != -ca) {
    printf("turbo2 codebook not symmetric\n");
    return 1;
  }
  const int n_keys = 1 << 16;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> code(0, 3);
  std::vector<uint8_t> k(size_t(n_keys) * kRowBytes, 0);
  std::vector<std::vector<int>> codes(n_keys, std::vector<int>(kDim));
  std::vector<float> norms(n_keys);
  for (int key = 0; key < n_keys; ++key) {
    uint8_t* row = k.data() + size_t(key) * kRowBytes;
    const __half nh = __float2half(0.5f + std::fabs(nd(rng)));
    norms[key] = __half2float(nh);
    *reinterpret_cast<__half*>(row) = nh;
    for (int d = 0; d < kDim; ++d) {
      const int c = code(rng);
      codes[key][d] = c;
      row[2 + (d % 32)] |= static_cast<uint8_t>(c << (2 * (d / 32)));
    }
  }
  std::vector<std::vector<float>> q(kHeads, std::vector<float>(kDim));
  for (auto& qh : q)
    for (float& x : qh) x = nd(rng) * 0.3f;
  // float64 reference on the same quantized data
  std::vector<double> ref(size_t(n_keys) * kHeads);
  for (int key = 0; key < n_keys; ++key)
    for (int h = 0; h < kHeads; ++h) {
      double s = 0;
      for (int d = 0; d < kDim; ++d) s += double(q[h][d]) * double(cent[codes[key][d]]);
      ref[size_t(key) * kHeads + h] = s * norms[key];
    }

  uint8_t* dk;
  uint32_t* dbf;
  float *dscale, *dout;
  int* dqsum;
  CK(cudaMalloc(&dk, k.size()));
  CK(cudaMalloc(&dbf, sizeof(uint32_t) * kMaxPlanes * 64));
  CK(cudaMalloc(&dscale, sizeof(float) * kHeads));
  CK(cudaMalloc(&dqsum, sizeof(int) * kHeads));
  CK(cudaMalloc(&dout, sizeof(float) * n_keys * kHeads));
  CK(cudaMemcpy(dk, k.data(), k.size(), cudaMemcpyHostToDevice));

  printf("| Q planes | NMSE against float64 | max rel error |\n|---:|---:|---:|\n");
  int rc = 0;
  for (int planes = 8; planes <= kMaxPlanes; ++planes) {
    // Q in fixed point: scale = max |q| / (2^(P-1) - 1) per head.
    std::vector<std::vector<int>> qi(kHeads, std::vector<int>(kDim));
    std::vector<float> scale(kHeads);
    std::vector<int> qsum(kHeads, 0);
    for (int h = 0; h < kHeads; ++h) {
      float mx = 0;
      for (float x : q[h]) mx = std::fmax(mx, std::fabs(x));
      scale[h] = mx / float((1 << (planes - 1)) - 1);
      for (int d = 0; d < kDim; ++d) {
        qi[h][d] = static_cast<int>(std::lrint(q[h][d] / scale[h]));
        qsum[h] += qi[h][d];
      }
    }
    // B fragments: lane (g, t) holds column g = 2h + s, k 32t + i (b0) and 128 + 32t + i (b1);
    // k = 8j + 2y + s' is bit s' of the code of dim j + 32y: set where s' = s and Q's bit p is.
    std::vector<uint32_t> bf(size_t(kMaxPlanes) * 64, 0);
    for (int p = 0; p < planes; ++p)
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3, h = g >> 1, s = g & 1;
        for (int r = 0; r < 2; ++r) {
          uint32_t w = 0;
          for (int i = 0; i < 32; ++i) {
            const int kk = 128 * r + 32 * t + i, j = kk / 8, y = (kk % 8) / 2, sb = kk % 2;
            const uint32_t bits = static_cast<uint32_t>(qi[h][j + 32 * y]) & ((1u << planes) - 1);
            if (sb == s && ((bits >> p) & 1u)) w |= 1u << i;
          }
          bf[(size_t(p) * 32 + lane) * 2 + r] = w;
        }
      }
    CK(cudaMemcpy(dbf, bf.data(), sizeof(uint32_t) * bf.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dscale, scale.data(), sizeof(float) * kHeads, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dqsum, qsum.data(), sizeof(int) * kHeads, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xff, sizeof(float) * n_keys * kHeads));  // poisoned: NaN
    scores_bmma<<<n_keys / 16 / 4, 128>>>(dk, n_keys, dbf, planes, dscale, dqsum, ca, cb, dout);
    CK(cudaGetLastError());
    std::vector<float> out(size_t(n_keys) * kHeads);
    CK(cudaMemcpy(out.data(), dout, sizeof(float) * out.size(), cudaMemcpyDeviceToHost));
    double num = 0, den = 0, maxrel = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const double e = double(out[i]) - ref[i];
      num += e * e;
      den += ref[i] * ref[i];
      if (!std::isfinite(out[i])) num = INFINITY;
      maxrel = std::fmax(maxrel, std::fabs(e) / (std::fabs(ref[i]) + 1e-3));
    }
    const double nmse = num / den;
    printf("| %d | %.3g | %.3g |\n", planes, nmse, maxrel);
    if (planes == 13 && !(nmse <= 1e-5)) rc = 1;
  }
  printf("\n13 planes within the 1e-5 bar: %s\n", rc == 0 ? "yes" : "NO");
  return rc;
}
