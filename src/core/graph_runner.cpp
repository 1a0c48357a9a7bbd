#include "kvflash/graph_runner.hpp"

#include <fmt/format.h>

#include <functional>
#include <utility>

namespace kvflash {

std::string describe(const ShapeSignature& s) {
  return fmt::format("{} key={:#x}", describe(s.problem), s.key);
}

const char* to_string(StepKind k) {
  switch (k) {
    case StepKind::eager:
      return "eager";
    case StepKind::capture:
      return "capture";
    case StepKind::replay:
      return "replay";
  }
  return "?";
}

Expected<StepKind> GraphStepper::step(const ShapeSignature& signature, EnqueueRef enqueue) {
  if (has_signature_ && !(signature == signature_)) {
    if (has_graph_) executor_->drop();
    has_graph_ = false;
    streak_ = 0;
    ++counters_.resets;
  }
  signature_ = signature;
  has_signature_ = true;

  if (has_graph_) {
    if (Status s = executor_->launch(); !s) return s.error();
    ++counters_.replays;
    return StepKind::replay;
  }
  if (streak_ >= kEagerRunsBeforeCapture) {
    if (Status s = executor_->capture(enqueue); !s) {
      ++counters_.capture_failures;
      streak_ = 0;
      Error e = s.error();
      e.message =
          fmt::format("graph runner: capturing the step of {} failed (the step did not run): {}",
                      describe(signature), e.message);
      return e;
    }
    has_graph_ = true;
    ++counters_.captures;
    // The capture only recorded the work: launching the new graph does this step's work.
    if (Status s = executor_->launch(); !s) return s.error();
    return StepKind::capture;
  }
  if (Status s = executor_->run_eager(enqueue); !s) return s.error();
  ++counters_.eager_runs;
  ++streak_;
  return StepKind::eager;
}

namespace gpu {

Status GraphRunner::CudaExecutor::run_eager(EnqueueRef enqueue) {
  return enqueue();
}

Status GraphRunner::CudaExecutor::capture(EnqueueRef enqueue) {
  // A lambda holding one reference fits std::function's inline storage: no allocation.
  Expected<Graph> g = Graph::capture(stream, std::function<Status()>([&] { return enqueue(); }));
  if (!g) return g.error();
  graph = std::move(*g);
  return {};
}

Status GraphRunner::CudaExecutor::launch() {
  return graph.launch(stream);
}

void GraphRunner::CudaExecutor::drop() {
  graph = Graph();
}

}  // namespace gpu
}  // namespace kvflash
