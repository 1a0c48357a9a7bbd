// The shared merge rule: any number of partials, in any order, equals the state of all keys at
// once; partials that saw only masked keys (m = -inf) merge away without NaN.
#include "kvflash/state.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace kvflash {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Keys {
  std::vector<double> logits;
  std::vector<std::vector<double>> values;
};

// Reference: softmax over all keys in double.
std::vector<double> direct(const Keys& k, int dv) {
  double m = -INFINITY, l = 0;
  for (double s : k.logits) m = std::max(m, s);
  std::vector<double> o(dv, 0.0);
  if (m == -INFINITY) return o;
  for (size_t j = 0; j < k.logits.size(); ++j) {
    const double w = std::exp(k.logits[j] - m);
    l += w;
    for (int d = 0; d < dv; ++d) o[d] += w * k.values[j][d];
  }
  for (double& x : o) x /= l;
  return o;
}

class MergeMany : public ::testing::TestWithParam<int64_t> {};

TEST_P(MergeMany, EqualsAllKeysAtOnce) {
  const int64_t n_parts = GetParam();
  const int dv = 8;
  std::mt19937_64 rng(1234 + n_parts);
  std::normal_distribution<double> g(0.0, 3.0);
  std::uniform_int_distribution<int> keys_per_part(0, 3);
  Keys all;
  std::vector<float> o(n_parts * dv), m(n_parts), l(n_parts);
  for (int64_t i = 0; i < n_parts; ++i) {
    // Every fifth partial saw only masked keys (or none): the empty state.
    const int nk = i % 5 == 4 ? 0 : keys_per_part(rng) + 1;
    float mi = state_empty_m<float>(), li = 0;
    std::vector<float> oi(dv, 0.0f);
    for (int k = 0; k < nk; ++k) {
      const double s = g(rng);
      std::vector<double> v(dv);
      for (double& x : v) x = g(rng);
      all.logits.push_back(s);
      all.values.push_back(v);
      std::vector<float> ok(v.begin(), v.end());
      merge_state<float>(oi.data(), mi, li, ok.data(), static_cast<float>(s), 1.0f, dv);
    }
    std::copy(oi.begin(), oi.end(), o.begin() + i * dv);
    m[i] = mi;
    l[i] = li;
  }
  std::vector<float> merged(dv), out(dv);
  float mm = 0, ll = 0;
  merge_states<float>(n_parts, o.data(), dv, m.data(), l.data(), dv, merged.data(), mm, ll);
  float lse = 0;
  finalize_state<float>(merged.data(), mm, ll, false, 0.0f, dv, out.data(), &lse);
  const std::vector<double> ref = direct(all, dv);
  for (int d = 0; d < dv; ++d) {
    ASSERT_TRUE(std::isfinite(out[d]));
    EXPECT_NEAR(out[d], ref[d], 2e-4 * (1 + std::abs(ref[d]))) << "d=" << d;
  }
  if (all.logits.empty()) {
    EXPECT_EQ(lse, -kInf);
  }
}

INSTANTIATE_TEST_SUITE_P(Partials, MergeMany, ::testing::Values(1, 2, 31, 32, 33, 1000, 100000));

TEST(State, TwoEmptyStatesMergeToEmptyWithoutNaN) {
  float o_a[2] = {0, 0}, o_b[2] = {0, 0};
  float m_a = -kInf, l_a = 0;
  merge_state<float>(o_a, m_a, l_a, o_b, -kInf, 0.0f, 2);
  EXPECT_EQ(m_a, -kInf);
  EXPECT_EQ(l_a, 0.0f);
  EXPECT_EQ(o_a[0], 0.0f);
  float out[2] = {1, 1}, lse = 0;
  finalize_state<float>(o_a, m_a, l_a, false, 0.0f, 2, out, &lse);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(lse, -kInf);
}

TEST(State, AllPartialsEmptyGivesZerosNotNaN) {
  const int64_t n = 33;
  std::vector<float> o(n * 4, 0.0f), m(n, -kInf), l(n, 0.0f), merged(4), out(4);
  float mm = 0, ll = 0;
  merge_states<float>(n, o.data(), 4, m.data(), l.data(), 4, merged.data(), mm, ll);
  finalize_state<float>(merged.data(), mm, ll, false, 0.0f, 4, out.data(), nullptr);
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

TEST(State, SinkOnlyRowIsZeroWithFiniteLse) {
  float o[1] = {0}, out[1] = {5}, lse = 0;
  finalize_state<float>(o, -kInf, 0.0f, true, 1.5f, 1, out, &lse);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_FLOAT_EQ(lse, 1.5f);
}

TEST(State, SinkAddsToTheDenominator) {
  // One key with logit 0 and value 2, sink logit 0: weight 1/2 each.
  float o[1] = {2}, out[1] = {0}, lse = 0;
  finalize_state<float>(o, 0.0f, 1.0f, true, 0.0f, 1, out, &lse);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(lse, std::log(2.0f));
}

TEST(State, LargeLogitGapsDoNotOverflow) {
  float o_a[1] = {1}, m_a = 1000.0f, l_a = 1;
  float o_b[1] = {3};
  merge_state<float>(o_a, m_a, l_a, o_b, -1000.0f, 1.0f, 1);
  EXPECT_EQ(m_a, 1000.0f);
  EXPECT_FLOAT_EQ(l_a, 1.0f);
  EXPECT_FLOAT_EQ(o_a[0], 1.0f);
}

// A sink of -inf is an empty state: a row that saw no key gives zeros and lse = -inf, not NaN
// (exp(-inf - -inf)), in the host form and in the kernels' base-2 form alike.
TEST(State, EmptyRowWithASinkOfMinusInfinityIsZeroAndMinusInfinity) {
  float o[1] = {0}, out[1] = {5}, lse = 0;
  finalize_state<float>(o, -kInf, 0.0f, true, -kInf, 1, out, &lse);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(lse, -kInf);
  const StateFinal f = state_final_exp2(-kInf, 0.0f, true, -kInf);
  EXPECT_EQ(f.scale, 0.0f);
  EXPECT_EQ(f.lse, -kInf);
}

// The kernels' form (base 2, against state_ref) gives what finalize_state gives.
TEST(State, KernelFormFinalizesAsTheHostForm) {
  const float inf = kInf;
  const float cases[][4] = {
      // m, l, has_sink, sink
      {0.0f, 1.0f, 0, 0},    {3.5f, 7.25f, 0, 0},   {-inf, 0.0f, 0, 0},
      {0.0f, 1.0f, 1, 0.0f}, {2.0f, 3.0f, 1, 5.0f}, {-inf, 0.0f, 1, 1.5f},
      {4.0f, 2.0f, 1, -inf}, {-inf, 0.0f, 1, -inf}, {-30.0f, 1e-3f, 1, 40.0f}};
  for (const auto& c : cases) {
    float o[1] = {1.0f}, out[1] = {0}, lse = 0;
    finalize_state<float>(o, c[0], c[1], c[2] != 0, c[3], 1, out, &lse);
    const StateFinal f = state_final_exp2(c[0], c[1], c[2] != 0, c[3]);
    EXPECT_NEAR(f.scale, out[0], 4e-6f * std::abs(out[0])) << c[0] << " " << c[1] << " " << c[3];
    if (std::isinf(lse))
      EXPECT_EQ(f.lse, lse);
    else
      EXPECT_NEAR(f.lse, lse, 1e-5f * std::max(1.0f, std::abs(lse)));
  }
  EXPECT_EQ(state_ref(-inf), 0.0f);
  EXPECT_EQ(state_weight_exp2(-inf, state_ref(-inf)), 0.0f);
  EXPECT_FLOAT_EQ(state_weight_exp2(1.0f, 0.0f), std::exp(1.0f));
}

}  // namespace
}  // namespace kvflash
