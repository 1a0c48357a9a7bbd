// The CUDA kernels' per-type readers, tested on the CPU: the row readers (common/kv_values.hpp, the
// same code the kernels run) against dequantize_row_rotated, every fp8 code, the K dim order
// against a permutation, and the fragment decoders (common/kv_frags.hpp, the kernels' own code with
// host equivalents of their intrinsics) against the row readers, the int8 Q.K^T operands included.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/common/kv_frags.hpp"
#include "backends/cuda/common/kv_values.hpp"
#include "kvflash/turbo.hpp"

namespace kvflash::cuda::decode {
namespace {

constexpr size_t kLead = 2;
size_t lead(KvType t) {
  return traits(t).block_values == 1 ? 0 : kLead;
}

std::vector<uint8_t> random_row(KvType t, int32_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(rng);
  // Quantized rows get 2 bytes of lead so that they start 2-aligned but not 4-aligned, as they
  // may in the kernel; float rows are always 16-byte aligned there (and here).
  std::vector<uint8_t> buf(row_size(t, n) + kLead);
  quantize_row(t, x.data(), n, buf.data() + lead(t));
  return buf;
}

template <KvType T>
void check_type(int32_t n) {
  std::mt19937 rng(1234 + static_cast<int>(T) * 7 + n);
  const float* lut = is_rotated(T) ? turbo_centroids(T) : nullptr;
  const int32_t dkc = computed_dim_k(T, n), dvc = computed_dim_v(T, n);
  const int32_t padded = static_cast<int32_t>(padded_values(T, n));
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<uint8_t> buf = random_row(T, n, rng);
    // The kernels read past the row end only inside zeroed shared memory: pad likewise.
    buf.resize(buf.size() + 4 * static_cast<size_t>(dkc), 0);
    const uint8_t* row = buf.data() + lead(T);
    std::vector<float> want(static_cast<size_t>(padded));
    dequantize_row_rotated(T, row, n, want.data());
    std::set<int> seen;
    for (int b = 0; b < dkc / 32; ++b)
      for (int t = 0; t < 4; ++t) {
        float x[8];
        k_values<T>(row, b, t, lut, x);
        for (int j = 0; j < 8; ++j) {
          const int d = k_dim(T, b, t, j);
          ASSERT_GE(d, 0);
          ASSERT_LT(d, dkc);
          EXPECT_TRUE(seen.insert(d).second) << "dim " << d << " twice";
          const float w = d < padded ? want[static_cast<size_t>(d)] : 0.0f;
          ASSERT_EQ(x[j], w) << to_string(T) << " n=" << n << " b=" << b << " t=" << t
                             << " j=" << j;
        }
      }
    EXPECT_EQ(static_cast<int>(seen.size()), dkc);
    for (int d = 0; d < dvc; ++d)
      ASSERT_EQ(v_value<T>(row, d, lut), want[static_cast<size_t>(d)])
          << to_string(T) << " d=" << d;
  }
}

TEST(CudaDecodeFormats, RowReadersMatchTheReferenceDecoder) {
  for (int32_t n : {64, 80, 96, 112, 128, 192, 256, 512, 576}) {
    check_type<KvType::f32>(n);
    check_type<KvType::f16>(n);
    check_type<KvType::bf16>(n);
    check_type<KvType::q8_0>(n);
    check_type<KvType::q4_0>(n);
    check_type<KvType::turbo2>(n);
    check_type<KvType::turbo3>(n);
    check_type<KvType::turbo4>(n);
    check_type<KvType::fp8_e4m3>(n);
    check_type<KvType::fp8_e5m2>(n);
  }
}

// Every fp8 code: the kernels' reader (fp8_to_float) gives the library's value, and a pair of
// codes through fp8x2_h2 (the fragment decoders' conversion) the f16 of each, NaN for NaN.
TEST(CudaDecodeFormats, Fp8CodesConvertExactly) {
  for (uint32_t a = 0; a < 256; ++a) {
    const uint8_t c = static_cast<uint8_t>(a);
    const float e4 = fp8_to_float<KvType::fp8_e4m3>(a), e5 = fp8_to_float<KvType::fp8_e5m2>(a);
    if (std::isnan(fp8_e4m3_to_fp32(c))) {
      EXPECT_TRUE(std::isnan(e4)) << a;
    } else {
      EXPECT_EQ(e4, fp8_e4m3_to_fp32(c)) << a;
    }
    if (std::isnan(fp8_e5m2_to_fp32(c))) {
      EXPECT_TRUE(std::isnan(e5)) << a;
    } else {
      EXPECT_EQ(e5, fp8_e5m2_to_fp32(c)) << a;
    }
    for (uint32_t b = 0; b < 256; b += 17) {
      const uint32_t h4 = fp8x2_h2<KvType::fp8_e4m3>(a | (b << 8) | 0xAB0000u);
      const uint32_t h5 = fp8x2_h2<KvType::fp8_e5m2>(a | (b << 8) | 0xAB0000u);
      const auto expect_half = [&](uint32_t half, float want, const char* what) {
        const float got = half_to_float(static_cast<uint16_t>(half));
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got)) << what << " " << a << " " << b;
        } else {
          EXPECT_EQ(got, want) << what << " " << a << " " << b;
        }
      };
      expect_half(h4 & 0xffffu, e4, "e4m3 lo");
      expect_half(h4 >> 16, fp8_to_float<KvType::fp8_e4m3>(b), "e4m3 hi");
      expect_half(h5 & 0xffffu, e5, "e5m2 lo");
      expect_half(h5 >> 16, fp8_to_float<KvType::fp8_e5m2>(b), "e5m2 hi");
    }
  }
}

// The P.V dim order of 128-dim slices: every (lane, tile) one dim, every dim once, v_tile16 its
// inverse; and for the packed orders, a lane's 16 dims read the few bytes its decoder loads.
TEST(CudaDecodeFormats, VDim16IsAPermutationWithItsInverse) {
  using enum KvType;
  for (KvType t : {f16, bf16, q8_0, q4_0, turbo2, turbo3, turbo4}) {
    std::set<int> seen;
    for (int n = 0; n < 8; ++n) {
      std::set<int> bytes;
      for (int i = 0; i < 16; ++i) {
        const int d = v_dim16(t, n, i);
        ASSERT_GE(d, 0);
        ASSERT_LT(d, 128);
        EXPECT_TRUE(seen.insert(d).second) << to_string(t) << " dim " << d << " twice";
        int n2 = -1, i2 = -1;
        v_tile16(t, d, n2, i2);
        EXPECT_EQ(n2, n) << to_string(t) << " d=" << d;
        EXPECT_EQ(i2, i) << to_string(t) << " d=" << d;
        if (t == q4_0) bytes.insert(32 * (d >> 5) + (d & 15));  // block byte of the nibble
        if (t == turbo2 || t == turbo3) bytes.insert(d & 31);   // plane byte
        if (t == turbo4) bytes.insert(d & 63);
      }
      // q4_0: 8 bytes of one block; turbo2/3: 4 plane bytes; turbo4: 8 bytes, all consecutive
      // from the lane's first (v_frags_q4_0_16, v_frags_turbo16_packed load exactly those).
      if (t == q4_0 || t == turbo2 || t == turbo3 || t == turbo4) {
        const int want = (t == turbo2 || t == turbo3) ? 4 : 8;
        const int first = t == q4_0 ? 32 * (n >> 1) + 8 * (n & 1) : want * n;
        ASSERT_EQ(static_cast<int>(bytes.size()), want) << to_string(t) << " n=" << n;
        EXPECT_EQ(*bytes.begin(), first) << to_string(t) << " n=" << n;
        EXPECT_EQ(*bytes.rbegin(), first + want - 1) << to_string(t) << " n=" << n;
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), 128) << to_string(t);
  }
}

// The two halves of a half2 register as floats.
float half_lo(uint32_t v) {
  return half_to_float(static_cast<uint16_t>(v & 0xffffu));
}
float half_hi(uint32_t v) {
  return half_to_float(static_cast<uint16_t>(v >> 16));
}
// A fragment value against the row reader's f32 product: the kernel rounds it to f16 once (q8_0,
// q4_0: exact f16 factors); turbo fragments hold the f16-rounded centroid, compared here times the
// row's norm in f32 (the kernel applies the norm to the scores or to P), so up to twice the bound.
template <KvType T>
void expect_f16_of(float got, float want, const std::string& where) {
  const float rel = is_rotated(T) ? 1.1f * 0x1p-10f : 0x1p-11f;
  ASSERT_LE(std::abs(got - want), std::abs(want) * rel + 0x1p-24f) << where;
}

// A type's centroids for the row readers (f32) and the fragment decoders (f16 byte tables).
template <KvType T>
struct Codebooks {
  const float* flut = is_rotated(T) ? turbo_centroids(T) : nullptr;
  TurboLut<T> lut;
  Codebooks() { lut.init(); }
};

// K: the B operands of block b, thread t hold k_values' eight values in slot order.
template <KvType T>
void check_k_frags(int32_t n, std::mt19937& rng) {
  const Codebooks<T> cb;
  const int32_t dkc = computed_dim_k(T, n);
  std::vector<uint8_t> buf = random_row(T, n, rng);
  buf.resize(buf.size() + 4 * static_cast<size_t>(dkc), 0);
  const uint8_t* row = buf.data() + lead(T);
  for (int b = 0; b < dkc / 32; ++b)
    for (int t = 0; t < 4; ++t) {
      float x[8];
      k_values<T>(row, b, t, cb.flut, x);
      frag4 w;
      if constexpr (is_rotated(T))
        w = k_frag_turbo<T>(row, b, t, cb.lut);
      else if constexpr (is_fp8(T))
        w = k_frag_fp8<T>(row, b, t);
      else
        w = k_frag_quant<T>(row, b, t);
      const uint32_t regs[4] = {w.x, w.y, w.z, w.w};
      // The same values as pairs of consecutive dims (k_frag_dim_words, the prefill tile decode).
      int dims[4];
      uint32_t words[4];
      k_frag_dim_words<T>(w, b, t, dims, words);
      constexpr int kRun = k_frag_run_words<T>();
      for (int k = 0; k < 4; ++k) {
        if (k % kRun != 0) {
          EXPECT_EQ(dims[k], dims[k - 1] + 2) << to_string(T) << " b=" << b << " t=" << t;
        }
        for (int h = 0; h < 2; ++h) {
          int j = 0;
          while (j < 8 && k_dim(T, b, t, j) != dims[k] + h) ++j;
          ASSERT_LT(j, 8) << to_string(T) << " dim " << dims[k] + h << " is not the thread's";
          const uint32_t reg = regs[j >> 1];
          const uint16_t want = static_cast<uint16_t>((j & 1) ? reg >> 16 : reg & 0xffffu);
          EXPECT_EQ(static_cast<uint16_t>(h ? words[k] >> 16 : words[k] & 0xffffu), want)
              << to_string(T) << " b=" << b << " t=" << t << " word " << k;
        }
      }
      // turbo: codebook values; times the group's norm they are the row's values
      const float norm =
          is_rotated(T) ? half_to_float(static_cast<uint16_t>(turbo_norm<T>(row, b / 4))) : 1.0f;
      for (int j = 0; j < 8; ++j) {
        const float got = norm * ((j & 1) ? half_hi(regs[j >> 1]) : half_lo(regs[j >> 1]));
        expect_f16_of<T>(got, x[j],
                         fmt::format("{} n={} b={} t={} j={}", to_string(T), n, b, t, j));
      }
      if constexpr (T == KvType::q8_0 || T == KvType::q4_0) {
        // The raw codes: (code - bias) times the block's scale is the row reader's product,
        // exactly (the kernel's MMA sums the raw codes and applies bias and scale in f32).
        const frag4 r = k_frag_raw<T>(row, b, t);
        const uint32_t raw[4] = {r.x, r.y, r.z, r.w};
        const float scale = half_to_float(static_cast<uint16_t>(k_scale<T>(row, b)));
        for (int j = 0; j < 8; ++j) {
          const float code = (j & 1) ? half_hi(raw[j >> 1]) : half_lo(raw[j >> 1]);
          EXPECT_EQ(scale * (code - k_raw_bias<T>(j >> 2)), x[j])
              << fmt::format("raw {} n={} b={} t={} j={}", to_string(T), n, b, t, j);
        }
      }
    }
}

// V: four rows (keys k0..k3) of each 128-dim slice; lane n's tile i holds {V[k0][d], V[k1][d]},
// {V[k2][d], V[k3][d]} with d the slice's v_dim16 (q4_0, turbo) or 16n + i (q8_0, fp8).
template <KvType T>
void check_v_frags(int32_t n, std::mt19937& rng) {
  const Codebooks<T> cb;
  const int32_t dvc = computed_dim_v(T, n);
  std::vector<std::vector<uint8_t>> bufs;
  for (int k = 0; k < 4; ++k) bufs.push_back(random_row(T, n, rng));
  const uint8_t* const vrow[4] = {bufs[0].data() + lead(T), bufs[1].data() + lead(T),
                                  bufs[2].data() + lead(T), bufs[3].data() + lead(T)};
  for (int slice = 0; slice < dvc / 128; ++slice)
    for (int lane_n = 0; lane_n < 8; ++lane_n) {
      int calls = 0;
      auto use = [&](int i, uint32_t b0, uint32_t b1) {
        ++calls;
        const int d = 128 * slice +
                      (T == KvType::q8_0 || is_fp8(T) ? 16 * lane_n + i : v_dim16(T, lane_n, i));
        const float got[4] = {half_lo(b0), half_hi(b0), half_lo(b1), half_hi(b1)};
        for (int k = 0; k < 4; ++k)
          expect_f16_of<T>(
              got[k] * (is_rotated(T)
                            ? half_to_float(static_cast<uint16_t>(turbo_norm<T>(vrow[k], slice)))
                            : 1.0f),
              v_value<T>(vrow[k], d, cb.flut),
              fmt::format("{} n={} slice={} lane={} tile={} key={} dim={}", to_string(T), n, slice,
                          lane_n, i, k, d));
      };
      if constexpr (T == KvType::q8_0)
        v_frags_q8_0_16(vrow, 128 * slice + 16 * lane_n, use);
      else if constexpr (is_fp8(T))
        v_frags_fp8_16<T>(vrow, 128 * slice + 16 * lane_n, use);
      else if constexpr (T == KvType::q4_0)
        v_frags_q4_0_16(vrow, lane_n, slice, use);
      else
        v_frags_turbo16_packed<T>(vrow, lane_n, slice, cb.lut, use);
      EXPECT_EQ(calls, 16) << to_string(T);
    }
}

// lookup4 over every selector of four codes: each half is the f16 of its code's centroid.
template <KvType T>
void check_lookup4() {
  TurboLut<T> lut;
  lut.init();
  constexpr uint32_t kCodes = 1u << traits(T).code_bits;
  for (uint32_t s = 0; s < 0x10000u; ++s) {
    bool in_range = true;
    for (int k = 0; k < 4; ++k) in_range = in_range && ((s >> (4 * k)) & 15u) < kCodes;
    if (!in_range) continue;
    const frag2 r = lut.lookup4(s);
    const uint32_t halves[4] = {r.x & 0xffffu, r.x >> 16, r.y & 0xffffu, r.y >> 16};
    for (int k = 0; k < 4; ++k) {
      const int code = static_cast<int>((s >> (4 * k)) & 15u);
      ASSERT_EQ(halves[k], fp32_to_fp16(turbo_centroids(T)[code]))
          << to_string(T) << " selector " << s << " code " << k;
    }
  }
}

TEST(CudaDecodeFormats, TurboLookupGivesEveryCodesCentroid) {
  check_lookup4<KvType::turbo2>();
  check_lookup4<KvType::turbo3>();
  check_lookup4<KvType::turbo4>();
}

TEST(CudaDecodeFormats, FragmentDecodersMatchTheRowReaders) {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 8; ++trial)
    for (int32_t n : {128, 256, 512}) {
      check_k_frags<KvType::q8_0>(n, rng);
      check_k_frags<KvType::q4_0>(n, rng);
      check_k_frags<KvType::turbo2>(n, rng);
      check_k_frags<KvType::turbo3>(n, rng);
      check_k_frags<KvType::turbo4>(n, rng);
      check_v_frags<KvType::q8_0>(n, rng);
      check_v_frags<KvType::q4_0>(n, rng);
      check_v_frags<KvType::turbo2>(n, rng);
      check_v_frags<KvType::turbo3>(n, rng);
      check_v_frags<KvType::turbo4>(n, rng);
      check_k_frags<KvType::fp8_e4m3>(n, rng);
      check_k_frags<KvType::fp8_e5m2>(n, rng);
      check_v_frags<KvType::fp8_e4m3>(n, rng);
      check_v_frags<KvType::fp8_e5m2>(n, rng);
    }
}

// q8_0 K on int8 tensor cores: the kernel's operands (k_frag_s8 from 16 key rows, Q's two int8
// planes from q_s8_split) put through mma.m16n8k32.s8's fragment layout (PTX ISA: A rows g, g + 8
// and columns 4t + (0..3), 16 + 4t + (0..3) in a0..a3; B rows 4t + (0..3) and 16 + 4t + (0..3) of
// column g in b0, b1; C rows g, g + 8 and columns 2t, 2t + 1), emulated here with the planes
// recombined as the kernel does (128 hi + lo, times the block's scale and the row's step), give
// the float64 scores of the codes against Q within the 15-bit quantization of Q.
template <KvType T>
void check_int8_qk_operands() {
  std::mt19937 rng(99);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  constexpr int kDim = 128, kKeys = 16, kRows = 8;
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<std::vector<uint8_t>> keys;
    std::vector<std::vector<float>> kval;  // dequantized, for the float64 scores
    for (int k = 0; k < kKeys; ++k) {
      keys.push_back(random_row(T, kDim, rng));
      kval.emplace_back(kDim);
      dequantize_row(T, keys.back().data() + lead(T), kDim, kval.back().data());
    }
    std::vector<float> q(kRows * kDim);
    for (float& v : q) v = nd(rng) * (trial % 2 ? 30.0f : 0.01f);
    q[3] = trial % 3 == 0 ? 0.0f : q[3];
    // Q's step per row (one unit of the planes times one unit of K's operand), and each lane's B
    // operand words per block (as the prologue packs them).
    float step[kRows], qstep[kRows];
    for (int r = 0; r < kRows; ++r) {
      float amax = 0.0f;
      for (int d = 0; d < kDim; ++d) amax = std::max(amax, std::fabs(q[r * kDim + d]));
      qstep[r] = amax / kQS8Steps;
      step[r] = qstep[r] * kS8Unit<T>;
    }
    for (int b = 0; b < kDim / 32; ++b) {
      // Matrices by the fragment layout: A[16][32] from the lanes' k_frag_s8 words, B[32][8] per
      // plane from the lanes' Q words.
      int a[16][32], bh[32][8], bl[32][8];
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        const frag2 k0 = k_frag_s8<T>(keys[g].data() + lead(T), b, t);
        const frag2 k1 = k_frag_s8<T>(keys[g + 8].data() + lead(T), b, t);
        const uint32_t regs[4] = {k0.x, k1.x, k0.y, k1.y};  // a0..a3
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j)
            a[g + 8 * (i & 1)][4 * t + j + 16 * (i >> 1)] =
                static_cast<int8_t>((regs[i] >> (8 * j)) & 0xffu);
        int hi[8], lo[8];
        for (int j = 0; j < 8; ++j) {
          const float x = q[g * kDim + 32 * b + s8_dim<T>(t, j)];
          const QS8 v = q_s8_split(qstep[g] > 0.0f ? x / qstep[g] : 0.0f);
          ASSERT_LE(std::abs(v.hi), 127);
          ASSERT_LE(std::abs(v.lo), 64);
          hi[j] = v.hi;
          lo[j] = v.lo;
        }
        const uint32_t bw[4] = {
            s8_word(hi[0], hi[1], hi[2], hi[3]), s8_word(hi[4], hi[5], hi[6], hi[7]),
            s8_word(lo[0], lo[1], lo[2], lo[3]), s8_word(lo[4], lo[5], lo[6], lo[7])};
        for (int j = 0; j < 4; ++j)
          for (int h = 0; h < 2; ++h) {
            bh[4 * t + j + 16 * h][g] = static_cast<int8_t>((bw[h] >> (8 * j)) & 0xffu);
            bl[4 * t + j + 16 * h][g] = static_cast<int8_t>((bw[2 + h] >> (8 * j)) & 0xffu);
          }
      }
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        for (int e = 0; e < 4; ++e) {
          const int m = g + 8 * (e >> 1), col = 2 * t + (e & 1);
          int64_t sh = 0, sl = 0;
          for (int k = 0; k < 32; ++k) {
            sh += int64_t{a[m][k]} * bh[k][col];
            sl += int64_t{a[m][k]} * bl[k][col];
          }
          ASSERT_LT(std::llabs(128 * sh + sl), int64_t{1} << 27);  // the kernel's s32 sums
          const uint8_t* row = keys[m].data() + lead(T);
          const float scale = half_to_float(static_cast<uint16_t>(k_scale<T>(row, b)));
          const double got = double{scale} * double{step[col]} * static_cast<double>(128 * sh + sl);
          double want = 0.0, mag = 0.0;
          for (int d = 0; d < 32; ++d) {
            const double kv = kval[m][32 * b + d];
            want += kv * q[col * kDim + 32 * b + d];
            mag += std::fabs(kv) * qstep[col];
          }
          // Each Q value is off by at most half a step: the score by at most sum |k| step / 2.
          ASSERT_LE(std::fabs(got - want), 0.5 * mag + 1e-6 * std::fabs(want) + 1e-30)
              << "trial " << trial << " block " << b << " key " << m << " row " << col;
        }
      }
    }
  }
}

TEST(CudaDecodeFormats, Int8QKOperandsGiveTheScores) {
  check_int8_qk_operands<KvType::q8_0>();
  check_int8_qk_operands<KvType::q4_0>();
}

}  // namespace
}  // namespace kvflash::cuda::decode
