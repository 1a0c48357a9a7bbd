#include "backends/cpu/thread_pool.hpp"

#include <algorithm>

namespace kvflash::cpu {

ThreadPool::ThreadPool(int32_t n_threads) {
  for (int32_t i = 1; i < std::max(n_threads, 1); ++i)
    workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency())));
  return pool;
}

void ThreadPool::worker_loop(int32_t index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int32_t)>* fn = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= active_threads_) continue;
      fn = fn_;
    }
    for (int64_t t = next_.fetch_add(1); t < n_tasks_; t = next_.fetch_add(1)) (*fn)(t, index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_tasks_ = n_tasks;
    active_threads_ = n_threads;
    pending_ = n_threads - 1;
    next_.store(0);
    ++generation_;
  }
  wake_.notify_all();
  for (int64_t t = next_.fetch_add(1); t < n_tasks; t = next_.fetch_add(1)) fn(t, 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
}

}  // namespace kvflash::cpu
