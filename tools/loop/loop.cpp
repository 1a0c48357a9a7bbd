#include "loop/loop.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <random>
#include <utility>

#include "kvflash/device.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/registry.hpp"
#include "loop/step_util.hpp"

namespace kvflash::tools::loop {
namespace {

constexpr size_t kAlign = 256;
// Random rows quantized once per (type, dim) and tiled over every cache: speed does not depend on
// the values, and quantizing gigabytes on the host would dominate the run.
constexpr int64_t kPatternRows = 4096;
// Before each kernel timed alone: a device spin long enough to cover the host's enqueue (as
// kvflash-bench).
constexpr double kLaunchCoverUs = 200.0;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

AttentionProblem layer_problem(const LoopConfig& c, size_t layer, int64_t capacity) {
  AttentionProblem p;
  p.n_seqs = 1;
  p.n_q_tokens = 1;
  p.n_q_heads = c.model.q_heads;
  p.n_kv_heads = c.model.kv_heads;
  p.head_dim = c.model.head_dim;
  p.k_type = c.k_types[layer];
  p.v_type = c.v_types[layer];
  p.kv_capacity = capacity;
  return p;
}

// Repeats the first `have` bytes of [base, base + total) over all of it.
Status replicate(uint8_t* base, size_t have, size_t total, void* stream) {
  while (have < total) {
    const size_t n = std::min(have, total - have);
    if (Status s = gpu::copy(base + have, base, n, stream); !s) return s.error();
    have += n;
  }
  return {};
}

struct Layer {
  Plan plan;
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  size_t k_bytes = 0, v_bytes = 0;
};

}  // namespace

Expected<std::vector<KvType>> expand_types(std::string_view flag, const std::vector<KvType>& types,
                                           int32_t layers) {
  if (types.size() == 1) return std::vector<KvType>(size_t(layers), types[0]);
  if (static_cast<int64_t>(types.size()) == layers) return types;
  return invalid_argument(
      fmt::format("{}: {} types given; expected one (for every layer) or {} (one per layer)", flag,
                  types.size(), layers));
}

int64_t planned_kv_bytes(const plan::ModelShape& m, const std::vector<KvType>& k,
                         const std::vector<KvType>& v, int64_t capacity) {
  plan::ModelShape one = m;
  one.layers = 1;
  one.swa_layers = 0;
  int64_t total = 0;
  for (size_t l = 0; l < k.size(); ++l)
    total += plan::sequence_bytes(one, k[l], v[l], capacity).value_or(-1);
  return total;
}

Expected<LoopReport> run_loop(const LoopConfig& cfg) {
  const plan::ModelShape& m = cfg.model;
  if (m.mla || m.swa_layers > 0)
    return unsupported(
        "kvflash-loop models full-attention layers only (no MLA latent sharing, no sliding-window "
        "layers): give --layers/--heads/--head-dim instead of this preset");
  if (m.layers < 1 || cfg.k_types.size() != size_t(m.layers) ||
      cfg.v_types.size() != size_t(m.layers))
    return invalid_argument("kvflash-loop: one K and one V type per layer are needed");
  if (cfg.depths.empty() || cfg.tokens < 1 || cfg.kernel_reps < 1)
    return invalid_argument("kvflash-loop: at least one depth, one token and one kernel rep");
  if (cuda_device_count() == 0)
    return unsupported(
        "no CUDA device is visible (or this build has no CUDA "
        "backend: configure with KVFLASH_CUDA=ON on a machine with nvcc)");
  const int64_t capacity = *std::max_element(cfg.depths.begin(), cfg.depths.end());
  const size_t n_layers = size_t(m.layers);

  LoopReport rep;
  std::vector<Layer> layers(n_layers);
  size_t ws_bytes = 0;
  for (size_t l = 0; l < n_layers; ++l) {
    const AttentionProblem p = layer_problem(cfg, l, capacity);
    PlanOptions opt;
    opt.select.backend = Backend::cuda;
    Expected<Plan> pl = kvflash::plan(p, opt);
    if (!pl) return at(fmt::format("planning layer {} ({})", l, describe(p)), pl.error());
    layers[l].plan = *pl;
    layers[l].k_bytes = size_t(capacity) * size_t(m.kv_heads) * row_size(p.k_type, p.head_dim.k);
    layers[l].v_bytes = size_t(capacity) * size_t(m.kv_heads) * row_size(p.v_type, p.head_dim.v);
    ws_bytes = std::max(ws_bytes, pl->workspace_bytes);
    rep.kernels.push_back(pl->kernel->name);
  }
  const size_t q_bytes = size_t(m.q_heads) * size_t(m.head_dim.k) * sizeof(float);
  const size_t out_bytes = size_t(m.q_heads) * size_t(m.head_dim.v) * sizeof(float);
  size_t capacity_bytes = round_up(ws_bytes, kAlign) + round_up(q_bytes, kAlign) +
                          round_up(out_bytes, kAlign) + round_up(sizeof(int64_t), kAlign);
  for (const Layer& L : layers)
    capacity_bytes += round_up(L.k_bytes, kAlign) + round_up(L.v_bytes, kAlign);

  Expected<gpu::Stream> stream_or = gpu::Stream::create();
  if (!stream_or) return at("creating a stream", stream_or.error());
  void* const stream = stream_or->handle();
  Expected<gpu::MemoryInfo> before = gpu::memory_info();
  if (!before) return before.error();
  // Blocks: K and V of every layer, the workspace, q, out and the lengths.
  Expected<gpu::DevicePool> pool =
      gpu::DevicePool::create(capacity_bytes, stream, 2 * n_layers + 4);
  if (!pool)
    return at(fmt::format("creating the pool of {}", format_bytes(capacity_bytes)), pool.error());
  Expected<gpu::MemoryInfo> after = gpu::memory_info();
  if (!after) return after.error();
  rep.device_taken = before->free - after->free;
  rep.pool_capacity = pool->capacity();

  // The bytes skipped to align each block (the memory report's "pool alignment", with what is
  // left above the last block).
  size_t align_gaps = 0;
  auto take = [&](size_t bytes) -> Expected<uint8_t*> {
    const size_t n = std::max<size_t>(bytes, 1), used_before = pool->used();
    Expected<void*> p = pool->allocate(n, kAlign);
    if (!p) return p.error();
    align_gaps += pool->used() - n - used_before;
    return static_cast<uint8_t*>(*p);
  };
  for (Layer& L : layers) {
    Expected<uint8_t*> k = take(L.k_bytes);
    if (!k) return at("allocating K storage", k.error());
    Expected<uint8_t*> v = take(L.v_bytes);
    if (!v) return at("allocating V storage", v.error());
    L.k = *k;
    L.v = *v;
    rep.kv_bytes += static_cast<int64_t>(L.k_bytes + L.v_bytes);
  }
  Expected<uint8_t*> ws = take(ws_bytes);
  if (!ws) return at("allocating the workspace", ws.error());
  Expected<uint8_t*> q_dev = take(q_bytes);
  if (!q_dev) return at("allocating q", q_dev.error());
  Expected<uint8_t*> out_dev = take(out_bytes);
  if (!out_dev) return at("allocating out", out_dev.error());
  Expected<uint8_t*> lens_dev = take(sizeof(int64_t));
  if (!lens_dev) return at("allocating the lengths", lens_dev.error());
  rep.plan_bytes = planned_kv_bytes(m, cfg.k_types, cfg.v_types, capacity);

  rep.memory.device = 0;
  rep.memory.add(
      "KV storage", size_t(rep.kv_bytes),
      fmt::format("{} layers x {} tokens x {} KV heads", n_layers, capacity, m.kv_heads));
  rep.memory.add("workspace", ws_bytes, "one, shared by the layers (one stream)");
  rep.memory.add("q, out, lengths", q_bytes + out_bytes + sizeof(int64_t));
  rep.memory.add("pool alignment", align_gaps + (pool->capacity() - pool->used()),
                 fmt::format("each allocation aligned to {} B; pool high water {}", kAlign,
                             format_bytes(pool->high_water())));

  // Inputs: one pattern per (type, dim), tiled over each layer's K and V.
  std::mt19937_64 rng(cfg.seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::map<std::pair<KvType, int32_t>, std::vector<uint8_t>> patterns;
  auto pattern = [&](KvType t, int32_t dim) -> const std::vector<uint8_t>& {
    auto [it, fresh] = patterns.try_emplace({t, dim});
    if (fresh) {
      const int64_t rows = std::min<int64_t>(kPatternRows, capacity * m.kv_heads);
      std::vector<float> src(size_t(rows) * size_t(dim));
      for (float& x : src) x = g(rng);
      it->second.resize(row_size(t, dim) * size_t(rows));
      quantize_rows(t, src.data(), rows, dim, it->second.data());
    }
    return it->second;
  };
  for (size_t l = 0; l < n_layers; ++l) {
    Layer& L = layers[l];
    const std::vector<uint8_t>& pk = pattern(cfg.k_types[l], m.head_dim.k);
    const std::vector<uint8_t>& pv = pattern(cfg.v_types[l], m.head_dim.v);
    Status st = gpu::copy(L.k, pk.data(), std::min(pk.size(), L.k_bytes), stream);
    if (st) st = replicate(L.k, std::min(pk.size(), L.k_bytes), L.k_bytes, stream);
    if (st) st = gpu::copy(L.v, pv.data(), std::min(pv.size(), L.v_bytes), stream);
    if (st) st = replicate(L.v, std::min(pv.size(), L.v_bytes), L.v_bytes, stream);
    if (!st) return at(fmt::format("filling layer {}", l), st.error());
  }
  std::vector<float> q(size_t(m.q_heads) * size_t(m.head_dim.k));
  for (float& x : q) x = g(rng);
  if (Status st = gpu::copy(*q_dev, q.data(), q_bytes, stream); !st)
    return at("copying q", st.error());

  std::vector<AttentionTensors> tensors(n_layers);
  for (size_t l = 0; l < n_layers; ++l) {
    AttentionTensors& t = tensors[l];
    t.q = reinterpret_cast<const float*>(*q_dev);
    t.k = kv_tensor_contiguous(layers[l].k, cfg.k_types[l], m.head_dim.k, m.kv_heads, capacity);
    t.v = kv_tensor_contiguous(layers[l].v, cfg.v_types[l], m.head_dim.v, m.kv_heads, capacity);
    t.kv_lens = reinterpret_cast<const int64_t*>(*lens_dev);
    t.out = reinterpret_cast<float*>(*out_dev);
  }
  // One decode step: attention over every layer, in order, on one stream.
  auto step = [&]() -> Status {
    for (size_t l = 0; l < n_layers; ++l)
      if (Status s = run(layers[l].plan, tensors[l], *ws, stream); !s)
        return at(fmt::format("layer {}", l), s.error());
    return {};
  };
  // What the captured step bakes in besides the problem: the layer count, each layer's types and
  // buffers (FNV-1a over them).
  StepKey key;
  key.mix(n_layers);
  for (size_t l = 0; l < n_layers; ++l) {
    key.mix(uint64_t(cfg.k_types[l]) << 8 | uint64_t(cfg.v_types[l]));
    key.mix(layers[l].k);
    key.mix(layers[l].v);
  }
  const ShapeSignature sig = ShapeSignature::of(layers[0].plan.problem, key.value());
  gpu::GraphRunner runner(stream);

  for (const int64_t depth : cfg.depths) {
    if (Status st = gpu::copy(*lens_dev, &depth, sizeof(depth), stream); !st)
      return at("setting the length", st.error());
    if (Status st = stream_or->synchronize(); !st) return st.error();
    int64_t read_bytes = 0;
    for (const Layer& L : layers)
      read_bytes += int64_t(depth) * m.kv_heads *
                    int64_t(row_size(L.plan.problem.k_type, m.head_dim.k) +
                            row_size(L.plan.problem.v_type, m.head_dim.v));

    // Each layer alone, behind the launch cover, the layers in model order (so the other layers'
    // KV passes through the L2 before a layer runs again, as in a decode step); the medians
    // summed.
    std::vector<std::vector<double>> alone(n_layers);
    for (int32_t r = 0; r <= cfg.kernel_reps; ++r) {
      for (size_t l = 0; l < n_layers; ++l) {
        if (Status s = gpu::spin(kLaunchCoverUs, stream); !s) return s.error();
        const Expected<double> ms =
            gpu::time_ms(stream, [&] { return run(layers[l].plan, tensors[l], *ws, stream); });
        if (!ms) return at(fmt::format("layer {} alone", l), ms.error());
        if (r > 0) alone[l].push_back(*ms * 1e3);  // the first round is a warm-up
      }
    }
    double kernel_sum = 0;
    for (const std::vector<double>& us : alone) kernel_sum += median(us);

    auto add_row = [&](bool graphs, const std::vector<double>& us) {
      LoopRow row;
      row.depth = depth;
      row.graphs = graphs;
      row.us_per_token = median(us);
      row.kernel_sum_us = kernel_sum;
      row.overhead = row.us_per_token / kernel_sum - 1.0;
      row.kv_gbps = double(read_bytes) / (row.us_per_token * 1e3);
      row.kernel_nodes = graphs ? int64_t(runner.kernel_nodes()) : 0;
      rep.rows.push_back(row);
    };
    if (cfg.graphs_off) {
      for (int i = 0; i < 2; ++i)
        if (Status s = step(); !s) return s.error();
      std::vector<double> us;
      for (int32_t i = 0; i < cfg.tokens; ++i) {
        const Expected<double> ms = gpu::time_ms(stream, step);
        if (!ms) return ms.error();
        us.push_back(*ms * 1e3);
      }
      add_row(false, us);
    }
    if (cfg.graphs_on) {
      auto graph_step = [&]() -> Status {
        const Expected<StepKind> k = runner.step(sig, step);
        if (!k) return k.error();
        return {};
      };
      for (int i = 0; i < 4 && !runner.has_graph(); ++i)
        if (Status s = graph_step(); !s) return at("a graph step", s.error());
      if (!runner.has_graph())
        return unsupported("kvflash-loop: the graph runner holds no graph after four steps");
      std::vector<double> us;
      for (int32_t i = 0; i < cfg.tokens; ++i) {
        const Expected<double> ms = gpu::time_ms(stream, graph_step);
        if (!ms) return ms.error();
        us.push_back(*ms * 1e3);
      }
      add_row(true, us);
    }
  }
  if (Status st = stream_or->synchronize(); !st) return st.error();
  if (Status st = gpu::last_error(); !st) return st.error();
  rep.counters = runner.counters();
  return rep;
}

}  // namespace kvflash::tools::loop
