// What the library can tell about the machine's accelerators, and the few device-memory, stream,
// event and graph services that tools, tests and embedders need to drive the CUDA backend without
// including the CUDA headers themselves. Every function works in a build without CUDA: the queries
// answer "none" and the services return an `unsupported` error that says so.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>

#include "kvflash/status.hpp"

namespace kvflash {

// Number of CUDA devices visible; 0 when the CUDA backend is not built, or no driver or device
// is present (never an error).
int cuda_device_count();

// Streaming-read bandwidth of CUDA device 0 in GB/s (1e9 bytes/s): a kernel reads a 4 GiB
// buffer (16-byte loads, grid-stride, every SM busy), event-timed after a warm-up pass, best of
// 5. This is the roofline decode kernels are measured against (KV decode only reads).
// nullopt without a device or when the measurement fails (the reason is not an error here).
std::optional<double> cuda_read_bandwidth_gbps();

namespace gpu {

// One device allocation (cudaMalloc on the current device), freed by the destructor. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Expected<DeviceBuffer> allocate(size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking CUDA stream, destroyed by the destructor. Move-only. handle() is the
// cudaStream_t to pass to kvflash::run().
class Stream {
 public:
  Stream() = default;
  static Expected<Stream> create();
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();
  void* handle() const { return stream_; }
  Status synchronize() const;

 private:
  void* stream_ = nullptr;
};

// Copies (cudaMemcpyAsync with cudaMemcpyDefault, so either side may be host or device) and
// fills on `stream`; call Stream::synchronize() (or pass a null stream and they complete
// before returning) before the host reads or frees the memory.
Status copy(void* dst, const void* src, size_t bytes, void* stream = nullptr);
Status fill(void* dst, int byte_value, size_t bytes, void* stream = nullptr);

// Milliseconds of device time for what `enqueue` puts on `stream`, measured with two CUDA events
// around it (then synchronizes on the end event). An error from enqueue is returned as is.
Expected<double> time_ms(void* stream, const std::function<Status()>& enqueue);

// A CUDA graph captured from what `enqueue` puts on `stream` (global capture mode, so any
// illegal call during capture fails the capture), instantiated and ready to launch. Move-only.
class Graph {
 public:
  Graph() = default;
  static Expected<Graph> capture(void* stream, const std::function<Status()>& enqueue);
  Graph(Graph&& o) noexcept;
  Graph& operator=(Graph&& o) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();
  Status launch(void* stream) const;
  // Kernel nodes in the captured graph (what one replay launches).
  size_t kernel_nodes() const { return kernel_nodes_; }

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  size_t kernel_nodes_ = 0;
};

// The last asynchronous error of the current device (cudaGetLastError), as a Status.
Status last_error();

}  // namespace gpu
}  // namespace kvflash
