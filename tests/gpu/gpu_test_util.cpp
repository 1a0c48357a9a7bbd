#include "gpu_test_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string_view>
#include <thread>
#include <tuple>

#include "backends/cuda/common/type_pairs.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/reference.hpp"

namespace kvflash::gputest {
namespace {

int64_t out_rows(const AttentionProblem& p) {
  return int64_t{p.n_seqs} * p.n_q_tokens * p.n_q_heads;
}

std::string row_label(const AttentionProblem& p, int64_t row) {
  const int64_t h = row % p.n_q_heads;
  const int64_t i = row / p.n_q_heads % p.n_q_tokens;
  const int64_t s = row / p.n_q_heads / p.n_q_tokens;
  return fmt::format("seq {}, token {}, head {}", s, i, h);
}

// Mask: share of -inf entries and the spread of the finite ones (logit units); NaN floats after
// each row's kv_capacity entries, so mask_stride > kv_capacity is exercised.
constexpr float kMaskHiddenShare = 0.15f;
constexpr float kMaskSpread = 0.5f;
constexpr int64_t kMaskRowPadding = 16;

std::vector<float> as_floats(const std::vector<uint8_t>& bytes) {
  std::vector<float> f(bytes.size() / sizeof(float));
  std::memcpy(f.data(), bytes.data(), f.size() * sizeof(float));
  return f;
}

}  // namespace

std::optional<std::string> pair_not_built(KvType k, KvType v) {
  return cuda::pair_not_built(k, v, cuda::all_pairs_built());
}

bool quick() {
  const char* v = std::getenv("KVFLASH_GPU_TEST_QUICK");
  return v != nullptr && std::string_view(v) != "" && std::string_view(v) != "0";
}

int64_t quick_len(int64_t len) {
  return quick() ? std::min(len, kQuickMaxLen) : len;
}

AttentionTensors HostInputs::tensors() const {
  AttentionTensors t;
  t.q = q.data();
  t.k = kv_tensor_contiguous(k.data(), p.k_type, p.head_dim.k, p.n_kv_heads, p.kv_capacity);
  t.v = kv_tensor_contiguous(v.data(), p.v_type, p.head_dim.v, p.n_kv_heads, p.kv_capacity);
  t.kv_lens = kv_lens.data();
  t.mask = mask.empty() ? nullptr : mask.data();
  t.mask_stride = mask_stride;
  t.sinks = sinks.empty() ? nullptr : sinks.data();
  t.alibi_slopes = alibi.empty() ? nullptr : alibi.data();
  return t;
}

HostInputs make_inputs(const AttentionProblem& p, const std::vector<int64_t>& filled,
                       uint64_t seed) {
  HostInputs in;
  in.p = p;
  in.kv_lens = filled;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  in.q.resize(static_cast<size_t>(out_rows(p)) * p.head_dim.k);
  for (float& x : in.q) x = g(rng);
  auto fill = [&](KvType t, int32_t d, std::vector<uint8_t>& dst) {
    const size_t row = row_size(t, d);
    const auto seq_bytes = static_cast<size_t>(p.kv_capacity * p.n_kv_heads) * row;
    dst.assign(seq_bytes * static_cast<size_t>(p.n_seqs), uint8_t{0xFF});
    for (int32_t s = 0; s < p.n_seqs; ++s) {
      const int64_t rows = filled[static_cast<size_t>(s)] * p.n_kv_heads;
      std::vector<float> src(static_cast<size_t>(rows) * d);
      for (float& x : src) x = g(rng);
      quantize_rows(t, src.data(), rows, d, dst.data() + seq_bytes * static_cast<size_t>(s));
    }
  };
  fill(p.k_type, p.head_dim.k, in.k);
  fill(p.v_type, p.head_dim.v, in.v);
  // Drawn after q, k and v, so a problem without features gets the inputs it always had.
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  if (p.has_mask) {
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    in.mask_stride = p.kv_capacity + kMaskRowPadding;
    in.mask.assign(static_cast<size_t>(out_rows(p) / p.n_q_heads * in.mask_stride), kNaN);
    for (int32_t s = 0; s < p.n_seqs; ++s)
      for (int32_t i = 0; i < p.n_q_tokens; ++i) {
        float* m = in.mask.data() + (int64_t{s} * p.n_q_tokens + i) * in.mask_stride;
        const bool hide_row = s == 0 && i == 1;  // sees nothing: zeros, lse -inf (or the sink's)
        for (int64_t k = 0; k < filled[static_cast<size_t>(s)]; ++k) {
          const float hidden = u(rng);
          const float x = g(rng);
          m[k] = hide_row || hidden < kMaskHiddenShare ? -std::numeric_limits<float>::infinity()
                                                       : kMaskSpread * x;
        }
      }
  }
  if (p.has_sinks)
    for (int32_t h = 0; h < p.n_q_heads; ++h) in.sinks.push_back(1.0f + 1.5f * g(rng));
  if (p.has_alibi)
    for (int32_t h = 0; h < p.n_q_heads; ++h)
      in.alibi.push_back(std::exp2(-8.0f * float(h + 1) / float(p.n_q_heads)));
  return in;
}

Expected<Reference> reference(const HostInputs& in) {
  const AttentionProblem& p = in.p;
  Reference ref;
  const int64_t rows = out_rows(p);
  std::vector<float> out(static_cast<size_t>(rows) * p.head_dim.v);
  ref.out.resize(out.size());
  ref.lse.resize(static_cast<size_t>(rows));
  AttentionTensors t = in.tensors();
  t.out = out.data();
  t.lse = ref.lse.data();
  if (Status s = reference_attention(p, t, ref.out.data()); !s) return s.error();
  return ref;
}

Expected<Reference> parallel_reference(const HostInputs& in) {
  const AttentionProblem& p = in.p;
  const AttentionTensors whole = in.tensors();
  Reference ref;
  const int64_t rows = out_rows(p);
  std::vector<float> out(static_cast<size_t>(rows) * p.head_dim.v);
  ref.out.resize(out.size());
  ref.lse.resize(static_cast<size_t>(rows));

  // A sub-problem: queries [i0, i1) of sequence s over its first `len` keys, as the last
  // i1 - i0 queries of a one-sequence problem, so each keeps its position len - (i1 - i0) + i.
  struct Part {
    int32_t s, i0, i1;
    int64_t len;
  };
  constexpr int32_t kChunk = 64;
  std::vector<Part> parts;
  for (int32_t s = 0; s < p.n_seqs; ++s) {
    const int64_t len = in.kv_lens[static_cast<size_t>(s)];
    if (p.causal && len >= p.n_q_tokens) {
      for (int32_t i0 = 0; i0 < p.n_q_tokens; i0 += kChunk) {
        const int32_t i1 = std::min(p.n_q_tokens, i0 + kChunk);
        parts.push_back({s, i0, i1, len - p.n_q_tokens + i1});
      }
    } else {
      parts.push_back({s, 0, p.n_q_tokens, len});
    }
  }
  std::vector<Status> status(parts.size());
  auto solve = [&](size_t n) {
    const Part& pt = parts[n];
    AttentionProblem sp = p;
    sp.n_seqs = 1;
    sp.n_q_tokens = pt.i1 - pt.i0;
    sp.kv_capacity = std::max<int64_t>(1, std::min(pt.len, p.kv_capacity));
    const int64_t row0 = (int64_t{pt.s} * p.n_q_tokens + pt.i0) * p.n_q_heads;
    AttentionTensors t = whole;
    t.q = whole.q + row0 * p.head_dim.k;
    t.k.data = static_cast<const uint8_t*>(whole.k.data) + pt.s * whole.k.stride_seq;
    t.v.data = static_cast<const uint8_t*>(whole.v.data) + pt.s * whole.v.stride_seq;
    const int64_t len = pt.len;  // out of range: the reference's own error
    t.kv_lens = &len;
    if (whole.mask) t.mask = whole.mask + (int64_t{pt.s} * p.n_q_tokens + pt.i0) * t.mask_stride;
    t.out = out.data() + row0 * p.head_dim.v;
    t.lse = ref.lse.data() + row0;
    status[n] = reference_attention(sp, t, ref.out.data() + row0 * p.head_dim.v);
  };
  const size_t n_threads =
      std::min<size_t>(parts.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  std::atomic<size_t> next{0};
  for (size_t w = 0; w < n_threads; ++w)
    pool.emplace_back([&] {
      for (size_t n = next++; n < parts.size(); n = next++) solve(n);
    });
  for (std::thread& th : pool) th.join();
  for (const Status& st : status)
    if (!st) return st.error();
  return ref;
}

// GuardedDevice

Expected<GuardedDevice> GuardedDevice::allocate(size_t bytes, void* stream) {
  GuardedDevice g;
  Expected<gpu::DeviceBuffer> b = gpu::DeviceBuffer::allocate(bytes + 2 * kGuardBytes);
  if (!b) return b.error();
  g.buf_ = std::move(*b);
  g.bytes_ = bytes;
  if (Status s = gpu::fill(g.buf_.data(), kSentinel, g.buf_.size(), stream); !s) return s.error();
  return g;
}

void* GuardedDevice::data() const {
  return static_cast<uint8_t*>(buf_.data()) + kGuardBytes;
}

Status GuardedDevice::poison(void* stream) const {
  return gpu::fill(data(), kPoison, bytes_, stream);
}

Expected<std::string> GuardedDevice::check_guards(const gpu::Stream& stream) const {
  std::vector<uint8_t> head(kGuardBytes), tail(kGuardBytes);
  const auto* base = static_cast<const uint8_t*>(buf_.data());
  if (Status s = gpu::copy(head.data(), base, kGuardBytes, stream.handle()); !s) return s.error();
  if (Status s = gpu::copy(tail.data(), base + kGuardBytes + bytes_, kGuardBytes, stream.handle());
      !s)
    return s.error();
  if (Status s = stream.synchronize(); !s) return s.error();
  return parity::GuardedBuffer::check_guards(head.data(), tail.data(), bytes_).value_or("");
}

// Device inputs and outputs

Expected<DeviceInputs> stage(const HostInputs& in, void* stream) {
  DeviceInputs d;
  auto upload = [&](const void* src, size_t bytes, gpu::DeviceBuffer& dst) -> Status {
    Expected<gpu::DeviceBuffer> b = gpu::DeviceBuffer::allocate(bytes);
    if (!b) return b.error();
    dst = std::move(*b);
    return gpu::copy(dst.data(), src, bytes, stream);
  };
  if (Status s = upload(in.q.data(), in.q.size() * sizeof(float), d.q); !s) return s.error();
  if (Status s = upload(in.k.data(), in.k.size(), d.k); !s) return s.error();
  if (Status s = upload(in.v.data(), in.v.size(), d.v); !s) return s.error();
  if (Status s = upload(in.kv_lens.data(), in.kv_lens.size() * sizeof(int64_t), d.kv_lens); !s)
    return s.error();
  // Feature tensors only where the problem has them (their pointers stay null otherwise).
  for (auto [host, dev] : {std::pair{&in.mask, &d.mask}, std::pair{&in.sinks, &d.sinks},
                           std::pair{&in.alibi, &d.alibi}})
    if (!host->empty())
      if (Status s = upload(host->data(), host->size() * sizeof(float), *dev); !s) return s.error();
  const AttentionProblem& p = in.p;
  d.tensors.q = static_cast<const float*>(d.q.data());
  d.tensors.k =
      kv_tensor_contiguous(d.k.data(), p.k_type, p.head_dim.k, p.n_kv_heads, p.kv_capacity);
  d.tensors.v =
      kv_tensor_contiguous(d.v.data(), p.v_type, p.head_dim.v, p.n_kv_heads, p.kv_capacity);
  d.tensors.kv_lens = static_cast<const int64_t*>(d.kv_lens.data());
  d.tensors.mask = in.mask.empty() ? nullptr : static_cast<const float*>(d.mask.data());
  d.tensors.mask_stride = in.mask_stride;
  d.tensors.sinks = in.sinks.empty() ? nullptr : static_cast<const float*>(d.sinks.data());
  d.tensors.alibi_slopes = in.alibi.empty() ? nullptr : static_cast<const float*>(d.alibi.data());
  // The uploads read host memory that the caller may free once this returns.
  if (Status s = gpu::synchronize(stream); !s) return s.error();
  return d;
}

Expected<PagedKv> stage_paged(const HostInputs& in, int32_t page_size, uint64_t seed,
                              void* stream) {
  const AttentionProblem& p = in.p;
  const auto pps = static_cast<int32_t>(pages_per_seq(p.kv_capacity, page_size));
  const int64_t used = int64_t{p.n_seqs} * pps;
  const int64_t n_pages = used + used / 4 + 1;  // spare pages, never in the table
  PagedKv d;
  std::vector<int32_t> pool(static_cast<size_t>(n_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937_64(seed));
  d.host_table.assign(pool.begin(), pool.begin() + used);

  auto build = [&](KvType type, int32_t dim, const std::vector<uint8_t>& contiguous,
                   gpu::DeviceBuffer& dst, KvTensor& tensor) -> Status {
    const KvTensor src =
        kv_tensor_contiguous(contiguous.data(), type, dim, p.n_kv_heads, p.kv_capacity);
    KvTensor paged = kv_tensor_paged(nullptr, type, dim, p.n_kv_heads, page_size, n_pages,
                                     d.host_table.data(), pps);
    std::vector<uint8_t> bytes(static_cast<size_t>(n_pages * paged.stride_page), uint8_t{0xFF});
    const size_t row = row_size(type, dim);
    for (int64_t s = 0; s < p.n_seqs; ++s)
      for (int64_t t = 0; t < p.kv_capacity; ++t)
        for (int64_t h = 0; h < p.n_kv_heads; ++h)
          std::memcpy(bytes.data() + kv_row_offset(paged, page_size, s, t, h),
                      contiguous.data() + kv_row_offset(src, 0, s, t, h), row);
    Expected<gpu::DeviceBuffer> b = gpu::DeviceBuffer::allocate(bytes.size());
    if (!b) return b.error();
    dst = std::move(*b);
    if (Status st = gpu::copy(dst.data(), bytes.data(), bytes.size(), stream); !st) return st;
    // The copy is enqueued on `stream`: the host bytes must outlive it.
    if (Status st = gpu::synchronize(stream); !st) return st;
    tensor = paged;
    tensor.data = dst.data();
    return {};
  };
  if (Status st = build(p.k_type, p.head_dim.k, in.k, d.k, d.k_tensor); !st) return st.error();
  if (Status st = build(p.v_type, p.head_dim.v, in.v, d.v, d.v_tensor); !st) return st.error();
  Expected<gpu::DeviceBuffer> table =
      gpu::DeviceBuffer::allocate(std::max<size_t>(1, d.host_table.size()) * sizeof(int32_t));
  if (!table) return table.error();
  d.table = std::move(*table);
  if (Status st = gpu::copy(d.table.data(), d.host_table.data(),
                            d.host_table.size() * sizeof(int32_t), stream);
      !st)
    return st.error();
  if (Status st = gpu::synchronize(stream); !st) return st.error();
  d.k_tensor.page_table = d.v_tensor.page_table = static_cast<const int32_t*>(d.table.data());
  return d;
}

Status DeviceOutputs::poison(void* stream) const {
  for (const GuardedDevice* g : {&out, &lse, &workspace})
    if (Status s = g->poison(stream); !s) return s;
  return {};
}

Expected<std::string> DeviceOutputs::check_guards(const gpu::Stream& stream) const {
  std::string all;
  for (auto [name, g] :
       {std::pair{"out", &out}, std::pair{"lse", &lse}, std::pair{"workspace", &workspace}}) {
    Expected<std::string> hit = g->check_guards(stream);
    if (!hit) return hit.error();
    if (!hit->empty()) all += fmt::format("{}{}: {}", all.empty() ? "" : "; ", name, *hit);
  }
  return all;
}

Expected<DeviceOutputs> allocate_outputs(const Plan& pl, void* stream) {
  const AttentionProblem& p = pl.problem;
  const auto rows = static_cast<size_t>(out_rows(p));
  DeviceOutputs o;
  Expected<GuardedDevice> out =
      GuardedDevice::allocate(rows * p.head_dim.v * sizeof(float), stream);
  if (!out) return out.error();
  o.out = std::move(*out);
  Expected<GuardedDevice> lse = GuardedDevice::allocate(rows * sizeof(float), stream);
  if (!lse) return lse.error();
  o.lse = std::move(*lse);
  Expected<GuardedDevice> ws = GuardedDevice::allocate(pl.workspace_bytes, stream);
  if (!ws) return ws.error();
  o.workspace = std::move(*ws);
  if (Status s = o.poison(stream); !s) return s.error();
  return o;
}

AttentionTensors with_outputs(AttentionTensors t, const DeviceOutputs& o) {
  t.out = static_cast<float*>(o.out.data());
  t.lse = static_cast<float*>(o.lse.data());
  return t;
}

Expected<HostOutputs> read_outputs(const DeviceOutputs& o, const gpu::Stream& stream) {
  HostOutputs h;
  std::vector<uint8_t> out(o.out.size()), lse(o.lse.size());
  if (Status s = gpu::copy(out.data(), o.out.data(), out.size(), stream.handle()); !s)
    return s.error();
  if (Status s = gpu::copy(lse.data(), o.lse.data(), lse.size(), stream.handle()); !s)
    return s.error();
  if (Status s = stream.synchronize(); !s) return s.error();
  h.out = as_floats(out);
  h.lse = as_floats(lse);
  return h;
}

std::string bitwise_difference(const HostOutputs& a, const HostOutputs& b) {
  for (const auto& [name, x, y] : {std::tuple{"out", &a.out, &b.out}, {"lse", &a.lse, &b.lse}}) {
    if (x->size() != y->size())
      return fmt::format("{}: {} vs {} elements", name, x->size(), y->size());
    for (size_t i = 0; i < x->size(); ++i)
      if (std::memcmp(&(*x)[i], &(*y)[i], sizeof(float)) != 0)
        return fmt::format("{}[{}]: {} vs {}", name, i, (*x)[i], (*y)[i]);
  }
  return "";
}

// Comparison

std::string Comparison::summary() const {
  return fmt::format("NMSE {:.3g}, {} non-finite, {} empty rows not zero, {} bad lse{}{}", nmse,
                     non_finite, empty_rows_not_zero, lse_bad, first_problem.empty() ? "" : "; ",
                     first_problem);
}

Comparison compare(const AttentionProblem& p, const HostOutputs& got, const Reference& ref) {
  Comparison c;
  const int64_t rows = out_rows(p);
  const int32_t dv = p.head_dim.v;
  double err2 = 0.0, ref2 = 0.0;
  auto note = [&](std::string what) {
    if (c.first_problem.empty()) c.first_problem = std::move(what);
  };
  for (int64_t r = 0; r < rows; ++r) {
    const double* rr = ref.out.data() + r * dv;
    const float* gr = got.out.data() + r * dv;
    const bool empty = std::all_of(rr, rr + dv, [](double x) { return x == 0.0; });
    bool row_nonzero = false;
    for (int32_t d = 0; d < dv; ++d) {
      if (!std::isfinite(gr[d])) {
        ++c.non_finite;
        note(fmt::format("out[{}, dim {}] = {}", row_label(p, r), d, gr[d]));
        continue;
      }
      row_nonzero |= gr[d] != 0.0f;
      const double e = double{gr[d]} - rr[d];
      err2 += e * e;
      ref2 += rr[d] * rr[d];
    }
    if (empty && row_nonzero) {
      ++c.empty_rows_not_zero;
      note(fmt::format("row [{}] sees no key but is not zero", row_label(p, r)));
    }
    // lse: -inf exactly where the reference is; elsewhere within tol * max(1, |ref|). An NMSE
    // bound of 1e-5 allows relative weight errors of about sqrt(1e-5).
    constexpr double kLseTol = 3.2e-3;
    const float gl = got.lse[static_cast<size_t>(r)];
    const float rl = ref.lse[static_cast<size_t>(r)];
    const bool ok = std::isinf(rl)
                        ? gl == rl
                        : std::isfinite(gl) && std::abs(double{gl} - rl) <=
                                                   kLseTol * std::max(1.0, double{std::abs(rl)});
    if (!ok) {
      ++c.lse_bad;
      note(fmt::format("lse[{}] = {}, reference {}", row_label(p, r), gl, rl));
    }
  }
  c.nmse = ref2 > 0.0 ? err2 / ref2 : err2;
  return c;
}

Expected<Plan> plan_cuda(const AttentionProblem& p, const std::string& force) {
  PlanOptions opt;
  opt.select.backend = Backend::cuda;
  opt.select.force = force;
  opt.select.read_environment = false;
  return plan(p, opt);
}

}  // namespace kvflash::gputest
