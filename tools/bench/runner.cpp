#include "bench/runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

namespace kvflash::bench {
namespace {

constexpr size_t kPatternRows = 4096;

Error out_of_memory(std::string msg) {
  return Error{ErrorCode::out_of_memory, std::move(msg)};
}

double gib(double bytes) {
  return bytes / double(1 << 30);
}

// Not built yet: CUDA kernels need device buffers, a copy of the inputs in device memory and
// event timing after warm-up. When the CUDA backend registers kernels, that runner goes here.
Expected<Timing> time_point_cuda(const Plan& pl, const RunConfig&) {
  return unsupported(fmt::format(
      "kernel '{}' is a CUDA kernel, and this kvflash-bench has no CUDA runner yet (device buffers "
      "and event timing come with the CUDA kernels); use --backend cpu",
      pl.kernel->name));
}

Expected<Timing> time_point_cpu(const Plan& pl, const RunConfig& cfg) {
  const AttentionProblem& p = pl.problem;
  const int64_t n_rows = int64_t{p.n_seqs} * p.kv_capacity * p.n_kv_heads;
  const size_t krow = row_size(p.k_type, p.head_dim.k), vrow = row_size(p.v_type, p.head_dim.v);
  const size_t v_off = (krow * n_rows + 4095) / 4096 * 4096;
  const size_t copy_bytes = v_off + vrow * n_rows;
  const size_t n_q = size_t(p.n_seqs) * p.n_q_tokens * p.n_q_heads;
  const size_t fixed = n_q * (p.head_dim.k + p.head_dim.v) * sizeof(float) + pl.workspace_bytes;
  if (static_cast<double>(copy_bytes + fixed) > static_cast<double>(cfg.memory_budget))
    return out_of_memory(fmt::format(
        "{} needs {:.2f} GiB of inputs, more than the {:.2f} GiB this run may use (the smaller of "
        "8 GiB and 70% of MemAvailable)",
        describe(p), gib(double(copy_bytes + fixed)), gib(double(cfg.memory_budget))));
  const int64_t copies =
      rotation_copies(static_cast<int64_t>(copy_bytes), cfg.llc_bytes, cfg.warmup + cfg.reps,
                      cfg.memory_budget - static_cast<int64_t>(fixed));

  // Random rows quantized once, then tiled: the kernels' speed does not depend on the values,
  // and quantizing millions of rows (turbo: a rotation each) would dominate the run.
  std::mt19937_64 rng(cfg.seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const size_t pat = std::min<size_t>(kPatternRows, size_t(n_rows));
  std::vector<uint8_t> kpat(krow * pat), vpat(vrow * pat);
  {
    std::vector<float> src(pat * std::max(p.head_dim.k, p.head_dim.v));
    for (float& x : src) x = g(rng);
    quantize_rows(p.k_type, src.data(), int64_t(pat), p.head_dim.k, kpat.data());
    quantize_rows(p.v_type, src.data(), int64_t(pat), p.head_dim.v, vpat.data());
  }
  std::vector<HugeBuffer> bufs;
  for (int64_t c = 0; c < copies; ++c) {
    bufs.emplace_back(copy_bytes);
    if (!bufs.back())
      return out_of_memory(fmt::format("cannot allocate input copy {} of {} ({:.2f} GiB)", c + 1,
                                       copies, gib(double(copy_bytes))));
  }
  for (size_t r = 0; r < size_t(n_rows); r += pat) {
    const size_t n = std::min(pat, size_t(n_rows) - r);
    std::memcpy(bufs[0].data() + r * krow, kpat.data(), n * krow);
    std::memcpy(bufs[0].data() + v_off + r * vrow, vpat.data(), n * vrow);
  }
  for (int64_t c = 1; c < copies; ++c) std::memcpy(bufs[c].data(), bufs[0].data(), copy_bytes);

  std::vector<float> q(n_q * p.head_dim.k), out(n_q * p.head_dim.v);
  for (float& x : q) x = g(rng);
  std::vector<uint8_t> ws(pl.workspace_bytes);
  if (cfg.evict != nullptr) stream_read(*cfg.evict, cfg.evict->size(), cfg.evict_threads);

  Timing tm{pl.kernel->name, Backend::cpu, pl.n_threads, copies, {}};
  for (int32_t it = 0; it < cfg.warmup + cfg.reps; ++it) {
    const uint8_t* base = bufs[size_t(it % copies)].data();
    AttentionTensors t;
    t.q = q.data();
    t.k = kv_tensor_contiguous(base, p.k_type, p.head_dim.k, p.n_kv_heads, p.kv_capacity);
    t.v = kv_tensor_contiguous(base + v_off, p.v_type, p.head_dim.v, p.n_kv_heads, p.kv_capacity);
    t.out = out.data();
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = run(pl, t, ws.data());
    const auto t1 = std::chrono::steady_clock::now();
    if (!s) return s.error();
    if (it >= cfg.warmup)
      tm.us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(tm.us.begin(), tm.us.end());
  return tm;
}

}  // namespace

int64_t rotation_copies(int64_t copy_bytes, int64_t llc_bytes, int64_t calls, int64_t budget) {
  copy_bytes = std::max<int64_t>(1, copy_bytes);
  int64_t n = (2 * llc_bytes + copy_bytes - 1) / copy_bytes;
  n = std::min({n, calls, budget / copy_bytes});
  return std::max<int64_t>(1, n);
}

Expected<Timing> time_point(const AttentionProblem& p, const RunConfig& cfg) {
  PlanOptions po;
  po.select.backend = cfg.backend;
  po.n_threads = cfg.threads;
  Expected<Plan> pl = plan(p, po);
  if (!pl) return pl.error();
  if (pl->kernel->backend == Backend::cuda) return time_point_cuda(*pl, cfg);
  return time_point_cpu(*pl, cfg);
}

}  // namespace kvflash::bench
