#include "kvflash/kv_cache.hpp"

#include <fmt/format.h>

#include <limits>
#include <utility>

#include "core/backend.hpp"
#include "core/field_error.hpp"

namespace kvflash::gpu {
namespace {

constexpr size_t kAlign = 256;

// A call on a KvCache that create() did not make (moved from, or default-constructed).
Error not_created(const char* method) {
  return field_error(fmt::format("KvCache::{}: cache", method), "empty", "was not created",
                     "a cache from KvCache::create");
}

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

Error field(const char* name, const std::string& value, const char* allowed) {
  return field_error(fmt::format("KvCacheConfig.{}", name), value, "is not allowed", allowed);
}

Status validate_config(const KvCacheConfig& c) {
  if (c.n_seqs < 1) return field("n_seqs", std::to_string(c.n_seqs), ">= 1");
  if (c.n_kv_heads < 1) return field("n_kv_heads", std::to_string(c.n_kv_heads), ">= 1");
  if (c.head_dim.k < 1 || c.head_dim.v < 1)
    return field("head_dim", fmt::format("{}/{}", c.head_dim.k, c.head_dim.v), "positive dims");
  if (c.layers.empty()) return field("layers", "{} (empty)", "one K/V type pair per layer");
  if (c.capacity < 1 || c.capacity > SupportedSpace::max_kv_len)
    return field("capacity", std::to_string(c.capacity),
                 "1 .. 2^32 tokens per sequence (SupportedSpace::max_kv_len)");
  if (c.page_size < 0)
    return field("page_size", std::to_string(c.page_size), "0 (contiguous) or tokens per page");
  if (c.page_size == 0 && c.n_pages != 0)
    return field("n_pages", std::to_string(c.n_pages), "0 for a contiguous cache");
  if (c.n_pages < 0 || c.n_pages > std::numeric_limits<int32_t>::max())
    return field("n_pages", std::to_string(c.n_pages), "0 (enough for every sequence) .. 2^31 - 1");
  if (pages_per_seq(c.capacity, c.page_size) > std::numeric_limits<int32_t>::max())
    return field("page_size", std::to_string(c.page_size),
                 "a size that needs fewer than 2^31 pages per sequence");
  return {};
}

int64_t pages_per_seq_of(const KvCacheConfig& c) {
  return pages_per_seq(c.capacity, c.page_size);
}

int64_t n_pages_of(const KvCacheConfig& c) {
  if (c.page_size == 0) return 0;
  return c.n_pages > 0 ? c.n_pages : c.n_seqs * pages_per_seq_of(c);
}

// Bytes of one layer's K or V (rows only, and as allocated).
std::pair<size_t, size_t> tensor_bytes(const KvCacheConfig& c, KvType t, int32_t dim) {
  const size_t row = row_size(t, dim);
  const size_t per_token = row * size_t(c.n_kv_heads);
  if (c.page_size == 0) {
    const size_t rows = per_token * size_t(c.capacity) * size_t(c.n_seqs);
    return {rows, rows};
  }
  // Paged: tokens 4-byte aligned, pages 16 (kv_tensor_paged's layout).
  const size_t n_pages = size_t(n_pages_of(c));
  const size_t page = per_token * size_t(c.page_size);
  return {page * n_pages, round_up(round_up(per_token, 4) * size_t(c.page_size), 16) * n_pages};
}

// Lengths (n_seqs int64), flags (overflow + one per sequence, int32), page table (int32).
size_t flags_offset(const KvCacheConfig& c) {
  return round_up(sizeof(int64_t) * size_t(c.n_seqs), kAlign);
}
size_t table_offset(const KvCacheConfig& c) {
  return flags_offset(c) + round_up(sizeof(int32_t) * (size_t(c.n_seqs) + 1), kAlign);
}
size_t control_bytes(const KvCacheConfig& c) {
  return table_offset(c) + sizeof(int32_t) * size_t(c.n_seqs) * size_t(pages_per_seq_of(c));
}

}  // namespace

Expected<KvCacheBytes> kv_cache_bytes(const KvCacheConfig& c) {
  if (Status s = validate_config(c); !s) return s.error();
  KvCacheBytes b;
  size_t allocated = 0;
  for (const KvLayerTypes& l : c.layers) {
    const auto [kr, ka] = tensor_bytes(c, l.k, c.head_dim.k);
    const auto [vr, va] = tensor_bytes(c, l.v, c.head_dim.v);
    b.rows += kr + vr;
    allocated += round_up(ka, kAlign) + round_up(va, kAlign);
  }
  b.padding = allocated - b.rows;
  b.control = control_bytes(c);
  return b;
}

Expected<KvCache> KvCache::create(const KvCacheConfig& c, void* stream) {
  Expected<KvCacheBytes> bytes = kv_cache_bytes(c);
  if (!bytes) return bytes.error();
  KvCache cache;
  cache.cfg_ = c;
  cache.bytes_ = *bytes;
  cache.pages_per_seq_ = static_cast<int32_t>(pages_per_seq_of(c));
  if (c.page_size > 0) cache.cfg_.n_pages = n_pages_of(c);
  size_t off = 0;
  for (const KvLayerTypes& l : c.layers) {
    cache.k_off_.push_back(off);
    off += round_up(tensor_bytes(c, l.k, c.head_dim.k).second, kAlign);
    cache.v_off_.push_back(off);
    off += round_up(tensor_bytes(c, l.v, c.head_dim.v).second, kAlign);
  }
  Expected<DeviceBuffer> storage = DeviceBuffer::allocate(off);
  if (!storage)
    return Error{storage.error().code, fmt::format("KvCache: {} of KV storage: {}",
                                                   format_bytes(off), storage.error().message)};
  cache.storage_ = std::move(*storage);
  Expected<DeviceBuffer> control = DeviceBuffer::allocate(bytes->control);
  if (!control) return control.error();
  cache.control_ = std::move(*control);
  auto* base = static_cast<uint8_t*>(cache.control_.data());
  cache.lens_ = reinterpret_cast<int64_t*>(base);
  cache.flags_ = reinterpret_cast<int32_t*>(base + flags_offset(c));
  if (c.page_size > 0) cache.pages_ = reinterpret_cast<int32_t*>(base + table_offset(c));

  if (Status s = fill(cache.control_.data(), 0, table_offset(c), stream); !s) return s.error();
  if (c.page_size > 0) {
    std::vector<int32_t> table(size_t(c.n_seqs) * size_t(cache.pages_per_seq_));
    for (size_t i = 0; i < table.size(); ++i)
      table[i] = static_cast<int32_t>(std::min<int64_t>(int64_t(i), cache.cfg_.n_pages - 1));
    if (Status s = cache.set_page_table(table, stream); !s) return s.error();
  }
  if (Status s = synchronize(stream); !s) return s.error();
  return cache;
}

KvTensor KvCache::tensor(size_t offset, KvType t, int32_t dim) const {
  const auto* data = static_cast<const uint8_t*>(storage_.data()) + offset;
  if (cfg_.page_size == 0)
    return kv_tensor_contiguous(data, t, dim, cfg_.n_kv_heads, cfg_.capacity);
  return kv_tensor_paged(data, t, dim, cfg_.n_kv_heads, cfg_.page_size, cfg_.n_pages, pages_,
                         pages_per_seq_);
}

KvTensor KvCache::k(int32_t layer) const {
  return tensor(k_off_[size_t(layer)], cfg_.layers[size_t(layer)].k, cfg_.head_dim.k);
}

KvTensor KvCache::v(int32_t layer) const {
  return tensor(v_off_[size_t(layer)], cfg_.layers[size_t(layer)].v, cfg_.head_dim.v);
}

AttentionProblem KvCache::problem(int32_t layer, int32_t n_q_heads, int32_t n_q_tokens) const {
  AttentionProblem p;
  p.n_seqs = cfg_.n_seqs;
  p.n_q_tokens = n_q_tokens;
  p.n_q_heads = n_q_heads;
  p.n_kv_heads = cfg_.n_kv_heads;
  p.head_dim = cfg_.head_dim;
  p.k_type = cfg_.layers[size_t(layer)].k;
  p.v_type = cfg_.layers[size_t(layer)].v;
  p.kv_capacity = cfg_.capacity;
  p.page_size = cfg_.page_size;
  return p;
}

AttentionTensors KvCache::tensors(int32_t layer, const float* q, float* out) const {
  AttentionTensors t;
  t.q = q;
  t.k = k(layer);
  t.v = v(layer);
  t.kv_lens = lens_;
  t.out = out;
  return t;
}

Status KvCache::begin_step(int32_t n_new, void* stream) {
  if (lens_ == nullptr) return not_created("begin_step");
  if (n_new < 0)
    return field_error("KvCache::begin_step: n_new", std::to_string(n_new), "is negative", ">= 0");
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("KvCache::begin_step");
  return d->advance_lengths(lens_, cfg_.n_seqs, n_new, cfg_.capacity, flags_, stream);
}

Status KvCache::append(int32_t layer, const float* k_src, const float* v_src, int32_t n_new,
                       void* stream) {
  if (lens_ == nullptr) return not_created("append");
  if (layer < 0 || layer >= n_layers())
    return range_error("KvCache::append: layer", std::to_string(layer),
                       fmt::format("0 .. {}", n_layers() - 1));
  if (n_new < 0)
    return field_error("KvCache::append: n_new", std::to_string(n_new), "is negative", ">= 0");
  if (n_new > 0 && (k_src == nullptr || v_src == nullptr))
    return field_error("KvCache::append: k, v", "null", "with n_new > 0",
                       "device arrays of f32 rows");
  const DeviceServices* d = device_services();
  if (d == nullptr) return no_device_backend("KvCache::append");
  const KvLayerTypes& t = cfg_.layers[size_t(layer)];
  if (Status s = d->append_rows(t.k, k_src, cfg_.n_seqs, n_new, cfg_.n_kv_heads, cfg_.head_dim.k,
                                k(layer), cfg_.page_size, cfg_.capacity, lens_, flags_, stream);
      !s)
    return s;
  return d->append_rows(t.v, v_src, cfg_.n_seqs, n_new, cfg_.n_kv_heads, cfg_.head_dim.v, v(layer),
                        cfg_.page_size, cfg_.capacity, lens_, flags_, stream);
}

Status KvCache::set_lengths(std::span<const int64_t> lens, void* stream) {
  if (lens_ == nullptr) return not_created("set_lengths");
  if (lens.size() != size_t(cfg_.n_seqs))
    return field_error("KvCache::set_lengths: lens.size()", std::to_string(lens.size()),
                       "is not the number of sequences", std::to_string(cfg_.n_seqs));
  for (size_t s = 0; s < lens.size(); ++s)
    if (lens[s] < 0 || lens[s] > cfg_.capacity)
      return range_error(fmt::format("KvCache::set_lengths: lens[{}]", s), std::to_string(lens[s]),
                         fmt::format("0 .. capacity = {}", cfg_.capacity));
  if (Status s = copy(lens_, lens.data(), lens.size_bytes(), stream); !s) return s;
  return synchronize(stream);
}

Status KvCache::set_page_table(std::span<const int32_t> table, void* stream) {
  if (pages_ == nullptr)
    return field_error("KvCache::set_page_table: page_size", "0", "has no page table",
                       "a paged cache");
  const size_t want = size_t(cfg_.n_seqs) * size_t(pages_per_seq_);
  if (table.size() != want)
    return field_error("KvCache::set_page_table: table.size()", std::to_string(table.size()),
                       "is not n_seqs x pages_per_seq",
                       fmt::format("{} x {} = {}", cfg_.n_seqs, pages_per_seq_, want));
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i] < 0 || table[i] >= cfg_.n_pages)
      return range_error(fmt::format("KvCache::set_page_table: table[{}]", i),
                         std::to_string(table[i]),
                         fmt::format("0 .. n_pages - 1 = {}", cfg_.n_pages - 1));
  if (Status s = copy(pages_, table.data(), table.size_bytes(), stream); !s) return s;
  return synchronize(stream);
}

Expected<std::vector<int32_t>> KvCache::full_sequences(void* stream) const {
  if (flags_ == nullptr) return not_created("full_sequences");
  std::vector<int32_t> flags(size_t(cfg_.n_seqs) + 1);
  if (Status s = copy(flags.data(), flags_, flags.size() * sizeof(int32_t), stream); !s)
    return s.error();
  if (Status s = synchronize(stream); !s) return s.error();
  std::vector<int32_t> full;
  for (int32_t seq = 0; seq < cfg_.n_seqs; ++seq)
    if (flags[1 + size_t(seq)] != 0) full.push_back(seq);
  if (flags[0] != 0 && full.empty()) full.push_back(-1);
  return full;
}

Status KvCache::clear_full(void* stream) {
  if (flags_ == nullptr) return not_created("clear_full");
  if (Status s = fill(flags_, 0, (size_t(cfg_.n_seqs) + 1) * sizeof(int32_t), stream); !s) return s;
  return synchronize(stream);
}

void KvCache::report(MemoryReport& r) const {
  const std::string layout =
      cfg_.page_size > 0
          ? fmt::format("paged: {} pages of {} tokens per layer", cfg_.n_pages, cfg_.page_size)
          : fmt::format("{} x {} tokens", cfg_.n_seqs, cfg_.capacity);
  r.add("KV storage", bytes_.rows,
        fmt::format("{} layers, {} KV heads, {}", n_layers(), cfg_.n_kv_heads, layout));
  r.add("KV alignment", bytes_.padding, "each K and V 256-byte aligned, pages 16");
  r.add("KV lengths, page table", bytes_.control);
}

}  // namespace kvflash::gpu
