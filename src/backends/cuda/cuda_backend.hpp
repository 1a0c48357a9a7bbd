// CUDA backend entry points (host side). Built only when nvcc is found (KVFLASH_HAS_CUDA); the core
// reaches them through backend_entry() (src/core/backend.hpp), never by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/backend.hpp"
#include "kvflash/device.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/registry.hpp"
#include "kvflash/status.hpp"

namespace kvflash::cuda {

// Appends the CUDA candidates of every family.
void register_kernels(std::vector<KernelCandidate>& out);

// The CUDA backend as the core sees it: its candidates and the device services below.
const BackendEntry& backend_entry();

namespace decode {
// The decode family (1..8 query tokens): "cuda.decode".
void register_decode(std::vector<KernelCandidate>& out);
}  // namespace decode
namespace prefill {
// The prefill family (9 or more query tokens): "cuda.prefill".
void register_prefill(std::vector<KernelCandidate>& out);
}  // namespace prefill

// Number of CUDA devices visible, 0 when the driver or a device is missing (never an error).
int device_count();

// Streaming-read bandwidth of device 0 in GB/s (see kvflash/device.hpp); nullopt on failure.
std::optional<double> read_bandwidth_gbps();

// The services behind kvflash::gpu (kvflash/device.hpp), on raw handles so that this header stays
// free of the CUDA headers (device_services.cu). Every CUDA call is checked: a failure comes back
// as a Status naming the call and the CUDA error (out_of_memory for cudaErrorMemoryAllocation,
// backend_error otherwise), and the runtime's last-error slot is cleared so that the same failure
// is not reported a second time by last_error().
Status current_device(int* device);  // cudaGetDevice
Status malloc_device(void** ptr, size_t bytes);
void free_device(void* ptr);              // nullptr: nothing
Status create_stream(void** stream);      // cudaStreamNonBlocking
void destroy_stream(void* stream);        // nullptr: nothing
Status synchronize_stream(void* stream);  // nullptr: the legacy default stream
// cudaMemcpyAsync(cudaMemcpyDefault) / cudaMemsetAsync on `stream`; with a null stream they are
// also waited for before returning.
Status copy(void* dst, const void* src, size_t bytes, void* stream);
Status fill(void* dst, int byte_value, size_t bytes, void* stream);
// One thread on `stream` waits until `microseconds` of the device's clock have passed.
Status spin(double microseconds, void* stream);
Expected<double> time_ms(void* stream, const std::function<Status()>& enqueue);

// Captures what `enqueue` puts on `stream` (cudaStreamCaptureModeGlobal), always ending the
// capture, then instantiates the graph and counts its kernel nodes.
Expected<GraphHandles> capture_graph(void* stream, const std::function<Status()>& enqueue);
Status launch_graph(void* exec, void* stream);
void destroy_graph(void* graph, void* exec);  // either may be nullptr
Status last_error();
// kvflash::quantize_rows on the device (quantize.cu): src and dst device memory, on `stream`.
Status quantize_rows(KvType t, const float* src, int64_t n_rows, int64_t n, void* dst,
                     void* stream);
// kvflash::dequantize_row over n_rows rows on the device (dequantize.cu): src and dst device
// memory, on `stream`; the host's floats, bit for bit.
Status dequantize_rows(KvType t, const void* src, int64_t n_rows, int64_t n, float* dst,
                       void* stream);
// The rows (n_seqs, n_new, n_heads) of n_values floats at `src` quantized into a cache tensor at
// tokens lens[seq] - n_new .. lens[seq] - 1 (lens read on the device). flags: n_seqs + 1 int32,
// [0] raised on overflow, [1 + s] sequence s full; nothing is written for a full sequence or a
// token outside 0 .. capacity - 1 (quantize.cu).
Status append_rows(KvType t, const float* src, int32_t n_seqs, int32_t n_new, int32_t n_heads,
                   int32_t n_values, const KvTensor& kv, int32_t page_size, int64_t capacity,
                   const int64_t* lens, int32_t* flags, void* stream);
// lens[s] += n_new on the device where it fits the capacity, else sequence s is marked full.
Status advance_lengths(int64_t* lens, int32_t n_seqs, int32_t n_new, int64_t capacity,
                       int32_t* flags, void* stream);
// cudaMemGetInfo of the current device.
Expected<gpu::MemoryInfo> memory_info();

}  // namespace kvflash::cuda
