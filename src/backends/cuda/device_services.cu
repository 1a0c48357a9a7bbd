// The device services of kvflash/device.hpp (kvflash::gpu) on the CUDA runtime: allocations,
// streams, copies and fills, event timing and graph capture. kvflash::gpu (src/core/device.cpp)
// wraps these raw-handle functions in its move-only types.
#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"

namespace kvflash::cuda {
namespace {

cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

// "<call> failed: <CUDA error string> (<error name>)[: <hint>]". Clears the runtime's last-error
// slot: the failure is reported here, once.
Error cuda_error(cudaError_t e, const std::string& call, const std::string& hint = {}) {
  (void)cudaGetLastError();
  std::string msg = call + " failed: " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
  if (!hint.empty()) msg += ": " + hint;
  return Error{e == cudaErrorMemoryAllocation ? ErrorCode::out_of_memory : ErrorCode::backend_error,
               std::move(msg)};
}

Status check(cudaError_t e, const std::string& call) {
  if (e == cudaSuccess) return {};
  return cuda_error(e, call);
}

std::string with_bytes(const char* call, size_t bytes) {
  return std::string(call) + "(" + std::to_string(bytes) + " bytes)";
}

// With the legacy default stream, the asynchronous calls are waited for (device.hpp).
Status finish_if_null(void* stream) {
  if (stream != nullptr) return {};
  return check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize(default stream)");
}

// Two timing events, destroyed with this object whatever happens between.
struct EventPair {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  EventPair() = default;
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  ~EventPair() {
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
  }
};

}  // namespace

Status current_device(int* device) {
  *device = -1;
  return check(cudaGetDevice(device), "cudaGetDevice");
}

Status malloc_device(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return {};
  return check(cudaMalloc(ptr, bytes), with_bytes("cudaMalloc", bytes));
}

void free_device(void* ptr) {
  // A destructor cannot report: a failure here (a sticky error from an earlier kernel) has already
  // been, or will be, reported by the call that meets it.
  if (ptr != nullptr && cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
}

Status create_stream(void** stream) {
  *stream = nullptr;
  cudaStream_t s = nullptr;
  if (Status st =
          check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      !st)
    return st;
  *stream = s;
  return {};
}

void destroy_stream(void* stream) {
  if (stream != nullptr && cudaStreamDestroy(as_stream(stream)) != cudaSuccess)
    (void)cudaGetLastError();
}

Status synchronize_stream(void* stream) {
  return check(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
}

Status copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return {};
  if (Status st = check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)),
                        with_bytes("cudaMemcpyAsync", bytes));
      !st)
    return st;
  return finish_if_null(stream);
}

Status fill(void* dst, int byte_value, size_t bytes, void* stream) {
  if (bytes == 0) return {};
  if (Status st = check(cudaMemsetAsync(dst, byte_value, bytes, as_stream(stream)),
                        with_bytes("cudaMemsetAsync", bytes));
      !st)
    return st;
  return finish_if_null(stream);
}

namespace {
// Waits on the device's global timer (nanoseconds); sleeps between reads so that the SM it sits
// on stays free for other work.
__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(500);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}
}  // namespace

Status spin(double microseconds, void* stream) {
  if (!(microseconds > 0.0)) return {};
  spin_kernel<<<1, 1, 0, as_stream(stream)>>>(static_cast<unsigned long long>(microseconds * 1e3));
  if (Status st = check(cudaPeekAtLastError(), "spin kernel launch"); !st) return st;
  return finish_if_null(stream);
}

Expected<double> time_ms(void* stream, const std::function<Status()>& enqueue) {
  EventPair ev;
  if (Status st = check(cudaEventCreate(&ev.start), "cudaEventCreate"); !st) return st.error();
  if (Status st = check(cudaEventCreate(&ev.stop), "cudaEventCreate"); !st) return st.error();
  if (Status st = check(cudaEventRecord(ev.start, as_stream(stream)), "cudaEventRecord"); !st)
    return st.error();
  if (Status st = enqueue(); !st) return st.error();
  if (Status st = check(cudaEventRecord(ev.stop, as_stream(stream)), "cudaEventRecord"); !st)
    return st.error();
  if (Status st = check(cudaEventSynchronize(ev.stop), "cudaEventSynchronize"); !st)
    return st.error();
  float ms = 0.0f;
  if (Status st = check(cudaEventElapsedTime(&ms, ev.start, ev.stop), "cudaEventElapsedTime"); !st)
    return st.error();
  return static_cast<double>(ms);
}

Expected<GraphHandles> capture_graph(void* stream, const std::function<Status()>& enqueue) {
  if (stream == nullptr)
    return invalid_argument(
        "gpu::Graph::capture: the legacy default stream cannot be captured; use a gpu::Stream");
  const cudaStream_t s = as_stream(stream);
  if (Status st =
          check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
      !st)
    return st.error();
  // The capture is always ended, whatever enqueue returned, so the stream is usable afterwards.
  const Status enqueued = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  GraphHandles h;
  h.graph = graph;
  auto fail = [&](Error e) -> Expected<GraphHandles> {
    destroy_graph(h.graph, h.exec);
    return e;
  };
  if (!enqueued) {
    (void)cudaGetLastError();  // what the failed enqueue may have left behind is part of it
    return fail(enqueued.error());
  }
  if (ended != cudaSuccess)
    return fail(cuda_error(ended, "cudaStreamEndCapture",
                           "a call during the capture was not legal in global capture mode "
                           "(an allocation, a synchronization, a host-blocking copy)"));
  if (graph == nullptr)
    return fail(Error{ErrorCode::backend_error, "cudaStreamEndCapture returned no graph"});

  size_t n = 0;
  if (Status st = check(cudaGraphGetNodes(graph, nullptr, &n), "cudaGraphGetNodes"); !st)
    return fail(st.error());
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0)
    if (Status st = check(cudaGraphGetNodes(graph, nodes.data(), &n), "cudaGraphGetNodes"); !st)
      return fail(st.error());
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType type{};
    if (Status st = check(cudaGraphNodeGetType(nodes[i], &type), "cudaGraphNodeGetType"); !st)
      return fail(st.error());
    if (type == cudaGraphNodeTypeKernel) ++h.kernel_nodes;
  }
  cudaGraphExec_t exec = nullptr;
  if (Status st = check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate"); !st)
    return fail(st.error());
  h.exec = exec;
  return h;
}

Status launch_graph(void* exec, void* stream) {
  if (exec == nullptr)
    return invalid_argument("gpu::Graph::launch: the graph is empty (capture one first)");
  return check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), as_stream(stream)),
               "cudaGraphLaunch");
}

void destroy_graph(void* graph, void* exec) {
  if (exec != nullptr && cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)) != cudaSuccess)
    (void)cudaGetLastError();
  if (graph != nullptr && cudaGraphDestroy(static_cast<cudaGraph_t>(graph)) != cudaSuccess)
    (void)cudaGetLastError();
}

Expected<gpu::MemoryInfo> memory_info() {
  gpu::MemoryInfo m;
  if (Status st = check(cudaMemGetInfo(&m.free, &m.total), "cudaMemGetInfo"); !st)
    return st.error();
  return m;
}

Status last_error() {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return {};
  return cuda_error(e, "a previous asynchronous CUDA call");
}

}  // namespace kvflash::cuda
