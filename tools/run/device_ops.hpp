// The per-token steps of kvflash-run's device forward pass (device_forward.cpp) as CUDA kernels,
// each one the CPU path's loop of model.cpp on the device: embedding rows, RMSNorm, the RoPE table
// and its rotation, SwiGLU's gate. Each launcher enqueues one kernel on `stream` and returns the
// launch's error; nothing allocates or synchronizes, so they are legal under graph capture.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvflash::tools::run::ops {

// x[t] = table[ids[t]] for n rows of e values.
cudaError_t embed_rows(const int32_t* ids, const float* table, float* x, int64_t n, int64_t e,
                       cudaStream_t stream);

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * g for n rows of d values.
cudaError_t rms_norm_rows(const float* x, const float* g, float* y, int64_t n, int64_t d, float eps,
                          cudaStream_t stream);

// The (cos, sin) of pair i (dims 2i, 2i + 1) of the n tokens at positions len - n .. len - 1,
// len = *seq_len (the cache's device length after the step's append): theta = pos / scale *
// base^(-2i / head_dim), computed in double as the CPU path does; cs holds n x head_dim / 2.
cudaError_t rope_table(const int64_t* seq_len, int64_t n, int32_t head_dim, double base,
                       double scale, float2* cs, cudaStream_t stream);

// Rotates n tokens of `heads` heads of head_dim values by a rope_table.
cudaError_t rope_rotate(float* x, const float2* cs, int64_t n, int32_t heads, int32_t head_dim,
                        cudaStream_t stream);

// g[i] = silu(g[i]) * u[i] for count values.
cudaError_t silu_mul(float* g, const float* u, int64_t count, cudaStream_t stream);

}  // namespace kvflash::tools::run::ops
