// The C API's CUDA path (kvflash.h): a device KV cache made, filled and attended through C
// calls gives the C++ API's bits on the same cache, and one decode step of C calls
// (begin_step, append, run) captured into a CUDA graph replays at growing lengths with the eager
// run's bits: the C hot path allocates nothing and never synchronizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kvflash/kv_cache.hpp"
#include "kvflash/kvflash.h"

namespace kvflash::gputest {
namespace {

#define C_OK(call) ASSERT_EQ((call), KVFLASH_OK) << #call << ": " << kvflash_last_error()

std::vector<float> gaussian(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = g(rng);
  return x;
}

// Device buffers freed through the C API.
struct CBuffer {
  void* ptr = nullptr;
  CBuffer() = default;
  CBuffer(const CBuffer&) = delete;
  CBuffer& operator=(const CBuffer&) = delete;
  ~CBuffer() { kvflash_cuda_free(ptr); }
};

TEST(GpuCApi, KvCacheAndPlanRunFromCGiveTheCppBitsAndReplayFromAGraph) {
  KVFLASH_REQUIRE_GPU();
  KVFLASH_REQUIRE_PAIR(KvType::q8_0, KvType::q4_0);
  constexpr int32_t kSeqs = 2, kHeads = 32, kKvHeads = 8, kDim = 128, kPrompt = 1500;
  constexpr int64_t kCapacity = 2048;
  void* stream = nullptr;
  C_OK(kvflash_cuda_stream_create(&stream));
  for (const int32_t page_size : {0, 16}) {
    SCOPED_TRACE(page_size == 0 ? "contiguous" : "paged16");
    const kvflash_type kt[1] = {KVFLASH_TYPE_Q8_0}, vt[1] = {KVFLASH_TYPE_Q4_0};
    kvflash_kv_cache_config cfg{};
    cfg.n_seqs = kSeqs;
    cfg.n_kv_heads = kKvHeads;
    cfg.head_dim = {kDim, kDim};
    cfg.n_layers = 1;
    cfg.k_types = kt;
    cfg.v_types = vt;
    cfg.capacity = kCapacity;
    cfg.page_size = page_size;
    kvflash_kv_cache* cache = nullptr;
    C_OK(kvflash_kv_cache_create(&cfg, stream, &cache));

    // The prompt: kPrompt tokens per sequence, one step.
    const size_t kv_floats = size_t(kSeqs) * kPrompt * kKvHeads * kDim;
    const std::vector<float> k = gaussian(kv_floats, 1), v = gaussian(kv_floats, 2);
    CBuffer dk, dv, dq, dout, dout2, dws;
    C_OK(kvflash_cuda_malloc(&dk.ptr, kv_floats * 4));
    C_OK(kvflash_cuda_malloc(&dv.ptr, kv_floats * 4));
    C_OK(kvflash_cuda_copy(dk.ptr, k.data(), kv_floats * 4, stream));
    C_OK(kvflash_cuda_copy(dv.ptr, v.data(), kv_floats * 4, stream));
    C_OK(kvflash_kv_cache_begin_step(cache, kPrompt, stream));
    C_OK(kvflash_kv_cache_append(cache, 0, static_cast<float*>(dk.ptr), static_cast<float*>(dv.ptr),
                                 kPrompt, stream));

    const size_t q_floats = size_t(kSeqs) * kHeads * kDim;
    const std::vector<float> q = gaussian(q_floats, 3);
    C_OK(kvflash_cuda_malloc(&dq.ptr, q_floats * 4));
    C_OK(kvflash_cuda_malloc(&dout.ptr, q_floats * 4));
    C_OK(kvflash_cuda_malloc(&dout2.ptr, q_floats * 4));
    C_OK(kvflash_cuda_copy(dq.ptr, q.data(), q_floats * 4, stream));

    kvflash_problem p;
    C_OK(kvflash_kv_cache_problem(cache, 0, kHeads, 1, &p));
    kvflash_options o = kvflash_options_default();
    o.backend = KVFLASH_BACKEND_CUDA;
    kvflash_plan* plan = nullptr;
    C_OK(kvflash_plan_create(&p, &o, &plan));
    EXPECT_EQ(kvflash_plan_backend(plan), KVFLASH_BACKEND_CUDA);
    const size_t ws = kvflash_plan_workspace_size(plan);
    if (ws > 0) {
      C_OK(kvflash_cuda_malloc(&dws.ptr, ws));
    }
    kvflash_tensors t;
    C_OK(kvflash_kv_cache_tensors(cache, 0, static_cast<float*>(dq.ptr),
                                  static_cast<float*>(dout.ptr), &t));
    C_OK(kvflash_plan_check_tensors(plan, &t));
    C_OK(kvflash_run(plan, &t, dws.ptr, stream));

    // The C++ API on the same device cache's tensors (the C wrapper's pointers): same bits.
    AttentionTensors ct;
    ct.q = t.q;
    ct.out = static_cast<float*>(dout2.ptr);
    ct.kv_lens = t.kv_lens;
    ct.k = {t.k.data,       t.k.stride_token,  t.k.stride_head, t.k.stride_seq,
            t.k.page_table, t.k.pages_per_seq, t.k.n_pages,     t.k.stride_page};
    ct.v = {t.v.data,       t.v.stride_token,  t.v.stride_head, t.v.stride_seq,
            t.v.page_table, t.v.pages_per_seq, t.v.n_pages,     t.v.stride_page};
    AttentionProblem cp;
    cp.n_seqs = kSeqs;
    cp.n_q_heads = kHeads;
    cp.n_kv_heads = kKvHeads;
    cp.k_type = KvType::q8_0;
    cp.v_type = KvType::q4_0;
    cp.kv_capacity = kCapacity;
    cp.page_size = page_size;
    PlanOptions po;
    po.select.backend = Backend::cuda;
    Expected<Plan> cpl = kvflash::plan(cp, po);
    ASSERT_TRUE(cpl.ok()) << cpl.error().message;
    EXPECT_EQ(cpl->kernel->name, kvflash_plan_kernel_name(plan));
    std::vector<uint8_t> ws2(cpl->workspace_bytes);
    CBuffer dws2;
    if (!ws2.empty()) {
      C_OK(kvflash_cuda_malloc(&dws2.ptr, ws2.size()));
    }
    KVFLASH_ASSERT_OK(kvflash::run(*cpl, ct, dws2.ptr, stream));
    std::vector<float> a(q_floats), b(q_floats);
    C_OK(kvflash_cuda_copy(a.data(), dout.ptr, q_floats * 4, stream));
    C_OK(kvflash_cuda_copy(b.data(), dout2.ptr, q_floats * 4, stream));
    C_OK(kvflash_cuda_stream_synchronize(stream));
    EXPECT_EQ(std::memcmp(a.data(), b.data(), q_floats * 4), 0);
    for (float x : a) ASSERT_TRUE(std::isfinite(x));

    // One decode step of C calls captured into a graph (global capture mode: an allocation or
    // a synchronizing call in them fails the capture), replayed at growing lengths; each replay
    // gives the eager C run's bits at that length.
    std::vector<float> step_kv = gaussian(size_t(kSeqs) * kKvHeads * kDim, 4);
    C_OK(kvflash_cuda_copy(dk.ptr, step_kv.data(), step_kv.size() * 4, stream));
    C_OK(kvflash_cuda_copy(dv.ptr, step_kv.data(), step_kv.size() * 4, stream));
    int captured_status = -1;
    gpu::Graph graph;
    KVFLASH_ASSIGN_OR_FAIL(
        graph, gpu::Graph::capture(stream, [&] {
          int s = kvflash_kv_cache_begin_step(cache, 1, stream);
          if (s == KVFLASH_OK)
            s = kvflash_kv_cache_append(cache, 0, static_cast<float*>(dk.ptr),
                                        static_cast<float*>(dv.ptr), 1, stream);
          if (s == KVFLASH_OK) s = kvflash_run(plan, &t, dws.ptr, stream);
          captured_status = s;
          return s == KVFLASH_OK ? Status{}
                                 : Status(Error{ErrorCode::backend_error, kvflash_last_error()});
        }));
    ASSERT_EQ(captured_status, KVFLASH_OK);
    kvflash_tensors t2 = t;
    t2.out = static_cast<float*>(dout2.ptr);
    for (int r = 0; r < 5; ++r) {
      KVFLASH_ASSERT_OK(graph.launch(stream));
      C_OK(kvflash_run(plan, &t2, dws.ptr, stream));
      C_OK(kvflash_cuda_copy(a.data(), dout.ptr, q_floats * 4, stream));
      C_OK(kvflash_cuda_copy(b.data(), dout2.ptr, q_floats * 4, stream));
      C_OK(kvflash_cuda_stream_synchronize(stream));
      EXPECT_EQ(std::memcmp(a.data(), b.data(), q_floats * 4), 0) << "replay " << r;
    }
    std::vector<int64_t> lens(kSeqs);
    C_OK(kvflash_cuda_copy(lens.data(), kvflash_kv_cache_lengths(cache), lens.size() * 8, stream));
    C_OK(kvflash_cuda_stream_synchronize(stream));
    EXPECT_EQ(lens[0], kPrompt + 5);
    EXPECT_EQ(lens[1], kPrompt + 5);
    int32_t full[kSeqs], n_full = -1;
    C_OK(kvflash_kv_cache_full_sequences(cache, full, kSeqs, &n_full, stream));
    EXPECT_EQ(n_full, 0);

    kvflash_plan_destroy(plan);
    kvflash_kv_cache_destroy(cache);
  }
  C_OK(kvflash_cuda_stream_destroy(stream));
}

}  // namespace
}  // namespace kvflash::gputest
