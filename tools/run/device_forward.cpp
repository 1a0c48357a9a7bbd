#include "run/device_forward.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "common/kernel_note.hpp"
#include "kvflash/device.hpp"
#include "kvflash/registry.hpp"
#include "run/device_ops.hpp"
#include "run/model.hpp"

namespace kvflash::tools::run {

namespace {

Error device_error(const std::string& what, const std::string& why) {
  return {ErrorCode::backend_error, fmt::format("--backend cuda: {}: {}", what, why)};
}

Status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return device_error(what, cudaGetErrorString(e));
}

Status check(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return {};
  return device_error(what, cublasGetStatusString(e));
}

// cuBLAS's workspace, given to the handle so that no product allocates under graph capture
// (32 MiB: what cuBLAS asks for on Hopper).
constexpr size_t kCublasWorkspace = size_t{32} << 20;

// A weight matrix (or vector) in the device copy of the weights.
struct DeviceWeight {
  const float* data = nullptr;
  int64_t rows = 0, cols = 0;
};

struct DeviceLayer {
  DeviceWeight attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
};

}  // namespace

struct DeviceForward::Impl {
  const LlamaModel* m = nullptr;
  gpu::Stream stream;
  gpu::KvCache cache;
  cublasHandle_t blas = nullptr;
  gpu::DeviceBuffer weights, blas_workspace;
  DeviceWeight tok_embd, output_norm, lm_head;
  std::vector<DeviceLayer> layers;

  // Activations for chunks of up to `rows` tokens (grown before a larger chunk; a change of
  // addresses is a new graph signature through `generation`).
  int64_t rows = 0, logit_rows = 0;  // logits: one row, or n where every token's are asked for
  uint64_t generation = 0;
  gpu::DeviceBuffer ids, x, h, q, k, v, o, g, u, rope, logits, workspace;

  std::map<std::tuple<int64_t, KvType, KvType>, Plan> plans;
  std::unique_ptr<gpu::GraphRunner> runner;  // null: every step eager
  GraphCounters no_graphs;

  ~Impl() {
    if (blas != nullptr) cublasDestroy(blas);
  }

  cudaStream_t s() const { return static_cast<cudaStream_t>(stream.handle()); }

  // y (n x w.rows) = x (n x w.cols) . w^T + beta y, row-major (cuBLAS's column-major y^T).
  Status matmul(const float* in, int64_t n, const DeviceWeight& w, float* y, float beta) const {
    const float alpha = 1.0f;
    return check(
        cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), static_cast<int>(n),
                    static_cast<int>(w.cols), &alpha, w.data, static_cast<int>(w.cols), in,
                    static_cast<int>(w.cols), &beta, y, static_cast<int>(w.rows)),
        "cublasSgemm");
  }

  Status upload_weights();
  Status ensure_rows(int64_t n);
  Status ensure_logit_rows(int64_t n);
  Expected<const Plan*> plan_for(int64_t n, size_t layer);
  Status enqueue(int64_t n, bool all_logits);
};

Status DeviceForward::Impl::upload_weights() {
  // One allocation: every matrix at a 256-byte aligned offset.
  std::vector<std::pair<DeviceWeight*, const Weight*>> items = {{&tok_embd, &m->tok_embd},
                                                                {&output_norm, &m->output_norm}};
  if (!m->config.tied_output) items.emplace_back(&lm_head, &m->output);
  layers.resize(m->layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    const LlamaLayer& L = m->layers[l];
    DeviceLayer& D = layers[l];
    for (auto [d, w] : {std::pair{&D.attn_norm, &L.attn_norm},
                        {&D.wq, &L.wq},
                        {&D.wk, &L.wk},
                        {&D.wv, &L.wv},
                        {&D.wo, &L.wo},
                        {&D.ffn_norm, &L.ffn_norm},
                        {&D.w_gate, &L.w_gate},
                        {&D.w_up, &L.w_up},
                        {&D.w_down, &L.w_down}})
      items.emplace_back(d, w);
  }
  const auto padded = [](size_t b) { return (b + 255) / 256 * 256; };
  size_t total = 0;
  for (const auto& [d, w] : items) total += padded(w->data.size() * sizeof(float));
  Expected<gpu::DeviceBuffer> buf = gpu::DeviceBuffer::allocate(total);
  if (!buf) return buf.error();
  weights = std::move(*buf);
  size_t off = 0;
  for (const auto& [d, w] : items) {
    auto* dst = static_cast<char*>(weights.data()) + off;
    if (Status st = gpu::copy(dst, w->data.data(), w->data.size() * sizeof(float), stream.handle());
        !st)
      return st;
    *d = {reinterpret_cast<const float*>(dst), w->rows, w->cols};
    off += padded(w->data.size() * sizeof(float));
  }
  if (m->config.tied_output) lm_head = tok_embd;
  return stream.synchronize();
}

Status DeviceForward::Impl::ensure_rows(int64_t n) {
  if (n <= rows) return {};
  if (Status st = stream.synchronize(); !st) return st;  // the old buffers are idle
  const LlamaConfig& c = m->config;
  const auto f = static_cast<int64_t>(sizeof(float));
  const int64_t e = c.n_embd, qd = int64_t{c.n_head} * c.head_dim,
                kvd = int64_t{c.n_head_kv} * c.head_dim;
  const std::pair<gpu::DeviceBuffer*, int64_t> sizes[] = {{&ids, n * int64_t{sizeof(int32_t)}},
                                                          {&x, n * e * f},
                                                          {&h, n * e * f},
                                                          {&q, n * qd * f},
                                                          {&k, n * kvd * f},
                                                          {&v, n * kvd * f},
                                                          {&o, n * qd * f},
                                                          {&g, n * c.n_ff * f},
                                                          {&u, n * c.n_ff * f},
                                                          {&rope, n * (c.head_dim / 2) * 2 * f}};
  for (const auto& [buf, bytes] : sizes) {
    Expected<gpu::DeviceBuffer> b = gpu::DeviceBuffer::allocate(static_cast<size_t>(bytes));
    if (!b) return b.error();
    *buf = std::move(*b);
  }
  rows = n;
  ++generation;
  return {};
}

Status DeviceForward::Impl::ensure_logit_rows(int64_t n) {
  if (n <= logit_rows) return {};
  if (Status st = stream.synchronize(); !st) return st;
  Expected<gpu::DeviceBuffer> b =
      gpu::DeviceBuffer::allocate(static_cast<size_t>(n * m->config.n_vocab) * sizeof(float));
  if (!b) return b.error();
  logits = std::move(*b);
  logit_rows = n;
  ++generation;
  return {};
}

Expected<const Plan*> DeviceForward::Impl::plan_for(int64_t n, size_t layer) {
  const gpu::KvLayerTypes t = cache.config().layers[layer];
  const auto key = std::make_tuple(n, t.k, t.v);
  if (auto it = plans.find(key); it != plans.end()) return &it->second;
  AttentionProblem p =
      cache.problem(static_cast<int32_t>(layer), m->config.n_head, static_cast<int32_t>(n));
  p.causal = true;
  PlanOptions opt;
  opt.select.backend = Backend::cuda;
  Expected<Plan> pl = kvflash::plan(p, opt);
  if (!pl) return pl.error();
  tools::note_portable_kernel(*pl);
  if (pl->workspace_bytes > workspace.size()) {
    if (Status st = stream.synchronize(); !st) return st.error();  // nothing uses it now
    Expected<gpu::DeviceBuffer> w = gpu::DeviceBuffer::allocate(pl->workspace_bytes);
    if (!w) return w.error();
    workspace = std::move(*w);
    ++generation;
  }
  return &plans.emplace(key, std::move(*pl)).first->second;
}

// The forward pass of n tokens whose ids are on the device, ending in the logits buffer: kernels
// and products only (legal under capture). Every plan of n was made before.
Status DeviceForward::Impl::enqueue(int64_t n, bool all_logits) {
  const LlamaConfig& c = m->config;
  const int64_t e = c.n_embd;
  const auto n32 = static_cast<int32_t>(n);
  auto* X = static_cast<float*>(x.data());
  auto* H = static_cast<float*>(h.data());
  auto* Q = static_cast<float*>(q.data());
  auto* K = static_cast<float*>(k.data());
  auto* V = static_cast<float*>(v.data());
  auto* O = static_cast<float*>(o.data());
  auto* G = static_cast<float*>(g.data());
  auto* U = static_cast<float*>(u.data());
  auto* R = static_cast<float2*>(rope.data());
  if (Status st = cache.begin_step(n32, stream.handle()); !st) return st;
  if (Status st = check(
          ops::embed_rows(static_cast<const int32_t*>(ids.data()), tok_embd.data, X, n, e, s()),
          "embedding rows");
      !st)
    return st;
  if (Status st =
          check(ops::rope_table(cache.lengths(), n, c.head_dim, c.rope_base, c.rope_scale, R, s()),
                "RoPE table");
      !st)
    return st;
  for (size_t l = 0; l < layers.size(); ++l) {
    const DeviceLayer& L = layers[l];
    const auto l32 = static_cast<int32_t>(l);
    Status st = check(ops::rms_norm_rows(X, L.attn_norm.data, H, n, e, c.rms_eps, s()), "RMSNorm");
    if (st) st = matmul(H, n, L.wq, Q, 0.0f);
    if (st) st = matmul(H, n, L.wk, K, 0.0f);
    if (st) st = matmul(H, n, L.wv, V, 0.0f);
    if (st) st = check(ops::rope_rotate(Q, R, n, c.n_head, c.head_dim, s()), "RoPE");
    if (st) st = check(ops::rope_rotate(K, R, n, c.n_head_kv, c.head_dim, s()), "RoPE");
    if (st) st = cache.append(l32, K, V, n32, stream.handle());
    if (!st) return st;
    Expected<const Plan*> pl = plan_for(n, l);  // found: made before the step
    if (!pl) return pl.error();
    st = kvflash::run(**pl, cache.tensors(l32, Q, O), workspace.data(), stream.handle());
    if (st) st = matmul(O, n, L.wo, X, 1.0f);  // x += o Wo^T
    if (st) st = check(ops::rms_norm_rows(X, L.ffn_norm.data, H, n, e, c.rms_eps, s()), "RMSNorm");
    if (st) st = matmul(H, n, L.w_gate, G, 0.0f);
    if (st) st = matmul(H, n, L.w_up, U, 0.0f);
    if (st) st = check(ops::silu_mul(G, U, n * c.n_ff, s()), "SwiGLU");
    if (st) st = matmul(G, n, L.w_down, X, 1.0f);  // x += (silu(h Wg^T) * h Wu^T) Wd^T
    if (!st) return st;
  }
  const int64_t first = all_logits ? 0 : n - 1;
  if (Status st = check(
          ops::rms_norm_rows(X + first * e, output_norm.data, H, n - first, e, c.rms_eps, s()),
          "RMSNorm");
      !st)
    return st;
  return matmul(H, n - first, lm_head, static_cast<float*>(logits.data()), 0.0f);
}

DeviceForward::DeviceForward(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceForward::~DeviceForward() = default;

Expected<std::unique_ptr<DeviceForward>> DeviceForward::create(
    const LlamaModel& m, std::vector<gpu::KvLayerTypes> layers, int64_t capacity, bool graphs) {
  auto impl = std::make_unique<Impl>();
  impl->m = &m;
  Expected<gpu::Stream> stream = gpu::Stream::create();
  if (!stream) return stream.error();
  impl->stream = std::move(*stream);
  const LlamaConfig& c = m.config;
  gpu::KvCacheConfig kc;
  kc.n_seqs = 1;
  kc.n_kv_heads = c.n_head_kv;
  kc.head_dim = {c.head_dim, c.head_dim};
  kc.layers = std::move(layers);
  kc.capacity = capacity;
  Expected<gpu::KvCache> cache = gpu::KvCache::create(kc, impl->stream.handle());
  if (!cache) return cache.error();
  impl->cache = std::move(*cache);
  if (Status st = check(cublasCreate(&impl->blas), "cublasCreate"); !st) return st.error();
  Expected<gpu::DeviceBuffer> ws = gpu::DeviceBuffer::allocate(kCublasWorkspace);
  if (!ws) return ws.error();
  impl->blas_workspace = std::move(*ws);
  Status st = check(cublasSetStream(impl->blas, impl->s()), "cublasSetStream");
  if (st)
    st = check(cublasSetWorkspace(impl->blas, impl->blas_workspace.data(), kCublasWorkspace),
               "cublasSetWorkspace");
  if (st) st = impl->upload_weights();
  if (!st) return st.error();
  if (graphs) impl->runner = std::make_unique<gpu::GraphRunner>(impl->stream.handle());
  return std::unique_ptr<DeviceForward>(new DeviceForward(std::move(impl)));
}

Expected<std::vector<float>> DeviceForward::forward(const std::vector<int32_t>& ids,
                                                    bool all_logits) {
  Impl& d = *impl_;
  const auto n = static_cast<int64_t>(ids.size());
  const LlamaConfig& c = d.m->config;
  if (Status st = d.ensure_rows(n); !st) return st.error();
  if (Status st = d.ensure_logit_rows(all_logits ? n : 1); !st) return st.error();
  for (size_t l = 0; l < d.layers.size(); ++l)
    if (Expected<const Plan*> pl = d.plan_for(n, l); !pl) return pl.error();
  if (Status st =
          gpu::copy(d.ids.data(), ids.data(), ids.size() * sizeof(int32_t), d.stream.handle());
      !st)
    return st.error();
  // A decode step through the graph runner: its signature is the attention problem of one
  // token (lengths are read on the device) and the addresses it bakes in; the logits of the
  // last token (all_logits is the same for one token).
  if (n == 1 && d.runner) {
    const AttentionProblem p = d.cache.problem(0, c.n_head, 1);
    Expected<StepKind> k =
        d.runner->step(ShapeSignature::of(p, d.generation), [&] { return d.enqueue(1, false); });
    if (!k) return k.error();
  } else if (Status st = d.enqueue(n, all_logits); !st) {
    return st.error();
  }
  const int64_t out_rows = all_logits ? n : 1;
  std::vector<float> logits(static_cast<size_t>(out_rows * c.n_vocab));
  if (Status st = gpu::copy(logits.data(), d.logits.data(), logits.size() * sizeof(float),
                            d.stream.handle());
      !st)
    return st.error();
  if (Status st = d.stream.synchronize(); !st) return st.error();
  return logits;
}

Status DeviceForward::reset() {
  const int64_t zero = 0;
  return impl_->cache.set_lengths({&zero, 1}, impl_->stream.handle());
}

const GraphCounters& DeviceForward::graph_counters() const {
  return impl_->runner ? impl_->runner->counters() : impl_->no_graphs;
}

size_t DeviceForward::weight_bytes() const {
  return impl_->weights.size();
}

}  // namespace kvflash::tools::run
