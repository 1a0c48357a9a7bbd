// kvflash-plan's arithmetic: how many bytes a model's KV cache takes per token, at a context
// length, and how long a context fits in a memory budget. Pure functions of a ModelShape and a
// K/V type pair, so the tests check them against hand-computed numbers.
//
// Bytes are counted as kvflash stores them: one row (head_dim values of one token of one KV head)
// takes row_size(type, head_dim) bytes, whole blocks, the last one zero-padded (turbo types pad a
// row to a multiple of 128 values, q8_0/q4_0 to 32).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvflash/formats.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/status.hpp"

namespace kvflash::tools::plan {

struct ModelShape {
  std::string name = "custom";
  int32_t layers = 0;
  int32_t q_heads = 0;
  int32_t kv_heads = 0;
  HeadDims head_dim = {128, 128};
  // Layers with sliding-window attention keep only the last swa_window tokens: min(context,
  // swa_window) rows each. The other layers keep the whole context.
  int32_t swa_layers = 0;
  int64_t swa_window = 0;
  // MLA latent sharing (DeepSeek-V2/V3): K and V are read from one stored latent of head_dim.k
  // values per token per KV head (V = its first head_dim.v values), so a layer stores
  // kv_heads * row_size(k_type, head_dim.k) bytes per token and the V type plays no part.
  bool mla = false;
  // The context the model was trained for (max_position_embeddings); 0 when unknown. Only to warn
  // that a context that fits in memory may still be more than the model handles.
  int64_t trained_context = 0;

  int32_t full_layers() const { return layers - swa_layers; }
};

struct Preset {
  std::string_view name;     // canonical spelling, matched case-insensitively
  std::string_view aliases;  // comma list, also matched case-insensitively
  ModelShape shape;
};

// The built-in presets (public model configs; the sources are cited in model.cpp).
std::span<const Preset> presets();
// "Llama-3.1-8B, Llama-3.1-70B, ..." for help and error messages.
std::string preset_names();
// Case-insensitive lookup; an unknown name is an error that lists every preset.
Expected<ModelShape> find_preset(std::string_view flag, std::string_view name);
// The shape is self-consistent: positive layers/heads, KV heads dividing query heads, a head dim
// of SupportedSpace, 0 <= swa_layers <= layers with a positive window, MLA with K dim >= V dim.
Status validate(const ModelShape& m);

// Bytes one token adds to one layer's cache, padding included.
int64_t layer_token_bytes(const ModelShape& m, KvType k, KvType v);
// The same without padding (block bytes / block values per value): the pad ratio's denominator.
double layer_token_bytes_unpadded(const ModelShape& m, KvType k, KvType v);
// Bytes one token adds over all layers (sliding-window layers included: every layer stores the
// newest token; the window only caps how many they keep).
int64_t token_bytes(const ModelShape& m, KvType k, KvType v);
// Bytes of one sequence's cache at `context` tokens: full layers hold context rows, sliding-window
// layers min(context, window). Decode reads exactly this per generated token (each layer reads
// its stored window once). nullopt when it does not fit in int64.
std::optional<int64_t> sequence_bytes(const ModelShape& m, KvType k, KvType v, int64_t context);
// The same for `batch` sequences of `context` tokens; nullopt on int64 overflow.
std::optional<int64_t> cache_bytes(const ModelShape& m, KvType k, KvType v, int64_t context,
                                   int64_t batch);

// The longest context per sequence such that batch * sequence_bytes(context) <= budget (0 when
// not even one token fits). nullopt: unbounded (every layer is a sliding-window layer, so the
// cache stops growing at the window).
std::optional<int64_t> max_context(const ModelShape& m, KvType k, KvType v, int64_t budget,
                                   int64_t batch);

// One line, e.g. "Llama-3.1-8B: 32 layers, 32/8 heads, head dim 128".
std::string describe(const ModelShape& m);

}  // namespace kvflash::tools::plan
