// Paged K/V (problem.page_size > 0, KvTensor::page_table): the same tokens scattered over
// shuffled pages give the float64 reference exactly the result of the contiguous layout, for
// page sizes that divide the capacity, do not, and are 1; the validation names what is wrong; the
// CPU kernels read paged caches too (as do cuda.decode and cuda.prefill).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kvflash/formats.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/reference.hpp"
#include "kvflash/registry.hpp"

namespace kvflash {
namespace {

struct Scattered {
  std::vector<uint8_t> data;
  std::vector<int32_t> table;
  KvTensor kv;
};

// The rows of a contiguous tensor copied into pages of `page_size` tokens in a shuffled order,
// with `spare` unused pages, and its page table.
Scattered scatter(const std::vector<uint8_t>& contiguous, const AttentionProblem& p, KvType t,
                  int32_t dim, int32_t page_size, int32_t spare, uint64_t seed) {
  const int32_t pps = static_cast<int32_t>(pages_per_seq(p.kv_capacity, page_size));
  const int64_t n_pages = int64_t{p.n_seqs} * pps + spare;
  Scattered s;
  s.table.resize(size_t(p.n_seqs) * size_t(pps));
  std::vector<int32_t> perm(static_cast<size_t>(n_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::copy_n(perm.begin(), s.table.size(), s.table.begin());
  s.kv = kv_tensor_paged(nullptr, t, dim, p.n_kv_heads, page_size, n_pages, s.table.data(), pps);
  s.data.assign(static_cast<size_t>(n_pages * s.kv.stride_page), 0xEE);
  s.kv.data = s.data.data();
  const KvTensor src = kv_tensor_contiguous(contiguous.data(), t, dim, p.n_kv_heads, p.kv_capacity);
  const size_t row = row_size(t, dim);
  for (int64_t seq = 0; seq < p.n_seqs; ++seq)
    for (int64_t tok = 0; tok < p.kv_capacity; ++tok)
      for (int64_t h = 0; h < p.n_kv_heads; ++h)
        std::memcpy(s.data.data() + kv_row_offset(s.kv, page_size, seq, tok, h),
                    contiguous.data() + kv_row_offset(src, 0, seq, tok, h), row);
  return s;
}

std::vector<uint8_t> random_rows(KvType t, int32_t dim, int64_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * dim));
  for (float& v : x) v = g(rng);
  std::vector<uint8_t> out(row_size(t, dim) * size_t(rows));
  quantize_rows(t, x.data(), rows, dim, out.data());
  return out;
}

AttentionProblem problem(KvType k, KvType v) {
  AttentionProblem p;
  p.n_seqs = 2;
  p.n_q_tokens = 2;
  p.n_q_heads = 8;
  p.n_kv_heads = 2;
  p.head_dim = {128, 128};
  p.k_type = k;
  p.v_type = v;
  p.kv_capacity = 100;
  return p;
}

TEST(PagedReference, ShuffledPagesGiveTheContiguousResultExactly) {
  for (const auto& [kt, vt] :
       {std::pair{KvType::f16, KvType::f16}, std::pair{KvType::q4_0, KvType::turbo3}}) {
    AttentionProblem p = problem(kt, vt);
    const int64_t rows = int64_t{p.n_seqs} * p.kv_capacity * p.n_kv_heads;
    const std::vector<uint8_t> k = random_rows(kt, 128, rows, 1);
    const std::vector<uint8_t> v = random_rows(vt, 128, rows, 2);
    std::vector<float> q(size_t(p.n_seqs) * p.n_q_tokens * p.n_q_heads * 128);
    std::mt19937_64 rng(3);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (float& x : q) x = g(rng);
    const std::vector<int64_t> lens = {100, 61};
    std::vector<float> out(size_t(p.n_seqs) * p.n_q_tokens * p.n_q_heads * 128);

    AttentionTensors t;
    t.q = q.data();
    t.k = kv_tensor_contiguous(k.data(), kt, 128, p.n_kv_heads, p.kv_capacity);
    t.v = kv_tensor_contiguous(v.data(), vt, 128, p.n_kv_heads, p.kv_capacity);
    t.kv_lens = lens.data();
    t.out = out.data();
    std::vector<double> want(out.size()), got(out.size());
    ASSERT_TRUE(reference_attention(p, t, want.data()).ok());

    for (int32_t page_size : {1, 7, 16, 100, 128}) {
      SCOPED_TRACE(std::string(to_string(kt)) + "/" + std::string(to_string(vt)) +
                   " page_size=" + std::to_string(page_size));
      AttentionProblem pp = p;
      pp.page_size = page_size;
      ASSERT_TRUE(validate(pp).ok());
      const Scattered ks = scatter(k, p, kt, 128, page_size, 3, 10 + page_size);
      const Scattered vs = scatter(v, p, vt, 128, page_size, 0, 20 + page_size);
      AttentionTensors tp = t;
      tp.k = ks.kv;
      tp.v = vs.kv;
      const Status st = reference_attention(pp, tp, got.data());
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_EQ(got, want);
    }
  }
}

TEST(PagedReference, ValidationNamesTheProblem) {
  AttentionProblem p = problem(KvType::q8_0, KvType::q8_0);
  p.page_size = -1;
  Status s = validate(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("page_size"), std::string::npos) << s.message();

  p.page_size = 16;
  ASSERT_TRUE(validate(p).ok());
  const int64_t rows = int64_t{p.n_seqs} * p.kv_capacity * p.n_kv_heads;
  const std::vector<uint8_t> k = random_rows(p.k_type, 128, rows, 4);
  std::vector<float> q(size_t(p.n_seqs) * p.n_q_tokens * p.n_q_heads * 128, 0.5f);
  std::vector<float> out(q.size());
  Scattered ks = scatter(k, problem(p.k_type, p.v_type), p.k_type, 128, 16, 0, 5);
  AttentionTensors t;
  t.q = q.data();
  t.out = out.data();
  t.k = ks.kv;
  t.v = ks.kv;

  AttentionTensors no_table = t;
  no_table.v.page_table = nullptr;
  s = validate(p, no_table);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tensors.v.page_table=NULL"), std::string::npos) << s.message();

  AttentionTensors short_table = t;
  short_table.k.pages_per_seq = 6;  // 6 x 16 < 100
  s = validate(p, short_table);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("pages_per_seq"), std::string::npos) << s.message();

  AttentionProblem contiguous = p;
  contiguous.page_size = 0;
  s = validate(contiguous, t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("problem.page_size=0"), std::string::npos) << s.message();

  // A page number outside the tensor: the reference says which entry.
  ks.table[3] = 1000;
  s = reference_attention(p, t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("page_table[3]=1000"), std::string::npos) << s.message();
}

double nmse(const std::vector<float>& got, const std::vector<double>& ref) {
  double e = 0.0, n = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    e += (got[i] - ref[i]) * (got[i] - ref[i]);
    n += ref[i] * ref[i];
  }
  return e / n;
}

// Every CPU kernel of this machine reads shuffled pages (pages of a multiple of 16 keys in place:
// 16, 32 and 48 by a page-table lookup per 16 keys, 64 as whole chunks; pages of 1, 7 and 100
// keys gathered into whole chunks) as accurately as the contiguous cache (against the float64
// reference); decode and prefill-sized calls, splits included; an entry outside the pool is
// refused with its place named.
TEST(PagedCpuKernels, ShuffledPagesGiveTheContiguousResult) {
  std::vector<std::string> kernels;
  for (const KernelCandidate& k : kernel_candidates())
    if (k.backend == Backend::cpu && k.name != "cpu.reference") kernels.push_back(k.name);
  ASSERT_FALSE(kernels.empty());
  int served = 0;
  for (const auto& [kt, vt] :
       {std::pair{KvType::f16, KvType::f16}, std::pair{KvType::q8_0, KvType::q8_0},
        std::pair{KvType::q4_0, KvType::turbo3}}) {
    for (int32_t n_q : {1, 2, 20}) {
      AttentionProblem p = problem(kt, vt);
      p.n_q_tokens = n_q;
      p.causal = n_q > 1;
      const int64_t rows = int64_t{p.n_seqs} * p.kv_capacity * p.n_kv_heads;
      const std::vector<uint8_t> k = random_rows(kt, 128, rows, 31);
      const std::vector<uint8_t> v = random_rows(vt, 128, rows, 32);
      std::vector<float> q(size_t(p.n_seqs) * n_q * p.n_q_heads * 128);
      std::mt19937_64 rng(33);
      std::normal_distribution<float> g(0.0f, 1.0f);
      for (float& x : q) x = g(rng);
      const std::vector<int64_t> lens = {100, 61};
      std::vector<float> want(q.size()), got(q.size());
      AttentionTensors t;
      t.q = q.data();
      t.k = kv_tensor_contiguous(k.data(), kt, 128, p.n_kv_heads, p.kv_capacity);
      t.v = kv_tensor_contiguous(v.data(), vt, 128, p.n_kv_heads, p.kv_capacity);
      t.kv_lens = lens.data();
      for (const std::string& name : kernels) {
        PlanOptions o;
        o.select.force = name;
        o.n_threads = 2;
        const Expected<Plan> contiguous = plan(p, o);
        if (!contiguous.ok()) continue;  // not for this shape or machine
        t.out = want.data();
        std::vector<double> ref(q.size());
        ASSERT_TRUE(reference_attention(p, t, ref.data()).ok());
        std::vector<uint8_t> ws(contiguous->workspace_bytes);
        ASSERT_TRUE(run(*contiguous, t, ws.data()).ok());
        for (int32_t page_size : {1, 7, 16, 32, 48, 64, 100}) {
          SCOPED_TRACE(name + " " + describe(p) + " page_size=" + std::to_string(page_size));
          AttentionProblem pp = p;
          pp.page_size = page_size;
          const Expected<Plan> paged = plan(pp, o);
          ASSERT_TRUE(paged.ok()) << paged.error().message;
          const Scattered ks = scatter(k, p, kt, 128, page_size, 3, 40 + page_size);
          const Scattered vs = scatter(v, p, vt, 128, page_size, 1, 50 + page_size);
          AttentionTensors tp = t;
          tp.k = ks.kv;
          tp.v = vs.kv;
          tp.out = got.data();
          std::fill(got.begin(), got.end(), std::nanf(""));
          ws.assign(paged->workspace_bytes, 0);
          const Status st = run(*paged, tp, ws.data());
          ASSERT_TRUE(st.ok()) << st.message();
          // Against the float64 reference: as accurate as the contiguous call (a kernel may take
          // another path for runs shorter than its chunk of keys: VNNI's int8 queries).
          const double e_paged = nmse(got, ref), e_contiguous = nmse(want, ref);
          EXPECT_LE(e_paged, std::max(1e-5, 1.5 * e_contiguous)) << "contiguous " << e_contiguous;
          ++served;

          // A page number outside the pool: refused, the entry named.
          std::vector<int32_t> bad = ks.table;
          bad[1] = static_cast<int32_t>(ks.kv.n_pages);
          tp.k.page_table = bad.data();
          const Status refused = run(*paged, tp, ws.data());
          ASSERT_FALSE(refused.ok());
          EXPECT_NE(refused.message().find("tensors.k.page_table[1]="), std::string::npos)
              << refused.message();
        }
      }
    }
  }
  EXPECT_GT(served, 0);
}

}  // namespace
}  // namespace kvflash
