#include "kvflash/device.hpp"

#include <gtest/gtest.h>

namespace kvflash {
namespace {

// Without a device (or without the CUDA backend) the probe answers "unknown", never fails; with
// one it measures the streaming-read roofline (an H200 reads about 4,500 GB/s).
TEST(Device, ReadBandwidthIsMeasuredOnlyWhereADeviceExists) {
  const auto bw = cuda_read_bandwidth_gbps();
  if (cuda_device_count() == 0) {
    EXPECT_FALSE(bw.has_value());
  } else {
    ASSERT_TRUE(bw.has_value());
    EXPECT_GT(*bw, 100.0);
  }
}

}  // namespace
}  // namespace kvflash
