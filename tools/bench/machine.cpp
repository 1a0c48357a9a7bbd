#include "bench/machine.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "kvflash/device.hpp"

namespace kvflash::bench {
namespace {

constexpr size_t kHuge = size_t{2} << 20;

// Keeps the sums alive so the reads are not optimized away.
std::atomic<uint64_t> g_sink{0};

// Four independent sums let the compiler vectorize and keep several loads in flight.
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
}

}  // namespace

HugeBuffer::HugeBuffer(size_t bytes) : bytes_(bytes) {
  const size_t rounded = std::max<size_t>(1, (bytes + kHuge - 1) / kHuge) * kHuge;
  data_ = static_cast<uint8_t*>(std::aligned_alloc(kHuge, rounded));
  if (data_ == nullptr) bytes_ = 0;
#if defined(MADV_HUGEPAGE)
  else
    madvise(data_, rounded, MADV_HUGEPAGE);
#endif
}

HugeBuffer::HugeBuffer(HugeBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

HugeBuffer::~HugeBuffer() {
  std::free(data_);
}

int64_t last_level_cache_bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return std::max<int64_t>({l3, l2, int64_t{32} << 20});
}

std::optional<int64_t> mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return std::nullopt;
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? "unknown cpu" : line.substr(start);
  }
  return "unknown cpu";
}

double stream_read(const HugeBuffer& buf, size_t bytes, int threads) {
  const size_t words = std::min(bytes, buf.size()) / sizeof(uint64_t);
  const auto* base = reinterpret_cast<const uint64_t*>(buf.data());
  threads = std::max(1, threads);
  std::vector<std::thread> pool;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    const size_t begin = words * static_cast<size_t>(t) / static_cast<size_t>(threads);
    const size_t end = words * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
    pool.emplace_back([=] { g_sink.fetch_add(sum_words(base + begin, end - begin)); });
  }
  for (std::thread& th : pool) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ReadBandwidth measure_cpu_read_bandwidth(const HugeBuffer& buf, int threads, int passes) {
  ReadBandwidth r{0, buf.size(), threads, passes};
  // The first pass also settles the thread start-up and page-table walks; the best pass is the
  // bandwidth the memory system can give.
  for (int i = 0; i < passes; ++i) {
    const double s = stream_read(buf, buf.size(), threads);
    if (s > 0) r.gbps = std::max(r.gbps, static_cast<double>(buf.size()) / s / 1e9);
  }
  return r;
}

std::optional<double> measure_gpu_read_bandwidth() {
  // The CUDA backend's probe (kvflash/device.hpp): 4 GiB streamed, event-timed, best of 5.
  return cuda_read_bandwidth_gbps();
}

}  // namespace kvflash::bench
