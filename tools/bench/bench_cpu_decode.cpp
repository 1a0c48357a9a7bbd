// Decode speed of the CPU backend: one query token per sequence against a KV cache of each depth
// and K/V type, reported as effective KV bandwidth = KV bytes read / time per call.
//
// Method: inputs are quantized once, then copied into enough buffers that together they exceed
// twice the last-level cache; calls rotate through them so the cache is not what is measured.
// Warm-up calls first, then the median (and min, max) of the timed repetitions.
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kvflash/registry.hpp"

using namespace kvflash;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

int64_t last_level_cache_bytes() {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return std::max<int64_t>({l3, l2, int64_t{32} << 20});
}

// A KV cache is one large long-lived allocation: take it 2 MiB-aligned and ask for transparent
// huge pages, as an engine would (TLB misses on 4 KiB pages otherwise cost as much as the math).
struct HugeBuffer {
  uint8_t* data = nullptr;
  size_t bytes = 0;
  explicit HugeBuffer(const std::vector<uint8_t>& src) : bytes(src.size()) {
    constexpr size_t kHuge = size_t{2} << 20;
    data = static_cast<uint8_t*>(std::aligned_alloc(kHuge, (bytes + kHuge - 1) / kHuge * kHuge));
#if defined(MADV_HUGEPAGE)
    madvise(data, (bytes + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
#endif
    std::memcpy(data, src.data(), bytes);
  }
  HugeBuffer(HugeBuffer&& o) noexcept : data(o.data), bytes(o.bytes) {
    o.data = nullptr;
  }
  HugeBuffer(const HugeBuffer&) = delete;
  ~HugeBuffer() {
    std::free(data);
  }
};

struct Row {
  std::string k, v, kernel;
  int64_t depth;
  double us_med, us_min, us_max, gbps;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvflash-bench-cpu: CPU decode bandwidth over compressed KV"};
  std::string types = "f16,q8_0,q4_0,turbo3,turbo4";
  std::string depths = "32768,131072";
  std::string heads = "32/8";
  int32_t dim = 128, reps = 10, warmup = 2, threads = 0;
  bool csv = false;
  int64_t llc_override = 0;
  app.add_option("--types", types, "K/V types (same for K and V; 'k:v' for a mixed pair)");
  app.add_option("-d,--depths", depths, "KV depths in tokens, comma separated");
  app.add_option("--heads", heads, "query heads / KV heads");
  app.add_option("--head-dim", dim, "head dim (K and V)");
  app.add_option("-r,--reps", reps, "timed repetitions")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "warm-up calls")->check(CLI::NonNegativeNumber);
  app.add_option("-t,--threads", threads, "threads (0 = all)");
  app.add_flag("--csv", csv, "CSV instead of a markdown table");
  app.add_option(
      "--llc-bytes", llc_override,
      "last-level cache size to rotate inputs past (default: from sysconf; 1 = no rotation)");
  CLI11_PARSE(app, argc, argv);

  const auto hv = split(heads, '/');
  if (hv.size() != 2) {
    fmt::print(stderr, "--heads: expected Q/KV such as 32/8, got '{}'\n", heads);
    return 2;
  }
  AttentionProblem base;
  base.n_q_heads = std::stoi(hv[0]);
  base.n_kv_heads = std::stoi(hv[1]);
  base.head_dim = {dim, dim};
  const int64_t llc = llc_override > 0 ? llc_override : last_level_cache_bytes();
  std::vector<Row> rows;
  std::mt19937_64 rng(42);
  std::normal_distribution<float> g(0.0f, 1.0f);

  for (const std::string& pair : split(types, ',')) {
    const auto kv = split(pair, ':');
    const auto kt = kv_type_from_name(kv[0]);
    const auto vt = kv_type_from_name(kv.size() > 1 ? kv[1] : kv[0]);
    if (!kt || !vt) {
      fmt::print(stderr, "--types: unknown type in '{}'; allowed: {}\n", pair, kv_type_names());
      return 2;
    }
    for (const std::string& ds : split(depths, ',')) {
      AttentionProblem p = base;
      p.k_type = *kt;
      p.v_type = *vt;
      p.kv_capacity = std::stoll(ds);
      auto pl = plan(p, {.n_threads = threads});
      if (!pl) {
        fmt::print(stderr, "{}\n", pl.error().message);
        return 1;
      }
      const int64_t n_rows = p.kv_capacity * p.n_kv_heads;
      const size_t kb = row_size(p.k_type, dim) * n_rows, vb = row_size(p.v_type, dim) * n_rows;
      // One source buffer of random rows, quantized once, copied into the rotation set.
      std::vector<uint8_t> kq(kb), vq(vb);
      {
        std::vector<float> src(static_cast<size_t>(std::min<int64_t>(n_rows, 4096)) * dim);
        for (float& x : src) x = g(rng);
        const int64_t chunk = static_cast<int64_t>(src.size()) / dim;
        for (int64_t r = 0; r < n_rows; r += chunk) {
          const int64_t n = std::min(chunk, n_rows - r);
          quantize_rows(p.k_type, src.data(), n, dim, kq.data() + r * row_size(p.k_type, dim));
          quantize_rows(p.v_type, src.data(), n, dim, vq.data() + r * row_size(p.v_type, dim));
        }
      }
      const int64_t copies = std::clamp<int64_t>(
          (2 * llc + static_cast<int64_t>(kb + vb) - 1) / static_cast<int64_t>(kb + vb), 1,
          std::max<int64_t>(1, (int64_t{8} << 30) / static_cast<int64_t>(kb + vb)));
      std::vector<HugeBuffer> ks, vs;
      for (int64_t c = 0; c < copies; ++c) {
        ks.emplace_back(kq);
        vs.emplace_back(vq);
      }
      std::vector<float> q(static_cast<size_t>(p.n_q_heads) * dim), out(q.size());
      for (float& x : q) x = g(rng);
      std::vector<uint8_t> ws(pl->workspace_bytes);
      std::vector<double> us;
      for (int32_t it = 0; it < warmup + reps; ++it) {
        const int64_t c = it % copies;
        AttentionTensors t;
        t.q = q.data();
        t.k = kv_tensor_contiguous(ks[c].data, p.k_type, dim, p.n_kv_heads, p.kv_capacity);
        t.v = kv_tensor_contiguous(vs[c].data, p.v_type, dim, p.n_kv_heads, p.kv_capacity);
        t.out = out.data();
        const auto t0 = std::chrono::steady_clock::now();
        Status s = run(*pl, t, ws.data());
        const auto t1 = std::chrono::steady_clock::now();
        if (!s) {
          fmt::print(stderr, "{}\n", s.message());
          return 1;
        }
        if (it >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      std::sort(us.begin(), us.end());
      const double med = us[us.size() / 2];
      rows.push_back({std::string(to_string(p.k_type)), std::string(to_string(p.v_type)),
                      pl->kernel->name, p.kv_capacity, med, us.front(), us.back(),
                      static_cast<double>(kb + vb) / (med * 1e-6) / 1e9});
      fmt::print(stderr, "  {}/{} depth {}: {:.0f} us\n", rows.back().k, rows.back().v,
                 p.kv_capacity, med);
    }
  }
  if (csv) {
    fmt::print("k_type,v_type,depth,heads,head_dim,kernel,us_median,us_min,us_max,gbps\n");
    for (const Row& r : rows)
      fmt::print("{},{},{},{},{},{},{:.1f},{:.1f},{:.1f},{:.2f}\n", r.k, r.v, r.depth, heads, dim,
                 r.kernel, r.us_med, r.us_min, r.us_max, r.gbps);
  } else {
    fmt::print("| K | V | depth | heads | D | kernel | µs median (min-max) | KV GB/s |\n");
    fmt::print("|---|---|---:|---|---:|---|---:|---:|\n");
    for (const Row& r : rows)
      fmt::print("| {} | {} | {} | {} | {} | {} | {:.0f} ({:.0f}-{:.0f}) | {:.1f} |\n", r.k, r.v,
                 r.depth, heads, dim, r.kernel, r.us_med, r.us_min, r.us_max, r.gbps);
  }
  return 0;
}
