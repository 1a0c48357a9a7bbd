// The CPU backend's threads (include/kvflash/parallel.hpp): every task of a loop runs exactly
// once and has returned when parallel_for returns, whatever the thread counts of concurrent
// callers; a caller's own parallel-for runs the kernels' loops with the same results; workers do
// not spin after a call unless asked. Run under ThreadSanitizer by the "tsan" preset
// (scripts/test.sh --asan), so a data race in the pool fails the test command.
#include <gtest/gtest.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kvflash/parallel.hpp"
#include "kvflash/registry.hpp"

namespace kvflash {
namespace {

// One loop's bookkeeping: how often each task ran, and how many are running now.
struct Loop {
  std::vector<std::atomic<int32_t>> runs;
  std::atomic<int32_t> running{0};
  std::atomic<int32_t> bad_thread{0};
  int32_t n_threads = 1;
  explicit Loop(int64_t n) : runs(static_cast<size_t>(n)) {}
  static void task(void* ctx, int64_t i, int32_t thread) {
    auto* l = static_cast<Loop*>(ctx);
    l->running.fetch_add(1);
    if (thread < 0 || thread >= l->n_threads) l->bad_thread.fetch_add(1);
    l->runs[static_cast<size_t>(i)].fetch_add(1);
    // A little work, so that workers overlap with the caller's next call.
    volatile uint32_t x = static_cast<uint32_t>(i);
    for (int k = 0; k < 200; ++k) x = x * 1664525u + 1013904223u;
    l->running.fetch_sub(1);
  }
  void expect_done() const {
    EXPECT_EQ(running.load(), 0) << "a task still ran after parallel_for returned";
    EXPECT_EQ(bad_thread.load(), 0) << "a task got a thread slot >= n_threads";
    for (size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i].load(), 1) << "task " << i;
  }
};

TEST(ThreadPool, EveryTaskOnceAndDoneOnReturn) {
  ThreadPool pool(4);
  ASSERT_EQ(pool.size(), 4);
  std::mt19937 rng(1);
  for (int it = 0; it < 400; ++it) {
    const int64_t n = rng() % 64;
    const int32_t threads = 1 + static_cast<int32_t>(rng() % 5);  // 5 > size(): clamped
    Loop loop(n);
    loop.n_threads = threads;
    pool.parallel_for(n, threads, Loop::task, &loop, it % 3 == 0 ? 50 : 0);
    loop.expect_done();
  }
}

// Callers with different thread counts on one pool at the same time (the race of issue 40:
// a worker left out of a one-thread call could read the next call's count and join it twice).
TEST(ThreadPool, ConcurrentCallersWithDifferentThreadCounts) {
  ThreadPool pool(4, 20);
  std::vector<std::thread> callers;
  std::atomic<int32_t> failures{0};
  for (int32_t c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      std::mt19937 rng(static_cast<uint32_t>(c));
      for (int it = 0; it < 150; ++it) {
        const int64_t n = 1 + rng() % 40;
        const int32_t threads = 1 + (c + it) % 4;
        Loop loop(n);
        loop.n_threads = threads;
        pool.parallel_for(n, threads, Loop::task, &loop, 0);
        if (loop.running.load() != 0 || loop.bad_thread.load() != 0) failures.fetch_add(1);
        for (auto& r : loop.runs)
          if (r.load() != 1) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// Process CPU time (all threads) in milliseconds.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// No spin unless asked: after a call, the workers of a pool without spin sleep, so the process
// burns (almost) no CPU while the caller waits. With a spin, they burn about spin x workers.
TEST(ThreadPool, WorkersSleepAfterACallUnlessAskedToSpin) {
  ThreadPool pool(4);
  Loop loop(64);
  loop.n_threads = 4;
  pool.parallel_for(64, 4, Loop::task, &loop, 0);
  loop.expect_done();
  const double before = process_cpu_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double idle_ms = process_cpu_ms() - before;
  // 3 workers spinning the whole time would burn 600 ms; sleeping ones nearly nothing.
  EXPECT_LT(idle_ms, 60.0) << "workers kept the CPU busy after a call without spin";
}

// ---- The kernels on a caller's parallel-for ---------------------------------------------------

struct Problem {
  AttentionProblem p;
  std::vector<float> q;
  std::vector<uint8_t> k, v;
  Problem() {
    p.n_seqs = 2;
    p.n_q_tokens = 3;
    p.n_q_heads = 8;
    p.n_kv_heads = 2;
    p.head_dim = {64, 64};
    p.k_type = KvType::q8_0;
    p.v_type = KvType::q4_0;
    p.kv_capacity = 700;
    std::mt19937_64 rng(7);
    std::normal_distribution<float> g;
    q.resize(size_t(p.n_seqs) * p.n_q_tokens * p.n_q_heads * p.head_dim.k);
    for (float& x : q) x = g(rng);
    const int64_t rows = int64_t{p.n_seqs} * p.kv_capacity * p.n_kv_heads;
    std::vector<float> src(size_t(rows) * 64);
    for (float& x : src) x = g(rng);
    k.resize(row_size(p.k_type, 64) * size_t(rows));
    v.resize(row_size(p.v_type, 64) * size_t(rows));
    quantize_rows(p.k_type, src.data(), rows, 64, k.data());
    for (float& x : src) x = g(rng);
    quantize_rows(p.v_type, src.data(), rows, 64, v.data());
  }
  std::vector<float> run(const PlanOptions& o) const {
    std::vector<float> out(size_t(p.n_seqs) * p.n_q_tokens * p.n_q_heads * p.head_dim.v, NAN);
    AttentionTensors t;
    t.q = q.data();
    t.k = kv_tensor_contiguous(k.data(), p.k_type, 64, p.n_kv_heads, p.kv_capacity);
    t.v = kv_tensor_contiguous(v.data(), p.v_type, 64, p.n_kv_heads, p.kv_capacity);
    t.out = out.data();
    const Status s = attention(p, t, o);
    EXPECT_TRUE(s) << (s ? "" : s.error().message);
    return out;
  }
};

// A caller's parallel-for that runs the tasks on this thread, last first, checking the slots.
struct Serial {
  int32_t calls = 0, bad = 0;
  static void run(void* user, int64_t n, int32_t n_threads, ParallelTask task, void* ctx) {
    auto* s = static_cast<Serial*>(user);
    ++s->calls;
    for (int64_t i = n - 1; i >= 0; --i) {
      const auto thread = static_cast<int32_t>(i % n_threads);
      if (thread >= 3) ++s->bad;
      task(ctx, i, thread);
    }
  }
};

TEST(ParallelFor, CallersParallelForGivesTheSameResultAsThePool) {
  const Problem pr;
  PlanOptions pool_opt;
  pool_opt.n_threads = 3;
  pool_opt.select.backend = Backend::cpu;
  pool_opt.select.read_environment = false;
  ThreadPool own(3);
  PlanOptions own_opt = pool_opt;
  own_opt.parallel_for = own.as_parallel_for();
  Serial serial;
  PlanOptions serial_opt = pool_opt;
  serial_opt.parallel_for = {Serial::run, &serial, 3};
  // The same plan shape (3 thread slots) on every parallel-for: the same bits.
  Expected<Plan> a = plan(pr.p, own_opt), b = plan(pr.p, serial_opt), c = plan(pr.p, pool_opt);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->n_threads, 3);
  EXPECT_EQ(b->n_threads, 3);
  const std::vector<float> ref = pr.run(own_opt);
  const std::vector<float> ser = pr.run(serial_opt);
  EXPECT_GT(serial.calls, 0);
  EXPECT_EQ(serial.bad, 0);
  ASSERT_EQ(ref.size(), ser.size());
  EXPECT_EQ(std::memcmp(ref.data(), ser.data(), ref.size() * sizeof(float)), 0);
  if (c->n_threads == 3) {  // the process pool has 3 threads or more on this machine
    const std::vector<float> pool = pr.run(pool_opt);
    EXPECT_EQ(std::memcmp(ref.data(), pool.data(), ref.size() * sizeof(float)), 0);
  }
  for (float x : ref) ASSERT_TRUE(std::isfinite(x));
}

TEST(ParallelFor, PlanTakesItsThreadCountFromTheParallelFor) {
  const Problem pr;
  Serial serial;
  PlanOptions o;
  o.select.backend = Backend::cpu;
  o.parallel_for = {Serial::run, &serial, 5};
  Expected<Plan> pl = plan(pr.p, o);
  ASSERT_TRUE(pl);
  EXPECT_EQ(pl->n_threads, 5);  // may exceed the hardware threads: the caller's pool decides
  o.n_threads = 2;
  pl = plan(pr.p, o);
  ASSERT_TRUE(pl);
  EXPECT_EQ(pl->n_threads, 2);
  o.parallel_for.max_threads = 0;
  pl = plan(pr.p, o);
  ASSERT_FALSE(pl);
  EXPECT_NE(pl.error().message.find("parallel_for.max_threads=0"), std::string::npos)
      << pl.error().message;
  o.parallel_for = {};
  o.spin_us = -1;
  pl = plan(pr.p, o);
  ASSERT_FALSE(pl);
  EXPECT_NE(pl.error().message.find("spin_us=-1"), std::string::npos) << pl.error().message;
}

// Concurrent attention calls with different thread counts on the process-wide pool: each gets
// the result it gets alone.
TEST(ParallelFor, ConcurrentAttentionCallsOnTheProcessPool) {
  const Problem pr;
  const int32_t hw = ThreadPool::process().size();
  std::vector<std::vector<float>> alone;
  for (int32_t c = 0; c < 3; ++c) {
    PlanOptions o;
    o.select.backend = Backend::cpu;
    o.select.read_environment = false;
    o.n_threads = 1 + c % hw;
    o.spin_us = c == 2 ? 100 : 0;
    alone.push_back(pr.run(o));
  }
  std::atomic<int32_t> mismatches{0};
  std::vector<std::thread> callers;
  for (int32_t c = 0; c < 3; ++c) {
    callers.emplace_back([&, c] {
      PlanOptions o;
      o.select.backend = Backend::cpu;
      o.select.read_environment = false;
      o.n_threads = 1 + c % hw;
      o.spin_us = c == 2 ? 100 : 0;
      for (int it = 0; it < 8; ++it) {
        const std::vector<float> out = pr.run(o);
        if (std::memcmp(out.data(), alone[size_t(c)].data(), out.size() * sizeof(float)) != 0)
          mismatches.fetch_add(1);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace kvflash
