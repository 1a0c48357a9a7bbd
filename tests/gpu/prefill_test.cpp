// The CUDA prefill kernels (cuda.prefill: from 5 or 9 query tokens, common/routing.hpp) against
// the float64 reference on device buffers: every default K/V pair at head dim 128, every head dim
// with f16 and q8_0/turbo3 (512 and 576/512: every default pair, a batch, a split), fresh prompts
// of 5 or 9 (the smallest prefill of the pair) ... 2048 tokens and chunks of 512 and 2048 queries
// onto 8K and 32K caches, 5 or 9 and 64 queries onto 20K keys (split many ways and merged), causal
// and not, each feature alone and all together, paged caches with shuffled tables (pages of 16 and
// 64 tokens), batches of sequences of different device lengths (40 of them: a grid that is not
// split); then the guards: a device length outside the capacity or a page-table entry outside the
// pool gives that sequence NaN rows and leaves the others exact; which kernel plan() selects on
// each side of the crossover, and when it splits the keys. Outputs are poisoned and guarded
// (gpu_test_util.hpp) for every run; the references run on every host thread (parallel_reference).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "backends/cuda/common/routing.hpp"
#include "backends/cuda/common/type_pairs.hpp"
#include "gpu_test_util.hpp"
#include "kvflash/formats.hpp"

namespace kvflash::gputest {
namespace {

constexpr double kNmseBound = 1e-5;
constexpr const char* kPrefill = "cuda.prefill";
constexpr const char* kDecode = "cuda.decode";

// Skips a test where this build registers no candidate of that name (a build before the kernel
// family landed); a registered kernel that refuses a problem of its contract fails instead.
#define KVFLASH_REQUIRE_KERNEL(name)                                        \
  do {                                                                      \
    if (!::kvflash::gputest::kernel_registered(name))                       \
      GTEST_SKIP() << "this build registers no candidate named " << (name); \
  } while (0)

bool kernel_registered(const std::string& name) {
  const std::vector<KernelCandidate>& all = kernel_candidates();
  return std::any_of(all.begin(), all.end(), [&](const KernelCandidate& k) {
    return k.name == name && k.backend == Backend::cuda;
  });
}

struct PrefillCase {
  int32_t n_q_tokens = 100;
  std::vector<int64_t> lens = {1000};  // device kv length of each sequence; capacity: the largest
  KvType k_type = KvType::f16;
  KvType v_type = KvType::f16;
  HeadDims head_dim = {128, 128};
  int32_t n_q_heads = 8;
  int32_t n_kv_heads = 2;
  bool causal = true;
  bool mask = false;
  int64_t window = 0;
  float softcap = 0.0f;
  bool sinks = false;
  bool alibi = false;
  int32_t page_size = 0;  // > 0: a paged pool with a shuffled table
};

std::string case_name(const PrefillCase& c) {
  std::string s =
      fmt::format("q{}_h{}x{}_d{}", c.n_q_tokens, c.n_q_heads, c.n_kv_heads, c.head_dim.k);
  if (c.head_dim.v != c.head_dim.k) s += fmt::format("x{}", c.head_dim.v);
  s += c.k_type == c.v_type ? fmt::format("_{}", to_string(c.k_type))
                            : fmt::format("_{}_{}", to_string(c.k_type), to_string(c.v_type));
  for (size_t i = 0; i < c.lens.size(); ++i) s += fmt::format("{}{}", i ? "_" : "_kv", c.lens[i]);
  if (!c.causal) s += "_noncausal";
  if (c.mask) s += "_mask";
  if (c.window > 0) s += fmt::format("_win{}", c.window);
  if (c.softcap > 0.0f) s += fmt::format("_cap{:g}", c.softcap);
  if (c.sinks) s += "_sinks";
  if (c.alibi) s += "_alibi";
  if (c.page_size > 0) s += fmt::format("_paged{}", c.page_size);
  return s;
}

void PrintTo(const PrefillCase& c, std::ostream* os) {
  *os << case_name(c);
}

// The case's lengths, shortened in quick mode (compute-sanitizer), never below the queries.
std::vector<int64_t> lengths(const PrefillCase& c) {
  std::vector<int64_t> lens = c.lens;
  for (int64_t& l : lens) l = std::max<int64_t>(quick_len(l), std::min<int64_t>(l, c.n_q_tokens));
  return lens;
}

AttentionProblem to_problem(const PrefillCase& c, const std::vector<int64_t>& lens) {
  AttentionProblem p;
  p.n_seqs = static_cast<int32_t>(lens.size());
  p.n_q_tokens = c.n_q_tokens;
  p.n_q_heads = c.n_q_heads;
  p.n_kv_heads = c.n_kv_heads;
  p.head_dim = c.head_dim;
  p.k_type = c.k_type;
  p.v_type = c.v_type;
  if (is_fp8(c.k_type)) p.k_scale = 0.75f;  // (fp8 rows hold K / k_scale, V / v_scale)
  if (is_fp8(c.v_type)) p.v_scale = 2.5f;
  p.kv_capacity = *std::max_element(lens.begin(), lens.end());
  p.causal = c.causal;
  p.has_mask = c.mask;
  p.window = c.window;
  p.softcap = c.softcap;
  p.has_sinks = c.sinks;
  p.has_alibi = c.alibi;
  return p;
}

// One run of cuda.prefill over the case's inputs, contiguous or paged, checked against the
// reference: the sentinels intact, no NaN or inf, empty rows zero, NMSE and lse within bounds.
void check_case(const PrefillCase& c) {
  KVFLASH_REQUIRE_GPU();
  KVFLASH_REQUIRE_KERNEL(kPrefill);
  KVFLASH_REQUIRE_PAIR(c.k_type, c.v_type);
  const std::vector<int64_t> lens = lengths(c);
  const AttentionProblem p = to_problem(c, lens);  // contiguous: the reference's layout
  AttentionProblem run_p = p;
  run_p.page_size = c.page_size;
  Plan pl;
  KVFLASH_ASSIGN_OR_FAIL(pl, plan_cuda(run_p));
  ASSERT_EQ(pl.kernel->name, kPrefill) << describe(run_p);

  const HostInputs in = make_inputs(p, lens, std::hash<std::string>{}(case_name(c)));
  Reference ref;
  KVFLASH_ASSIGN_OR_FAIL(ref, parallel_reference(in));
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  void* const s = stream.handle();
  DeviceInputs dev;
  KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, s));
  AttentionTensors t = dev.tensors;
  PagedKv paged;
  if (c.page_size > 0) {
    KVFLASH_ASSIGN_OR_FAIL(paged, stage_paged(in, c.page_size, 3, s));
    t.k = paged.k_tensor;
    t.v = paged.v_tensor;
  }
  DeviceOutputs o;
  KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(pl, s));

  KVFLASH_ASSERT_OK(run(pl, with_outputs(t, o), o.workspace.data(), s));
  HostOutputs got;
  KVFLASH_ASSIGN_OR_FAIL(got, read_outputs(o, stream));
  KVFLASH_ASSERT_OK(gpu::last_error());
  std::string guards;
  KVFLASH_ASSIGN_OR_FAIL(guards, o.check_guards(stream));
  EXPECT_EQ(guards, "");

  const Comparison cmp = compare(p, got, ref);
  EXPECT_EQ(cmp.non_finite, 0) << cmp.summary();
  EXPECT_EQ(cmp.empty_rows_not_zero, 0) << cmp.summary();
  EXPECT_LE(cmp.nmse, kNmseBound) << cmp.summary();
  EXPECT_EQ(cmp.lse_bad, 0) << cmp.summary();
}

class CudaPrefill : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(CudaPrefill, MatchesTheFloat64Reference) {
  check_case(GetParam());
}

std::string param_name(const ::testing::TestParamInfo<PrefillCase>& info) {
  return case_name(info.param);
}

// Every pair a default build compiles (common/type_pairs.hpp: decode and prefill compile the same
// ones), 100 queries onto a 1000-token cache, GQA 4.
std::vector<PrefillCase> pair_cases() {
  std::vector<PrefillCase> out;
  for (const cuda::KvTypePair& pair : cuda::kDefaultPairs) {
    PrefillCase c;
    c.k_type = pair.k;
    c.v_type = pair.v;
    out.push_back(c);
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Pairs, CudaPrefill, ::testing::ValuesIn(pair_cases()), param_name);

// Every head dim the contract serves, with float rows and with q8_0 K and rotated V (int8 Q.K^T,
// inverse rotation of the output); turbo rows of 80 or 96 values are padded to one 128-value
// group. 512 and 576/512 run the wide kernel (both warpgroups on the same rows, each half of V's
// dims): also every other default pair, f32, a batch and a split (2 KV heads of 40 queries over
// 5000 keys: a grid smaller than the device, merged).
std::vector<PrefillCase> head_dim_cases() {
  std::vector<PrefillCase> out;
  for (const HeadDims d : SupportedSpace::head_dims)
    for (const auto& [k, v] :
         {std::pair{KvType::f16, KvType::f16}, std::pair{KvType::q8_0, KvType::turbo3},
          std::pair{KvType::fp8_e5m2, KvType::fp8_e5m2}}) {
      PrefillCase c;
      c.head_dim = d;
      c.k_type = k;
      c.v_type = v;
      c.lens = {700};
      out.push_back(c);
    }
  for (const HeadDims d : {HeadDims{512, 512}, HeadDims{576, 512}}) {
    for (const cuda::KvTypePair& pair : cuda::kDefaultPairs) {
      if (pair.k == KvType::f16 || pair.k == KvType::fp8_e5m2 ||
          (pair.k == KvType::q8_0 && pair.v == KvType::turbo3))
        continue;
      PrefillCase c;
      c.head_dim = d;
      c.k_type = pair.k;
      c.v_type = pair.v;
      c.lens = {300};
      out.push_back(c);
    }
    PrefillCase batch;
    batch.head_dim = d;
    batch.k_type = batch.v_type = KvType::q4_0;
    batch.lens = {1000, 517, 100};
    out.push_back(batch);
    PrefillCase split;
    split.head_dim = d;
    split.k_type = KvType::turbo4;
    split.v_type = KvType::turbo4;
    split.n_q_tokens = 40;
    split.lens = {5000};
    split.sinks = true;
    out.push_back(split);
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(HeadDims, CudaPrefill, ::testing::ValuesIn(head_dim_cases()), param_name);

// Fresh prompts (kv length = queries: the causal triangle) from the smallest prefill of the pair
// (min_prefill_q_tokens: 0 below stands for it), past one and several query tiles; then chunked
// prefill onto deep caches. The 32K case keeps one KV head so that its reference stays a few
// seconds.
std::vector<PrefillCase> query_token_cases() {
  std::vector<PrefillCase> out;
  for (const int32_t n : {0, 32, 33, 48, 100, 257, 2048})
    for (const auto& [k, v] :
         {std::pair{KvType::f16, KvType::f16}, std::pair{KvType::q4_0, KvType::q4_0}}) {
      PrefillCase c;
      c.n_q_tokens = n > 0 ? n : cuda::min_prefill_q_tokens(k, v, 0);
      c.lens = {c.n_q_tokens};
      c.k_type = k;
      c.v_type = v;
      out.push_back(c);
    }
  PrefillCase chunk;
  chunk.n_q_tokens = 512;
  chunk.lens = {8192};
  for (const auto& [k, v] :
       {std::pair{KvType::f16, KvType::f16}, std::pair{KvType::q8_0, KvType::turbo4}}) {
    chunk.k_type = k;
    chunk.v_type = v;
    out.push_back(chunk);
  }
  chunk.n_q_tokens = 2048;
  chunk.lens = {32768};
  chunk.n_q_heads = 4;
  chunk.n_kv_heads = 1;
  chunk.k_type = KvType::q8_0;
  chunk.v_type = KvType::q8_0;
  out.push_back(chunk);
  // Short chunks onto a deep cache: a grid of a few CTAs whose keys split many ways (the merge:
  // turbo V rotated back after it, sinks folded in at the end).
  for (const int32_t n : {0, 64}) {
    PrefillCase s;
    s.n_q_tokens = n > 0 ? n : cuda::min_prefill_q_tokens(KvType::f16, KvType::f16, 0);
    s.lens = {20000};
    s.n_q_heads = 32;
    s.n_kv_heads = 8;
    out.push_back(s);
    s.n_q_tokens = n > 0 ? n : cuda::min_prefill_q_tokens(KvType::q8_0, KvType::turbo3, 0);
    s.k_type = KvType::q8_0;
    s.v_type = KvType::turbo3;
    s.sinks = true;
    out.push_back(s);
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(QueryTokens, CudaPrefill, ::testing::ValuesIn(query_token_cases()),
                         param_name);

// Each feature alone, then all together, causal and not, on a chunk of 100 queries over 1500 keys
// (windows shorter and longer than the chunk); a non-causal window cuts keys before a query only.
std::vector<PrefillCase> feature_cases() {
  const std::vector<std::function<void(PrefillCase&)>> features = {
      [](PrefillCase&) {},
      [](PrefillCase& c) { c.mask = true; },
      [](PrefillCase& c) { c.window = 40; },
      [](PrefillCase& c) { c.window = 256; },
      [](PrefillCase& c) { c.softcap = 5.0f; },
      [](PrefillCase& c) { c.sinks = true; },
      [](PrefillCase& c) { c.alibi = true; },
      [](PrefillCase& c) {
        c.mask = c.sinks = c.alibi = true;
        c.window = 300;
        c.softcap = 5.0f;
      }};
  std::vector<PrefillCase> out;
  for (const bool causal : {true, false})
    for (const auto& set : features)
      for (const auto& [k, v] :
           {std::pair{KvType::f16, KvType::f16}, std::pair{KvType::q8_0, KvType::turbo4}}) {
        PrefillCase c;
        c.lens = {1500};
        c.causal = causal;
        c.k_type = k;
        c.v_type = v;
        set(c);
        out.push_back(c);
      }
  // Non-causal fresh prompt: every query sees every key.
  PrefillCase full;
  full.n_q_tokens = 257;
  full.lens = {257};
  full.causal = false;
  out.push_back(full);
  return out;
}
INSTANTIATE_TEST_SUITE_P(Features, CudaPrefill, ::testing::ValuesIn(feature_cases()), param_name);

// Paged caches (shuffled tables over a pool with spare NaN pages), page sizes smaller and larger
// than the chunk's keys per tile, one sequence and a batch.
std::vector<PrefillCase> paged_cases() {
  std::vector<PrefillCase> out;
  for (const int32_t page : {16, 64})
    for (const auto& [k, v] :
         {std::pair{KvType::f16, KvType::f16}, std::pair{KvType::q4_0, KvType::q4_0},
          std::pair{KvType::q8_0, KvType::turbo3}, std::pair{KvType::fp8_e4m3, KvType::fp8_e4m3}}) {
      PrefillCase c;
      c.page_size = page;
      c.k_type = k;
      c.v_type = v;
      c.lens = {1000, 517};
      out.push_back(c);
    }
  // f16 through the TMA kernel's other box sizes: 32-row boxes, and 64-row boxes in larger pages.
  for (const int32_t page : {32, 128}) {
    PrefillCase c;
    c.page_size = page;
    c.lens = {1000, 517};
    out.push_back(c);
  }
  PrefillCase all;  // every feature through a page table
  all.page_size = 16;
  all.mask = all.sinks = all.alibi = true;
  all.window = 300;
  all.softcap = 5.0f;
  out.push_back(all);
  return out;
}
INSTANTIATE_TEST_SUITE_P(Paged, CudaPrefill, ::testing::ValuesIn(paged_cases()), param_name);

// Batches of 3 sequences whose device lengths differ (each holding at least its queries): one
// full, one in the middle off every tile boundary, one exactly the queries.
std::vector<PrefillCase> batch_cases() {
  std::vector<PrefillCase> out;
  for (const auto& [k, v] :
       {std::pair{KvType::f16, KvType::f16}, std::pair{KvType::q4_0, KvType::turbo4}}) {
    PrefillCase c;
    c.k_type = k;
    c.v_type = v;
    c.lens = {3000, 1237, 100};
    out.push_back(c);
    c.mask = c.sinks = true;
    out.push_back(c);
  }
  PrefillCase nc;
  nc.causal = false;
  nc.lens = {3000, 1237, 100};
  out.push_back(nc);
  // 40 sequences: a grid that fills the device, so the keys are not split (every case above is).
  PrefillCase many;
  many.lens.clear();
  for (int i = 0; i < 40; ++i) many.lens.push_back(100 + 37 * i);
  out.push_back(many);
  many.k_type = KvType::q4_0;
  many.v_type = KvType::turbo4;
  out.push_back(many);
  return out;
}
INSTANTIATE_TEST_SUITE_P(Batches, CudaPrefill, ::testing::ValuesIn(batch_cases()), param_name);

// The pairs only a -DKVFLASH_CUDA_ALL_PAIRS=ON build compiles (scripts/gpu_run.sh builds them):
// each once, at the size of the default pairs' cases.
TEST(CudaPrefillAllPairs, EveryOtherPairMatchesTheReference) {
  KVFLASH_REQUIRE_GPU();
  if (!cuda::all_pairs_built())
    GTEST_SKIP() << "a default-pairs build: the other pairs have no kernels "
                    "(-DKVFLASH_CUDA_ALL_PAIRS=ON builds them)";
  for (const KvType k : cuda::kCudaKvTypes)
    for (const KvType v : cuda::kCudaKvTypes) {
      if (cuda::is_default_pair(k, v)) continue;
      PrefillCase c;
      c.k_type = k;
      c.v_type = v;
      c.lens = {600};
      SCOPED_TRACE(case_name(c));
      check_case(c);
    }
}

// Two sequences; the second gets a device length outside 0 .. kv_capacity (an engine's bug the
// host cannot see without a sync). The kernel must read nothing outside the cache (the bad
// sequence is the last one, so a read past its capacity leaves the buffer: compute-sanitizer
// memcheck runs this test) and give that sequence's out and lse NaN, the first sequence exact.
TEST(CudaPrefillLengths, OutsideTheCapacityGiveNaNRowsAndReadNothingPastTheCache) {
  KVFLASH_REQUIRE_GPU();
  KVFLASH_REQUIRE_KERNEL(kPrefill);
  using enum KvType;
  const std::pair<KvType, KvType> types[] = {{f16, f16}, {q4_0, q4_0}, {q8_0, turbo3}};
  for (const auto& [kt, vt] : types)
    for (const int64_t cap : {int64_t{3000}, int64_t{64}})
      for (const int64_t bad : {int64_t{-1}, cap + 1, int64_t{1} << 40}) {
        SCOPED_TRACE(
            fmt::format("{}/{} capacity {} length {}", to_string(kt), to_string(vt), cap, bad));
        PrefillCase c;
        c.n_q_tokens = 64;
        c.k_type = kt;
        c.v_type = vt;
        const AttentionProblem p = to_problem(c, {cap, cap});
        Plan pl;
        KVFLASH_ASSIGN_OR_FAIL(pl, plan_cuda(p));
        ASSERT_EQ(pl.kernel->name, kPrefill);
        HostInputs in = make_inputs(p, {cap, cap}, 77 + static_cast<uint64_t>(cap));
        Reference ref;
        KVFLASH_ASSIGN_OR_FAIL(ref, parallel_reference(in));  // sequence 0's rows are checked
        in.kv_lens[1] = bad;
        gpu::Stream stream;
        KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
        DeviceInputs dev;
        KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, stream.handle()));
        DeviceOutputs o;
        KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(pl, stream.handle()));
        KVFLASH_ASSERT_OK(
            run(pl, with_outputs(dev.tensors, o), o.workspace.data(), stream.handle()));
        HostOutputs got;
        KVFLASH_ASSIGN_OR_FAIL(got, read_outputs(o, stream));
        KVFLASH_ASSERT_OK(gpu::last_error());
        std::string guards;
        KVFLASH_ASSIGN_OR_FAIL(guards, o.check_guards(stream));
        EXPECT_EQ(guards, "");

        const size_t rows = static_cast<size_t>(p.n_q_tokens) * p.n_q_heads;  // per sequence
        const size_t dv = static_cast<size_t>(p.head_dim.v);
        double err = 0.0, sig = 0.0;
        int64_t non_finite = 0;
        for (size_t i = 0; i < rows * dv; ++i) {
          non_finite += !std::isfinite(got.out[i]);
          const double d = double{got.out[i]} - ref.out[i];
          err += d * d;
          sig += ref.out[i] * ref.out[i];
        }
        EXPECT_EQ(non_finite, 0) << "the sequence of valid length";
        EXPECT_LE(err / sig, kNmseBound) << "the sequence of valid length";
        int64_t not_nan = 0;
        for (size_t i = rows * dv; i < 2 * rows * dv; ++i) not_nan += !std::isnan(got.out[i]);
        for (size_t r = rows; r < 2 * rows; ++r) not_nan += !std::isnan(got.lse[r]);
        EXPECT_EQ(not_nan, 0) << "outputs and lse of the sequence of length " << bad;
      }
}

// A page-table entry of the second sequence outside 0 .. n_pages - 1: nothing outside the pool is
// read (memcheck), that sequence's rows are NaN, the first sequence's are exact.
TEST(CudaPrefillPages, EntriesOutsideThePoolGiveNaNRowsAndReadNothingOutsideIt) {
  KVFLASH_REQUIRE_GPU();
  KVFLASH_REQUIRE_KERNEL(kPrefill);
  for (const KvType type : {KvType::f16, KvType::q4_0})
    for (const int32_t bad : {-1, 1 << 30}) {
      SCOPED_TRACE(fmt::format("{} entry {}", to_string(type), bad));
      PrefillCase c;
      c.k_type = c.v_type = type;
      c.page_size = 16;
      const AttentionProblem p = to_problem(c, {1000, 1000});
      AttentionProblem run_p = p;
      run_p.page_size = c.page_size;
      Plan pl;
      KVFLASH_ASSIGN_OR_FAIL(pl, plan_cuda(run_p));
      ASSERT_EQ(pl.kernel->name, kPrefill);
      const HostInputs in = make_inputs(p, {1000, 1000}, 13);
      Reference ref;
      KVFLASH_ASSIGN_OR_FAIL(ref, parallel_reference(in));
      gpu::Stream stream;
      KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
      void* const s = stream.handle();
      DeviceInputs dev;
      KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, s));
      PagedKv paged;
      KVFLASH_ASSIGN_OR_FAIL(paged, stage_paged(in, c.page_size, 5, s));
      // Sequence 1's page 10 (its tokens 160-175, which its queries see; K and V share the table).
      auto* entry = static_cast<int32_t*>(paged.table.data()) + paged.k_tensor.pages_per_seq + 10;
      KVFLASH_ASSERT_OK(gpu::copy(entry, &bad, sizeof bad, s));
      AttentionTensors t = dev.tensors;
      t.k = paged.k_tensor;
      t.v = paged.v_tensor;
      DeviceOutputs o;
      KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(pl, s));
      KVFLASH_ASSERT_OK(run(pl, with_outputs(t, o), o.workspace.data(), s));
      HostOutputs got;
      KVFLASH_ASSIGN_OR_FAIL(got, read_outputs(o, stream));
      KVFLASH_ASSERT_OK(gpu::last_error());
      std::string guards;
      KVFLASH_ASSIGN_OR_FAIL(guards, o.check_guards(stream));
      EXPECT_EQ(guards, "");

      const size_t rows = static_cast<size_t>(p.n_q_tokens) * p.n_q_heads;
      const size_t dv = static_cast<size_t>(p.head_dim.v);
      // Sequence 0 alone against the reference: a one-sequence view of both.
      AttentionProblem first = p;
      first.n_seqs = 1;
      HostOutputs got0{{got.out.begin(), got.out.begin() + rows * dv},
                       {got.lse.begin(), got.lse.begin() + rows}};
      Reference ref0{{ref.out.begin(), ref.out.begin() + rows * dv},
                     {ref.lse.begin(), ref.lse.begin() + rows}};
      const Comparison cmp = compare(first, got0, ref0);
      EXPECT_EQ(cmp.non_finite, 0) << "sequence 0 (its table intact): " << cmp.summary();
      EXPECT_LE(cmp.nmse, kNmseBound) << "sequence 0 (its table intact): " << cmp.summary();
      EXPECT_EQ(cmp.lse_bad, 0) << "sequence 0 (its table intact): " << cmp.summary();
      int64_t not_nan = 0;
      for (size_t i = rows * dv; i < 2 * rows * dv; ++i) not_nan += !std::isnan(got.out[i]);
      for (size_t r = rows; r < 2 * rows; ++r) not_nan += !std::isnan(got.lse[r]);
      EXPECT_EQ(not_nan, 0) << "outputs and lse of sequence 1";
    }
}

// Selection on the CUDA backend: from min_prefill_q_tokens (common/routing.hpp, the measured
// crossover: 5 for f16 / bf16 pairs, 9 else, 17 in pages not a multiple of 64) cuda.prefill, below
// it cuda.decode, each refusing the other's side by its guard but cuda.decode's 9-32 tokens, which
// it serves when forced; the plan needs device lengths.
TEST(CudaPrefillPlan, SelectionSplitsAtTheMeasuredCrossover) {
  KVFLASH_REQUIRE_GPU();
  if (!kernel_registered(kDecode)) GTEST_SKIP() << "this build registers no CUDA kernels";
  // From here cuda.prefill must exist: a CUDA build without it fails this test, by name.
  ASSERT_TRUE(kernel_registered(kPrefill)) << "no candidate named " << kPrefill;
  PrefillCase c;
  AttentionProblem p = to_problem(c, {4096});
  Plan pl;
  for (const int32_t page : {0, 16, 64})
    for (const auto& [k, v] :
         {std::pair{KvType::f16, KvType::f16}, std::pair{KvType::bf16, KvType::bf16},
          std::pair{KvType::q8_0, KvType::turbo3}}) {
      p.k_type = k;
      p.v_type = v;
      p.page_size = page;
      const int32_t min_q = cuda::min_prefill_q_tokens(k, v, page);
      EXPECT_EQ(min_q, page == 16 ? 17 : k == KvType::q8_0 ? 9 : 5);
      for (const int32_t n :
           {min_q, min_q + 1, cuda::kMaxDecodeQTokens, cuda::kMaxDecodeQTokens + 1}) {
        p.n_q_tokens = n;
        KVFLASH_ASSIGN_OR_FAIL(pl, plan_cuda(p));
        EXPECT_EQ(pl.kernel->name, kPrefill) << describe(p);
      }
      for (const int32_t n : {1, min_q - 1}) {
        p.n_q_tokens = n;
        KVFLASH_ASSIGN_OR_FAIL(pl, plan_cuda(p));
        EXPECT_EQ(pl.kernel->name, kDecode) << describe(p);
        // Forced below its crossover, cuda.prefill refuses by its own guard.
        const Expected<Plan> prefill_below = plan_cuda(p, kPrefill);
        ASSERT_FALSE(prefill_below.ok());
        EXPECT_NE(prefill_below.error().message.find("prefill_q_tokens"), std::string::npos)
            << prefill_below.error().message;
      }
      // cuda.decode serves up to kMaxDecodeQTokens when forced, not one more.
      p.n_q_tokens = cuda::kMaxDecodeQTokens;
      KVFLASH_ASSIGN_OR_FAIL(pl, plan_cuda(p, kDecode));
      EXPECT_EQ(pl.kernel->name, kDecode);
      p.n_q_tokens = cuda::kMaxDecodeQTokens + 1;
      EXPECT_FALSE(plan_cuda(p, kDecode).ok());
    }
  p.k_type = p.v_type = KvType::f16;
  p.page_size = 0;
  p.n_q_tokens = cuda::kMaxDecodeQTokens + 1;

  // Every head dim of the supported space takes cuda.prefill, the widest ones included, with
  // every pair this build compiled.
  for (const HeadDims d : SupportedSpace::head_dims)
    for (const cuda::KvTypePair& pair : cuda::kDefaultPairs) {
      AttentionProblem any = p;
      any.head_dim = d;
      any.k_type = pair.k;
      any.v_type = pair.v;
      any.n_kv_heads = 1;
      KVFLASH_ASSIGN_OR_FAIL(pl, plan_cuda(any));
      EXPECT_EQ(pl.kernel->name, kPrefill) << describe(any);
    }

  // Lengths are read on the device: the plan's validation refuses tensors without them.
  const HostInputs in = make_inputs(p, {4096}, 5);
  KVFLASH_ASSIGN_OR_FAIL(pl, plan_cuda(p));
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  DeviceInputs dev;
  KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, stream.handle()));
  DeviceOutputs o;
  KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(pl, stream.handle()));
  AttentionTensors t = with_outputs(dev.tensors, o);
  KVFLASH_ASSERT_OK(validate(pl, t));
  t.kv_lens = nullptr;
  const Status v = validate(pl, t);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code, ErrorCode::invalid_argument);
  const Status r = run(pl, t, o.workspace.data(), stream.handle());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, v.error().message);
}

// KV splits: a grid smaller than the device splits each CTA's keys and needs the workspace the
// plan sized (a run without it is refused, not crashed); one that fills the device does not.
TEST(CudaPrefillPlan, SplitsTheKeysOnlyOfGridsSmallerThanTheDevice) {
  KVFLASH_REQUIRE_GPU();
  KVFLASH_REQUIRE_KERNEL(kPrefill);
  PrefillCase c;
  c.n_q_tokens = cuda::min_prefill_q_tokens(c.k_type, c.v_type, 0);
  c.n_q_heads = 32;
  c.n_kv_heads = 8;
  AttentionProblem p = to_problem(c, {131072});
  Plan pl;
  KVFLASH_ASSIGN_OR_FAIL(pl, plan_cuda(p));
  ASSERT_EQ(pl.kernel->name, kPrefill);
  EXPECT_GT(pl.n_splits, 1);
  EXPECT_GT(pl.workspace_bytes, 0u);
  const HostInputs in = make_inputs(p, {4096}, 9);
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  DeviceInputs dev;
  KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, stream.handle()));
  DeviceOutputs o;
  KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(pl, stream.handle()));
  const Status r = run(pl, with_outputs(dev.tensors, o), nullptr, stream.handle());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(r.error().message.find("workspace"), std::string::npos) << r.error().message;

  p.n_q_tokens = 8192;
  p.kv_capacity = 8192;
  KVFLASH_ASSIGN_OR_FAIL(pl, plan_cuda(p));
  EXPECT_EQ(pl.n_splits, 1);
  EXPECT_EQ(pl.workspace_bytes, 0u);
}

// The helper the tests above rest on (no GPU needed): the parallel reference is the reference,
// bit for bit, with query chunks on causal sequences (features, a batch, a sequence shorter than
// its queries) and whole sequences otherwise.
TEST(GpuTestUtil, ParallelReferenceIsTheReferenceBitForBit) {
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    PrefillCase c;
    c.n_q_tokens = 150;  // three chunks of 64, the last partial
    c.causal = causal;
    c.mask = c.sinks = c.alibi = true;
    c.window = 90;
    c.softcap = 5.0f;
    c.k_type = KvType::q8_0;
    c.v_type = KvType::turbo3;
    const std::vector<int64_t> lens = {400, 151, 60};
    const HostInputs in = make_inputs(to_problem(c, lens), lens, 9);
    Reference whole, parts;
    KVFLASH_ASSIGN_OR_FAIL(whole, reference(in));
    KVFLASH_ASSIGN_OR_FAIL(parts, parallel_reference(in));
    ASSERT_EQ(whole.out.size(), parts.out.size());
    EXPECT_EQ(std::memcmp(whole.out.data(), parts.out.data(), whole.out.size() * sizeof(double)),
              0);
    ASSERT_EQ(whole.lse.size(), parts.lse.size());
    EXPECT_EQ(std::memcmp(whole.lse.data(), parts.lse.data(), whole.lse.size() * sizeof(float)), 0);
  }
  // A length outside the capacity is the reference's error, as for the whole problem.
  PrefillCase c;
  HostInputs in = make_inputs(to_problem(c, {1000}), {1000}, 9);
  in.kv_lens[0] = 1001;
  EXPECT_FALSE(parallel_reference(in).ok());
}

}  // namespace
}  // namespace kvflash::gputest
