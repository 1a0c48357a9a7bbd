// What the core asks of a backend, so that it names none: each backend built into the library is
// one BackendEntry, and built_backends() lists them (defined in the file that CMake generates from
// src/backends/backends.cpp.in, the one place that knows which backends this build holds). The
// registry takes every entry's candidates; kvflash::gpu (device.cpp, kv_cache.cpp) goes through
// the device services of the entry that has them, and answers as kvflash/device.hpp documents
// where none was built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "kvflash/device.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/registry.hpp"
#include "kvflash/status.hpp"

namespace kvflash {

// One instantiated graph: its cudaGraph_t, cudaGraphExec_t and number of kernel nodes.
struct GraphHandles {
  void* graph = nullptr;
  void* exec = nullptr;
  size_t kernel_nodes = 0;
};

// The services behind kvflash::gpu (kvflash/device.hpp) and KvCache (kvflash/kv_cache.hpp), on
// raw handles (streams, graphs and events as void*) so that the core includes no device runtime
// header. kvflash/device.hpp defines these services on CUDA's handles (a stream is a cudaStream_t),
// so one backend provides them. Every member is set. A failure comes back as a Status that names
// the runtime call and its error (out_of_memory for an allocation, backend_error otherwise), and is
// reported once: the runtime's last-error slot is cleared, so last_error() does not repeat it.
struct DeviceServices {
  // Devices visible, 0 when the driver or a device is missing (never an error).
  int (*device_count)();
  // Streaming-read bandwidth of device 0 in GB/s; nullopt on failure.
  std::optional<double> (*read_bandwidth_gbps)();
  Status (*current_device)(int* device);
  Status (*malloc_device)(void** ptr, size_t bytes);
  void (*free_device)(void* ptr);  // nullptr: nothing
  Status (*create_stream)(void** stream);
  void (*destroy_stream)(void* stream);  // nullptr: nothing
  Status (*synchronize_stream)(void* stream);
  // Asynchronous on `stream`; with a null stream also waited for before returning.
  Status (*copy)(void* dst, const void* src, size_t bytes, void* stream);
  Status (*fill)(void* dst, int byte_value, size_t bytes, void* stream);
  // One thread on `stream` waits until `microseconds` of the device's clock have passed.
  Status (*spin)(double microseconds, void* stream);
  Expected<double> (*time_ms)(void* stream, const std::function<Status()>& enqueue);
  // Captures what `enqueue` puts on `stream`, always ending the capture, then instantiates it.
  Expected<GraphHandles> (*capture_graph)(void* stream, const std::function<Status()>& enqueue);
  Status (*launch_graph)(void* exec, void* stream);
  void (*destroy_graph)(void* graph, void* exec);  // either may be nullptr
  Status (*last_error)();
  // kvflash::quantize_rows with src and dst in device memory, on `stream`.
  Status (*quantize_rows)(KvType t, const float* src, int64_t n_rows, int64_t n_values, void* dst,
                          void* stream);
  // kvflash::dequantize_row over n_rows rows, src and dst in device memory, on `stream`.
  Status (*dequantize_rows)(KvType t, const void* src, int64_t n_rows, int64_t n_values, float* dst,
                            void* stream);
  // KvCache::append of one tensor: rows (n_seqs, n_new, n_heads) of n_values floats quantized at
  // tokens lens[seq] - n_new .. lens[seq] - 1 (lens read on the device); flags: n_seqs + 1 int32,
  // [0] raised on overflow, [1 + s] sequence s full.
  Status (*append_rows)(KvType t, const float* src, int32_t n_seqs, int32_t n_new, int32_t n_heads,
                        int32_t n_values, const KvTensor& kv, int32_t page_size, int64_t capacity,
                        const int64_t* lens, int32_t* flags, void* stream);
  // KvCache::begin_step: lens[s] += n_new on the device where it fits the capacity, else sequence
  // s is marked full.
  Status (*advance_lengths)(int64_t* lens, int32_t n_seqs, int32_t n_new, int64_t capacity,
                            int32_t* flags, void* stream);
  Expected<gpu::MemoryInfo> (*memory_info)();
};

struct BackendEntry {
  Backend id;
  // Appends the backend's kernel candidates (every family it builds).
  void (*register_kernels)(std::vector<KernelCandidate>& out);
  // The host threads its kernels can run on (Plan::n_threads when PlanOptions::n_threads is 0);
  // null for a backend whose kernels do not run on host threads (its plans get 1).
  int32_t (*host_threads)();
  const DeviceServices* device;  // null: a host-only backend
};

// The backends built into this library, in registration order (CPU first).
std::span<const BackendEntry* const> built_backends();

// The device services of the first built backend that has them; null in a build without one.
const DeviceServices* device_services();

// What a device service answers in a build without a device backend: unsupported, "<what>:
// kvflash was built without CUDA" (device.hpp's services are CUDA's, whoever provides them).
Error no_device_backend(const std::string& what);

}  // namespace kvflash
