#include "run/model.hpp"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "common/kernel_note.hpp"
#if defined(KVFLASH_RUN_CUDA)
#include "run/device_forward.hpp"
#endif
#include "kvflash/device.hpp"
#include "kvflash/kv_cache.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/registry.hpp"

namespace kvflash::tools::run {

namespace {

Error model_error(const std::string& msg) {
  return invalid_argument("model: " + msg);
}

// An integer metadata value (required unless a default is given).
Expected<int64_t> meta_int(const GgufFile& f, const std::string& key,
                           std::optional<int64_t> fallback = std::nullopt) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) {
    if (fallback) return *fallback;
    return model_error(fmt::format("metadata '{}' is missing", key));
  }
  const std::optional<int64_t> i = v->as_int();
  if (!i || *i < 0 || *i > (int64_t{1} << 40))
    return model_error(fmt::format("metadata '{}' must be a non-negative integer (it is a {})", key,
                                   to_string(v->type)));
  return *i;
}

Expected<double> meta_float(const GgufFile& f, const std::string& key, double fallback) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return fallback;
  const std::optional<double> x = v->as_float();
  if (!x || !std::isfinite(*x))
    return model_error(
        fmt::format("metadata '{}' must be a finite number (it is a {})", key, to_string(v->type)));
  return *x;
}

std::optional<KvType> weight_kv_type(GgmlType t) {
  switch (t) {
    case GgmlType::f32:
      return KvType::f32;
    case GgmlType::f16:
      return KvType::f16;
    case GgmlType::bf16:
      return KvType::bf16;
    case GgmlType::q8_0:
      return KvType::q8_0;  // kvflash's q8_0 rows are GGUF's blocks, byte for byte
    default:
      return std::nullopt;
  }
}

// Tensor `name` as an f32 matrix of rows x cols (cols = 0: a vector of `rows` values).
Expected<Weight> load_weight(const GgufFile& f, const std::string& name, int64_t rows,
                             int64_t cols) {
  const GgufTensor* t = f.tensor(name);
  if (t == nullptr) return model_error(fmt::format("tensor '{}' is missing", name));
  const std::vector<int64_t> want =
      cols == 0 ? std::vector<int64_t>{rows} : std::vector<int64_t>{cols, rows};
  if (t->dims != want)
    return model_error(fmt::format("tensor '{}' has dims [{}], expected [{}]", name,
                                   fmt::join(t->dims, ", "), fmt::join(want, ", ")));
  const std::optional<KvType> kt = weight_kv_type(t->type);
  if (!kt)
    return model_error(
        fmt::format("tensor '{}' is {}: kvflash-run reads f32, f16, bf16 and q8_0 "
                    "weights",
                    name, to_string(t->type)));
  Weight w;
  w.rows = rows;
  w.cols = cols == 0 ? rows : cols;
  if (cols == 0) w.rows = 1;
  w.data.resize(static_cast<size_t>(w.rows * w.cols));
  const size_t row_bytes = row_size(*kt, w.cols);
  for (int64_t r = 0; r < w.rows; ++r)
    dequantize_row(*kt, t->data + static_cast<size_t>(r) * row_bytes, w.cols,
                   w.data.data() + r * w.cols);
  return w;
}

// y (n x w.rows) = x (n x w.cols) . w^T
void matmul(const float* x, int64_t n, const Weight& w, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n),
              static_cast<int>(w.rows), static_cast<int>(w.cols), 1.0f, x, static_cast<int>(w.cols),
              w.data.data(), static_cast<int>(w.cols), 0.0f, y, static_cast<int>(w.rows));
}

void rms_norm(const float* x, int64_t n, int64_t d, const Weight& g, float eps, float* y) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * d;
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    for (int64_t i = 0; i < d; ++i) y[t * d + i] = xr[i] * inv * g.data[static_cast<size_t>(i)];
  }
}

// RoPE, llama.cpp's normal mode: the rotation of pair i (dims 2i, 2i + 1) of the token at
// position pos is theta = pos / scale * base^(-2i / head_dim). The (cos, sin) of n tokens from
// pos0, computed once per forward call and applied to Q and K of every layer.
std::vector<std::pair<float, float>> rope_table(int64_t n, int32_t head_dim, int64_t pos0,
                                                float base, float scale) {
  const int32_t half = head_dim / 2;
  std::vector<std::pair<float, float>> cs(static_cast<size_t>(n * half));
  for (int64_t t = 0; t < n; ++t) {
    const double p = static_cast<double>(pos0 + t) / scale;
    for (int32_t i = 0; i < half; ++i) {
      const double theta = p * std::pow(double(base), -2.0 * i / head_dim);
      cs[static_cast<size_t>(t * half + i)] = {static_cast<float>(std::cos(theta)),
                                               static_cast<float>(std::sin(theta))};
    }
  }
  return cs;
}

// Rotates n tokens of `heads` heads of head_dim values by a rope_table.
void rope(float* x, int64_t n, int32_t heads, int32_t head_dim,
          const std::vector<std::pair<float, float>>& cs) {
  const int32_t half = head_dim / 2;
  for (int64_t t = 0; t < n; ++t)
    for (int32_t h = 0; h < heads; ++h)
      for (int32_t i = 0; i < half; ++i) {
        const auto [c, s] = cs[static_cast<size_t>(t * half + i)];
        float* v = x + (t * heads + h) * head_dim + 2 * i;
        const float a = v[0], b = v[1];
        v[0] = a * c - b * s;
        v[1] = a * s + b * c;
      }
}

}  // namespace

Expected<LlamaConfig> llama_config(const GgufFile& f) {
  const GgufValue* arch = f.find("general.architecture");
  if (arch == nullptr || arch->type != GgufValueType::string)
    return model_error("metadata 'general.architecture' is missing");
  if (arch->s != "llama")
    return model_error(
        fmt::format("architecture '{}' is not one kvflash-run runs (it runs 'llama')", arch->s));
  LlamaConfig c;
  const auto get = [&](const std::string& key, int32_t& out,
                       std::optional<int64_t> fallback = std::nullopt) -> Status {
    Expected<int64_t> v = meta_int(f, key, fallback);
    if (!v) return v.error();
    if (*v > INT32_MAX) return model_error(fmt::format("metadata '{}' = {} is too large", key, *v));
    out = static_cast<int32_t>(*v);
    return {};
  };
  if (Status s = get("llama.embedding_length", c.n_embd); !s) return s.error();
  if (Status s = get("llama.block_count", c.n_layer); !s) return s.error();
  if (Status s = get("llama.feed_forward_length", c.n_ff); !s) return s.error();
  if (Status s = get("llama.attention.head_count", c.n_head); !s) return s.error();
  if (Status s = get("llama.attention.head_count_kv", c.n_head_kv, c.n_head); !s) return s.error();
  if (c.n_embd <= 0 || c.n_layer <= 0 || c.n_ff <= 0 || c.n_head <= 0 || c.n_head_kv <= 0 ||
      c.n_head % c.n_head_kv != 0)
    return model_error(
        fmt::format("shape n_embd={} n_layer={} n_ff={} heads={}/{} is not a "
                    "Llama shape",
                    c.n_embd, c.n_layer, c.n_ff, c.n_head, c.n_head_kv));
  if (Status s = get("llama.attention.key_length", c.head_dim, c.n_embd / c.n_head); !s)
    return s.error();
  int32_t v_len = 0, rope_dims = 0;
  if (Status s = get("llama.attention.value_length", v_len, c.head_dim); !s) return s.error();
  if (Status s = get("llama.rope.dimension_count", rope_dims, c.head_dim); !s) return s.error();
  if (v_len != c.head_dim || rope_dims != c.head_dim)
    return model_error(fmt::format("head dims K {} / V {} / RoPE {}: kvflash-run needs them equal",
                                   c.head_dim, v_len, rope_dims));
  Expected<int64_t> ctx = meta_int(f, "llama.context_length", 0);
  if (!ctx) return ctx.error();
  c.n_ctx_train = *ctx;
  Expected<double> eps = meta_float(f, "llama.attention.layer_norm_rms_epsilon", 1e-5);
  if (!eps) return eps.error();
  Expected<double> base = meta_float(f, "llama.rope.freq_base", 10000.0);
  if (!base) return base.error();
  c.rms_eps = static_cast<float>(*eps);
  c.rope_base = static_cast<float>(*base);
  if (const GgufValue* st = f.find("llama.rope.scaling.type")) {
    if (st->type != GgufValueType::string || (st->s != "none" && st->s != "linear"))
      return model_error(fmt::format("RoPE scaling '{}' is not supported (none and linear are)",
                                     st->type == GgufValueType::string ? st->s : "?"));
    if (st->s == "linear") {
      Expected<double> factor = meta_float(f, "llama.rope.scaling.factor", 1.0);
      if (!factor) return factor.error();
      if (*factor <= 0.0) return model_error("metadata 'llama.rope.scaling.factor' must be > 0");
      c.rope_scale = static_cast<float>(*factor);
    }
  }
  const GgufTensor* embd = f.tensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2)
    return model_error("tensor 'token_embd.weight' is missing or not 2-D");
  c.n_vocab = static_cast<int32_t>(std::min<int64_t>(embd->dims[1], INT32_MAX));
  c.tied_output = f.tensor("output.weight") == nullptr;
  return c;
}

Expected<LlamaModel> load_llama(const GgufFile& f) {
  Expected<LlamaConfig> c = llama_config(f);
  if (!c) return c.error();
  LlamaModel m;
  m.config = *c;
  const int64_t e = c->n_embd, q = int64_t{c->n_head} * c->head_dim,
                kv = int64_t{c->n_head_kv} * c->head_dim;
  const auto load = [&](Weight& w, const std::string& name, int64_t rows, int64_t cols) -> Status {
    Expected<Weight> x = load_weight(f, name, rows, cols);
    if (!x) return x.error();
    w = std::move(*x);
    return {};
  };
  if (Status s = load(m.tok_embd, "token_embd.weight", c->n_vocab, e); !s) return s.error();
  if (Status s = load(m.output_norm, "output_norm.weight", e, 0); !s) return s.error();
  if (!c->tied_output)
    if (Status s = load(m.output, "output.weight", c->n_vocab, e); !s) return s.error();
  m.layers.resize(static_cast<size_t>(c->n_layer));
  for (int32_t l = 0; l < c->n_layer; ++l) {
    LlamaLayer& L = m.layers[static_cast<size_t>(l)];
    const std::string p = fmt::format("blk.{}.", l);
    const std::tuple<Weight*, const char*, int64_t, int64_t> items[] = {
        {&L.attn_norm, "attn_norm.weight", e, 0},
        {&L.wq, "attn_q.weight", q, e},
        {&L.wk, "attn_k.weight", kv, e},
        {&L.wv, "attn_v.weight", kv, e},
        {&L.wo, "attn_output.weight", e, q},
        {&L.ffn_norm, "ffn_norm.weight", e, 0},
        {&L.w_gate, "ffn_gate.weight", c->n_ff, e},
        {&L.w_up, "ffn_up.weight", c->n_ff, e},
        {&L.w_down, "ffn_down.weight", e, c->n_ff}};
    for (const auto& [w, name, rows, cols] : items)
      if (Status s = load(*w, p + name, rows, cols); !s) return s.error();
  }
  return m;
}

Expected<LlamaSession> LlamaSession::create(const LlamaModel& m, std::vector<KvType> k_types,
                                            std::vector<KvType> v_types, int64_t capacity,
                                            int32_t n_threads, Backend backend, bool cuda_graphs) {
  const LlamaConfig& c = m.config;
  const auto per_layer = [&](std::vector<KvType>& t, const char* what) -> Status {
    if (t.size() == 1) t.assign(static_cast<size_t>(c.n_layer), t[0]);
    if (t.size() != static_cast<size_t>(c.n_layer))
      return invalid_argument(
          fmt::format("{} types: {} given, the model has {} layers (give one "
                      "for all, or one per layer)",
                      what, t.size(), c.n_layer));
    return {};
  };
  if (Status s = per_layer(k_types, "K"); !s) return s.error();
  if (Status s = per_layer(v_types, "V"); !s) return s.error();
  if (capacity <= 0) return invalid_argument("capacity must be positive");
  LlamaSession s;
  s.m_ = &m;
  s.capacity_ = capacity;
  s.n_threads_ = n_threads;
  s.backend_ = backend;
  s.caches_.resize(static_cast<size_t>(c.n_layer));
  for (size_t l = 0; l < s.caches_.size(); ++l) {
    LayerCache& lc = s.caches_[l];
    lc.k_type = k_types[l];
    lc.v_type = v_types[l];
    if (backend != Backend::cpu) continue;  // the device holds the rows
    lc.k.resize(static_cast<size_t>(capacity * c.n_head_kv) * row_size(lc.k_type, c.head_dim));
    lc.v.resize(static_cast<size_t>(capacity * c.n_head_kv) * row_size(lc.v_type, c.head_dim));
  }
  if (backend == Backend::cuda) {
    if (cuda_device_count() == 0)
      return unsupported(
          "--backend cuda: no CUDA device is visible (or this build has no CUDA backend: "
          "configure with -DKVFLASH_CUDA=ON)");
#if defined(KVFLASH_RUN_CUDA)
    std::vector<gpu::KvLayerTypes> types;
    for (const LayerCache& lc : s.caches_) types.push_back({lc.k_type, lc.v_type});
    Expected<std::unique_ptr<DeviceForward>> d =
        DeviceForward::create(m, std::move(types), capacity, cuda_graphs);
    if (!d) return d.error();
    s.dev_ = std::move(*d);
#else
    (void)cuda_graphs;
    return unsupported("--backend cuda: this kvflash-run was built without its CUDA forward pass");
#endif
  }
  return s;
}

Expected<const Plan*> LlamaSession::attention_plan(int64_t n, KvType k, KvType v) {
  const auto key = std::make_tuple(n, k, v);
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  const LlamaConfig& c = m_->config;
  AttentionProblem p;
  p.n_seqs = 1;
  p.n_q_tokens = static_cast<int32_t>(n);
  p.n_q_heads = c.n_head;
  p.n_kv_heads = c.n_head_kv;
  p.head_dim = {c.head_dim, c.head_dim};
  p.k_type = k;
  p.v_type = v;
  p.kv_capacity = capacity_;
  p.causal = true;
  PlanOptions opt;
  opt.n_threads = n_threads_;
  opt.select.backend = Backend::cpu;
  Expected<Plan> pl = kvflash::plan(p, opt);
  if (!pl) return pl.error();
  tools::note_portable_kernel(*pl);
  workspace_.resize(std::max(workspace_.size(), pl->workspace_bytes));
  return &plans_.emplace(key, std::move(*pl)).first->second;
}

Status LlamaSession::attend_host(size_t l, int64_t n, const float* q, const float* k,
                                 const float* v, float* o) {
  const LlamaConfig& c = m_->config;
  LayerCache& lc = caches_[l];
  const int64_t hd = c.head_dim, len = pos_ + n;
  const size_t kb = row_size(lc.k_type, hd), vb = row_size(lc.v_type, hd);
  quantize_rows(lc.k_type, k, n * c.n_head_kv, hd,
                lc.k.data() + static_cast<size_t>(pos_ * c.n_head_kv) * kb);
  quantize_rows(lc.v_type, v, n * c.n_head_kv, hd,
                lc.v.data() + static_cast<size_t>(pos_ * c.n_head_kv) * vb);
  Expected<const Plan*> pl = attention_plan(n, lc.k_type, lc.v_type);
  if (!pl) return pl.error();
  AttentionTensors at;
  at.q = q;
  at.k.data = lc.k.data();
  at.k.stride_token = static_cast<int64_t>(kb) * c.n_head_kv;
  at.k.stride_head = static_cast<int64_t>(kb);
  at.v.data = lc.v.data();
  at.v.stride_token = static_cast<int64_t>(vb) * c.n_head_kv;
  at.v.stride_head = static_cast<int64_t>(vb);
  at.kv_lens = &len;
  at.out = o;
  return kvflash::run(**pl, at, workspace_.data());
}

Status LlamaSession::reset() {
  pos_ = 0;
#if defined(KVFLASH_RUN_CUDA)
  if (dev_) return dev_->reset();
#endif
  return {};
}

Expected<std::vector<float>> LlamaSession::forward(const std::vector<int32_t>& ids,
                                                   bool all_logits) {
  const LlamaConfig& c = m_->config;
  const auto n = static_cast<int64_t>(ids.size());
  if (n == 0) return invalid_argument("forward: no tokens");
  if (pos_ + n > capacity_)
    return invalid_argument(
        fmt::format("forward: {} tokens at position {} pass the capacity {}", n, pos_, capacity_));
  for (int32_t id : ids)
    if (id < 0 || id >= c.n_vocab)
      return invalid_argument(
          fmt::format("forward: token id {} is outside the vocabulary 0 .. {}", id, c.n_vocab - 1));
#if defined(KVFLASH_RUN_CUDA)
  if (dev_) {
    Expected<std::vector<float>> logits = dev_->forward(ids, all_logits);
    if (logits) pos_ += n;
    return logits;
  }
#endif
  const int64_t e = c.n_embd, hd = c.head_dim, q_dim = int64_t{c.n_head} * hd,
                kv_dim = int64_t{c.n_head_kv} * hd;
  std::vector<float> x(static_cast<size_t>(n * e)), h(x.size()), q(static_cast<size_t>(n * q_dim)),
      k(static_cast<size_t>(n * kv_dim)), v(k.size()), o(q.size()),
      g(static_cast<size_t>(n * c.n_ff)), u(g.size());
  for (int64_t t = 0; t < n; ++t)
    std::memcpy(x.data() + t * e, m_->tok_embd.data.data() + int64_t{ids[size_t(t)]} * e,
                static_cast<size_t>(e) * sizeof(float));

  const int64_t len = pos_ + n;
  const std::vector<std::pair<float, float>> rot =
      rope_table(n, c.head_dim, pos_, c.rope_base, c.rope_scale);
  for (size_t l = 0; l < m_->layers.size(); ++l) {
    const LlamaLayer& L = m_->layers[l];
    rms_norm(x.data(), n, e, L.attn_norm, c.rms_eps, h.data());
    matmul(h.data(), n, L.wq, q.data());
    matmul(h.data(), n, L.wk, k.data());
    matmul(h.data(), n, L.wv, v.data());
    rope(q.data(), n, c.n_head, c.head_dim, rot);
    rope(k.data(), n, c.n_head_kv, c.head_dim, rot);
    if (Status s = attend_host(l, n, q.data(), k.data(), v.data(), o.data()); !s) return s.error();
    matmul(o.data(), n, L.wo, h.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];

    rms_norm(x.data(), n, e, L.ffn_norm, c.rms_eps, h.data());
    matmul(h.data(), n, L.w_gate, g.data());
    matmul(h.data(), n, L.w_up, u.data());
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    matmul(g.data(), n, L.w_down, h.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
  }
  pos_ = len;

  const int64_t first = all_logits ? 0 : n - 1, rows = n - first;
  rms_norm(x.data() + first * e, rows, e, m_->output_norm, c.rms_eps, h.data());
  std::vector<float> logits(static_cast<size_t>(rows * c.n_vocab));
  matmul(h.data(), rows, m_->lm_head(), logits.data());
  return logits;
}

}  // namespace kvflash::tools::run
