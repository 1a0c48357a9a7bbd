// The C API's formats, status and error functions against the C++ API they wrap.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "capi/capi_test_util.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/kvflash.h"
#include "kvflash/status.hpp"

namespace {

using kvflash::KvType;

using kvflash::capi_test::c_type;
using kvflash::capi_test::last_error;

TEST(CapiTypes, NamesRoundTrip) {
  const char* names[] = {"f32",    "f16",    "bf16",   "q8_0",     "q4_0",
                         "turbo2", "turbo3", "turbo4", "fp8_e4m3", "fp8_e5m2"};
  const kvflash_type types[] = {KVFLASH_TYPE_F32,     KVFLASH_TYPE_F16,    KVFLASH_TYPE_BF16,
                                KVFLASH_TYPE_Q8_0,    KVFLASH_TYPE_Q4_0,   KVFLASH_TYPE_TURBO2,
                                KVFLASH_TYPE_TURBO3,  KVFLASH_TYPE_TURBO4, KVFLASH_TYPE_FP8_E4M3,
                                KVFLASH_TYPE_FP8_E5M2};
  ASSERT_EQ(std::size(names), static_cast<size_t>(KVFLASH_TYPE_COUNT));
  for (size_t i = 0; i < std::size(names); ++i) {
    SCOPED_TRACE(names[i]);
    EXPECT_EQ(kvflash_type_from_name(names[i]), types[i]);
    EXPECT_STREQ(kvflash_type_name(types[i]), names[i]);
    EXPECT_EQ(kvflash_type_from_name(kvflash_type_name(types[i])), types[i]);
    EXPECT_EQ(static_cast<int>(types[i]), static_cast<int>(kvflash::kAllKvTypes[i]));
    EXPECT_EQ(std::string(kvflash_type_name(types[i])),
              kvflash::to_string(kvflash::kAllKvTypes[i]));
  }
}

TEST(CapiTypes, UnknownNames) {
  EXPECT_EQ(kvflash_type_from_name(nullptr), KVFLASH_TYPE_INVALID);
  EXPECT_NE(last_error().find("NULL"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_type_from_name(""), KVFLASH_TYPE_INVALID);
  EXPECT_EQ(kvflash_type_from_name("q5_k"), KVFLASH_TYPE_INVALID);
  EXPECT_NE(last_error().find("q5_k"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_type_from_name("turbo5"), KVFLASH_TYPE_INVALID);
  EXPECT_STREQ(kvflash_type_name(KVFLASH_TYPE_INVALID), "invalid");
  EXPECT_STREQ(kvflash_type_name(static_cast<kvflash_type>(KVFLASH_TYPE_COUNT)), "invalid");
  EXPECT_STREQ(kvflash_type_name(static_cast<kvflash_type>(256)), "invalid");
}

TEST(CapiTypes, RowSizes) {
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_F16, 128), 256u);
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_Q8_0, 128), 136u);
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_Q4_0, 128), 72u);
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_TURBO3, 128), 50u);
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_TURBO4, 576), 330u);  // 5 groups of 66
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_F32, 1), 4u);
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_Q8_0, 33), 68u);  // padded to 2 blocks
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_TURBO2, 100), 34u);

  for (KvType t : kvflash::kAllKvTypes) {
    for (int64_t n : {1, 31, 32, 33, 64, 100, 128, 129, 256, 512, 576}) {
      EXPECT_EQ(kvflash_row_size(c_type(t), n), kvflash::row_size(t, n))
          << kvflash::to_string(t) << " n=" << n;
    }
  }
}

TEST(CapiTypes, RowSizeInvalid) {
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_INVALID, 128), 0u);
  EXPECT_NE(last_error().find("type"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_row_size(static_cast<kvflash_type>(42), 128), 0u);
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_F16, 0), 0u);
  EXPECT_NE(last_error().find("n_values"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_F16, -5), 0u);
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_TURBO4, INT64_MAX), 0u);  // would overflow
}

// quantize/dequantize through the C API give exactly the bytes and floats of the C++ functions.
TEST(CapiTypes, QuantizeDequantizeMatchCpp) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  for (KvType t : kvflash::kAllKvTypes) {
    for (int64_t n : {1, 32, 100, 128, 192, 576}) {
      SCOPED_TRACE(std::string(kvflash::to_string(t)) + " n=" + std::to_string(n));
      std::vector<float> src(static_cast<size_t>(n));
      for (float& x : src) x = normal(rng);
      src[0] = 7.25f;  // an outlier

      const size_t bytes = kvflash::row_size(t, n);
      // Two guard bytes on each side (rows start at even addresses) catch writes outside the row.
      std::vector<unsigned char> c_row(bytes + 4, 0xAB), cpp_row(bytes + 4, 0xAB);
      ASSERT_EQ(kvflash_quantize(c_type(t), src.data(), n, c_row.data() + 2), KVFLASH_OK)
          << kvflash_last_error();
      kvflash::quantize_row(t, src.data(), n, cpp_row.data() + 2);
      EXPECT_EQ(c_row, cpp_row);
      EXPECT_EQ(c_row[0], 0xAB);
      EXPECT_EQ(c_row[1], 0xAB);
      EXPECT_EQ(c_row[bytes + 2], 0xAB);
      EXPECT_EQ(c_row[bytes + 3], 0xAB);

      std::vector<float> c_out(static_cast<size_t>(n) + 1, -99.0f);
      std::vector<float> cpp_out(static_cast<size_t>(n) + 1, -99.0f);
      ASSERT_EQ(kvflash_dequantize(c_type(t), c_row.data() + 2, n, c_out.data()), KVFLASH_OK)
          << kvflash_last_error();
      kvflash::dequantize_row(t, cpp_row.data() + 2, n, cpp_out.data());
      EXPECT_EQ(std::memcmp(c_out.data(), cpp_out.data(), c_out.size() * sizeof(float)), 0);
      EXPECT_EQ(c_out.back(), -99.0f);  // exactly n values written
    }
  }
}

TEST(CapiTypes, QuantizeInvalidArguments) {
  float src[128] = {};
  unsigned char dst[512];
  float out[128];
  EXPECT_EQ(kvflash_quantize(KVFLASH_TYPE_INVALID, src, 128, dst), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("type"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_quantize(static_cast<kvflash_type>(KVFLASH_TYPE_COUNT), src, 128, dst),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("type=10"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_quantize(KVFLASH_TYPE_Q8_0, src, 0, dst), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("n_values"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_quantize(KVFLASH_TYPE_Q8_0, nullptr, 128, dst), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("src"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_quantize(KVFLASH_TYPE_Q8_0, src, 128, nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("dst"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_dequantize(KVFLASH_TYPE_TURBO3, dst, -1, out), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("n_values"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_dequantize(KVFLASH_TYPE_TURBO3, nullptr, 128, out),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_dequantize(KVFLASH_TYPE_TURBO3, dst, 128, nullptr),
            KVFLASH_ERROR_INVALID_ARGUMENT);

  // Misaligned rows are refused rather than read or written: quantized rows at even addresses,
  // floats at multiples of 4.
  alignas(4) unsigned char raw[1024] = {};
  EXPECT_EQ(kvflash_quantize(KVFLASH_TYPE_F16, src, 128, raw + 1), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("dst"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_quantize(KVFLASH_TYPE_F16, src, 128, raw + 2), KVFLASH_OK) << last_error();
  EXPECT_EQ(kvflash_dequantize(KVFLASH_TYPE_F16, raw + 3, 128, out),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("src"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_dequantize(KVFLASH_TYPE_F16, raw + 2, 128, reinterpret_cast<float*>(raw + 258)),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("dst"), std::string::npos) << last_error();
}

TEST(CapiStatus, CodesMirrorCpp) {
  EXPECT_EQ(KVFLASH_OK, 0);
  EXPECT_EQ(KVFLASH_ERROR_INVALID_ARGUMENT,
            static_cast<int>(kvflash::ErrorCode::invalid_argument) + 1);
  EXPECT_EQ(KVFLASH_ERROR_UNSUPPORTED, static_cast<int>(kvflash::ErrorCode::unsupported) + 1);
  EXPECT_EQ(KVFLASH_ERROR_OUT_OF_MEMORY, static_cast<int>(kvflash::ErrorCode::out_of_memory) + 1);
  EXPECT_EQ(KVFLASH_ERROR_BACKEND, static_cast<int>(kvflash::ErrorCode::backend_error) + 1);
  EXPECT_EQ(KVFLASH_ERROR_INTERNAL, static_cast<int>(kvflash::ErrorCode::internal) + 1);
}

TEST(CapiStatus, Strings) {
  std::set<std::string> seen;
  for (int s = KVFLASH_OK; s <= KVFLASH_ERROR_INTERNAL; ++s) {
    const char* str = kvflash_status_string(s);
    ASSERT_NE(str, nullptr);
    EXPECT_GT(std::strlen(str), 0u);
    seen.insert(str);
  }
  EXPECT_EQ(seen.size(), 6u) << "status strings are not distinct";
  EXPECT_STREQ(kvflash_status_string(KVFLASH_OK), "ok");
  EXPECT_STREQ(kvflash_status_string(KVFLASH_ERROR_UNSUPPORTED),
               kvflash::to_string(kvflash::ErrorCode::unsupported));
  EXPECT_STREQ(kvflash_status_string(-1), "unknown");
  EXPECT_STREQ(kvflash_status_string(99), "unknown");
}

TEST(CapiStatus, Version) {
  const std::string expected = std::to_string(KVFLASH_VERSION_MAJOR) + "." +
                               std::to_string(KVFLASH_VERSION_MINOR) + "." +
                               std::to_string(KVFLASH_VERSION_PATCH);
  EXPECT_EQ(std::string(kvflash_version()), expected);
}

// The last error is per thread: a new thread starts with "", and its failures do not change the
// message another thread sees.
TEST(CapiStatus, LastErrorIsThreadLocal) {
  ASSERT_EQ(kvflash_quantize(KVFLASH_TYPE_F16, nullptr, 8, nullptr),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  const std::string mine = last_error();
  ASSERT_NE(mine.find("src"), std::string::npos) << mine;

  std::string other_initial, other_after;
  std::thread other([&] {
    other_initial = kvflash_last_error();
    (void)kvflash_row_size(KVFLASH_TYPE_F16, -3);
    other_after = kvflash_last_error();
  });
  other.join();
  EXPECT_EQ(other_initial, "");
  EXPECT_NE(other_after.find("n_values"), std::string::npos) << other_after;
  EXPECT_EQ(last_error(), mine);

  // Successful calls leave the message alone.
  EXPECT_EQ(kvflash_row_size(KVFLASH_TYPE_F16, 8), 16u);
  EXPECT_EQ(last_error(), mine);
}

}  // namespace
