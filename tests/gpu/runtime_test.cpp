// The runtime pieces on a device: the stack pool (one cudaMalloc, then host bookkeeping only, so
// its blocks can be taken and given back inside a graph capture) and the graph runner driving the
// CUDA decode from a cold start: eager, eager, capture, then replays while the lengths grow on
// the device, bit for bit what eager runs give; a signature change in the middle of the decode
// resets it; no capture fails.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kvflash/graph_runner.hpp"
#include "kvflash/memory_report.hpp"
#include "kvflash/stack_arena.hpp"

namespace kvflash::gputest {
namespace {

using ::testing::HasSubstr;

constexpr double kNmseBound = 1e-5;

TEST(GpuPool, AllocatesFromOneReservationAndServesACapturedGraph) {
  KVFLASH_REQUIRE_GPU();
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  void* const s = stream.handle();
  constexpr size_t kCapacity = size_t{1} << 20;
  gpu::DevicePool pool;
  KVFLASH_ASSIGN_OR_FAIL(pool, gpu::DevicePool::create(kCapacity, s));
  EXPECT_GE(pool.device(), 0);
  EXPECT_EQ(pool.stream(), s);
  EXPECT_EQ(pool.capacity(), kCapacity);

  void* a = nullptr;
  void* b = nullptr;
  KVFLASH_ASSIGN_OR_FAIL(a, pool.allocate(1000));
  KVFLASH_ASSIGN_OR_FAIL(b, pool.allocate(4096));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 1024);
  EXPECT_EQ(pool.used(), 1024u + 4096u);
  const Expected<void*> too_big = pool.allocate(kCapacity);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.error().code, ErrorCode::out_of_memory);
  EXPECT_THAT(too_big.error().message, HasSubstr("gpu::DevicePool::allocate(1048576 bytes"));
  EXPECT_FALSE(pool.release(a).ok());  // not the most recent block
  KVFLASH_ASSERT_OK(pool.release(b));
  KVFLASH_ASSERT_OK(pool.release(a));
  EXPECT_EQ(pool.high_water(), 5120u);

  // Blocks taken and given back inside a capture in global mode: any CUDA allocation there would
  // fail the capture. The graph fills one block, copies it to another, and copies that out.
  constexpr size_t kBytes = 64 * 1024;
  gpu::DeviceBuffer result;
  KVFLASH_ASSIGN_OR_FAIL(result, gpu::DeviceBuffer::allocate(kBytes));
  KVFLASH_ASSERT_OK(gpu::fill(result.data(), 0, kBytes, s));
  gpu::Graph graph;
  KVFLASH_ASSIGN_OR_FAIL(graph, gpu::Graph::capture(s, [&]() -> Status {
                           ArenaScope scope(pool.arena());
                           Expected<void*> x = pool.allocate(kBytes);
                           if (!x) return x.error();
                           Expected<void*> y = pool.allocate(kBytes);
                           if (!y) return y.error();
                           if (Status st = gpu::fill(*x, 0x3C, kBytes, s); !st) return st;
                           if (Status st = gpu::copy(*y, *x, kBytes, s); !st) return st;
                           if (Status st = gpu::copy(result.data(), *y, kBytes, s); !st) return st;
                           return scope.close();
                         }));
  EXPECT_EQ(pool.used(), 0u);
  EXPECT_EQ(pool.high_water(), 2 * kBytes);
  // Another user of the same (now free) pool memory between replays does not matter to the
  // graph: it writes all it reads.
  for (int replay = 0; replay < 2; ++replay) {
    void* other = nullptr;
    KVFLASH_ASSIGN_OR_FAIL(other, pool.allocate(2 * kBytes));
    KVFLASH_ASSERT_OK(gpu::fill(other, 0x77, 2 * kBytes, s));
    KVFLASH_ASSERT_OK(pool.release(other));
    KVFLASH_ASSERT_OK(gpu::fill(result.data(), 0, kBytes, s));
    KVFLASH_ASSERT_OK(graph.launch(s));
    std::vector<uint8_t> back(kBytes, 0);
    KVFLASH_ASSERT_OK(gpu::copy(back.data(), result.data(), kBytes, s));
    KVFLASH_ASSERT_OK(stream.synchronize());
    EXPECT_EQ(back, std::vector<uint8_t>(kBytes, 0x3C)) << "replay " << replay;
  }
  KVFLASH_ASSERT_OK(gpu::last_error());

  MemoryReport report;
  report.device = pool.device();
  report.add("result", result.size());
  report.add_pool("pool", pool.arena());
  EXPECT_EQ(report.total_bytes(), kCapacity + kBytes);
  EXPECT_THAT(report.table(), HasSubstr("| pool   |"));
}

AttentionProblem decode_problem(HeadDims d, KvType k, KvType v, int64_t capacity) {
  AttentionProblem p;
  p.n_seqs = 2;
  p.n_q_tokens = 1;
  p.n_q_heads = 8;
  p.n_kv_heads = 2;
  p.head_dim = d;
  p.k_type = k;
  p.v_type = v;
  p.kv_capacity = capacity;
  return p;
}

// One decode of `steps` tokens through the runner: before each step the lengths grow by one
// token on the device (outside the step, as an engine appends K/V), then the runner's step and
// an eager run() into separate outputs must agree bit for bit; the last step is also checked
// against the float64 reference. The runner's step takes its workspace from the pool.
void decode_through_runner(gpu::GraphRunner& runner, gpu::DevicePool& pool, const Plan& pl,
                           int64_t first_len, const std::vector<StepKind>& want,
                           const gpu::Stream& stream) {
  const AttentionProblem& p = pl.problem;
  void* const s = stream.handle();
  HostInputs in = make_inputs(p, {p.kv_capacity, p.kv_capacity}, 11);
  DeviceInputs dev;
  KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, s));
  DeviceOutputs runner_out, eager_out;
  KVFLASH_ASSIGN_OR_FAIL(runner_out, allocate_outputs(pl, s));
  KVFLASH_ASSIGN_OR_FAIL(eager_out, allocate_outputs(pl, s));
  const AttentionTensors runner_t = with_outputs(dev.tensors, runner_out);
  const AttentionTensors eager_t = with_outputs(dev.tensors, eager_out);
  const ShapeSignature sig = ShapeSignature::of(p);

  auto step = [&]() -> Status {
    ArenaScope scope(pool.arena());
    Expected<void*> workspace = pool.allocate(pl.workspace_bytes);
    if (!workspace) return workspace.error();
    if (Status st = run(pl, runner_t, *workspace, s); !st) return st;
    return scope.close();
  };

  std::vector<int64_t> lens;
  for (size_t i = 0; i < want.size(); ++i) {
    const int64_t len = first_len + static_cast<int64_t>(i);
    lens = {len, std::max<int64_t>(1, len / 3)};
    SCOPED_TRACE(::testing::Message() << describe(p) << ", step " << i << ", kv_lens {" << lens[0]
                                      << ", " << lens[1] << "}");
    KVFLASH_ASSERT_OK(gpu::copy(dev.kv_lens.data(), lens.data(), sizeof(int64_t) * 2, s));
    KVFLASH_ASSERT_OK(runner_out.poison(s));
    const Expected<StepKind> kind = runner.step(sig, step);
    ASSERT_TRUE(kind.ok()) << kind.error().message;
    EXPECT_EQ(to_string(*kind), std::string(to_string(want[i])));
    EXPECT_EQ(pool.used(), 0u);
    KVFLASH_ASSERT_OK(eager_out.poison(s));
    KVFLASH_ASSERT_OK(run(pl, eager_t, eager_out.workspace.data(), s));
    HostOutputs got, eager;
    KVFLASH_ASSIGN_OR_FAIL(got, read_outputs(runner_out, stream));
    KVFLASH_ASSIGN_OR_FAIL(eager, read_outputs(eager_out, stream));
    KVFLASH_ASSERT_OK(gpu::last_error());
    EXPECT_EQ(bitwise_difference(got, eager), "") << "runner step against eager run";
    if (i + 1 == want.size()) {
      in.kv_lens = lens;
      Reference ref;
      KVFLASH_ASSIGN_OR_FAIL(ref, reference(in));
      const Comparison cmp = compare(p, got, ref);
      EXPECT_EQ(cmp.non_finite, 0) << cmp.summary();
      EXPECT_LE(cmp.nmse, kNmseBound) << cmp.summary();
      EXPECT_EQ(cmp.lse_bad, 0) << cmp.summary();
    }
  }
  std::string guards;
  KVFLASH_ASSIGN_OR_FAIL(guards, runner_out.check_guards(stream));
  EXPECT_EQ(guards, "");
}

TEST(GpuGraphRunner, ColdStartCapturesReplaysAsLengthsGrowAndResetsOnANewShape) {
  KVFLASH_REQUIRE_GPU();
  using enum KvType;
  const AttentionProblem pa = decode_problem({128, 128}, q8_0, q8_0, 4096);
  const AttentionProblem pb = decode_problem({64, 64}, q4_0, q4_0, 2048);
  const Expected<Plan> plan_a = plan_cuda(pa);
  if (!plan_a && plan_a.error().code == ErrorCode::unsupported)
    GTEST_SKIP() << "no CUDA candidate accepts " << describe(pa);
  ASSERT_TRUE(plan_a.ok()) << plan_a.error().message;
  Plan plan_b;
  KVFLASH_ASSIGN_OR_FAIL(plan_b, plan_cuda(pb));

  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  // The pool is sized for the larger workspace; each step takes it and gives it back.
  gpu::DevicePool pool;
  KVFLASH_ASSIGN_OR_FAIL(
      pool, gpu::DevicePool::create(std::max(plan_a->workspace_bytes, plan_b.workspace_bytes),
                                    stream.handle()));
  gpu::GraphRunner runner(stream.handle());
  using enum StepKind;

  // A fresh runner: its very first decode steps go eager, eager, capture, then replays while the
  // lengths grow token by token.
  const std::vector<StepKind> cold_start = {eager, eager, capture, replay, replay, replay};
  ASSERT_NO_FATAL_FAILURE(decode_through_runner(runner, pool, *plan_a, 4000, cold_start, stream));
  EXPECT_EQ(runner.counters(), (GraphCounters{2, 1, 3, 0, 0}));
  EXPECT_TRUE(runner.has_graph());
  EXPECT_GT(runner.kernel_nodes(), 0u);

  // Mid-decode, another head dim, types and capacity: reset, then the same cold start.
  const std::vector<StepKind> after_reset = {eager, eager, capture, replay};
  ASSERT_NO_FATAL_FAILURE(decode_through_runner(runner, pool, plan_b, 1500, after_reset, stream));
  EXPECT_EQ(runner.counters(), (GraphCounters{4, 2, 4, 1, 0}));
  EXPECT_EQ(pool.high_water(), std::max(plan_a->workspace_bytes, plan_b.workspace_bytes));
}

}  // namespace
}  // namespace kvflash::gputest
