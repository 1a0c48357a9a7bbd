// The needle part of the suite (suite.hpp). The haystack is generated and quantized once at the
// largest depth; each depth runs on a prefix of it, with the needle's row swapped in (rows are
// quantized independently, so this is exactly the cache a fresh quantization would give).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <thread>

#include "kvflash/registry.hpp"
#include "quality/backend_run.hpp"
#include "quality/buffer.hpp"
#include "quality/metrics.hpp"
#include "quality/suite.hpp"
#include "quality/synthetic.hpp"

namespace kvflash::quality {
namespace {

double dot(const std::vector<double>& a, const float* b) {
  return quality::dot(a.data(), b, static_cast<int64_t>(a.size()));
}

// One trial at one depth: where the needle sits, what it is, the query that looks for it and the
// float64 outcome on the original K/V (the weights w first, the output after the values pass).
struct Needle {
  int64_t depth = 0, pos = 0;
  std::vector<float> k, v, q;
  std::vector<double> w;  // float64 attention weights over the depth's tokens, needle included
  double weight_ref = 0, cos_ref = 0;
};

// The query gain g at which float64 attention over the original keys (raw logits l_j of the
// haystack, l_n of the needle, times g) gives the needle `target` of the weight: the root of
// F(g) = log sum_j exp(g (l_j - l_n)) = log((1 - target) / target). F is convex with F(0) = log N,
// so Newton's method from g = 0 approaches the root from the left without overshooting (a few
// passes over the haystack instead of a bisection's fifty). Where some haystack key outscores the
// needle even in float64, F stops decreasing before the target: the best gain found is used.
double needle_gain(const std::vector<double>& hay, double ln, double target) {
  const double goal = std::log((1.0 - target) / target);
  double g = 0;
  for (int it = 0; it < 100 && !hay.empty(); ++it) {
    double m = -std::numeric_limits<double>::infinity(), s = 0, s1 = 0;
    for (double x : hay) m = std::max(m, g * (x - ln));
    for (double x : hay) {
      const double e = std::exp(g * (x - ln) - m);
      s += e;
      s1 += e * (x - ln);
    }
    const double f = m + std::log(s), df = s1 / s;  // F and F' (the softmax mean of l_j - l_n)
    if (f - goal < 1e-9 || df >= 0) break;
    g -= (f - goal) / df;
  }
  return g;
}

Needle make_needle(const SuiteConfig& c, const SyntheticKv& gen, const HugeArray<float>& kf,
                   int64_t depth, int32_t trial, double scale) {
  const HeadDims dims = gen.dims();
  const int32_t dk = dims.k, dv = dims.v;
  Needle n;
  n.depth = depth;
  RowRng rng(c.seed, static_cast<uint64_t>(Stream::needle), static_cast<uint64_t>(trial),
             static_cast<uint64_t>(depth));
  n.pos = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(depth));
  n.k.resize(static_cast<size_t>(dk));
  n.v.resize(static_cast<size_t>(dv));
  // A key and value of the same style as the haystack (outliers, RoPE at its position): the
  // needle differs only in that the query looks for it (its match direction plus noise).
  gen.keys(0, n.pos, 1, n.k.data(), Stream::needle);
  gen.values(0, n.pos, 1, n.v.data(), Stream::needle);
  std::vector<float> u(static_cast<size_t>(dk));
  gen.whiten(0, n.k.data(), u.data());
  double un = 0;
  for (float x : u) un += double{x} * x;
  std::vector<double> q(static_cast<size_t>(dk));
  for (int32_t d = 0; d < dk; ++d)
    q[d] = u[d] / std::sqrt(un) + kQueryNoise * rng.normal() / std::sqrt(double(dk));
  gen.unwhiten_query(0, q.data(), q.data());
  // Raw logits of the haystack (the needle's row excluded) and of the needle.
  std::vector<double> logits(static_cast<size_t>(depth));
  for (int64_t j = 0; j < depth; ++j) logits[j] = dot(q, kf.data() + j * dk);
  const double ln = dot(q, n.k.data());
  std::vector<double> hay(logits);
  hay.erase(hay.begin() + n.pos);
  const double gain = needle_gain(hay, ln, c.needle_weight);
  n.q.resize(static_cast<size_t>(dk));
  for (int32_t d = 0; d < dk; ++d) n.q[d] = static_cast<float>(gain * q[d] / scale);
  // The float64 outcome on the original K/V, with the query as the kernels see it (float).
  std::vector<double> qd(n.q.begin(), n.q.end());
  logits[n.pos] = scale * dot(qd, n.k.data());
  for (int64_t j = 0; j < depth; ++j)
    if (j != n.pos) logits[j] = scale * dot(qd, kf.data() + j * dk);
  const double lse = log_sum_exp(logits);
  for (double& x : logits) x = std::exp(x - lse);
  n.weight_ref = logits[n.pos];
  n.w = std::move(logits);
  return n;
}

// The values pass: the haystack's values are generated chunk by chunk (never all in f32: at 1M
// tokens that would be half a gigabyte more to fault in), each chunk is quantized into every V
// type's cache, and the float64 output of every needle is accumulated. Rows are split across the
// threads; each keeps its own partial sums.
void values_pass(const SyntheticKv& gen, int64_t n_rows, std::vector<Needle*> needles,
                 std::map<KvType, HugeArray<uint8_t>>& vq, int threads) {
  const int32_t dv = gen.dims().v;
  const auto dvs = static_cast<size_t>(dv);
  std::vector<std::vector<double>> partial(static_cast<size_t>(threads),
                                           std::vector<double>(needles.size() * dvs, 0.0));
  auto work = [&](size_t w, int64_t r0, int64_t r1) {
    constexpr int64_t kChunk = 4096;
    std::vector<float> buf(static_cast<size_t>(kChunk) * dvs);
    for (int64_t c0 = r0; c0 < r1; c0 += kChunk) {
      const int64_t n = std::min(kChunk, r1 - c0);
      gen.values(0, c0, n, buf.data());
      for (auto& [t, cache] : vq)
        quantize_rows(t, buf.data(), n, dv,
                      cache.data() + static_cast<size_t>(c0) * row_size(t, dv));
      for (size_t i = 0; i < needles.size(); ++i) {
        const Needle& nd = *needles[i];
        double* acc = partial[w].data() + i * dvs;
        for (int64_t j = c0; j < std::min(c0 + n, nd.depth); ++j) {
          const double wj = nd.w[static_cast<size_t>(j)];
          const float* v = j == nd.pos ? nd.v.data() : buf.data() + (j - c0) * dv;
          for (int32_t d = 0; d < dv; ++d) acc[d] += wj * double{v[d]};
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < threads; ++w)
    pool.emplace_back(work, static_cast<size_t>(w), n_rows * w / threads,
                      n_rows * (w + 1) / threads);
  work(0, 0, n_rows / threads);
  for (auto& th : pool) th.join();
  for (size_t i = 0; i < needles.size(); ++i) {
    std::vector<double> out(dvs, 0.0);
    for (const auto& p : partial)
      for (size_t d = 0; d < dvs; ++d) out[d] += p[i * dvs + d];
    const std::vector<double> vd(needles[i]->v.begin(), needles[i]->v.end());
    needles[i]->cos_ref = cosine(out, vd);
    needles[i]->w = {};
  }
}

// One trial: swap the needle's rows into the quantized caches, run the library, swap the
// haystack's rows back, and fold the outcome into `row`.
Status run_trial(const SuiteConfig& c, const AttentionProblem& base, KvPair pair, const Needle& n,
                 uint8_t* kq, uint8_t* vq, NeedleRow& row) {
  const HeadDims dims = base.head_dim;
  const size_t kb = row_size(pair.k, dims.k), vb = row_size(pair.v, dims.v);
  std::vector<uint8_t> k_save(kb), v_save(vb);
  uint8_t* krow = kq + static_cast<size_t>(n.pos) * kb;
  uint8_t* vrow = vq + static_cast<size_t>(n.pos) * vb;
  std::memcpy(k_save.data(), krow, kb);
  std::memcpy(v_save.data(), vrow, vb);
  quantize_row(pair.k, n.k.data(), dims.k, krow);
  quantize_row(pair.v, n.v.data(), dims.v, vrow);
  AttentionProblem p = base;
  p.k_type = pair.k;
  p.v_type = pair.v;
  p.kv_capacity = n.depth;
  p.n_q_tokens = c.needle_queries;
  // The needle's query at every position of the call; only the last (the whole haystack in view)
  // is scored.
  const auto n_q = static_cast<size_t>(c.needle_queries);
  std::vector<float> q;
  for (size_t i = 0; i < n_q; ++i) q.insert(q.end(), n.q.begin(), n.q.end());
  std::vector<float> out(n_q * static_cast<size_t>(dims.v)), lse(n_q);
  AttentionTensors t;
  t.q = q.data();
  t.k = kv_tensor_contiguous(kq, pair.k, dims.k, 1, n.depth);
  t.v = kv_tensor_contiguous(vq, pair.v, dims.v, 1, n.depth);
  t.out = out.data();
  t.lse = lse.data();
  const Expected<std::string> kernel = run_library(c.backend, p, t, c.n_threads);
  // The needle's logit as the quantized cache holds it, in double.
  std::vector<float> kd(static_cast<size_t>(dims.k));
  dequantize_row(pair.k, krow, dims.k, kd.data());
  const std::vector<double> qd(n.q.begin(), n.q.end());
  const double s_needle = p.effective_scale() * dot(qd, kd.data());
  std::memcpy(krow, k_save.data(), kb);
  std::memcpy(vrow, v_save.data(), vb);
  if (!kernel) return kernel.error();
  const std::vector<double> od(out.end() - dims.v, out.end()), vd(n.v.begin(), n.v.end());
  const double cs = cosine(od, vd), w = std::exp(s_needle - double{lse.back()});
  row.trials += 1;
  row.passed += cs >= kNeedlePassCosine ? 1 : 0;
  row.weight_mean += w;  // divided by the trial count by the caller
  row.weight_min = std::min(row.weight_min, w);
  row.weight_ref += n.weight_ref;
  row.cos_min = std::min(row.cos_min, cs);
  row.cos_ref = std::min(row.cos_ref, n.cos_ref);
  row.kernel = *kernel;
  return {};
}

}  // namespace

int64_t needle_items(const SuiteConfig& c) {
  std::vector<int64_t> d = c.needle_depths;
  std::sort(d.begin(), d.end());
  d.erase(std::unique(d.begin(), d.end()), d.end());
  return static_cast<int64_t>(c.head_dims.size() * d.size() * c.pairs.size());
}

Expected<std::vector<NeedleRow>> run_needle_suite(const SuiteConfig& c, tools::Progress* progress) {
  std::vector<NeedleRow> rows;
  if (c.needle_depths.empty()) return rows;
  const int threads = resolve_threads(c.n_threads);
  std::vector<int64_t> depths = c.needle_depths;
  std::sort(depths.begin(), depths.end());
  depths.erase(std::unique(depths.begin(), depths.end()), depths.end());
  const int64_t max_depth = depths.back();
  const auto n_max = static_cast<size_t>(max_depth);
  for (const HeadDims dims : c.head_dims) {
    AttentionProblem p;
    p.n_q_heads = p.n_kv_heads = 1;
    p.head_dim = dims;
    p.kv_capacity = max_depth;
    if (Status s = validate(p); !s) return s.error();
    const double scale = p.effective_scale();
    const SyntheticKv gen(c.seed, dims, 1);
    HugeArray<float> kf(n_max * static_cast<size_t>(dims.k));
    gen.fill(max_depth, kf.data(), nullptr, threads);
    // The needles and their queries, [depth][trial], spread over the threads (each is a pass over
    // its haystack in double).
    std::vector<std::vector<Needle>> needles(
        depths.size(), std::vector<Needle>(static_cast<size_t>(c.needle_trials)));
    {
      const size_t items = depths.size() * needles.front().size();
      auto work = [&](size_t w) {
        for (size_t i = w; i < items; i += static_cast<size_t>(threads)) {
          const size_t d = i / needles.front().size(), t = i % needles.front().size();
          needles[d][t] = make_needle(c, gen, kf, depths[d], static_cast<int32_t>(t), scale);
        }
      };
      std::vector<std::thread> pool;
      for (int w = 1; w < threads; ++w) pool.emplace_back(work, static_cast<size_t>(w));
      work(0);
      for (auto& th : pool) th.join();
    }
    // Quantizing a 1M-token haystack costs more than attending over it: V is quantized once per V
    // type and kept, K once per K type, and every pair with that K type runs before the next.
    std::map<KvType, HugeArray<uint8_t>> vq;
    for (const KvPair pair : c.pairs)
      if (!vq.contains(pair.v))
        vq.emplace(pair.v, HugeArray<uint8_t>(n_max * row_size(pair.v, dims.v)));
    std::vector<Needle*> all;
    for (auto& trials : needles)
      for (Needle& n : trials) all.push_back(&n);
    values_pass(gen, max_depth, all, vq, threads);
    size_t kb_max = 0;
    for (const KvPair pair : c.pairs) kb_max = std::max(kb_max, row_size(pair.k, dims.k));
    HugeArray<uint8_t> kq(n_max * kb_max);
    std::vector<std::vector<NeedleRow>> by_pair(c.pairs.size());
    for (size_t first = 0; first < c.pairs.size(); ++first) {
      const KvType kt = c.pairs[first].k;
      bool seen = false;
      for (size_t i = 0; i < first; ++i) seen = seen || c.pairs[i].k == kt;
      if (seen) continue;
      quantize_parallel(kt, kf.data(), max_depth, dims.k, kq.data(), threads);
      for (size_t i = first; i < c.pairs.size(); ++i) {
        if (c.pairs[i].k != kt) continue;
        for (const std::vector<Needle>& trials : needles) {
          NeedleRow row{c.pairs[i], dims, trials.front().depth, 0, 0, 0, 1, 0, 1, 1, {}};
          for (const Needle& n : trials)
            if (Status s =
                    run_trial(c, p, c.pairs[i], n, kq.data(), vq.at(c.pairs[i].v).data(), row);
                !s)
              return s.error();
          row.weight_mean /= row.trials;
          row.weight_ref /= row.trials;
          by_pair[i].push_back(row);
          if (progress)
            progress->step(fmt::format("needle {}/{} depth {}", to_string(c.pairs[i].k),
                                       to_string(c.pairs[i].v), row.depth));
        }
      }
    }
    for (const auto& r : by_pair) rows.insert(rows.end(), r.begin(), r.end());
  }
  return rows;
}

}  // namespace kvflash::quality
