#include "backends/cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVFLASH_PAUSE() _mm_pause()
#else
#define KVFLASH_PAUSE() std::this_thread::yield()
#endif

namespace kvflash {
namespace cpu {

WorkerPool::WorkerPool(int32_t n_threads) {
  n_threads = std::clamp<int32_t>(n_threads, 1, (1 << kThreadBits) - 1);
  for (int32_t i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

// Spins for the last job's spin_us, then sleeps until a job of another generation (or stop).
uint64_t WorkerPool::wait_for_job(uint64_t seen_generation) {
  using clock = std::chrono::steady_clock;
  auto is_new = [&](uint64_t job) { return generation(job) != seen_generation; };
  const int32_t spin_us = spin_us_.load(std::memory_order_relaxed);
  if (spin_us > 0) {
    const auto spin_until = clock::now() + std::chrono::microseconds(spin_us);
    for (uint32_t spins = 1;; ++spins) {
      const uint64_t job = job_.load(std::memory_order_acquire);
      if (is_new(job) || stop_.load(std::memory_order_relaxed)) return job;
      KVFLASH_PAUSE();
      if ((spins & 255u) == 0 && clock::now() > spin_until) break;
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait(lock, [&] { return stop_.load() || is_new(job_.load(std::memory_order_acquire)); });
  return job_.load(std::memory_order_acquire);
}

void WorkerPool::worker_loop(int32_t index) {
  uint64_t seen = 0;
  for (;;) {
    const uint64_t job = wait_for_job(seen);
    if (stop_.load()) return;
    seen = generation(job);
    if (index >= threads(job)) continue;  // not part of this job: read nothing else of it
    const ParallelTask task = task_;
    void* const ctx = ctx_;
    const int64_t n = n_tasks_;
    for (int64_t t = next_.fetch_add(1); t < n; t = next_.fetch_add(1)) task(ctx, t, index);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

void WorkerPool::parallel_for(int64_t n_tasks, int32_t n_threads, ParallelTask task, void* ctx,
                              int32_t spin_us) {
  n_threads = std::clamp<int32_t>(n_threads, 1, size());
  n_threads = static_cast<int32_t>(std::min<int64_t>(n_threads, std::max<int64_t>(n_tasks, 1)));
  if (n_threads == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) task(ctx, t, 0);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  {
    // Published under mu_ so that a worker about to sleep either sees the new job or is woken by
    // the notify below.
    std::lock_guard<std::mutex> lock(mu_);
    task_ = task;
    ctx_ = ctx;
    n_tasks_ = n_tasks;
    pending_.store(n_threads - 1, std::memory_order_relaxed);
    next_.store(0, std::memory_order_relaxed);
    spin_us_.store(std::max(spin_us, 0), std::memory_order_relaxed);
    const uint64_t gen = generation(job_.load(std::memory_order_relaxed)) + 1;
    job_.store(gen << kThreadBits | static_cast<uint64_t>(n_threads), std::memory_order_release);
  }
  wake_.notify_all();
  for (int64_t t = next_.fetch_add(1); t < n_tasks; t = next_.fetch_add(1)) task(ctx, t, 0);
  // Every worker of this job has finished its last task when pending_ reaches 0.
  while (pending_.load(std::memory_order_acquire) != 0) KVFLASH_PAUSE();
}

}  // namespace cpu

namespace {
int32_t hardware_threads() {
  return static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
}
void run_on_pool(void* user, int64_t n_tasks, int32_t n_threads, ParallelTask task, void* ctx) {
  const auto* pool = static_cast<const ThreadPool*>(user);
  pool->parallel_for(n_tasks, n_threads, task, ctx, pool->spin_us());
}
}  // namespace

ThreadPool::ThreadPool(int32_t n_threads, int32_t spin_us)
    : pool_(std::make_unique<cpu::WorkerPool>(n_threads > 0 ? n_threads : hardware_threads())),
      spin_us_(std::max(spin_us, 0)) {}

ThreadPool::~ThreadPool() = default;

int32_t ThreadPool::size() const {
  return pool_->size();
}

void ThreadPool::parallel_for(int64_t n_tasks, int32_t n_threads, ParallelTask task, void* task_ctx,
                              int32_t spin_us) const {
  pool_->parallel_for(n_tasks, n_threads, task, task_ctx, spin_us);
}

ParallelFor ThreadPool::as_parallel_for() const {
  return ParallelFor{run_on_pool, const_cast<ThreadPool*>(this), size()};
}

ThreadPool& ThreadPool::process() {
  static ThreadPool pool(hardware_threads(), 0);
  return pool;
}

}  // namespace kvflash
