// Keys no query of a call can see (outside the sliding window, masked with -inf for every query)
// are often cells an engine never wrote: their K and V may hold anything, NaN and inf included.
// They must not reach the output: the CUDA kernels zero the V operands of keys no row of an MMA
// tile weighs and let a -inf mask hide a key whatever its K holds, so the output equals the float64
// reference's over the same poisoned cache (which ignores hidden keys). Every key hidden with
// -inf sinks gives zeros and lse -inf. CudaSplitHiddenKeys: a key that some rows of a tile see
// and others do not (several query tokens: a causal future key, a key masked for some queries)
// with NaN or inf in V reaches only the rows that see it, in cuda.prefill.
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

// Key j of sequence s masked with -inf for that sequence's first `queries` queries.
void hide_by_mask(HostInputs& in, int32_t s, int32_t queries, int64_t j) {
  for (int32_t i = 0; i < queries; ++i)
    in.mask[size_t((int64_t{s} * in.p.n_q_tokens + i) * in.mask_stride + j)] =
        -std::numeric_limits<float>::infinity();
}

// Two sequences of n_q_tokens queries, causal, over K/V types k and v (the cases' common shape).
AttentionProblem two_sequences(int32_t n_q_tokens, int32_t n_q_heads, int32_t n_kv_heads, KvType k,
                               KvType v, int64_t kv_capacity) {
  AttentionProblem p;
  p.n_seqs = 2;
  p.n_q_tokens = n_q_tokens;
  p.n_q_heads = n_q_heads;
  p.n_kv_heads = n_kv_heads;
  p.k_type = k;
  p.v_type = v;
  p.kv_capacity = kv_capacity;
  p.causal = true;
  return p;
}

// The plan run once on the device over `in`'s tensors, its outputs read back.
Expected<HostOutputs> run_once(const Plan& pl, const HostInputs& in) {
  Expected<gpu::Stream> stream = gpu::Stream::create();
  if (!stream) return stream.error();
  Expected<DeviceInputs> dev = stage(in, stream->handle());
  if (!dev) return dev.error();
  Expected<DeviceOutputs> o = allocate_outputs(pl, stream->handle());
  if (!o) return o.error();
  if (Status s = run(pl, with_outputs(dev->tensors, *o), o->workspace.data(), stream->handle()); !s)
    return s.error();
  Expected<HostOutputs> got = read_outputs(*o, *stream);
  if (!got) return got;
  if (Status s = gpu::last_error(); !s) return s.error();
  return got;
}

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
  AttentionProblem p = two_sequences(c.n_q_tokens, 8, 2, c.k_type, c.v_type, c.len);
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
      if (p.has_mask) hide_by_mask(in, s, p.n_q_tokens, j);
    }
  }
  ASSERT_GT(poisoned, 0);
  if (p.has_sinks) std::fill(in.sinks.begin(), in.sinks.end(), -INFINITY);

  Reference ref;
  KVFLASH_ASSIGN_OR_FAIL(ref, reference(in));
  HostOutputs got;
  KVFLASH_ASSIGN_OR_FAIL(got, run_once(*pl, in));
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

// Keys some query rows of a tile see and others do not, their V rows (and K rows: poison_k)
// poisoned: NaN bytes (0xFF: NaN in every format), or for f16 V +inf, NaN and -inf in three dims
// of the row (inf_dims). Causal: the sequence's last key, seen only by its last query; mask: keys
// masked for the first half of the queries only.
struct SplitCase {
  int32_t n_q_tokens, n_q_heads, n_kv_heads;
  KvType k_type, v_type;
  bool mask, poison_k, inf_dims;
  int32_t head_dim = 128;
};

std::string case_name(const SplitCase& c) {
  return fmt::format("q{}_h{}x{}_d{}_{}_{}_{}{}{}", c.n_q_tokens, c.n_q_heads, c.n_kv_heads,
                     c.head_dim, to_string(c.k_type), to_string(c.v_type),
                     c.mask ? "mask" : "causal", c.poison_k ? "_kv" : "_v",
                     c.inf_dims ? "_infdims" : "");
}
void PrintTo(const SplitCase& c, std::ostream* os) {
  *os << case_name(c);
}

std::vector<SplitCase> split_cases() {
  using enum KvType;
  return {
      // cuda.prefill (more than 8 query tokens): the diagonal tiles of causal chunks. (cuda.decode
      // does not yet: include/kvflash/problem.hpp; its cases are in
      // dev/parked/decode-nonfinite-split-keys.patch.)
      {64, 8, 2, f16, f16, false, false, true},
      {64, 8, 2, q8_0, q4_0, true, false, false},
      {200, 8, 2, turbo3, turbo3, false, true, false},
      {96, 8, 2, bf16, bf16, true, false, false},
      {48, 8, 2, f16, f16, false, false, true, 512},
      {48, 8, 2, q8_0, q8_0, true, false, false, 256},
  };
}

class CudaSplitHiddenKeys : public ::testing::TestWithParam<SplitCase> {};

TEST_P(CudaSplitHiddenKeys, ReachOnlyTheRowsThatSeeThem) {
  KVFLASH_REQUIRE_GPU();
  const SplitCase& c = GetParam();
  KVFLASH_REQUIRE_PAIR(c.k_type, c.v_type);
  AttentionProblem p =
      two_sequences(c.n_q_tokens, c.n_q_heads, c.n_kv_heads, c.k_type, c.v_type, 3000);
  p.head_dim = {c.head_dim, c.head_dim};
  p.has_mask = c.mask;
  const Expected<Plan> pl = plan_cuda(p);
  if (!pl && pl.error().code == ErrorCode::unsupported)
    GTEST_SKIP() << "no CUDA candidate accepts " << describe(p);
  ASSERT_TRUE(pl.ok()) << pl.error().message;
  ASSERT_EQ(pl->kernel->name.rfind("cuda.prefill", 0), 0u) << pl->kernel->name;
  const std::vector<int64_t> lens = {3000, 2011};
  HostInputs in = make_inputs(p, lens, std::hash<std::string>{}(case_name(c)));

  const AttentionTensors ht = in.tensors();
  const size_t k_row = row_size(p.k_type, p.head_dim.k), v_row = row_size(p.v_type, p.head_dim.v);
  auto poison = [&](int32_t s, int64_t j) {
    for (int32_t h = 0; h < p.n_kv_heads; ++h) {
      uint8_t* v = in.v.data() + kv_row_offset(ht.v, 0, s, j, h);
      if (c.inf_dims) {
        const uint16_t bits[3] = {0x7c00, 0x7e00, 0xfc00};  // f16 +inf, NaN, -inf
        for (int d = 0; d < 3; ++d) std::memcpy(v + 2 * (3 + 2 * d), &bits[d], 2);
      } else {
        std::memset(v, 0xFF, v_row);
      }
      if (c.poison_k) std::memset(in.k.data() + kv_row_offset(ht.k, 0, s, j, h), 0xFF, k_row);
    }
  };
  for (int32_t s = 0; s < p.n_seqs; ++s) {
    const int64_t len = lens[size_t(s)];
    if (!c.mask) {
      poison(s, len - 1);  // seen by the last query only
      continue;
    }
    for (int64_t j = len - 400; j < len - 300; j += 7) {
      poison(s, j);
      hide_by_mask(in, s, p.n_q_tokens / 2, j);
    }
  }

  Reference ref;
  KVFLASH_ASSIGN_OR_FAIL(ref, reference(in));
  HostOutputs got;
  KVFLASH_ASSIGN_OR_FAIL(got, run_once(*pl, in));

  // Rows the reference keeps finite: finite, within the NMSE bound, lse finite. The others (rows
  // that see a poisoned key): non-finite wherever the reference is, lse included.
  const int32_t dv = p.head_dim.v;
  int64_t finite_rows = 0, poisoned_rows = 0, wrong = 0;
  double err2 = 0.0, ref2 = 0.0;
  std::string first;
  for (size_t r = 0; r < got.lse.size(); ++r) {
    const double* x = ref.out.data() + r * size_t(dv);
    const float* y = got.out.data() + r * size_t(dv);
    const bool row_finite = std::all_of(x, x + dv, [](double v) { return std::isfinite(v); });
    (row_finite ? finite_rows : poisoned_rows)++;
    for (int32_t d = 0; d < dv; ++d) {
      const bool ok =
          row_finite ? std::isfinite(y[d]) : std::isfinite(x[d]) || !std::isfinite(y[d]);
      if (row_finite && ok) {
        err2 += (y[d] - x[d]) * (y[d] - x[d]);
        ref2 += x[d] * x[d];
      }
      if (!ok && wrong++ == 0)
        first = fmt::format("row {} dim {}: {} (reference {})", r, d, y[d], x[d]);
    }
    if (std::isfinite(ref.lse[r]) != std::isfinite(got.lse[r]) && wrong++ == 0)
      first = fmt::format("lse row {}: {} (reference {})", r, got.lse[r], ref.lse[r]);
  }
  EXPECT_EQ(wrong, 0) << pl->kernel->name << ": " << first;
  EXPECT_LE(err2 / ref2, 1e-5) << pl->kernel->name;
  // Both kinds of rows present: the poisoned keys are seen by some rows and hidden from others.
  EXPECT_GT(finite_rows, 0);
  EXPECT_GT(poisoned_rows, 0);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaSplitHiddenKeys, ::testing::ValuesIn(split_cases()),
                         [](const ::testing::TestParamInfo<SplitCase>& param_info) {
                           return case_name(param_info.param);
                         });

}  // namespace
}  // namespace kvflash::gputest
