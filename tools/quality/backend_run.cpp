#include "quality/backend_run.hpp"

#include <fmt/format.h>

#include <vector>

#include "common/kernel_note.hpp"
#include "kvflash/device.hpp"

namespace kvflash::quality {
namespace {

Error described(const AttentionProblem& p, const Error& e) {
  return Error{e.code, fmt::format("{}: {}", describe(p), e.message)};
}

// Device copies of the call's inputs and room for its outputs; freed when it goes.
struct DeviceCall {
  gpu::DeviceBuffer q, k, v, lens, out, lse, ws;
};

Expected<gpu::DeviceBuffer> upload(const void* src, size_t bytes, void* stream) {
  Expected<gpu::DeviceBuffer> b = gpu::DeviceBuffer::allocate(bytes);
  if (!b) return b.error();
  if (src != nullptr)
    if (Status s = gpu::copy(b->data(), src, bytes, stream); !s) return s.error();
  return b;
}

Expected<std::string> run_cuda(const AttentionProblem& p, const AttentionTensors& t) {
  if (Status s = backend_available(Backend::cuda); !s) return s.error();
  PlanOptions opt;
  opt.select.backend = Backend::cuda;
  Expected<Plan> plan = kvflash::plan(p, opt);
  if (!plan) return described(p, plan.error());
  Expected<gpu::Stream> stream_or = gpu::Stream::create();
  if (!stream_or) return stream_or.error();
  void* const stream = stream_or->handle();
  const auto rows = size_t(p.n_seqs) * size_t(p.n_q_tokens) * size_t(p.n_q_heads);
  const auto kv_rows = size_t(p.n_seqs) * size_t(p.kv_capacity) * size_t(p.n_kv_heads);
  // Every sequence's length: the host's, or the capacity where the host gives none.
  std::vector<int64_t> lens(size_t(p.n_seqs), p.kv_capacity);
  if (t.kv_lens != nullptr) lens.assign(t.kv_lens, t.kv_lens + p.n_seqs);
  DeviceCall d;
  for (auto [dst, src, bytes] :
       {std::tuple{&d.q, static_cast<const void*>(t.q),
                   rows * size_t(p.head_dim.k) * sizeof(float)},
        std::tuple{&d.k, t.k.data, kv_rows * row_size(p.k_type, p.head_dim.k)},
        std::tuple{&d.v, t.v.data, kv_rows * row_size(p.v_type, p.head_dim.v)},
        std::tuple{&d.lens, static_cast<const void*>(lens.data()), lens.size() * sizeof(int64_t)},
        std::tuple{&d.out, static_cast<const void*>(nullptr),
                   rows * size_t(p.head_dim.v) * sizeof(float)},
        std::tuple{&d.lse, static_cast<const void*>(nullptr), t.lse ? rows * sizeof(float) : 0},
        std::tuple{&d.ws, static_cast<const void*>(nullptr), plan->workspace_bytes}}) {
    if (bytes == 0) continue;
    Expected<gpu::DeviceBuffer> b = upload(src, bytes, stream);
    if (!b) return described(p, b.error());
    *dst = std::move(*b);
  }
  AttentionTensors dt = t;
  dt.q = static_cast<const float*>(d.q.data());
  dt.k = kv_tensor_contiguous(d.k.data(), p.k_type, p.head_dim.k, p.n_kv_heads, p.kv_capacity);
  dt.v = kv_tensor_contiguous(d.v.data(), p.v_type, p.head_dim.v, p.n_kv_heads, p.kv_capacity);
  dt.kv_lens = static_cast<const int64_t*>(d.lens.data());
  dt.out = static_cast<float*>(d.out.data());
  dt.lse = t.lse ? static_cast<float*>(d.lse.data()) : nullptr;
  if (Status s = run(*plan, dt, d.ws.data(), stream); !s) return described(p, s.error());
  if (Status s = gpu::copy(t.out, d.out.data(), d.out.size(), stream); !s) return s.error();
  if (t.lse != nullptr)
    if (Status s = gpu::copy(t.lse, d.lse.data(), d.lse.size(), stream); !s) return s.error();
  if (Status s = stream_or->synchronize(); !s) return described(p, s.error());
  if (Status s = gpu::last_error(); !s) return described(p, s.error());
  return std::string(plan->kernel->name);
}

}  // namespace

int32_t max_queries(Backend b) {
  return b == Backend::cuda ? kMaxQueriesCuda : kMaxQueriesCpu;
}

Status backend_available(Backend b) {
  if (b == Backend::cuda && cuda_device_count() == 0)
    return unsupported(
        "--backend cuda: no CUDA device is visible (or this build has no CUDA backend: configure "
        "with KVFLASH_CUDA=ON on a machine with nvcc)");
  return {};
}

Expected<std::string> run_library(Backend b, const AttentionProblem& p, const AttentionTensors& t,
                                  int32_t n_threads) {
  if (b == Backend::cuda) return run_cuda(p, t);
  PlanOptions opt;
  opt.n_threads = n_threads;
  opt.select.backend = Backend::cpu;
  Expected<Plan> plan = kvflash::plan(p, opt);  // for the kernel's name; attention() plans the same
  if (!plan) return described(p, plan.error());
  tools::note_portable_kernel(*plan);
  if (Status s = attention(p, t, opt); !s) return described(p, s.error());
  return std::string(plan->kernel->name);
}

}  // namespace kvflash::quality
