// The KV cache on the GPU: K and V of L layers for a batch of sequences, in device memory, in the
// types chosen per layer (K and V may differ), contiguous or paged. Tokens are appended as f32
// rows and quantized on the device (gpu::quantize_rows' bytes, bit for bit) at the lengths the
// device holds, so one captured CUDA graph appends and attends for a whole decode:
//
//   KvCache cache = *KvCache::create(config, stream);           // all device memory, once
//   per step (eager or inside one captured graph):
//     cache.begin_step(1, stream);                              // lengths += 1 on the device
//     for each layer l:
//       cache.append(l, k_new, v_new, 1, stream);               // rows at the new positions
//       run(plan_l, cache.tensors(l, q, out), workspace, stream);
//
// Every step call only launches kernels: no allocation, no synchronization, no host read of the
// lengths. A step that does not fit a sequence's capacity leaves that sequence's length and
// contents as they are and marks it full on the device (full_sequences() reads the marks,
// outside the hot path): nothing is ever written past the capacity. The attention problem of a
// layer comes from problem(): capacity and page size are the cache's, so the plan's shape signature
// does not change while lengths grow.
//
// Layouts. Contiguous: K (and V) of a layer is (seq, token, head, row), kvflash-plan's bytes
// exactly. Paged: each layer holds n_pages pages of (page_size tokens, heads, row), each page
// 16-byte aligned; one page table (seq, pages_per_seq) of int32 page numbers, shared by every
// layer and by K and V as in serving engines, initially page s * pages_per_seq + i for page i of
// sequence s (capped at n_pages - 1 when the pool is smaller than n_seqs x pages_per_seq, so
// sequences would share that page: set a real table before appending then); set_page_table()
// replaces it (the kernels read it when they run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvflash/device.hpp"
#include "kvflash/export.h"
#include "kvflash/formats.hpp"
#include "kvflash/memory_report.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/status.hpp"

namespace kvflash::gpu {

struct KvLayerTypes {
  KvType k = KvType::f16;
  KvType v = KvType::f16;
};

struct KvCacheConfig {
  int32_t n_seqs = 1;
  int32_t n_kv_heads = 8;
  HeadDims head_dim = {128, 128};
  std::vector<KvLayerTypes> layers;  // one entry per layer
  int64_t capacity = 0;              // tokens per sequence
  int32_t page_size = 0;             // 0: contiguous; > 0: tokens per page
  int64_t n_pages = 0;  // paged: pages per layer; 0 = n_seqs * ceil(capacity / page_size)
};

// What a cache of this config holds on the device, before creating it.
struct KvCacheBytes {
  size_t rows = 0;     // K and V rows of every layer (contiguous: kvflash-plan's number)
  size_t padding = 0;  // page and layer alignment
  size_t control = 0;  // lengths, full flags, page table
  size_t total() const { return rows + padding + control; }
};
KVFLASH_API Expected<KvCacheBytes> kv_cache_bytes(const KvCacheConfig& c);

class KVFLASH_API KvCache {
 public:
  KvCache() = default;
  // Validates the config (names the offending field), allocates the device memory (two
  // allocations), zeroes the lengths and the flag and writes the initial page table, then
  // synchronizes `stream`. Not legal under capture (it allocates).
  static Expected<KvCache> create(const KvCacheConfig& c, void* stream);

  const KvCacheConfig& config() const { return cfg_; }
  int32_t n_layers() const { return static_cast<int32_t>(cfg_.layers.size()); }
  int32_t pages_per_seq() const { return pages_per_seq_; }

  // Layer `layer`'s K and V as the kernels read them, the device lengths (n_seqs int64), the
  // device page table (n_seqs x pages_per_seq int32; nullptr when contiguous).
  KvTensor k(int32_t layer) const;
  KvTensor v(int32_t layer) const;
  const int64_t* lengths() const { return lens_; }
  const int32_t* page_table() const { return pages_; }

  // The attention problem over a layer (types, dims, capacity, page size, KV heads; defaults for
  // the rest, which the caller may change) and its tensors (lengths from the device).
  AttentionProblem problem(int32_t layer, int32_t n_q_heads, int32_t n_q_tokens) const;
  AttentionTensors tensors(int32_t layer, const float* q, float* out) const;

  // ---- one step: kernels only, legal under graph capture
  // lengths[s] += n_new for every sequence that has room (the others are marked full).
  Status begin_step(int32_t n_new, void* stream);
  // Quantizes n_new tokens per sequence of K and V (device f32, (n_seqs, n_new, n_kv_heads,
  // head_dim) each) into layer `layer` at tokens lengths[s] - n_new .. lengths[s] - 1.
  Status append(int32_t layer, const float* k, const float* v, int32_t n_new, void* stream);

  // ---- host control (synchronous; not under capture)
  Status set_lengths(std::span<const int64_t> lens, void* stream);
  Status set_page_table(std::span<const int32_t> table, void* stream);
  // The sequences that a step found full since create / clear_full: their lengths stopped
  // and nothing more was written to them (reads the device flags). Empty when none; -1 alone
  // when an append met a token past the capacity without a full step (lengths set too high) or a
  // page table entry outside the pool (its rows were not written).
  Expected<std::vector<int32_t>> full_sequences(void* stream) const;
  Status clear_full(void* stream);

  const KvCacheBytes& bytes() const { return bytes_; }
  // Adds "KV storage", "KV alignment" and "KV lengths / page table" entries.
  void report(MemoryReport& r) const;

 private:
  KvTensor tensor(size_t offset, KvType t, int32_t dim) const;

  KvCacheConfig cfg_;
  KvCacheBytes bytes_;
  int32_t pages_per_seq_ = 0;
  DeviceBuffer storage_;
  DeviceBuffer control_;
  std::vector<size_t> k_off_, v_off_;  // per layer, into storage_
  int64_t* lens_ = nullptr;
  int32_t* flags_ = nullptr;  // [0]: an append met a token past the capacity; [1 + s]: full
  int32_t* pages_ = nullptr;
};

}  // namespace kvflash::gpu
