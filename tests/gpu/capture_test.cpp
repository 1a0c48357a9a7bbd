// run() of every CUDA candidate is legal under stream capture in global mode: no allocation, no
// synchronizing call (either would fail the capture). Each candidate is forced by name on the
// first representative problem it accepts, captured before any eager run of it in this test, then
// replayed and checked against the float64 reference.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test_util.hpp"

namespace kvflash::gputest {
namespace {

constexpr double kNmseBound = 1e-5;

AttentionProblem problem(int32_t q_tokens, int32_t q_heads, int32_t kv_heads, HeadDims d, KvType k,
                         KvType v, int64_t kv_len) {
  AttentionProblem p;
  p.n_q_tokens = q_tokens;
  p.n_q_heads = q_heads;
  p.n_kv_heads = kv_heads;
  p.head_dim = d;
  p.k_type = k;
  p.v_type = v;
  p.kv_capacity = kv_len;
  return p;
}

// In order of preference: what engines run most. A candidate that accepts none of these fails the
// test: add a problem it serves.
std::vector<AttentionProblem> representative_problems() {
  using enum KvType;
  return {
      problem(1, 32, 8, {128, 128}, q8_0, q8_0, 4096),      // decode
      problem(1, 32, 8, {128, 128}, f16, f16, 4096),        //
      problem(4, 32, 8, {128, 128}, q4_0, q4_0, 4096),      // speculative decode
      problem(1, 16, 2, {128, 128}, turbo3, turbo3, 4096),  //
      problem(1, 8, 2, {64, 64}, f16, f16, 2048),           //
      problem(1, 8, 2, {256, 256}, f16, f16, 2048),         //
      problem(1, 16, 1, {576, 512}, f16, f16, 2048),        // MLA
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
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const AttentionProblem* accepted = nullptr;
    const std::vector<AttentionProblem> problems = representative_problems();
    for (const AttentionProblem& p : problems) {
      SelectOptions opt;
      opt.backend = Backend::cuda;
      opt.force = name;
      opt.read_environment = false;
      if (select_kernel(p, opt)) {
        accepted = &p;
        break;
      }
    }
    if (accepted == nullptr) {
      ADD_FAILURE() << name
                    << " accepts none of the representative problems: add one it serves to "
                       "representative_problems()";
      continue;
    }
    AttentionProblem p = *accepted;
    p.kv_capacity = quick_len(p.kv_capacity);
    Plan pl;
    KVFLASH_ASSIGN_OR_FAIL(pl, plan_cuda(p, name));
    SCOPED_TRACE(describe(p));

    // A sequence one token short of the capacity: lengths come from the device array.
    const HostInputs in = make_inputs(p, {p.kv_capacity - 1}, 11);
    Reference ref;
    KVFLASH_ASSIGN_OR_FAIL(ref, reference(in));
    DeviceInputs dev;
    KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, s));
    DeviceOutputs o;
    KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(pl, s));
    KVFLASH_ASSERT_OK(stream.synchronize());

    const AttentionTensors t = with_outputs(dev.tensors, o);
    gpu::Graph graph;
    KVFLASH_ASSIGN_OR_FAIL(
        graph, gpu::Graph::capture(s, [&] { return run(pl, t, o.workspace.data(), s); }));
    EXPECT_GT(graph.kernel_nodes(), 0u);
    KVFLASH_ASSERT_OK(graph.launch(s));
    HostOutputs got;
    KVFLASH_ASSIGN_OR_FAIL(got, read_outputs(o, stream));
    KVFLASH_ASSERT_OK(gpu::last_error());
    std::string guards;
    KVFLASH_ASSIGN_OR_FAIL(guards, o.check_guards(stream));
    EXPECT_EQ(guards, "");
    const Comparison cmp = compare(p, got, ref);
    EXPECT_EQ(cmp.non_finite, 0) << cmp.summary();
    EXPECT_LE(cmp.nmse, kNmseBound) << cmp.summary();
    EXPECT_EQ(cmp.lse_bad, 0) << cmp.summary();
  }
}

}  // namespace
}  // namespace kvflash::gputest
