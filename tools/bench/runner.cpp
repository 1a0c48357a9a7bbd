#include "bench/runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>

#include "common/kernel_note.hpp"
#include "kvflash/device.hpp"

namespace kvflash::bench {
namespace {

constexpr size_t kPatternRows = 4096;
// Before each timed CUDA call: a device spin this long (far longer than the 10-20 us the host
// takes to enqueue a cuda.decode call) holds the stream while the host enqueues the call (see
// time_point_cuda), so the events time the device work alone. A spin, not a fill: a fill leaves
// the L2 full of dirty lines whose write-back the timed call would pay for (the rotation of KV
// copies already keeps the KV out of the L2). scripts/bench_sdpa.py covers launches the same way.
constexpr double kLaunchCoverUs = 200.0;

Error out_of_memory(std::string msg) {
  return Error{ErrorCode::out_of_memory, std::move(msg)};
}

double gib(double bytes) {
  return bytes / double(1 << 30);
}

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// Random rows quantized once (kPatternRows of them), then tiled over the cache: the kernels'
// speed does not depend on the values, and quantizing millions of rows (turbo: a rotation each)
// would dominate the run. The same generator, in the same order, for both backends.
struct Patterns {
  std::vector<uint8_t> k, v;
  size_t rows = 0;
};
Patterns make_patterns(const AttentionProblem& p, int64_t n_rows, std::mt19937_64& rng,
                       std::normal_distribution<float>& g) {
  Patterns pt;
  pt.rows = std::min<size_t>(kPatternRows, size_t(n_rows));
  pt.k.resize(row_size(p.k_type, p.head_dim.k) * pt.rows);
  pt.v.resize(row_size(p.v_type, p.head_dim.v) * pt.rows);
  std::vector<float> src(pt.rows * std::max(p.head_dim.k, p.head_dim.v));
  for (float& x : src) x = g(rng);
  quantize_rows(p.k_type, src.data(), int64_t(pt.rows), p.head_dim.k, pt.k.data());
  quantize_rows(p.v_type, src.data(), int64_t(pt.rows), p.head_dim.v, pt.v.data());
  return pt;
}

// Repeats the first `have` bytes of the device range [base, base + total) over all of it, doubling
// what is filled with each device-to-device copy.
Status replicate_on_device(uint8_t* base, size_t have, size_t total, void* stream) {
  while (have < total) {
    const size_t n = std::min(have, total - have);
    if (Status s = gpu::copy(base + have, base, n, stream); !s) return s;
    have += n;
  }
  return {};
}

// A ragged batch's tensors.kv_lens and tensors.q_offsets (both empty without one), and the
// packed query rows of q and out.
struct RaggedQueries {
  std::vector<int64_t> kv_lens;
  std::vector<int32_t> offsets;
  int64_t rows = 0;
};
RaggedQueries ragged_queries(const AttentionProblem& p, const RaggedBatch& b) {
  RaggedQueries rq;
  if (!b.empty()) rq.kv_lens = b.kv_lens;
  if (p.ragged_q) {
    rq.offsets = {0};
    for (int32_t n : b.q_lens) rq.offsets.push_back(rq.offsets.back() + n);
  }
  rq.rows = q_total_rows(p, rq.offsets.empty() ? nullptr : rq.offsets.data());
  return rq;
}

// CUDA kernels: every buffer in device memory, every call on one stream, each timed call between
// two events (gpu::time_ms). The KV copies (one allocation, gpu_rotation_copies of them, at least
// 4x the L2 together) are used in turn, first the one uploaded first, so no call finds its KV in
// the L2.
Expected<Timing> time_point_cuda(const Plan& pl, const RunConfig& cfg, const RaggedQueries& rq) {
  if (cuda_device_count() == 0)
    return unsupported(
        fmt::format("kernel '{}' is a CUDA kernel and no CUDA device is visible", pl.kernel->name));
  const AttentionProblem& p = pl.problem;
  const int64_t n_rows = int64_t{p.n_seqs} * p.kv_capacity * p.n_kv_heads;
  const size_t krow = row_size(p.k_type, p.head_dim.k), vrow = row_size(p.v_type, p.head_dim.v);
  // Paged (page_size > 0): every sequence's pages spread over one pool in a shuffled order, as
  // a serving engine's page table ends up after many requests; the pool is the K (V) region.
  const int32_t pps = static_cast<int32_t>(pages_per_seq(p.kv_capacity, p.page_size));
  const int64_t n_pages = int64_t{p.n_seqs} * pps;
  const KvTensor k_layout = kv_tensor_paged(nullptr, p.k_type, p.head_dim.k, p.n_kv_heads,
                                            p.page_size, n_pages, nullptr, pps);
  const KvTensor v_layout = kv_tensor_paged(nullptr, p.v_type, p.head_dim.v, p.n_kv_heads,
                                            p.page_size, n_pages, nullptr, pps);
  const size_t k_bytes =
      p.page_size > 0 ? size_t(n_pages * k_layout.stride_page) : krow * size_t(n_rows);
  const size_t v_bytes =
      p.page_size > 0 ? size_t(n_pages * v_layout.stride_page) : vrow * size_t(n_rows);
  const size_t v_off = round_up(k_bytes, 4096);
  const size_t copy_bytes = v_off + v_bytes;
  const size_t stride = round_up(copy_bytes, 4096);
  const int64_t copies = gpu_rotation_copies(static_cast<int64_t>(stride));
  const size_t n_q = size_t(rq.rows) * p.n_q_heads;
  // Every message names where the point failed; bench.cpp prefixes the point itself.
  auto fail = [&](const std::string& what, const Error& e) {
    return Error{e.code, fmt::format("on the GPU: {}: {}", what, e.message)};
  };

  Expected<gpu::Stream> stream_or = gpu::Stream::create();
  if (!stream_or) return fail("creating a stream", stream_or.error());
  void* const stream = stream_or->handle();
  Expected<gpu::DeviceBuffer> kv = gpu::DeviceBuffer::allocate(stride * size_t(copies));
  if (!kv)
    return fail(fmt::format("allocating {} KV copies of {:.3f} GiB", copies, gib(double(stride))),
                kv.error());
  Expected<gpu::DeviceBuffer> q_dev =
      gpu::DeviceBuffer::allocate(n_q * p.head_dim.k * sizeof(float));
  if (!q_dev) return fail("allocating q", q_dev.error());
  Expected<gpu::DeviceBuffer> out = gpu::DeviceBuffer::allocate(n_q * p.head_dim.v * sizeof(float));
  if (!out) return fail("allocating out", out.error());
  // Every sequence full, as on the CPU (which passes no lengths), or a ragged batch's lengths;
  // CUDA kernels read them (and a ragged batch's offsets) on the device.
  const std::vector<int64_t> lens =
      rq.kv_lens.empty() ? std::vector<int64_t>(size_t(p.n_seqs), p.kv_capacity) : rq.kv_lens;
  Expected<gpu::DeviceBuffer> lens_dev = gpu::DeviceBuffer::allocate(lens.size() * sizeof(int64_t));
  if (!lens_dev) return fail("allocating kv_lens", lens_dev.error());
  Expected<gpu::DeviceBuffer> offsets_dev =
      gpu::DeviceBuffer::allocate(std::max<size_t>(1, rq.offsets.size() * sizeof(int32_t)));
  if (!offsets_dev) return fail("allocating q_offsets", offsets_dev.error());
  Expected<gpu::DeviceBuffer> ws = gpu::DeviceBuffer::allocate(pl.workspace_bytes);
  if (!ws) return fail("allocating the workspace", ws.error());
  std::vector<int32_t> table(static_cast<size_t>(n_pages));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(cfg.seed + 1));
  Expected<gpu::DeviceBuffer> table_dev =
      gpu::DeviceBuffer::allocate(std::max<size_t>(1, table.size() * sizeof(int32_t)));
  if (!table_dev) return fail("allocating the page table", table_dev.error());

  // The CPU path's values: the same generator, in the same order (patterns, then q).
  std::mt19937_64 rng(cfg.seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const Patterns pt = make_patterns(p, n_rows, rng, g);
  std::vector<float> q(n_q * p.head_dim.k);
  for (float& x : q) x = g(rng);
  auto* base = static_cast<uint8_t*>(kv->data());
  Status st = gpu::copy(base, pt.k.data(), pt.k.size(), stream);
  if (st) st = gpu::copy(base + v_off, pt.v.data(), pt.v.size(), stream);
  if (st) st = replicate_on_device(base, pt.k.size(), k_bytes, stream);
  if (st) st = replicate_on_device(base + v_off, pt.v.size(), v_bytes, stream);
  if (st && !table.empty())
    st = gpu::copy(table_dev->data(), table.data(), table.size() * sizeof(int32_t), stream);
  if (st) st = replicate_on_device(base, stride, stride * size_t(copies), stream);
  if (st) st = gpu::copy(q_dev->data(), q.data(), q.size() * sizeof(float), stream);
  if (st) st = gpu::copy(lens_dev->data(), lens.data(), lens.size() * sizeof(int64_t), stream);
  if (st && !rq.offsets.empty())
    st = gpu::copy(offsets_dev->data(), rq.offsets.data(), rq.offsets.size() * sizeof(int32_t),
                   stream);
  if (st) st = stream_or->synchronize();
  if (!st) return fail("copying the inputs to the device", st.error());

  Timing tm{pl.kernel->name, Backend::cuda, 1, copies, {}};
  for (int32_t it = 0; it < cfg.warmup + cfg.reps; ++it) {
    const uint8_t* kv_base = base + stride * size_t(it % copies);
    AttentionTensors t;
    t.q = static_cast<const float*>(q_dev->data());
    if (p.page_size > 0) {
      const auto* pages = static_cast<const int32_t*>(table_dev->data());
      t.k = kv_tensor_paged(kv_base, p.k_type, p.head_dim.k, p.n_kv_heads, p.page_size, n_pages,
                            pages, pps);
      t.v = kv_tensor_paged(kv_base + v_off, p.v_type, p.head_dim.v, p.n_kv_heads, p.page_size,
                            n_pages, pages, pps);
    } else {
      t.k = kv_tensor_contiguous(kv_base, p.k_type, p.head_dim.k, p.n_kv_heads, p.kv_capacity);
      t.v = kv_tensor_contiguous(kv_base + v_off, p.v_type, p.head_dim.v, p.n_kv_heads,
                                 p.kv_capacity);
    }
    t.kv_lens = static_cast<const int64_t*>(lens_dev->data());
    if (p.ragged_q) t.q_offsets = static_cast<const int32_t*>(offsets_dev->data());
    t.out = static_cast<float*>(out->data());
    bool timed = false;
    auto enqueue = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      const Status s = run(pl, t, ws->data(), stream);
      const std::chrono::duration<double, std::micro> host = std::chrono::steady_clock::now() - t0;
      if (timed) tm.host_us.push_back(host.count());
      return s;
    };
    if (it < cfg.warmup) {
      if (Status s = enqueue(); !s) return fail("run()", s.error());
      continue;
    }
    // The start event is recorded behind a device-side spin that takes longer than the host
    // needs to enqueue the call, so the call is queued before the start event fires and its
    // launch latency stays out of the measurement.
    if (Status s = gpu::spin(kLaunchCoverUs, stream); !s)
      return fail("the launch cover", s.error());
    timed = true;
    const Expected<double> ms = gpu::time_ms(stream, enqueue);
    if (!ms) return fail("run()", ms.error());
    tm.us.push_back(*ms * 1e3);
  }
  std::sort(tm.host_us.begin(), tm.host_us.end());
  if (Status s = stream_or->synchronize(); !s) return fail("after the timed calls", s.error());
  if (Status s = gpu::last_error(); !s) return fail("after the timed calls", s.error());
  std::sort(tm.us.begin(), tm.us.end());
  return tm;
}

Expected<Timing> time_point_cpu(const Plan& pl, const RunConfig& cfg, const RaggedQueries& rq) {
  const AttentionProblem& p = pl.problem;
  const int64_t n_rows = int64_t{p.n_seqs} * p.kv_capacity * p.n_kv_heads;
  const size_t krow = row_size(p.k_type, p.head_dim.k), vrow = row_size(p.v_type, p.head_dim.v);
  // Paged (page_size > 0): as on the GPU, every sequence's pages spread over one pool in a
  // shuffled order; the pool is the K (V) region.
  const int32_t pps = static_cast<int32_t>(pages_per_seq(p.kv_capacity, p.page_size));
  const int64_t n_pages = int64_t{p.n_seqs} * pps;
  std::vector<int32_t> table(static_cast<size_t>(n_pages));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(cfg.seed + 1));
  const auto layout = [&](const uint8_t* data, KvType t, int32_t dim) {
    return p.page_size > 0 ? kv_tensor_paged(data, t, dim, p.n_kv_heads, p.page_size, n_pages,
                                             table.data(), pps)
                           : kv_tensor_contiguous(data, t, dim, p.n_kv_heads, p.kv_capacity);
  };
  const KvTensor k_layout = layout(nullptr, p.k_type, p.head_dim.k);
  const KvTensor v_layout = layout(nullptr, p.v_type, p.head_dim.v);
  const size_t k_bytes =
      p.page_size > 0 ? size_t(n_pages * k_layout.stride_page) : krow * size_t(n_rows);
  const size_t v_bytes =
      p.page_size > 0 ? size_t(n_pages * v_layout.stride_page) : vrow * size_t(n_rows);
  const size_t v_off = (k_bytes + 4095) / 4096 * 4096;
  const size_t copy_bytes = v_off + v_bytes;
  const size_t n_q = size_t(rq.rows) * p.n_q_heads;
  const size_t fixed = n_q * (p.head_dim.k + p.head_dim.v) * sizeof(float) + pl.workspace_bytes;
  if (static_cast<double>(copy_bytes + fixed) > static_cast<double>(cfg.memory_budget))
    return out_of_memory(fmt::format(
        "{} needs {:.2f} GiB of inputs, more than the {:.2f} GiB this run may use (the smaller of "
        "8 GiB and 70% of MemAvailable)",
        describe(p), gib(double(copy_bytes + fixed)), gib(double(cfg.memory_budget))));
  const int64_t copies =
      rotation_copies(static_cast<int64_t>(copy_bytes), cfg.llc_bytes, cfg.warmup + cfg.reps,
                      cfg.memory_budget - static_cast<int64_t>(fixed));

  std::mt19937_64 rng(cfg.seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const Patterns pt = make_patterns(p, n_rows, rng, g);
  const size_t pat = pt.rows;
  const std::vector<uint8_t>& kpat = pt.k;
  const std::vector<uint8_t>& vpat = pt.v;
  std::vector<HugeBuffer> bufs;
  for (int64_t c = 0; c < copies; ++c) {
    bufs.emplace_back(copy_bytes);
    if (!bufs.back())
      return out_of_memory(fmt::format("cannot allocate input copy {} of {} ({:.2f} GiB)", c + 1,
                                       copies, gib(double(copy_bytes))));
  }
  // Every row of every sequence (through the page table when paged), from the patterns in turn.
  size_t r = 0;
  for (int64_t seq = 0; seq < p.n_seqs; ++seq)
    for (int64_t tok = 0; tok < p.kv_capacity; ++tok)
      for (int64_t h = 0; h < p.n_kv_heads; ++h, ++r) {
        std::memcpy(bufs[0].data() + kv_row_offset(k_layout, p.page_size, seq, tok, h),
                    kpat.data() + (r % pat) * krow, krow);
        std::memcpy(bufs[0].data() + v_off + kv_row_offset(v_layout, p.page_size, seq, tok, h),
                    vpat.data() + (r % pat) * vrow, vrow);
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
    t.k = layout(base, p.k_type, p.head_dim.k);
    t.v = layout(base + v_off, p.v_type, p.head_dim.v);
    t.out = out.data();
    t.kv_lens = rq.kv_lens.empty() ? nullptr : rq.kv_lens.data();
    t.q_offsets = rq.offsets.empty() ? nullptr : rq.offsets.data();
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

int64_t gpu_rotation_copies(int64_t copy_bytes) {
  copy_bytes = std::max<int64_t>(1, copy_bytes);
  const int64_t n = std::max<int64_t>(2, (kGpuRotationBytes + copy_bytes - 1) / copy_bytes);
  return std::max<int64_t>(1, std::min(n, kGpuMaxInputBytes / copy_bytes));
}

int64_t rotation_copies(int64_t copy_bytes, int64_t llc_bytes, int64_t calls, int64_t budget) {
  copy_bytes = std::max<int64_t>(1, copy_bytes);
  int64_t n = (2 * llc_bytes + copy_bytes - 1) / copy_bytes;
  n = std::min({n, calls, budget / copy_bytes});
  return std::max<int64_t>(1, n);
}

Expected<Timing> time_point(const AttentionProblem& p, const RunConfig& cfg,
                            const RaggedBatch& ragged) {
  const RaggedQueries rq = ragged_queries(p, ragged);
  PlanOptions po;
  po.select.backend = cfg.backend;
  po.n_threads = cfg.threads;
  // The timed calls follow each other at once, as in a decode loop that keeps the CPU busy: the
  // pool's workers spin between them instead of sleeping (a wake-up costs tens of microseconds).
  po.spin_us = 2000;
  Expected<Plan> pl = plan(p, po);
  if (!pl) return pl.error();
  tools::note_portable_kernel(*pl);
  Expected<Timing> t = pl->kernel->backend == Backend::cuda ? time_point_cuda(*pl, cfg, rq)
                                                            : time_point_cpu(*pl, cfg, rq);
  if (t) t->splits = pl->n_splits;
  return t;
}

}  // namespace kvflash::bench
