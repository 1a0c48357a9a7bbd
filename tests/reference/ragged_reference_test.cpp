// Ragged query lengths (problem.ragged_q, tensors.q_offsets): each sequence of a packed batch gets
// exactly what the float64 reference gives it alone (a one-sequence problem with its own query
// count, its K/V, its mask rows), with every feature on, query counts of 0 and counts above the
// sequence's length (queries before position 0 under causal); rows past the packed total are not
// written; offsets that break the rules are an invalid_argument naming them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kvflash/formats.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/reference.hpp"

namespace kvflash {
namespace {

using ::testing::HasSubstr;

struct Batch {
  AttentionProblem p;
  std::vector<int32_t> offsets;
  std::vector<int64_t> lens;
  std::vector<float> q, mask, sinks, alibi;
  std::vector<uint8_t> k, v;
};

Batch make_batch(const std::vector<int32_t>& q_lens, const std::vector<int64_t>& kv_lens,
                 bool causal) {
  Batch b;
  AttentionProblem& p = b.p;
  p.n_seqs = static_cast<int32_t>(q_lens.size());
  p.n_q_tokens = 40;
  p.n_q_heads = 6;
  p.n_kv_heads = 2;
  p.head_dim = {64, 64};
  p.k_type = KvType::q8_0;
  p.v_type = KvType::turbo3;
  p.kv_capacity = 120;
  p.causal = causal;
  p.has_mask = p.has_sinks = p.has_alibi = true;
  p.window = 70;
  p.softcap = 20.0f;
  p.ragged_q = true;
  b.offsets.push_back(0);
  for (int32_t n : q_lens) b.offsets.push_back(b.offsets.back() + n);
  b.lens = kv_lens;
  std::mt19937_64 rng(17);
  std::normal_distribution<float> g(0.0f, 1.0f);
  b.q.resize(static_cast<size_t>(b.offsets.back()) * p.n_q_heads * 64);
  for (float& x : b.q) x = g(rng);
  const int64_t rows = int64_t{p.n_seqs} * p.kv_capacity * p.n_kv_heads;
  auto fill = [&](KvType t, std::vector<uint8_t>& dst) {
    std::vector<float> src(static_cast<size_t>(rows) * 64);
    for (float& x : src) x = g(rng);
    dst.resize(row_size(t, 64) * static_cast<size_t>(rows));
    quantize_rows(t, src.data(), rows, 64, dst.data());
  };
  fill(p.k_type, b.k);
  fill(p.v_type, b.v);
  b.mask.resize(static_cast<size_t>(p.n_seqs) * p.n_q_tokens * p.kv_capacity);
  for (float& x : b.mask) x = rng() % 9 == 0 ? -INFINITY : 0.5f * g(rng);
  for (int h = 0; h < p.n_q_heads; ++h) {
    b.sinks.push_back(g(rng));
    b.alibi.push_back(std::exp2(-static_cast<float>(h + 1)));
  }
  return b;
}

AttentionTensors tensors(const Batch& b, std::vector<float>& out, std::vector<float>& lse) {
  const AttentionProblem& p = b.p;
  AttentionTensors t;
  t.q = b.q.data();
  t.k = kv_tensor_contiguous(b.k.data(), p.k_type, 64, p.n_kv_heads, p.kv_capacity);
  t.v = kv_tensor_contiguous(b.v.data(), p.v_type, 64, p.n_kv_heads, p.kv_capacity);
  t.kv_lens = b.lens.data();
  t.mask = b.mask.data();
  t.mask_stride = p.kv_capacity;
  t.sinks = b.sinks.data();
  t.alibi_slopes = b.alibi.data();
  t.q_offsets = b.offsets.data();
  t.out = out.data();
  t.lse = lse.data();
  return t;
}

// Sequence s of the batch alone: n_q_tokens = its query count, its K/V rows, its mask rows.
void expect_each_sequence_alone(const Batch& b) {
  const AttentionProblem& p = b.p;
  const int64_t total = q_total_rows(p, b.offsets.data());
  const int64_t spare = 5;  // packed rows past the total: never written
  std::vector<float> out(static_cast<size_t>((total + spare) * p.n_q_heads * 64), NAN);
  std::vector<float> lse(static_cast<size_t>((total + spare) * p.n_q_heads), NAN);
  const AttentionTensors t = tensors(b, out, lse);
  const Status st = reference_attention(p, t);
  ASSERT_TRUE(st.ok()) << st.message();
  for (size_t i = static_cast<size_t>(total * p.n_q_heads * 64); i < out.size(); ++i)
    ASSERT_TRUE(std::isnan(out[i])) << "out written past the packed rows at " << i;
  for (size_t i = static_cast<size_t>(total * p.n_q_heads); i < lse.size(); ++i)
    ASSERT_TRUE(std::isnan(lse[i])) << "lse written past the packed rows at " << i;

  for (int64_t s = 0; s < p.n_seqs; ++s) {
    const int32_t nq = q_len(b.offsets.data(), p.n_q_tokens, s);
    if (nq == 0) continue;
    const int64_t q0 = q_row_base(b.offsets.data(), p.n_q_tokens, s);
    AttentionProblem one = p;
    one.n_seqs = 1;
    one.n_q_tokens = nq;
    one.ragged_q = false;
    AttentionTensors ts = t;
    ts.q = t.q + q0 * p.n_q_heads * 64;
    ts.k.data = static_cast<const uint8_t*>(t.k.data) + s * t.k.stride_seq;
    ts.v.data = static_cast<const uint8_t*>(t.v.data) + s * t.v.stride_seq;
    ts.kv_lens = b.lens.data() + s;
    ts.mask = t.mask + s * p.n_q_tokens * t.mask_stride;
    ts.q_offsets = nullptr;
    std::vector<float> o1(static_cast<size_t>(nq) * p.n_q_heads * 64), l1(size_t(nq) * p.n_q_heads);
    ts.out = o1.data();
    ts.lse = l1.data();
    ASSERT_TRUE(reference_attention(one, ts).ok());
    for (size_t i = 0; i < o1.size(); ++i)
      ASSERT_EQ(out[static_cast<size_t>(q0 * p.n_q_heads * 64) + i], o1[i])
          << "sequence " << s << " value " << i;
    for (size_t i = 0; i < l1.size(); ++i)
      ASSERT_EQ(lse[static_cast<size_t>(q0 * p.n_q_heads) + i], l1[i])
          << "sequence " << s << " lse " << i;
  }
}

TEST(RaggedReference, EachSequenceGetsWhatItGetsAlone) {
  // Query counts 0 (nothing), 1 (decode), 7, 33 and the maximum 40; one empty cache.
  expect_each_sequence_alone(make_batch({0, 1, 7, 33, 40}, {50, 0, 120, 33, 100}, true));
  // More queries than keys: the first queries sit before position 0 (causal: they see nothing
  // but their sink), and without causal every query sees every key.
  expect_each_sequence_alone(make_batch({33, 2, 0}, {10, 1, 0}, true));
  expect_each_sequence_alone(make_batch({33, 2, 0}, {10, 1, 0}, false));
}

TEST(RaggedReference, BadOffsetsAreInvalidArguments) {
  Batch b = make_batch({1, 7, 33}, {50, 60, 70}, true);
  std::vector<float> out(41 * 6 * 64), lse(41 * 6);
  struct Bad {
    std::vector<int32_t> offsets;
    const char* says;
  };
  const Bad cases[] = {
      {{2, 3, 10, 43}, "q_offsets[0]=2"},
      {{0, 7, 1, 34}, "q_offsets[2] - q_offsets[1]=-6"},
      {{0, 1, 8, 49}, "q_offsets[3] - q_offsets[2]=41"},
  };
  for (const Bad& c : cases) {
    b.offsets = c.offsets;
    const Status s = reference_attention(b.p, tensors(b, out, lse));
    ASSERT_FALSE(s.ok()) << c.says;
    EXPECT_EQ(s.error().code, ErrorCode::invalid_argument);
    EXPECT_THAT(s.message(), HasSubstr(c.says));
  }
  AttentionTensors t = tensors(b, out, lse);
  t.q_offsets = nullptr;
  EXPECT_THAT(reference_attention(b.p, t).message(), HasSubstr("q_offsets=NULL"));
}

}  // namespace
}  // namespace kvflash
