// The attention part of the suite (suite.hpp): library output on quantized K/V against the float64
// reference on the original K/V.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

#include "kvflash/reference.hpp"
#include "kvflash/registry.hpp"
#include "quality/backend_run.hpp"
#include "quality/buffer.hpp"
#include "quality/metrics.hpp"
#include "quality/suite.hpp"
#include "quality/synthetic.hpp"

namespace kvflash::quality {
namespace {

double dot(const float* a, const float* b, int32_t n) {
  double s = 0;
  for (int32_t i = 0; i < n; ++i) s += double{a[i]} * double{b[i]};
  return s;
}

double dot(const std::vector<double>& a, const float* b) {
  return quality::dot(a.data(), b, static_cast<int64_t>(a.size()));
}

struct Inputs {
  AttentionProblem p;
  HugeArray<float> kf, vf;
  std::vector<float> q;
  std::vector<double> ref;  // float64 reference on the original K/V, (rows, dv)
};

Expected<Inputs> make_inputs(const SuiteConfig& c, std::pair<int32_t, int32_t> heads, HeadDims dims,
                             int64_t depth, int threads) {
  Inputs in;
  AttentionProblem& p = in.p;
  p.n_q_heads = heads.first;
  p.n_kv_heads = heads.second;
  p.head_dim = dims;
  p.n_seqs = c.n_seqs;
  p.n_q_tokens = c.n_q_tokens;
  p.kv_capacity = depth;
  p.k_type = p.v_type = KvType::f32;
  if (Status s = validate(p); !s) return s.error();
  const SyntheticKv gen(c.seed, dims, p.n_kv_heads);
  const int64_t seq_rows = depth * p.n_kv_heads;  // K/V rows per sequence
  in.kf = HugeArray<float>(static_cast<size_t>(p.n_seqs * seq_rows * dims.k));
  in.vf = HugeArray<float>(static_cast<size_t>(p.n_seqs * seq_rows * dims.v));
  for (int32_t sq = 0; sq < p.n_seqs; ++sq)
    gen.fill(depth, in.kf.data() + sq * seq_rows * dims.k, in.vf.data() + sq * seq_rows * dims.v,
             threads, sq);
  in.q = make_queries(c, p, gen, in.kf.data());
  const int64_t rows = int64_t{p.n_seqs} * p.n_q_tokens * p.n_q_heads;
  std::vector<float> out(static_cast<size_t>(rows * dims.v));
  in.ref.resize(out.size());
  AttentionTensors t;
  t.q = in.q.data();
  t.k = kv_tensor_contiguous(in.kf.data(), KvType::f32, dims.k, p.n_kv_heads, depth);
  t.v = kv_tensor_contiguous(in.vf.data(), KvType::f32, dims.v, p.n_kv_heads, depth);
  t.out = out.data();
  if (Status s = reference_attention(p, t, in.ref.data()); !s) return s.error();
  return in;
}

// KL of the attention distribution, original keys vs keys of type kt, over every query row.
Summary kl_summary(const Inputs& in, KvType kt, const HugeArray<uint8_t>& kq) {
  const AttentionProblem& p = in.p;
  const int32_t dk = p.head_dim.k;
  const int64_t depth = p.kv_capacity;
  const size_t row_bytes = row_size(kt, dk);
  HugeArray<float> kd(in.kf.size());
  for (int64_t r = 0; r < p.n_seqs * depth * p.n_kv_heads; ++r)
    dequantize_row(kt, kq.data() + r * row_bytes, dk, kd.data() + r * dk);
  const double scale = p.effective_scale();
  Summary s;
  std::vector<double> a, b;
  for (int32_t sq = 0; sq < p.n_seqs; ++sq)
    for (int32_t i = 0; i < p.n_q_tokens; ++i)
      for (int32_t h = 0; h < p.n_q_heads; ++h) {
        const float* q = in.q.data() + ((int64_t{sq} * p.n_q_tokens + i) * p.n_q_heads + h) * dk;
        const int64_t n_vis = depth - p.n_q_tokens + i + 1, kvh = h / p.group();
        a.resize(static_cast<size_t>(n_vis));
        b.resize(static_cast<size_t>(n_vis));
        for (int64_t j = 0; j < n_vis; ++j) {
          const int64_t off = ((sq * depth + j) * p.n_kv_heads + kvh) * dk;
          a[j] = scale * dot(q, in.kf.data() + off, dk);
          b[j] = scale * dot(q, kd.data() + off, dk);
        }
        s.add(kl_divergence_logits(a, b));
      }
  return s;
}

// One query row: a mix of target keys plus noise, built where queries match keys
// (SyntheticKv::whiten), then scaled to the row's sharpness (see
// kQueryTargets in suite.hpp). kf holds the sequence's (token, kv head, dk) floats.
std::vector<float> make_query_row(const SuiteConfig& c, const AttentionProblem& p,
                                  const SyntheticKv& gen, const float* kf, int32_t seq,
                                  int32_t token, int32_t head) {
  const int32_t dk = p.head_dim.k, kvh = head / p.group();
  const int64_t n_vis = p.kv_capacity - p.n_q_tokens + token + 1;
  const auto key = [&](int64_t j) { return kf + (j * p.n_kv_heads + kvh) * dk; };
  RowRng rng(c.seed, stream_id(Stream::query, seq), static_cast<uint64_t>(head),
             mix64(static_cast<uint64_t>(p.kv_capacity)) ^ static_cast<uint64_t>(token));
  std::vector<double> q(static_cast<size_t>(dk), 0.0);
  std::vector<float> u(static_cast<size_t>(dk));
  for (int t = 0; t < kQueryTargets; ++t) {
    const auto pos = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(n_vis));
    gen.whiten(kvh, key(pos), u.data());
    const double norm = std::sqrt(dot(u.data(), u.data(), dk));
    const double a = 0.4 + 0.6 * rng.uniform();
    for (int32_t d = 0; d < dk; ++d) q[d] += a * u[d] / norm;
  }
  double qn = 0;
  for (double x : q) qn += x * x;
  qn = std::sqrt(qn);
  for (double& x : q) x = x / qn + kQueryNoise * rng.normal() / std::sqrt(double(dk));
  gen.unwhiten_query(kvh, q.data(), q.data());
  std::vector<double> logits(static_cast<size_t>(n_vis));
  for (int64_t j = 0; j < n_vis; ++j) logits[j] = dot(q, key(j));
  const double mx = *std::max_element(logits.begin(), logits.end());
  std::nth_element(logits.begin(), logits.begin() + n_vis / 2, logits.end());
  const double gap = std::max(mx - logits[n_vis / 2], 1e-9);
  const double target = std::log(double(n_vis)) + kQuerySpread * (2.0 * rng.uniform() - 1.0);
  const double gain = target / gap / double{p.effective_scale()};
  std::vector<float> out(static_cast<size_t>(dk));
  for (int32_t d = 0; d < dk; ++d) out[d] = static_cast<float>(gain * q[d]);
  return out;
}

}  // namespace

std::vector<float> make_queries(const SuiteConfig& c, const AttentionProblem& p,
                                const SyntheticKv& gen, const float* kf) {
  std::vector<float> q;
  const int64_t seq_floats = p.kv_capacity * p.n_kv_heads * p.head_dim.k;
  for (int32_t sq = 0; sq < p.n_seqs; ++sq)
    for (int32_t i = 0; i < p.n_q_tokens; ++i)
      for (int32_t h = 0; h < p.n_q_heads; ++h) {
        const std::vector<float> row = make_query_row(c, p, gen, kf + sq * seq_floats, sq, i, h);
        q.insert(q.end(), row.begin(), row.end());
      }
  return q;
}

int resolve_threads(int32_t requested) {
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return requested > 0 ? std::min<int>(requested, hw) : hw;
}

void quantize_parallel(KvType t, const float* src, int64_t rows, int32_t n, void* dst,
                       int threads) {
  const size_t rb = row_size(t, n);
  auto work = [&](int64_t r0, int64_t r1) {
    quantize_rows(t, src + r0 * n, r1 - r0, n, static_cast<uint8_t*>(dst) + r0 * rb);
  };
  const int64_t nt = std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, rows / 4096));
  std::vector<std::thread> pool;
  for (int64_t i = 1; i < nt; ++i) pool.emplace_back(work, rows * i / nt, rows * (i + 1) / nt);
  work(0, rows / nt);
  for (auto& th : pool) th.join();
}

int64_t attention_items(const SuiteConfig& c) {
  return static_cast<int64_t>(c.heads.size() * c.head_dims.size() * c.depths.size() *
                              c.pairs.size());
}

Expected<std::vector<AttentionRow>> run_attention_suite(const SuiteConfig& c,
                                                        tools::Progress* progress) {
  std::vector<AttentionRow> rows;
  const int threads = resolve_threads(c.n_threads);
  for (const auto& heads : c.heads)
    for (const HeadDims dims : c.head_dims)
      for (const int64_t depth : c.depths) {
        Expected<Inputs> in = make_inputs(c, heads, dims, depth, threads);
        if (!in) return in.error();
        const AttentionProblem& base = in->p;
        const int64_t kv_rows = base.n_seqs * depth * base.n_kv_heads;
        std::map<KvType, HugeArray<uint8_t>> kq, vq;  // quantized once per type
        std::map<KvType, Summary> kl;
        auto quantized = [&](std::map<KvType, HugeArray<uint8_t>>& cache, KvType t, int32_t d,
                             const HugeArray<float>& src) -> const HugeArray<uint8_t>& {
          auto it = cache.find(t);
          if (it != cache.end()) return it->second;
          HugeArray<uint8_t> buf(static_cast<size_t>(kv_rows) * row_size(t, d));
          quantize_parallel(t, src.data(), kv_rows, d, buf.data(), threads);
          return cache.emplace(t, std::move(buf)).first->second;
        };
        for (const KvPair pair : c.pairs) {
          AttentionProblem p = base;
          p.k_type = pair.k;
          p.v_type = pair.v;
          const auto& kb = quantized(kq, pair.k, dims.k, in->kf);
          const auto& vb = quantized(vq, pair.v, dims.v, in->vf);
          std::vector<float> out(in->ref.size());
          AttentionTensors t;
          t.q = in->q.data();
          t.k = kv_tensor_contiguous(kb.data(), pair.k, dims.k, p.n_kv_heads, depth);
          t.v = kv_tensor_contiguous(vb.data(), pair.v, dims.v, p.n_kv_heads, depth);
          t.out = out.data();
          Expected<std::string> kernel = run_library(c.backend, p, t, c.n_threads);
          if (!kernel) return kernel.error();
          if (!kl.contains(pair.k)) kl.emplace(pair.k, kl_summary(*in, pair.k, kb));
          const std::vector<double> outd(out.begin(), out.end());
          Summary cs;
          for (size_t r = 0; r < out.size() / static_cast<size_t>(dims.v); ++r) {
            const size_t off = r * static_cast<size_t>(dims.v);
            cs.add(cosine(std::span(in->ref).subspan(off, static_cast<size_t>(dims.v)),
                          std::span(outd).subspan(off, static_cast<size_t>(dims.v))));
          }
          const double bits =
              8.0 * static_cast<double>(row_size(pair.k, dims.k) + row_size(pair.v, dims.v)) /
              static_cast<double>(dims.k + dims.v);
          const Summary& ks = kl.at(pair.k);
          rows.push_back({pair, heads.first, heads.second, dims, depth, bits, nmse(in->ref, outd),
                          cs.mean(), cs.min, ks.mean(), ks.max, *kernel});
          if (progress)
            progress->step(fmt::format("attention {}/{} depth {}", to_string(pair.k),
                                       to_string(pair.v), depth));
        }
      }
  return rows;
}

}  // namespace kvflash::quality
