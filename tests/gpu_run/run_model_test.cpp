// kvflash-run's forward pass on the device (issue 41): a small random model, the whole pass on
// CUDA (cuBLAS, the runner's kernels, attention over a gpu::KvCache), against the CPU path on the
// same weights and cache type, for a prompt in chunks and then decode steps. The decode steps
// captured into one CUDA graph and replayed give the eager steps' logits bit for bit; a reset
// sequence gives the first one's.
#include <gtest/gtest.h>

#if defined(KVFLASH_RUN_CUDA)
#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kvflash/graph_runner.hpp"
#include "run/device_forward.hpp"
#include "run/model.hpp"
#include "run_test_model.hpp"

namespace kvflash::gputest {
namespace {

using tools::run::LlamaModel;
using tools::run::LlamaSession;

const std::vector<int32_t> kPrompt = {3, 17, 0, 39, 5, 5, 21, 8, 30, 12, 1};
const std::vector<int32_t> kDecode = {7, 2, 33, 19, 4, 4, 28, 11};

// Logits of the prompt in chunks of 4 and 7 (every token's), then of each decode token.
std::vector<float> session_logits(LlamaSession& s) {
  std::vector<float> all;
  const std::vector<std::vector<int32_t>> chunks = {{kPrompt.begin(), kPrompt.begin() + 4},
                                                    {kPrompt.begin() + 4, kPrompt.end()}};
  for (const std::vector<int32_t>& c : chunks) {
    Expected<std::vector<float>> l = s.forward(c, true);
    EXPECT_TRUE(l.ok()) << l.error().message;
    if (l.ok()) all.insert(all.end(), l->begin(), l->end());
  }
  for (int32_t id : kDecode) {
    Expected<std::vector<float>> l = s.forward({id}, false);
    EXPECT_TRUE(l.ok()) << l.error().message;
    if (l.ok()) all.insert(all.end(), l->begin(), l->end());
  }
  EXPECT_EQ(s.position(), int64_t(kPrompt.size() + kDecode.size()));
  return all;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    ref += double(want[i]) * want[i];
  }
  return err / ref;
}

TEST(GpuRunModel, DeviceForwardMatchesTheCpuPathAndGraphsMatchEager) {
  KVFLASH_REQUIRE_GPU();
  namespace t = tools::run::testing;
  const t::RawModel raw = t::random_model(t::Shape{}, 7);
  const std::vector<uint8_t> bytes = t::to_gguf(raw, tools::run::GgmlType::f32);
  Expected<tools::run::GgufFile> f = tools::run::parse_gguf(bytes);
  ASSERT_TRUE(f.ok()) << f.error().message;
  Expected<LlamaModel> model = tools::run::load_llama(*f);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const int64_t capacity = 64;
  // Bounds well above the CPU-against-float64 ones of tests/tools/run_model_test.cpp (the
  // device's attention takes Q at f16 precision), far below what a wrong step gives (~1).
  for (const auto& [kv, bound] : {std::pair{KvType::f16, 1e-4}, {KvType::q8_0, 1e-3}}) {
    SCOPED_TRACE(to_string(kv));
    Expected<LlamaSession> cpu = LlamaSession::create(*model, {kv}, {kv}, capacity, 1);
    ASSERT_TRUE(cpu.ok()) << cpu.error().message;
    const std::vector<float> want = session_logits(*cpu);

    Expected<LlamaSession> eager =
        LlamaSession::create(*model, {kv}, {kv}, capacity, 0, Backend::cuda, false);
    ASSERT_TRUE(eager.ok()) << eager.error().message;
    const std::vector<float> e = session_logits(*eager);
    ASSERT_EQ(e.size(), want.size());
    const double err = nmse(e, want);
    EXPECT_LE(err, bound);
    std::printf("cache %s: device logits NMSE against the CPU path %.3g\n",
                std::string(to_string(kv)).c_str(), err);
    EXPECT_EQ(eager->device()->graph_counters().captures, 0);

    Expected<LlamaSession> graphs =
        LlamaSession::create(*model, {kv}, {kv}, capacity, 0, Backend::cuda, true);
    ASSERT_TRUE(graphs.ok()) << graphs.error().message;
    const std::vector<float> g = session_logits(*graphs);
    EXPECT_EQ(g, e);  // the same kernels and products, launched from one graph
    const GraphCounters& gc = graphs->device()->graph_counters();
    EXPECT_EQ(gc.eager_runs, 2);
    EXPECT_EQ(gc.captures, 1);
    EXPECT_EQ(gc.replays, int64_t(kDecode.size()) - 3);
    EXPECT_EQ(gc.capture_failures, 0);

    // A new sequence on the same session: the device length starts over.
    ASSERT_TRUE(graphs->reset().ok());
    EXPECT_EQ(session_logits(*graphs), e);
  }
}

}  // namespace
}  // namespace kvflash::gputest
#endif  // KVFLASH_RUN_CUDA
