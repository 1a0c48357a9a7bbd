#include "kvflash/registry.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <vector>

#include "kvflash/device.hpp"

namespace kvflash {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The supported space at its boundaries: every point inside selects a CPU kernel.
TEST(RegistrySweep, EveryPointInsideTheSpaceSelectsAKernel) {
  const int32_t q_tokens[] = {1, 8, 9, 512};
  const int64_t kv_lens[] = {1, 63, 64, 2048, 2049, 4864, 262144, 262145, 1048576, 4194304};
  int64_t points = 0;
  std::set<std::string> chosen;
  for (HeadDims hd : SupportedSpace::head_dims)
    for (KvType kt : kAllKvTypes)
      for (KvType vt : kAllKvTypes)
        for (int32_t nq : q_tokens)
          for (int64_t kv : kv_lens) {
            AttentionProblem p;
            p.head_dim = hd;
            p.k_type = kt;
            p.v_type = vt;
            p.n_q_tokens = nq;
            p.kv_capacity = kv;
            auto k = select_kernel(p, {.backend = Backend::cpu, .read_environment = false});
            ASSERT_TRUE(k.ok()) << describe(p) << ": " << k.error().message;
            chosen.insert((*k)->name);
            ++points;
          }
  EXPECT_EQ(points, int64_t{9} * std::ssize(kAllKvTypes) * std::ssize(kAllKvTypes) * 4 * 10);
  // Decode takes 1 and 8 query tokens, prefill 9 and 512.
  EXPECT_GE(chosen.size(), 2u);
}

// Ragged query counts (problem.ragged_q) at the same boundaries: every point selects a CPU kernel
// that serves it (none of them refuses ragged batches), decode and prefill sizes alike.
TEST(RegistrySweep, EveryRaggedPointInsideTheSpaceSelectsAKernel) {
  int64_t points = 0;
  for (HeadDims hd : SupportedSpace::head_dims)
    for (KvType kt : kAllKvTypes)
      for (int32_t nq : {1, 8, 9, 512, SupportedSpace::max_q_tokens})
        for (int64_t kv : {int64_t{1}, int64_t{2049}, int64_t{1048576}, SupportedSpace::max_kv_len})
          for (bool features : {false, true}) {
            AttentionProblem p;
            p.n_seqs = 16;
            p.ragged_q = true;
            p.head_dim = hd;
            p.k_type = kt;
            p.v_type = kAllKvTypes[(static_cast<size_t>(kt) + 3) % std::size(kAllKvTypes)];
            p.n_q_tokens = nq;
            p.kv_capacity = kv;
            p.has_mask = p.has_sinks = p.has_alibi = features;
            p.window = features ? 256 : 0;
            p.softcap = features ? 30.0f : 0.0f;
            auto k = select_kernel(p, {.backend = Backend::cpu, .read_environment = false});
            ASSERT_TRUE(k.ok()) << describe(p) << ": " << k.error().message;
            ++points;
          }
  EXPECT_EQ(points, int64_t{9} * std::ssize(kAllKvTypes) * 5 * 4 * 2);
}

TEST(RegistrySweep, FeaturesOnSelectAKernel) {
  AttentionProblem p;
  p.kv_capacity = 2049;
  p.has_mask = p.has_sinks = p.has_alibi = true;
  p.window = 256;
  p.softcap = 30.0f;
  for (int32_t nq : {1, 8, 9, 512}) {
    p.n_q_tokens = nq;
    EXPECT_TRUE(select_kernel(p, {.backend = Backend::cpu, .read_environment = false}).ok());
  }
}

struct Outside {
  const char* what;
  void (*mutate)(AttentionProblem&);
  const char* field;
};

TEST(RegistrySweep, EveryPointOutsideGetsAnErrorNamingTheField) {
  const Outside cases[] = {
      {"q tokens 0", [](AttentionProblem& p) { p.n_q_tokens = 0; }, "n_q_tokens"},
      {"q tokens max+1",
       [](AttentionProblem& p) { p.n_q_tokens = SupportedSpace::max_q_tokens + 1; }, "n_q_tokens"},
      {"kv 0", [](AttentionProblem& p) { p.kv_capacity = 0; }, "kv_capacity"},
      {"kv max+1", [](AttentionProblem& p) { p.kv_capacity = SupportedSpace::max_kv_len + 1; },
       "kv_capacity"},
      {"dim 100",
       [](AttentionProblem& p) {
         p.head_dim = {100, 100};
       },
       "head_dim"},
      {"dim 576/576",
       [](AttentionProblem& p) {
         p.head_dim = {576, 576};
       },
       "head_dim"},
      {"dim 0",
       [](AttentionProblem& p) {
         p.head_dim = {0, 0};
       },
       "head_dim"},
      {"type", [](AttentionProblem& p) { p.k_type = static_cast<KvType>(200); }, "k_type"},
      {"gqa 32/7", [](AttentionProblem& p) { p.n_kv_heads = 7; }, "n_kv_heads"},
      {"heads 0", [](AttentionProblem& p) { p.n_q_heads = 0; }, "n_q_heads"},
      {"seqs max+1", [](AttentionProblem& p) { p.n_seqs = SupportedSpace::max_seqs + 1; },
       "n_seqs"},
  };
  for (const Outside& c : cases) {
    AttentionProblem p;
    p.kv_capacity = 64;
    c.mutate(p);
    auto k = select_kernel(p, {.read_environment = false});
    ASSERT_FALSE(k.ok()) << c.what;
    EXPECT_EQ(k.error().code, ErrorCode::invalid_argument) << c.what;
    EXPECT_THAT(k.error().message, HasSubstr(c.field)) << c.what;
  }
}

AttentionProblem small() {
  AttentionProblem p;
  p.kv_capacity = 128;
  return p;
}

TEST(Registry, CandidatesAreSortedAndNamedByBackend) {
  const auto& all = kernel_candidates();
  ASSERT_FALSE(all.empty());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_THAT(all[i].name, StartsWith(std::string(to_string(all[i].backend)) + "."));
    if (i > 0) {
      EXPECT_GE(all[i - 1].priority, all[i].priority);
    }
  }
}

TEST(Registry, ForcingByNameSelectsThatKernel) {
  auto k = select_kernel(small(), {.force = "cpu.prefill.portable", .read_environment = false});
  ASSERT_TRUE(k.ok()) << k.error().message;
  EXPECT_EQ((*k)->name, "cpu.prefill.portable");
  // The opt-in reference is reachable only by force.
  auto r = select_kernel(small(), {.force = "cpu.reference", .read_environment = false});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->name, "cpu.reference");
  auto d = select_kernel(small(), {.read_environment = false});
  ASSERT_TRUE(d.ok());
  EXPECT_NE((*d)->name, "cpu.reference");
}

TEST(Registry, ForcedKernelWhoseGuardRejectsFailsWithTheGuard) {
  AttentionProblem p = small();
  p.n_q_tokens = 9;
  auto k = select_kernel(p, {.force = "cpu.decode.portable", .read_environment = false});
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().code, ErrorCode::unsupported);
  EXPECT_THAT(k.error().message, HasSubstr("decode_q_tokens"));
  EXPECT_THAT(k.error().message, HasSubstr("n_q_tokens=9"));
}

TEST(Registry, UnknownForcedNameListsTheCandidates) {
  auto k = select_kernel(small(), {.force = "no.such.kernel", .read_environment = false});
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(k.error().message, HasSubstr("no.such.kernel"));
  EXPECT_THAT(k.error().message, HasSubstr("cpu.decode.portable"));
}

TEST(Registry, ExcludingEverythingListsEveryCandidateWithItsReason) {
  SelectOptions opt{.read_environment = false};
  for (const KernelCandidate& c : kernel_candidates())
    if (c.backend == Backend::cpu && !c.opt_in_only) opt.exclude.push_back(c.name);
  opt.backend = Backend::cpu;
  auto k = select_kernel(small(), opt);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().code, ErrorCode::unsupported);
  for (const KernelCandidate& c : kernel_candidates())
    if (c.backend == Backend::cpu) {
      EXPECT_THAT(k.error().message, HasSubstr(c.name));
    }
  EXPECT_THAT(k.error().message, HasSubstr("excluded by name"));
  EXPECT_THAT(k.error().message, HasSubstr("opt-in only"));
}

TEST(Registry, ExcludingTheDecodeKernelsFallsToPrefillByPriorityNotSilently) {
  SelectOptions opt{.read_environment = false};
  for (const KernelCandidate& c : kernel_candidates())
    if (c.name.find("decode") != std::string::npos) opt.exclude.push_back(c.name);
  auto k = select_kernel(small(), opt);
  ASSERT_TRUE(k.ok());
  EXPECT_THAT((*k)->name, HasSubstr("prefill"));
}

TEST(Registry, BackendWithoutKernelsSaysSo) {
  bool has_cuda = false;
  for (const KernelCandidate& c : kernel_candidates()) has_cuda |= c.backend == Backend::cuda;
  if (has_cuda) GTEST_SKIP() << "this build has CUDA kernels";
  auto k = select_kernel(small(), {.backend = Backend::cuda, .read_environment = false});
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(k.error().message, HasSubstr("no cuda kernels"));
}

TEST(Registry, CudaKernelsWithoutADeviceSayWhy) {
  bool has_cuda = false;
  for (const KernelCandidate& c : kernel_candidates()) has_cuda |= c.backend == Backend::cuda;
  if (!has_cuda) GTEST_SKIP() << "this build has no CUDA kernels";
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto k = select_kernel(small(), {.backend = Backend::cuda, .read_environment = false});
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(k.error().message, HasSubstr("cuda.decode"));
  EXPECT_THAT(k.error().message, HasSubstr("no CUDA device is visible"));
  // Without a backend named, the CPU serves the same problem.
  auto any = select_kernel(small(), {.read_environment = false});
  ASSERT_TRUE(any.ok());
  EXPECT_EQ((*any)->backend, Backend::cpu);
}

class RegistryEnv : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("KVFLASH_FORCE_KERNEL");
    unsetenv("KVFLASH_EXCLUDE_KERNELS");
    unsetenv("KVFLASH_LOG_DISPATCH");
  }
};

TEST_F(RegistryEnv, ForceAndExcludeFromTheEnvironment) {
  setenv("KVFLASH_FORCE_KERNEL", "cpu.reference", 1);
  auto k = select_kernel(small());
  ASSERT_TRUE(k.ok());
  EXPECT_EQ((*k)->name, "cpu.reference");
  // The API's force wins over the environment's.
  auto a = select_kernel(small(), {.force = "cpu.prefill.portable"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->name, "cpu.prefill.portable");
  unsetenv("KVFLASH_FORCE_KERNEL");

  auto best = select_kernel(small());
  ASSERT_TRUE(best.ok());
  setenv("KVFLASH_EXCLUDE_KERNELS", (" " + (*best)->name + " , other").c_str(), 1);
  auto next = select_kernel(small());
  ASSERT_TRUE(next.ok());
  EXPECT_NE((*next)->name, (*best)->name);
}

TEST_F(RegistryEnv, LogDispatchPrintsEachDecision) {
  setenv("KVFLASH_LOG_DISPATCH", "1", 1);
  ::testing::internal::CaptureStderr();
  auto k = select_kernel(small());
  AttentionProblem bad = small();
  bad.head_dim = {100, 100};
  auto e = select_kernel(bad);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(k.ok());
  EXPECT_THAT(err, HasSubstr("kvflash dispatch: seqs=1 q=1 heads=32/8 d=128/128"));
  EXPECT_THAT(err, HasSubstr("-> " + (*k)->name));
  EXPECT_THAT(err, HasSubstr("-> error: head_dim"));
}

TEST(Registry, PlanSizesTheWorkspaceForTheCapacity) {
  AttentionProblem p = small();
  auto a = plan(p, {.select = {.read_environment = false}, .n_threads = 2});
  p.kv_capacity = 1 << 20;
  p.n_kv_heads = 1;
  auto b = plan(p, {.select = {.read_environment = false}, .n_threads = 2});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(a->workspace_bytes, 0u);
  EXPECT_GE(b->n_splits, 1);
  EXPECT_EQ(run(Plan{}, AttentionTensors{}, nullptr).error().code, ErrorCode::invalid_argument);
}

// run() refuses exactly what validate(plan, tensors) refuses, with the same message, and
// validate(plan, tensors) includes validate(problem, tensors).
TEST(Registry, RunRefusesWhatValidateOfThePlanRefuses) {
  AttentionProblem p;
  p.n_q_heads = 4;
  p.n_kv_heads = 2;
  p.head_dim = {64, 64};
  p.kv_capacity = 16;
  PlanOptions opt;
  opt.select.backend = Backend::cpu;
  opt.select.read_environment = false;
  const Expected<Plan> pl = plan(p, opt);
  ASSERT_TRUE(pl.ok()) << pl.error().message;
  AttentionTensors t;  // q, k, v and out all null
  const Status v = validate(*pl, t);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(v.error().message, validate(p, t).error().message);
  std::vector<uint8_t> ws(pl->workspace_bytes + 64);
  const Status r = run(*pl, t, ws.data());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, v.error().message);
  EXPECT_FALSE(validate(Plan{}, t).ok()) << "a plan without a kernel";
}

}  // namespace
}  // namespace kvflash
