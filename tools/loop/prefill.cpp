#include "loop/prefill.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <tuple>

#include "bench/metrics.hpp"
#include "kvflash/device.hpp"
#include "kvflash/registry.hpp"
#include "loop/step_util.hpp"

namespace kvflash::tools::loop {
namespace {

// Device f32 rows of random values: the chunk's K and V (every layer appends the same chunk:
// speed does not depend on the values), the queries, and the output every layer writes.
struct ChunkBuffers {
  gpu::DeviceBuffer k, v, q, out;
};

Expected<gpu::DeviceBuffer> random_buffer(size_t n, std::mt19937_64& rng, void* stream) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> host(n);
  for (float& x : host) x = g(rng);
  Expected<gpu::DeviceBuffer> b = gpu::DeviceBuffer::allocate(n * sizeof(float));
  if (!b) return b.error();
  if (Status s = gpu::copy(b->data(), host.data(), n * sizeof(float), stream); !s) return s.error();
  if (Status s = gpu::synchronize(stream); !s) return s.error();  // before `host` goes
  return b;
}

Expected<ChunkBuffers> chunk_buffers(const LoopConfig& c, void* stream) {
  const plan::ModelShape& m = c.model;
  const size_t rows = size_t(c.seqs) * size_t(c.chunk);
  std::mt19937_64 rng(c.seed);
  ChunkBuffers b;
  for (auto [dst, n, what] :
       {std::tuple{&b.k, rows * size_t(m.kv_heads) * size_t(m.head_dim.k), "the chunk's K"},
        std::tuple{&b.v, rows * size_t(m.kv_heads) * size_t(m.head_dim.v), "the chunk's V"},
        std::tuple{&b.q, rows * size_t(m.q_heads) * size_t(m.head_dim.k), "q"}}) {
    Expected<gpu::DeviceBuffer> buf = random_buffer(n, rng, stream);
    if (!buf) return at(fmt::format("allocating {}", what), buf.error());
    *dst = std::move(*buf);
  }
  Expected<gpu::DeviceBuffer> out =
      gpu::DeviceBuffer::allocate(rows * size_t(m.q_heads) * size_t(m.head_dim.v) * sizeof(float));
  if (!out) return at("allocating out", out.error());
  b.out = std::move(*out);
  return b;
}

Status set_all_lengths(gpu::KvCache& cache, int64_t len, void* stream) {
  const std::vector<int64_t> lens(size_t(cache.config().n_seqs), len);
  return cache.set_lengths(lens, stream);
}

// Every row of one type: fill the cache, then per depth time the attention alone and the steps.
Status run_type(const LoopConfig& c, gpu::KvLayerTypes types, const ChunkBuffers& buf,
                int64_t capacity, void* stream, gpu::GraphRunner& runner,
                std::vector<PrefillRow>& rows) {
  const plan::ModelShape& m = c.model;
  const std::string name = fmt::format("{}/{}", to_string(types.k), to_string(types.v));
  gpu::KvCacheConfig cc;
  cc.n_seqs = c.seqs;
  cc.n_kv_heads = m.kv_heads;
  cc.head_dim = m.head_dim;
  cc.layers.assign(size_t(m.layers), types);
  cc.capacity = capacity;
  Expected<gpu::KvCache> cache_or = gpu::KvCache::create(cc, stream);
  if (!cache_or) return at(fmt::format("creating the {} cache", name), cache_or.error());
  gpu::KvCache& cache = *cache_or;
  PlanOptions opt;
  opt.select.backend = Backend::cuda;
  const AttentionProblem p = cache.problem(0, m.q_heads, c.chunk);
  Expected<Plan> plan = kvflash::plan(p, opt);  // every layer has these types: one plan
  if (!plan) return at(fmt::format("planning {}", describe(p)), plan.error());
  gpu::DeviceBuffer ws;
  if (plan->workspace_bytes > 0) {
    Expected<gpu::DeviceBuffer> w = gpu::DeviceBuffer::allocate(plan->workspace_bytes);
    if (!w) return at("allocating the workspace", w.error());
    ws = std::move(*w);
  }
  const auto* q = static_cast<const float*>(buf.q.data());
  auto* out = static_cast<float*>(buf.out.data());
  const auto* k_new = static_cast<const float*>(buf.k.data());
  const auto* v_new = static_cast<const float*>(buf.v.data());
  const int32_t n_layers = cache.n_layers();

  // The context: appended from empty up to the largest depth, chunk by chunk.
  if (Status s = set_all_lengths(cache, 0, stream); !s) return s;
  const int64_t max_depth = *std::max_element(c.depths.begin(), c.depths.end());
  for (const int32_t n : fill_appends(max_depth, c.chunk)) {
    if (Status s = cache.begin_step(n, stream); !s) return at("filling the cache", s.error());
    for (int32_t l = 0; l < n_layers; ++l)
      if (Status s = cache.append(l, k_new, v_new, n, stream); !s)
        return at(fmt::format("filling layer {}", l), s.error());
  }
  if (Status s = gpu::synchronize(stream); !s) return s;

  auto attend = [&]() -> Status {
    for (int32_t l = 0; l < n_layers; ++l)
      if (Status s = run(*plan, cache.tensors(l, q, out), ws.data(), stream); !s)
        return at(fmt::format("layer {}", l), s.error());
    return {};
  };
  // One chunk: lengths += N on the device, then per layer its rows appended and its attention.
  auto step = [&]() -> Status {
    if (Status s = cache.begin_step(c.chunk, stream); !s) return s;
    for (int32_t l = 0; l < n_layers; ++l) {
      if (Status s = cache.append(l, k_new, v_new, c.chunk, stream); !s)
        return at(fmt::format("appending to layer {}", l), s.error());
      if (Status s = run(*plan, cache.tensors(l, q, out), ws.data(), stream); !s)
        return at(fmt::format("layer {}", l), s.error());
    }
    return {};
  };
  StepKey key;
  key.mix(uint64_t(n_layers));
  key.mix(cache.k(0).data);
  key.mix(cache.v(0).data);
  for (const void* b : {buf.k.data(), buf.v.data(), buf.q.data(), buf.out.data(), ws.data()})
    key.mix(b);
  const ShapeSignature sig = ShapeSignature::of(plan->problem, key.value());
  StepKind last_kind = StepKind::eager;
  auto graph_step = [&]() -> Status {
    const Expected<StepKind> k = runner.step(sig, step);
    if (!k) return k.error();
    last_kind = *k;
    return {};
  };

  for (const int64_t depth : c.depths) {
    const ChunkStep cs = chunk_step(depth, c.chunk, c.seqs);
    // The attention alone, over d + N keys (the lengths after a step), eagerly.
    if (Status s = set_all_lengths(cache, cs.kv_after, stream); !s) return s;
    std::vector<double> attention_ms;
    for (int32_t r = 0; r <= c.kernel_reps; ++r) {
      const Expected<double> ms = gpu::time_ms(stream, attend);
      if (!ms) return at(fmt::format("{} attention at depth {}", name, depth), ms.error());
      if (r > 0) attention_ms.push_back(*ms);  // the first is a warm-up
    }
    const double flops = chunk_flops(m, c.seqs, c.chunk, depth);
    auto timed = [&](bool graphs) -> Status {
      const std::function<Status()> one =
          graphs ? std::function<Status()>(graph_step) : std::function<Status()>(step);
      const std::string what =
          fmt::format("{} step at depth {} ({})", name, depth, graphs ? "graph" : "eager");
      std::vector<double> ms;
      for (int32_t i = 0; i < kPrefillWarmupSteps + c.tokens; ++i) {
        if (Status s = set_all_lengths(cache, cs.kv_before, stream); !s) return at(what, s.error());
        const Expected<double> t = gpu::time_ms(stream, one);
        if (!t) return at(what, t.error());
        if (i < kPrefillWarmupSteps) continue;
        // A timed graph step must be a replay: anything else would time a capture or eager run.
        if (graphs && last_kind != StepKind::replay)
          return unsupported(fmt::format("{}: a timed step ran as {}", what, to_string(last_kind)));
        ms.push_back(*t);
      }
      PrefillRow row;
      row.types = types;
      row.depth = depth;
      row.graphs = graphs;
      row.ms_per_step = median(ms);
      row.tokens_per_s = prefill_tokens_per_second(c.chunk, c.seqs, row.ms_per_step);
      row.attention_ms = median(attention_ms);
      row.tflops = flops / (row.attention_ms * 1e-3) / 1e12;
      row.kernel = plan->kernel->name;
      row.kernel_nodes = graphs ? int64_t(runner.kernel_nodes()) : 0;
      rows.push_back(row);
      return {};
    };
    if (c.graphs_off)
      if (Status s = timed(false); !s) return s;
    if (c.graphs_on)
      if (Status s = timed(true); !s) return s;
  }
  if (Status s = gpu::synchronize(stream); !s) return s;
  if (Status s = gpu::last_error(); !s) return s;
  // Every step fitted (the capacity is the largest depth plus one chunk): a full mark is a bug.
  Expected<std::vector<int32_t>> full = cache.full_sequences(stream);
  if (!full) return full.error();
  if (!full->empty())
    return unsupported(fmt::format("the {} cache marked {} sequence(s) full", name, full->size()));
  return {};
}

}  // namespace

std::vector<gpu::KvLayerTypes> default_prefill_types() {
  using enum KvType;
  return {{f16, f16}, {q8_0, q8_0}, {q4_0, q4_0}, {turbo4, turbo4}, {turbo3, turbo3}};
}

int64_t prefill_capacity(const std::vector<int64_t>& depths, int32_t chunk) {
  const int64_t max_depth = depths.empty() ? 0 : *std::max_element(depths.begin(), depths.end());
  return max_depth + chunk;
}

std::vector<int32_t> fill_appends(int64_t depth, int32_t chunk) {
  std::vector<int32_t> n;
  for (int64_t have = 0; have < depth; have += chunk)
    n.push_back(static_cast<int32_t>(std::min<int64_t>(chunk, depth - have)));
  return n;
}

ChunkStep chunk_step(int64_t depth, int32_t chunk, int32_t seqs) {
  return {depth, depth + chunk, int64_t{chunk} * seqs, depth, depth + chunk - 1};
}

double chunk_flops(const plan::ModelShape& m, int32_t seqs, int32_t chunk, int64_t depth) {
  AttentionProblem p;
  p.n_seqs = seqs;
  p.n_q_tokens = chunk;
  p.n_q_heads = m.q_heads;
  p.n_kv_heads = m.kv_heads;
  p.head_dim = m.head_dim;
  p.kv_capacity = depth + chunk;  // bench's layout: every sequence holds kv_capacity tokens
  return bench::attention_flops(p) * m.layers;
}

double prefill_tokens_per_second(int32_t chunk, int32_t seqs, double ms) {
  return double(chunk) * seqs / (ms * 1e-3);
}

void set_f16_ratios(std::vector<PrefillRow>& rows) {
  for (PrefillRow& r : rows) {
    r.vs_f16 = std::numeric_limits<double>::quiet_NaN();
    for (const PrefillRow& f : rows)
      if (f.types.k == KvType::f16 && f.types.v == KvType::f16 && f.depth == r.depth &&
          f.graphs == r.graphs)
        r.vs_f16 = r.tokens_per_s / f.tokens_per_s;
  }
}

Expected<PrefillReport> run_prefill(const LoopConfig& cfg) {
  const plan::ModelShape& m = cfg.model;
  if (m.mla || m.swa_layers > 0)
    return unsupported(
        "kvflash-loop models full-attention layers only (no MLA latent sharing, no sliding-window "
        "layers): give --layers/--heads/--head-dim instead of this preset");
  if (cfg.chunk < 2 || cfg.seqs < 1 || cfg.prefill_types.empty() || cfg.depths.empty() ||
      cfg.tokens < 1 || cfg.kernel_reps < 1)
    return invalid_argument(
        "kvflash-loop: the prefill mode needs a chunk of 2 or more tokens, a sequence, a type "
        "pair, a depth, a timed step and a kernel rep");
  if (cuda_device_count() == 0)
    return unsupported(
        "no CUDA device is visible (or this build has no CUDA "
        "backend: configure with KVFLASH_CUDA=ON on a machine with nvcc)");
  Expected<gpu::Stream> stream = gpu::Stream::create();
  if (!stream) return at("creating a stream", stream.error());
  Expected<ChunkBuffers> buf = chunk_buffers(cfg, stream->handle());
  if (!buf) return buf.error();
  PrefillReport rep;
  rep.capacity = prefill_capacity(cfg.depths, cfg.chunk);
  gpu::GraphRunner runner(stream->handle());
  // One type at a time: its cache is freed before the next is created.
  for (const gpu::KvLayerTypes t : cfg.prefill_types)
    if (Status s = run_type(cfg, t, *buf, rep.capacity, stream->handle(), runner, rep.rows); !s)
      return s.error();
  set_f16_ratios(rep.rows);
  rep.counters = runner.counters();
  return rep;
}

}  // namespace kvflash::tools::loop
