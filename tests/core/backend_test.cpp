#include "core/backend.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "kvflash/device.hpp"
#include "kvflash/registry.hpp"

namespace kvflash {
namespace {

// The registry and kvflash::gpu reach the backends only through built_backends(), so what it lists
// is what this build holds. The CPU backend is always built and registers first (ties in priority
// keep registration order); its kernels run on its own thread pool and it has no device.
TEST(BuiltBackends, CpuIsFirstWithHostThreadsAndNoDevice) {
  const auto backends = built_backends();
  ASSERT_FALSE(backends.empty());
  const BackendEntry& cpu = *backends[0];
  EXPECT_EQ(cpu.id, Backend::cpu);
  ASSERT_NE(cpu.host_threads, nullptr);
  EXPECT_GE(cpu.host_threads(), 1);
  EXPECT_EQ(cpu.device, nullptr);
}

// Each backend appears once, registers at least one candidate, and every candidate belongs to a
// built backend.
TEST(BuiltBackends, EveryCandidateComesFromABuiltBackend) {
  const auto backends = built_backends();
  for (const BackendEntry* b : backends) {
    ASSERT_NE(b->register_kernels, nullptr) << to_string(b->id);
    EXPECT_EQ(std::count_if(backends.begin(), backends.end(),
                            [&](const BackendEntry* o) { return o->id == b->id; }),
              1)
        << to_string(b->id);
    const auto& all = kernel_candidates();
    EXPECT_TRUE(std::any_of(all.begin(), all.end(),
                            [&](const KernelCandidate& c) { return c.backend == b->id; }))
        << to_string(b->id) << " registers no candidate";
  }
  for (const KernelCandidate& c : kernel_candidates())
    EXPECT_TRUE(std::any_of(backends.begin(), backends.end(), [&](const BackendEntry* b) {
      return b->id == c.backend;
    })) << c.name;
}

// kvflash::gpu goes through the one backend with device services (their handles are CUDA's), with
// every service set: a missing one would be a null call, not an error value.
TEST(BuiltBackends, DeviceServicesComeFromTheOneBackendThatHasThem) {
  const auto backends = built_backends();
  const auto with_device = std::count_if(
      backends.begin(), backends.end(), [](const BackendEntry* b) { return b->device != nullptr; });
  EXPECT_LE(with_device, 1);
  const DeviceServices* d = device_services();
  ASSERT_EQ(d != nullptr, with_device == 1);
  if (d == nullptr) {
    EXPECT_EQ(cuda_device_count(), 0);
    return;
  }
  EXPECT_NE(d->device_count, nullptr);
  EXPECT_NE(d->read_bandwidth_gbps, nullptr);
  EXPECT_NE(d->current_device, nullptr);
  EXPECT_NE(d->malloc_device, nullptr);
  EXPECT_NE(d->free_device, nullptr);
  EXPECT_NE(d->create_stream, nullptr);
  EXPECT_NE(d->destroy_stream, nullptr);
  EXPECT_NE(d->synchronize_stream, nullptr);
  EXPECT_NE(d->copy, nullptr);
  EXPECT_NE(d->fill, nullptr);
  EXPECT_NE(d->spin, nullptr);
  EXPECT_NE(d->time_ms, nullptr);
  EXPECT_NE(d->capture_graph, nullptr);
  EXPECT_NE(d->launch_graph, nullptr);
  EXPECT_NE(d->destroy_graph, nullptr);
  EXPECT_NE(d->last_error, nullptr);
  EXPECT_NE(d->quantize_rows, nullptr);
  EXPECT_NE(d->append_rows, nullptr);
  EXPECT_NE(d->advance_lengths, nullptr);
  EXPECT_NE(d->memory_info, nullptr);
}

}  // namespace
}  // namespace kvflash
