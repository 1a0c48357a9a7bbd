// kvflash-loop: the attention of a whole decode step, as an engine runs it. A model of L layers
// (32 by default) keeps one KV cache per layer on the GPU, sized by a plan for the largest depth;
// each generated token runs decode attention over every layer, one after another on one stream,
// either eagerly (one launch per kernel, as an engine without graphs) or as one CUDA graph per
// step driven by gpu::GraphRunner (eager twice, capture, then replay; the lengths live on the
// device, so one graph serves every depth).
//
// Per depth and mode it reports the time per token (median over the timed tokens), the sum of
// the layers' kernel times measured one by one (each behind a launch cover, L2 flushed, as
// kvflash-bench does), and the overhead of the step over that sum: what launching costs. And it
// accounts for memory: every byte the loop holds comes from one gpu::DevicePool, the KV storage
// is compared to kvflash-plan's arithmetic for the same model (to the byte), and the pool to what
// the driver says it gave up (cudaMemGetInfo before and after).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvflash/formats.hpp"
#include "kvflash/graph_runner.hpp"
#include "kvflash/kv_cache.hpp"
#include "kvflash/memory_report.hpp"
#include "kvflash/status.hpp"
#include "plan/model.hpp"

namespace kvflash::tools::loop {

struct LoopConfig {
  plan::ModelShape model;       // layers, heads, head dims (no MLA, no sliding window)
  std::vector<KvType> k_types;  // decode: one per layer (expand_types makes them so)
  std::vector<KvType> v_types;
  std::vector<int64_t> depths;  // tokens already in the cache; the plan is for the largest
  int32_t tokens = 20;          // timed steps per depth and mode
  int32_t kernel_reps = 5;      // timed runs of each layer alone (its median is summed)
  // Prefill mode (prefill.hpp) when chunk > 1: query tokens appended and attended per sequence
  // and step, for `seqs` sequences, each K/V pair of prefill_types in every layer in turn.
  int32_t chunk = 1;
  int32_t seqs = 1;
  std::vector<gpu::KvLayerTypes> prefill_types;
  bool graphs_off = true, graphs_on = true;
  uint64_t seed = 42;
};

// One K or V type for every layer, or one per layer: the list as given, or an error naming the
// flag when its length is neither 1 nor `layers`.
Expected<std::vector<KvType>> expand_types(std::string_view flag, const std::vector<KvType>& types,
                                           int32_t layers);

// The KV bytes the loop allocates: per layer, capacity tokens x KV heads x (K row + V row).
// Equal by construction to kvflash-plan's sequence_bytes for one type pair; computed here per
// layer so that mixed layers are counted too.
int64_t planned_kv_bytes(const plan::ModelShape& m, const std::vector<KvType>& k,
                         const std::vector<KvType>& v, int64_t capacity);

struct LoopRow {
  int64_t depth = 0;
  bool graphs = false;
  double us_per_token = 0;   // median of the timed steps (events around the whole step)
  double kernel_sum_us = 0;  // sum over layers of each layer's median kernel time
  double overhead = 0;       // us_per_token / kernel_sum_us - 1
  double kv_gbps = 0;        // KV bytes read per step (all layers at this depth) / us_per_token
  int64_t kernel_nodes = 0;  // graph mode: kernels in the captured step
};

struct LoopReport {
  std::vector<LoopRow> rows;
  MemoryReport memory;
  int64_t kv_bytes = 0;     // allocated KV storage
  int64_t plan_bytes = 0;   // kvflash-plan's number for the same model and capacity
  size_t device_taken = 0;  // cudaMemGetInfo free before - after creating the pool
  size_t pool_capacity = 0;
  GraphCounters counters;            // over the whole run (every depth)
  std::vector<std::string> kernels;  // the kernel each layer's plan chose
};

// Runs the loop on CUDA device 0; an unsupported error without a device or a CUDA build.
Expected<LoopReport> run_loop(const LoopConfig& cfg);

}  // namespace kvflash::tools::loop
