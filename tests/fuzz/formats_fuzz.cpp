// libFuzzer target: the KV formats through the C API. Round trips of fuzzed rows
// (kvflash_quantize, kvflash_dequantize), dequantization of raw fuzzed bytes, type names and row
// sizes of any value. Checks: no crash or sanitizer report; f32 rows round-trip exactly; finite
// rows of moderate size come back finite; names round-trip.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvflash/kvflash.h"

namespace {

void fail(const char* what, int type, int64_t n) {
  std::fprintf(stderr, "%s (type %d, n_values %lld)\n", what, type, static_cast<long long>(n));
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: {  // names
      const std::string name = in.ConsumeRandomLengthString(16);
      const kvflash_type t = kvflash_type_from_name(name.c_str());
      // The name ends at its first NUL, as a C caller's would.
      if (t != KVFLASH_TYPE_INVALID && std::strcmp(name.c_str(), kvflash_type_name(t)) != 0)
        fail("name", t, 0);
      if (t == KVFLASH_TYPE_INVALID && *kvflash_last_error() == '\0') fail("no message", t, 0);
      return 0;
    }
    case 1: {  // row sizes of any value
      const auto t = static_cast<kvflash_type>(in.ConsumeIntegral<int32_t>());
      const int64_t n = in.ConsumeIntegral<int64_t>();
      const size_t bytes = kvflash_row_size(t, n);
      const bool valid =
          static_cast<int32_t>(t) >= 0 && static_cast<int32_t>(t) < KVFLASH_TYPE_COUNT;
      if (bytes != 0 && (!valid || n <= 0)) fail("row size of an invalid row", t, n);
      (void)kvflash_type_name(t);
      return 0;
    }
    default:
      break;
  }
  const auto type = static_cast<kvflash_type>(in.ConsumeIntegralInRange<int32_t>(-1, 8));
  const int64_t n = in.ConsumeIntegralInRange<int64_t>(-1, 600);
  const size_t bytes = kvflash_row_size(type, n);
  if (bytes == 0) {
    float f = 0;
    unsigned char row[8] = {};
    if (kvflash_quantize(type, &f, n, row) == KVFLASH_OK)
      fail("quantize of an invalid row", type, n);
    return 0;
  }
  const auto nv = static_cast<size_t>(n);
  std::vector<float> src(nv), back(nv);
  std::vector<uint16_t> row((bytes + 1) / 2);  // 2-byte aligned storage
  if (in.ConsumeBool()) {                      // dequantize raw bytes: any pattern, no crash
    std::vector<uint8_t> raw = in.ConsumeBytes<uint8_t>(bytes);
    raw.resize(bytes);
    std::memcpy(row.data(), raw.data(), bytes);
    if (kvflash_dequantize(type, row.data(), n, back.data()) != KVFLASH_OK)
      fail("dequantize", type, n);
    return 0;
  }
  bool moderate = true;
  for (float& x : src) {
    if (in.ConsumeIntegralInRange<int>(0, 31) == 0) {
      const float specials[] = {
          __builtin_inff(), -__builtin_inff(), __builtin_nanf(""), 65504.0f, 1e-40f, -0.0f};
      x = specials[in.ConsumeIntegralInRange<size_t>(0, 5)];
    } else {
      x = static_cast<float>(in.ConsumeIntegralInRange<int32_t>(-100000, 100000)) / 100.0f;
    }
    moderate = moderate && std::isfinite(x) && std::fabs(x) <= 1000.0f;
  }
  if (kvflash_quantize(type, src.data(), n, row.data()) != KVFLASH_OK) fail("quantize", type, n);
  if (kvflash_dequantize(type, row.data(), n, back.data()) != KVFLASH_OK)
    fail("dequantize", type, n);
  for (size_t i = 0; i < nv; ++i) {
    if (type == KVFLASH_TYPE_F32 && std::memcmp(&src[i], &back[i], 4) != 0)
      fail("f32 round trip", type, n);
    if (moderate && !std::isfinite(back[i])) fail("finite row came back non-finite", type, n);
  }
  // Misaligned pointers are refused, never read.
  const auto* odd = reinterpret_cast<const unsigned char*>(row.data()) + 1;
  if (kvflash_dequantize(type, odd, n, back.data()) == KVFLASH_OK)
    fail("odd source accepted", type, n);
  return 0;
}
