#include "kvflash/problem.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>

#include "core/field_error.hpp"

namespace kvflash {
namespace {

std::string allowed_head_dims() {
  std::string s;
  for (const HeadDims& hd : SupportedSpace::head_dims) {
    if (!s.empty()) s += ", ";
    s += hd.k == hd.v ? fmt::format("{}", hd.k) : fmt::format("{}/{}", hd.k, hd.v);
  }
  return s;
}

}  // namespace

float AttentionProblem::effective_scale() const {
  return (scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim.k))) * k_scale;
}

// Fields in declaration order, so that the first offending one is reported.
Status validate(const AttentionProblem& p) {
  using S = SupportedSpace;
  if (p.n_seqs < 1 || p.n_seqs > S::max_seqs)
    return range_error("n_seqs", std::to_string(p.n_seqs), fmt::format("1 .. {}", S::max_seqs));
  if (p.n_q_tokens < 1 || p.n_q_tokens > S::max_q_tokens)
    return range_error("n_q_tokens", std::to_string(p.n_q_tokens),
                       fmt::format("1 .. {} query tokens per sequence", S::max_q_tokens));
  if (p.n_q_heads < 1 || p.n_q_heads > S::max_q_heads)
    return range_error("n_q_heads", std::to_string(p.n_q_heads),
                       fmt::format("1 .. {}", S::max_q_heads));
  if (p.n_kv_heads < 1 || p.n_kv_heads > p.n_q_heads || p.n_q_heads % p.n_kv_heads != 0)
    return field_error("n_kv_heads", std::to_string(p.n_kv_heads), "does not divide n_q_heads",
                       fmt::format("a divisor of n_q_heads={} (GQA)", p.n_q_heads));
  bool dims_ok = false;
  for (const HeadDims& hd : S::head_dims) dims_ok = dims_ok || hd == p.head_dim;
  if (!dims_ok)
    return field_error("head_dim (k/v)", fmt::format("{}/{}", p.head_dim.k, p.head_dim.v),
                       "is not supported", fmt::format("one of {}", allowed_head_dims()));
  if (!is_valid(p.k_type))
    return field_error("k_type", std::to_string(static_cast<int>(p.k_type)), "is not a type",
                       fmt::format("one of {}", kv_type_names()));
  if (!is_valid(p.v_type))
    return field_error("v_type", std::to_string(static_cast<int>(p.v_type)), "is not a type",
                       fmt::format("one of {}", kv_type_names()));
  if (p.kv_capacity < 1 || p.kv_capacity > S::max_kv_len)
    return range_error("kv_capacity", std::to_string(p.kv_capacity),
                       fmt::format("1 .. {} tokens per sequence", S::max_kv_len));
  if (!std::isfinite(p.scale) || p.scale < 0.0f)
    return range_error("scale", fmt::format("{}", p.scale),
                       "a finite positive number, or 0 for 1/sqrt(head_dim.k)");
  if (p.window < 0)
    return range_error("window", std::to_string(p.window), "0 (off) or a positive token count");
  if (!std::isfinite(p.softcap) || p.softcap < 0.0f)
    return range_error("softcap", fmt::format("{}", p.softcap), "0 (off) or a finite positive cap");
  if (p.page_size < 0)
    return range_error("page_size", std::to_string(p.page_size),
                       "0 (contiguous) or a positive number of tokens per page");
  for (const auto& [field, value, type] :
       {std::tuple{"k_scale", p.k_scale, p.k_type}, std::tuple{"v_scale", p.v_scale, p.v_type}}) {
    if (is_fp8(type) && !(std::isfinite(value) && value > 0.0f))
      return range_error(field, fmt::format("{}", value), "a finite positive number");
    if (!is_fp8(type) && value != 1.0f)
      return field_error(field, fmt::format("{}", value), "applies to fp8 types only",
                         fmt::format("1 for {}", to_string(type)));
  }
  return {};
}

std::string describe(const AttentionProblem& p) {
  std::string s = fmt::format("seqs={} q={} heads={}/{} d={}/{} k={} v={} kv={}", p.n_seqs,
                              p.n_q_tokens, p.n_q_heads, p.n_kv_heads, p.head_dim.k, p.head_dim.v,
                              to_string(p.k_type), to_string(p.v_type), p.kv_capacity);
  if (p.causal) s += " causal";
  if (p.has_mask) s += " mask";
  if (p.window > 0) s += fmt::format(" window={}", p.window);
  if (p.page_size > 0) s += fmt::format(" paged={}", p.page_size);
  if (p.ragged_q) s += " ragged";
  if (p.softcap > 0.0f) s += fmt::format(" softcap={}", p.softcap);
  if (p.has_sinks) s += " sinks";
  if (p.has_alibi) s += " alibi";
  if (p.scale != 0.0f) s += fmt::format(" scale={}", p.scale);
  if (p.k_scale != 1.0f) s += fmt::format(" k_scale={}", p.k_scale);
  if (p.v_scale != 1.0f) s += fmt::format(" v_scale={}", p.v_scale);
  return s;
}

KvTensor kv_tensor_contiguous(const void* data, KvType t, int32_t head_dim, int32_t n_kv_heads,
                              int64_t capacity) {
  const auto row = static_cast<int64_t>(row_size(t, head_dim));
  return KvTensor{data, row * n_kv_heads, row, row * n_kv_heads * capacity};
}

KvTensor kv_tensor_paged(const void* data, KvType t, int32_t head_dim, int32_t n_kv_heads,
                         int32_t page_size, int64_t n_pages, const int32_t* page_table,
                         int32_t pages_per_seq) {
  const auto row = static_cast<int64_t>(row_size(t, head_dim));
  KvTensor kv;
  kv.data = data;
  kv.stride_head = row;
  // A multiple of 4 bytes (rows are even-sized, so this pads only odd head counts), so that a
  // row's alignment does not depend on its page: what cuda.decode's 4-byte copies need.
  kv.stride_token = (row * n_kv_heads + 3) / 4 * 4;
  kv.stride_seq = 0;
  kv.page_table = page_table;
  kv.pages_per_seq = pages_per_seq;
  kv.n_pages = n_pages;
  kv.stride_page = (kv.stride_token * page_size + 15) / 16 * 16;
  return kv;
}

namespace {

// int64 arithmetic that remembers an overflow instead of having one (signed overflow is undefined
// behaviour): every size and offset computed from caller-given strides and counts goes through it.
struct I64 {
  int64_t v = 0;
  bool overflow = false;
  I64(int64_t x) : v(x) {}  // NOLINT: implicit, so that mixed expressions read naturally
  I64() = default;
};
I64 operator+(I64 a, I64 b) {
  I64 r;
  r.overflow = a.overflow || b.overflow || __builtin_add_overflow(a.v, b.v, &r.v);
  return r;
}
I64 operator*(I64 a, I64 b) {
  I64 r;
  r.overflow = a.overflow || b.overflow || __builtin_mul_overflow(a.v, b.v, &r.v);
  return r;
}

bool aligned_to(const void* ptr, int64_t alignment) {
  return reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(alignment) == 0;
}

std::string hex(const void* ptr) {
  return fmt::format("{}", fmt::ptr(ptr));
}

// A float tensor (q, out, lse, mask, sinks, alibi_slopes): kernels load it as float.
Status check_float_ptr(std::string_view field, const float* ptr) {
  if (ptr != nullptr && !aligned_to(ptr, alignof(float)))
    return field_error(field, hex(ptr), "is misaligned", "a multiple of 4 bytes (float)");
  return {};
}

// One dimension of a K/V tensor: rows `stride` bytes apart, `extent` of them.
struct Dim {
  const char* name;
  int64_t stride;
  int64_t extent;
};

// The layout rules of KvTensor (problem.hpp), for the dimensions that address rows: strides >= 0
// and multiples of the row alignment, no byte offset past int64, no two rows overlapping.
// Dimensions of extent 1 are never stepped along, so their strides are not looked at.
// Overlap: the dimensions sorted by stride must nest, each stride at least the span of the rows
// of every dimension inside it (a sufficient rule; it accepts token-major, head-major and paged
// layouts with any padding, and rejects interleavings it cannot prove disjoint).
Status check_dims(const char* which, Dim* dims, int n, int64_t row, int64_t align) {
  I64 last = row;  // one past the last byte of the last row
  for (int i = 0; i < n; ++i) {
    const Dim& d = dims[i];
    if (d.extent <= 1) continue;
    const std::string field = fmt::format("tensors.{}.stride_{}", which, d.name);
    if (d.stride < 0) return range_error(field, std::to_string(d.stride), ">= 0 bytes");
    if (d.stride % align != 0)
      return field_error(field, std::to_string(d.stride), "breaks row alignment",
                         fmt::format("a multiple of {} bytes", align));
    last = last + I64(d.extent - 1) * d.stride;
    if (last.overflow)
      return field_error(field, std::to_string(d.stride), "overflows a 64-bit byte offset",
                         fmt::format("({} - 1) x stride + the rest < 2^63", d.extent));
  }
  std::sort(dims, dims + n, [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  int64_t span = row;  // bytes covered by the rows of the dimensions nested so far
  for (int i = 0; i < n; ++i) {
    const Dim& d = dims[i];
    if (d.extent <= 1) continue;
    if (d.stride < span)
      return field_error(
          fmt::format("tensors.{}.stride_{}", which, d.name), std::to_string(d.stride),
          "makes rows overlap",
          fmt::format(">= {} bytes (the rows nested inside it; a row is {} bytes)", span, row));
    span = (I64(d.extent - 1) * d.stride + span).v;  // no overflow: bounded by `last` above
  }
  return {};
}

Status validate_kv(const char* which, const KvTensor& kv, KvType t, int32_t dim,
                   const AttentionProblem& p) {
  const auto row = static_cast<int64_t>(row_size(t, dim));
  // f32 rows are loaded as floats; every other type as 16-bit words (halves, block scales).
  const int64_t align = t == KvType::f32 ? 4 : 2;
  const std::string data = fmt::format("tensors.{}.data", which);
  if (kv.data == nullptr) return field_error(data, "NULL", "is missing", "a pointer");
  if (!aligned_to(kv.data, align))
    return field_error(data, hex(kv.data), "is misaligned",
                       fmt::format("a multiple of {} bytes for {} rows", align, to_string(t)));
  if (p.page_size == 0) {
    if (kv.page_table != nullptr)
      return field_error(fmt::format("tensors.{}.page_table", which), hex(kv.page_table),
                         "is set but problem.page_size=0 (contiguous layout)", "NULL");
    Dim dims[] = {{"token", kv.stride_token, p.kv_capacity},
                  {"head", kv.stride_head, p.n_kv_heads},
                  {"seq", kv.stride_seq, p.n_seqs}};
    return check_dims(which, dims, 3, row, align);
  }
  // Paged: n_pages pages of page_size tokens of every head.
  if (kv.page_table == nullptr)
    return field_error(fmt::format("tensors.{}.page_table", which), "NULL",
                       fmt::format("is missing but problem.page_size={}", p.page_size),
                       "n_seqs x pages_per_seq int32 page numbers");
  if (!aligned_to(kv.page_table, alignof(int32_t)))
    return field_error(fmt::format("tensors.{}.page_table", which), hex(kv.page_table),
                       "is misaligned", "a multiple of 4 bytes (int32)");
  if (kv.n_pages < 1)
    return range_error(fmt::format("tensors.{}.n_pages", which), std::to_string(kv.n_pages),
                       ">= 1");
  if (int64_t{kv.pages_per_seq} * p.page_size < p.kv_capacity)
    return field_error(fmt::format("tensors.{}.pages_per_seq", which),
                       std::to_string(kv.pages_per_seq),
                       fmt::format("pages of {} tokens hold fewer than kv_capacity={} tokens",
                                   p.page_size, p.kv_capacity),
                       fmt::format(">= {}", pages_per_seq(p.kv_capacity, p.page_size)));
  Dim dims[] = {{"token", kv.stride_token, p.page_size},
                {"head", kv.stride_head, p.n_kv_heads},
                {"page", kv.stride_page, kv.n_pages}};
  return check_dims(which, dims, 3, row, align);
}

}  // namespace

// Fields in declaration order (AttentionTensors), so that the first offending one is reported.
Status validate(const AttentionProblem& p, const AttentionTensors& t) {
  if (t.q == nullptr) return field_error("tensors.q", "NULL", "is missing", "a pointer");
  if (Status s = check_float_ptr("tensors.q", t.q); !s) return s;
  if (Status s = validate_kv("k", t.k, p.k_type, p.head_dim.k, p); !s) return s;
  if (Status s = validate_kv("v", t.v, p.v_type, p.head_dim.v, p); !s) return s;
  if (t.kv_lens != nullptr && !aligned_to(t.kv_lens, alignof(int64_t)))
    return field_error("tensors.kv_lens", hex(t.kv_lens), "is misaligned",
                       "a multiple of 8 bytes (int64)");
  if (p.has_mask) {
    if (t.mask == nullptr)
      return field_error("tensors.mask", "NULL", "is missing but problem.has_mask is set",
                         "a pointer");
    if (Status s = check_float_ptr("tensors.mask", t.mask); !s) return s;
    if (t.mask_stride < p.kv_capacity)
      return range_error("tensors.mask_stride", std::to_string(t.mask_stride),
                         fmt::format(">= kv_capacity={} floats", p.kv_capacity));
    // The last mask float read, in bytes, must be addressable.
    const I64 bytes =
        (I64(int64_t{p.n_seqs} * p.n_q_tokens - 1) * t.mask_stride + p.kv_capacity) * 4;
    if (bytes.overflow)
      return field_error(
          "tensors.mask_stride", std::to_string(t.mask_stride), "overflows a 64-bit byte offset",
          "(n_seqs x n_q_tokens - 1) x mask_stride + kv_capacity floats < 2^63 bytes");
  }
  if (p.has_sinks && t.sinks == nullptr)
    return field_error("tensors.sinks", "NULL", "is missing but problem.has_sinks is set",
                       "a pointer");
  if (Status s = check_float_ptr("tensors.sinks", t.sinks); !s) return s;
  if (p.has_alibi && t.alibi_slopes == nullptr)
    return field_error("tensors.alibi_slopes", "NULL", "is missing but problem.has_alibi is set",
                       "a pointer");
  if (Status s = check_float_ptr("tensors.alibi_slopes", t.alibi_slopes); !s) return s;
  if (t.out == nullptr) return field_error("tensors.out", "NULL", "is missing", "a pointer");
  if (Status s = check_float_ptr("tensors.out", t.out); !s) return s;
  if (Status s = check_float_ptr("tensors.lse", t.lse); !s) return s;
  if (p.ragged_q && t.q_offsets == nullptr)
    return field_error("tensors.q_offsets", "NULL", "is missing but problem.ragged_q is set",
                       "n_seqs + 1 int32 offsets");
  if (!p.ragged_q && t.q_offsets != nullptr)
    return field_error("tensors.q_offsets", hex(t.q_offsets),
                       "is set but problem.ragged_q is off (every sequence has n_q_tokens "
                       "queries)",
                       "NULL");
  if (t.q_offsets != nullptr && !aligned_to(t.q_offsets, alignof(int32_t)))
    return field_error("tensors.q_offsets", hex(t.q_offsets), "is misaligned",
                       "a multiple of 4 bytes (int32)");
  return {};
}

int64_t q_total_rows(const AttentionProblem& p, const int32_t* q_offsets) {
  return q_row_base(p.ragged_q ? q_offsets : nullptr, p.n_q_tokens, p.n_seqs);
}

Status validate_q_offsets(const AttentionProblem& p, const int32_t* q_offsets) {
  if (!p.ragged_q) return {};
  if (q_offsets == nullptr)
    return field_error("tensors.q_offsets", "NULL", "is missing but problem.ragged_q is set",
                       "n_seqs + 1 int32 offsets");
  if (q_offsets[0] != 0)
    return field_error("q_offsets[0]", std::to_string(q_offsets[0]), "is not 0", "0");
  for (int64_t s = 0; s < p.n_seqs; ++s) {
    const int64_t len = int64_t{q_offsets[s + 1]} - q_offsets[s];
    if (len < 0 || len > p.n_q_tokens)
      return range_error(fmt::format("q_offsets[{}] - q_offsets[{}]", s + 1, s),
                         fmt::format("{} (sequence {}'s query count)", len, s),
                         fmt::format("0 .. n_q_tokens={}", p.n_q_tokens));
  }
  return {};
}

namespace {
Status check_pages(const char* which, const KvTensor& kv, const AttentionProblem& p, int64_t seq,
                   int64_t len) {
  const int64_t used = pages_per_seq(len, p.page_size);
  for (int64_t i = 0; i < used; ++i) {
    const int32_t page = kv.page_table[seq * kv.pages_per_seq + i];
    if (page < 0 || page >= kv.n_pages)
      return invalid_argument(fmt::format(
          "tensors.{}.page_table[{}]={} (sequence {}, page {}) is out of range (allowed: 0 .. "
          "n_pages - 1={})",
          which, seq * kv.pages_per_seq + i, page, seq, i, kv.n_pages - 1));
  }
  return {};
}
}  // namespace

Status validate_page_tables(const AttentionProblem& p, const AttentionTensors& t) {
  if (p.page_size == 0) return {};
  for (int64_t s = 0; s < p.n_seqs; ++s) {
    const int64_t len = t.kv_lens ? t.kv_lens[s] : p.kv_capacity;
    if (Status st = check_pages("k", t.k, p, s, len); !st) return st;
    if (Status st = check_pages("v", t.v, p, s, len); !st) return st;
  }
  return {};
}

Status validate_kv_lens(const AttentionProblem& p, const int64_t* kv_lens) {
  if (kv_lens == nullptr) return {};
  for (int64_t s = 0; s < p.n_seqs; ++s)
    if (kv_lens[s] < 0 || kv_lens[s] > p.kv_capacity)
      return range_error(fmt::format("kv_lens[{}]", s), std::to_string(kv_lens[s]),
                         fmt::format("0 .. kv_capacity={}", p.kv_capacity));
  return {};
}

}  // namespace kvflash
