// Times one benchmark point: plans the problem with the registry, lays out the inputs, rotates
// them past the last-level cache, warms up, and returns every timed call. One function per
// backend, so a backend's timing method (host clocks; CUDA events) stays with its buffers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/machine.hpp"
#include "bench/metrics.hpp"
#include "kvflash/registry.hpp"
#include "kvflash/status.hpp"

namespace kvflash::bench {

struct RunConfig {
  std::optional<Backend> backend;  // nullopt: the best candidate of any backend
  int32_t threads = 0;             // CPU threads, 0 = every hardware thread
  int32_t reps = 5;
  int32_t warmup = 1;
  uint64_t seed = 42;
  int64_t llc_bytes = 32 << 20;       // inputs rotate through copies totalling twice this
  int64_t memory_budget = 0;          // bytes one point's inputs may take, copies included
  const HugeBuffer* evict = nullptr;  // streamed through after setup, so no input starts cached
  int evict_threads = 1;
};

struct Timing {
  std::string kernel;  // the registry's choice, plan()->kernel->name
  Backend backend = Backend::cpu;
  int32_t threads = 1;     // as planned
  int64_t copies = 1;      // input copies rotated through
  std::vector<double> us;  // every timed call, sorted ascending
  int32_t splits = 1;      // KV splits per (sequence, KV head) as planned
  // CUDA: the host's time in each timed run() call (parameters, tensor maps, launches: what an
  // engine's CPU thread spends per call), sorted ascending; empty for CPU kernels, whose call is
  // the work itself.
  std::vector<double> host_us;
  // The middle call, or the mean of the two middle ones for an even count.
  double median() const { return median_of(us); }
  static double median_of(const std::vector<double>& v) {
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
};

// Errors (unsupported combination, not enough memory) come back as values, never thrown.
// A ragged batch (p from apply_ragged) passes its lengths and packed query rows.
Expected<Timing> time_point(const AttentionProblem& p, const RunConfig& cfg,
                            const RaggedBatch& ragged = {});

// How many copies of `copy_bytes` of inputs to rotate through: enough that between two uses of one
// copy more than twice the last-level cache is read, but never more than the calls made (each call
// then reads a copy untouched since the eviction pass) nor more than the budget allows.
int64_t rotation_copies(int64_t copy_bytes, int64_t llc_bytes, int64_t calls, int64_t budget);

// The CUDA runner's rotation: KV copies of `copy_bytes` each (K and V of one point) that together
// hold at least 4x the GPU's L2 (60 MB on an H200), at least 2 of them, yet never more than
// kGpuMaxInputBytes in all (one copy larger than half of it runs alone: far past the L2 anyway).
// Copies are not limited by the number of calls: the rotation must also push out of L2 the copies
// written last while uploading.
inline constexpr int64_t kGpuL2Bytes = int64_t{60} << 20;
inline constexpr int64_t kGpuRotationBytes = 4 * kGpuL2Bytes;
inline constexpr int64_t kGpuMaxInputBytes = int64_t{8} << 30;
int64_t gpu_rotation_copies(int64_t copy_bytes);

}  // namespace kvflash::bench
