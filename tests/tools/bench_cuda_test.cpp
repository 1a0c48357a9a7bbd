// kvflash-bench on the CUDA backend: the rotation of KV copies past the GPU's L2, the refusal
// without a device, and (on a GPU machine) a small sweep timed with CUDA events.
#include <gtest/gtest.h>

#include <string>

#include "bench/options.hpp"
#include "bench/runner.hpp"
#include "bench_test_util.hpp"
#include "kvflash/device.hpp"
#include "kvflash/registry.hpp"

namespace kvflash::bench {
namespace {

using testing::quick;
using testing::run_tool;

bool has_cuda_kernels() {
  for (const KernelCandidate& c : kernel_candidates())
    if (c.backend == Backend::cuda) return true;
  return false;
}

TEST(BenchCuda, RotationCopiesHoldFourL2sInAtLeastTwoCopies) {
  const int64_t mib = 1 << 20;
  EXPECT_EQ(kGpuRotationBytes, 240 * mib);
  EXPECT_EQ(gpu_rotation_copies(1 * mib), 240);          // 4 x L2 / copy
  EXPECT_EQ(gpu_rotation_copies(100 * mib), 3);          // rounded up: 300 MiB >= 240 MiB
  EXPECT_EQ(gpu_rotation_copies(240 * mib), 2);          // at least two, even when one would do
  EXPECT_EQ(gpu_rotation_copies(1024 * mib), 2);         //
  EXPECT_EQ(gpu_rotation_copies(3 * 1024 * mib), 2);     // 6 GiB: still under the 8 GiB cap
  EXPECT_EQ(gpu_rotation_copies(5 * 1024 * mib), 1);     // two would pass 8 GiB
  EXPECT_EQ(gpu_rotation_copies(20 * 1024 * mib), 1);    // at least one
  EXPECT_EQ(gpu_rotation_copies(0), kGpuRotationBytes);  // a degenerate size counts as 1 byte
  for (int64_t bytes : {int64_t{1}, 4096 * int64_t{1}, 7 * mib, 333 * mib, 4096 * mib}) {
    const int64_t n = gpu_rotation_copies(bytes);
    EXPECT_LE(n * bytes, kGpuMaxInputBytes) << bytes;
    if (2 * bytes <= kGpuMaxInputBytes) {
      EXPECT_GE(n, 2) << bytes;
      EXPECT_GE(n * bytes, std::min(kGpuRotationBytes, kGpuMaxInputBytes)) << bytes;
    }
  }
}

TEST(BenchCuda, WithoutADeviceSaysSoAndFails) {
  if (!has_cuda_kernels()) GTEST_SKIP() << "this build has no CUDA kernels";
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  const auto r = run_tool(quick({"--backend", "cuda", "-d", "64"}));
  EXPECT_EQ(r.rc, kExitFailure);
  EXPECT_NE(r.err.find("no CUDA device"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(BenchCuda, SmallSweepIsTimedOnTheDevice) {
  if (!has_cuda_kernels()) GTEST_SKIP() << "this build has no CUDA kernels";
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto r = run_tool(
      quick({"--backend", "cuda", "-ctk", "f16,q8_0", "-d", "4096", "-r", "3", "-o", "csv"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("cuda."), std::string::npos) << r.out;  // the kernel column names it
}

}  // namespace
}  // namespace kvflash::bench
