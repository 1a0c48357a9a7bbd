// The C API's engine path: plan/run on host buffers (same bits as kvflash_attention and the C++
// plan/run), a caller's parallel-for from C, the argument checks of every plan, device and KV
// cache entry point, and what the CUDA services answer where no device (or no CUDA build) is.
// Their device behaviour is tested on the GPU (tests/gpu/capi_gpu_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "capi/capi_test_util.hpp"
#include "kvflash/device.hpp"
#include "kvflash/kv_cache.hpp"
#include "kvflash/kvflash.h"
#include "kvflash/parallel.hpp"

namespace {

using kvflash::capi_test::last_error;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// One sequence pair over a host q8_0 / f16 cache.
struct HostCall {
  kvflash_problem p = kvflash_problem_default();
  std::vector<float> q, out;
  std::vector<uint8_t> k, v;
  std::vector<int64_t> lens;
  kvflash_tensors t{};
  HostCall() {
    p.n_seqs = 2;
    p.n_q_tokens = 2;
    p.n_q_heads = 8;
    p.n_kv_heads = 2;
    p.head_dim = {64, 64};
    p.k_type = KVFLASH_TYPE_Q8_0;
    p.v_type = KVFLASH_TYPE_F16;
    p.kv_capacity = 300;
    std::mt19937_64 rng(11);
    std::normal_distribution<float> g;
    const size_t rows = size_t(p.n_seqs) * size_t(p.kv_capacity) * size_t(p.n_kv_heads);
    std::vector<float> src(rows * 64);
    auto fill = [&](kvflash_type type, std::vector<uint8_t>& dst) {
      for (float& x : src) x = g(rng);
      const size_t rb = kvflash_row_size(type, 64);
      dst.resize(rows * rb);
      for (size_t r = 0; r < rows; ++r)
        EXPECT_EQ(kvflash_quantize(type, src.data() + r * 64, 64, dst.data() + r * rb), KVFLASH_OK);
    };
    fill(p.k_type, k);
    fill(p.v_type, v);
    q.resize(size_t(p.n_seqs) * size_t(p.n_q_tokens) * size_t(p.n_q_heads) * 64);
    for (float& x : q) x = g(rng);
    out.assign(q.size(), NAN);
    lens = {300, 170};
    t.q = q.data();
    t.out = out.data();
    t.kv_lens = lens.data();
    EXPECT_EQ(kvflash_kv_tensor_contiguous(k.data(), p.k_type, 64, 2, p.kv_capacity, &t.k),
              KVFLASH_OK);
    EXPECT_EQ(kvflash_kv_tensor_contiguous(v.data(), p.v_type, 64, 2, p.kv_capacity, &t.v),
              KVFLASH_OK);
  }
};

kvflash_options cpu_options(int32_t threads) {
  kvflash_options o = kvflash_options_default();
  o.backend = KVFLASH_BACKEND_CPU;
  o.n_threads = threads;
  o.ignore_environment = 1;
  return o;
}

TEST(CApiPlan, PlanRunGivesTheBitsOfKvflashAttention) {
  HostCall a;
  const kvflash_options o = cpu_options(2);
  ASSERT_EQ(kvflash_attention(&a.p, &a.t, &o), KVFLASH_OK) << last_error();
  const std::vector<float> want = a.out;

  kvflash_plan* plan = nullptr;
  ASSERT_EQ(kvflash_plan_create(&a.p, &o, &plan), KVFLASH_OK) << last_error();
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(kvflash_plan_backend(plan), KVFLASH_BACKEND_CPU);
  EXPECT_TRUE(contains(kvflash_plan_kernel_name(plan), "cpu.decode"))
      << kvflash_plan_kernel_name(plan);
  kvflash_problem back{};
  ASSERT_EQ(kvflash_plan_problem(plan, &back), KVFLASH_OK);
  EXPECT_EQ(std::memcmp(&back, &a.p, sizeof back), 0);
  EXPECT_EQ(kvflash_plan_check_tensors(plan, &a.t), KVFLASH_OK) << last_error();
  std::vector<uint8_t> ws(kvflash_plan_workspace_size(plan));
  for (int rep = 0; rep < 3; ++rep) {  // one plan, many runs
    std::fill(a.out.begin(), a.out.end(), NAN);
    ASSERT_EQ(kvflash_run(plan, &a.t, ws.data(), nullptr), KVFLASH_OK) << last_error();
    EXPECT_EQ(std::memcmp(a.out.data(), want.data(), want.size() * sizeof(float)), 0);
  }
  // A workspace-less run of a plan that needs one is refused, naming it.
  if (!ws.empty()) {
    EXPECT_EQ(kvflash_run(plan, &a.t, nullptr, nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(last_error(), "workspace")) << last_error();
  }
  // A length outside the capacity: read on the host by a CPU plan, refused.
  a.lens[1] = 301;
  EXPECT_EQ(kvflash_run(plan, &a.t, ws.data(), nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "kv_lens")) << last_error();
  kvflash_plan_destroy(plan);
  kvflash_plan_destroy(nullptr);
}

// A C engine's parallel-for: the tasks on the calling thread, last first, slots checked.
struct SerialFor {
  int calls = 0;
  int bad_slots = 0;
  int32_t slots = 0;
};
extern "C" void serial_for(void* user, int64_t n_tasks, int32_t n_threads, kvflash_task_fn task,
                           void* task_ctx) {
  auto* s = static_cast<SerialFor*>(user);
  ++s->calls;
  if (n_threads > s->slots) ++s->bad_slots;
  for (int64_t i = n_tasks - 1; i >= 0; --i) task(task_ctx, i, static_cast<int32_t>(i % n_threads));
}

TEST(CApiPlan, CallersParallelForRunsTheLoops) {
  HostCall a;
  SerialFor sf;
  sf.slots = 3;
  kvflash_options o = cpu_options(0);
  o.parallel_for = serial_for;
  o.parallel_for_user = &sf;
  o.parallel_for_threads = 3;
  kvflash_plan* plan = nullptr;
  ASSERT_EQ(kvflash_plan_create(&a.p, &o, &plan), KVFLASH_OK) << last_error();
  std::vector<uint8_t> ws(kvflash_plan_workspace_size(plan));
  ASSERT_EQ(kvflash_run(plan, &a.t, ws.data(), nullptr), KVFLASH_OK) << last_error();
  EXPECT_GT(sf.calls, 0);
  EXPECT_EQ(sf.bad_slots, 0);
  for (float x : a.out) ASSERT_TRUE(std::isfinite(x));
  kvflash_plan_destroy(plan);

  // The same slots on kvflash's own threads: the same bits (a ThreadPool of 3 slots).
  const std::vector<float> serial = a.out;
  kvflash::ThreadPool pool(3);
  const kvflash::ParallelFor pf = pool.as_parallel_for();
  o.parallel_for = pf.run;
  o.parallel_for_user = pf.user;
  ASSERT_EQ(kvflash_attention(&a.p, &a.t, &o), KVFLASH_OK) << last_error();
  EXPECT_EQ(std::memcmp(a.out.data(), serial.data(), serial.size() * sizeof(float)), 0);

  // Set without its slot count, or a negative spin: refused, naming the field.
  o.parallel_for_threads = 0;
  EXPECT_EQ(kvflash_plan_create(&a.p, &o, &plan), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(plan, nullptr);
  EXPECT_TRUE(contains(last_error(), "options.parallel_for_threads=0")) << last_error();
  o = cpu_options(0);
  o.spin_us = -5;
  EXPECT_EQ(kvflash_plan_create(&a.p, &o, &plan), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "options.spin_us=-5")) << last_error();
}

TEST(CApiPlan, NullArgumentsAreErrorsNotCrashes) {
  HostCall a;
  kvflash_plan* plan = reinterpret_cast<kvflash_plan*>(&a);  // must be reset to NULL on failure
  EXPECT_EQ(kvflash_plan_create(nullptr, nullptr, &plan), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(plan, nullptr);
  EXPECT_EQ(kvflash_plan_create(&a.p, nullptr, nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_run(nullptr, &a.t, nullptr, nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "plan is NULL")) << last_error();
  EXPECT_EQ(kvflash_plan_check_tensors(nullptr, &a.t), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_plan_problem(nullptr, nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_plan_workspace_size(nullptr), 0u);
  EXPECT_EQ(kvflash_plan_backend(nullptr), KVFLASH_BACKEND_AUTO);
  EXPECT_STREQ(kvflash_plan_kernel_name(nullptr), "");
  const kvflash_options o = cpu_options(1);
  ASSERT_EQ(kvflash_plan_create(&a.p, &o, &plan), KVFLASH_OK) << last_error();
  EXPECT_EQ(kvflash_run(plan, nullptr, nullptr, nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);
  kvflash_tensors bad = a.t;
  bad.q = nullptr;
  EXPECT_EQ(kvflash_plan_check_tensors(plan, &bad), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "q")) << last_error();
  kvflash_plan_destroy(plan);
  // An unsupported problem: the registry's explanation.
  kvflash_problem p = a.p;
  p.n_q_tokens = 100;  // prefill-sized: the decode kernels' guard says why
  kvflash_options cpu_only = cpu_options(1);
  cpu_only.force_kernel = "cpu.decode.portable";
  EXPECT_EQ(kvflash_plan_create(&p, &cpu_only, &plan), KVFLASH_ERROR_UNSUPPORTED);
  EXPECT_TRUE(contains(last_error(), "decode_q_tokens")) << last_error();
}

// ---- CUDA services and the device KV cache where no device is --------------------------------

kvflash_kv_cache_config cache_config(const kvflash_type* k, const kvflash_type* v, int32_t layers) {
  kvflash_kv_cache_config c{};
  c.n_seqs = 2;
  c.n_kv_heads = 4;
  c.head_dim = {128, 128};
  c.n_layers = layers;
  c.k_types = k;
  c.v_types = v;
  c.capacity = 1000;
  c.page_size = 16;
  return c;
}

TEST(CApiDevice, KvCacheBytesMatchTheCppApi) {
  const kvflash_type k[2] = {KVFLASH_TYPE_Q8_0, KVFLASH_TYPE_TURBO3};
  const kvflash_type v[2] = {KVFLASH_TYPE_Q4_0, KVFLASH_TYPE_F16};
  const kvflash_kv_cache_config c = cache_config(k, v, 2);
  size_t bytes = 0;
  ASSERT_EQ(kvflash_kv_cache_bytes(&c, &bytes), KVFLASH_OK) << last_error();
  kvflash::gpu::KvCacheConfig cpp;
  cpp.n_seqs = 2;
  cpp.n_kv_heads = 4;
  cpp.head_dim = {128, 128};
  cpp.layers = {{kvflash::KvType::q8_0, kvflash::KvType::q4_0},
                {kvflash::KvType::turbo3, kvflash::KvType::f16}};
  cpp.capacity = 1000;
  cpp.page_size = 16;
  const auto want = kvflash::gpu::kv_cache_bytes(cpp);
  ASSERT_TRUE(want.ok()) << want.error().message;
  EXPECT_EQ(bytes, want->total());
}

TEST(CApiDevice, KvCacheConfigErrorsNameTheField) {
  const kvflash_type k[1] = {KVFLASH_TYPE_Q8_0};
  const kvflash_type bad[1] = {static_cast<kvflash_type>(42)};
  size_t bytes = 1;
  kvflash_kv_cache_config c = cache_config(k, k, 0);
  EXPECT_EQ(kvflash_kv_cache_bytes(&c, &bytes), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "config.n_layers=0")) << last_error();
  EXPECT_EQ(bytes, 0u);
  c = cache_config(nullptr, k, 1);
  EXPECT_EQ(kvflash_kv_cache_bytes(&c, &bytes), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "config.k_types is NULL")) << last_error();
  c = cache_config(k, bad, 1);
  EXPECT_EQ(kvflash_kv_cache_bytes(&c, &bytes), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "config.v_types[0]=42")) << last_error();
  EXPECT_EQ(kvflash_kv_cache_bytes(nullptr, &bytes), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_kv_cache_bytes(&c, nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);
  // Every cache entry point refuses a NULL cache.
  EXPECT_EQ(kvflash_kv_cache_begin_step(nullptr, 1, nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "cache is NULL")) << last_error();
  EXPECT_EQ(kvflash_kv_cache_append(nullptr, 0, nullptr, nullptr, 1, nullptr),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  kvflash_problem p;
  kvflash_tensors t;
  int32_t count = 0;
  EXPECT_EQ(kvflash_kv_cache_problem(nullptr, 0, 32, 1, &p), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_kv_cache_tensors(nullptr, 0, nullptr, nullptr, &t),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_kv_cache_set_lengths(nullptr, nullptr, 0, nullptr),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_kv_cache_set_page_table(nullptr, nullptr, 0, nullptr),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_kv_cache_full_sequences(nullptr, nullptr, 0, &count, nullptr),
            KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_kv_cache_clear_full(nullptr, nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvflash_kv_cache_lengths(nullptr), nullptr);
  kvflash_kv_cache_destroy(nullptr);
}

TEST(CApiDevice, WithoutADeviceEveryServiceSaysSo) {
  if (kvflash_cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  void* ptr = reinterpret_cast<void*>(1);
  EXPECT_NE(kvflash_cuda_malloc(&ptr, 64), KVFLASH_OK);
  EXPECT_EQ(ptr, nullptr);
  EXPECT_FALSE(last_error().empty());
  void* stream = reinterpret_cast<void*>(1);
  EXPECT_NE(kvflash_cuda_stream_create(&stream), KVFLASH_OK);
  EXPECT_EQ(stream, nullptr);
  EXPECT_EQ(kvflash_cuda_free(nullptr), KVFLASH_OK);
  EXPECT_EQ(kvflash_cuda_stream_destroy(nullptr), KVFLASH_OK);
  float f[32] = {};
  uint8_t b[34] = {};
  EXPECT_NE(kvflash_cuda_quantize_rows(KVFLASH_TYPE_Q8_0, f, 1, 32, b, nullptr), KVFLASH_OK);
  EXPECT_NE(kvflash_cuda_dequantize_rows(KVFLASH_TYPE_Q8_0, b, 1, 32, f, nullptr), KVFLASH_OK);
  EXPECT_TRUE(contains(last_error(), "dequantize_rows")) << last_error();
  const kvflash_type k[1] = {KVFLASH_TYPE_Q8_0};
  const kvflash_kv_cache_config c = cache_config(k, k, 1);
  kvflash_kv_cache* cache = reinterpret_cast<kvflash_kv_cache*>(1);
  EXPECT_NE(kvflash_kv_cache_create(&c, nullptr, &cache), KVFLASH_OK);
  EXPECT_EQ(cache, nullptr);
  EXPECT_FALSE(last_error().empty());
  // A CPU-only build names the missing backend.
#if !KVFLASH_TEST_HAS_CUDA
  EXPECT_EQ(kvflash_cuda_malloc(&ptr, 64), KVFLASH_ERROR_UNSUPPORTED);
  EXPECT_TRUE(contains(last_error(), "without CUDA")) << last_error();
#endif
}

}  // namespace
