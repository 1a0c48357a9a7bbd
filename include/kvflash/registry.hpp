// The kernel registry: every kernel is a candidate with a name, a backend, a priority and guards.
// select_kernel() is the one function that answers both "is this supported?" and "which kernel
// runs?". When nothing fits, the error lists every candidate with the guard that rejected it.
//
// Environment:
//   KVFLASH_LOG_DISPATCH=1        print each decision to stderr
//   KVFLASH_FORCE_KERNEL=name     select this candidate (its guards still apply; if one rejects,
//                                 the call fails with that guard's reason, never falls back)
//   KVFLASH_EXCLUDE_KERNELS=a,b   never select these candidates
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvflash/export.h"
#include "kvflash/parallel.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/status.hpp"

namespace kvflash {

enum class Backend { cpu, cuda };
KVFLASH_API const char* to_string(Backend b);
KVFLASH_API std::optional<Backend> backend_from_name(std::string_view name);

// A guard returns std::nullopt when the problem passes, or the reason it is rejected.
struct Guard {
  std::string name;
  std::function<std::optional<std::string>(const AttentionProblem&)> reject;
};

struct Plan;
// What a backend decides at plan time beyond Plan's own fields (its kernel instance, layout,
// launch shape, the parameters that do not depend on the tensors), for its run() alone. Shared,
// immutable, by every copy of the plan.
struct KVFLASH_API BackendPlan {
  virtual ~BackendPlan() = default;
};

struct KernelCandidate {
  std::string name;  // "<backend>.<family>[.<variant>]", e.g. "cpu.decode"
  Backend backend;
  int priority;      // higher wins among candidates whose guards all pass
  bool opt_in_only;  // selected only when forced by name (e.g. the float64 reference)
  std::vector<Guard> guards;
  // Fills plan.n_splits, plan.workspace_bytes and plan.detail for the problem (host only).
  std::function<void(Plan&)> make_plan;
  // The kernel's requirements on the tensors' layout beyond validate(problem, tensors) (e.g. the
  // alignment its copies need), checked on pointers and strides alone; null: none. Part of
  // validate(plan, tensors), so that run() refuses nothing that passes it.
  std::function<Status(const Plan&, const AttentionTensors&)> check_tensors;
  // Runs the kernel; allocates nothing, workspace holds plan.workspace_bytes. For a CUDA kernel
  // every pointer in the tensors and the workspace are device memory and the work is enqueued on
  // `stream` (a cudaStream_t; nullptr = the legacy default stream) without synchronizing; CPU
  // kernels ignore the stream and return when done.
  std::function<Status(const Plan&, const AttentionTensors&, void* workspace, void* stream)> run;
};

struct SelectOptions {
  std::optional<Backend> backend;    // nullopt: any backend (the best by priority)
  std::string force;                 // candidate name to force ("" = none)
  std::vector<std::string> exclude;  // candidate names never to select
  bool read_environment = true;      // also honour the KVFLASH_* variables above
};

// All candidates built into this library, every backend.
KVFLASH_API const std::vector<KernelCandidate>& kernel_candidates();

// Validates the problem, then picks the highest-priority candidate whose guards all pass.
KVFLASH_API Expected<const KernelCandidate*> select_kernel(const AttentionProblem& p,
                                                           const SelectOptions& opt = {});

// Plan, then run. plan() (host, no allocation of device memory) selects the kernel and sizes the
// workspace for the problem's kv_capacity; run() allocates nothing and makes no synchronizing call.
struct PlanOptions {
  SelectOptions select;
  // CPU threads: 0 = all the parallel-for offers (the hardware threads for the process-wide pool),
  // else at most that many. The workspace holds one scratch area per thread.
  int32_t n_threads = 0;
  // CPU: where the kernels' loops run, e.g. the engine's own threads or a kvflash::ThreadPool
  // (pool.as_parallel_for()); it must outlive the plan. Unset: ThreadPool::process(), shared by
  // every caller of the process (their calls are served one after the other).
  ParallelFor parallel_for;
  // CPU, process-wide pool: microseconds its workers keep spinning after each loop before they
  // sleep, so that a call following within that time starts at once (a decode loop); 0 = sleep at
  // once. A ThreadPool given as parallel_for spins by its own setting.
  int32_t spin_us = 0;
};

struct Plan {
  AttentionProblem problem;
  const KernelCandidate* kernel = nullptr;
  int32_t n_threads = 1;
  ParallelFor parallel_for;  // CPU: PlanOptions::parallel_for (unset: the process-wide pool)
  int32_t spin_us = 0;       // CPU: PlanOptions::spin_us
  int32_t n_splits = 1;      // KV splits per (sequence, KV head)
  size_t workspace_bytes = 0;
  std::shared_ptr<const BackendPlan> detail;  // the backend's own decisions (may be null)
};

KVFLASH_API Expected<Plan> plan(const AttentionProblem& p, const PlanOptions& opt = {});
// Whether run(plan, t, ...) accepts these tensors: validate(plan.problem, t) and the plan's
// kernel's requirements on their layout (alignment and strides its copies need), on pointers
// and strides alone (device memory is never read). run() checks the same, first.
KVFLASH_API Status validate(const Plan& plan, const AttentionTensors& t);
// For a CUDA plan: t's pointers (kv_lens included: lengths are read on the device, so one captured
// graph serves every length up to problem.kv_capacity) and the workspace are device memory, and
// `stream` is a cudaStream_t. Legal under stream capture: no allocation, no synchronization.
KVFLASH_API Status run(const Plan& plan, const AttentionTensors& t, void* workspace,
                       void* stream = nullptr);

// Host convenience: plan, allocate the workspace on the host, run. Host buffers, so CPU kernels
// only: an unset opt.select.backend means cpu; asking for cuda is an error.
KVFLASH_API Status attention(const AttentionProblem& p, const AttentionTensors& t,
                             const PlanOptions& opt = {});

}  // namespace kvflash
