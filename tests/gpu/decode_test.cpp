// The CUDA decode kernels against the float64 reference on device buffers: q tokens 1, 2, 8; GQA
// 4 and 8; head dims 64, 128, 256, 512, 576/512; f16, q8_0, q4_0, turbo, fp8 (with k_scale and
// v_scale away from 1) and mixed q8_0/turbo; kv
// lengths 1 ... 70,000, a free batch slot (kv_len 0) and a sequence shorter than its queries.
// Each case plans on the CUDA backend; a case no CUDA candidate accepts is skipped, saying why.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.hpp"
#include "kvflash/formats.hpp"

namespace kvflash::gputest {
namespace {

constexpr double kNmseBound = 1e-5;

struct DecodeCase {
  int32_t n_q_tokens;
  int32_t n_q_heads;
  int32_t n_kv_heads;
  HeadDims head_dim;
  KvType k_type;
  KvType v_type;
  std::vector<int64_t> lens;  // one per sequence
  int32_t page_size = 0;      // > 0: K and V in a shuffled page table (stage_paged)
};

std::string case_name(const DecodeCase& c) {
  std::string lens;
  for (int64_t l : c.lens) lens += fmt::format("{}{}", lens.empty() ? "kv" : "_", l);
  const std::string dims = c.head_dim.k == c.head_dim.v
                               ? fmt::format("{}", c.head_dim.k)
                               : fmt::format("{}x{}", c.head_dim.k, c.head_dim.v);
  const std::string kv = c.v_type == c.k_type
                             ? std::string(to_string(c.k_type))
                             : fmt::format("{}_{}", to_string(c.k_type), to_string(c.v_type));
  const std::string paged = c.page_size > 0 ? fmt::format("_page{}", c.page_size) : "";
  return fmt::format("q{}_h{}x{}_d{}_{}_{}{}", c.n_q_tokens, c.n_q_heads, c.n_kv_heads, dims, kv,
                     lens, paged);
}

std::vector<DecodeCase> decode_cases() {
  using enum KvType;
  const HeadDims d64{64, 64}, d128{128, 128}, d256{256, 256}, d512{512, 512}, mla{576, 512};
  return {
      {1, 8, 2, d128, f16, f16, {1}},
      {1, 8, 2, d64, q4_0, q4_0, {1}},
      {1, 8, 2, d128, q8_0, q8_0, {100}},
      {1, 16, 2, d128, q4_0, q4_0, {5000}},
      {1, 8, 2, d128, turbo3, turbo3, {5000}},
      {1, 16, 2, d128, q8_0, turbo4, {70000}},
      {1, 8, 2, d128, f16, f16, {70000}},
      {2, 8, 2, d64, f16, f16, {100}},
      {2, 16, 2, d128, q8_0, q8_0, {5000}},
      {8, 8, 2, d256, q8_0, q8_0, {5000}},
      // one token, V dims split over two warps: K's dims split too, the scores exchanged
      {1, 8, 2, d256, q4_0, q4_0, {5000}},
      {1, 8, 2, d256, turbo3, turbo3, {70000}},
      {1, 8, 2, d512, q8_0, q8_0, {5000}},  // four slices
      // q8_0 K with turbo V (int8 Q.K^T): mixed types do not split K, so all 8 K blocks per warp
      {1, 8, 2, d256, q8_0, turbo3, {5000}},
      // turbo2 V by bit planes (planes_v): GQA 8 at depth with int8 Q.K^T, and the K split
      {1, 16, 2, d128, q8_0, turbo2, {70000}},
      {1, 8, 2, d256, turbo2, turbo2, {5000}},
      {1, 16, 2, d128, q4_0, turbo4, {70000}},  // q4_0 K as int8 16 (c - 8), GQA 8
      {8, 8, 2, d128, q4_0, q4_0, {100}},
      // 17-32 query rows per KV head (speculative steps of GQA 4): two 16-row M tiles, rows
      // past the last one empty (5 tokens: 20 of 32), every type family, D 128 and 256
      {8, 8, 2, d128, turbo3, turbo3, {70000}},
      {5, 8, 2, d128, q8_0, q8_0, {5000}},  // 20 rows of 32
      {8, 8, 2, d128, bf16, bf16, {2049}},
      {8, 8, 2, d128, turbo2, turbo2, {4865}},
      {8, 8, 2, d256, turbo4, turbo4, {5000}},
      {6, 16, 4, d128, f16, f16, {70000}},
      {1, 8, 1, mla, f16, f16, {5000}},
      {2, 8, 1, mla, q8_0, q8_0, {1000}},
      // fp8 (issue 43): both kinds, one and eight tokens, GQA 8, D 64 to 576/512, at depth
      {1, 8, 2, d128, fp8_e4m3, fp8_e4m3, {5000}},
      {1, 16, 2, d128, fp8_e5m2, fp8_e5m2, {70000}},
      {1, 16, 2, d128, fp8_e4m3, fp8_e4m3, {70000}},
      {8, 8, 2, d128, fp8_e5m2, fp8_e5m2, {5000}},
      {8, 8, 2, d256, fp8_e4m3, fp8_e4m3, {5000}},
      {1, 8, 2, d256, fp8_e5m2, fp8_e5m2, {5000}},
      {2, 8, 2, d64, fp8_e4m3, fp8_e4m3, {100}},
      {2, 8, 1, mla, fp8_e4m3, fp8_e4m3, {1000}},
      {24, 8, 2, d128, fp8_e4m3, fp8_e4m3, {5000, 17}},
      // short chunks (9-32 tokens, forced: routing.hpp gives them to cuda.prefill): more query
      // rows than one row block holds at GQA
      // 4 (several row blocks of up to 8 M tiles), D 128 to 512, a batch whose second sequence
      // holds fewer tokens than its queries
      {9, 8, 2, d128, f16, f16, {70000}},
      {16, 8, 2, d128, q8_0, turbo3, {5000}},
      {24, 8, 2, d256, q4_0, q4_0, {5000}},
      {32, 8, 2, d128, turbo3, turbo3, {20000, 17}},
      {32, 8, 2, d512, q8_0, q8_0, {3000}},
      {17, 32, 8, d128, bf16, bf16, {4865}},
      // a free batch slot: the second sequence holds nothing (zeros, lse -inf)
      {1, 8, 2, d128, q8_0, q8_0, {100, 0}},
      // the second sequence holds fewer tokens than there are queries: under the causal mask its
      // first queries see nothing
      {8, 8, 2, d128, f16, f16, {5000, 3}},
  };
}

// Paged caches: shuffled tables over a pool with spare NaN pages, pages shorter and longer than a
// tile (1 to 256 tokens, one not a power of two), 16-byte rows, rows with a lead and rows the
// general copy path reads (q4_0 at D 64: 36-byte rows), one to eight tokens, the K split, splits
// of a long sequence, a batch.
std::vector<DecodeCase> paged_cases() {
  using enum KvType;
  const HeadDims d64{64, 64}, d128{128, 128}, d256{256, 256};
  std::vector<DecodeCase> out = {
      {1, 8, 2, d128, f16, f16, {70000}},
      {1, 16, 2, d128, q8_0, q8_0, {5000}},
      {1, 8, 2, d128, q4_0, q4_0, {70000}},
      {1, 16, 2, d128, q8_0, turbo3, {70000}},
      {8, 8, 2, d128, bf16, bf16, {4865}},
      {1, 8, 2, d256, turbo3, turbo3, {5000}},
      {1, 8, 2, d64, q4_0, q4_0, {5000}},
      {2, 16, 2, d128, turbo2, turbo2, {5000, 77}},
      {1, 8, 2, d128, q4_0, turbo4, {3000, 0, 1}},
      {1, 8, 2, d128, fp8_e4m3, fp8_e4m3, {70000}},
      // fp8's paged twin (kPagedTwinTypes): both kinds, two n-tiles, the K split, pages of 1 and
      // 7, a batch of lengths
      {8, 8, 2, d128, fp8_e5m2, fp8_e5m2, {4865}},
      {1, 8, 2, d256, fp8_e4m3, fp8_e4m3, {5000}},
      {2, 16, 2, d64, fp8_e5m2, fp8_e5m2, {3000, 77, 1}},
  };
  const int32_t pages[] = {16, 64, 256, 7, 1, 16, 16, 32, 16, 16, 1, 16, 7};
  for (size_t i = 0; i < out.size(); ++i) out[i].page_size = pages[i];
  return out;
}

// What gtest (and CTest's test list) shows for a case: its name, not its bytes.
void PrintTo(const DecodeCase& c, std::ostream* os) {
  *os << case_name(c);
}

class CudaDecode : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(CudaDecode, MatchesTheFloat64Reference) {
  KVFLASH_REQUIRE_GPU();
  const DecodeCase& c = GetParam();
  KVFLASH_REQUIRE_PAIR(c.k_type, c.v_type);
  std::vector<int64_t> lens = c.lens;
  for (int64_t& l : lens) l = quick_len(l);
  AttentionProblem p;
  p.n_seqs = static_cast<int32_t>(lens.size());
  p.n_q_tokens = c.n_q_tokens;
  p.n_q_heads = c.n_q_heads;
  p.n_kv_heads = c.n_kv_heads;
  p.head_dim = c.head_dim;
  p.k_type = c.k_type;
  p.v_type = c.v_type;
  // fp8 rows hold K / k_scale and V / v_scale: scales away from 1, so that a kernel that drops
  // either is caught
  if (is_fp8(c.k_type)) p.k_scale = 0.75f;
  if (is_fp8(c.v_type)) p.v_scale = 2.5f;
  p.kv_capacity = std::max<int64_t>(1, *std::max_element(lens.begin(), lens.end()));
  AttentionProblem run_p = p;  // p: contiguous, the reference's layout
  run_p.page_size = c.page_size;

  // Forced: from 5 (f16 / bf16) or 9 query tokens the registry takes cuda.prefill
  // (common/routing.hpp); cuda.decode serves up to 32 and is tested over all of them.
  const Expected<Plan> pl = plan_cuda(run_p, "cuda.decode");
  if (!pl && pl.error().code == ErrorCode::unsupported)
    GTEST_SKIP() << "no CUDA candidate accepts " << describe(p) << ": "
                 << pl.error().message.substr(0, pl.error().message.find('\n'));
  ASSERT_TRUE(pl.ok()) << pl.error().message;

  const HostInputs in = make_inputs(p, lens, std::hash<std::string>{}(case_name(c)));
  Reference ref;
  KVFLASH_ASSIGN_OR_FAIL(ref, reference(in));
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  DeviceInputs dev;
  KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, stream.handle()));
  AttentionTensors t = dev.tensors;
  PagedKv paged;
  if (c.page_size > 0) {
    KVFLASH_ASSIGN_OR_FAIL(paged, stage_paged(in, c.page_size, 7, stream.handle()));
    t.k = paged.k_tensor;
    t.v = paged.v_tensor;
  }
  DeviceOutputs o;
  KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(*pl, stream.handle()));

  KVFLASH_ASSERT_OK(run(*pl, with_outputs(t, o), o.workspace.data(), stream.handle()));
  HostOutputs got;
  KVFLASH_ASSIGN_OR_FAIL(got, read_outputs(o, stream));
  KVFLASH_ASSERT_OK(gpu::last_error());
  std::string guards;
  KVFLASH_ASSIGN_OR_FAIL(guards, o.check_guards(stream));
  EXPECT_EQ(guards, "") << pl->kernel->name;

  const Comparison cmp = compare(p, got, ref);
  EXPECT_EQ(cmp.non_finite, 0) << pl->kernel->name << ": " << cmp.summary();
  EXPECT_EQ(cmp.empty_rows_not_zero, 0) << pl->kernel->name << ": " << cmp.summary();
  EXPECT_LE(cmp.nmse, kNmseBound) << pl->kernel->name << ": " << cmp.summary();
  EXPECT_EQ(cmp.lse_bad, 0) << pl->kernel->name << ": " << cmp.summary();
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaDecode, ::testing::ValuesIn(decode_cases()),
                         [](const ::testing::TestParamInfo<DecodeCase>& param_info) {
                           return case_name(param_info.param);
                         });
INSTANTIATE_TEST_SUITE_P(Paged, CudaDecode, ::testing::ValuesIn(paged_cases()),
                         [](const ::testing::TestParamInfo<DecodeCase>& param_info) {
                           return case_name(param_info.param);
                         });

// Lengths live on the device, where the host cannot check them without a sync. One outside 0 ..
// kv_capacity (an engine's bug) must read nothing past the cache (compute-sanitizer memcheck runs
// this test; the bad sequence is the last one, so a read past its capacity leaves the buffer) and
// make that sequence's out and lse NaN, a failure the caller sees, while the other sequence stays
// exact. With and without the split merge (capacity 3000: splits; 64: one split).
TEST(CudaDecodeLengths, OutsideTheCapacityGiveNaNRowsAndReadNothingPastTheCache) {
  KVFLASH_REQUIRE_GPU();
  using enum KvType;
  const std::pair<KvType, KvType> types[] = {{f16, f16}, {q4_0, q4_0}, {q8_0, turbo3}};
  for (const auto& [kt, vt] : types)
    for (const int64_t cap : {int64_t{3000}, int64_t{64}})
      for (const int64_t bad : {int64_t{-1}, cap + 1, int64_t{1} << 40}) {
        SCOPED_TRACE(
            fmt::format("{}/{} capacity {} length {}", to_string(kt), to_string(vt), cap, bad));
        AttentionProblem p;
        p.n_seqs = 2;
        p.n_q_tokens = 1;
        p.n_q_heads = 8;
        p.n_kv_heads = 2;
        p.head_dim = {128, 128};
        p.k_type = kt;
        p.v_type = vt;
        p.kv_capacity = cap;
        const Expected<Plan> pl = plan_cuda(p);
        ASSERT_TRUE(pl.ok()) << pl.error().message;
        HostInputs in = make_inputs(p, {cap / 2, cap}, 77 + static_cast<uint64_t>(cap));
        Reference ref;
        KVFLASH_ASSIGN_OR_FAIL(ref, reference(in));  // sequence 0's rows are the ones checked
        in.kv_lens[1] = bad;
        gpu::Stream stream;
        KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
        DeviceInputs dev;
        KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, stream.handle()));
        DeviceOutputs o;
        KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(*pl, stream.handle()));
        KVFLASH_ASSERT_OK(
            run(*pl, with_outputs(dev.tensors, o), o.workspace.data(), stream.handle()));
        HostOutputs got;
        KVFLASH_ASSIGN_OR_FAIL(got, read_outputs(o, stream));
        KVFLASH_ASSERT_OK(gpu::last_error());
        std::string guards;
        KVFLASH_ASSIGN_OR_FAIL(guards, o.check_guards(stream));
        EXPECT_EQ(guards, "");

        const size_t rows = static_cast<size_t>(p.n_q_tokens) * p.n_q_heads;  // per sequence
        const size_t dv = static_cast<size_t>(p.head_dim.v);
        double err = 0.0, sig = 0.0;
        for (size_t i = 0; i < rows * dv; ++i) {
          const double d = double{got.out[i]} - ref.out[i];
          err += d * d;
          sig += ref.out[i] * ref.out[i];
        }
        EXPECT_LE(err / sig, kNmseBound) << "the sequence of valid length";
        int64_t not_nan = 0;
        for (size_t i = rows * dv; i < 2 * rows * dv; ++i) not_nan += !std::isnan(got.out[i]);
        for (size_t r = rows; r < 2 * rows; ++r) not_nan += !std::isnan(got.lse[r]);
        EXPECT_EQ(not_nan, 0) << "outputs and lse of the sequence of length " << bad;
      }
}

// The plan carries everything run() needs but the tensors; what run() needs of their layout
// (here: f16 rows copied in 16-byte units need a 16-byte aligned data pointer) is part of
// validate(plan, tensors), so run() refuses nothing that passes it, and refuses what fails it
// with the same message before launching anything.
TEST(CudaDecodePlan, ValidateOfThePlanStatesTheLayoutRunNeeds) {
  KVFLASH_REQUIRE_GPU();
  AttentionProblem p;
  p.n_q_heads = 8;
  p.n_kv_heads = 2;
  p.head_dim = {128, 128};
  p.k_type = KvType::f16;
  p.v_type = KvType::f16;  // a pair every build compiles
  p.kv_capacity = 512;
  const Expected<Plan> pl = plan_cuda(p);
  ASSERT_TRUE(pl.ok()) << pl.error().message;
  ASSERT_NE(pl->detail, nullptr) << "the CUDA plan carries its layout and launch";
  const HostInputs in = make_inputs(p, {512}, 5);
  gpu::Stream stream;
  KVFLASH_ASSIGN_OR_FAIL(stream, gpu::Stream::create());
  DeviceInputs dev;
  KVFLASH_ASSIGN_OR_FAIL(dev, stage(in, stream.handle()));
  DeviceOutputs o;
  KVFLASH_ASSIGN_OR_FAIL(o, allocate_outputs(*pl, stream.handle()));
  const AttentionTensors good = with_outputs(dev.tensors, o);
  KVFLASH_ASSERT_OK(validate(*pl, good));
  KVFLASH_ASSERT_OK(run(*pl, good, o.workspace.data(), stream.handle()));

  AttentionTensors shifted = good;  // K's rows 2 bytes off their 16-byte alignment
  shifted.k.data = static_cast<const uint8_t*>(good.k.data) + 2;
  shifted.k.stride_seq = 0;
  const Status v = validate(*pl, shifted);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(v.error().message.find("16 bytes"), std::string::npos) << v.error().message;
  const Status r = run(*pl, shifted, o.workspace.data(), stream.handle());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, v.error().message);

  AttentionTensors no_lens = good;
  no_lens.kv_lens = nullptr;
  EXPECT_EQ(validate(*pl, no_lens).error().code, ErrorCode::invalid_argument);
  KVFLASH_ASSERT_OK(stream.synchronize());
  KVFLASH_ASSERT_OK(gpu::last_error());
}

}  // namespace
}  // namespace kvflash::gputest
