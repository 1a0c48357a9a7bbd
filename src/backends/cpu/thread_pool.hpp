// A persistent pool of worker threads for the CPU backend. parallel_for hands out task indices
// through an atomic counter (dynamic balance); the calling thread works too, so a pool of n
// threads uses n - 1 workers. No allocation per call.
//
// Workers spin for kSpinMicros after their last job before sleeping on a condition variable:
// waking a sleeping thread costs tens of microseconds to milliseconds on a virtual machine, which
// is as long as a whole decode call, and a decode loop calls again within that window.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvflash::cpu {

class ThreadPool {
 public:
  static constexpr int64_t kSpinMicros = 2000;

  explicit ThreadPool(int32_t n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int32_t size() const { return static_cast<int32_t>(workers_.size()) + 1; }
  // Runs fn(task, thread) for task in [0, n_tasks) on up to n_threads threads (thread < n_threads)
  // and returns when all are done. Calls are serialized (one caller at a time).
  void parallel_for(int64_t n_tasks, int32_t n_threads,
                    const std::function<void(int64_t task, int32_t thread)>& fn);

  // The process-wide pool, sized to the hardware threads.
  static ThreadPool& global();

 private:
  void worker_loop(int32_t index);

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serializes callers
  std::mutex mu_;       // guards the sleep/wake handshake
  std::condition_variable wake_;
  const std::function<void(int64_t, int32_t)>* fn_ = nullptr;
  int64_t n_tasks_ = 0;
  int32_t active_threads_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int32_t> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvflash::cpu
