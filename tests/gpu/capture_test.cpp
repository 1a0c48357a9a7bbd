// run() of every CUDA candidate is legal under stream capture in global mode: no allocation, no
// synchronizing call (either would fail the capture). Each candidate is forced by name on every
// representative problem it accepts (head dims 64 to 576/512, every family of K/V format, split
// and unsplit, so the split reducer of each V family runs too); each plan is captured before any
// eager run of it (a cold start), replayed, then run eagerly: replay and eager run must agree bit
// for bit, and both match the float64 reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"

namespace kvflash::gputest {
namespace {

constexpr double kNmseBound = 1e-5;

AttentionProblem problem(int32_t q_tokens, int32_t q_heads, int32_t kv_heads, HeadDims d, KvType k,
                         KvType v, int64_t kv_len, int32_t n_seqs = 1) {
  AttentionProblem p;
  p.n_seqs = n_seqs;
  p.n_q_tokens = q_tokens;
  p.n_q_heads = q_heads;
  p.n_kv_heads = kv_heads;
  p.head_dim = d;
  p.k_type = k;
  p.v_type = v;
  p.kv_capacity = kv_len;
  return p;
}

// What engines run most, plus the corners of the decode space. Every CUDA candidate must accept at
// least one of these.
std::vector<AttentionProblem> representative_problems() {
  using enum KvType;
  return {
      problem(1, 32, 8, {128, 128}, q8_0, q8_0, 4096),      // decode
      problem(1, 32, 8, {128, 128}, f16, f16, 4096),        //
      problem(1, 32, 8, {128, 128}, bf16, bf16, 4096),      //
      problem(4, 32, 8, {128, 128}, q4_0, q4_0, 4096),      // speculative decode
      problem(8, 32, 4, {128, 128}, q8_0, q4_0, 4096),      //
      problem(1, 16, 2, {128, 128}, turbo3, turbo3, 4096),  // rotated K and V
      problem(1, 16, 2, {128, 128}, q8_0, turbo4, 4096),    // mixed, rotated V only
      problem(1, 8, 2, {64, 64}, f16, f16, 2048),           //
      problem(1, 8, 2, {80, 80}, q8_0, q8_0, 2048),         // head dim not a power of two
      problem(1, 8, 2, {256, 256}, f16, f16, 2048),         //
      problem(1, 16, 4, {192, 128}, f16, f16, 2048),        // Dk != Dv
      problem(2, 16, 4, {192, 128}, q8_0, q8_0, 2048),      //
      problem(1, 16, 1, {576, 512}, f16, f16, 2048),        // MLA
      problem(1, 16, 1, {576, 512}, q8_0, q8_0, 2048),      //
      problem(1, 8, 2, {128, 128}, f16, f16, 64, 4),        // a batch, one split (no reducer)
      problem(1, 8, 2, {128, 128}, turbo3, turbo3, 64, 4),  //
      problem(128, 8, 2, {128, 128}, f16, f16, 512),        // prefill
      problem(128, 8, 2, {128, 128}, q8_0, q8_0, 512),      //
  };
}

TEST(CudaCapture, EveryCandidateRunsUnderGlobalCapture) {
  KVFLASH_REQUIRE_GPU();
  std::vector<std::string> names;
  for (const KernelCandidate& k : kernel_candidates())
    if (k.backend == Backend::cuda) names.push_back(k.name);
  if (names.empty()) GTEST_SKIP() << "this build registers no CUDA candidate";

  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  void* const s = stream.handle();
  uint64_t seed = 11;
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    int accepted = 0;
    std::set<std::string> split_v_types;  // V types whose split reducer ran
    bool unsplit = false;
    for (AttentionProblem p : representative_problems()) {
      SelectOptions opt;
      opt.backend = Backend::cuda;
      opt.force = name;
      opt.read_environment = false;
      if (!select_kernel(p, opt)) continue;
      ++accepted;
      p.kv_capacity = quick_len(p.kv_capacity);
      Plan pl;
      KVFLASH_ASSIGN_OR_FAIL(pl, plan_cuda(p, name));
      SCOPED_TRACE(describe(p) + ", " + std::to_string(pl.n_splits) + " splits");
      if (pl.n_splits > 1)
        split_v_types.insert(std::string(to_string(p.v_type)));
      else
        unsplit = true;

      // Sequences one token short of the capacity and shorter: lengths come from the device array.
      std::vector<int64_t> filled;
      for (int32_t i = 0; i < p.n_seqs; ++i)
        filled.push_back(std::max<int64_t>(1, p.kv_capacity - 1 - i * (p.kv_capacity / 3)));
      const HostInputs in = make_inputs(p, filled, seed++);
      Reference ref;
      KVFLASH_ASSIGN_OR_FAIL(ref, reference(in));
      DeviceInputs dev;
      KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, s));
      DeviceOutputs graph_out, eager_out;
      KVFLASH_ASSIGN_OR_FAIL(graph_out, allocate_outputs(pl, s));
      KVFLASH_ASSIGN_OR_FAIL(eager_out, allocate_outputs(pl, s));
      KVFLASH_ASSERT_OK(stream.synchronize());

      // Captured before this plan ever ran: the first step of a decode may be the captured one.
      const AttentionTensors graph_t = with_outputs(dev.tensors, graph_out);
      gpu::Graph graph;
      KVFLASH_ASSIGN_OR_FAIL(graph, gpu::Graph::capture(s, [&] {
                               return run(pl, graph_t, graph_out.workspace.data(), s);
                             }));
      EXPECT_GT(graph.kernel_nodes(), 0u);
      KVFLASH_ASSERT_OK(graph.launch(s));
      const AttentionTensors eager_t = with_outputs(dev.tensors, eager_out);
      KVFLASH_ASSERT_OK(run(pl, eager_t, eager_out.workspace.data(), s));
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
      const Comparison cmp = compare(p, from_graph, ref);
      EXPECT_EQ(cmp.non_finite, 0) << cmp.summary();
      EXPECT_EQ(cmp.empty_rows_not_zero, 0) << cmp.summary();
      EXPECT_LE(cmp.nmse, kNmseBound) << cmp.summary();
      EXPECT_EQ(cmp.lse_bad, 0) << cmp.summary();
    }
    if (accepted == 0) {
      ADD_FAILURE() << name
                    << " accepts none of the representative problems: add one it serves to "
                       "representative_problems()";
      continue;
    }
    // A decode candidate that splits must have had its reducer captured for float, block-quantized
    // and rotated V, and its unsplit path too.
    if (name.find(".decode") != std::string::npos) {
      for (const char* v : {"f16", "q8_0", "turbo3"})
        EXPECT_TRUE(split_v_types.count(v)) << "no split run with V " << v;
      EXPECT_TRUE(unsplit) << "no unsplit run";
    }
  }
}

}  // namespace
}  // namespace kvflash::gputest
