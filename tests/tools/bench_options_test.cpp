// kvflash-bench's command line: defaults, lists, the K/V pair rule, and that every bad value is
// refused with exit code 2 and a message naming the flag and what is allowed.
#include <gtest/gtest.h>

#include <sstream>

#include "bench/options.hpp"
#include "bench_test_util.hpp"
#include "kvflash/registry.hpp"

namespace kvflash::bench {
namespace {

using testing::run_tool;

ParseResult parse(std::vector<std::string> args, std::string* err_text = nullptr) {
  args.insert(args.begin(), "kvflash-bench");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  ParseResult r = parse_options(static_cast<int>(argv.size()), argv.data(), out, err);
  if (err_text) *err_text = err.str();
  return r;
}

TEST(BenchOptions, Defaults) {
  const ParseResult r = parse({});
  ASSERT_TRUE(r.options);
  const BenchOptions& o = *r.options;
  EXPECT_EQ(o.backend, BackendChoice::best);
  EXPECT_EQ(o.pairs.size(), 4u);  // f16, q8_0, q4_0, turbo3 on the diagonal
  EXPECT_EQ(o.heads, (std::vector<std::pair<int32_t, int32_t>>{{32, 8}}));
  EXPECT_EQ(o.head_dims, (std::vector<HeadDims>{{128, 128}}));
  EXPECT_EQ(o.n_q, std::vector<int32_t>{1});
  EXPECT_EQ(o.batch, std::vector<int32_t>{1});
  EXPECT_TRUE(o.threads.empty());
  EXPECT_EQ(o.reps, 5);
  EXPECT_EQ(o.warmup, 1);
  EXPECT_EQ(o.format, tools::OutputFormat::md);
}

TEST(BenchOptions, ListsRangesAndRepeatedFlags) {
  const ParseResult r =
      parse({"-d",         "1024-8192*2", "-d",        "100",     "--heads",  "32/8,64/64",
             "--head-dim", "128,576/512", "-n",        "1,4,512", "-b",       "2",
             "-t",         "1,2",         "-r",        "3",       "--warmup", "0",
             "-o",         "json",        "--backend", "cpu",     "--seed",   "7"});
  ASSERT_TRUE(r.options);
  const BenchOptions& o = *r.options;
  EXPECT_EQ(o.depths, (std::vector<int64_t>{1024, 2048, 4096, 8192, 100}));
  EXPECT_EQ(o.heads.size(), 2u);
  EXPECT_EQ(o.head_dims[1], (HeadDims{576, 512}));
  EXPECT_EQ(o.n_q, (std::vector<int32_t>{1, 4, 512}));
  EXPECT_EQ(o.batch, std::vector<int32_t>{2});
  EXPECT_EQ(o.threads, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(o.reps, 3);
  EXPECT_EQ(o.warmup, 0);
  EXPECT_EQ(o.format, tools::OutputFormat::json);
  EXPECT_EQ(o.backend, BackendChoice::cpu);
  EXPECT_EQ(o.seed, 7u);
}

TEST(BenchOptions, PageSizesTakeZeroForContiguous) {
  EXPECT_EQ(parse({}).options->page_sizes, std::vector<int32_t>{0});
  const ParseResult r = parse({"--page-size", "0,16-64*2", "--page-size", "7"});
  ASSERT_TRUE(r.options);
  EXPECT_EQ(r.options->page_sizes, (std::vector<int32_t>{0, 16, 32, 64, 7}));
  const ParseResult bad = parse({"--page-size", "-3"});
  EXPECT_FALSE(bad.options);
  EXPECT_EQ(bad.exit_code, kExitUsage);
}

TEST(BenchOptions, RaggedBatchListOrPreset) {
  EXPECT_TRUE(parse({}).options->ragged.empty());
  const ParseResult r = parse({"--ragged", "1:4096,0:10,512:512"});
  ASSERT_TRUE(r.options);
  EXPECT_EQ(r.options->ragged.q_lens, (std::vector<int32_t>{1, 0, 512}));
  EXPECT_EQ(r.options->ragged.kv_lens, (std::vector<int64_t>{4096, 10, 512}));
  const ParseResult serving = parse({"--ragged", "serving256"});
  ASSERT_TRUE(serving.options);
  EXPECT_EQ(serving.options->ragged.kv_lens, serving_batch(256, 1024, 4096).kv_lens);
  const ParseResult preset = parse({"--ragged", "issue39"});
  ASSERT_TRUE(preset.options);
  EXPECT_EQ(preset.options->ragged.q_lens, issue39_batch().q_lens);
  for (const char* bad : {"5:4", "1:0", "x:3", "3", "1:2:3", "-1:5"}) {
    std::string err;
    const ParseResult b = parse({"--ragged", bad}, &err);
    EXPECT_FALSE(b.options) << bad;
    EXPECT_EQ(b.exit_code, kExitUsage) << bad;
    EXPECT_NE(err.find("--ragged"), std::string::npos) << err;
    EXPECT_NE(err.find("QUERIES <= TOKENS"), std::string::npos) << err;
  }
}

TEST(BenchOptions, KvPairsDiagonalOrEveryPair) {
  auto only_k = parse({"-ctk", "f16,q4_0"});
  ASSERT_TRUE(only_k.options);
  ASSERT_EQ(only_k.options->pairs.size(), 2u);
  EXPECT_EQ(only_k.options->pairs[1].k, KvType::q4_0);
  EXPECT_EQ(only_k.options->pairs[1].v, KvType::q4_0);

  auto only_v = parse({"-ctv=turbo3"});
  ASSERT_TRUE(only_v.options);
  ASSERT_EQ(only_v.options->pairs.size(), 1u);
  EXPECT_EQ(only_v.options->pairs[0].k, KvType::turbo3);

  auto both = parse({"-ctk", "f16,q8_0", "-ctv", "q4_0,turbo3,turbo4"});
  ASSERT_TRUE(both.options);
  ASSERT_EQ(both.options->pairs.size(), 6u);
  EXPECT_EQ(both.options->pairs[5].k, KvType::q8_0);
  EXPECT_EQ(both.options->pairs[5].v, KvType::turbo4);
}

struct BadCase {
  std::vector<std::string> args;
  std::string flag;     // the message must name it
  std::string allowed;  // and say what is allowed
};

TEST(BenchOptions, BadValuesNameTheFlagAndWhatIsAllowed) {
  const std::vector<BadCase> cases = {
      {{"-d", "abc"}, "-d: 'abc'", "comma list of positive integers"},
      {{"-d", "0"}, "-d: '0'", "positive integers"},
      {{"-d", "8192-1024*2"}, "-d: '8192-1024*2'", "FIRST-LAST*FACTOR"},
      {{"-ctk", "q5_0"}, "-ctk: 'q5_0'", "f32, f16, bf16, q8_0, q4_0, turbo2, turbo3, turbo4"},
      {{"-ctv", "f16,fp8"}, "-ctv: 'fp8'", "expected one of f32"},
      {{"--heads", "32/7"}, "--heads: '32/7'", "KV_HEADS dividing QUERY_HEADS"},
      {{"--heads", "x"}, "--heads: 'x'", "QUERY_HEADS/KV_HEADS"},
      {{"--head-dim", "100"}, "--head-dim: '100'", "64 80 96 112 128 192/128 256 512 576/512"},
      {{"--head-dim", "128/64"}, "--head-dim: '128/64'", "576/512"},
      {{"-o", "xml"}, "-o: 'xml'", "md, csv or json"},
      {{"--backend", "gpu"}, "--backend: 'gpu'", "cpu, cuda or auto"},
      {{"-n", "2000000"}, "-n: '2000000'", "1 .. 1048576"},
      {{"-b", "0"}, "-b: '0'", "positive integers"},
      {{"-r", "0"}, "-r: '0'", "integer 1 .."},
      {{"--warmup", "x"}, "--warmup: 'x'", "integer 0 .."},
      {{"-t", "0"}, "-t: '0'", "positive integers"},
      {{"--plot", "speed.pdf"}, "--plot: 'speed.pdf'", ".svg or .png"},
      {{"--llc-bytes", "lots"}, "--llc-bytes: 'lots'", "80G"},
      {{"--no-such-flag"}, "--no-such-flag", "--help"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.args[0] + " " + (c.args.size() > 1 ? c.args[1] : ""));
    std::string err;
    const ParseResult r = parse(c.args, &err);
    EXPECT_FALSE(r.options);
    EXPECT_EQ(r.exit_code, kExitUsage);
    EXPECT_NE(err.find(c.flag), std::string::npos) << err;
    EXPECT_NE(err.find(c.allowed), std::string::npos) << err;
    // The tool returns the same code and prints nothing on stdout.
    const auto run = run_tool(c.args);
    EXPECT_EQ(run.rc, kExitUsage);
    EXPECT_TRUE(run.out.empty());
  }
}

TEST(BenchOptions, HelpExitsZero) {
  const auto r = run_tool({"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("--cache-type-k"), std::string::npos);
  EXPECT_NE(r.out.find("diagonal"), std::string::npos);
}

TEST(BenchOptions, PngWithoutConverterNamesThePackage) {
  if (on_path("rsvg-convert")) GTEST_SKIP() << "rsvg-convert is installed here";
  std::string err;
  const ParseResult r = parse({"--plot", "x.png"}, &err);
  EXPECT_EQ(r.exit_code, kExitUsage);
  EXPECT_NE(err.find("librsvg2-bin"), std::string::npos) << err;
}

TEST(BenchOptions, CudaWithoutKernelsSaysSoAndFails) {
  for (const KernelCandidate& c : kernel_candidates())
    if (c.backend == Backend::cuda) GTEST_SKIP() << "this build has CUDA kernels";
  const auto r = run_tool({"--backend", "cuda", "-d", "64"});
  EXPECT_EQ(r.rc, kExitFailure);
  EXPECT_NE(r.err.find("no CUDA kernel"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

}  // namespace
}  // namespace kvflash::bench
