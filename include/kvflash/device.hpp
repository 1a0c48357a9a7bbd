// What the library can tell about the machine's accelerators, and the few device-memory, stream,
// event and graph services that tools, tests and embedders need to drive the CUDA backend without
// including the CUDA headers themselves. Every function works in a build without CUDA: the queries
// answer "none" and the services return an `unsupported` error that says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

#include "kvflash/export.h"
#include "kvflash/formats.hpp"
#include "kvflash/stack_arena.hpp"
#include "kvflash/status.hpp"

namespace kvflash {

// Number of CUDA devices visible; 0 when the CUDA backend is not built, or no driver or device
// is present (never an error).
KVFLASH_API int cuda_device_count();

// Streaming-read bandwidth of CUDA device 0 in GB/s (1e9 bytes/s): a kernel reads a 4 GiB
// buffer (16-byte loads, grid-stride, every SM busy), event-timed after a warm-up pass, best of
// 5. This is the roofline decode kernels are measured against (KV decode only reads).
// nullopt without a device or when the measurement fails (the reason is not an error here).
KVFLASH_API std::optional<double> cuda_read_bandwidth_gbps();

namespace gpu {

// One device allocation (cudaMalloc on the current device), freed by the destructor. Move-only.
class KVFLASH_API DeviceBuffer {
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
class KVFLASH_API Stream {
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
KVFLASH_API Status copy(void* dst, const void* src, size_t bytes, void* stream = nullptr);
// Waits for everything enqueued on `stream` (a raw cudaStream_t; nullptr: the legacy default
// stream).
KVFLASH_API Status synchronize(void* stream);
KVFLASH_API Status fill(void* dst, int byte_value, size_t bytes, void* stream = nullptr);
// Holds `stream` busy for about `microseconds` of device time (one thread watching the device
// clock; no memory traffic). Enqueued before a timed call, it lets the host enqueue the call
// before the start event fires, so the events time the device work alone.
KVFLASH_API Status spin(double microseconds, void* stream = nullptr);

// kvflash::quantize_rows on the device: n_rows rows of n_values floats at `src` (device memory,
// row after row) into `dst` (device memory, row_size(t, n_values) bytes per row, row after row),
// enqueued on `stream` (no allocation, no synchronization: legal under graph capture). The bytes
// are the host's: every type, padding and saturation rule of formats.hpp, bit for bit.
KVFLASH_API Status quantize_rows(KvType t, const float* src, int64_t n_rows, int64_t n_values,
                                 void* dst, void* stream = nullptr);
// kvflash::dequantize_row on the device: n_rows rows of row_size(t, n_values) bytes at `src`
// (device memory, row after row) into n_values floats per row at `dst` (device memory), in the
// original domain (turbo: rotated back), enqueued on `stream` (no allocation, no
// synchronization). The floats are the host's, bit for bit; NaN where the host has NaN (its
// payload may differ).
KVFLASH_API Status dequantize_rows(KvType t, const void* src, int64_t n_rows, int64_t n_values,
                                   float* dst, void* stream = nullptr);

// Milliseconds of device time for what `enqueue` puts on `stream`, measured with two CUDA events
// around it (then synchronizes on the end event). An error from enqueue is returned as is.
KVFLASH_API Expected<double> time_ms(void* stream, const std::function<Status()>& enqueue);

// A CUDA graph captured from what `enqueue` puts on `stream` (global capture mode, so any
// illegal call during capture fails the capture), instantiated and ready to launch. Move-only.
class KVFLASH_API Graph {
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

// Device memory with a stack discipline, for transient buffers (workspaces, scratch) that must
// be taken and given back inside a step, graph capture included: the whole capacity is taken
// with one cudaMalloc at create() (size it from what it will serve, e.g. the largest
// Plan::workspace_bytes), and allocate/release/rewind are host bookkeeping only (StackArena:
// no CUDA call, no host allocation, nothing that synchronizes), so they are legal at any time.
//
// A pool belongs to one device (the current one at create()) and one stream. Its blocks must be
// used only by work on that stream: a block released on the host is handed out again at once,
// and only stream order guarantees that the work still reading it finishes before the next
// user's work starts. Work on another stream needs the caller's own event ordering, and the
// pool cannot check it. Move-only; the memory is freed by the destructor.
class KVFLASH_API DevicePool {
 public:
  static constexpr size_t kDefaultAlignment = StackArena::kDefaultAlignment;

  DevicePool() = default;
  DevicePool(DevicePool&& o) noexcept;
  DevicePool& operator=(DevicePool&& o) noexcept;
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;
  // One cudaMalloc of `capacity` bytes on the current device (out_of_memory when it fails);
  // `stream` is recorded, not owned (nullptr: the legacy default stream). With capacity 0 only
  // zero-byte requests fit. `max_blocks` bounds the blocks live at one time (their table is
  // allocated here, once).
  static Expected<DevicePool> create(size_t capacity, void* stream,
                                     size_t max_blocks = StackArena::kDefaultMaxBlocks);

  // See StackArena: an aligned block off the top, or out_of_memory naming the request, the free
  // bytes and the capacity; release() only the most recent block; rewind() to a mark.
  Expected<void*> allocate(size_t bytes, size_t alignment = kDefaultAlignment) {
    return arena_.allocate(bytes, alignment);
  }
  Status release(void* block) { return arena_.release(block); }
  ArenaMark mark() const { return arena_.mark(); }
  Status rewind(ArenaMark m) { return arena_.rewind(m); }
  // For ArenaScope and the memory report.
  StackArena& arena() { return arena_; }
  const StackArena& arena() const { return arena_; }

  size_t capacity() const { return arena_.capacity(); }
  size_t used() const { return arena_.used(); }
  size_t high_water() const { return arena_.high_water(); }
  int device() const { return device_; }  // -1 for a default-constructed or moved-from pool
  void* stream() const { return stream_; }

 private:
  DeviceBuffer memory_;
  StackArena arena_;
  int device_ = -1;
  void* stream_ = nullptr;
};

// Free and total memory of the current device (cudaMemGetInfo), in bytes: what the driver says,
// for checking that the memory a tool reports is what the device really gives up.
struct MemoryInfo {
  size_t free = 0;
  size_t total = 0;
};
KVFLASH_API Expected<MemoryInfo> memory_info();

// The last asynchronous error of the current device (cudaGetLastError), as a Status.
KVFLASH_API Status last_error();

}  // namespace gpu
}  // namespace kvflash
