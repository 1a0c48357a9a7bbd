#include "quality/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <thread>

namespace kvflash::quality {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

RowRng::RowRng(uint64_t seed, uint64_t stream, uint64_t head, uint64_t index)
    : state_(mix64(mix64(mix64(seed) ^ stream) ^ (head << 40) ^ index)) {}

uint64_t RowRng::next() {
  state_ += 0x9e3779b97f4a7c15ull;
  return mix64(state_);
}

double RowRng::uniform() {
  // 53 random bits, shifted off zero so that log() below is finite.
  return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53;
}

// Inverse of the normal CDF (P. J. Acklam's rational approximation, relative error < 1.2e-9):
// one uniform per draw and no trigonometry, several times faster than Box-Muller, which matters
// for the 256M draws of a 1M-token haystack.
double RowRng::normal() {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  const double p = uniform();
  if (p < kLow || p > 1.0 - kLow) {
    const double q = std::sqrt(-2.0 * std::log(p < kLow ? p : 1.0 - p));
    const double x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
                     ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
    return p < kLow ? x : -x;
  }
  const double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
}

int32_t outlier_count(int32_t d) {
  return std::max(2, d / 32 / 2 * 2);
}

SyntheticKv::SyntheticKv(uint64_t seed, HeadDims dims, int32_t n_kv_heads)
    : seed_(seed), dims_(dims) {
  const int32_t dk = dims.k, half = dk / 2;
  theta_.resize(static_cast<size_t>(half));
  for (int32_t i = 0; i < half; ++i)
    theta_[i] = std::pow(kRopeBase, -2.0 * i / static_cast<double>(dk));
  rope_cos_.resize(static_cast<size_t>(kRopeBlock * half));
  rope_sin_.resize(rope_cos_.size());
  for (int64_t lo = 0; lo < kRopeBlock; ++lo)
    for (int32_t i = 0; i < half; ++i) {
      rope_cos_[lo * half + i] = std::cos(static_cast<double>(lo) * theta_[i]);
      rope_sin_[lo * half + i] = std::sin(static_cast<double>(lo) * theta_[i]);
    }
  for (int32_t h = 0; h < n_kv_heads; ++h) {
    RowRng rng(seed, static_cast<uint64_t>(Stream::head_style), static_cast<uint64_t>(h), 0);
    HeadStyle st;
    st.k_scale.assign(static_cast<size_t>(dk), 1.0f);
    st.k_mean.assign(static_cast<size_t>(dk), 0.0f);
    // Outlier pairs: distinct pair indices drawn from the low-frequency half [half/2, half).
    std::vector<int32_t> pool;
    for (int32_t i = half / 2; i < half; ++i) pool.push_back(i);
    const int32_t n_pairs =
        std::min<int32_t>(outlier_count(dk) / 2, static_cast<int32_t>(pool.size()));
    for (int32_t j = 0; j < n_pairs; ++j) {
      const auto pick =
          static_cast<size_t>(j) + rng.next() % (pool.size() - static_cast<size_t>(j));
      std::swap(pool[static_cast<size_t>(j)], pool[pick]);
      const int32_t i = pool[static_cast<size_t>(j)];
      const auto s = static_cast<float>(kOutlierMin + (kOutlierMax - kOutlierMin) * rng.uniform());
      // The mean direction sits near a diagonal of the pair, so that each of the two channels is
      // an outlier on its own (a mean along one axis would leave its partner at 0.5 s).
      const double phi = std::numbers::pi * (0.25 + 0.5 * static_cast<double>(rng.next() % 4) +
                                             0.1 * (rng.uniform() - 0.5));
      st.k_scale[i] = st.k_scale[i + half] = s;
      st.k_mean[i] = static_cast<float>(std::cos(phi));
      st.k_mean[i + half] = static_cast<float>(std::sin(phi));
    }
    st.v_scale.resize(static_cast<size_t>(dims.v));
    for (float& s : st.v_scale) s = static_cast<float>(0.5 * std::pow(4.0, rng.uniform()));
    heads_.push_back(std::move(st));
  }
}

std::vector<int32_t> SyntheticKv::outlier_channels(int32_t head) const {
  std::vector<int32_t> out;
  for (int32_t c = 0; c < dims_.k; ++c)
    if (heads_[head].k_scale[c] > 1.0f) out.push_back(c);
  return out;
}

void SyntheticKv::keys(int32_t head, int64_t pos0, int64_t n, float* dst, Stream s,
                       int32_t seq) const {
  const HeadStyle& st = heads_[head];
  const int32_t dk = dims_.k, half = dk / 2;
  std::vector<double> c_hi(static_cast<size_t>(half)), s_hi(static_cast<size_t>(half));
  int64_t cached_blk = -1;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t pos = pos0 + r;
    RowRng rng(seed_, stream_id(s, seq), static_cast<uint64_t>(head), static_cast<uint64_t>(pos));
    float* k = dst + r * dk;
    for (int32_t c = 0; c < dk; ++c) {
      const double z = rng.normal();
      k[c] = st.k_scale[c] > 1.0f
                 ? static_cast<float>(st.k_scale[c] * (st.k_mean[c] + kOutlierNoise * z))
                 : static_cast<float>(z);
    }
    // RoPE in double (the angle reaches ~1e6 radians at 1M tokens). cos/sin of a large angle cost
    // ~100 ns each, so the angle is split as pos = blk * kRopeBlock + lo: the block's rotation is
    // computed once per kRopeBlock rows, lo's comes from a table, and the two are composed. The
    // split depends on pos alone, so a row is the same bytes however the rows are sliced.
    const int64_t blk = pos / kRopeBlock, lo = pos % kRopeBlock;
    if (blk != cached_blk) {
      for (int32_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(blk * kRopeBlock) * theta_[i];
        c_hi[i] = std::cos(a);
        s_hi[i] = std::sin(a);
      }
      cached_blk = blk;
    }
    const double* c_lo = rope_cos_.data() + lo * half;
    const double* s_lo = rope_sin_.data() + lo * half;
    for (int32_t i = 0; i < half; ++i) {
      const double c = c_hi[i] * c_lo[i] - s_hi[i] * s_lo[i];
      const double sn = s_hi[i] * c_lo[i] + c_hi[i] * s_lo[i];
      const double x = k[i], y = k[i + half];
      k[i] = static_cast<float>(x * c - y * sn);
      k[i + half] = static_cast<float>(x * sn + y * c);
    }
  }
}

void SyntheticKv::values(int32_t head, int64_t pos0, int64_t n, float* dst, Stream s,
                         int32_t seq) const {
  const HeadStyle& st = heads_[head];
  const int32_t dv = dims_.v;
  for (int64_t r = 0; r < n; ++r) {
    RowRng rng(seed_, stream_id(s, seq), static_cast<uint64_t>(head),
               static_cast<uint64_t>(pos0 + r));
    for (int32_t c = 0; c < dv; ++c)
      dst[r * dv + c] = static_cast<float>(st.v_scale[c] * rng.normal());
  }
}

void SyntheticKv::fill(int64_t n_tokens, float* k_dst, float* v_dst, int n_threads,
                       int32_t seq) const {
  const auto n_heads = static_cast<int32_t>(heads_.size());
  const int64_t dk = dims_.k, dv = dims_.v;
  // Runs of consecutive positions per head (keys() reuses its RoPE block rotation along a run),
  // then scattered into the (token, head) layout.
  constexpr int64_t kRun = 256;
  auto work = [&](int64_t t0, int64_t t1) {
    std::vector<float> kb(static_cast<size_t>(kRun * dk)), vb(static_cast<size_t>(kRun * dv));
    for (int64_t t = t0; t < t1; t += kRun) {
      const int64_t n = std::min(kRun, t1 - t);
      if (n_heads == 1) {  // the layouts agree: no scatter
        keys(0, t, n, k_dst + t * dk, Stream::key, seq);
        if (v_dst) values(0, t, n, v_dst + t * dv, Stream::value, seq);
        continue;
      }
      for (int32_t h = 0; h < n_heads; ++h) {
        keys(h, t, n, kb.data(), Stream::key, seq);
        if (v_dst) values(h, t, n, vb.data(), Stream::value, seq);
        for (int64_t r = 0; r < n; ++r) {
          std::copy_n(kb.data() + r * dk, dk, k_dst + ((t + r) * n_heads + h) * dk);
          if (v_dst) std::copy_n(vb.data() + r * dv, dv, v_dst + ((t + r) * n_heads + h) * dv);
        }
      }
    }
  };
  const int64_t nt = std::clamp<int64_t>(n_threads, 1, std::max<int64_t>(1, n_tokens / 1024));
  std::vector<std::thread> pool;
  for (int64_t i = 1; i < nt; ++i)
    pool.emplace_back(work, n_tokens * i / nt, n_tokens * (i + 1) / nt);
  work(0, n_tokens / nt);
  for (auto& th : pool) th.join();
}

void SyntheticKv::whiten(int32_t head, const float* key, float* dst) const {
  const HeadStyle& st = heads_[head];
  for (int32_t c = 0; c < dims_.k; ++c) dst[c] = key[c] / st.k_scale[c];
}

void SyntheticKv::unwhiten_query(int32_t head, const double* q_w, double* q) const {
  const HeadStyle& st = heads_[head];
  for (int32_t c = 0; c < dims_.k; ++c) q[c] = q_w[c] / double{st.k_scale[c]};
}

}  // namespace kvflash::quality
