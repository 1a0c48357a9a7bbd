// Where kvflash-quality runs the library's attention: the CPU backend on the host buffers, or the
// CUDA backend on device copies of them (q, K, V and the lengths go to the device, where the
// kernels read them; out and lse come back). Either way the caller's host tensors are the input
// and its host out / lse the result, so the suites compute every metric the same way.
#pragma once

#include <cstdint>
#include <string>

#include "kvflash/problem.hpp"
#include "kvflash/registry.hpp"
#include "kvflash/status.hpp"

namespace kvflash::quality {

// Query tokens per sequence a run may ask for. CPU: 256 (the float64 reference and the CPU kernels
// cost the same order of work, which beyond that is minutes per depth on a few cores). CUDA: a
// 4096-token prefill chunk (cuda.prefill serves 9 and more queries); the float64 reference on the
// host is then the slow part: --seqs 1 and few depths keep it to minutes.
inline constexpr int32_t kMaxQueriesCpu = 256;
inline constexpr int32_t kMaxQueriesCuda = 4096;
int32_t max_queries(Backend b);

// The library's attention of problem p on the host tensors t (contiguous K/V of p.kv_capacity
// tokens per sequence; t.kv_lens host memory or nullptr), on backend b: t.out (and t.lse when
// set) receive the result. Returns the name of the kernel the registry chose. CUDA without a
// device or a CUDA build: an unsupported error that says so.
Expected<std::string> run_library(Backend b, const AttentionProblem& p, const AttentionTensors& t,
                                  int32_t n_threads);

// unsupported (naming --backend) when b cannot run on this machine, e.g. cuda without a device.
Status backend_available(Backend b);

}  // namespace kvflash::quality
