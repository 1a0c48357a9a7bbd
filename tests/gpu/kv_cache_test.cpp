// gpu::KvCache: appends land at the device-side lengths with the host's bytes (every layer's own
// K and V types; contiguous and paged with shuffled page tables of several page sizes), eagerly
// and from a captured graph replayed with new inputs; a step that does not fit marks the
// sequence full and writes nothing; cuda.decode over the cache matches the float64 reference,
// eagerly and replayed from a graph, and over a paged cache (shuffled pages; page sizes 16, 7
// and 1) gives the contiguous cache's output bit for bit, as the reference does; a page table
// entry outside the pool gives NaN rows for its sequence and reads nothing outside the pool.
#include "kvflash/kv_cache.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/reference.hpp"

namespace kvflash::gputest {
namespace {

constexpr double kNmseBound = 1e-5;

std::vector<float> gaussian(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = g(rng);
  return x;
}

// A shuffled page table: every sequence's pages spread over the whole pool.
std::vector<int32_t> shuffled_table(const gpu::KvCache& c, uint64_t seed) {
  std::vector<int32_t> t(size_t(c.config().n_seqs) * size_t(c.pages_per_seq()));
  std::iota(t.begin(), t.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(t.begin(), t.end(), rng);
  return t;
}

// Host picture of one cache tensor: its bytes and a host page table.
struct HostTensor {
  std::vector<uint8_t> bytes;
  KvTensor kv;
};
Expected<HostTensor> read_tensor(const gpu::KvCache& c, const KvTensor& dev,
                                 const std::vector<int32_t>& table, void* stream) {
  const gpu::KvCacheConfig& cfg = c.config();
  HostTensor h;
  h.kv = dev;
  const size_t n = cfg.page_size > 0 ? size_t(cfg.n_pages * dev.stride_page)
                                     : size_t(dev.stride_seq * cfg.n_seqs);
  h.bytes.resize(n);
  if (Status s = gpu::copy(h.bytes.data(), dev.data, n, stream); !s) return s.error();
  if (Status s = gpu::synchronize(stream); !s) return s.error();
  h.kv.data = h.bytes.data();
  h.kv.page_table = table.data();
  return h;
}

struct Layout {
  const char* name;
  int32_t page_size;
};
constexpr Layout kLayouts[] = {{"contiguous", 0}, {"paged16", 16}, {"paged7", 7}, {"paged1", 1}};

TEST(GpuKvCache, AppendsLandAtTheDeviceLengthsWithTheHostBytes) {
  KVFLASH_REQUIRE_GPU();
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  void* const s = stream.handle();
  for (const Layout& layout : kLayouts) {
    SCOPED_TRACE(layout.name);
    gpu::KvCacheConfig cfg;
    cfg.n_seqs = 2;
    cfg.n_kv_heads = 2;
    cfg.head_dim = {128, 128};
    cfg.layers = {{KvType::q4_0, KvType::q8_0},
                  {KvType::turbo3, KvType::f16},
                  {KvType::bf16, KvType::turbo4}};
    cfg.capacity = 40;
    cfg.page_size = layout.page_size;
    gpu::KvCache cache;
    KVFLASH_ASSIGN_OR_FAIL(cache, gpu::KvCache::create(cfg, s));
    std::vector<int32_t> table;
    if (layout.page_size > 0) {
      table = shuffled_table(cache, 99);
      KVFLASH_ASSERT_OK(cache.set_page_table(table, s));
    }
    const int32_t H = cfg.n_kv_heads, D = 128, L = cache.n_layers();
    const int32_t max_new = 3;
    const size_t per_layer = size_t(cfg.n_seqs) * max_new * H * D;  // floats of K (or V)
    gpu::DeviceBuffer src;
    KVFLASH_ASSIGN_OR_FAIL(src, gpu::DeviceBuffer::allocate(2 * L * per_layer * sizeof(float)));
    auto k_src = [&](int l) { return static_cast<const float*>(src.data()) + 2 * l * per_layer; };
    auto v_src = [&](int l) { return k_src(l) + per_layer; };

    // What every (layer, K or V, seq, token) row should hold: the f32 row last appended there.
    std::vector<std::vector<float>> expect(size_t(L) * 2 * cfg.n_seqs * cfg.capacity);
    std::vector<int64_t> lens = {5, 0};
    KVFLASH_ASSERT_OK(cache.set_lengths(lens, s));
    uint64_t seed = 1;
    auto upload = [&]() -> std::vector<float> {
      std::vector<float> x = gaussian(2 * L * per_layer, seed++);
      EXPECT_TRUE(gpu::copy(src.data(), x.data(), x.size() * sizeof(float), s).ok());
      EXPECT_TRUE(gpu::synchronize(s).ok());
      return x;
    };
    auto record = [&](const std::vector<float>& x, int32_t n_new) {
      for (int l = 0; l < L; ++l)
        for (int kv = 0; kv < 2; ++kv)
          for (int32_t seq = 0; seq < cfg.n_seqs; ++seq) {
            if (lens[size_t(seq)] + n_new > cfg.capacity) continue;  // full: nothing written
            for (int32_t i = 0; i < n_new; ++i) {
              const int64_t tok = lens[size_t(seq)] + i;
              std::vector<float>& row =
                  expect[((size_t(l) * 2 + kv) * cfg.n_seqs + seq) * cfg.capacity + tok];
              const float* from = x.data() + 2 * l * per_layer + kv * per_layer +
                                  ((size_t(seq) * n_new + i) * H) * D;
              row.assign(from, from + size_t(H) * D);
            }
          }
      for (int64_t& len : lens)
        if (len + n_new <= cfg.capacity) len += n_new;
    };
    auto step = [&](int32_t n_new) -> Status {
      if (Status st = cache.begin_step(n_new, s); !st) return st;
      for (int l = 0; l < L; ++l)
        if (Status st = cache.append(l, k_src(l), v_src(l), n_new, s); !st) return st;
      return {};
    };

    // Eager: 3 tokens.
    std::vector<float> x = upload();
    KVFLASH_ASSERT_OK(step(3));
    record(x, 3);
    // Captured once (2 tokens), replayed four times with new inputs.
    gpu::Graph graph;
    KVFLASH_ASSIGN_OR_FAIL(graph, gpu::Graph::capture(s, [&] { return step(2); }));
    for (int r = 0; r < 4; ++r) {
      x = upload();
      KVFLASH_ASSERT_OK(graph.launch(s));
      record(x, 2);
    }
    // Sequence 0 cannot take 3 more at 38: it is marked full and keeps its rows.
    KVFLASH_ASSERT_OK(gpu::synchronize(s));
    lens = {38, 13};
    KVFLASH_ASSERT_OK(cache.set_lengths(lens, s));
    x = upload();
    KVFLASH_ASSERT_OK(step(3));
    record(x, 3);
    std::vector<int32_t> full;
    KVFLASH_ASSIGN_OR_FAIL(full, cache.full_sequences(s));
    EXPECT_EQ(full, std::vector<int32_t>{0});
    std::vector<int64_t> dev_lens(2);
    KVFLASH_ASSERT_OK(gpu::copy(dev_lens.data(), cache.lengths(), 16, s));
    KVFLASH_ASSERT_OK(gpu::synchronize(s));
    EXPECT_EQ(dev_lens, lens);
    KVFLASH_ASSERT_OK(gpu::last_error());

    size_t checked = 0;
    for (int l = 0; l < L; ++l)
      for (int kv = 0; kv < 2; ++kv) {
        const KvType t = kv == 0 ? cfg.layers[size_t(l)].k : cfg.layers[size_t(l)].v;
        HostTensor h;
        KVFLASH_ASSIGN_OR_FAIL(h, read_tensor(cache, kv == 0 ? cache.k(l) : cache.v(l), table, s));
        const size_t row = row_size(t, D);
        std::vector<uint8_t> want(row * size_t(H));
        for (int32_t seq = 0; seq < cfg.n_seqs; ++seq)
          for (int64_t tok = 0; tok < cfg.capacity; ++tok) {
            const std::vector<float>& f =
                expect[((size_t(l) * 2 + kv) * cfg.n_seqs + seq) * cfg.capacity + tok];
            if (f.empty()) continue;
            quantize_rows(t, f.data(), H, D, want.data());
            for (int32_t hd = 0; hd < H; ++hd) {
              const uint8_t* got =
                  h.bytes.data() + kv_row_offset(h.kv, cfg.page_size, seq, tok, hd);
              ASSERT_EQ(std::memcmp(got, want.data() + hd * row, row), 0)
                  << "layer " << l << (kv ? " V" : " K") << " (" << to_string(t) << ") seq " << seq
                  << " token " << tok << " head " << hd;
              ++checked;
            }
          }
      }
    EXPECT_GT(checked, 0u);
  }
}

TEST(GpuKvCache, AttentionOverContiguousAndPagedCachesMatchesEagerAndReplayed) {
  KVFLASH_REQUIRE_GPU();
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  void* const s = stream.handle();
  const int64_t len = quick_len(3000);
  struct Pair {
    KvType k, v;
    int32_t kv_heads;
  };
  std::string skipped;  // pairs this build has no kernels for (KVFLASH_REQUIRE_PAIR)
  // turbo3 with one KV head: 50-byte rows, tokens padded to 52 bytes apart in pages.
  for (const Pair& pair : {Pair{KvType::q4_0, KvType::q4_0, 2}, Pair{KvType::f16, KvType::f16, 2},
                           Pair{KvType::turbo3, KvType::q8_0, 1}}) {
    if (auto why = pair_not_built(pair.k, pair.v)) {
      skipped += (skipped.empty() ? "" : "; ") + *why;
      continue;
    }
    gpu::KvCacheConfig cfg;
    cfg.n_seqs = 2;
    cfg.n_kv_heads = pair.kv_heads;
    cfg.head_dim = {128, 128};
    cfg.layers = {{pair.k, pair.v}};
    cfg.capacity = len + 5;
    const size_t n_rows = size_t(cfg.n_seqs) * size_t(len) * cfg.n_kv_heads;
    const std::vector<float> kf = gaussian(n_rows * 128, 7), vf = gaussian(n_rows * 128, 8);
    gpu::DeviceBuffer kd, vd;
    KVFLASH_ASSIGN_OR_FAIL(kd, gpu::DeviceBuffer::allocate(kf.size() * sizeof(float)));
    KVFLASH_ASSIGN_OR_FAIL(vd, gpu::DeviceBuffer::allocate(vf.size() * sizeof(float)));
    KVFLASH_ASSERT_OK(gpu::copy(kd.data(), kf.data(), kf.size() * sizeof(float), s));
    KVFLASH_ASSERT_OK(gpu::copy(vd.data(), vf.data(), vf.size() * sizeof(float), s));
    const int32_t n_q_heads = 8, n_q_tokens = 2;
    const std::vector<float> q = gaussian(size_t(cfg.n_seqs) * n_q_tokens * n_q_heads * 128, 9);
    gpu::DeviceBuffer qd;
    KVFLASH_ASSIGN_OR_FAIL(qd, gpu::DeviceBuffer::allocate(q.size() * sizeof(float)));
    KVFLASH_ASSERT_OK(gpu::copy(qd.data(), q.data(), q.size() * sizeof(float), s));
    const std::vector<int64_t> lens = {len, len};

    std::vector<double> contiguous_ref;
    std::vector<float> contiguous_out;
    for (const Layout& layout : kLayouts) {
      SCOPED_TRACE(std::string(to_string(pair.k)) + "/" + std::string(to_string(pair.v)) + " " +
                   layout.name);
      cfg.page_size = layout.page_size;
      gpu::KvCache cache;
      KVFLASH_ASSIGN_OR_FAIL(cache, gpu::KvCache::create(cfg, s));
      std::vector<int32_t> table;
      if (layout.page_size > 0) {
        table = shuffled_table(cache, 5);
        KVFLASH_ASSERT_OK(cache.set_page_table(table, s));
      }
      // One step of `len` tokens fills both sequences.
      KVFLASH_ASSERT_OK(cache.begin_step(static_cast<int32_t>(len), s));
      KVFLASH_ASSERT_OK(cache.append(0, static_cast<const float*>(kd.data()),
                                     static_cast<const float*>(vd.data()),
                                     static_cast<int32_t>(len), s));
      const AttentionProblem p = cache.problem(0, n_q_heads, n_q_tokens);
      // The float64 reference over the cache's own bytes, in its own layout: a paged cache must
      // give exactly the contiguous cache's result.
      HostTensor hk, hv;
      KVFLASH_ASSIGN_OR_FAIL(hk, read_tensor(cache, cache.k(0), table, s));
      KVFLASH_ASSIGN_OR_FAIL(hv, read_tensor(cache, cache.v(0), table, s));
      AttentionTensors host;
      host.q = q.data();
      host.k = hk.kv;
      host.v = hv.kv;
      host.kv_lens = lens.data();
      std::vector<float> host_out(q.size());
      std::vector<float> host_lse(size_t(cfg.n_seqs) * n_q_tokens * n_q_heads);
      host.out = host_out.data();
      host.lse = host_lse.data();
      std::vector<double> ref_out(q.size());
      KVFLASH_ASSERT_OK(reference_attention(p, host, ref_out.data()));
      if (layout.page_size > 0)
        EXPECT_EQ(ref_out, contiguous_ref);
      else
        contiguous_ref = ref_out;

      const Expected<Plan> pl = plan_cuda(p);
      ASSERT_TRUE(pl.ok()) << pl.error().message;
      DeviceOutputs o;
      KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(*pl, s));
      KVFLASH_ASSERT_OK(o.poison(s));
      const AttentionTensors t =
          with_outputs(cache.tensors(0, static_cast<const float*>(qd.data()), nullptr), o);
      KVFLASH_ASSERT_OK(run(*pl, t, o.workspace.data(), s));
      HostOutputs got;
      KVFLASH_ASSIGN_OR_FAIL(got, read_outputs(o, stream));
      KVFLASH_ASSERT_OK(gpu::last_error());
      std::string guards;
      KVFLASH_ASSIGN_OR_FAIL(guards, o.check_guards(stream));
      EXPECT_EQ(guards, "");
      Reference ref;
      ref.out = ref_out;
      ref.lse = host_lse;
      const Comparison cmp = compare(p, got, ref);
      EXPECT_EQ(cmp.non_finite, 0) << cmp.summary();
      EXPECT_EQ(cmp.lse_bad, 0) << cmp.summary();
      EXPECT_LE(cmp.nmse, kNmseBound) << cmp.summary();
      // Same plan, same tiles: a paged cache gives the contiguous cache's output bit for bit.
      if (layout.page_size == 0) {
        contiguous_out = got.out;
      } else {
        ASSERT_EQ(got.out.size(), contiguous_out.size());
        EXPECT_EQ(std::memcmp(got.out.data(), contiguous_out.data(), got.out.size() * 4), 0)
            << "paged output differs from the contiguous one";
      }

      // The same call captured (global mode: no allocation, no synchronization) and replayed.
      KVFLASH_ASSERT_OK(o.poison(s));
      gpu::Graph graph;
      KVFLASH_ASSIGN_OR_FAIL(
          graph, gpu::Graph::capture(s, [&] { return run(*pl, t, o.workspace.data(), s); }));
      KVFLASH_ASSERT_OK(graph.launch(s));
      HostOutputs replayed;
      KVFLASH_ASSIGN_OR_FAIL(replayed, read_outputs(o, stream));
      EXPECT_EQ(std::memcmp(replayed.out.data(), got.out.data(), got.out.size() * 4), 0)
          << "graph replay differs from the eager run";
    }
  }
  if (!skipped.empty()) GTEST_SKIP() << "the other pairs ran; skipped: " << skipped;
}

// Page tables live on the device, where the host cannot check them at each call: an entry
// outside 0 .. n_pages - 1 (an engine's bug; KvCache::set_page_table checks the tables it is
// given) must make cuda.decode read nothing outside the pool (compute-sanitizer memcheck runs
// this test) and give NaN rows for that sequence, the other sequence's rows unchanged bit for bit.
TEST(GpuKvCache, PageTableEntriesOutsideThePoolGiveNaNRowsAndReadNothingOutsideIt) {
  KVFLASH_REQUIRE_GPU();
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  void* const s = stream.handle();
  for (const KvType type : {KvType::f16, KvType::q4_0})
    for (const int32_t bad : {-1, 1 << 30}) {
      SCOPED_TRACE(std::string(to_string(type)) + " entry " + std::to_string(bad));
      gpu::KvCacheConfig cfg;
      cfg.n_seqs = 2;
      cfg.n_kv_heads = 2;
      cfg.head_dim = {128, 128};
      cfg.layers = {{type, type}};
      cfg.capacity = 1000;
      cfg.page_size = 16;
      gpu::KvCache cache;
      KVFLASH_ASSIGN_OR_FAIL(cache, gpu::KvCache::create(cfg, s));
      KVFLASH_ASSERT_OK(cache.set_page_table(shuffled_table(cache, 3), s));
      const int32_t len = 1000;
      const size_t n_rows = size_t(cfg.n_seqs) * len * cfg.n_kv_heads;
      const std::vector<float> kf = gaussian(n_rows * 128, 11), vf = gaussian(n_rows * 128, 12);
      const int32_t n_q_heads = 8;
      const std::vector<float> q = gaussian(size_t(cfg.n_seqs) * n_q_heads * 128, 13);
      gpu::DeviceBuffer kd, vd, qd;
      KVFLASH_ASSIGN_OR_FAIL(kd, gpu::DeviceBuffer::allocate(kf.size() * sizeof(float)));
      KVFLASH_ASSIGN_OR_FAIL(vd, gpu::DeviceBuffer::allocate(vf.size() * sizeof(float)));
      KVFLASH_ASSIGN_OR_FAIL(qd, gpu::DeviceBuffer::allocate(q.size() * sizeof(float)));
      KVFLASH_ASSERT_OK(gpu::copy(kd.data(), kf.data(), kf.size() * sizeof(float), s));
      KVFLASH_ASSERT_OK(gpu::copy(vd.data(), vf.data(), vf.size() * sizeof(float), s));
      KVFLASH_ASSERT_OK(gpu::copy(qd.data(), q.data(), q.size() * sizeof(float), s));
      KVFLASH_ASSERT_OK(cache.begin_step(len, s));
      KVFLASH_ASSERT_OK(cache.append(0, static_cast<const float*>(kd.data()),
                                     static_cast<const float*>(vd.data()), len, s));
      const AttentionProblem p = cache.problem(0, n_q_heads, 1);
      const Expected<Plan> pl = plan_cuda(p);
      ASSERT_TRUE(pl.ok()) << pl.error().message;
      DeviceOutputs o;
      KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(*pl, s));
      const AttentionTensors t =
          with_outputs(cache.tensors(0, static_cast<const float*>(qd.data()), nullptr), o);
      KVFLASH_ASSERT_OK(run(*pl, t, o.workspace.data(), s));
      HostOutputs good;
      KVFLASH_ASSIGN_OR_FAIL(good, read_outputs(o, stream));

      // Sequence 1's page 10 (its tokens 160-175, K and V share the table) points outside.
      auto* entry = const_cast<int32_t*>(cache.page_table()) + cache.pages_per_seq() + 10;
      KVFLASH_ASSERT_OK(gpu::copy(entry, &bad, sizeof bad, s));
      KVFLASH_ASSERT_OK(o.poison(s));
      KVFLASH_ASSERT_OK(run(*pl, t, o.workspace.data(), s));
      HostOutputs got;
      KVFLASH_ASSIGN_OR_FAIL(got, read_outputs(o, stream));
      KVFLASH_ASSERT_OK(gpu::last_error());
      std::string guards;
      KVFLASH_ASSIGN_OR_FAIL(guards, o.check_guards(stream));
      EXPECT_EQ(guards, "");
      const size_t per_seq = size_t(n_q_heads) * 128;
      EXPECT_EQ(std::memcmp(got.out.data(), good.out.data(), per_seq * sizeof(float)), 0)
          << "sequence 0 (its table intact) changed";
      int64_t not_nan = 0;
      for (size_t i = per_seq; i < 2 * per_seq; ++i) not_nan += !std::isnan(got.out[i]);
      for (size_t r = n_q_heads; r < 2 * size_t(n_q_heads); ++r) not_nan += !std::isnan(got.lse[r]);
      EXPECT_EQ(not_nan, 0) << "outputs and lse of sequence 1";
    }
}

// An append whose row lands on a page table entry outside the pool (a table corrupted on the
// device, where the host cannot check it without a sync) writes nothing there and says so
// (full_sequences: -1); the other sequence's rows land as usual. Run under memcheck, no write
// leaves the pool.
TEST(GpuKvCache, AppendToAPageOutsideThePoolWritesNothingAndSaysSo) {
  KVFLASH_REQUIRE_GPU();
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  void* const s = stream.handle();
  for (const int32_t bad : {-1, 1 << 30}) {
    SCOPED_TRACE("entry " + std::to_string(bad));
    gpu::KvCacheConfig cfg;
    cfg.n_seqs = 2;
    cfg.n_kv_heads = 2;
    cfg.head_dim = {128, 128};
    cfg.layers = {{KvType::q8_0, KvType::q8_0}};
    cfg.capacity = 64;
    cfg.page_size = 16;
    gpu::KvCache cache;
    KVFLASH_ASSIGN_OR_FAIL(cache, gpu::KvCache::create(cfg, s));
    // Sequence 0's first page points outside the pool.
    auto* entry = const_cast<int32_t*>(cache.page_table());
    KVFLASH_ASSERT_OK(gpu::copy(entry, &bad, sizeof bad, s));
    const int32_t n_new = 4;
    const size_t n_values = size_t(cfg.n_seqs) * n_new * cfg.n_kv_heads * 128;
    const std::vector<float> kf = gaussian(n_values, 21), vf = gaussian(n_values, 22);
    gpu::DeviceBuffer kd, vd;
    KVFLASH_ASSIGN_OR_FAIL(kd, gpu::DeviceBuffer::allocate(n_values * sizeof(float)));
    KVFLASH_ASSIGN_OR_FAIL(vd, gpu::DeviceBuffer::allocate(n_values * sizeof(float)));
    KVFLASH_ASSERT_OK(gpu::copy(kd.data(), kf.data(), n_values * sizeof(float), s));
    KVFLASH_ASSERT_OK(gpu::copy(vd.data(), vf.data(), n_values * sizeof(float), s));
    KVFLASH_ASSERT_OK(cache.begin_step(n_new, s));
    KVFLASH_ASSERT_OK(cache.append(0, static_cast<const float*>(kd.data()),
                                   static_cast<const float*>(vd.data()), n_new, s));
    KVFLASH_ASSERT_OK(gpu::last_error());
    Expected<std::vector<int32_t>> full = cache.full_sequences(s);
    ASSERT_TRUE(full.ok()) << full.error().message;
    EXPECT_EQ(*full, std::vector<int32_t>{-1});
    // Sequence 1 (its table intact): its K rows are the host's quantization of its inputs.
    const size_t row = row_size(KvType::q8_0, 128);
    const KvTensor k = cache.k(0);
    int32_t page = 0;
    KVFLASH_ASSERT_OK(gpu::copy(&page, cache.page_table() + cache.pages_per_seq(), sizeof page, s));
    KVFLASH_ASSERT_OK(stream.synchronize());
    std::vector<uint8_t> got(size_t(n_new) * cfg.n_kv_heads * row), want(got.size());
    KVFLASH_ASSERT_OK(gpu::copy(got.data(),
                                static_cast<const uint8_t*>(k.data) + int64_t{page} * k.stride_page,
                                got.size(), s));
    KVFLASH_ASSERT_OK(stream.synchronize());
    quantize_rows(KvType::q8_0, kf.data() + n_values / 2, int64_t{n_new} * cfg.n_kv_heads, 128,
                  want.data());
    EXPECT_EQ(got, want);
  }
}

TEST(GpuKvCache, ConfigErrorsNameTheField) {
  gpu::KvCacheConfig cfg;
  cfg.layers = {{KvType::q8_0, KvType::q8_0}};
  cfg.capacity = 0;
  const Expected<gpu::KvCacheBytes> b = gpu::kv_cache_bytes(cfg);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("KvCacheConfig.capacity=0 is not allowed"), std::string::npos);
  cfg.capacity = 1000;
  cfg.page_size = 16;
  const Expected<gpu::KvCacheBytes> ok = gpu::kv_cache_bytes(cfg);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  // 63 pages of 16 tokens x 8 heads x 136-byte q8_0 rows, for K and for V (pages 16-aligned).
  EXPECT_EQ(ok->rows, size_t(2) * 63 * 16 * 8 * 136);
  EXPECT_EQ(ok->padding, 0u);
}

}  // namespace
}  // namespace kvflash::gputest
