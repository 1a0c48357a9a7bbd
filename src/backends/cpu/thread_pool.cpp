#include "backends/cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVFLASH_PAUSE() _mm_pause()
#else
#define KVFLASH_PAUSE() std::this_thread::yield()
#endif

namespace kvflash::cpu {

ThreadPool::ThreadPool(int32_t n_threads) {
  for (int32_t i = 1; i < std::max(n_threads, 1); ++i)
    workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency())));
  return pool;
}

void ThreadPool::worker_loop(int32_t index) {
  using clock = std::chrono::steady_clock;
  uint64_t seen = 0;
  for (;;) {
    // Spin for a while, then sleep until the generation changes.
    const auto spin_until = clock::now() + std::chrono::microseconds(kSpinMicros);
    uint32_t spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load()) {
      KVFLASH_PAUSE();
      if ((++spins & 255u) == 0 && clock::now() > spin_until) {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      }
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    if (index >= active_threads_) continue;
    const auto* fn = fn_;
    const int64_t n = n_tasks_;
    for (int64_t t = next_.fetch_add(1); t < n; t = next_.fetch_add(1)) (*fn)(t, index);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

void ThreadPool::parallel_for(int64_t n_tasks, int32_t n_threads,
                              const std::function<void(int64_t, int32_t)>& fn) {
  n_threads = std::clamp<int32_t>(n_threads, 1, size());
  n_threads = static_cast<int32_t>(std::min<int64_t>(n_threads, std::max<int64_t>(n_tasks, 1)));
  if (n_threads == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  {
    // Published under mu_ so that a worker about to sleep either sees the new generation or is
    // woken by the notify below.
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_tasks_ = n_tasks;
    active_threads_ = n_threads;
    pending_.store(n_threads - 1);
    next_.store(0);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (int64_t t = next_.fetch_add(1); t < n_tasks; t = next_.fetch_add(1)) fn(t, 0);
  while (pending_.load(std::memory_order_acquire) != 0) KVFLASH_PAUSE();
  fn_ = nullptr;
}

}  // namespace kvflash::cpu
