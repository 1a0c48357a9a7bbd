// The workers behind kvflash::ThreadPool (include/kvflash/parallel.hpp). parallel_for hands out
// task indices through an atomic counter (dynamic balance); the calling thread works too, so a
// pool of n threads runs n - 1 workers. No allocation per call.
//
// One loop is one job: its generation and its thread count travel in one atomic word, so a
// worker decides from a single load whether the job is new and whether it takes part. Only the
// workers that take part read the job's task, context and count, and the caller waits for
// exactly those before it returns or publishes the next job, so no worker ever reads a field
// that a later call is writing (the race of issue 40: a worker left out of one call could read
// the next call's thread count and join it twice).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "kvflash/parallel.hpp"

namespace kvflash::cpu {

class WorkerPool {
 public:
  explicit WorkerPool(int32_t n_threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int32_t size() const { return static_cast<int32_t>(workers_.size()) + 1; }
  // Runs task(ctx, i, thread) for i in [0, n_tasks) on up to n_threads threads (thread <
  // n_threads) and returns when all are done; the workers then spin spin_us before sleeping.
  // Callers are served one at a time.
  void parallel_for(int64_t n_tasks, int32_t n_threads, ParallelTask task, void* ctx,
                    int32_t spin_us);

 private:
  // The job word: generation in the high 40 bits, thread count in the low 24.
  static constexpr int kThreadBits = 24;
  static uint64_t generation(uint64_t job) { return job >> kThreadBits; }
  static int32_t threads(uint64_t job) {
    return static_cast<int32_t>(job & ((uint64_t{1} << kThreadBits) - 1));
  }

  void worker_loop(int32_t index);
  uint64_t wait_for_job(uint64_t seen_generation);

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serializes callers
  std::mutex mu_;       // guards the sleep/wake handshake
  std::condition_variable wake_;
  // The current job: written by the caller before it publishes job_, read by the workers that
  // take part after they load job_.
  ParallelTask task_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<uint64_t> job_{0};
  std::atomic<int32_t> spin_us_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<int32_t> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvflash::cpu
