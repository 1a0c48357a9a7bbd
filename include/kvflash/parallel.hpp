// Where the CPU backend's loops run: a caller-provided parallel-for (an engine's own threads) or a
// kvflash thread pool. Every CPU kernel call is a few parallel loops over independent tasks; each
// task gets a thread slot that selects its scratch area in the plan's workspace.
#pragma once

#include <cstdint>
#include <memory>

#include "kvflash/export.h"

namespace kvflash {

// One task of a loop: task in [0, n_tasks), thread in [0, n_threads) (the slot whose scratch it
// uses).
using ParallelTask = void (*)(void* task_ctx, int64_t task, int32_t thread);

// A parallel-for given to the CPU backend (PlanOptions::parallel_for). run(user, n_tasks,
// n_threads, task, task_ctx) must call task(task_ctx, i, thread) once for every i in
// [0, n_tasks), with 0 <= thread < n_threads and no two tasks running at the same time with the
// same thread value, and return only when every task has returned. It may run the tasks on
// fewer threads than n_threads (one thread calling them all in order is correct). Tasks do not
// throw and do not block on each other. kvflash calls run from the thread that called
// kvflash::run(), several times per call.
struct ParallelFor {
  void (*run)(void* user, int64_t n_tasks, int32_t n_threads, ParallelTask task,
              void* task_ctx) = nullptr;
  void* user = nullptr;
  int32_t max_threads = 0;  // thread slots it offers (>= 1 when run is set)
  explicit operator bool() const { return run != nullptr; }
};

namespace cpu {
class WorkerPool;
}

// A pool of worker threads that runs loops for the CPU backend. The calling thread works too, so
// a pool of n threads starts n - 1 workers. Calls from several threads are served one after the
// other. After a loop, workers spin for the loop's spin_us (0: none) before sleeping on a
// condition variable: waking a sleeping thread costs tens of microseconds, as long as a short
// decode call, so a decode loop that calls again at once may ask for a short spin.
//
// Without PlanOptions::parallel_for, the CPU kernels use one process-wide pool of the hardware
// threads (ThreadPool::process()); an engine that wants its own (per model, per NUMA node) makes
// one and passes pool.parallel_for().
class KVFLASH_API ThreadPool {
 public:
  explicit ThreadPool(int32_t n_threads = 0, int32_t spin_us = 0);  // 0 threads: hardware threads
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int32_t size() const;
  int32_t spin_us() const { return spin_us_; }
  // Runs task(task_ctx, i, thread) for i in [0, n_tasks) on up to n_threads of the pool's threads
  // and returns when all are done.
  void parallel_for(int64_t n_tasks, int32_t n_threads, ParallelTask task, void* task_ctx,
                    int32_t spin_us) const;
  // This pool as a ParallelFor (spinning spin_us() after each loop). The pool must outlive every
  // plan given it.
  ParallelFor as_parallel_for() const;

  // The process-wide pool of the hardware threads (no spin of its own: the plan's spin_us).
  static ThreadPool& process();

 private:
  std::unique_ptr<cpu::WorkerPool> pool_;
  int32_t spin_us_ = 0;
};

}  // namespace kvflash
