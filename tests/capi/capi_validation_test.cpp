// The C API's validation against the fuzz findings of issue 40 point 4: the first offending
// field wins whatever its type (a bad n_seqs before a bad k_type), and kvflash_validate_tensors
// reads kv_lens as its header says.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "capi/capi_test_util.hpp"
#include "kvflash/kvflash.h"

namespace {

using kvflash::capi_test::last_error;

TEST(CapiValidation, FirstOffendingFieldBeforeABadType) {
  kvflash_problem p = kvflash_problem_default();
  p.n_seqs = 0;
  p.k_type = static_cast<kvflash_type>(42);
  EXPECT_EQ(kvflash_validate_problem(&p), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error().rfind("n_seqs=0 is out of range (allowed: ", 0), 0u) << last_error();

  p = kvflash_problem_default();
  p.head_dim = {100, 100};
  p.v_type = KVFLASH_TYPE_INVALID;
  EXPECT_EQ(kvflash_validate_problem(&p), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error().rfind("head_dim (k/v)=100/100 is not supported (allowed: ", 0), 0u)
      << last_error();

  // A bad type before bad later fields: the type.
  p = kvflash_problem_default();
  p.k_type = static_cast<kvflash_type>(-7);
  p.kv_capacity = 0;
  EXPECT_EQ(kvflash_validate_problem(&p), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error().rfind("k_type=-7 is not a kvflash_type (allowed: ", 0), 0u)
      << last_error();
  p.k_type = KVFLASH_TYPE_F16;
  EXPECT_EQ(kvflash_validate_problem(&p), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error().rfind("kv_capacity=0 is out of range (allowed: ", 0), 0u) << last_error();
}

TEST(CapiValidation, ValidateTensorsReadsKvLens) {
  kvflash_problem p = kvflash_problem_default();
  p.n_seqs = 2;
  p.n_q_heads = 2;
  p.n_kv_heads = 1;
  p.head_dim = {64, 64};
  p.kv_capacity = 10;
  std::vector<float> q(2 * 2 * 64), out(q.size());
  std::vector<uint16_t> kv(2 * 10 * 64);
  kvflash_tensors t{};
  t.q = q.data();
  t.out = out.data();
  ASSERT_EQ(kvflash_kv_tensor_contiguous(kv.data(), KVFLASH_TYPE_F16, 64, 1, 10, &t.k), KVFLASH_OK);
  t.v = t.k;
  ASSERT_EQ(kvflash_validate_tensors(&p, &t), KVFLASH_OK) << last_error();
  const int64_t good[] = {10, 0}, negative[] = {4, -3}, too_long[] = {11, 1};
  t.kv_lens = good;
  EXPECT_EQ(kvflash_validate_tensors(&p, &t), KVFLASH_OK) << last_error();
  t.kv_lens = negative;
  EXPECT_EQ(kvflash_validate_tensors(&p, &t), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "kv_lens[1]=-3 is out of range (allowed: 0 .. kv_capacity=10)");
  t.kv_lens = too_long;
  EXPECT_EQ(kvflash_validate_tensors(&p, &t), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error().rfind("kv_lens[0]=11 ", 0), 0u) << last_error();
  EXPECT_EQ(kvflash_attention(&p, &t, nullptr), KVFLASH_ERROR_INVALID_ARGUMENT);
}

// Misaligned rows through the C structs (finding 2): an odd data pointer or stride.
TEST(CapiValidation, OddRowAddressesAreRejected) {
  kvflash_problem p = kvflash_problem_default();
  p.n_q_heads = 1;
  p.n_kv_heads = 1;
  p.head_dim = {64, 64};
  p.kv_capacity = 4;
  std::vector<float> q(64), out(64);
  std::vector<uint16_t> kv(5 * 64);
  kvflash_tensors t{};
  t.q = q.data();
  t.out = out.data();
  ASSERT_EQ(kvflash_kv_tensor_contiguous(kv.data(), KVFLASH_TYPE_F16, 64, 1, 4, &t.k), KVFLASH_OK);
  t.v = t.k;
  ASSERT_EQ(kvflash_validate_tensors(&p, &t), KVFLASH_OK) << last_error();
  t.k.data = reinterpret_cast<const unsigned char*>(kv.data()) + 1;
  EXPECT_EQ(kvflash_validate_tensors(&p, &t), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error().rfind("tensors.k.data=", 0), 0u) << last_error();
  t.k = t.v;
  t.k.stride_token = 129;
  EXPECT_EQ(kvflash_validate_tensors(&p, &t), KVFLASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error().rfind("tensors.k.stride_token=129 breaks row alignment", 0), 0u)
      << last_error();
}

}  // namespace
