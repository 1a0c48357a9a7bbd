#include "kvflash/device.hpp"

#include <utility>

#if defined(KVFLASH_HAS_CUDA)
#include "backends/cuda/cuda_backend.hpp"
#endif

namespace kvflash {

int cuda_device_count() {
#if defined(KVFLASH_HAS_CUDA)
  return cuda::device_count();
#else
  return 0;
#endif
}

std::optional<double> cuda_read_bandwidth_gbps() {
#if defined(KVFLASH_HAS_CUDA)
  if (cuda::device_count() == 0) return std::nullopt;
  return cuda::read_bandwidth_gbps();
#else
  return std::nullopt;
#endif
}

namespace gpu {

#if !defined(KVFLASH_HAS_CUDA)
namespace {

Error no_cuda(const char* what) {
  return unsupported(std::string(what) + ": kvflash was built without CUDA");
}

}  // namespace
#endif

// DeviceBuffer

Expected<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
#if defined(KVFLASH_HAS_CUDA)
  DeviceBuffer b;
  if (Status s = cuda::malloc_device(&b.ptr_, bytes); !s) return s.error();
  b.bytes_ = bytes;
  return b;
#else
  (void)bytes;
  return no_cuda("gpu::DeviceBuffer::allocate");
#endif
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

DeviceBuffer::~DeviceBuffer() {
#if defined(KVFLASH_HAS_CUDA)
  cuda::free_device(ptr_);
#endif
}

// DevicePool

Expected<DevicePool> DevicePool::create(size_t capacity, void* stream, size_t max_blocks) {
#if defined(KVFLASH_HAS_CUDA)
  DevicePool pool;
  if (Status s = cuda::current_device(&pool.device_); !s) return s.error();
  Expected<DeviceBuffer> memory = DeviceBuffer::allocate(capacity);
  if (!memory) return memory.error();
  pool.memory_ = std::move(*memory);
  pool.arena_ = StackArena(pool.memory_.data(), capacity, max_blocks, "gpu::DevicePool");
  pool.stream_ = stream;
  return pool;
#else
  (void)capacity, (void)stream, (void)max_blocks;
  return no_cuda("gpu::DevicePool::create");
#endif
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
#if defined(KVFLASH_HAS_CUDA)
  Stream s;
  if (Status st = cuda::create_stream(&s.stream_); !st) return st.error();
  return s;
#else
  return no_cuda("gpu::Stream::create");
#endif
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
#if defined(KVFLASH_HAS_CUDA)
  cuda::destroy_stream(stream_);
#endif
}

Status Stream::synchronize() const {
#if defined(KVFLASH_HAS_CUDA)
  return cuda::synchronize_stream(stream_);
#else
  return no_cuda("gpu::Stream::synchronize");
#endif
}

// Copies, fills, timing

Status copy(void* dst, const void* src, size_t bytes, void* stream) {
#if defined(KVFLASH_HAS_CUDA)
  return cuda::copy(dst, src, bytes, stream);
#else
  (void)dst, (void)src, (void)bytes, (void)stream;
  return no_cuda("gpu::copy");
#endif
}

Status synchronize(void* stream) {
#if defined(KVFLASH_HAS_CUDA)
  return cuda::synchronize_stream(stream);
#else
  (void)stream;
  return no_cuda("gpu::synchronize");
#endif
}

Status fill(void* dst, int byte_value, size_t bytes, void* stream) {
#if defined(KVFLASH_HAS_CUDA)
  return cuda::fill(dst, byte_value, bytes, stream);
#else
  (void)dst, (void)byte_value, (void)bytes, (void)stream;
  return no_cuda("gpu::fill");
#endif
}

Status spin(double microseconds, void* stream) {
#if defined(KVFLASH_HAS_CUDA)
  return cuda::spin(microseconds, stream);
#else
  (void)microseconds, (void)stream;
  return no_cuda("gpu::spin");
#endif
}

Status quantize_rows(KvType t, const float* src, int64_t n_rows, int64_t n_values, void* dst,
                     void* stream) {
#if defined(KVFLASH_HAS_CUDA)
  return cuda::quantize_rows(t, src, n_rows, n_values, dst, stream);
#else
  (void)t, (void)src, (void)n_rows, (void)n_values, (void)dst, (void)stream;
  return no_cuda("gpu::quantize_rows");
#endif
}

Expected<double> time_ms(void* stream, const std::function<Status()>& enqueue) {
#if defined(KVFLASH_HAS_CUDA)
  return cuda::time_ms(stream, enqueue);
#else
  (void)stream, (void)enqueue;
  return no_cuda("gpu::time_ms");
#endif
}

// Graph

Expected<Graph> Graph::capture(void* stream, const std::function<Status()>& enqueue) {
#if defined(KVFLASH_HAS_CUDA)
  Expected<cuda::GraphHandles> h = cuda::capture_graph(stream, enqueue);
  if (!h) return h.error();
  Graph g;
  g.graph_ = h->graph;
  g.exec_ = h->exec;
  g.kernel_nodes_ = h->kernel_nodes;
  return g;
#else
  (void)stream, (void)enqueue;
  return no_cuda("gpu::Graph::capture");
#endif
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
#if defined(KVFLASH_HAS_CUDA)
  cuda::destroy_graph(graph_, exec_);
#endif
}

Status Graph::launch(void* stream) const {
#if defined(KVFLASH_HAS_CUDA)
  return cuda::launch_graph(exec_, stream);
#else
  (void)stream;
  return no_cuda("gpu::Graph::launch");
#endif
}

Expected<MemoryInfo> memory_info() {
#if defined(KVFLASH_HAS_CUDA)
  return cuda::memory_info();
#else
  return no_cuda("gpu::memory_info");
#endif
}

Status last_error() {
#if defined(KVFLASH_HAS_CUDA)
  return cuda::last_error();
#else
  return no_cuda("gpu::last_error");
#endif
}

}  // namespace gpu
}  // namespace kvflash
