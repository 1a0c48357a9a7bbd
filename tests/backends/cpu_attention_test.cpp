// Each CPU kernel (every instruction set, decode and prefill) against the float64 reference on
// the same quantized data. The parity harness (tools/parity) sweeps the full case list; these are
// the targeted checks: every candidate forced in turn, splits, ragged batches, NaN poisoning.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "kvflash/reference.hpp"
#include "kvflash/registry.hpp"

namespace kvflash {
namespace {

struct Inputs {
  AttentionProblem p;
  std::vector<float> q, mask, sinks, alibi;
  std::vector<uint8_t> k, v;
  std::vector<int64_t> lens;
  std::vector<int32_t> offsets;  // problem.ragged_q: q, out and lse are packed
  AttentionTensors tensors(std::vector<float>& out, std::vector<float>& lse) {
    AttentionTensors t;
    t.q = q.data();
    t.k = kv_tensor_contiguous(k.data(), p.k_type, p.head_dim.k, p.n_kv_heads, p.kv_capacity);
    t.v = kv_tensor_contiguous(v.data(), p.v_type, p.head_dim.v, p.n_kv_heads, p.kv_capacity);
    t.kv_lens = lens.empty() ? nullptr : lens.data();
    if (p.has_mask) {
      t.mask = mask.data();
      t.mask_stride = p.kv_capacity;
    }
    if (p.has_sinks) t.sinks = sinks.data();
    if (p.has_alibi) t.alibi_slopes = alibi.data();
    if (p.ragged_q) t.q_offsets = offsets.data();
    const auto rows = static_cast<size_t>(q_total_rows(p, t.q_offsets));
    out.assign(rows * p.n_q_heads * p.head_dim.v, NAN);
    lse.assign(rows * p.n_q_heads, NAN);
    t.out = out.data();
    t.lse = lse.data();
    return t;
  }
};

Inputs make_inputs(const AttentionProblem& p, uint64_t seed) {
  Inputs in;
  in.p = p;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int64_t rows = int64_t{p.n_seqs} * p.kv_capacity * p.n_kv_heads;
  in.q.resize(static_cast<size_t>(p.n_seqs) * p.n_q_tokens * p.n_q_heads * p.head_dim.k);
  for (float& x : in.q) x = g(rng);
  auto fill = [&](KvType t, int32_t d, std::vector<uint8_t>& dst) {
    std::vector<float> src(static_cast<size_t>(rows) * d);
    for (float& x : src) x = g(rng);
    dst.resize(row_size(t, d) * rows);
    quantize_rows(t, src.data(), rows, d, dst.data());
  };
  fill(p.k_type, p.head_dim.k, in.k);
  fill(p.v_type, p.head_dim.v, in.v);
  if (p.has_mask) {
    in.mask.resize(static_cast<size_t>(p.n_seqs) * p.n_q_tokens * p.kv_capacity);
    for (float& x : in.mask) x = rng() % 7 == 0 ? -INFINITY : 0.5f * g(rng);
  }
  in.sinks.resize(p.n_q_heads);
  in.alibi.resize(p.n_q_heads);
  for (int h = 0; h < p.n_q_heads; ++h) {
    in.sinks[h] = g(rng);
    in.alibi[h] = std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(p.n_q_heads));
  }
  return in;
}

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double{a[i]} - ref[i]) * (double{a[i]} - ref[i]);
    den += double{ref[i]} * ref[i];
  }
  return den == 0 ? num : num / den;
}

void expect_matches_reference(Inputs& in, const std::string& kernel, int32_t threads = 2) {
  if (!select_kernel(in.p, {.force = kernel, .read_environment = false}).ok()) return;
  std::vector<float> out, lse, ref_out, ref_lse;
  AttentionTensors t = in.tensors(out, lse);
  Status s = attention(
      in.p, t, {.select = {.force = kernel, .read_environment = false}, .n_threads = threads});
  ASSERT_TRUE(s.ok()) << kernel << ": " << s.message();
  AttentionTensors r = in.tensors(ref_out, ref_lse);
  ASSERT_TRUE(reference_attention(in.p, r).ok());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(std::isfinite(out[i])) << kernel << " " << i;
  EXPECT_LE(nmse(out, ref_out), 1e-5) << kernel << " " << describe(in.p);
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(ref_lse[i])) {
      EXPECT_EQ(lse[i], ref_lse[i]) << i;
    } else {
      EXPECT_NEAR(lse[i], ref_lse[i], 1e-3 * (1 + std::abs(ref_lse[i]))) << kernel << " " << i;
    }
  }
}

std::vector<std::string> cpu_kernels(bool decode) {
  std::vector<std::string> names;
  for (const KernelCandidate& c : kernel_candidates()) {
    if (c.backend != Backend::cpu || c.opt_in_only) continue;
    const bool is_decode = c.name.find("decode") != std::string::npos;
    if (is_decode != decode) continue;
    // Some kernels serve only some types (the VNNI build: turbo K or V); a test skips the
    // problems a kernel rejects (expect_matches_reference asks the registry first).
    AttentionProblem p, turbo;
    turbo.k_type = turbo.v_type = KvType::turbo3;
    if (select_kernel(p, {.force = c.name, .read_environment = false}).ok() ||
        select_kernel(turbo, {.force = c.name, .read_environment = false}).ok())
      names.push_back(c.name);
  }
  return names;
}

// The portable kernels warn (once per process, on stderr, from their plan) only where nothing
// faster exists: neither AVX2 nor AVX-512 in the processor, or neither built.
TEST(CpuAttention, PortableOnlyMachinesAreWarned) {
  EXPECT_FALSE(cpu::portable_only_warning(true, true).has_value());
  const std::optional<std::string> no_isa = cpu::portable_only_warning(true, false);
  ASSERT_TRUE(no_isa.has_value());
  EXPECT_NE(no_isa->find("this processor lacks AVX2"), std::string::npos) << *no_isa;
  EXPECT_EQ(no_isa->find("not written"), std::string::npos) << *no_isa;  // NEON exists (issue 44)
  EXPECT_EQ(no_isa->rfind("kvflash: warning: ", 0), 0u) << *no_isa;
  const std::optional<std::string> not_built = cpu::portable_only_warning(false, false);
  ASSERT_TRUE(not_built.has_value());
  EXPECT_NE(not_built->find("built without the AVX2, AVX-512 and NEON kernels"), std::string::npos)
      << *not_built;
}

TEST(CpuAttention, EveryDecodeKernelEveryTypePair) {
  for (const std::string& k : cpu_kernels(true))
    for (KvType kt : kAllKvTypes)
      for (KvType vt : {KvType::f16, KvType::q4_0, KvType::turbo3, kt}) {
        AttentionProblem p;
        p.n_q_heads = 8;
        p.n_kv_heads = 2;
        p.kv_capacity = 300;
        p.k_type = kt;
        p.v_type = vt;
        Inputs in = make_inputs(p, 7);
        expect_matches_reference(in, k);
      }
}

// The decode kernel has two paths: 1, 2 or 4 rows per KV head with whole 32-value units decode
// K and V straight into registers (a group of R rows, 16 / R keys at a time; turbo group by
// group), anything else goes through dequantized tiles. Every row count and head-dim shape of
// both, every K type, with a partial last chunk of keys.
TEST(CpuAttention, DecodeEveryRowCountAndHeadDimShape) {
  const std::pair<int32_t, int32_t> heads[] = {{1, 1}, {2, 1}, {4, 1}, {3, 1}, {8, 1}, {8, 2}};
  const HeadDims dims[] = {{64, 64}, {96, 96}, {80, 80}, {256, 256}, {576, 512}};
  for (const std::string& k : cpu_kernels(true))
    for (auto [hq, hkv] : heads)
      for (HeadDims d : dims)
        for (KvType kt : kAllKvTypes) {
          AttentionProblem p;
          p.n_q_heads = hq;
          p.n_kv_heads = hkv;
          p.kv_capacity = 100;  // three whole chunks of 32 keys and 4 keys
          p.head_dim = d;
          p.k_type = kt;
          p.v_type = kAllKvTypes[(static_cast<size_t>(kt) + hq) % std::size(kAllKvTypes)];
          Inputs in = make_inputs(p, 13 + hq);
          expect_matches_reference(in, k, 1);
        }
}

// Rows of the fused path can be several query tokens (2 tokens x GQA 2, 4 tokens x MHA): each
// row sees its own causal range, with windows, masks and ALiBi, over a partial last chunk.
TEST(CpuAttention, FusedDecodeWithSeveralQueryTokens) {
  for (const std::string& k : cpu_kernels(true))
    for (auto [tokens, hq, hkv] : {std::tuple{2, 4, 2}, {4, 2, 2}, {2, 2, 2}})
      for (KvType kt : {KvType::f16, KvType::q4_0, KvType::turbo3, KvType::turbo4}) {
        AttentionProblem p;
        p.n_q_tokens = tokens;
        p.n_q_heads = hq;
        p.n_kv_heads = hkv;
        p.kv_capacity = 77;
        p.k_type = kt;
        p.v_type = kt == KvType::q4_0 ? KvType::turbo2 : kt;
        p.has_mask = p.has_alibi = p.has_sinks = true;
        p.window = 40;
        Inputs in = make_inputs(p, 29);
        expect_matches_reference(in, k, 1);
      }
}

TEST(CpuAttention, PrefillCausalWithEveryFeature) {
  for (const std::string& k : cpu_kernels(false)) {
    AttentionProblem p;
    p.n_q_heads = 6;
    p.n_kv_heads = 2;
    p.n_q_tokens = 40;
    p.kv_capacity = 170;
    p.head_dim = {192, 128};
    p.k_type = KvType::q8_0;
    p.v_type = KvType::turbo4;
    p.has_mask = p.has_sinks = p.has_alibi = true;
    p.window = 50;
    p.softcap = 5.0f;
    Inputs in = make_inputs(p, 11);
    expect_matches_reference(in, k);
  }
}

TEST(CpuAttention, SplitsAndRaggedBatchWithEmptyQueries) {
  for (const std::string& k : cpu_kernels(true)) {
    AttentionProblem p;
    p.n_seqs = 3;
    p.n_q_heads = 4;
    p.n_kv_heads = 1;
    p.n_q_tokens = 4;
    p.kv_capacity = 5000;  // split across threads
    p.head_dim = {80, 80};
    p.k_type = KvType::q4_0;
    p.v_type = KvType::q8_0;
    Inputs in = make_inputs(p, 3);
    in.lens = {5000, 2, 777};  // sequence 1 is shorter than its query tokens: 2 queries see nothing
    expect_matches_reference(in, k, 2);
    expect_matches_reference(in, k, 1);
  }
}

// Ragged query counts: sequence s has q_lens[s] queries (0 included), packed. Each sequence's
// rows start at its own offset and its queries sit at its own last positions, in every kernel.
Inputs ragged_inputs(AttentionProblem p, const std::vector<int32_t>& q_lens,
                     std::vector<int64_t> kv_lens, uint64_t seed) {
  p.n_seqs = static_cast<int32_t>(q_lens.size());
  p.ragged_q = true;
  Inputs in = make_inputs(p, seed);
  in.offsets = {0};
  for (int32_t n : q_lens) in.offsets.push_back(in.offsets.back() + n);
  in.lens = std::move(kv_lens);
  return in;
}

TEST(CpuAttention, RaggedDecodeEveryKernel) {
  for (const std::string& k : cpu_kernels(true))
    for (auto [hq, hkv] : {std::pair{2, 2}, {8, 2}})  // fused rows (1, 2, 4 per head) and tiles
      for (KvType kt : {KvType::f16, KvType::q4_0, KvType::turbo3}) {
        AttentionProblem p;
        p.n_q_tokens = 4;
        p.n_q_heads = hq;
        p.n_kv_heads = hkv;
        p.kv_capacity = 4200;  // 2 KV splits
        p.head_dim = {64, 64};
        p.k_type = kt;
        p.v_type = kt == KvType::q4_0 ? KvType::turbo4 : kt;
        p.has_mask = p.has_alibi = p.has_sinks = true;
        p.window = 1000;
        Inputs in = ragged_inputs(p, {1, 0, 4, 2, 3}, {4200, 17, 2, 0, 1500}, 41);
        expect_matches_reference(in, k, 2);
      }
}

TEST(CpuAttention, RaggedPrefillEveryKernel) {
  for (const std::string& k : cpu_kernels(false))
    for (bool causal : {true, false}) {
      AttentionProblem p;
      p.n_q_tokens = 100;  // tiles of 64 / group = 16 tokens: the last sequences span several
      p.n_q_heads = 8;
      p.n_kv_heads = 2;
      p.kv_capacity = 2500;
      p.head_dim = {96, 96};
      p.k_type = KvType::q8_0;
      p.v_type = KvType::turbo3;
      p.causal = causal;
      p.has_mask = p.has_sinks = p.has_alibi = true;
      p.window = 700;
      p.softcap = 30.0f;
      // Sequence 3 has more queries than keys: its first 60 sit before position 0.
      Inputs in = ragged_inputs(p, {0, 1, 7, 100, 33}, {0, 5, 2500, 40, 1234}, 43);
      expect_matches_reference(in, k, 2);
    }
}

TEST(CpuAttention, RaggedOffsetsThatBreakTheRulesAreRefused) {
  AttentionProblem p;
  p.n_q_tokens = 4;
  p.kv_capacity = 64;
  Inputs in = ragged_inputs(p, {1, 4}, {64, 64}, 47);
  std::vector<std::string> kernels = cpu_kernels(true);
  for (const std::string& k : cpu_kernels(false)) kernels.push_back(k);
  for (const std::string& k : kernels) {
    if (!select_kernel(in.p, {.force = k, .read_environment = false}).ok()) continue;
    in.offsets = {0, 1, 6};  // sequence 1: 5 queries > n_q_tokens
    std::vector<float> out, lse;
    AttentionTensors t = in.tensors(out, lse);
    const Status s = attention(in.p, t, {.select = {.force = k, .read_environment = false}});
    ASSERT_FALSE(s.ok()) << k;
    EXPECT_EQ(s.error().code, ErrorCode::invalid_argument) << k;
    EXPECT_NE(s.message().find("q_offsets[2] - q_offsets[1]=5"), std::string::npos) << s.message();
  }
}

TEST(CpuAttention, HeadDim576With512Values) {
  AttentionProblem p;
  p.n_q_heads = 16;
  p.n_kv_heads = 1;
  p.kv_capacity = 100;
  p.head_dim = {576, 512};
  p.k_type = KvType::turbo3;
  p.v_type = KvType::bf16;
  Inputs in = make_inputs(p, 5);
  for (const std::string& k : cpu_kernels(true)) expect_matches_reference(in, k);
}

TEST(CpuAttention, RepeatedRunsAreBitIdentical) {
  AttentionProblem p;
  p.kv_capacity = 3000;
  p.k_type = KvType::turbo4;
  p.v_type = KvType::q4_0;
  Inputs in = make_inputs(p, 9);
  std::vector<float> a, b, la, lb;
  AttentionTensors ta = in.tensors(a, la);
  ASSERT_TRUE(attention(p, ta, {.n_threads = 2}).ok());
  AttentionTensors tb = in.tensors(b, lb);
  ASSERT_TRUE(attention(p, tb, {.n_threads = 2}).ok());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

}  // namespace
}  // namespace kvflash
