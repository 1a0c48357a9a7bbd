// What the benchmark needs to know about the machine: the last-level cache (inputs are rotated past
// it), the memory it may use, and the memory read bandwidth the rows are compared against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace kvflash::bench {

// A KV cache is one large long-lived allocation: take it 2 MiB-aligned and ask for transparent
// huge pages, as an engine would (TLB misses on 4 KiB pages otherwise cost as much as the math).
// Pages are not touched here: the first writer decides where they land.
class HugeBuffer {
 public:
  HugeBuffer() = default;
  explicit HugeBuffer(size_t bytes);
  HugeBuffer(HugeBuffer&& o) noexcept;
  HugeBuffer& operator=(HugeBuffer&& o) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer();
  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

// sysconf's L3 (or L2), at least 32 MiB: a VM may report less than the host has.
int64_t last_level_cache_bytes();
// MemAvailable from /proc/meminfo, or nullopt where it cannot be read.
std::optional<int64_t> mem_available_bytes();
// "model name" from /proc/cpuinfo, or "unknown cpu".
std::string cpu_name();

// Streams once through `bytes` of `buf` with `threads` threads (each its own slice) and returns
// the seconds it took. Used to measure bandwidth and, between setup and timing, to evict the
// benchmark's inputs from the caches.
double stream_read(const HugeBuffer& buf, size_t bytes, int threads);

struct ReadBandwidth {
  double gbps = 0;  // best of the passes, 1e9 bytes per second
  size_t bytes = 0;
  int threads = 0;
  int passes = 0;
};
// Multithreaded streaming read over buf (which must be larger than the last-level cache, and is
// written once first so its pages exist), best of `passes`.
ReadBandwidth measure_cpu_read_bandwidth(const HugeBuffer& buf, int threads, int passes = 5);

// GPU streaming-read bandwidth of the device the CUDA backend runs on. The measurement (a
// bandwidth-bound read kernel timed with events after warm-up) belongs with the CUDA backend,
// which has none yet; until it does this returns nullopt and the tool prints "n/a".
std::optional<double> measure_gpu_read_bandwidth();

}  // namespace kvflash::bench
