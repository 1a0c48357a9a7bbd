// kvflash-run's command line (issue 41), in-process: a byte-token model generates from a text
// prompt in chunks with a quantized cache and reports tokens/s; the same tokens come with
// --tokens and from a file (-f), and several prompts in one run (--prompts); --backend cuda against
// the CPU where a device exists; and the errors: no model file, a text prompt for a model whose
// tokens are not bytes, a context too small, a bad cache type.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#if defined(KVFLASH_RUN_MODEL)
#include "kvflash/device.hpp"
#include "run/cli.hpp"
#include "run_test_model.hpp"

namespace kvflash::tools::run {
namespace {

struct Result {
  int code;
  std::string out, err;
};

Result run_with(std::vector<std::string> args) {
  args.insert(args.begin(), "kvflash-run");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

std::string write_model(bool byte_tokens, const std::string& name) {
  testing::Shape s;
  s.vocab = 256;
  const std::vector<uint8_t> b =
      testing::to_gguf(testing::random_model(s, 5), GgmlType::f16, byte_tokens);
  const std::string path = ::testing::TempDir() + name;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return path;
}

TEST(RunCli, GeneratesFromATextPromptAndReportsTokensPerSecond) {
  const std::string path = write_model(true, "kvflash_run_cli_bytes.gguf");
  const Result r = run_with({"-m", path, "-p", "hello, kvflash", "-n", "6", "-b", "5", "-ctk",
                             "q8_0", "-ctv", "q4_0", "--no-progress", "-t", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("prefill: 14 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("decode: 5 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("KV cache q8_0 / q4_0 (8.500 / 4.500 bits per value)"), std::string::npos)
      << r.err;
  EXPECT_FALSE(r.out.empty());
  // The prompt as ids: the same generation.
  std::string ids;
  for (unsigned char ch : std::string("hello, kvflash")) ids += std::to_string(ch) + ",";
  ids.pop_back();
  const Result t = run_with({"-m", path, "--tokens", ids, "-n", "6", "-ctk", "q8_0", "-ctv", "q4_0",
                             "--no-progress", "-t", "1"});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(t.out, r.out);
  // The prompt from a file (-f): the same generation.
  const std::string prompt_path = ::testing::TempDir() + "kvflash_run_cli_prompt.txt";
  std::ofstream(prompt_path, std::ios::binary) << "hello, kvflash";
  const Result f = run_with({"-m", path, "-f", prompt_path, "-n", "6", "-b", "5", "-ctk", "q8_0",
                             "-ctv", "q4_0", "--no-progress", "-t", "1"});
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_EQ(f.out, r.out);
  // Several prompts (--prompts, NUL-separated), each on a fresh cache: each generation as the
  // prompt's own run gives it, each ended by a NUL byte.
  const Result other = run_with({"-m", path, "-p", "kv\ncache", "-n", "6", "-ctk", "q8_0", "-ctv",
                                 "q4_0", "--no-progress", "-t", "1"});
  ASSERT_EQ(other.code, 0) << other.err;
  const std::string prompts_path = ::testing::TempDir() + "kvflash_run_cli_prompts.bin";
  std::ofstream(prompts_path, std::ios::binary) << std::string("hello, kvflash\0kv\ncache\0", 24);
  const Result m = run_with({"-m", path, "--prompts", prompts_path, "-n", "6", "-b", "5", "-ctk",
                             "q8_0", "-ctv", "q4_0", "--no-progress", "-t", "1"});
  ASSERT_EQ(m.code, 0) << m.err;
  EXPECT_EQ(m.out, r.out.substr(0, r.out.size() - 1) + '\0' +
                       other.out.substr(0, other.out.size() - 1) + '\0');
  EXPECT_NE(m.err.find("prefill: 22 tokens"), std::string::npos) << m.err;
  std::remove(prompts_path.c_str());
  std::remove(prompt_path.c_str());
  std::remove(path.c_str());
}

// --backend cuda: the cache in a gpu::KvCache and attention by the CUDA kernels. Without a device
// (or a CUDA build) a clear error; with one, the prompt's logits within f16 rounding of the CPU's.
TEST(RunCli, CudaBackendMatchesTheCpuOrSaysWhyNot) {
  const std::string path = write_model(true, "kvflash_run_cli_cuda.gguf");
  const std::string cpu_logits = ::testing::TempDir() + "kvflash_run_cli_cpu.f32",
                    cuda_logits = ::testing::TempDir() + "kvflash_run_cli_cuda.f32";
  const std::string prompt(300, 'a');
  const auto args = [&](const char* backend, const std::string& logits) {
    return std::vector<std::string>{
        "-m", path,       "-p",   prompt + "bc",   "-n",        "3",    "-b",
        "64", "--logits", logits, "--no-progress", "--backend", backend};
  };
  const Result cpu = run_with(args("cpu", cpu_logits));
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  const Result cuda = run_with(args("cuda", cuda_logits));
  if (cuda_device_count() == 0) {
    EXPECT_EQ(cuda.code, kExitFailed);
    EXPECT_NE(cuda.err.find("--backend cuda: no CUDA device"), std::string::npos) << cuda.err;
  } else {
    ASSERT_EQ(cuda.code, 0) << cuda.err;
    EXPECT_NE(cuda.err.find("tokens on cuda"), std::string::npos) << cuda.err;
    std::ifstream a(cpu_logits, std::ios::binary), b(cuda_logits, std::ios::binary);
    std::vector<float> x, y;
    for (float f; a.read(reinterpret_cast<char*>(&f), sizeof f);) x.push_back(f);
    for (float f; b.read(reinterpret_cast<char*>(&f), sizeof f);) y.push_back(f);
    ASSERT_EQ(x.size(), y.size());
    ASSERT_FALSE(x.empty());
    double err = 0.0, ref = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
      ref += double(x[i]) * x[i];
    }
    EXPECT_LT(err / ref, 1e-5) << "logits NMSE, CUDA against the CPU (f16 cache)";
  }
  const Result bad = run_with({"-m", path, "-p", "x", "--backend", "tpu"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_NE(bad.err.find("tpu"), std::string::npos) << bad.err;
  std::remove(cpu_logits.c_str());
  std::remove(cuda_logits.c_str());
  std::remove(path.c_str());
}

TEST(RunCli, RefusesWhatItCannotRun) {
  const std::string path = write_model(false, "kvflash_run_cli_ids.gguf");
  Result r = run_with({"-m", path, "-p", "text"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--tokens"), std::string::npos) << r.err;
  r = run_with({"-m", path, "--tokens", "1,2,3", "-n", "4", "-c", "5"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("-c 5"), std::string::npos) << r.err;
  r = run_with({"-m", path, "--tokens", "1,2", "-ctk", "q5_9"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("q5_9"), std::string::npos) << r.err;
  r = run_with({"-m", path, "--tokens", "1,999"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("999"), std::string::npos) << r.err;
  r = run_with({"-m", path, "--tokens", "1,2", "-f", "prompt.txt"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("one of -p, -f, --tokens and --prompts"), std::string::npos) << r.err;
  r = run_with({"-m", path, "-f", ::testing::TempDir() + "kvflash_no_such_prompt.txt"});
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_NE(r.err.find("-f: cannot read"), std::string::npos) << r.err;
  r = run_with({"-m", path, "--tokens", "1,2-5"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("2-5"), std::string::npos) << r.err;
  // Token 0 is a token like any other.
  r = run_with({"-m", path, "--tokens", "0,0,7", "-n", "2", "--no-progress"});
  EXPECT_EQ(r.code, 0) << r.err;
  std::remove(path.c_str());
  r = run_with({"-m", path, "--tokens", "1"});
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvflash::tools::run
#endif  // KVFLASH_RUN_MODEL
