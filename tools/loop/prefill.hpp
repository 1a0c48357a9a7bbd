// kvflash-loop's prefill mode (--chunk N > 1): a model's attention for one chunk of N prompt
// tokens per sequence, as an engine's chunked prefill runs it. Per KV type pair (every layer that
// pair) one gpu::KvCache holds the model's layers; each step appends the chunk to every layer's
// cache (f32 rows quantized on the device: begin_step(N), append(layer, N)) and runs every
// layer's attention with n_q_tokens = N over the cache (the queries are the chunk's positions,
// causal), one layer after another on one stream: eagerly, and as one CUDA graph per step driven
// by gpu::GraphRunner.
//
// Schedule, per depth d (the context already in the cache): before each step the lengths are set
// back to d on the device (outside the timed step), so every timed step is the same work, the
// chunk at positions d .. d + N - 1 attending to d + N keys, and a median over steps means
// something; the graph, captured once per type, reads the lengths on the device and so serves
// every step and every depth. The cache is filled once per type up to the largest depth by the
// same appends (fill_appends), and its capacity is the largest depth plus one chunk.
//
// Reported per type, depth and mode: ms per step (all layers, appends included), prompt tokens/s
// (N x sequences per step), the ratio to f16/f16 at the same depth and mode where f16/f16 is among
// the types, and, from the attention of every layer timed alone (no appends, eager), TFLOP/s over
// the visible causal (query, key) pairs (kvflash-bench's count).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvflash/graph_runner.hpp"
#include "kvflash/kv_cache.hpp"
#include "kvflash/status.hpp"
#include "loop/loop.hpp"

namespace kvflash::tools::loop {

// Untimed steps before the timed ones, in both modes (so both time the same steps): the graph
// runner's eager steps and its capture, after which every step is a replay.
inline constexpr int32_t kPrefillWarmupSteps = GraphStepper::kEagerRunsBeforeCapture + 1;

// The types a prefill run compares when neither -ctk nor -ctv is given (each K = V).
std::vector<gpu::KvLayerTypes> default_prefill_types();

// Tokens per sequence the cache must hold: the largest depth plus one chunk.
int64_t prefill_capacity(const std::vector<int64_t>& depths, int32_t chunk);

// The appends that fill a cache from empty to `depth` tokens per sequence: chunks of `chunk`
// tokens, the last one shorter when `chunk` does not divide `depth`.
std::vector<int32_t> fill_appends(int64_t depth, int32_t chunk);

// One timed step at depth d: the lengths before and after it, the tokens appended per layer (all
// sequences), and the positions of its queries.
struct ChunkStep {
  int64_t kv_before = 0;    // lengths when the step starts (set back to d before each step)
  int64_t kv_after = 0;     // lengths the attention runs over: d + N
  int64_t appended = 0;     // rows of K (and of V) written per layer: N x sequences
  int64_t first_query = 0;  // position of the chunk's first query: d
  int64_t last_query = 0;   // d + N - 1
};
ChunkStep chunk_step(int64_t depth, int32_t chunk, int32_t seqs);

// Floating-point work of one step's attention over every layer: 2 * (Dk + Dv) per visible causal
// (query, key) pair, times query heads, sequences and layers (bench::attention_flops per layer).
double chunk_flops(const plan::ModelShape& m, int32_t seqs, int32_t chunk, int64_t depth);

// Prompt tokens per second of a step of `ms` milliseconds: chunk x sequences / time.
double prefill_tokens_per_second(int32_t chunk, int32_t seqs, double ms);

struct PrefillRow {
  gpu::KvLayerTypes types;
  int64_t depth = 0;  // tokens in the cache before the chunk
  bool graphs = false;
  double ms_per_step = 0;    // median step: appends and attention of every layer
  double tokens_per_s = 0;   // chunk x sequences / ms_per_step
  double vs_f16 = 0;         // tokens_per_s / f16's at the same depth and mode; NaN without f16
  double attention_ms = 0;   // median: every layer's attention alone (eager, no appends)
  double tflops = 0;         // chunk_flops / attention_ms
  std::string kernel;        // what the plan chose (one plan: every layer has the same types)
  int64_t kernel_nodes = 0;  // graph mode: kernels in the captured step
};

// Sets vs_f16 of every row: its tokens/s over that of the f16/f16 row of the same depth and
// mode; NaN where there is none.
void set_f16_ratios(std::vector<PrefillRow>& rows);

struct PrefillReport {
  std::vector<PrefillRow> rows;  // per type: per depth: eager, graph (as asked)
  int64_t capacity = 0;          // tokens per sequence of every cache
  GraphCounters counters;        // over the whole run (one graph per type)
};

// Runs the prefill mode on CUDA device 0 (cfg.chunk > 1, cfg.prefill_types); an unsupported error
// without a device or a CUDA build.
Expected<PrefillReport> run_prefill(const LoopConfig& cfg);

}  // namespace kvflash::tools::loop
