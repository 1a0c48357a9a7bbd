// The C API (include/kvflash/kvflash.h), its engine half: plans made once and run per call on host
// or device buffers (graph-safe), the CUDA device services and the device KV cache. Converts
// through capi.hpp like the value half (kvflash_c.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>

#include "capi/capi.hpp"
#include "core/backend.hpp"
#include "kvflash/device.hpp"
#include "kvflash/kv_cache.hpp"
#include "kvflash/kvflash.h"
#include "kvflash/registry.hpp"

using namespace kvflash::capi;

// ---- Plan and run ----------------------------------------------------------------------------

struct kvflash_plan {
  kvflash::Plan plan;
};

struct kvflash_kv_cache {
  kvflash::gpu::KvCache cache;
};

namespace kvflash::capi {

kvflash_backend to_c(kvflash::Backend b) {
  return b == kvflash::Backend::cuda ? KVFLASH_BACKEND_CUDA : KVFLASH_BACKEND_CPU;
}

int fail_null_plan() noexcept {
  return fail_invalid("plan is NULL (create one with kvflash_plan_create)");
}
int fail_null_cache() noexcept {
  return fail_invalid("cache is NULL (create one with kvflash_kv_cache_create)");
}

// The device services, or the error that says this build has none.
kvflash::Expected<const kvflash::DeviceServices*> device(const char* function) {
  const kvflash::DeviceServices* d = kvflash::device_services();
  if (d == nullptr) return kvflash::no_device_backend(function);
  return d;
}

kvflash::Expected<kvflash::gpu::KvCacheConfig> to_cpp(const kvflash_kv_cache_config* c) {
  if (c == nullptr) return kvflash::invalid_argument("config is NULL");
  kvflash::gpu::KvCacheConfig k;
  k.n_seqs = c->n_seqs;
  k.n_kv_heads = c->n_kv_heads;
  k.head_dim = {c->head_dim.k, c->head_dim.v};
  if (c->n_layers < 1 || c->n_layers > (1 << 16)) {
    return kvflash::invalid_argument(
        fmt::format("config.n_layers={} is out of range (allowed: 1 .. 65536)", c->n_layers));
  }
  if (c->k_types == nullptr || c->v_types == nullptr) {
    return kvflash::invalid_argument(
        fmt::format("config.{} is NULL (allowed: an array of n_layers={} types)",
                    c->k_types == nullptr ? "k_types" : "v_types", c->n_layers));
  }
  k.layers.resize(static_cast<size_t>(c->n_layers));
  for (int32_t l = 0; l < c->n_layers; ++l) {
    const auto kt = to_cpp(c->k_types[l]);
    if (!kt) return bad_type(fmt::format("config.k_types[{}]", l), c->k_types[l]);
    const auto vt = to_cpp(c->v_types[l]);
    if (!vt) return bad_type(fmt::format("config.v_types[{}]", l), c->v_types[l]);
    k.layers[static_cast<size_t>(l)] = {*kt, *vt};
  }
  k.capacity = c->capacity;
  k.page_size = c->page_size;
  k.n_pages = c->n_pages;
  return k;
}

kvflash::Status check_layer(const kvflash_kv_cache* cache, int32_t layer) {
  const int32_t n = cache->cache.n_layers();
  if (layer < 0 || layer >= n) {
    return kvflash::invalid_argument(fmt::format(
        "layer={} is out of range (allowed: 0 .. {}, the cache's layers)", layer, n - 1));
  }
  return {};
}

}  // namespace kvflash::capi

extern "C" {

int kvflash_plan_create(const kvflash_problem* problem, const kvflash_options* options,
                        kvflash_plan** plan) {
  return guarded("kvflash_plan_create", [&] {
    if (plan == nullptr) return fail_invalid("plan is NULL (allowed: where to store the plan)");
    *plan = nullptr;
    const auto p = to_cpp(problem);
    if (!p) return fail(p.error());
    const auto o = to_cpp(options);
    if (!o) return fail(o.error());
    kvflash::Expected<kvflash::Plan> pl = kvflash::plan(*p, *o);
    if (!pl) return fail(pl.error());
    *plan = new kvflash_plan{std::move(*pl)};
    return kOk;
  });
}

void kvflash_plan_destroy(kvflash_plan* plan) {
  delete plan;
}

size_t kvflash_plan_workspace_size(const kvflash_plan* plan) {
  return plan != nullptr ? plan->plan.workspace_bytes : 0;
}

kvflash_backend kvflash_plan_backend(const kvflash_plan* plan) {
  return plan != nullptr ? to_c(plan->plan.kernel->backend) : KVFLASH_BACKEND_AUTO;
}

const char* kvflash_plan_kernel_name(const kvflash_plan* plan) {
  return plan != nullptr ? plan->plan.kernel->name.c_str() : "";
}

int kvflash_plan_problem(const kvflash_plan* plan, kvflash_problem* problem) {
  return guarded("kvflash_plan_problem", [&] {
    if (plan == nullptr) return fail_null_plan();
    if (problem == nullptr) return fail_invalid("problem is NULL (allowed: where to write it)");
    *problem = to_c(plan->plan.problem);
    return kOk;
  });
}

int kvflash_plan_check_tensors(const kvflash_plan* plan, const kvflash_tensors* tensors) {
  return guarded("kvflash_plan_check_tensors", [&] {
    if (plan == nullptr) return fail_null_plan();
    if (tensors == nullptr) return fail_invalid("tensors is NULL");
    const kvflash::Status s = kvflash::validate(plan->plan, to_cpp(*tensors));
    return s ? kOk : fail(s.error());
  });
}

// The hot path: no allocation on success (the conversions are plain copies, run() allocates
// nothing), nothing that synchronizes.
int kvflash_run(const kvflash_plan* plan, const kvflash_tensors* tensors, void* workspace,
                void* stream) {
  return guarded("kvflash_run", [&] {
    if (plan == nullptr) return fail_null_plan();
    if (tensors == nullptr) return fail_invalid("tensors is NULL");
    const kvflash::Status s = kvflash::run(plan->plan, to_cpp(*tensors), workspace, stream);
    return s ? kOk : fail(s.error());
  });
}

// ---- CUDA device services ---------------------------------------------------------------------

int32_t kvflash_cuda_device_count(void) {
  int32_t n = 0;
  guarded("kvflash_cuda_device_count", [&] {
    n = kvflash::cuda_device_count();
    return kOk;
  });
  return n;
}

int kvflash_cuda_malloc(void** ptr, size_t bytes) {
  return guarded("kvflash_cuda_malloc", [&] {
    if (ptr == nullptr) return fail_invalid("ptr is NULL (allowed: where to store the pointer)");
    *ptr = nullptr;
    const auto d = device("kvflash_cuda_malloc");
    if (!d) return fail(d.error());
    const kvflash::Status s = (*d)->malloc_device(ptr, bytes);
    return s ? kOk : fail(s.error());
  });
}

int kvflash_cuda_free(void* ptr) {
  return guarded("kvflash_cuda_free", [&] {
    const auto d = device("kvflash_cuda_free");
    if (!d) return ptr == nullptr ? kOk : fail(d.error());
    (*d)->free_device(ptr);
    return kOk;
  });
}

int kvflash_cuda_stream_create(void** stream) {
  return guarded("kvflash_cuda_stream_create", [&] {
    if (stream == nullptr) {
      return fail_invalid("stream is NULL (allowed: where to store the stream)");
    }
    *stream = nullptr;
    const auto d = device("kvflash_cuda_stream_create");
    if (!d) return fail(d.error());
    const kvflash::Status s = (*d)->create_stream(stream);
    return s ? kOk : fail(s.error());
  });
}

int kvflash_cuda_stream_destroy(void* stream) {
  return guarded("kvflash_cuda_stream_destroy", [&] {
    const auto d = device("kvflash_cuda_stream_destroy");
    if (!d) return stream == nullptr ? kOk : fail(d.error());
    (*d)->destroy_stream(stream);
    return kOk;
  });
}

int kvflash_cuda_stream_synchronize(void* stream) {
  return guarded("kvflash_cuda_stream_synchronize", [&] {
    const kvflash::Status s = kvflash::gpu::synchronize(stream);
    return s ? kOk : fail(s.error());
  });
}

int kvflash_cuda_copy(void* dst, const void* src, size_t bytes, void* stream) {
  return guarded("kvflash_cuda_copy", [&] {
    const kvflash::Status s = kvflash::gpu::copy(dst, src, bytes, stream);
    return s ? kOk : fail(s.error());
  });
}

int kvflash_cuda_fill(void* dst, int byte_value, size_t bytes, void* stream) {
  return guarded("kvflash_cuda_fill", [&] {
    const kvflash::Status s = kvflash::gpu::fill(dst, byte_value, bytes, stream);
    return s ? kOk : fail(s.error());
  });
}

int kvflash_cuda_quantize_rows(kvflash_type type, const float* src, int64_t n_rows,
                               int64_t n_values, void* dst, void* stream) {
  return guarded("kvflash_cuda_quantize_rows", [&] {
    const auto t = to_cpp(type);
    if (!t) return fail(bad_type("type", type));
    const kvflash::Status s = kvflash::gpu::quantize_rows(*t, src, n_rows, n_values, dst, stream);
    return s ? kOk : fail(s.error());
  });
}

int kvflash_cuda_dequantize_rows(kvflash_type type, const void* src, int64_t n_rows,
                                 int64_t n_values, float* dst, void* stream) {
  return guarded("kvflash_cuda_dequantize_rows", [&] {
    const auto t = to_cpp(type);
    if (!t) return fail(bad_type("type", type));
    const kvflash::Status s = kvflash::gpu::dequantize_rows(*t, src, n_rows, n_values, dst, stream);
    return s ? kOk : fail(s.error());
  });
}

// ---- The device KV cache ----------------------------------------------------------------------

int kvflash_kv_cache_bytes(const kvflash_kv_cache_config* config, size_t* bytes) {
  return guarded("kvflash_kv_cache_bytes", [&] {
    if (bytes == nullptr) return fail_invalid("bytes is NULL (allowed: where to store the size)");
    *bytes = 0;
    const auto c = to_cpp(config);
    if (!c) return fail(c.error());
    const auto b = kvflash::gpu::kv_cache_bytes(*c);
    if (!b) return fail(b.error());
    *bytes = b->total();
    return kOk;
  });
}

int kvflash_kv_cache_create(const kvflash_kv_cache_config* config, void* stream,
                            kvflash_kv_cache** cache) {
  return guarded("kvflash_kv_cache_create", [&] {
    if (cache == nullptr) return fail_invalid("cache is NULL (allowed: where to store the cache)");
    *cache = nullptr;
    const auto c = to_cpp(config);
    if (!c) return fail(c.error());
    auto k = kvflash::gpu::KvCache::create(*c, stream);
    if (!k) return fail(k.error());
    *cache = new kvflash_kv_cache{std::move(*k)};
    return kOk;
  });
}

void kvflash_kv_cache_destroy(kvflash_kv_cache* cache) {
  delete cache;
}

int kvflash_kv_cache_problem(const kvflash_kv_cache* cache, int32_t layer, int32_t n_q_heads,
                             int32_t n_q_tokens, kvflash_problem* problem) {
  return guarded("kvflash_kv_cache_problem", [&] {
    if (cache == nullptr) return fail_null_cache();
    if (problem == nullptr) return fail_invalid("problem is NULL (allowed: where to write it)");
    if (const kvflash::Status s = check_layer(cache, layer); !s) return fail(s.error());
    *problem = to_c(cache->cache.problem(layer, n_q_heads, n_q_tokens));
    return kOk;
  });
}

int kvflash_kv_cache_tensors(const kvflash_kv_cache* cache, int32_t layer, const float* q,
                             float* out, kvflash_tensors* tensors) {
  return guarded("kvflash_kv_cache_tensors", [&] {
    if (cache == nullptr) return fail_null_cache();
    if (tensors == nullptr) return fail_invalid("tensors is NULL (allowed: where to write them)");
    if (const kvflash::Status s = check_layer(cache, layer); !s) return fail(s.error());
    const kvflash::AttentionTensors t = cache->cache.tensors(layer, q, out);
    *tensors = kvflash_tensors{};
    tensors->q = t.q;
    tensors->k = to_c(t.k);
    tensors->v = to_c(t.v);
    tensors->kv_lens = t.kv_lens;
    tensors->out = t.out;
    return kOk;
  });
}

const int64_t* kvflash_kv_cache_lengths(const kvflash_kv_cache* cache) {
  return cache != nullptr ? cache->cache.lengths() : nullptr;
}

int kvflash_kv_cache_begin_step(kvflash_kv_cache* cache, int32_t n_new, void* stream) {
  return guarded("kvflash_kv_cache_begin_step", [&] {
    if (cache == nullptr) return fail_null_cache();
    const kvflash::Status s = cache->cache.begin_step(n_new, stream);
    return s ? kOk : fail(s.error());
  });
}

int kvflash_kv_cache_append(kvflash_kv_cache* cache, int32_t layer, const float* k, const float* v,
                            int32_t n_new, void* stream) {
  return guarded("kvflash_kv_cache_append", [&] {
    if (cache == nullptr) return fail_null_cache();
    if (const kvflash::Status s = check_layer(cache, layer); !s) return fail(s.error());
    const kvflash::Status s = cache->cache.append(layer, k, v, n_new, stream);
    return s ? kOk : fail(s.error());
  });
}

int kvflash_kv_cache_set_lengths(kvflash_kv_cache* cache, const int64_t* lengths, int32_t n_seqs,
                                 void* stream) {
  return guarded("kvflash_kv_cache_set_lengths", [&] {
    if (cache == nullptr) return fail_null_cache();
    if (lengths == nullptr && n_seqs != 0) return fail_invalid("lengths is NULL");
    if (n_seqs < 0) return fail_invalid(fmt::format("n_seqs={} is negative", n_seqs));
    const kvflash::Status s = cache->cache.set_lengths(
        std::span<const int64_t>(lengths, static_cast<size_t>(n_seqs)), stream);
    return s ? kOk : fail(s.error());
  });
}

int kvflash_kv_cache_set_page_table(kvflash_kv_cache* cache, const int32_t* table,
                                    int64_t n_entries, void* stream) {
  return guarded("kvflash_kv_cache_set_page_table", [&] {
    if (cache == nullptr) return fail_null_cache();
    if (table == nullptr && n_entries != 0) return fail_invalid("table is NULL");
    if (n_entries < 0) return fail_invalid(fmt::format("n_entries={} is negative", n_entries));
    const kvflash::Status s = cache->cache.set_page_table(
        std::span<const int32_t>(table, static_cast<size_t>(n_entries)), stream);
    return s ? kOk : fail(s.error());
  });
}

int kvflash_kv_cache_full_sequences(const kvflash_kv_cache* cache, int32_t* seqs, int32_t capacity,
                                    int32_t* count, void* stream) {
  return guarded("kvflash_kv_cache_full_sequences", [&] {
    if (cache == nullptr) return fail_null_cache();
    if (count == nullptr) return fail_invalid("count is NULL (allowed: where to store it)");
    *count = 0;
    const auto full = cache->cache.full_sequences(stream);
    if (!full) return fail(full.error());
    const auto n = static_cast<int32_t>(full->size());
    if (n > capacity || (n > 0 && seqs == nullptr)) {
      return fail_invalid(
          fmt::format("capacity={} is too small: {} full sequences to report (seqs {})", capacity,
                      n, seqs == nullptr ? "is NULL" : "holds fewer"));
    }
    std::copy(full->begin(), full->end(), seqs);
    *count = n;
    return kOk;
  });
}

int kvflash_kv_cache_clear_full(kvflash_kv_cache* cache, void* stream) {
  return guarded("kvflash_kv_cache_clear_full", [&] {
    if (cache == nullptr) return fail_null_cache();
    const kvflash::Status s = cache->cache.clear_full(stream);
    return s ? kOk : fail(s.error());
  });
}

}  // extern "C"
