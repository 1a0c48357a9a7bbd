// validate(problem, tensors) against the fuzz findings of issue 40 point 4: overflowing strides,
// misaligned rows and pointers, overlapping rows, and the order in which fields are reported.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "kvflash/kv_cache.hpp"
#include "kvflash/problem.hpp"

namespace kvflash {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

struct Layout {
  AttentionProblem p;
  std::vector<float> q, out, lse, mask;
  std::vector<uint8_t> kv;
  std::vector<int32_t> table;
  AttentionTensors t;
  explicit Layout(KvType type = KvType::f16, int32_t page_size = 0) {
    p.n_seqs = 2;
    p.n_q_heads = 4;
    p.n_kv_heads = 2;
    p.head_dim = {64, 64};
    p.k_type = p.v_type = type;
    p.kv_capacity = 40;
    p.page_size = page_size;
    q.resize(2 * 4 * 64);
    out.resize(q.size());
    lse.resize(8);
    kv.resize(row_size(type, 64) * 2 * 2 * 48 + 64);
    t.q = q.data();
    t.out = out.data();
    t.lse = lse.data();
    if (page_size == 0) {
      t.k = kv_tensor_contiguous(kv.data(), type, 64, 2, 40);
    } else {
      table.assign(2 * 5, 0);
      t.k = kv_tensor_paged(kv.data(), type, 64, 2, page_size, 6, table.data(), 5);
    }
    t.v = t.k;
  }
};

TEST(TensorValidation, BaseSetupsAreValid) {
  for (KvType type : kAllKvTypes) {
    EXPECT_TRUE(validate(Layout(type).p, Layout(type).t).ok());
    Layout s(type, 8);
    EXPECT_TRUE(validate(s.p, s.t).ok()) << validate(s.p, s.t).message();
  }
}

// Finding 1: byte offsets computed from huge strides overflowed int64 (UBSan: signed overflow in
// the paged page extent); now every product and sum is checked and the stride is rejected.
TEST(TensorValidation, HugeStridesAreRejectedWithoutOverflow) {
  {
    Layout s(KvType::f16, 8);
    s.t.k.stride_token = int64_t{1} << 62;
    s.t.k.stride_page = kMax - 1;
    const Status st = validate(s.p, s.t);
    ASSERT_FALSE(st.ok());
    EXPECT_THAT(st.message(), HasSubstr("overflows a 64-bit byte offset"));
  }
  {
    Layout s(KvType::f16, 8);
    s.t.v.stride_page = kMax / 2;  // 5 steps of it overflow
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.v.stride_page="));
  }
  {
    Layout s;
    s.t.k.stride_token = int64_t{1} << 60;  // 39 steps overflow
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.k.stride_token="));
  }
  {
    Layout s;
    s.t.k.stride_seq = kMax - 1;
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("overflows"));
  }
  {
    Layout s;
    s.t.k.stride_head = -256;
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.k.stride_head=-256"));
  }
  {
    Layout s;
    s.p.has_mask = true;
    s.mask.resize(2 * 40);
    s.t.mask = s.mask.data();
    s.t.mask_stride = kMax / 3;
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.mask_stride="));
    s.t.mask_stride = 40;
    EXPECT_TRUE(validate(s.p, s.t).ok());
  }
}

// Finding 2: K/V rows at odd addresses were accepted, and the kernels then loaded misaligned
// 16-bit words (f32 rows: floats).
TEST(TensorValidation, MisalignedRowsAndPointersAreRejected) {
  {
    Layout s;
    s.t.k.data = s.kv.data() + 1;
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.k.data="));
  }
  {
    Layout s;
    s.t.v.stride_token += 1;
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.v.stride_token="));
  }
  {
    Layout s(KvType::q8_0, 8);
    s.t.k.stride_page += 1;
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("breaks row alignment"));
  }
  {
    Layout s(KvType::f32);
    s.t.k.data = s.kv.data() + 2;  // even, but f32 rows are loaded as floats
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("multiple of 4 bytes"));
  }
  {
    Layout s(KvType::f32);
    s.t.k.stride_seq += 2;
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.k.stride_seq="));
  }
  {
    Layout s(KvType::q4_0);
    s.t.k.data = s.kv.data() + 2;  // 2 bytes suffice for everything but f32
    s.t.v = s.t.k;
    EXPECT_TRUE(validate(s.p, s.t).ok()) << validate(s.p, s.t).message();
  }
  auto offset = [](const float* f, int bytes) {
    return reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(f) + bytes);
  };
  {
    Layout s;
    s.t.q = offset(s.q.data(), 2);
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.q="));
  }
  {
    Layout s;
    s.t.out = const_cast<float*>(offset(s.out.data(), 1));
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.out="));
  }
  {
    Layout s;
    s.t.lse = const_cast<float*>(offset(s.lse.data(), 2));
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.lse="));
  }
  {
    Layout s;
    s.p.has_sinks = true;
    s.t.sinks = offset(s.lse.data(), 1);
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.sinks="));
  }
}

// Finding 6: strides that alias rows were accepted when each stride alone held a row.
TEST(TensorValidation, OverlappingRowsAreRejected) {
  const int64_t row = 128;  // f16, 64 values
  {
    Layout s;  // token t, head 1 is token t + 1, head 0
    s.t.k.stride_head = row;
    s.t.k.stride_token = row;
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("makes rows overlap"));
  }
  {
    Layout s;
    s.p.n_kv_heads = 1;
    s.p.n_q_heads = 1;
    s.t.k.stride_token = row / 2;
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.k.stride_token=64"));
  }
  {
    Layout s;  // sequences overlapping the last tokens of the one before
    s.t.k.stride_seq = s.t.k.stride_token * 39;
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.k.stride_seq="));
  }
  {
    Layout s(KvType::f16, 8);  // paged, head and token aliased inside a page
    s.t.k.stride_token = row;
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("makes rows overlap"));
  }
  {
    Layout s(KvType::f16, 8);  // pages overlapping
    s.t.v.stride_page = s.t.v.stride_token * 7;
    EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.v.stride_page="));
  }
  // Accepted: head-major, padded token-major, pages interleaved between tokens, unused strides.
  {
    Layout s;
    s.t.k.stride_token = row;
    s.t.k.stride_head = row * 40;
    s.t.k.stride_seq = row * 80;
    EXPECT_TRUE(validate(s.p, s.t).ok()) << validate(s.p, s.t).message();
    s.t.k.stride_token = 2 * row + 64;
    s.t.k.stride_head = row;
    s.t.k.stride_seq = (2 * row + 64) * 40;
    EXPECT_TRUE(validate(s.p, s.t).ok()) << validate(s.p, s.t).message();
  }
  {
    Layout s(KvType::f16, 8);
    s.t.k.stride_head = row;
    s.t.k.stride_page = 2 * row;       // page p's rows right after page p - 1's, per token
    s.t.k.stride_token = 2 * row * 6;  // 6 pages of 2 heads per token
    EXPECT_TRUE(validate(s.p, s.t).ok()) << validate(s.p, s.t).message();
  }
  {
    Layout s;
    s.p.n_seqs = 1;
    s.t.k.stride_seq = -5;  // never used with one sequence
    EXPECT_TRUE(validate(s.p, s.t).ok()) << validate(s.p, s.t).message();
  }
}

// The first offending field in declaration order is the one reported, in one message style.
TEST(TensorValidation, FirstOffendingFieldInDeclarationOrder) {
  AttentionProblem p;
  p.softcap = -1.0f;
  p.page_size = -1;  // declared after softcap
  EXPECT_THAT(validate(p).message(), HasSubstr("softcap=-1 is out of range (allowed: "));
  p = AttentionProblem{};
  p.n_seqs = 0;
  p.k_type = static_cast<KvType>(42);
  EXPECT_THAT(validate(p).message(), HasSubstr("n_seqs=0 is out of range (allowed: 1 .. 65536)"));

  Layout s;
  s.t.q = nullptr;
  s.t.out = nullptr;
  EXPECT_THAT(validate(s.p, s.t).message(), HasSubstr("tensors.q=NULL is missing (allowed: "));
}

TEST(TensorValidation, KvLensAreCheckedOnTheHost) {
  Layout s;
  const int64_t good[] = {40, 0}, negative[] = {3, -1}, too_long[] = {41, 2};
  EXPECT_TRUE(validate_kv_lens(s.p, nullptr).ok());
  EXPECT_TRUE(validate_kv_lens(s.p, good).ok());
  EXPECT_THAT(validate_kv_lens(s.p, negative).message(),
              HasSubstr("kv_lens[1]=-1 is out of range (allowed: 0 .. kv_capacity=40)"));
  EXPECT_THAT(validate_kv_lens(s.p, too_long).message(), HasSubstr("kv_lens[0]=41"));
}

// The device KV cache's errors in the one style ("field=value problem (allowed: ...)"), the
// method named first; checked without a device (config validation, a cache never created).
TEST(TensorValidation, KvCacheErrorsUseTheOneMessageStyle) {
  gpu::KvCacheConfig c;
  c.n_seqs = 2;
  c.n_kv_heads = 8;
  c.head_dim = {128, 128};
  c.capacity = 0;
  c.layers = {{KvType::q8_0, KvType::q8_0}};
  Expected<gpu::KvCacheBytes> b = gpu::kv_cache_bytes(c);
  ASSERT_FALSE(b);
  EXPECT_THAT(b.error().message,
              HasSubstr("KvCacheConfig.capacity=0 is not allowed (allowed: 1 .."));
  gpu::KvCache empty;
  Status s = empty.append(0, nullptr, nullptr, 1, nullptr);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message,
            "KvCache::append: cache=empty was not created (allowed: a cache from KvCache::create)");
  s = empty.begin_step(-1, nullptr);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("KvCache::begin_step: cache=empty"));
}

}  // namespace
}  // namespace kvflash
