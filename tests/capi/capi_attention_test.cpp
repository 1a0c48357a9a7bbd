// The C API's problem, selection and attention entry points against the C++ API they wrap.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "capi/capi_test_util.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/kvflash.h"
#include "kvflash/problem.hpp"
#include "kvflash/reference.hpp"
#include "kvflash/registry.hpp"
#include "kvflash/status.hpp"

namespace {

using kvflash::KvType;

using kvflash::capi_test::c_type;
using kvflash::capi_test::last_error;
using kvflash::capi_test::to_c;

kvflash::AttentionProblem cpu_problem() {
  kvflash::AttentionProblem p;
  p.n_q_heads = 8;
  p.n_kv_heads = 2;
  p.kv_capacity = 256;
  return p;
}

// ---- Problem ------------------------------------------------------------------------------

TEST(CapiProblem, DefaultsMatchCpp) {
  const kvflash::AttentionProblem cpp;
  const kvflash_problem c = kvflash_problem_default();
  EXPECT_EQ(c.n_seqs, cpp.n_seqs);
  EXPECT_EQ(c.n_q_tokens, cpp.n_q_tokens);
  EXPECT_EQ(c.n_q_heads, cpp.n_q_heads);
  EXPECT_EQ(c.n_kv_heads, cpp.n_kv_heads);
  EXPECT_EQ(c.head_dim.k, cpp.head_dim.k);
  EXPECT_EQ(c.head_dim.v, cpp.head_dim.v);
  EXPECT_EQ(c.k_type, c_type(cpp.k_type));
  EXPECT_EQ(c.v_type, c_type(cpp.v_type));
  EXPECT_EQ(c.kv_capacity, cpp.kv_capacity);
  EXPECT_EQ(c.scale, cpp.scale);
  EXPECT_EQ(c.causal != 0, cpp.causal);
  EXPECT_EQ(c.has_mask != 0, cpp.has_mask);
  EXPECT_EQ(c.window, cpp.window);
  EXPECT_EQ(c.softcap, cpp.softcap);
  EXPECT_EQ(c.has_sinks != 0, cpp.has_sinks);
  EXPECT_EQ(c.has_alibi != 0, cpp.has_alibi);
  EXPECT_EQ(c.page_size, cpp.page_size);
  EXPECT_EQ(c.ragged_q != 0, cpp.ragged_q);
  EXPECT_EQ(kvflash_validate_problem(&c), KVFLASH_OK) << kvflash_last_error();
}

TEST(CapiProblem, ValidateNamesTheField) {
  EXPECT_EQ(kvflash_validate_problem(nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("problem"), std::string::npos) << last_error();

  kvflash_problem p = kvflash_problem_default();
  p.head_dim.k = 100;
  p.head_dim.v = 100;
  EXPECT_EQ(kvflash_validate_problem(&p), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("head_dim"), std::string::npos) << last_error();

  p = kvflash_problem_default();
  p.k_type = static_cast<kvflash_type>(42);
  EXPECT_EQ(kvflash_validate_problem(&p), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("k_type"), std::string::npos) << last_error();

  p = kvflash_problem_default();
  p.v_type = KVFLASH_TYPE_INVALID;
  EXPECT_EQ(kvflash_validate_problem(&p), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("v_type"), std::string::npos) << last_error();

  p = kvflash_problem_default();
  p.n_kv_heads = 3;  // 32 query heads are not a multiple of 3
  EXPECT_EQ(kvflash_validate_problem(&p), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("n_kv_heads"), std::string::npos) << last_error();
}

// Every problem the C API rejects, the C++ API rejects with the same code and message.
TEST(CapiProblem, ValidateAgreesWithCpp) {
  std::vector<kvflash::AttentionProblem> problems(8, cpu_problem());
  problems[1].head_dim = {100, 100};
  problems[2].n_seqs = 0;
  problems[3].n_q_tokens = -1;
  problems[4].kv_capacity = 0;
  problems[5].window = -4;
  problems[6].n_q_heads = 2000;
  problems[7].head_dim = {576, 512};
  for (const auto& cpp : problems) {
    const kvflash_problem c = to_c(cpp);
    const kvflash::Status s = kvflash::validate(cpp);
    const int status = kvflash_validate_problem(&c);
    if (s) {
      EXPECT_EQ(status, KVFLASH_OK) << kvflash::describe(cpp) << ": " << last_error();
    } else {
      EXPECT_EQ(status, static_cast<int>(s.error().code) + 1);
      EXPECT_EQ(last_error(), s.message());
    }
  }
}

TEST(CapiProblem, Describe) {
  const kvflash::AttentionProblem cpp = cpu_problem();
  const kvflash_problem c = to_c(cpp);
  const std::string expected = kvflash::describe(cpp);
  std::vector<char> text(expected.size() + 1, 'x');
  ASSERT_EQ(kvflash_problem_describe(&c, text.data(), text.size()), KVFLASH_OK)
      << kvflash_last_error();
  EXPECT_EQ(std::string(text.data()), expected);

  EXPECT_EQ(kvflash_problem_describe(&c, text.data(), expected.size()),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("text_capacity"), std::string::npos) << last_error();
  EXPECT_EQ(text[0], '\0');
  EXPECT_EQ(kvflash_problem_describe(&c, nullptr, 0), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_problem_describe(nullptr, text.data(), text.size()),
            KVFLASH_ERROR_INVALID_ARGUMENT);
}

TEST(CapiProblem, KvTensorContiguousMatchesCpp) {
  std::vector<unsigned char> buffer(16);
  for (KvType t : kvflash::kAllKvTypes) {
    for (int32_t d : {64, 128, 576}) {
      const kvflash::KvTensor cpp = kvflash::kv_tensor_contiguous(buffer.data(), t, d, 4, 100);
      kvflash_kv_tensor c{};
      ASSERT_EQ(kvflash_kv_tensor_contiguous(buffer.data(), c_type(t), d, 4, 100, &c), KVFLASH_OK)
          << kvflash_last_error();
      EXPECT_EQ(c.data, cpp.data);
      EXPECT_EQ(c.stride_token, cpp.stride_token);
      EXPECT_EQ(c.stride_head, cpp.stride_head);
      EXPECT_EQ(c.stride_seq, cpp.stride_seq);
    }
  }
  kvflash_kv_tensor c{};
  EXPECT_EQ(kvflash_kv_tensor_contiguous(buffer.data(), KVFLASH_TYPE_F16, 128, 4, 100, nullptr),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_kv_tensor_contiguous(buffer.data(), KVFLASH_TYPE_INVALID, 128, 4, 100, &c),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_kv_tensor_contiguous(buffer.data(), KVFLASH_TYPE_F16, 0, 4, 100, &c),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("head_dim"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_kv_tensor_contiguous(buffer.data(), KVFLASH_TYPE_F16, 128, 4, 0, &c),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("capacity"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_kv_tensor_contiguous(buffer.data(), KVFLASH_TYPE_F32, 1 << 30, 1024,
                                         int64_t{1} << 32, &c),
            KVFLASH_ERROR_INVALID_ARGUMENT);  // overflows int64 byte offsets
}

// ---- Kernel selection ---------------------------------------------------------------------

kvflash_options cpu_options() {
  kvflash_options o = kvflash_options_default();
  o.backend = KVFLASH_BACKEND_CPU;
  o.ignore_environment = 1;
  return o;
}

kvflash::SelectOptions cpp_cpu_select() {
  kvflash::SelectOptions o;
  o.backend = kvflash::Backend::cpu;
  o.read_environment = false;
  return o;
}

TEST(CapiSelect, OptionsDefaultIsZero) {
  const kvflash_options o = kvflash_options_default();
  EXPECT_EQ(o.backend, KVFLASH_BACKEND_AUTO);
  EXPECT_EQ(o.force_kernel, nullptr);
  EXPECT_EQ(o.exclude_kernels, nullptr);
  EXPECT_EQ(o.n_threads, 0);
  EXPECT_EQ(o.ignore_environment, 0);
}

TEST(CapiSelect, CpuProblemSelectsCpuKernel) {
  const kvflash::AttentionProblem cpp = cpu_problem();
  const kvflash_problem p = to_c(cpp);
  const kvflash_options o = cpu_options();
  char name[128];
  ASSERT_EQ(kvflash_select_kernel(&p, &o, name, sizeof name), KVFLASH_OK) << kvflash_last_error();
  EXPECT_EQ(std::string(name).rfind("cpu.", 0), 0u) << name;

  const auto k = kvflash::select_kernel(cpp, cpp_cpu_select());
  ASSERT_TRUE(k.ok()) << k.error().message;
  EXPECT_EQ(std::string(name), (*k)->name);

  // Only asking whether a kernel exists.
  EXPECT_EQ(kvflash_select_kernel(&p, &o, nullptr, 0), KVFLASH_OK);

  // Default options (any backend, environment honoured) answer what the C++ defaults answer.
  const auto k_default = kvflash::select_kernel(cpp);
  ASSERT_TRUE(k_default.ok()) << k_default.error().message;
  ASSERT_EQ(kvflash_select_kernel(&p, nullptr, name, sizeof name), KVFLASH_OK)
      << kvflash_last_error();
  EXPECT_EQ(std::string(name), (*k_default)->name);
}

TEST(CapiSelect, NameBufferTooSmall) {
  const kvflash_problem p = to_c(cpu_problem());
  const kvflash_options o = cpu_options();
  char name[2] = {'x', 'x'};
  EXPECT_EQ(kvflash_select_kernel(&p, &o, name, sizeof name), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("name_capacity"), std::string::npos) << last_error();
  EXPECT_EQ(name[0], '\0');
  EXPECT_EQ(kvflash_select_kernel(&p, &o, nullptr, 16), KVFLASH_ERROR_INVALID_ARGUMENT);
}

TEST(CapiSelect, InvalidProblemAndOptions) {
  kvflash_problem p = to_c(cpu_problem());
  kvflash_options o = cpu_options();
  char name[128];
  EXPECT_EQ(kvflash_select_kernel(nullptr, &o, name, sizeof name), KVFLASH_ERROR_INVALID_ARGUMENT);

  p.head_dim = {100, 100};
  EXPECT_EQ(kvflash_select_kernel(&p, &o, name, sizeof name), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("head_dim"), std::string::npos) << last_error();

  p = to_c(cpu_problem());
  o.backend = static_cast<kvflash_backend>(7);
  EXPECT_EQ(kvflash_select_kernel(&p, &o, name, sizeof name), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("backend"), std::string::npos) << last_error();
  const int32_t minus_one = -1;  // what a C caller can store; not a C++ enum value
  std::memcpy(&o.backend, &minus_one, sizeof minus_one);
  EXPECT_EQ(kvflash_select_kernel(&p, &o, name, sizeof name), KVFLASH_ERROR_INVALID_ARGUMENT);

  o = cpu_options();
  o.n_threads = -2;
  EXPECT_EQ(kvflash_select_kernel(&p, &o, name, sizeof name), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("n_threads"), std::string::npos) << last_error();
}

// An unknown forced kernel fails, never falls back, and the message lists the candidates.
TEST(CapiSelect, ForcedUnknownKernelListsCandidates) {
  const kvflash::AttentionProblem cpp = cpu_problem();
  const kvflash_problem p = to_c(cpp);
  kvflash_options o = cpu_options();
  o.force_kernel = "no.such.kernel";
  char name[128] = "unchanged";
  const int status = kvflash_select_kernel(&p, &o, name, sizeof name);
  EXPECT_NE(status, KVFLASH_OK);
  EXPECT_EQ(name[0], '\0');
  const std::string message = last_error();
  EXPECT_NE(message.find("no.such.kernel"), std::string::npos) << message;

  // Exactly the C++ registry's answer.
  kvflash::SelectOptions so = cpp_cpu_select();
  so.force = "no.such.kernel";
  const auto k = kvflash::select_kernel(cpp, so);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(status, static_cast<int>(k.error().code) + 1);
  EXPECT_EQ(message, k.error().message);

  // It names the candidates (at least every CPU one).
  const auto& candidates = kvflash::kernel_candidates();
  ASSERT_FALSE(candidates.empty());
  for (const auto& c : candidates) {
    if (c.backend != kvflash::Backend::cpu) continue;
    EXPECT_NE(message.find(c.name), std::string::npos) << c.name << " missing in: " << message;
  }
}

TEST(CapiSelect, ForceAndExcludeMatchCpp) {
  const kvflash::AttentionProblem cpp = cpu_problem();
  const kvflash_problem p = to_c(cpp);
  const auto best = kvflash::select_kernel(cpp, cpp_cpu_select());
  ASSERT_TRUE(best.ok()) << best.error().message;
  const std::string best_name = (*best)->name;

  // Forcing the kernel that would run anyway selects it.
  kvflash_options o = cpu_options();
  o.force_kernel = best_name.c_str();
  char name[128];
  ASSERT_EQ(kvflash_select_kernel(&p, &o, name, sizeof name), KVFLASH_OK) << kvflash_last_error();
  EXPECT_EQ(std::string(name), best_name);

  // Excluding it (blanks and empty items in the list are ignored) gives what C++ gives.
  const std::string exclude = " , no.such.kernel ,\t" + best_name + " ,";
  o = cpu_options();
  o.exclude_kernels = exclude.c_str();
  const int status = kvflash_select_kernel(&p, &o, name, sizeof name);
  kvflash::SelectOptions so = cpp_cpu_select();
  so.exclude = {"no.such.kernel", best_name};
  const auto k = kvflash::select_kernel(cpp, so);
  if (k.ok()) {
    ASSERT_EQ(status, KVFLASH_OK) << kvflash_last_error();
    EXPECT_EQ(std::string(name), (*k)->name);
    EXPECT_NE(std::string(name), best_name);
  } else {
    EXPECT_EQ(status, static_cast<int>(k.error().code) + 1);
    EXPECT_EQ(last_error(), k.error().message);
  }
}

TEST(CapiSelect, KernelList) {
  const auto& candidates = kvflash::kernel_candidates();
  ASSERT_EQ(kvflash_kernel_count(), static_cast<int32_t>(candidates.size()));
  for (int32_t i = 0; i < kvflash_kernel_count(); ++i) {
    ASSERT_NE(kvflash_kernel_name(i), nullptr);
    EXPECT_EQ(std::string(kvflash_kernel_name(i)), candidates[static_cast<size_t>(i)].name);
  }
  EXPECT_EQ(kvflash_kernel_name(-1), nullptr);
  EXPECT_EQ(kvflash_kernel_name(kvflash_kernel_count()), nullptr);
  EXPECT_NE(last_error().find("index"), std::string::npos) << last_error();
}

// ---- Attention ----------------------------------------------------------------------------

// Host buffers for one problem: random Q, quantized K and V caches, optional extras. Move-only:
// tensors points into the vectors, which a move keeps and a copy would not.
struct Case {
  Case() = default;
  Case(const Case&) = delete;
  Case& operator=(const Case&) = delete;
  Case(Case&&) = default;
  Case& operator=(Case&&) = default;

  kvflash::AttentionProblem problem;
  std::vector<int64_t> kv_lens;  // empty: every sequence holds kv_capacity tokens
  std::vector<int32_t> q_lens;   // problem.ragged_q: each sequence's query count
  std::vector<int32_t> q_offsets;

  std::vector<float> q, mask, sinks, alibi;
  std::vector<unsigned char> k, v;
  kvflash::AttentionTensors tensors;  // out / lse left null

  void build(uint32_t seed) {
    const auto& p = problem;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, size_t n) {
      x.resize(n);
      for (float& e : x) e = normal(rng);
    };
    const size_t n_q = static_cast<size_t>(p.n_seqs) * p.n_q_tokens * p.n_q_heads;
    fill(q, n_q * p.head_dim.k);
    const int64_t rows = p.n_seqs * p.kv_capacity * p.n_kv_heads;
    std::vector<float> kf, vf;
    fill(kf, static_cast<size_t>(rows) * p.head_dim.k);
    fill(vf, static_cast<size_t>(rows) * p.head_dim.v);
    k.assign(static_cast<size_t>(rows) * kvflash::row_size(p.k_type, p.head_dim.k), 0);
    v.assign(static_cast<size_t>(rows) * kvflash::row_size(p.v_type, p.head_dim.v), 0);
    kvflash::quantize_rows(p.k_type, kf.data(), rows, p.head_dim.k, k.data());
    kvflash::quantize_rows(p.v_type, vf.data(), rows, p.head_dim.v, v.data());

    tensors = {};
    tensors.q = q.data();
    tensors.k = kvflash::kv_tensor_contiguous(k.data(), p.k_type, p.head_dim.k, p.n_kv_heads,
                                              p.kv_capacity);
    tensors.v = kvflash::kv_tensor_contiguous(v.data(), p.v_type, p.head_dim.v, p.n_kv_heads,
                                              p.kv_capacity);
    tensors.kv_lens = kv_lens.empty() ? nullptr : kv_lens.data();
    if (p.ragged_q) {
      q_offsets = {0};
      for (int32_t n : q_lens) q_offsets.push_back(q_offsets.back() + n);
      tensors.q_offsets = q_offsets.data();
    }
    if (p.has_mask) {
      const int64_t stride = p.kv_capacity + 3;
      mask.resize(static_cast<size_t>(p.n_seqs * p.n_q_tokens * stride));
      std::uniform_real_distribution<float> uniform(-2.0f, 0.0f);
      for (size_t i = 0; i < mask.size(); ++i) {
        mask[i] = i % 7 == 3 ? -std::numeric_limits<float>::infinity() : uniform(rng);
      }
      tensors.mask = mask.data();
      tensors.mask_stride = stride;
    }
    if (p.has_sinks) {
      fill(sinks, static_cast<size_t>(p.n_q_heads));
      tensors.sinks = sinks.data();
    }
    if (p.has_alibi) {
      alibi.resize(static_cast<size_t>(p.n_q_heads));
      for (int32_t h = 0; h < p.n_q_heads; ++h)
        alibi[static_cast<size_t>(h)] = 0.5f / static_cast<float>(1 + h);
      tensors.alibi_slopes = alibi.data();
    }
  }

  size_t out_size() const { return lse_size() * problem.head_dim.v; }
  size_t lse_size() const {
    return static_cast<size_t>(kvflash::q_total_rows(problem, tensors.q_offsets)) *
           problem.n_q_heads;
  }

  kvflash_tensors c_tensors(float* out, float* lse) const {
    kvflash_tensors t = to_c(tensors);
    t.out = out;
    t.lse = lse;
    return t;
  }
};

std::vector<Case> attention_cases() {
  std::vector<Case> cases;
  {  // decode, GQA 4, f16/f16, ragged sequences
    Case c;
    c.problem.n_seqs = 2;
    c.problem.n_q_heads = 8;
    c.problem.n_kv_heads = 2;
    c.problem.kv_capacity = 40;
    c.kv_lens = {40, 17};
    cases.push_back(std::move(c));
  }
  {  // speculative, q8_0/q4_0, window, softcap, sinks
    Case c;
    c.problem.n_seqs = 2;
    c.problem.n_q_tokens = 3;
    c.problem.n_q_heads = 4;
    c.problem.n_kv_heads = 4;
    c.problem.head_dim = {64, 64};
    c.problem.k_type = KvType::q8_0;
    c.problem.v_type = KvType::q4_0;
    c.problem.kv_capacity = 50;
    c.problem.window = 16;
    c.problem.softcap = 30.0f;
    c.problem.has_sinks = true;
    c.kv_lens = {50, 33};
    cases.push_back(std::move(c));
  }
  {  // turbo3/turbo4, mask, ALiBi, explicit scale, full caches
    Case c;
    c.problem.n_q_heads = 4;
    c.problem.n_kv_heads = 1;
    c.problem.k_type = KvType::turbo3;
    c.problem.v_type = KvType::turbo4;
    c.problem.kv_capacity = 64;
    c.problem.scale = 0.1f;
    c.problem.has_mask = true;
    c.problem.has_alibi = true;
    cases.push_back(std::move(c));
  }
  {  // prefill, bf16/f32, head_dim 256
    Case c;
    c.problem.n_seqs = 2;
    c.problem.n_q_tokens = 9;
    c.problem.n_q_heads = 2;
    c.problem.n_kv_heads = 1;
    c.problem.head_dim = {256, 256};
    c.problem.k_type = KvType::bf16;
    c.problem.v_type = KvType::f32;
    c.problem.kv_capacity = 24;
    c.kv_lens = {24, 9};
    cases.push_back(std::move(c));
  }
  {  // MLA-shaped 576/512, turbo2 K, not causal
    Case c;
    c.problem.n_q_heads = 8;
    c.problem.n_kv_heads = 1;
    c.problem.head_dim = {576, 512};
    c.problem.k_type = KvType::turbo2;
    c.problem.v_type = KvType::f16;
    c.problem.kv_capacity = 20;
    c.problem.causal = false;
    cases.push_back(std::move(c));
  }
  {  // ragged prefill, q4_0/turbo3: 0, 1, 5 and 12 queries packed, one more than its keys, mask
    Case c;
    c.problem.n_seqs = 4;
    c.problem.n_q_tokens = 12;
    c.problem.n_q_heads = 4;
    c.problem.n_kv_heads = 2;
    c.problem.k_type = KvType::q4_0;
    c.problem.v_type = KvType::turbo3;
    c.problem.kv_capacity = 30;
    c.problem.has_mask = true;
    c.problem.has_sinks = true;
    c.problem.ragged_q = true;
    c.q_lens = {0, 1, 5, 12};
    c.kv_lens = {30, 20, 30, 11};
    cases.push_back(std::move(c));
  }
  for (size_t i = 0; i < cases.size(); ++i) cases[i].build(static_cast<uint32_t>(100 + i));
  return cases;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    err += d * d;
    ref += double(want[i]) * double(want[i]);
  }
  return ref > 0 ? err / ref : err;
}

// kvflash_attention equals kvflash::attention bit for bit (same options) and is close to the
// float64 reference.
TEST(CapiAttention, MatchesCppAndReference) {
  for (const Case& c : attention_cases()) {
    SCOPED_TRACE(kvflash::describe(c.problem));
    ASSERT_TRUE(kvflash::validate(c.problem).ok()) << kvflash::validate(c.problem).message();
    const kvflash_problem p = to_c(c.problem);

    std::vector<float> c_out(c.out_size(), -7.0f), c_lse(c.lse_size(), -7.0f);
    const kvflash_tensors ct = c.c_tensors(c_out.data(), c_lse.data());
    kvflash_options o = cpu_options();
    o.n_threads = 2;
    ASSERT_EQ(kvflash_attention(&p, &ct, &o), KVFLASH_OK) << kvflash_last_error();

    std::vector<float> cpp_out(c.out_size(), -7.0f), cpp_lse(c.lse_size(), -7.0f);
    kvflash::AttentionTensors t = c.tensors;
    t.out = cpp_out.data();
    t.lse = cpp_lse.data();
    kvflash::PlanOptions po;
    po.select = cpp_cpu_select();
    po.n_threads = 2;
    const kvflash::Status s = kvflash::attention(c.problem, t, po);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(std::memcmp(c_out.data(), cpp_out.data(), c_out.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(c_lse.data(), cpp_lse.data(), c_lse.size() * sizeof(float)), 0);

    std::vector<float> ref_out(c.out_size(), -7.0f), ref_lse(c.lse_size(), -7.0f);
    t.out = ref_out.data();
    t.lse = ref_lse.data();
    const kvflash::Status r = kvflash::reference_attention(c.problem, t);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_LT(nmse(c_out, ref_out), 1e-5);
  }
}

// With no options (backend AUTO, all threads) kvflash_attention runs on the CPU backend, like
// kvflash::attention restricted to CPU kernels, and lse may be omitted.
TEST(CapiAttention, NullOptionsAndNoLse) {
  const std::vector<Case> cases = attention_cases();
  const Case& c = cases[1];
  const kvflash_problem p = to_c(c.problem);
  std::vector<float> c_out(c.out_size(), -7.0f);
  const kvflash_tensors ct = c.c_tensors(c_out.data(), nullptr);
  ASSERT_EQ(kvflash_attention(&p, &ct, nullptr), KVFLASH_OK) << kvflash_last_error();

  std::vector<float> cpp_out(c.out_size(), -7.0f);
  kvflash::AttentionTensors t = c.tensors;
  t.out = cpp_out.data();
  kvflash::PlanOptions po;
  po.select.backend = kvflash::Backend::cpu;
  const kvflash::Status s = kvflash::attention(c.problem, t, po);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(std::memcmp(c_out.data(), cpp_out.data(), c_out.size() * sizeof(float)), 0);
}

// A paged problem and paged tensors reach the engine through the C API: the CPU kernels read
// them (pages laid over the contiguous cache: the contiguous call's result up to the summation
// order at page boundaries), and so does the forced reference (exactly).
TEST(CapiAttention, PagedTensorsReachTheEngine) {
  const std::vector<Case> cases = attention_cases();
  const Case& c = cases[1];  // 2 sequences, 50 tokens of capacity
  ASSERT_EQ(c.problem.kv_capacity, 50);
  kvflash_problem p = to_c(c.problem);
  p.page_size = 10;
  ASSERT_EQ(kvflash_validate_problem(&p), KVFLASH_OK) << kvflash_last_error();
  std::vector<int32_t> table(2 * 5);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  std::vector<float> out(c.out_size(), -7.0f);
  kvflash_tensors ct = c.c_tensors(out.data(), nullptr);
  for (kvflash_kv_tensor* kv : {&ct.k, &ct.v}) {
    kv->page_table = table.data();
    kv->pages_per_seq = 5;
    kv->n_pages = 10;
    kv->stride_page = 10 * kv->stride_token;
  }
  ASSERT_EQ(kvflash_validate_tensors(&p, &ct), KVFLASH_OK) << kvflash_last_error();
  kvflash_options o = cpu_options();
  ASSERT_EQ(kvflash_attention(&p, &ct, &o), KVFLASH_OK) << kvflash_last_error();
  std::vector<float> contiguous(c.out_size(), -7.0f);
  kvflash_problem pc = to_c(c.problem);
  kvflash_tensors tc = c.c_tensors(contiguous.data(), nullptr);
  ASSERT_EQ(kvflash_attention(&pc, &tc, &o), KVFLASH_OK) << kvflash_last_error();
  for (size_t i = 0; i < out.size(); ++i)
    EXPECT_NEAR(out[i], contiguous[i], 1e-5f * (1.0f + std::fabs(contiguous[i]))) << i;

  o.force_kernel = "cpu.reference";
  ASSERT_EQ(kvflash_attention(&p, &ct, &o), KVFLASH_OK) << kvflash_last_error();
  std::vector<float> want(c.out_size(), -7.0f);
  kvflash::AttentionTensors t = c.tensors;
  t.out = want.data();
  ASSERT_TRUE(kvflash::reference_attention(c.problem, t).ok());
  EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)), 0);
}

// Ragged query counts through the C API: ragged_q without offsets, offsets without ragged_q and
// offsets that break the rules fail with the C++ API's message (C tensors are host memory, so
// kvflash_validate_tensors reads the offsets too); describe says ragged.
TEST(CapiAttention, RaggedOffsetsAreChecked) {
  const std::vector<Case> cases = attention_cases();
  const Case& c = cases.back();
  ASSERT_TRUE(c.problem.ragged_q);
  const kvflash_problem p = to_c(c.problem);
  char text[128];
  ASSERT_EQ(kvflash_problem_describe(&p, text, sizeof text), KVFLASH_OK);
  EXPECT_NE(std::string(text).find(" ragged"), std::string::npos) << text;
  std::vector<float> out(c.out_size());
  const kvflash_tensors good = c.c_tensors(out.data(), nullptr);
  const kvflash_options o = cpu_options();
  ASSERT_EQ(kvflash_validate_tensors(&p, &good), KVFLASH_OK) << kvflash_last_error();

  kvflash_tensors t = good;
  t.q_offsets = nullptr;
  EXPECT_EQ(kvflash_validate_tensors(&p, &t), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("q_offsets=NULL"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_attention(&p, &t, &o), KVFLASH_ERROR_INVALID_ARGUMENT);

  kvflash_problem flat = p;
  flat.ragged_q = 0;
  EXPECT_EQ(kvflash_validate_tensors(&flat, &good), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("problem.ragged_q is off"), std::string::npos) << last_error();

  const int32_t broken[] = {0, 1, 0, 5, 17};  // sequence 1: -1 queries
  t = good;
  t.q_offsets = broken;
  kvflash::AttentionProblem cpp = c.problem;
  const kvflash::Status s = kvflash::validate_q_offsets(cpp, broken);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(kvflash_validate_tensors(&p, &t), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), s.message());
  EXPECT_EQ(kvflash_attention(&p, &t, &o), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), s.message());
}

TEST(CapiAttention, InvalidArguments) {
  const std::vector<Case> cases = attention_cases();
  const Case& c = cases[0];
  const kvflash_problem p = to_c(c.problem);
  std::vector<float> out(c.out_size());
  const kvflash_tensors good = c.c_tensors(out.data(), nullptr);
  const kvflash_options o = cpu_options();
  ASSERT_EQ(kvflash_validate_tensors(&p, &good), KVFLASH_OK) << kvflash_last_error();

  EXPECT_EQ(kvflash_attention(nullptr, &good, &o), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("problem"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_attention(&p, nullptr, &o), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensors"), std::string::npos) << last_error();
  EXPECT_EQ(kvflash_validate_tensors(&p, nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);

  kvflash_problem bad = p;
  bad.head_dim = {100, 100};
  EXPECT_EQ(kvflash_attention(&bad, &good, &o), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("head_dim"), std::string::npos) << last_error();

  // A missing buffer: the C++ tensor validation's verdict, word for word.
  for (int which = 0; which < 2; ++which) {
    kvflash_tensors t = good;
    kvflash::AttentionTensors cpp = c.tensors;
    cpp.out = out.data();
    if (which == 0) {
      t.q = nullptr;
      cpp.q = nullptr;
    } else {
      t.out = nullptr;
      cpp.out = nullptr;
    }
    const kvflash::Status s = kvflash::validate(c.problem, cpp);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(kvflash_attention(&p, &t, &o), static_cast<int>(s.error().code) + 1);
    EXPECT_EQ(last_error(), s.message());
    EXPECT_EQ(kvflash_validate_tensors(&p, &t), static_cast<int>(s.error().code) + 1);
    EXPECT_EQ(last_error(), s.message());
  }

  // Host buffers cannot go to the CUDA backend.
  kvflash_options cuda = cpu_options();
  cuda.backend = KVFLASH_BACKEND_CUDA;
  EXPECT_EQ(kvflash_attention(&p, &good, &cuda), KVFLASH_ERROR_UNSUPPORTED);
  EXPECT_NE(last_error().find("cuda"), std::string::npos) << last_error();

  // A forced kernel that does not exist fails; nothing falls back.
  kvflash_options forced = cpu_options();
  forced.force_kernel = "no.such.kernel";
  EXPECT_NE(kvflash_attention(&p, &good, &forced), KVFLASH_OK);
  EXPECT_NE(last_error().find("no.such.kernel"), std::string::npos) << last_error();
}

}  // namespace
