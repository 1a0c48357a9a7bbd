#include "kvflash/device.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <utility>
#include <vector>

namespace kvflash {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

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

// Without a device every service is an error value that says why: `unsupported` and "built
// without CUDA" in a build without the CUDA backend, the CUDA runtime's own error (no device, no
// driver) in a build with it. Never a crash, never a silent success.
void expect_no_device_error(const Error& e) {
  if (e.code == ErrorCode::unsupported) {
    EXPECT_THAT(e.message, HasSubstr("kvflash was built without CUDA"));
  } else {
    EXPECT_THAT(e.code, AnyOf(ErrorCode::backend_error, ErrorCode::out_of_memory)) << e.message;
    EXPECT_THAT(e.message, HasSubstr("failed"));
  }
}

TEST(DeviceServices, WithoutADeviceEveryServiceIsAnError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  const auto buf = gpu::DeviceBuffer::allocate(1024);
  ASSERT_FALSE(buf.ok());
  expect_no_device_error(buf.error());

  const auto stream = gpu::Stream::create();
  ASSERT_FALSE(stream.ok());
  expect_no_device_error(stream.error());

  const auto pool = gpu::DevicePool::create(1 << 20, nullptr);
  ASSERT_FALSE(pool.ok());
  expect_no_device_error(pool.error());

  std::vector<uint8_t> a(64, 1), b(64, 2);
  const Status c = gpu::copy(b.data(), a.data(), a.size());
  ASSERT_FALSE(c.ok());
  expect_no_device_error(c.error());
  const Status f = gpu::fill(b.data(), 0, b.size());
  ASSERT_FALSE(f.ok());
  expect_no_device_error(f.error());
  const Status sp = gpu::spin(10.0);
  ASSERT_FALSE(sp.ok());
  expect_no_device_error(sp.error());

  bool enqueued = false;
  const auto ms = gpu::time_ms(nullptr, [&] {
    enqueued = true;
    return Status{};
  });
  EXPECT_FALSE(ms.ok());
  const auto graph = gpu::Graph::capture(nullptr, [&] {
    enqueued = true;
    return Status{};
  });
  EXPECT_FALSE(graph.ok());
  (void)enqueued;  // whether enqueue ran before the failure is not part of the contract

  // Default-constructed objects are empty and safe to destroy, move and use.
  gpu::DeviceBuffer empty_buf;
  EXPECT_EQ(empty_buf.data(), nullptr);
  EXPECT_EQ(empty_buf.size(), 0u);
  gpu::DeviceBuffer moved_buf = std::move(empty_buf);
  EXPECT_EQ(moved_buf.data(), nullptr);
  gpu::Stream empty_stream;
  EXPECT_EQ(empty_stream.handle(), nullptr);
  gpu::DevicePool empty_pool;  // no memory: every request is out of memory, naming capacity 0
  EXPECT_EQ(empty_pool.device(), -1);
  EXPECT_EQ(empty_pool.capacity(), 0u);
  const auto block = empty_pool.allocate(16);
  ASSERT_FALSE(block.ok());
  EXPECT_EQ(block.error().code, ErrorCode::out_of_memory);
  EXPECT_THAT(block.error().message, HasSubstr("0 of 0 bytes free"));
  gpu::DevicePool moved_pool = std::move(empty_pool);
  EXPECT_EQ(moved_pool.device(), -1);
  gpu::Graph empty_graph;
  EXPECT_EQ(empty_graph.kernel_nodes(), 0u);
  EXPECT_FALSE(empty_graph.launch(nullptr).ok());
}

// --- with a device ---------------------------------------------------------------------------

#define KVFLASH_REQUIRE_DEVICE() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

template <class T>
T take(Expected<T> e) {
  EXPECT_TRUE(e.ok()) << e.error().message;
  if (!e.ok()) throw std::runtime_error(e.error().message);
  return std::move(*e);
}

TEST(DeviceServices, BufferIsMovableAndSized) {
  KVFLASH_REQUIRE_DEVICE();
  gpu::DeviceBuffer a = take(gpu::DeviceBuffer::allocate(4096));
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.size(), 4096u);
  void* p = a.data();
  gpu::DeviceBuffer b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
  gpu::DeviceBuffer c = take(gpu::DeviceBuffer::allocate(16));
  c = std::move(b);  // frees c's own allocation
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), 4096u);
}

TEST(DeviceServices, AbsurdAllocationIsOutOfMemory) {
  KVFLASH_REQUIRE_DEVICE();
  const auto buf = gpu::DeviceBuffer::allocate(size_t{1} << 50);  // 1 PiB
  ASSERT_FALSE(buf.ok());
  EXPECT_EQ(buf.error().code, ErrorCode::out_of_memory) << buf.error().message;
  EXPECT_THAT(buf.error().message, HasSubstr("cudaMalloc"));
  // The failure was reported once, by the call: the last-error slot is clear again.
  EXPECT_TRUE(gpu::last_error().ok());
}

TEST(DeviceServices, CopyRoundTripAndFill) {
  KVFLASH_REQUIRE_DEVICE();
  gpu::Stream stream = take(gpu::Stream::create());
  ASSERT_NE(stream.handle(), nullptr);
  constexpr size_t kBytes = 1 << 20;
  gpu::DeviceBuffer d1 = take(gpu::DeviceBuffer::allocate(kBytes));
  gpu::DeviceBuffer d2 = take(gpu::DeviceBuffer::allocate(kBytes));
  std::vector<uint8_t> src(kBytes), back(kBytes, 0);
  std::iota(src.begin(), src.end(), uint8_t{3});

  // host -> device -> device -> host on the stream
  ASSERT_TRUE(gpu::copy(d1.data(), src.data(), kBytes, stream.handle()).ok());
  ASSERT_TRUE(gpu::copy(d2.data(), d1.data(), kBytes, stream.handle()).ok());
  ASSERT_TRUE(gpu::copy(back.data(), d2.data(), kBytes, stream.handle()).ok());
  ASSERT_TRUE(stream.synchronize().ok());
  EXPECT_EQ(back, src);

  // fill a middle range; the null stream completes before returning
  ASSERT_TRUE(gpu::fill(static_cast<uint8_t*>(d2.data()) + 100, 0xA5, 1000).ok());
  ASSERT_TRUE(gpu::copy(back.data(), d2.data(), kBytes).ok());
  for (size_t i = 0; i < kBytes; ++i)
    ASSERT_EQ(back[i], i >= 100 && i < 1100 ? uint8_t{0xA5} : src[i]) << "byte " << i;
  EXPECT_TRUE(gpu::last_error().ok());
}

TEST(DeviceServices, TimeMeasuresTheEnqueuedWorkAndPassesErrorsThrough) {
  KVFLASH_REQUIRE_DEVICE();
  gpu::Stream stream = take(gpu::Stream::create());
  constexpr size_t kBytes = size_t{64} << 20;
  gpu::DeviceBuffer d = take(gpu::DeviceBuffer::allocate(kBytes));
  const double ms = take(gpu::time_ms(
      stream.handle(), [&] { return gpu::fill(d.data(), 1, kBytes, stream.handle()); }));
  EXPECT_GT(ms, 0.0);
  EXPECT_LT(ms, 1000.0);

  const auto failed =
      gpu::time_ms(stream.handle(), [] { return Status{invalid_argument("enqueue says no")}; });
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(failed.error().message, "enqueue says no");
}

// The launch cover of kvflash-bench and kvflash-loop: the stream stays busy for the time asked
// (the device clock ticks in steps of up to a microsecond), and the host returns at once.
TEST(DeviceServices, SpinHoldsTheStreamForTheTimeAsked) {
  KVFLASH_REQUIRE_DEVICE();
  gpu::Stream stream = take(gpu::Stream::create());
  // The first launch also loads the kernel (lazy module loading), which the events would see.
  ASSERT_TRUE(gpu::spin(1.0, stream.handle()).ok());
  ASSERT_TRUE(stream.synchronize().ok());
  for (const double us : {50.0, 400.0}) {
    const double ms =
        take(gpu::time_ms(stream.handle(), [&] { return gpu::spin(us, stream.handle()); }));
    EXPECT_GE(ms * 1e3, us - 2.0) << us;
    EXPECT_LT(ms * 1e3, us + 500.0) << us;
  }
  EXPECT_TRUE(gpu::spin(0.0, stream.handle()).ok());
  EXPECT_TRUE(stream.synchronize().ok());
}

TEST(DeviceServices, CapturedFillAndCopyReplay) {
  KVFLASH_REQUIRE_DEVICE();
  gpu::Stream stream = take(gpu::Stream::create());
  constexpr size_t kBytes = 1 << 16;
  gpu::DeviceBuffer a = take(gpu::DeviceBuffer::allocate(kBytes));
  gpu::DeviceBuffer b = take(gpu::DeviceBuffer::allocate(kBytes));
  ASSERT_TRUE(gpu::fill(a.data(), 0, kBytes, stream.handle()).ok());
  ASSERT_TRUE(gpu::fill(b.data(), 0, kBytes, stream.handle()).ok());
  ASSERT_TRUE(stream.synchronize().ok());

  gpu::Graph g = take(gpu::Graph::capture(stream.handle(), [&]() -> Status {
    if (Status s = gpu::fill(a.data(), 0x5C, kBytes, stream.handle()); !s) return s;
    return gpu::copy(b.data(), a.data(), kBytes, stream.handle());
  }));
  EXPECT_EQ(g.kernel_nodes(), 0u);  // a memset node and a memcpy node

  // Capturing enqueues nothing: b is still zero.
  std::vector<uint8_t> back(kBytes, 1);
  ASSERT_TRUE(gpu::copy(back.data(), b.data(), kBytes, stream.handle()).ok());
  ASSERT_TRUE(stream.synchronize().ok());
  EXPECT_EQ(back, std::vector<uint8_t>(kBytes, 0));

  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_TRUE(gpu::fill(b.data(), 0, kBytes, stream.handle()).ok());
    ASSERT_TRUE(g.launch(stream.handle()).ok());
    ASSERT_TRUE(gpu::copy(back.data(), b.data(), kBytes, stream.handle()).ok());
    ASSERT_TRUE(stream.synchronize().ok());
    EXPECT_EQ(back, std::vector<uint8_t>(kBytes, 0x5C)) << "replay " << replay;
  }
  gpu::Graph moved = std::move(g);
  EXPECT_TRUE(moved.launch(stream.handle()).ok());
  EXPECT_TRUE(stream.synchronize().ok());
  EXPECT_TRUE(gpu::last_error().ok());
}

TEST(DeviceServices, CaptureEndsEvenWhenEnqueueFailsOrIsIllegal) {
  KVFLASH_REQUIRE_DEVICE();
  gpu::Stream stream = take(gpu::Stream::create());
  gpu::DeviceBuffer d = take(gpu::DeviceBuffer::allocate(256));

  const auto failed = gpu::Graph::capture(stream.handle(), [&]() -> Status {
    if (Status s = gpu::fill(d.data(), 1, 256, stream.handle()); !s) return s;
    return invalid_argument("enqueue says no");
  });
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().message, "enqueue says no");

  // An allocation is illegal in global capture mode: the capture fails with an error instead of
  // recording a broken graph, even when the enqueue function ignores the failed call.
  const auto illegal = gpu::Graph::capture(stream.handle(), [&]() -> Status {
    (void)gpu::fill(d.data(), 1, 256, stream.handle());
    (void)gpu::DeviceBuffer::allocate(256);
    return {};
  });
  EXPECT_FALSE(illegal.ok());

  // Either way the capture was ended: the stream works normally again.
  std::vector<uint8_t> host(256);
  ASSERT_TRUE(gpu::fill(d.data(), 7, 256, stream.handle()).ok());
  ASSERT_TRUE(gpu::copy(host.data(), d.data(), 256, stream.handle()).ok());
  ASSERT_TRUE(stream.synchronize().ok());
  EXPECT_EQ(host, std::vector<uint8_t>(256, 7));
  EXPECT_TRUE(gpu::last_error().ok());

  // The legacy default stream cannot be captured.
  EXPECT_FALSE(gpu::Graph::capture(nullptr, [] { return Status{}; }).ok());
}

}  // namespace
}  // namespace kvflash
