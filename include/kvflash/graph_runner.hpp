// One step of work per call (e.g. a decode step: attention over every layer), run eagerly, or
// captured into a CUDA graph and replayed, by one policy:
//
//   - a step whose shape signature differs from the previous step's is a reset: the graph held
//     (if any) is destroyed and the count starts over;
//   - the first two steps of a signature run eagerly (the caller's first-call work, lazy
//     initialization, anything that is not legal under capture, happens there);
//   - the third captures the step into a graph (global capture mode, so an allocation or a
//     synchronizing call anywhere in the step fails the capture) and launches it;
//   - every later step of the same signature replays that graph.
//
// For A A A A B B B A: eager, eager, capture, replay, reset+eager, eager, capture, reset+eager.
//
// The signature holds what changes the launch (shapes, types, capacity, features) and never what
// a captured graph reads on the device: kv_lens grow token by token inside one graph. What else
// the captured work bakes in (buffer addresses, a layer count) the caller folds into `key`.
//
// A failed capture is an error of that step (its work did not run), counted in capture_failures;
// the next steps of the signature start over from eager. Nothing falls back silently.
//
// The policy (GraphStepper) is plain host code driving an executor; gpu::GraphRunner is the CUDA
// executor (gpu::Graph), tests drive the policy with a fake one.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "kvflash/device.hpp"
#include "kvflash/export.h"
#include "kvflash/formats.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/status.hpp"

namespace kvflash {

struct ShapeSignature {
  // Every field of the problem: shapes, types, capacity and the features, each of which selects
  // other code or other constants in the launch. A problem holds no lengths (they are read on
  // the device from AttentionTensors::kv_lens), so a length never changes the signature.
  AttentionProblem problem;
  uint64_t key = 0;  // the caller's: anything else the captured step bakes in

  static ShapeSignature of(const AttentionProblem& p, uint64_t key = 0) { return {p, key}; }
  friend bool operator==(const ShapeSignature&, const ShapeSignature&) = default;
};
// One line, describe() of the problem and the key, e.g.
// "seqs=1 q=1 heads=32/8 d=128/128 k=q8_0 v=q4_0 kv=32768 causal key=0x0".
KVFLASH_API std::string describe(const ShapeSignature& s);

// A non-owning reference to a callable `Status()`: what a step enqueues. Two pointers, no
// allocation (a std::function made from a lambda with captures may allocate); the callable must
// outlive the call it is passed to.
class EnqueueRef {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, EnqueueRef> && std::is_invocable_r_v<Status, F&>)
      EnqueueRef(F&& f)  // NOLINT(google-explicit-constructor): passed as a lambda
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o) -> Status { return (*static_cast<std::remove_reference_t<F>*>(o))(); }) {}
  Status operator()() const { return call_(obj_); }

 private:
  void* obj_;
  Status (*call_)(void*);
};

struct GraphCounters {
  int64_t eager_runs = 0;        // steps run eagerly
  int64_t captures = 0;          // graphs captured (each also launched once, for its step)
  int64_t replays = 0;           // steps served by launching a held graph
  int64_t resets = 0;            // signature changes (the held graph, if any, destroyed)
  int64_t capture_failures = 0;  // captures that failed (the step returned the error)
  friend bool operator==(const GraphCounters&, const GraphCounters&) = default;
};

enum class StepKind { eager, capture, replay };
KVFLASH_API const char* to_string(StepKind k);

// What the policy asks of the machine. Each call either does it or returns why not.
class KVFLASH_API StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual Status run_eager(EnqueueRef enqueue) = 0;
  // Captures `enqueue` into a new graph (replacing none: drop() came first) without running it.
  virtual Status capture(EnqueueRef enqueue) = 0;
  virtual Status launch() = 0;  // the held graph
  virtual void drop() = 0;      // destroys the held graph, if any
};

// The policy above, over an executor it does not own. No allocation on any path but errors.
class KVFLASH_API GraphStepper {
 public:
  explicit GraphStepper(StepExecutor& executor) : executor_(&executor) {}

  // Runs one step of `signature`: the kind of run it was, or the error of the executor (the
  // step's work then did not complete).
  Expected<StepKind> step(const ShapeSignature& signature, EnqueueRef enqueue);

  const GraphCounters& counters() const { return counters_; }
  bool has_graph() const { return has_graph_; }
  // Eager runs of the current signature since it began (or since its last capture failure).
  int eager_streak() const { return streak_; }

  // Eager runs of one signature before its capture.
  static constexpr int kEagerRunsBeforeCapture = 2;

 private:
  StepExecutor* executor_;
  GraphCounters counters_;
  ShapeSignature signature_;
  bool has_signature_ = false;
  bool has_graph_ = false;
  int streak_ = 0;
};

namespace gpu {

// GraphStepper on a CUDA stream (not owned; a gpu::Stream's handle, since the legacy default
// stream cannot be captured): eager steps call enqueue on the stream, captures use
// gpu::Graph::capture, replays gpu::Graph::launch. A replay is one cudaGraphLaunch: no
// allocation, no synchronization. Not movable (the stepper points at its executor).
class KVFLASH_API GraphRunner {
 public:
  explicit GraphRunner(void* stream) : executor_(stream), stepper_(executor_) {}
  GraphRunner(const GraphRunner&) = delete;
  GraphRunner& operator=(const GraphRunner&) = delete;

  Expected<StepKind> step(const ShapeSignature& signature, EnqueueRef enqueue) {
    return stepper_.step(signature, enqueue);
  }
  const GraphCounters& counters() const { return stepper_.counters(); }
  bool has_graph() const { return stepper_.has_graph(); }
  // Kernel nodes of the held graph (0 without one).
  size_t kernel_nodes() const { return executor_.graph.kernel_nodes(); }
  void* stream() const { return executor_.stream; }

 private:
  struct KVFLASH_API CudaExecutor final : StepExecutor {
    explicit CudaExecutor(void* s) : stream(s) {}
    Status run_eager(EnqueueRef enqueue) override;
    Status capture(EnqueueRef enqueue) override;
    Status launch() override;
    void drop() override;
    void* stream;
    Graph graph;
  };
  CudaExecutor executor_;
  GraphStepper stepper_;
};

}  // namespace gpu
}  // namespace kvflash
