// libFuzzer target: problem and tensor validation through the C API. The problem's fields and the
// tensors' strides come from the input (small, interesting and raw values); every pointer points
// into one real buffer at a fuzzed offset (so misaligned ones occur), or is NULL. Checks: no
// crash or sanitizer report, and every accepted small contiguous layout really keeps its rows
// aligned, inside int64 and apart (a brute-force check of validate's rules).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "kvflash/kvflash.h"

namespace {

constexpr size_t kBuffer = 1 << 16;
alignas(64) unsigned char g_buffer[kBuffer];

int64_t fuzz_int(FuzzedDataProvider& in, int64_t small_max) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return in.ConsumeIntegralInRange<int64_t>(0, small_max);
    case 1:
      return in.ConsumeIntegralInRange<int64_t>(-2, 2);
    case 2: {
      const int64_t edges[] = {
          INT64_MAX, INT64_MIN, INT64_MAX / 2,   int64_t{1} << 32, (int64_t{1} << 32) + 1,
          INT32_MAX, INT32_MIN, int64_t{1} << 62};
      return edges[in.ConsumeIntegralInRange<size_t>(0, std::size(edges) - 1)];
    }
    default:
      return in.ConsumeIntegral<int64_t>();
  }
}

int32_t fuzz_i32(FuzzedDataProvider& in, int32_t small_max) {
  const int64_t v = fuzz_int(in, small_max);
  return static_cast<int32_t>(static_cast<uint64_t>(v));  // wraps, on purpose
}

const void* fuzz_ptr(FuzzedDataProvider& in) {
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) return nullptr;
  return g_buffer + in.ConsumeIntegralInRange<size_t>(0, 64);
}

float fuzz_float(FuzzedDataProvider& in) {
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            -1.0f,
                            0.125f,
                            30.0f,
                            1e30f,
                            -1e30f,
                            __builtin_inff(),
                            -__builtin_inff(),
                            __builtin_nanf("")};
  if (in.ConsumeBool()) return specials[in.ConsumeIntegralInRange<size_t>(0, 10)];
  return in.ConsumeFloatingPoint<float>();
}

kvflash_kv_tensor fuzz_kv(FuzzedDataProvider& in, int64_t row) {
  kvflash_kv_tensor t{};
  t.data = fuzz_ptr(in);
  // Strides: often multiples of the row (plausible layouts), sometimes anything.
  auto stride = [&]() -> int64_t {
    if (in.ConsumeBool())
      return row * in.ConsumeIntegralInRange<int64_t>(0, 80) +
             in.ConsumeIntegralInRange<int64_t>(0, 3) * 2;
    return fuzz_int(in, 1 << 20);
  };
  t.stride_token = stride();
  t.stride_head = stride();
  t.stride_seq = stride();
  if (in.ConsumeBool()) {
    t.page_table = static_cast<const int32_t*>(fuzz_ptr(in));
    t.pages_per_seq = fuzz_i32(in, 64);
    t.n_pages = fuzz_int(in, 64);
    t.stride_page = stride();
  }
  return t;
}

// Brute force over every row of a small accepted contiguous tensor: aligned, no overlap.
void check_layout(const kvflash_problem& p, const kvflash_kv_tensor& t, kvflash_type type,
                  int32_t dim) {
  const int64_t rows = int64_t{p.n_seqs} * p.kv_capacity * p.n_kv_heads;
  if (p.page_size != 0 || rows > 4096) return;
  const auto row = static_cast<int64_t>(kvflash_row_size(type, dim));
  const int64_t align = type == KVFLASH_TYPE_F32 ? 4 : 2;
  std::vector<std::pair<__int128, __int128>> spans;
  for (int64_t s = 0; s < p.n_seqs; ++s)
    for (int64_t j = 0; j < p.kv_capacity; ++j)
      for (int64_t h = 0; h < p.n_kv_heads; ++h) {
        const __int128 off = static_cast<__int128>(s) * t.stride_seq +
                             static_cast<__int128>(j) * t.stride_token +
                             static_cast<__int128>(h) * t.stride_head;
        if (off < 0 || off + row > INT64_MAX) {
          std::fprintf(stderr, "accepted row at offset outside int64\n");
          std::abort();
        }
        if ((reinterpret_cast<uintptr_t>(t.data) + static_cast<uint64_t>(off)) % align != 0) {
          std::fprintf(stderr, "accepted misaligned row\n");
          std::abort();
        }
        spans.emplace_back(off, off + row);
      }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) {
      std::fprintf(stderr, "accepted overlapping rows\n");
      std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  kvflash_problem p = kvflash_problem_default();
  const int32_t dims[][2] = {{64, 64}, {80, 80}, {128, 128}, {192, 128}, {576, 512}, {100, 100}};
  if (in.ConsumeBool()) p.n_seqs = fuzz_i32(in, 4);
  if (in.ConsumeBool()) p.n_q_tokens = fuzz_i32(in, 9);
  if (in.ConsumeBool()) p.n_q_heads = fuzz_i32(in, 8);
  if (in.ConsumeBool()) p.n_kv_heads = fuzz_i32(in, 8);
  if (in.ConsumeBool()) {
    const auto& d = dims[in.ConsumeIntegralInRange<size_t>(0, 5)];
    p.head_dim = {d[0], d[1]};
  }
  if (in.ConsumeBool()) p.k_type = static_cast<kvflash_type>(fuzz_i32(in, 8));
  if (in.ConsumeBool()) p.v_type = static_cast<kvflash_type>(fuzz_i32(in, 8));
  if (in.ConsumeBool()) p.kv_capacity = fuzz_int(in, 64);
  if (in.ConsumeBool()) p.scale = fuzz_float(in);
  p.causal = in.ConsumeIntegral<int32_t>();
  p.has_mask = in.ConsumeBool();
  if (in.ConsumeBool()) p.window = fuzz_int(in, 64);
  if (in.ConsumeBool()) p.softcap = fuzz_float(in);
  p.has_sinks = in.ConsumeBool();
  p.has_alibi = in.ConsumeBool();
  if (in.ConsumeBool()) p.page_size = fuzz_i32(in, 16);
  p.ragged_q = in.ConsumeBool();

  const int problem_ok = kvflash_validate_problem(&p);
  char text[256];
  (void)kvflash_problem_describe(&p, text, sizeof text);

  const int64_t krow = static_cast<int64_t>(kvflash_row_size(p.k_type, p.head_dim.k));
  const int64_t vrow = static_cast<int64_t>(kvflash_row_size(p.v_type, p.head_dim.v));
  kvflash_tensors t{};
  t.q = static_cast<const float*>(fuzz_ptr(in));
  t.k = fuzz_kv(in, krow);
  t.v = in.ConsumeBool() ? t.k : fuzz_kv(in, vrow);
  // kv_lens and q_offsets are read by kvflash_validate_tensors (host memory): n_seqs (+ 1)
  // entries, as the contract says, once the problem is valid.
  const size_t n = problem_ok == KVFLASH_OK ? static_cast<size_t>(p.n_seqs) + 1 : 1;
  std::vector<int64_t> lens(n);
  std::vector<int32_t> offsets(n);
  for (size_t i = 0; i < n && in.remaining_bytes() > 0; ++i) {
    lens[i] = in.ConsumeBool() ? p.kv_capacity : fuzz_int(in, 64);
    offsets[i] = i == 0 ? 0 : offsets[i - 1] + in.ConsumeIntegralInRange<int32_t>(-1, 9);
  }
  if (in.ConsumeBool()) t.kv_lens = lens.data();
  if (in.ConsumeBool()) t.q_offsets = offsets.data();
  t.mask = static_cast<const float*>(fuzz_ptr(in));
  t.mask_stride = fuzz_int(in, 128);
  t.sinks = static_cast<const float*>(fuzz_ptr(in));
  t.alibi_slopes = static_cast<const float*>(fuzz_ptr(in));
  t.out = const_cast<float*>(static_cast<const float*>(fuzz_ptr(in)));
  t.lse = in.ConsumeBool() ? nullptr : const_cast<float*>(static_cast<const float*>(fuzz_ptr(in)));

  const int tensors_ok = kvflash_validate_tensors(&p, &t);
  if (tensors_ok == KVFLASH_OK) {
    if (problem_ok != KVFLASH_OK) {
      std::fprintf(stderr, "tensors accepted for an invalid problem\n");
      std::abort();
    }
    check_layout(p, t.k, p.k_type, p.head_dim.k);
    check_layout(p, t.v, p.v_type, p.head_dim.v);
  }
  (void)kvflash_select_kernel(&p, nullptr, text, sizeof text);
  return 0;
}
