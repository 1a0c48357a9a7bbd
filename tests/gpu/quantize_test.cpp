// gpu::quantize_rows writes the host's bytes: every type and head dim of the supported space,
// rows of random values at several scales, zero rows, values past the fp16 range (saturated
// scales) and fp16 subnormal magnitudes, with a sentinel after the output. gpu::dequantize_rows
// gives the host's floats for the same rows and for random bytes (every code, scale and special
// value a row can hold).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kvflash/formats.hpp"

namespace kvflash::gputest {
namespace {

std::vector<float> rows_of(int64_t n_rows, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_rows * n));
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x.data() + r * n;
    // Row kinds by index: 0 zeros, 1 huge (fp16 overflow), 2 tiny (fp16 subnormal range),
    // 3 one outlier, else Gaussian at a scale that grows with the row.
    const int kind = r < 4 ? static_cast<int>(r) : 4;
    const float scale = kind == 1 ? 3e6f : kind == 2 ? 1e-6f : std::ldexp(1.0f, int(r % 9) - 4);
    for (int64_t i = 0; i < n; ++i) row[i] = kind == 0 ? 0.0f : g(rng) * scale;
    if (kind == 3) row[n / 3] = 40.0f;
  }
  return x;
}

TEST(GpuQuantize, EveryTypeAndHeadDimMatchesTheHostByteForByte) {
  KVFLASH_REQUIRE_GPU();
  const int64_t n_rows = 67;
  const int32_t dims[] = {64, 80, 96, 112, 128, 192, 256, 512, 576};
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  uint64_t seed = 1;
  for (KvType t : kAllKvTypes) {  // (fp8: huge rows saturate, tiny ones reach its subnormals)
    for (int32_t n : dims) {
      SCOPED_TRACE(std::string(to_string(t)) + " n=" + std::to_string(n));
      const std::vector<float> x = rows_of(n_rows, n, seed++);
      const size_t bytes = row_size(t, n) * n_rows;
      std::vector<uint8_t> want(bytes);
      quantize_rows(t, x.data(), n_rows, n, want.data());

      constexpr size_t kFence = 256;
      gpu::DeviceBuffer src, dst;
      KVFLASH_ASSIGN_OR_FAIL(src, gpu::DeviceBuffer::allocate(x.size() * sizeof(float)));
      KVFLASH_ASSIGN_OR_FAIL(dst, gpu::DeviceBuffer::allocate(bytes + kFence));
      KVFLASH_ASSERT_OK(gpu::copy(src.data(), x.data(), x.size() * sizeof(float), stream.handle()));
      KVFLASH_ASSERT_OK(gpu::fill(dst.data(), 0xA5, bytes + kFence, stream.handle()));
      KVFLASH_ASSERT_OK(gpu::quantize_rows(t, static_cast<const float*>(src.data()), n_rows, n,
                                           dst.data(), stream.handle()));
      std::vector<uint8_t> got(bytes + kFence);
      KVFLASH_ASSERT_OK(gpu::copy(got.data(), dst.data(), got.size(), stream.handle()));
      KVFLASH_ASSERT_OK(stream.synchronize());
      size_t first_diff = bytes, n_diff = 0;
      for (size_t i = 0; i < bytes; ++i)
        if (got[i] != want[i]) {
          if (n_diff++ == 0) first_diff = i;
        }
      EXPECT_EQ(n_diff, 0u) << "first difference at byte " << first_diff << " (row "
                            << first_diff / row_size(t, n) << "): got " << int(got[first_diff])
                            << ", host " << int(want[first_diff]);
      for (size_t i = bytes; i < got.size(); ++i)
        ASSERT_EQ(got[i], 0xA5) << "written past the rows at byte " << i;
    }
  }
}

// Same bits, or NaN on both sides: a NaN that a conversion or a float operation makes (an fp16
// NaN widened, a NaN scale times a code, a NaN in a rotation) has the hardware's payload, which
// x86 and the GPU choose differently.
bool same_float(float a, float b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub || (std::isnan(a) && std::isnan(b));
}

TEST(GpuDequantize, EveryTypeAndRowLengthGivesTheHostsFloats) {
  KVFLASH_REQUIRE_GPU();
  const int64_t n_rows = 37;
  // Row lengths on and off the 32- and 128-value blocks (a last block's padding is not written).
  const int32_t lengths[] = {1, 31, 33, 64, 100, 128, 129, 576};
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  std::mt19937_64 rng(11);
  for (KvType t : kAllKvTypes) {
    for (int32_t n : lengths) {
      for (const bool random_bytes : {false, true}) {
        SCOPED_TRACE(std::string(to_string(t)) + " n=" + std::to_string(n) +
                     (random_bytes ? " random bytes" : " quantized rows"));
        const size_t row_bytes = row_size(t, n), bytes = row_bytes * n_rows;
        std::vector<uint8_t> data(bytes);
        if (random_bytes) {
          for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
        } else {
          const std::vector<float> x = rows_of(n_rows, n, rng());
          quantize_rows(t, x.data(), n_rows, n, data.data());
        }
        std::vector<float> want(static_cast<size_t>(n_rows) * n);
        for (int64_t r = 0; r < n_rows; ++r)
          dequantize_row(t, data.data() + r * row_bytes, n, want.data() + r * n);

        constexpr size_t kFence = 64;  // floats after the rows, which must stay as filled
        gpu::DeviceBuffer src, dst;
        KVFLASH_ASSIGN_OR_FAIL(src, gpu::DeviceBuffer::allocate(bytes));
        KVFLASH_ASSIGN_OR_FAIL(dst,
                               gpu::DeviceBuffer::allocate((want.size() + kFence) * sizeof(float)));
        KVFLASH_ASSERT_OK(gpu::copy(src.data(), data.data(), bytes, stream.handle()));
        KVFLASH_ASSERT_OK(
            gpu::fill(dst.data(), 0xA5, (want.size() + kFence) * sizeof(float), stream.handle()));
        KVFLASH_ASSERT_OK(gpu::dequantize_rows(t, src.data(), n_rows, n,
                                               static_cast<float*>(dst.data()), stream.handle()));
        std::vector<float> got(want.size() + kFence);
        KVFLASH_ASSERT_OK(
            gpu::copy(got.data(), dst.data(), got.size() * sizeof(float), stream.handle()));
        KVFLASH_ASSERT_OK(stream.synchronize());
        size_t n_diff = 0, first = 0;
        for (size_t i = 0; i < want.size(); ++i)
          if (!same_float(got[i], want[i]) && n_diff++ == 0) first = i;
        EXPECT_EQ(n_diff, 0u) << "first difference at value " << first << " (row " << first / n
                              << "): got " << got[first] << ", host " << want[first];
        for (size_t i = want.size(); i < got.size(); ++i) {
          uint32_t u;
          std::memcpy(&u, &got[i], 4);
          ASSERT_EQ(u, 0xA5A5A5A5u) << "written past the rows at value " << i;
        }
      }
    }
  }
  const Status bad = gpu::dequantize_rows(KvType::q8_0, nullptr, -1, 128, nullptr, stream.handle());
  EXPECT_FALSE(bad);
}

TEST(GpuQuantize, RunsUnderGraphCaptureAndRejectsNegativeSizes) {
  KVFLASH_REQUIRE_GPU();
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  const std::vector<float> x = rows_of(8, 128, 7);
  gpu::DeviceBuffer src, dst;
  KVFLASH_ASSIGN_OR_FAIL(src, gpu::DeviceBuffer::allocate(x.size() * sizeof(float)));
  KVFLASH_ASSIGN_OR_FAIL(dst, gpu::DeviceBuffer::allocate(row_size(KvType::turbo3, 128) * 8));
  KVFLASH_ASSERT_OK(gpu::copy(src.data(), x.data(), x.size() * sizeof(float), stream.handle()));
  KVFLASH_ASSERT_OK(stream.synchronize());
  gpu::Graph graph;
  KVFLASH_ASSIGN_OR_FAIL(graph, gpu::Graph::capture(stream.handle(), [&] {
                           return gpu::quantize_rows(KvType::turbo3,
                                                     static_cast<const float*>(src.data()), 8, 128,
                                                     dst.data(), stream.handle());
                         }));
  KVFLASH_ASSERT_OK(graph.launch(stream.handle()));
  KVFLASH_ASSERT_OK(stream.synchronize());
  std::vector<uint8_t> got(row_size(KvType::turbo3, 128) * 8), want(got.size());
  KVFLASH_ASSERT_OK(gpu::copy(got.data(), dst.data(), got.size(), nullptr));
  quantize_rows(KvType::turbo3, x.data(), 8, 128, want.data());
  EXPECT_EQ(got, want);
  const Status bad = gpu::quantize_rows(KvType::q8_0, nullptr, -1, 128, nullptr, stream.handle());
  EXPECT_FALSE(bad);
}

}  // namespace
}  // namespace kvflash::gputest
