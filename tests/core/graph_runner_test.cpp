// The graph runner's policy on a fake executor that records what it was asked to do: which steps
// run eagerly, which capture, which replay, when a graph is dropped, and the counters, exactly.
#include "kvflash/graph_runner.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace kvflash {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records every request; "eager" and "capture" also call enqueue (a capture records the work,
// so the fake counts the enqueue calls separately from the work done).
struct FakeExecutor final : StepExecutor {
  std::vector<std::string> calls;
  int enqueued = 0;
  bool graph = false;
  Status fail_capture;  // returned by the next capture, then cleared
  Status fail_launch;   // likewise for launch

  Status run_eager(EnqueueRef enqueue) override {
    calls.push_back("eager");
    return enqueue();
  }
  Status capture(EnqueueRef enqueue) override {
    calls.push_back("capture");
    EXPECT_FALSE(graph) << "capture over a held graph: drop() must come first";
    if (Status s = enqueue(); !s) return s;
    if (!fail_capture.ok()) return std::exchange(fail_capture, Status{});
    graph = true;
    return {};
  }
  Status launch() override {
    calls.push_back("launch");
    EXPECT_TRUE(graph) << "launch without a graph";
    if (!fail_launch.ok()) return std::exchange(fail_launch, Status{});
    return {};
  }
  void drop() override {
    calls.push_back("drop");
    graph = false;
  }
};

ShapeSignature sig(int32_t head_dim, int64_t capacity = 4096) {
  AttentionProblem p;
  p.head_dim = {head_dim, head_dim};
  p.kv_capacity = capacity;
  return ShapeSignature::of(p);
}

GraphCounters counters(int64_t eager, int64_t captures, int64_t replays, int64_t resets,
                       int64_t failures = 0) {
  return GraphCounters{eager, captures, replays, resets, failures};
}

struct Harness {
  FakeExecutor ex;
  GraphStepper stepper{ex};
  int work = 0;
  Status enqueue_result;

  // One step; "eager"/"capture"/"replay", or "error: <message>".
  std::string step(const ShapeSignature& s) {
    auto enqueue = [&]() -> Status {
      ++work;
      return enqueue_result;
    };
    Expected<StepKind> k = stepper.step(s, enqueue);
    return k ? to_string(*k) : "error: " + k.error().message;
  }
};

TEST(GraphRunnerPolicy, EagerTwiceThenCaptureThenReplay) {
  Harness h;
  const ShapeSignature a = sig(128);
  EXPECT_EQ(h.step(a), "eager");
  EXPECT_EQ(h.stepper.counters(), counters(1, 0, 0, 0));
  EXPECT_EQ(h.step(a), "eager");
  EXPECT_EQ(h.step(a), "capture");
  EXPECT_TRUE(h.stepper.has_graph());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(h.step(a), "replay");
  EXPECT_EQ(h.stepper.counters(), counters(2, 1, 5, 0));
  EXPECT_THAT(h.ex.calls, ElementsAre("eager", "eager", "capture", "launch", "launch", "launch",
                                      "launch", "launch", "launch"));
  // The enqueue function ran for the two eager steps and the capture, never for a replay.
  EXPECT_EQ(h.work, 3);
}

TEST(GraphRunnerPolicy, ASignatureChangeResetsAndStartsOverEagerly) {
  Harness h;
  const ShapeSignature a = sig(128), b = sig(64);
  std::vector<std::string> kinds;
  for (const ShapeSignature* s : {&a, &a, &a, &a, &b, &b, &b, &a}) kinds.push_back(h.step(*s));
  EXPECT_THAT(kinds, ElementsAre("eager", "eager", "capture", "replay", "eager", "eager", "capture",
                                 "eager"));
  EXPECT_EQ(h.stepper.counters(), counters(5, 2, 1, 2));
  EXPECT_THAT(h.ex.calls, ElementsAre("eager", "eager", "capture", "launch", "launch",  // A
                                      "drop", "eager", "eager", "capture", "launch",    // B
                                      "drop", "eager"));                                // A
  EXPECT_FALSE(h.stepper.has_graph());
  EXPECT_EQ(h.stepper.eager_streak(), 1);
}

// A signature that changes before any capture is a reset too (the streak starts over), with no
// graph to drop; alternating signatures therefore never capture.
TEST(GraphRunnerPolicy, AlternatingSignaturesNeverCapture) {
  Harness h;
  const ShapeSignature a = sig(128), b = sig(128, 8192);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(h.step(i % 2 == 0 ? a : b), "eager") << i;
  EXPECT_EQ(h.stepper.counters(), counters(6, 0, 0, 5));
  EXPECT_THAT(h.ex.calls, ::testing::Each("eager"));
}

// Lengths are not part of the signature, so nothing in a decode that only grows the cache
// resets; every field of the problem and the caller's key is.
TEST(GraphRunnerPolicy, EveryProblemFieldAndTheKeyArePartOfTheSignature) {
  AttentionProblem p;
  const ShapeSignature base = ShapeSignature::of(p);
  EXPECT_EQ(base, ShapeSignature::of(p));
  std::vector<AttentionProblem> changed(15, p);
  changed[0].n_seqs = 2;
  changed[1].n_q_tokens = 2;
  changed[2].n_q_heads = 16;
  changed[3].n_kv_heads = 4;
  changed[4].head_dim = {192, 128};
  changed[5].k_type = KvType::q8_0;
  changed[6].v_type = KvType::turbo4;
  changed[7].kv_capacity = 2;
  changed[8].scale = 0.5f;
  changed[9].causal = false;
  changed[10].has_mask = true;
  changed[11].window = 128;
  changed[12].softcap = 30.0f;
  changed[13].has_sinks = true;
  changed[14].has_alibi = true;
  for (size_t i = 0; i < changed.size(); ++i)
    EXPECT_FALSE(ShapeSignature::of(changed[i]) == base) << i;
  EXPECT_FALSE(ShapeSignature::of(p, 1) == base);
  EXPECT_EQ(describe(ShapeSignature::of(p, 255)),
            "seqs=1 q=1 heads=32/8 d=128/128 k=f16 v=f16 kv=1 causal key=0xff");
}

TEST(GraphRunnerPolicy, ACaptureFailureIsTheStepsErrorAndCounted) {
  Harness h;
  const ShapeSignature a = sig(128);
  EXPECT_EQ(h.step(a), "eager");
  EXPECT_EQ(h.step(a), "eager");
  h.ex.fail_capture = Error{ErrorCode::backend_error, "cudaStreamEndCapture failed: illegal"};
  const std::string failed = h.step(a);
  EXPECT_THAT(failed, HasSubstr("error: graph runner: capturing the step of seqs=1"));
  EXPECT_THAT(failed, HasSubstr("(the step did not run): cudaStreamEndCapture failed: illegal"));
  EXPECT_EQ(h.stepper.counters(), counters(2, 0, 0, 0, 1));
  EXPECT_FALSE(h.stepper.has_graph());
  // The signature starts over: two eager steps, then a capture that now succeeds.
  EXPECT_EQ(h.step(a), "eager");
  EXPECT_EQ(h.step(a), "eager");
  EXPECT_EQ(h.step(a), "capture");
  EXPECT_EQ(h.step(a), "replay");
  EXPECT_EQ(h.stepper.counters(), counters(4, 1, 1, 0, 1));
}

// An error of the step's own enqueue during the capture fails the capture the same way.
TEST(GraphRunnerPolicy, AnEnqueueErrorDuringCaptureIsACaptureFailure) {
  Harness h;
  const ShapeSignature a = sig(128);
  EXPECT_EQ(h.step(a), "eager");
  EXPECT_EQ(h.step(a), "eager");
  h.enqueue_result = invalid_argument("enqueue says no");
  EXPECT_THAT(h.step(a), HasSubstr("enqueue says no"));
  EXPECT_EQ(h.stepper.counters().capture_failures, 1);
}

// An eager step whose enqueue fails is not counted and does not bring the capture closer.
TEST(GraphRunnerPolicy, AFailedEagerStepIsReturnedAndNotCounted) {
  Harness h;
  const ShapeSignature a = sig(128);
  h.enqueue_result = invalid_argument("enqueue says no");
  EXPECT_EQ(h.step(a), "error: enqueue says no");
  EXPECT_EQ(h.stepper.counters(), counters(0, 0, 0, 0));
  h.enqueue_result = {};
  EXPECT_EQ(h.step(a), "eager");
  EXPECT_EQ(h.step(a), "eager");
  EXPECT_EQ(h.step(a), "capture");
}

// A launch failure is returned; the graph is kept (the failure is the device's, not the
// graph's), so the next step replays it.
TEST(GraphRunnerPolicy, ALaunchFailureIsReturned) {
  Harness h;
  const ShapeSignature a = sig(128);
  for (int i = 0; i < 3; ++i) (void)h.step(a);
  h.ex.fail_launch = Error{ErrorCode::backend_error, "cudaGraphLaunch failed"};
  EXPECT_EQ(h.step(a), "error: cudaGraphLaunch failed");
  EXPECT_EQ(h.step(a), "replay");
  EXPECT_EQ(h.stepper.counters(), counters(2, 1, 1, 0));
}

// Without the CUDA backend (or a device), the CUDA runner's eager steps are the caller's own
// work, and its capture fails with an error that says why: never a silent fallback.
TEST(GraphRunnerPolicy, CudaRunnerWithoutADeviceReportsTheCaptureError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  gpu::GraphRunner runner(nullptr);
  const ShapeSignature a = sig(128);
  int work = 0;
  auto enqueue = [&]() -> Status {
    ++work;
    return {};
  };
  EXPECT_EQ(*runner.step(a, enqueue), StepKind::eager);
  EXPECT_EQ(*runner.step(a, enqueue), StepKind::eager);
  Expected<StepKind> third = runner.step(a, enqueue);
  ASSERT_FALSE(third.ok());
  EXPECT_THAT(third.error().message, HasSubstr("graph runner: capturing the step"));
  EXPECT_EQ(runner.counters(), counters(2, 0, 0, 0, 1));
  EXPECT_FALSE(runner.has_graph());
  EXPECT_EQ(runner.kernel_nodes(), 0u);
}

}  // namespace
}  // namespace kvflash
