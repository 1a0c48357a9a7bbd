#include "kvflash/problem.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

namespace kvflash {
namespace {

using ::testing::HasSubstr;

AttentionProblem base() {
  AttentionProblem p;
  p.kv_capacity = 4096;
  return p;
}

TEST(Problem, DefaultsAreValid) {
  EXPECT_TRUE(validate(base()).ok());
}

TEST(Problem, EveryHeadDimPairOfTheSpaceIsValid) {
  for (HeadDims hd : SupportedSpace::head_dims) {
    AttentionProblem p = base();
    p.head_dim = hd;
    EXPECT_TRUE(validate(p).ok()) << hd.k << "/" << hd.v;
  }
}

// Each rejection names the field, its value and what is allowed.
struct Rejection {
  const char* what;
  void (*mutate)(AttentionProblem&);
  const char* field;
  const char* value;
  const char* allowed;
};

TEST(Problem, RejectionsNameFieldValueAndAllowed) {
  const Rejection cases[] = {
      {"head dim",
       [](AttentionProblem& p) {
         p.head_dim = {100, 100};
       },
       "head_dim", "100/100", "576/512"},
      {"mixed dims",
       [](AttentionProblem& p) {
         p.head_dim = {128, 64};
       },
       "head_dim", "128/64", "192/128"},
      {"gqa", [](AttentionProblem& p) { p.n_kv_heads = 5; }, "n_kv_heads", "5", "divisor"},
      {"kv > q heads", [](AttentionProblem& p) { p.n_kv_heads = 64; }, "n_kv_heads", "64",
       "divisor"},
      {"zero tokens", [](AttentionProblem& p) { p.n_q_tokens = 0; }, "n_q_tokens", "0", "1 .."},
      {"zero seqs", [](AttentionProblem& p) { p.n_seqs = 0; }, "n_seqs", "0", "1 .."},
      {"capacity", [](AttentionProblem& p) { p.kv_capacity = 0; }, "kv_capacity", "0", "1 .."},
      {"capacity max", [](AttentionProblem& p) { p.kv_capacity = SupportedSpace::max_kv_len + 1; },
       "kv_capacity", "4294967297", "4294967296"},
      {"k type", [](AttentionProblem& p) { p.k_type = static_cast<KvType>(42); }, "k_type", "42",
       "turbo4"},
      {"v type", [](AttentionProblem& p) { p.v_type = static_cast<KvType>(19); }, "v_type", "19",
       "q4_0"},
      {"scale", [](AttentionProblem& p) { p.scale = -1.0f; }, "scale", "-1", "positive"},
      {"window", [](AttentionProblem& p) { p.window = -3; }, "window", "-3", "positive"},
      {"softcap", [](AttentionProblem& p) { p.softcap = -2.0f; }, "softcap", "-2", "positive"},
      {"k_scale of a non-fp8 K", [](AttentionProblem& p) { p.k_scale = 2.0f; }, "k_scale", "2",
       "1 for f16"},
      {"v_scale of fp8 V",
       [](AttentionProblem& p) {
         p.v_type = KvType::fp8_e4m3;
         p.v_scale = 0.0f;
       },
       "v_scale", "0", "finite positive"},
      {"k_scale inf",
       [](AttentionProblem& p) {
         p.k_type = KvType::fp8_e5m2;
         p.k_scale = std::numeric_limits<float>::infinity();
       },
       "k_scale", "inf", "finite positive"},
  };
  for (const Rejection& c : cases) {
    AttentionProblem p = base();
    c.mutate(p);
    Status s = validate(p);
    ASSERT_FALSE(s.ok()) << c.what;
    EXPECT_EQ(s.error().code, ErrorCode::invalid_argument) << c.what;
    EXPECT_THAT(s.message(), HasSubstr(c.field)) << c.what;
    EXPECT_THAT(s.message(), HasSubstr(c.value)) << c.what;
    EXPECT_THAT(s.message(), HasSubstr(c.allowed)) << c.what;
  }
}

TEST(Problem, DescribeIsOneReadableLine) {
  AttentionProblem p = base();
  p.k_type = KvType::q8_0;
  p.v_type = KvType::turbo4;
  p.window = 128;
  p.has_sinks = true;
  EXPECT_EQ(describe(p),
            "seqs=1 q=1 heads=32/8 d=128/128 k=q8_0 v=turbo4 kv=4096 causal window=128 sinks");
}

TEST(Problem, DescribeSaysRagged) {
  AttentionProblem p = base();
  p.n_seqs = 3;
  p.n_q_tokens = 300;
  p.ragged_q = true;
  EXPECT_EQ(describe(p), "seqs=3 q=300 heads=32/8 d=128/128 k=f16 v=f16 kv=4096 causal ragged");
  AttentionProblem q = p;
  q.ragged_q = false;
  EXPECT_NE(p, q);
}

TEST(Problem, DefaultScaleIsInverseSqrtDk) {
  AttentionProblem p = base();
  p.head_dim = {576, 512};
  EXPECT_FLOAT_EQ(p.effective_scale(), 1.0f / 24.0f);
  p.scale = 0.5f;
  EXPECT_FLOAT_EQ(p.effective_scale(), 0.5f);
}

TEST(Problem, TensorValidationCatchesNullsAndOverlappingRows) {
  AttentionProblem p = base();
  std::vector<float> q(32 * 128), out(32 * 128);
  std::vector<uint8_t> kv(row_size(p.k_type, 128) * 8 * 4096);
  AttentionTensors t;
  t.q = q.data();
  t.out = out.data();
  t.k = kv_tensor_contiguous(kv.data(), p.k_type, 128, 8, 4096);
  t.v = t.k;
  EXPECT_TRUE(validate(p, t).ok());
  AttentionTensors bad = t;
  bad.k.stride_token = 100;  // a f16 row of 128 values is 256 bytes
  EXPECT_THAT(validate(p, bad).message(), HasSubstr("stride_token=100"));
  bad = t;
  bad.q = nullptr;
  EXPECT_THAT(validate(p, bad).message(), HasSubstr("tensors.q"));
  p.has_mask = true;
  EXPECT_THAT(validate(p, t).message(), HasSubstr("mask"));
}

// ragged_q and q_offsets come together; validate(p, t) reads no offset (they may be on a device).
TEST(Problem, RaggedQueriesNeedOffsetsAndOffsetsNeedRaggedQueries) {
  AttentionProblem p = base();
  p.n_seqs = 2;
  p.n_q_tokens = 4;
  std::vector<float> q(8 * 32 * 128), out(8 * 32 * 128);
  std::vector<uint8_t> kv(row_size(p.k_type, 128) * 8 * 4096 * 2);
  AttentionTensors t;
  t.q = q.data();
  t.out = out.data();
  t.k = kv_tensor_contiguous(kv.data(), p.k_type, 128, 8, 4096);
  t.v = t.k;
  const int32_t offsets[] = {0, 3, 7};
  t.q_offsets = offsets;
  EXPECT_THAT(validate(p, t).message(), HasSubstr("tensors.q_offsets=0x"));
  p.ragged_q = true;
  EXPECT_TRUE(validate(p, t).ok());
  const int32_t* unreadable = reinterpret_cast<const int32_t*>(uintptr_t{8});
  t.q_offsets = unreadable;  // never dereferenced by validate(p, t)
  EXPECT_TRUE(validate(p, t).ok());
  t.q_offsets = nullptr;
  EXPECT_THAT(validate(p, t).message(),
              HasSubstr("tensors.q_offsets=NULL is missing but problem.ragged_q is set"));
}

TEST(Problem, RowBaseAndQueryCountOfEachSequence) {
  const int32_t offsets[] = {0, 0, 1, 8, 41};
  const int32_t lens[] = {0, 1, 7, 33};
  for (int64_t s = 0; s < 4; ++s) {
    EXPECT_EQ(q_row_base(offsets, 40, s), offsets[s]) << s;
    EXPECT_EQ(q_len(offsets, 40, s), lens[s]) << s;
    EXPECT_EQ(q_row_base(nullptr, 40, s), 40 * s) << s;
    EXPECT_EQ(q_len(nullptr, 40, s), 40) << s;
  }
  AttentionProblem p = base();
  p.n_seqs = 4;
  p.n_q_tokens = 40;
  EXPECT_EQ(q_total_rows(p, nullptr), 160);
  p.ragged_q = true;
  EXPECT_EQ(q_total_rows(p, offsets), 41);
}

TEST(Problem, OffsetValidationNamesTheBrokenRule) {
  AttentionProblem p = base();
  p.n_seqs = 3;
  p.n_q_tokens = 8;
  p.ragged_q = true;
  const int32_t good[] = {0, 8, 8, 9};
  EXPECT_TRUE(validate_q_offsets(p, good).ok());
  const int32_t nonzero[] = {1, 8, 8, 9};
  EXPECT_THAT(validate_q_offsets(p, nonzero).message(), HasSubstr("q_offsets[0]=1"));
  const int32_t decreasing[] = {0, 5, 4, 9};
  EXPECT_THAT(validate_q_offsets(p, decreasing).message(),
              HasSubstr("q_offsets[2] - q_offsets[1]=-1"));
  const int32_t too_long[] = {0, 1, 2, 11};
  const Status s = validate_q_offsets(p, too_long);
  EXPECT_EQ(s.error().code, ErrorCode::invalid_argument);
  EXPECT_THAT(
      s.message(),
      HasSubstr("=9 (sequence 2's query count) is out of range (allowed: 0 .. n_q_tokens=8)"));
  EXPECT_FALSE(validate_q_offsets(p, nullptr).ok());
  p.ragged_q = false;
  EXPECT_TRUE(validate_q_offsets(p, nullptr).ok());
}

}  // namespace
}  // namespace kvflash
