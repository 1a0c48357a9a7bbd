// libFuzzer target: small attention calls through kvflash_attention on the CPU, every CPU kernel
// forced in turn, against the float64 reference. Shapes, flags, masks, sinks and lengths come
// from the input, and some K/V rows are overwritten with NaN or inf (hidden or not). Checks: no
// crash or sanitizer report; the kernels accept what the reference accepts; wherever the
// reference's row is finite, the kernel's row is finite and close to it (a hidden key's values
// never reach the output).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "capi/capi_test_util.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/kvflash.h"
#include "kvflash/problem.hpp"
#include "kvflash/reference.hpp"

namespace {

using kvflash::KvType;
using kvflash::capi_test::to_c;
constexpr float kInf = std::numeric_limits<float>::infinity();

[[noreturn]] void fail(const std::string& what, const kvflash::AttentionProblem& p) {
  std::fprintf(stderr, "%s\n  problem: %s\n", what.c_str(), kvflash::describe(p).c_str());
  std::abort();
}

// NaN (or inf) in every value of an f32/f16/bf16 row, in every block scale of the others.
void poison_row(KvType t, uint8_t* row, int32_t dim, bool nan) {
  const uint16_t h = nan ? 0x7E00 : 0x7C00;
  if (t == KvType::f32) {
    const float f = nan ? std::numeric_limits<float>::quiet_NaN() : kInf;
    for (int32_t d = 0; d < dim; ++d) std::memcpy(row + 4 * d, &f, 4);
  } else if (t == KvType::bf16) {
    const uint16_t b = nan ? 0x7FC0 : 0x7F80;
    for (int32_t d = 0; d < dim; ++d) std::memcpy(row + 2 * d, &b, 2);
  } else if (t == KvType::f16) {
    for (int32_t d = 0; d < dim; ++d) std::memcpy(row + 2 * d, &h, 2);
  } else {
    const size_t bytes = kvflash::row_size(t, dim), block = kvflash::row_size(t, 1);
    for (size_t b = 0; b < bytes; b += block) std::memcpy(row + b, &h, 2);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  kvflash::AttentionProblem p;
  const int32_t dims[][2] = {{64, 64}, {80, 80}, {96, 96}, {128, 128}, {192, 128}};
  const int32_t q_tokens[] = {1, 1, 2, 3, 4, 9, 17};
  const int32_t groups[] = {1, 2, 4, 8};
  p.n_seqs = in.ConsumeIntegralInRange<int32_t>(1, 3);
  p.n_q_tokens = q_tokens[in.ConsumeIntegralInRange<size_t>(0, 6)];
  p.n_kv_heads = in.ConsumeIntegralInRange<int32_t>(1, 2);
  p.n_q_heads = p.n_kv_heads * groups[in.ConsumeIntegralInRange<size_t>(0, 3)];
  const auto& d = dims[in.ConsumeIntegralInRange<size_t>(0, 4)];
  p.head_dim = {d[0], d[1]};
  p.k_type = static_cast<KvType>(in.ConsumeIntegralInRange<int>(0, 7));
  p.v_type = static_cast<KvType>(in.ConsumeIntegralInRange<int>(0, 7));
  p.kv_capacity = in.ConsumeIntegralInRange<int64_t>(1, 140);
  // Scales above ~0.2 make float rounding of long dot products show in the weights.
  p.scale = in.ConsumeBool() ? 0.0f : in.ConsumeFloatingPointInRange<float>(0.01f, 0.2f);
  p.causal = in.ConsumeBool();
  p.window = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<int64_t>(1, 60);
  p.softcap = in.ConsumeBool() ? 0.0f : in.ConsumeFloatingPointInRange<float>(1.0f, 50.0f);
  p.has_mask = in.ConsumeBool();
  p.has_sinks = in.ConsumeBool();
  p.has_alibi = in.ConsumeBool();
  p.ragged_q = in.ConsumeBool();

  std::vector<int64_t> lens(static_cast<size_t>(p.n_seqs));
  for (int64_t& l : lens)
    l = in.ConsumeBool() ? p.kv_capacity : in.ConsumeIntegralInRange<int64_t>(0, p.kv_capacity);
  std::vector<int32_t> offsets{0};
  if (p.ragged_q)
    for (int32_t s = 0; s < p.n_seqs; ++s)
      offsets.push_back(offsets.back() + in.ConsumeIntegralInRange<int32_t>(0, p.n_q_tokens));
  const int64_t q_rows = kvflash::q_total_rows(p, p.ragged_q ? offsets.data() : nullptr);

  auto small = [&] { return static_cast<float>(in.ConsumeIntegralInRange<int>(-64, 64)) / 16.0f; };
  // At least one element: an all-empty ragged batch still passes non-null pointers.
  std::vector<float> q(
      std::max<size_t>(1, static_cast<size_t>(q_rows * p.n_q_heads * p.head_dim.k)));
  for (float& x : q) x = small();
  const int64_t rows = p.n_seqs * p.kv_capacity * p.n_kv_heads;
  std::vector<float> kf(static_cast<size_t>(rows * p.head_dim.k)),
      vf(static_cast<size_t>(rows * p.head_dim.v));
  // A seed for the bulk of K and V (an input byte per value would make inputs huge).
  uint32_t seed = in.ConsumeIntegral<uint32_t>() | 1u;
  auto next = [&] {
    seed ^= seed << 13;
    seed ^= seed >> 17;
    seed ^= seed << 5;
    return static_cast<float>(static_cast<int>(seed % 129) - 64) / 16.0f;
  };
  for (float& x : kf) x = next();
  for (float& x : vf) x = next();
  const size_t krow = kvflash::row_size(p.k_type, p.head_dim.k),
               vrow = kvflash::row_size(p.v_type, p.head_dim.v);
  std::vector<uint16_t> k((rows * krow + 1) / 2 + 2), v((rows * vrow + 1) / 2 + 2);
  auto* kb = reinterpret_cast<uint8_t*>(k.data());
  auto* vb = reinterpret_cast<uint8_t*>(v.data());
  kvflash::quantize_rows(p.k_type, kf.data(), rows, p.head_dim.k, kb);
  kvflash::quantize_rows(p.v_type, vf.data(), rows, p.head_dim.v, vb);
  // Poisoned rows: NaN or inf in K and / or V, anywhere (hidden or not).
  const int n_poison = in.ConsumeIntegralInRange<int>(0, 6);
  for (int i = 0; i < n_poison; ++i) {
    const int64_t r = in.ConsumeIntegralInRange<int64_t>(0, rows - 1);
    const int what = in.ConsumeIntegralInRange<int>(0, 2);
    const bool nan = in.ConsumeBool();
    if (what != 1) poison_row(p.k_type, kb + r * krow, p.head_dim.k, nan);
    if (what != 0) poison_row(p.v_type, vb + r * vrow, p.head_dim.v, nan);
  }
  std::vector<float> mask, sinks, alibi;
  const int64_t mask_stride = p.kv_capacity + in.ConsumeIntegralInRange<int64_t>(0, 3);
  if (p.has_mask) {
    mask.resize(static_cast<size_t>(p.n_seqs * p.n_q_tokens * mask_stride));
    const int hide_every = in.ConsumeIntegralInRange<int>(1, 7);
    const int mode = in.ConsumeIntegralInRange<int>(0, 3);
    for (size_t i = 0; i < mask.size(); ++i)
      mask[i] = mode == 0                                  ? -kInf  // every key hidden
                : i % static_cast<size_t>(hide_every) == 0 ? -kInf
                                                           : -static_cast<float>(i % 5) * 0.5f;
  }
  if (p.has_sinks) {
    const float choices[] = {-kInf, -2.0f, 0.0f, 3.0f, 20.0f};
    for (int32_t h = 0; h < p.n_q_heads; ++h)
      sinks.push_back(choices[in.ConsumeIntegralInRange<size_t>(0, 4)]);
  }
  if (p.has_alibi)
    for (int32_t h = 0; h < p.n_q_heads; ++h) alibi.push_back(0.5f / static_cast<float>(1 + h));

  kvflash::AttentionTensors t;
  t.q = q.data();
  t.k = kvflash::kv_tensor_contiguous(kb, p.k_type, p.head_dim.k, p.n_kv_heads, p.kv_capacity);
  t.v = kvflash::kv_tensor_contiguous(vb, p.v_type, p.head_dim.v, p.n_kv_heads, p.kv_capacity);
  t.kv_lens = lens.data();
  if (p.has_mask) {
    t.mask = mask.data();
    t.mask_stride = mask_stride;
  }
  if (p.has_sinks) t.sinks = sinks.data();
  if (p.has_alibi) t.alibi_slopes = alibi.data();
  if (p.ragged_q) t.q_offsets = offsets.data();
  const size_t n_out = static_cast<size_t>(q_rows * p.n_q_heads);
  std::vector<float> ref_out(std::max<size_t>(1, n_out * p.head_dim.v)),
      ref_lse(std::max<size_t>(1, n_out));
  t.out = ref_out.data();
  t.lse = ref_lse.data();
  const kvflash::Status rs = kvflash::reference_attention(p, t);
  if (!rs) fail("reference refused: " + rs.message(), p);

  const kvflash_problem cp = to_c(p);
  kvflash_tensors ct = to_c(t);
  std::vector<float> out(ref_out.size()), lse(ref_lse.size());
  ct.out = out.data();
  ct.lse = lse.data();
  const int32_t n_kernels = kvflash_kernel_count();
  for (int32_t i = 0; i < n_kernels; ++i) {
    const std::string name = kvflash_kernel_name(i);
    if (name.rfind("cpu.", 0) != 0) continue;
    kvflash_options o = kvflash_options_default();
    o.backend = KVFLASH_BACKEND_CPU;
    o.force_kernel = name.c_str();
    o.ignore_environment = 1;
    o.n_threads = 1 + static_cast<int32_t>(data[0] % 2);  // data[0] exists: size > 0 here
    if (kvflash_select_kernel(&cp, &o, nullptr, 0) != KVFLASH_OK) continue;
    std::fill(out.begin(), out.end(), 77.0f);
    std::fill(lse.begin(), lse.end(), 77.0f);
    const int rc = kvflash_attention(&cp, &ct, &o);
    if (rc != KVFLASH_OK)
      fail(name + " refused what the reference took: " + kvflash_last_error(), p);
    for (size_t r = 0; r < n_out; ++r) {
      bool finite = !std::isnan(ref_lse[r]);
      for (int32_t c = 0; c < p.head_dim.v; ++c)
        finite = finite && std::isfinite(ref_out[r * p.head_dim.v + c]);
      if (!finite) continue;
      const float want_lse = ref_lse[r], got_lse = lse[r];
      const bool lse_ok =
          want_lse == -kInf ? got_lse == -kInf
                            : std::fabs(got_lse - want_lse) <= 0.05f + 1e-3f * std::fabs(want_lse);
      if (!lse_ok)
        fail(name + ": row " + std::to_string(r) + " lse " + std::to_string(got_lse) +
                 " vs reference " + std::to_string(want_lse),
             p);
      for (int32_t c = 0; c < p.head_dim.v; ++c) {
        const float g = out[r * p.head_dim.v + c], w = ref_out[r * p.head_dim.v + c];
        if (!(std::fabs(g - w) <= 0.05f + 0.02f * std::fabs(w)))
          fail(name + ": row " + std::to_string(r) + " value " + std::to_string(c) + " " +
                   std::to_string(g) + " vs reference " + std::to_string(w),
               p);
      }
    }
  }
  return 0;
}
