// A small random Llama-architecture model for kvflash-run's tests: f32 weights (row-major, out x
// in, as GGUF holds them) and its GGUF file with matrices in f32, f16 or q8_0.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvflash/formats.hpp"
#include "run/gguf.hpp"

namespace kvflash::tools::run::testing {

struct Shape {
  int32_t vocab = 40, embd = 128, layers = 2, ff = 96, heads = 2, heads_kv = 1;
  int32_t head_dim() const { return embd / heads; }
};

struct RawModel {  // row-major (out x in) f32 weights, as the file holds them
  Shape s;
  std::vector<float> tok, out_norm, out;
  struct Layer {
    std::vector<float> attn_norm, wq, wk, wv, wo, ffn_norm, wg, wu, wd;
  };
  std::vector<Layer> layers;
};

inline std::vector<float> randn(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline RawModel random_model(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  RawModel m;
  m.s = s;
  const size_t e = s.embd, q = size_t(s.heads) * s.head_dim(),
               kv = size_t(s.heads_kv) * s.head_dim();
  m.tok = randn(size_t(s.vocab) * e, rng, 1.0f);
  m.out_norm = randn(e, rng, 0.1f);
  for (float& x : m.out_norm) x += 1.0f;
  m.out = randn(size_t(s.vocab) * e, rng, 0.1f);
  for (int l = 0; l < s.layers; ++l) {
    RawModel::Layer L;
    L.attn_norm = randn(e, rng, 0.1f);
    for (float& x : L.attn_norm) x += 1.0f;
    L.ffn_norm = L.attn_norm;
    L.wq = randn(q * e, rng, 0.15f);
    L.wk = randn(kv * e, rng, 0.15f);
    L.wv = randn(kv * e, rng, 0.15f);
    L.wo = randn(e * q, rng, 0.1f);
    L.wg = randn(size_t(s.ff) * e, rng, 0.1f);
    L.wu = randn(size_t(s.ff) * e, rng, 0.1f);
    L.wd = randn(e * s.ff, rng, 0.1f);
    m.layers.push_back(L);
  }
  return m;
}

inline std::vector<uint8_t> as_type(const std::vector<float>& v, int64_t cols, GgmlType t) {
  const KvType kt = t == GgmlType::f32   ? KvType::f32
                    : t == GgmlType::f16 ? KvType::f16
                                         : KvType::q8_0;
  const int64_t rows = static_cast<int64_t>(v.size()) / cols;
  std::vector<uint8_t> b(static_cast<size_t>(rows) * row_size(kt, cols));
  quantize_rows(kt, v.data(), rows, cols, b.data());
  return b;
}

// byte_tokens: marked as the project's byte-token models are (tokenizer.ggml.model "bytes").
inline std::vector<uint8_t> to_gguf(const RawModel& m, GgmlType matrices,
                                    bool byte_tokens = false) {
  const Shape& s = m.s;
  GgufWriter w;
  w.metadata = {{"general.architecture", GgufValue::of_string("llama")},
                {"llama.embedding_length", GgufValue::of_u32(uint32_t(s.embd))},
                {"llama.block_count", GgufValue::of_u32(uint32_t(s.layers))},
                {"llama.feed_forward_length", GgufValue::of_u32(uint32_t(s.ff))},
                {"llama.attention.head_count", GgufValue::of_u32(uint32_t(s.heads))},
                {"llama.attention.head_count_kv", GgufValue::of_u32(uint32_t(s.heads_kv))},
                {"llama.attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-5f)},
                {"llama.rope.freq_base", GgufValue::of_f32(10000.0f)},
                {"llama.context_length", GgufValue::of_u32(256)}};
  if (byte_tokens) w.metadata.push_back({"tokenizer.ggml.model", GgufValue::of_string("bytes")});
  const auto add = [&](const std::string& name, const std::vector<float>& v, int64_t cols,
                       bool matrix) {
    const int64_t rows = static_cast<int64_t>(v.size()) / cols;
    const GgmlType t = matrix ? matrices : GgmlType::f32;
    w.tensors.push_back({name,
                         matrix ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{cols}, t,
                         as_type(v, cols, t)});
  };
  const int64_t e = s.embd, q = int64_t(s.heads) * s.head_dim();
  add("token_embd.weight", m.tok, e, true);
  add("output_norm.weight", m.out_norm, e, false);
  add("output.weight", m.out, e, true);
  for (int l = 0; l < s.layers; ++l) {
    const RawModel::Layer& L = m.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", L.attn_norm, e, false);
    add(p + "attn_q.weight", L.wq, e, true);
    add(p + "attn_k.weight", L.wk, e, true);
    add(p + "attn_v.weight", L.wv, e, true);
    add(p + "attn_output.weight", L.wo, q, true);
    add(p + "ffn_norm.weight", L.ffn_norm, e, false);
    add(p + "ffn_gate.weight", L.wg, e, true);
    add(p + "ffn_up.weight", L.wu, e, true);
    add(p + "ffn_down.weight", L.wd, s.ff, true);
  }
  Expected<std::vector<uint8_t>> b = write_gguf(w);
  return b.ok() ? *b : std::vector<uint8_t>{};  // (an empty file fails every test that reads it)
}

}  // namespace kvflash::tools::run::testing
