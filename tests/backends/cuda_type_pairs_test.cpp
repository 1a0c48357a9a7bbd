// Which (K, V) type pairs a build compiles CUDA kernels for (common/type_pairs.hpp), tested on
// the CPU: the default set, all 100 pairs with KVFLASH_CUDA_ALL_PAIRS=ON, the guard of cuda.decode
// that refuses the others with a message naming the option, and (in a CUDA build) that the
// candidate carries that guard.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "backends/cuda/common/type_pairs.hpp"
#include "backends/cuda/prefill/prefill_plan.hpp"
#include "kvflash/registry.hpp"

namespace kvflash::cuda {
namespace {

using ::testing::HasSubstr;

// Written out here, apart from gen_instances.py's DEFAULT_PAIRS, so that a change of the default
// set is a visible decision: every type with itself, q8_0 K with q4_0 and turbo V, q4_0 K with
// turbo V.
std::set<std::pair<KvType, KvType>> default_set() {
  using enum KvType;
  std::set<std::pair<KvType, KvType>> s;
  for (KvType t : kAllKvTypes)
    if (type_on_cuda(t)) s.emplace(t, t);
  for (KvType v : {q4_0, turbo2, turbo3, turbo4}) s.emplace(q8_0, v);
  for (KvType v : {turbo2, turbo3, turbo4}) s.emplace(q4_0, v);
  return s;
}

// A registered candidate (null where this build has none) and one of its guards (null where it
// has no such guard), looked up by name; the guards are called directly, without a device.
const KernelCandidate* candidate(const std::string& name) {
  const auto& all = kernel_candidates();
  const auto c = std::find_if(all.begin(), all.end(),
                              [&](const KernelCandidate& k) { return k.name == name; });
  return c == all.end() ? nullptr : &*c;
}
const Guard* guard(const KernelCandidate& c, const std::string& name) {
  for (const Guard& g : c.guards)
    if (g.name == name) return &g;
  return nullptr;
}

AttentionProblem problem(KvType k, KvType v) {
  AttentionProblem p;
  p.k_type = k;
  p.v_type = v;
  return p;
}

TEST(CudaDecodePairs, TheDefaultSetIsEveryTypeWithItselfAndTheCommonMixedPairs) {
  const std::set<std::pair<KvType, KvType>> want = default_set();
  EXPECT_EQ(want.size(), 17u);
  EXPECT_EQ(std::size(kDefaultPairs), want.size());
  for (KvType k : kAllKvTypes)
    for (KvType v : kAllKvTypes) {
      SCOPED_TRACE(std::string(to_string(k)) + "/" + std::string(to_string(v)));
      EXPECT_EQ(pair_built(k, v, false), want.count({k, v}) == 1);
      EXPECT_EQ(pair_built(k, v, true), type_on_cuda(k) && type_on_cuda(v));
    }
}

// Every KV type of the library has CUDA kernels (the fp8 types since issue 43): a type listed in
// kTypesNotOnCuda would be refused by name, with no instance written for it.
TEST(CudaDecodePairs, EveryTypeIsReadByTheCudaKernels) {
  EXPECT_EQ(cuda_type_count(), static_cast<int>(kAllKvTypes.size()));
  for (KvType t : kAllKvTypes) {
    SCOPED_TRACE(std::string(to_string(t)));
    EXPECT_TRUE(type_on_cuda(t));
    EXPECT_TRUE(pair_built(t, t, false));
  }
}

TEST(CudaDecodePairs, TheGuardAcceptsExactlyThisBuildsPairs) {
  const std::set<std::pair<KvType, KvType>> want = default_set();
  int accepted = 0;
  for (KvType k : kAllKvTypes)
    for (KvType v : kAllKvTypes) {
      SCOPED_TRACE(std::string(to_string(k)) + "/" + std::string(to_string(v)));
      const std::optional<std::string> why = reject_pair_not_built(problem(k, v));
      EXPECT_EQ(!why.has_value(),
                all_pairs_built() ? type_on_cuda(k) && type_on_cuda(v) : want.count({k, v}) == 1);
      if (why && type_on_cuda(k) && type_on_cuda(v)) {
        EXPECT_THAT(*why, HasSubstr("-DKVFLASH_CUDA_ALL_PAIRS=ON"));
      }
      accepted += !why;
    }
  EXPECT_EQ(accepted, all_pairs_built() ? 100 : 17);
}

TEST(CudaDecodePairs, TheMessageNamesThePairTheDefaultSetAndTheOption) {
  const std::optional<std::string> why = pair_not_built(KvType::q8_0, KvType::f16, false);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why,
            "k_type q8_0 with v_type f16 is not in this build's CUDA instances (the default set: "
            "every type with itself, q8_0 K with q4_0/turbo2/turbo3/turbo4 V, q4_0 K with "
            "turbo2/turbo3/turbo4 V); configure with -DKVFLASH_CUDA_ALL_PAIRS=ON to build all "
            "100 pairs");
  EXPECT_FALSE(pair_not_built(KvType::q8_0, KvType::f16, true).has_value());
  EXPECT_FALSE(pair_not_built(KvType::q8_0, KvType::turbo4, false).has_value());
}

// The guard is registered: cuda.decode carries it under the name "kv_types" (its reason is what
// select_kernel reports for the candidate). Checked without a device: the guard is called directly.
TEST(CudaDecodePairs, TheCudaDecodeCandidateCarriesTheGuard) {
  const KernelCandidate* c = candidate("cuda.decode");
  if (c == nullptr) GTEST_SKIP() << "this build has no CUDA kernels";
  const Guard* g = guard(*c, "kv_types");
  ASSERT_NE(g, nullptr);
  for (KvType k : kAllKvTypes)
    for (KvType v : kAllKvTypes) {
      SCOPED_TRACE(std::string(to_string(k)) + "/" + std::string(to_string(v)));
      EXPECT_EQ(g->reject(problem(k, v)), reject_pair_not_built(problem(k, v)));
    }
}

// Both CUDA families carry kv_types (prefill compiles the same pairs), and ragged query lengths
// go to cuda.prefill at any longest count: cuda.decode's guard "ragged_q" refuses them, and
// cuda.prefill's "prefill_q_tokens" lets a ragged problem of at most 8 queries per sequence
// through. Guards called directly, without a device.
TEST(CudaDecodePairs, RaggedCallsAreCudaPrefillsAndBothFamiliesCarryThePairGuard) {
  const KernelCandidate *dec = candidate("cuda.decode"), *pre = candidate("cuda.prefill");
  if (dec == nullptr) GTEST_SKIP() << "this build has no CUDA kernels";
  ASSERT_NE(pre, nullptr);
  for (const KernelCandidate* c : {dec, pre}) {
    const Guard* g = guard(*c, "kv_types");
    ASSERT_NE(g, nullptr) << c->name;
    EXPECT_EQ(g->reject(problem(KvType::q8_0, KvType::f16)),
              reject_pair_not_built(problem(KvType::q8_0, KvType::f16)));
  }
  AttentionProblem ragged = problem(KvType::f16, KvType::f16);
  ragged.n_q_tokens = 4;
  ragged.ragged_q = true;
  const Guard* dec_ragged = guard(*dec, "ragged_q");
  ASSERT_NE(dec_ragged, nullptr);
  const std::optional<std::string> why = dec_ragged->reject(ragged);
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(*why, HasSubstr("cuda.prefill"));
  const Guard* pre_q = guard(*pre, "prefill_q_tokens");
  ASSERT_NE(pre_q, nullptr);
  EXPECT_FALSE(pre_q->reject(ragged).has_value());
  ragged.ragged_q = false;
  EXPECT_TRUE(pre_q->reject(ragged).has_value());
  EXPECT_FALSE(dec_ragged->reject(ragged).has_value());
}

// cuda.prefill reads fp8 rows 32 dims at a time, the dims past a row zero: its head_dim guard
// passes fp8 at every head dim of the supported space, which computes as q8_0's does (head dim
// 80 as 96).
TEST(CudaDecodePairs, PrefillServesFp8AtEveryHeadDim) {
  const KernelCandidate* pre = candidate("cuda.prefill");
  if (pre == nullptr) GTEST_SKIP() << "this build has no CUDA kernels";
  const Guard* g = guard(*pre, "head_dim");
  ASSERT_NE(g, nullptr);
  for (const HeadDims d : SupportedSpace::head_dims) {
    AttentionProblem p = problem(KvType::fp8_e4m3, KvType::fp8_e5m2);
    p.head_dim = d;
    SCOPED_TRACE(describe(p));
    EXPECT_FALSE(g->reject(p).has_value());
    AttentionProblem q = p;
    q.k_type = q.v_type = KvType::q8_0;
    EXPECT_EQ(prefill::prefill_layout(p).dkc, prefill::prefill_layout(q).dkc);
    EXPECT_EQ(prefill::prefill_layout(p).dvc, prefill::prefill_layout(q).dvc);
  }
}

}  // namespace
}  // namespace kvflash::cuda
