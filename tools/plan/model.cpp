#include "plan/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "common/cli_parse.hpp"

namespace kvflash::tools::plan {
namespace {

ModelShape shape(std::string_view name, int64_t trained_context, int32_t layers, int32_t q,
                 int32_t kv, HeadDims d, int32_t swa_layers = 0, int64_t swa_window = 0,
                 bool mla = false) {
  ModelShape m;
  m.trained_context = trained_context;
  m.name = std::string(name);
  m.layers = layers;
  m.q_heads = q;
  m.kv_heads = kv;
  m.head_dim = d;
  m.swa_layers = swa_layers;
  m.swa_window = swa_window;
  m.mla = mla;
  return m;
}

// Numbers from the models' public Hugging Face config.json files. The trained context is
// max_position_embeddings: 131072 for Llama-3.1 and Gemma-3-27B, 40960 for Qwen3-30B-A3B (32768
// native, more with YaRN), 32768 for Mistral-7B-v0.3, 163840 for DeepSeek-V3.
const std::array<Preset, 6>& preset_table() {
  static const std::array<Preset, 6> table = {{
      // meta-llama/Llama-3.1-8B: num_hidden_layers 32, num_attention_heads 32,
      // num_key_value_heads 8, hidden_size 4096 (head dim 4096 / 32 = 128).
      {"Llama-3.1-8B", "llama3.1-8b", shape("Llama-3.1-8B", 131072, 32, 32, 8, {128, 128})},
      // meta-llama/Llama-3.1-70B: num_hidden_layers 80, num_attention_heads 64,
      // num_key_value_heads 8, hidden_size 8192 (head dim 128).
      {"Llama-3.1-70B", "llama3.1-70b", shape("Llama-3.1-70B", 131072, 80, 64, 8, {128, 128})},
      // Qwen/Qwen3-30B-A3B: num_hidden_layers 48, num_attention_heads 32, num_key_value_heads 4,
      // head_dim 128 (explicit in the config; hidden_size 2048 is not heads * head_dim).
      {"Qwen3-30B-A3B", "qwen3-30b", shape("Qwen3-30B-A3B", 40960, 48, 32, 4, {128, 128})},
      // google/gemma-3-27b-it text_config: num_hidden_layers 62, num_attention_heads 32,
      // num_key_value_heads 16, head_dim 128, sliding_window 1024, sliding_window_pattern 6:
      // layer i is global iff (i + 1) % 6 == 0, so 10 global layers and 52 local ones.
      {"Gemma-3-27B", "gemma3-27b", shape("Gemma-3-27B", 131072, 62, 32, 16, {128, 128}, 52, 1024)},
      // mistralai/Mistral-7B-v0.3: num_hidden_layers 32, num_attention_heads 32,
      // num_key_value_heads 8, hidden_size 4096 (head dim 128), sliding_window null (v0.1 had
      // a 4096-token window; v0.3 attends to the whole context).
      {"Mistral-7B", "mistral-7b-v0.3", shape("Mistral-7B", 32768, 32, 32, 8, {128, 128})},
      // deepseek-ai/DeepSeek-V3: num_hidden_layers 61 (the multi-token-prediction layer is not
      // counted: it serves speculative decoding only), num_attention_heads 128, kv_lora_rank 512,
      // qk_rope_head_dim 64. MLA caches the 512-value latent plus the 64-value shared RoPE key:
      // 576 values per token per layer, one "KV head"; V is the latent's first 512 values.
      // DeepSeek-R1 has the same attention config.
      {"DeepSeek-V3", "deepseek-r1",
       shape("DeepSeek-V3", 163840, 61, 128, 1, {576, 512}, 0, 0, true)},
  }};
  return table;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// a * b and a + b, or nullopt on int64 overflow (contexts up to 2^32 times bytes per token of a
// large model overflow easily).
std::optional<int64_t> mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
std::optional<int64_t> add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace

std::span<const Preset> presets() {
  return preset_table();
}

std::string preset_names() {
  std::string out;
  for (const Preset& p : presets()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

Expected<ModelShape> find_preset(std::string_view flag, std::string_view name) {
  const std::string want = lower(name);
  for (const Preset& p : presets()) {
    if (lower(p.name) == want) return p.shape;
    for (const std::string& alias : split(p.aliases, ','))
      if (lower(alias) == want) return p.shape;
  }
  return invalid_argument(fmt::format(
      "{}: '{}' is not a known model; presets (case-insensitive): {}; or describe the model with "
      "--layers N --heads Q/KV [--head-dim D] [--swa-layers N --swa-window W] [--mla]",
      flag, name, preset_names()));
}

Status validate(const ModelShape& m) {
  if (m.layers < 1) return invalid_argument(fmt::format("layers: {} must be >= 1", m.layers));
  if (m.q_heads < 1 || m.kv_heads < 1 || m.q_heads % m.kv_heads != 0)
    return invalid_argument(
        fmt::format("heads: {}/{}: KV heads must divide query heads", m.q_heads, m.kv_heads));
  const auto& dims = SupportedSpace::head_dims;
  if (std::find(dims.begin(), dims.end(), m.head_dim) == dims.end())
    return invalid_argument(
        fmt::format("head dim {}/{} is not supported by kvflash", m.head_dim.k, m.head_dim.v));
  if (m.swa_layers < 0 || m.swa_layers > m.layers)
    return invalid_argument(fmt::format("--swa-layers: {} must be between 0 and the {} layers",
                                        m.swa_layers, m.layers));
  if (m.swa_layers > 0 && m.swa_window < 1)
    return invalid_argument("--swa-window: must be >= 1 when there are sliding-window layers");
  if (m.mla && m.head_dim.v > m.head_dim.k)
    return invalid_argument(
        fmt::format("--mla: V ({}) must be the first values of the K latent ({}), so V <= K",
                    m.head_dim.v, m.head_dim.k));
  return {};
}

int64_t layer_token_bytes(const ModelShape& m, KvType k, KvType v) {
  const int64_t row_k = static_cast<int64_t>(row_size(k, m.head_dim.k));
  const int64_t row_v = m.mla ? 0 : static_cast<int64_t>(row_size(v, m.head_dim.v));
  return m.kv_heads * (row_k + row_v);
}

double layer_token_bytes_unpadded(const ModelShape& m, KvType k, KvType v) {
  auto per_value = [](KvType t) {
    return static_cast<double>(traits(t).block_bytes) / traits(t).block_values;
  };
  const double k_bytes = per_value(k) * m.head_dim.k;
  const double v_bytes = m.mla ? 0.0 : per_value(v) * m.head_dim.v;
  return m.kv_heads * (k_bytes + v_bytes);
}

int64_t token_bytes(const ModelShape& m, KvType k, KvType v) {
  return m.layers * layer_token_bytes(m, k, v);
}

std::optional<int64_t> sequence_bytes(const ModelShape& m, KvType k, KvType v, int64_t context) {
  const int64_t per_layer = layer_token_bytes(m, k, v);
  const int64_t swa_tokens = std::min(context, m.swa_window);
  const auto full = mul(int64_t{m.full_layers()} * per_layer, context);
  const auto swa = mul(int64_t{m.swa_layers} * per_layer, swa_tokens);
  if (!full || !swa) return std::nullopt;
  return add(*full, *swa);
}

std::optional<int64_t> cache_bytes(const ModelShape& m, KvType k, KvType v, int64_t context,
                                   int64_t batch) {
  const auto one = sequence_bytes(m, k, v, context);
  if (!one) return std::nullopt;
  return mul(*one, batch);
}

std::optional<int64_t> max_context(const ModelShape& m, KvType k, KvType v, int64_t budget,
                                   int64_t batch) {
  // batch * bytes(c) <= budget  <=>  bytes(c) <= floor(budget / batch), bytes being integers.
  const int64_t per_seq = budget / batch;
  const int64_t per_layer = layer_token_bytes(m, k, v);
  // While c <= window every layer holds c rows: bytes(c) = layers * per_layer * c.
  const int64_t uncapped = per_seq / (m.layers * per_layer);
  if (m.swa_layers == 0 || uncapped < m.swa_window) return uncapped;
  // Past the window the sliding-window layers stay at `window` rows and only the full layers
  // grow: bytes(c) = full * per_layer * c + swa * per_layer * window. per_seq >= bytes(window)
  // here, so the subtraction cannot go negative.
  if (m.full_layers() == 0) return std::nullopt;
  const int64_t swa_bytes = int64_t{m.swa_layers} * per_layer * m.swa_window;
  return (per_seq - swa_bytes) / (int64_t{m.full_layers()} * per_layer);
}

std::string describe(const ModelShape& m) {
  std::string out = fmt::format("{}: {} layers", m.name, m.layers);
  if (m.swa_layers > 0)
    out += fmt::format(" ({} with a sliding window of {} tokens)", m.swa_layers, m.swa_window);
  if (m.mla) {
    out += fmt::format(", {} query heads, ", m.q_heads);
    out +=
        m.kv_heads == 1 ? std::string("one MLA latent") : fmt::format("{} MLA latents", m.kv_heads);
    out += fmt::format(" of {} values per token per layer (V = its first {})", m.head_dim.k,
                       m.head_dim.v);
    return out;
  }
  out += fmt::format(", {}/{} heads, head dim ", m.q_heads, m.kv_heads);
  out += m.head_dim.k == m.head_dim.v ? fmt::format("{}", m.head_dim.k)
                                      : fmt::format("{}/{}", m.head_dim.k, m.head_dim.v);
  return out;
}

}  // namespace kvflash::tools::plan
