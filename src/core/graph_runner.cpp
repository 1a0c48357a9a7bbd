#include "kvflash/graph_runner.hpp"

#include <fmt/format.h>

#include <functional>
#include <utility>

namespace kvflash {

ShapeSignature ShapeSignature::of(const AttentionProblem& p, uint64_t key) {
  ShapeSignature s;
  s.n_seqs = p.n_seqs;
  s.n_q_tokens = p.n_q_tokens;
  s.n_q_heads = p.n_q_heads;
  s.n_kv_heads = p.n_kv_heads;
  s.head_dim = p.head_dim;
  s.k_type = p.k_type;
  s.v_type = p.v_type;
  s.kv_capacity = p.kv_capacity;
  s.scale = p.scale;
  s.causal = p.causal;
  s.has_mask = p.has_mask;
  s.window = p.window;
  s.softcap = p.softcap;
  s.has_sinks = p.has_sinks;
  s.has_alibi = p.has_alibi;
  s.key = key;
  return s;
}

std::string describe(const ShapeSignature& s) {
  AttentionProblem p;
  p.n_seqs = s.n_seqs;
  p.n_q_tokens = s.n_q_tokens;
  p.n_q_heads = s.n_q_heads;
  p.n_kv_heads = s.n_kv_heads;
  p.head_dim = s.head_dim;
  p.k_type = s.k_type;
  p.v_type = s.v_type;
  p.kv_capacity = s.kv_capacity;
  p.scale = s.scale;
  p.causal = s.causal;
  p.has_mask = s.has_mask;
  p.window = s.window;
  p.softcap = s.softcap;
  p.has_sinks = s.has_sinks;
  p.has_alibi = s.has_alibi;
  return fmt::format("{} key={:#x}", describe(p), s.key);
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
