// kvflash-run's model: a Llama-architecture transformer read from GGUF (llama.cpp's tensor names
// and metadata keys), run on the CPU with BLAS for the matrix products and kvflash for attention
// over a KV cache of any type per layer: on the host (the CPU kernels), or on a CUDA device
// (device_forward.hpp: the whole pass there, cuBLAS for the products, the K/V in a gpu::KvCache,
// decode steps as one CUDA graph). One sequence; tokens are ids (the project's own model uses
// bytes as tokens; other tokenizers are out of scope).
//
// The forward pass, per chunk of n tokens at positions pos .. pos + n - 1:
//   x = token_embd[ids]
//   per layer: h = rms_norm(x) * attn_norm; q, k, v = h Wq^T, h Wk^T, h Wv^T; RoPE on q and k
//   (llama.cpp's normal mode: pairs (2i, 2i + 1), theta = pos / scale * base^(-2i / head_dim));
//   k, v appended to the layer's cache (quantized to its types); o = attention(q, cache) (causal,
//   kvflash plan/run); x += o Wo^T; h = rms_norm(x) * ffn_norm; x += (silu(h Wg^T) * h Wu^T) Wd^T
//   logits = (rms_norm(x) * output_norm) Wout^T (Wout = token_embd when the file ties them).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kvflash/formats.hpp"
#include "kvflash/registry.hpp"
#include "kvflash/status.hpp"
#include "run/gguf.hpp"

namespace kvflash::tools::run {

struct LlamaConfig {
  int32_t n_vocab = 0, n_embd = 0, n_layer = 0, n_ff = 0;
  int32_t n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;   // linear RoPE scaling: positions divided by it
  bool tied_output = false;  // no output.weight: the logits use token_embd
};

// The configuration from a GGUF file's metadata (general.architecture must be "llama"); errors
// name the missing or unusable key.
Expected<LlamaConfig> llama_config(const GgufFile& f);

// A weight matrix (out x in, row-major: GGUF's ne[0] = in) or vector, in f32.
struct Weight {
  int64_t rows = 0, cols = 0;
  std::vector<float> data;
};

struct LlamaLayer {
  Weight attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
};

struct LlamaModel {
  LlamaConfig config;
  Weight tok_embd, output_norm, output;  // output empty when tied
  std::vector<LlamaLayer> layers;
  const Weight& lm_head() const { return config.tied_output ? tok_embd : output; }
};

// Reads the configuration and every weight (f32, f16, bf16 and q8_0 tensors, widened to f32),
// checking each tensor's presence and shape; errors name the tensor.
Expected<LlamaModel> load_llama(const GgufFile& f);

// One layer's KV cache on the host: capacity positions of n_head_kv rows of head_dim values, in
// its K and V types (row_size(type, head_dim) bytes per row; position-major, then head).
struct LayerCache {
  KvType k_type = KvType::f16, v_type = KvType::f16;
  std::vector<uint8_t> k, v;
};

// The model's state for one sequence: the caches, the tokens they hold, and scratch buffers.
class DeviceForward;

class LlamaSession {
 public:
  // KV types per layer (one entry: every layer), capacity in tokens; the CPU threads the
  // attention plan may use (0: all); where the forward pass runs (cuda: device 0, an error
  // naming the reason where there is none or the build has no CUDA backend) and, there, whether
  // decode steps run as one CUDA graph.
  static Expected<LlamaSession> create(const LlamaModel& m, std::vector<KvType> k_types,
                                       std::vector<KvType> v_types, int64_t capacity,
                                       int32_t n_threads = 0, Backend backend = Backend::cpu,
                                       bool cuda_graphs = true);

  // Appends `ids` at the next positions and returns the logits of every one of them
  // (ids.size() x n_vocab) or of the last only (n_vocab).
  Expected<std::vector<float>> forward(const std::vector<int32_t>& ids, bool all_logits);

  int64_t position() const { return pos_; }
  Backend backend() const { return backend_; }
  int64_t capacity() const { return capacity_; }
  // Drops the cache (position back to 0).
  Status reset();
  // The CUDA forward pass (backend cuda), for its graph counters; null on the CPU.
  const DeviceForward* device() const { return dev_.get(); }

 private:
  // The attention plan of a call of n tokens over a layer's K/V types (one per shape: a decode
  // loop plans once, not once per layer and token).
  Expected<const Plan*> attention_plan(int64_t n, KvType k, KvType v);
  // Appends the chunk's k and v (n x n_head_kv x head_dim f32) to layer l's cache and writes
  // o = attention(q, cache) for its n tokens (positions pos_ .. pos_ + n - 1, causal).
  Status attend_host(size_t l, int64_t n, const float* q, const float* k, const float* v, float* o);

  const LlamaModel* m_ = nullptr;
  Backend backend_ = Backend::cpu;
  std::shared_ptr<DeviceForward> dev_;  // backend cuda
  std::map<std::tuple<int64_t, KvType, KvType>, Plan> plans_;
  std::vector<uint8_t> workspace_;
  std::vector<LayerCache> caches_;
  int64_t capacity_ = 0;
  int64_t pos_ = 0;
  int32_t n_threads_ = 0;
};

}  // namespace kvflash::tools::run
