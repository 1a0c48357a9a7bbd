#include "kvflash/device.hpp"

#include <utility>

#include "core/backend.hpp"

namespace kvflash {

int cuda_device_count() {
  const DeviceServices* d = device_services();
  return d ? d->device_count() : 0;
}

std::optional<double> cuda_read_bandwidth_gbps() {
  const DeviceServices* d = device_services();
  if (d == nullptr || d->device_count() == 0) return std::nullopt;
  return d->read_bandwidth_gbps();
}

namespace gpu {

// DeviceBuffer

Expected<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::DeviceBuffer::allocate");
  DeviceBuffer b;
  if (Status s = d->malloc_device(&b.ptr_, bytes); !s) return s.error();
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    DeviceBuffer old(std::move(*this));
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

// Without device services nothing was ever allocated: ptr_ is null.
DeviceBuffer::~DeviceBuffer() {
  if (const DeviceServices* d = device_services()) d->free_device(ptr_);
}

// DevicePool

Expected<DevicePool> DevicePool::create(size_t capacity, void* stream, size_t max_blocks) {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::DevicePool::create");
  DevicePool pool;
  if (Status s = d->current_device(&pool.device_); !s) return s.error();
  Expected<DeviceBuffer> memory = DeviceBuffer::allocate(capacity);
  if (!memory) return memory.error();
  pool.memory_ = std::move(*memory);
  pool.arena_ = StackArena(pool.memory_.data(), capacity, max_blocks, "gpu::DevicePool");
  pool.stream_ = stream;
  return pool;
}

DevicePool::DevicePool(DevicePool&& o) noexcept
    : memory_(std::move(o.memory_)),
      arena_(std::move(o.arena_)),
      device_(std::exchange(o.device_, -1)),
      stream_(std::exchange(o.stream_, nullptr)) {}

DevicePool& DevicePool::operator=(DevicePool&& o) noexcept {
  if (this != &o) {
    arena_ = std::move(o.arena_);
    memory_ = std::move(o.memory_);
    device_ = std::exchange(o.device_, -1);
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

// Stream

Expected<Stream> Stream::create() {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::Stream::create");
  Stream s;
  if (Status st = d->create_stream(&s.stream_); !st) return st.error();
  return s;
}

Stream::Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    Stream old(std::move(*this));
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

Stream::~Stream() {
  if (const DeviceServices* d = device_services()) d->destroy_stream(stream_);
}

Status Stream::synchronize() const {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::Stream::synchronize");
  return d->synchronize_stream(stream_);
}

// Copies, fills, timing

Status copy(void* dst, const void* src, size_t bytes, void* stream) {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::copy");
  return d->copy(dst, src, bytes, stream);
}

Status synchronize(void* stream) {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::synchronize");
  return d->synchronize_stream(stream);
}

Status fill(void* dst, int byte_value, size_t bytes, void* stream) {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::fill");
  return d->fill(dst, byte_value, bytes, stream);
}

Status spin(double microseconds, void* stream) {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::spin");
  return d->spin(microseconds, stream);
}

Status quantize_rows(KvType t, const float* src, int64_t n_rows, int64_t n_values, void* dst,
                     void* stream) {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::quantize_rows");
  return d->quantize_rows(t, src, n_rows, n_values, dst, stream);
}

Status dequantize_rows(KvType t, const void* src, int64_t n_rows, int64_t n_values, float* dst,
                       void* stream) {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::dequantize_rows");
  return d->dequantize_rows(t, src, n_rows, n_values, dst, stream);
}

Expected<double> time_ms(void* stream, const std::function<Status()>& enqueue) {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::time_ms");
  return d->time_ms(stream, enqueue);
}

// Graph

Expected<Graph> Graph::capture(void* stream, const std::function<Status()>& enqueue) {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::Graph::capture");
  Expected<GraphHandles> h = d->capture_graph(stream, enqueue);
  if (!h) return h.error();
  Graph g;
  g.graph_ = h->graph;
  g.exec_ = h->exec;
  g.kernel_nodes_ = h->kernel_nodes;
  return g;
}

Graph::Graph(Graph&& o) noexcept
    : graph_(std::exchange(o.graph_, nullptr)),
      exec_(std::exchange(o.exec_, nullptr)),
      kernel_nodes_(std::exchange(o.kernel_nodes_, 0)) {}

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    Graph old(std::move(*this));
    graph_ = std::exchange(o.graph_, nullptr);
    exec_ = std::exchange(o.exec_, nullptr);
    kernel_nodes_ = std::exchange(o.kernel_nodes_, 0);
  }
  return *this;
}

Graph::~Graph() {
  if (const DeviceServices* d = device_services()) d->destroy_graph(graph_, exec_);
}

Status Graph::launch(void* stream) const {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::Graph::launch");
  return d->launch_graph(exec_, stream);
}

Expected<MemoryInfo> memory_info() {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::memory_info");
  return d->memory_info();
}

Status last_error() {
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("gpu::last_error");
  return d->last_error();
}

}  // namespace gpu
}  // namespace kvflash
