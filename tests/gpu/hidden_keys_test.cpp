// Keys no query of a call can see (outside the sliding window, masked with -inf for every query)
// are often cells an engine never wrote: their K and V may hold anything, NaN and inf included.
// They must not reach the output: the CUDA kernels zero the V operands of keys no row of an MMA
// tile weighs and let a -inf mask hide a key whatever its K holds, so the output equals the float64
// reference's over the same poisoned cache (which ignores hidden keys). Every key hidden with
// -inf sinks gives zeros and lse -inf. (A key hidden from some rows of a tile and visible to
// others is that call's data: a NaN there is the caller's, as in any MMA kernel.)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kvflash/formats.hpp"

namespace kvflash::gputest {
namespace {

enum class Hide { window, mask, all_masked_sink };

struct HiddenCase {
  int32_t n_q_tokens;
  KvType k_type, v_type;
  int64_t len;
  Hide hide;
};

std::string case_name(const HiddenCase& c) {
  const char* hide = c.hide == Hide::window ? "window"
                     : c.hide == Hide::mask ? "mask"
                                            : "all_masked_sink";
  return fmt::format("q{}_{}_{}_kv{}_{}", c.n_q_tokens, to_string(c.k_type), to_string(c.v_type),
                     c.len, hide);
}
void PrintTo(const HiddenCase& c, std::ostream* os) {
  *os << case_name(c);
}

std::vector<HiddenCase> hidden_cases() {
  using enum KvType;
  return {
      {1, f16, f16, 5000, Hide::window},
      {1, q8_0, q4_0, 3000, Hide::mask},
      {4, turbo3, turbo3, 4000, Hide::window},
      {8, q8_0, q8_0, 2000, Hide::mask},
      {1, q8_0, q8_0, 1500, Hide::all_masked_sink},
      {64, f16, f16, 2000, Hide::window},
      {64, q8_0, q4_0, 2500, Hide::mask},
      {200, turbo3, turbo3, 3000, Hide::window},
      {96, bf16, bf16, 1200, Hide::all_masked_sink},
  };
}

class CudaHiddenKeys : public ::testing::TestWithParam<HiddenCase> {};

TEST_P(CudaHiddenKeys, NeverReachTheOutput) {
  KVFLASH_REQUIRE_GPU();
  const HiddenCase& c = GetParam();
  KVFLASH_REQUIRE_PAIR(c.k_type, c.v_type);
  AttentionProblem p;
  p.n_seqs = 2;
  p.n_q_tokens = c.n_q_tokens;
  p.n_q_heads = 8;
  p.n_kv_heads = 2;
  p.k_type = c.k_type;
  p.v_type = c.v_type;
  p.kv_capacity = c.len;
  p.has_mask = c.hide != Hide::window;
  p.has_sinks = c.hide == Hide::all_masked_sink;
  if (c.hide == Hide::window) p.window = c.len / 3;
  const Expected<Plan> pl = plan_cuda(p);
  if (!pl && pl.error().code == ErrorCode::unsupported)
    GTEST_SKIP() << "no CUDA candidate accepts " << describe(p);
  ASSERT_TRUE(pl.ok()) << pl.error().message;
  const std::vector<int64_t> lens = {c.len, c.len - 37};
  HostInputs in = make_inputs(p, lens, std::hash<std::string>{}(case_name(c)));

  // Keys hidden from every query of sequence s: their K and V rows become 0xFF (NaN in every
  // format), their mask columns -inf.
  const AttentionTensors ht = in.tensors();
  const size_t k_row = row_size(p.k_type, p.head_dim.k), v_row = row_size(p.v_type, p.head_dim.v);
  auto poison = [&](int32_t s, int64_t j) {
    for (int32_t h = 0; h < p.n_kv_heads; ++h) {
      std::memset(in.k.data() + kv_row_offset(ht.k, 0, s, j, h), 0xFF, k_row);
      std::memset(in.v.data() + kv_row_offset(ht.v, 0, s, j, h), 0xFF, v_row);
    }
  };
  int64_t poisoned = 0;
  for (int32_t s = 0; s < p.n_seqs; ++s) {
    const int64_t len = lens[size_t(s)];
    const int64_t first_q = len - p.n_q_tokens;  // position of the sequence's first query
    for (int64_t j = 0; j < len; ++j) {
      bool hide = false;
      if (c.hide == Hide::window) hide = first_q - j >= p.window;  // from the first query too
      if (c.hide == Hide::mask) hide = j % 5 == 2 || (j >= 600 && j < 700);
      if (c.hide == Hide::all_masked_sink) hide = s == 0;  // sequence 0 sees nothing
      if (!hide) continue;
      poison(s, j);
      ++poisoned;
      if (p.has_mask)
        for (int32_t i = 0; i < p.n_q_tokens; ++i)
          in.mask[size_t((int64_t{s} * p.n_q_tokens + i) * in.mask_stride + j)] =
              -std::numeric_limits<float>::infinity();
    }
  }
  ASSERT_GT(poisoned, 0);
  if (p.has_sinks) std::fill(in.sinks.begin(), in.sinks.end(), -INFINITY);

  Reference ref;
  KVFLASH_ASSIGN_OR_FAIL(ref, reference(in));
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  DeviceInputs dev;
  KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, stream.handle()));
  DeviceOutputs o;
  KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(*pl, stream.handle()));
  KVFLASH_ASSERT_OK(run(*pl, with_outputs(dev.tensors, o), o.workspace.data(), stream.handle()));
  HostOutputs got;
  KVFLASH_ASSIGN_OR_FAIL(got, read_outputs(o, stream));
  KVFLASH_ASSERT_OK(gpu::last_error());
  const Comparison cmp = compare(p, got, ref);
  EXPECT_EQ(cmp.non_finite, 0) << pl->kernel->name << ": " << cmp.summary();
  EXPECT_EQ(cmp.empty_rows_not_zero, 0) << pl->kernel->name << ": " << cmp.summary();
  EXPECT_LE(cmp.nmse, 1e-5) << pl->kernel->name << ": " << cmp.summary();
  EXPECT_EQ(cmp.lse_bad, 0) << pl->kernel->name << ": " << cmp.summary();
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaHiddenKeys, ::testing::ValuesIn(hidden_cases()),
                         [](const ::testing::TestParamInfo<HiddenCase>& param_info) {
                           return case_name(param_info.param);
                         });

}  // namespace
}  // namespace kvflash::gputest
