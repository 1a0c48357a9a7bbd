// One CUDA graph serves every length: a run() captured once for kv_capacity 40,000, replayed after
// the device kv_lens array is updated (outside the graph), must give bit for bit what an eager
// run() at the same lengths gives, and match the float64 reference; the same for a chunked-prefill
// step (256 queries onto caches of up to 8192 tokens).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "gpu_test_util.hpp"

namespace kvflash::gputest {
namespace {

constexpr double kNmseBound = 1e-5;
constexpr int64_t kCapacity = 40000;

// Two sequences, one query token, 8 query heads over 2 KV heads (GQA 4), head dim 128.
AttentionProblem one_token_problem(KvType k, KvType v, int64_t capacity) {
  AttentionProblem p;
  p.n_seqs = 2;
  p.n_q_tokens = 1;
  p.n_q_heads = 8;
  p.n_kv_heads = 2;
  p.head_dim = {128, 128};
  p.k_type = k;
  p.v_type = v;
  p.kv_capacity = capacity;
  return p;
}

TEST(CudaGraph, OneCaptureServesEveryLength) {
  KVFLASH_REQUIRE_GPU();
  const AttentionProblem p = one_token_problem(KvType::q8_0, KvType::q8_0, kCapacity);
  const Expected<Plan> pl = plan_cuda(p);
  if (!pl && pl.error().code == ErrorCode::unsupported)
    GTEST_SKIP() << "no CUDA candidate accepts " << describe(p) << ": "
                 << pl.error().message.substr(0, pl.error().message.find('\n'));
  ASSERT_TRUE(pl.ok()) << pl.error().message;

  // Every row of the capacity holds data: the cache is full, the lengths say how much counts.
  HostInputs in = make_inputs(p, {kCapacity, kCapacity}, 7);
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  void* const s = stream.handle();
  DeviceInputs dev;
  KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, s));
  DeviceOutputs graph_out, eager_out;
  KVFLASH_ASSIGN_OR_FAIL(graph_out, allocate_outputs(*pl, s));
  KVFLASH_ASSIGN_OR_FAIL(eager_out, allocate_outputs(*pl, s));
  KVFLASH_ASSERT_OK(stream.synchronize());

  const AttentionTensors graph_t = with_outputs(dev.tensors, graph_out);
  const AttentionTensors eager_t = with_outputs(dev.tensors, eager_out);
  gpu::Graph graph;
  KVFLASH_ASSIGN_OR_FAIL(graph, gpu::Graph::capture(s, [&] {
                           return run(*pl, graph_t, graph_out.workspace.data(), s);
                         }));
  EXPECT_GT(graph.kernel_nodes(), 0u) << pl->kernel->name;

  std::vector<int64_t> lengths = {1, 17, 4096, 4097, 39999, 40000};
  if (quick()) std::erase_if(lengths, [](int64_t l) { return l > kQuickMaxLen && l != kCapacity; });
  for (const int64_t len : lengths) {
    SCOPED_TRACE(::testing::Message() << pl->kernel->name << ", kv_lens {" << len << ", "
                                      << std::max<int64_t>(1, len / 3) << "}");
    const std::vector<int64_t> lens = {len, std::max<int64_t>(1, len / 3)};
    KVFLASH_ASSERT_OK(gpu::copy(dev.kv_lens.data(), lens.data(), sizeof(int64_t) * 2, s));
    KVFLASH_ASSERT_OK(graph_out.poison(s));
    KVFLASH_ASSERT_OK(graph.launch(s));
    KVFLASH_ASSERT_OK(eager_out.poison(s));
    KVFLASH_ASSERT_OK(run(*pl, eager_t, eager_out.workspace.data(), s));
    HostOutputs from_graph, eager;
    KVFLASH_ASSIGN_OR_FAIL(from_graph, read_outputs(graph_out, stream));
    KVFLASH_ASSIGN_OR_FAIL(eager, read_outputs(eager_out, stream));
    KVFLASH_ASSERT_OK(gpu::last_error());
    std::string guards;
    KVFLASH_ASSIGN_OR_FAIL(guards, graph_out.check_guards(stream));
    EXPECT_EQ(guards, "");
    KVFLASH_ASSIGN_OR_FAIL(guards, eager_out.check_guards(stream));
    EXPECT_EQ(guards, "");

    EXPECT_EQ(bitwise_difference(from_graph, eager), "") << "graph replay against eager run";

    in.kv_lens = lens;
    Reference ref;
    KVFLASH_ASSIGN_OR_FAIL(ref, reference(in));
    const Comparison cmp = compare(p, from_graph, ref);
    EXPECT_EQ(cmp.non_finite, 0) << cmp.summary();
    EXPECT_LE(cmp.nmse, kNmseBound) << cmp.summary();
    EXPECT_EQ(cmp.lse_bad, 0) << cmp.summary();
  }
}

// One chunked-prefill step (256 queries per sequence, two sequences, GQA 4, q8_0 K / q4_0 V)
// captured once for kv_capacity 8192 before it ever ran eagerly, then replayed at device lengths
// from the queries alone (a fresh prompt) to the capacity, off and on tile boundaries: each replay
// bit for bit the eager run at the same lengths, and both the float64 reference.
TEST(CudaGraph, OneCaptureServesEveryPrefillLength) {
  KVFLASH_REQUIRE_GPU();
  KVFLASH_REQUIRE_PAIR(KvType::q8_0, KvType::q4_0);
  constexpr int64_t kPrefillCapacity = 8192;
  AttentionProblem p = one_token_problem(KvType::q8_0, KvType::q4_0, kPrefillCapacity);
  p.n_q_tokens = 256;
  const Expected<Plan> pl = plan_cuda(p);
  if (!pl && pl.error().code == ErrorCode::unsupported)
    GTEST_SKIP() << "no CUDA candidate accepts " << describe(p) << ": "
                 << pl.error().message.substr(0, pl.error().message.find('\n'));
  ASSERT_TRUE(pl.ok()) << pl.error().message;

  HostInputs in = make_inputs(p, {kPrefillCapacity, kPrefillCapacity}, 17);
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  void* const s = stream.handle();
  DeviceInputs dev;
  KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, s));
  DeviceOutputs graph_out, eager_out;
  KVFLASH_ASSIGN_OR_FAIL(graph_out, allocate_outputs(*pl, s));
  KVFLASH_ASSIGN_OR_FAIL(eager_out, allocate_outputs(*pl, s));
  KVFLASH_ASSERT_OK(stream.synchronize());

  const AttentionTensors graph_t = with_outputs(dev.tensors, graph_out);
  const AttentionTensors eager_t = with_outputs(dev.tensors, eager_out);
  gpu::Graph graph;
  KVFLASH_ASSIGN_OR_FAIL(graph, gpu::Graph::capture(s, [&] {
                           return run(*pl, graph_t, graph_out.workspace.data(), s);
                         }));
  EXPECT_GT(graph.kernel_nodes(), 0u) << pl->kernel->name;

  const std::vector<std::vector<int64_t>> steps = {{256, 256},   {257, 300},   {1000, 511},
                                                   {4096, 4097}, {8191, 2049}, {8192, 8192}};
  for (const std::vector<int64_t>& lens : steps) {
    SCOPED_TRACE(::testing::Message()
                 << pl->kernel->name << ", kv_lens {" << lens[0] << ", " << lens[1] << "}");
    KVFLASH_ASSERT_OK(gpu::copy(dev.kv_lens.data(), lens.data(), sizeof(int64_t) * 2, s));
    KVFLASH_ASSERT_OK(graph_out.poison(s));
    KVFLASH_ASSERT_OK(graph.launch(s));
    KVFLASH_ASSERT_OK(eager_out.poison(s));
    KVFLASH_ASSERT_OK(run(*pl, eager_t, eager_out.workspace.data(), s));
    HostOutputs from_graph, eager;
    KVFLASH_ASSIGN_OR_FAIL(from_graph, read_outputs(graph_out, stream));
    KVFLASH_ASSIGN_OR_FAIL(eager, read_outputs(eager_out, stream));
    KVFLASH_ASSERT_OK(gpu::last_error());
    std::string guards;
    KVFLASH_ASSIGN_OR_FAIL(guards, graph_out.check_guards(stream));
    EXPECT_EQ(guards, "");
    KVFLASH_ASSIGN_OR_FAIL(guards, eager_out.check_guards(stream));
    EXPECT_EQ(guards, "");

    EXPECT_EQ(bitwise_difference(from_graph, eager), "") << "graph replay against eager run";

    in.kv_lens = lens;
    Reference ref;
    KVFLASH_ASSIGN_OR_FAIL(ref, parallel_reference(in));
    const Comparison cmp = compare(p, from_graph, ref);
    EXPECT_EQ(cmp.non_finite, 0) << cmp.summary();
    EXPECT_EQ(cmp.empty_rows_not_zero, 0) << cmp.summary();
    EXPECT_LE(cmp.nmse, kNmseBound) << cmp.summary();
    EXPECT_EQ(cmp.lse_bad, 0) << cmp.summary();
  }
}

// The workspace is scratch: a pool hands the same bytes to other kernels between calls, so no
// contents of it may change a result (a kernel that kept state there, say split counters, would
// need it zeroed or tagged). Back-to-back runs over the same workspace, a workspace of zeros and
// one of 0xFF bytes, and one that another problem's runs used in between, all give bit for bit
// the first run's output.
TEST(CudaGraph, AnyWorkspaceContentsGiveTheSameResult) {
  KVFLASH_REQUIRE_GPU();
  KVFLASH_REQUIRE_PAIR(KvType::q4_0, KvType::q8_0);
  const AttentionProblem p = one_token_problem(KvType::q4_0, KvType::q8_0, 5000);
  AttentionProblem other = one_token_problem(KvType::f16, KvType::f16, 5000);
  other.n_q_heads = 16;  // GQA 8
  const Expected<Plan> pl = plan_cuda(p);
  const Expected<Plan> pl_other = plan_cuda(other);
  if ((!pl && pl.error().code == ErrorCode::unsupported) ||
      (!pl_other && pl_other.error().code == ErrorCode::unsupported))
    GTEST_SKIP() << "no CUDA candidate for the problems";
  ASSERT_TRUE(pl.ok()) << pl.error().message;
  ASSERT_TRUE(pl_other.ok()) << pl_other.error().message;
  ASSERT_GT(pl->n_splits, 1) << "the case must split its keys";

  const HostInputs in = make_inputs(p, {5000, 3001}, 11);
  const HostInputs in_other = make_inputs(other, {4999, 77}, 12);
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  void* const s = stream.handle();
  DeviceInputs dev, dev_other;
  KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, s));
  KVFLASH_ASSIGN_OR_FAIL(dev_other, stage(in_other, s));
  // One workspace for both problems, as a pool would hand it out.
  Plan big = *pl;
  big.workspace_bytes = std::max(pl->workspace_bytes, pl_other->workspace_bytes);
  DeviceOutputs o, o_other;
  KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(big, s));
  KVFLASH_ASSIGN_OR_FAIL(o_other, allocate_outputs(*pl_other, s));
  const AttentionTensors t = with_outputs(dev.tensors, o);
  const AttentionTensors t_other = with_outputs(dev_other.tensors, o_other);
  void* const ws = o.workspace.data();

  KVFLASH_ASSERT_OK(run(*pl, t, ws, s));
  HostOutputs first;
  KVFLASH_ASSIGN_OR_FAIL(first, read_outputs(o, stream));
  Reference ref;
  KVFLASH_ASSIGN_OR_FAIL(ref, reference(in));
  const Comparison cmp = compare(p, first, ref);
  EXPECT_EQ(cmp.non_finite, 0) << cmp.summary();
  EXPECT_LE(cmp.nmse, kNmseBound) << cmp.summary();

  const auto again = [&](const char* what, auto&& before) {
    SCOPED_TRACE(what);
    KVFLASH_ASSERT_OK(o.out.poison(s));
    KVFLASH_ASSERT_OK(o.lse.poison(s));
    before();
    KVFLASH_ASSERT_OK(run(*pl, t, ws, s));
    HostOutputs got;
    KVFLASH_ASSIGN_OR_FAIL(got, read_outputs(o, stream));
    KVFLASH_ASSERT_OK(gpu::last_error());
    EXPECT_EQ(bitwise_difference(got, first), "");
  };
  for (int i = 0; i < 3; ++i) again("back to back", [] {});
  again("zeroed", [&] { KVFLASH_ASSERT_OK(gpu::fill(ws, 0x00, big.workspace_bytes, s)); });
  again("0xFF bytes", [&] { KVFLASH_ASSERT_OK(gpu::fill(ws, 0xFF, big.workspace_bytes, s)); });
  again("another problem's runs in between", [&] {
    for (int i = 0; i < 2; ++i) KVFLASH_ASSERT_OK(run(*pl_other, t_other, ws, s));
  });
  std::string guards;
  KVFLASH_ASSIGN_OR_FAIL(guards, o.check_guards(stream));
  EXPECT_EQ(guards, "");
}

}  // namespace
}  // namespace kvflash::gputest
