// kvflash-run's forward pass on a CUDA device (--backend cuda): the weights in device memory (f32),
// the matrix products by cuBLAS, the per-token steps (embedding rows, RMSNorm, RoPE, SwiGLU) as
// small CUDA kernels, K/V appended to a gpu::KvCache and attention by kvflash's plan/run on one
// stream. The host copies the token ids in and the logits out, nothing else.
//
// A call of one token (decode) is one gpu::GraphRunner step: the first two run eagerly, the third
// is captured into a CUDA graph and every later one replays it. The step reads its position from
// the cache's device length (RoPE, the append, the attention's kv_lens), so one graph serves the
// whole generation. Calls of more tokens (prefill chunks) run eagerly.
//
// The forward pass is model.hpp's, in the same order of operations (the residual adds are the
// products' beta = 1), so its logits match the CPU path's to float rounding.
//
// This header needs no CUDA headers; device_forward.cu implements it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvflash/graph_runner.hpp"
#include "kvflash/kv_cache.hpp"
#include "kvflash/status.hpp"

namespace kvflash::tools::run {

struct LlamaModel;

class DeviceForward {
 public:
  // Copies the model's weights to device 0 (the caller checks that there is one) and creates the
  // cache (capacity tokens, the layers' K/V types), a stream and a cuBLAS handle. graphs = false:
  // every step eager.
  static Expected<std::unique_ptr<DeviceForward>> create(const LlamaModel& m,
                                                         std::vector<gpu::KvLayerTypes> layers,
                                                         int64_t capacity, bool graphs);
  ~DeviceForward();
  DeviceForward(const DeviceForward&) = delete;
  DeviceForward& operator=(const DeviceForward&) = delete;

  // Appends `ids` after the tokens the cache holds and returns the logits of every one of them
  // (ids.size() x n_vocab) or of the last (n_vocab). The caller checks ids and capacity.
  Expected<std::vector<float>> forward(const std::vector<int32_t>& ids, bool all_logits);
  // Sets the cache's length to 0 (a new sequence).
  Status reset();

  const GraphCounters& graph_counters() const;
  size_t weight_bytes() const;

 private:
  struct Impl;
  explicit DeviceForward(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvflash::tools::run
