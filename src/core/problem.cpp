#include "kvflash/problem.hpp"

#include <fmt/format.h>

#include <cmath>
#include <string>

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

Error field_error(std::string_view field, const std::string& value, std::string_view allowed) {
  return invalid_argument(fmt::format("{} = {} is not allowed: {}", field, value, allowed));
}

}  // namespace

float AttentionProblem::effective_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim.k));
}

Status validate(const AttentionProblem& p) {
  using S = SupportedSpace;
  if (p.n_seqs < 1 || p.n_seqs > S::max_seqs)
    return field_error("n_seqs", std::to_string(p.n_seqs), fmt::format("1 .. {}", S::max_seqs));
  if (p.n_q_tokens < 1 || p.n_q_tokens > S::max_q_tokens)
    return field_error("n_q_tokens", std::to_string(p.n_q_tokens),
                       fmt::format("1 .. {} query tokens per sequence", S::max_q_tokens));
  if (p.n_q_heads < 1 || p.n_q_heads > S::max_q_heads)
    return field_error("n_q_heads", std::to_string(p.n_q_heads),
                       fmt::format("1 .. {}", S::max_q_heads));
  if (p.n_kv_heads < 1 || p.n_kv_heads > p.n_q_heads || p.n_q_heads % p.n_kv_heads != 0)
    return field_error("n_kv_heads", std::to_string(p.n_kv_heads),
                       fmt::format("a divisor of n_q_heads = {} (GQA)", p.n_q_heads));
  bool dims_ok = false;
  for (const HeadDims& hd : S::head_dims) dims_ok = dims_ok || hd == p.head_dim;
  if (!dims_ok)
    return field_error("head_dim (k/v)", fmt::format("{}/{}", p.head_dim.k, p.head_dim.v),
                       fmt::format("one of {}", allowed_head_dims()));
  if (!is_valid(p.k_type))
    return field_error("k_type", std::to_string(static_cast<int>(p.k_type)),
                       fmt::format("one of {}", kv_type_names()));
  if (!is_valid(p.v_type))
    return field_error("v_type", std::to_string(static_cast<int>(p.v_type)),
                       fmt::format("one of {}", kv_type_names()));
  if (p.kv_capacity < 1 || p.kv_capacity > S::max_kv_len)
    return field_error("kv_capacity", std::to_string(p.kv_capacity),
                       fmt::format("1 .. {} tokens per sequence", S::max_kv_len));
  if (!std::isfinite(p.scale) || p.scale < 0.0f)
    return field_error("scale", fmt::format("{}", p.scale),
                       "a finite positive number, or 0 for 1/sqrt(head_dim.k)");
  if (p.window < 0)
    return field_error("window", std::to_string(p.window), "0 (off) or a positive token count");
  if (p.page_size < 0)
    return field_error("page_size", std::to_string(p.page_size),
                       "0 (contiguous) or a positive number of tokens per page");
  if (!std::isfinite(p.softcap) || p.softcap < 0.0f)
    return field_error("softcap", fmt::format("{}", p.softcap), "0 (off) or a finite positive cap");
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

Status validate_kv(const char* which, const KvTensor& kv, KvType t, int32_t dim,
                   const AttentionProblem& p) {
  const auto row = static_cast<int64_t>(row_size(t, dim));
  if (kv.data == nullptr) return invalid_argument(fmt::format("tensors.{}.data is null", which));
  if (kv.stride_token < 0 || kv.stride_head < 0 || kv.stride_seq < 0)
    return invalid_argument(fmt::format("tensors.{} strides must be >= 0", which));
  // Rows must not overlap: the smallest non-zero step between rows must hold a row. Sizes of 1
  // along an axis make that axis' stride irrelevant.
  auto check = [&](const char* axis, int64_t stride, int64_t extent) -> Status {
    if (extent > 1 && stride < row)
      return invalid_argument(fmt::format(
          "tensors.{}.stride_{} = {} bytes is smaller than one {} row of {} values ({} bytes)",
          which, axis, stride, to_string(t), dim, row));
    return {};
  };
  if (p.page_size == 0) {
    if (kv.page_table != nullptr)
      return invalid_argument(fmt::format(
          "tensors.{}.page_table is set but problem.page_size is 0 (contiguous layout)", which));
    if (Status s = check("token", kv.stride_token, p.kv_capacity); !s) return s;
    if (Status s = check("head", kv.stride_head, p.n_kv_heads); !s) return s;
    return check("seq", kv.stride_seq, p.n_seqs);
  }
  // Paged: a page holds page_size tokens of every head; pages must not overlap.
  if (kv.page_table == nullptr)
    return invalid_argument(fmt::format("problem.page_size = {} but tensors.{}.page_table is null",
                                        p.page_size, which));
  if (kv.n_pages < 1 || kv.stride_page < 0)
    return invalid_argument(
        fmt::format("tensors.{}: n_pages = {} must be >= 1 and stride_page = {} >= 0", which,
                    kv.n_pages, kv.stride_page));
  if (int64_t{kv.pages_per_seq} * p.page_size < p.kv_capacity)
    return invalid_argument(fmt::format(
        "tensors.{}.pages_per_seq = {} pages of {} tokens hold fewer than kv_capacity = {}", which,
        kv.pages_per_seq, p.page_size, p.kv_capacity));
  if (Status s = check("token", kv.stride_token, p.page_size); !s) return s;
  if (Status s = check("head", kv.stride_head, p.n_kv_heads); !s) return s;
  const int64_t extent =
      int64_t{p.page_size - 1} * kv.stride_token + int64_t{p.n_kv_heads - 1} * kv.stride_head + row;
  if (kv.n_pages > 1 && kv.stride_page < extent)
    return invalid_argument(fmt::format(
        "tensors.{}.stride_page = {} bytes is smaller than one page ({} tokens x {} heads: {} "
        "bytes)",
        which, kv.stride_page, p.page_size, p.n_kv_heads, extent));
  return {};
}

}  // namespace

Status validate(const AttentionProblem& p, const AttentionTensors& t) {
  if (t.q == nullptr) return invalid_argument("tensors.q is null");
  if (t.out == nullptr) return invalid_argument("tensors.out is null");
  if (Status s = validate_kv("k", t.k, p.k_type, p.head_dim.k, p); !s) return s;
  if (Status s = validate_kv("v", t.v, p.v_type, p.head_dim.v, p); !s) return s;
  if (p.has_mask && t.mask == nullptr)
    return invalid_argument("problem.has_mask is set but tensors.mask is null");
  if (p.has_mask && t.mask_stride < p.kv_capacity)
    return invalid_argument(fmt::format("tensors.mask_stride = {} is smaller than kv_capacity = {}",
                                        t.mask_stride, p.kv_capacity));
  if (p.has_sinks && t.sinks == nullptr)
    return invalid_argument("problem.has_sinks is set but tensors.sinks is null");
  if (p.has_alibi && t.alibi_slopes == nullptr)
    return invalid_argument("problem.has_alibi is set but tensors.alibi_slopes is null");
  if (p.ragged_q && t.q_offsets == nullptr)
    return invalid_argument(
        "problem.ragged_q is set but tensors.q_offsets is null (n_seqs + 1 int32 offsets)");
  if (!p.ragged_q && t.q_offsets != nullptr)
    return invalid_argument(
        "tensors.q_offsets is set but problem.ragged_q is off (every sequence has n_q_tokens "
        "queries)");
  return {};
}

int64_t q_total_rows(const AttentionProblem& p, const int32_t* q_offsets) {
  return q_row_base(p.ragged_q ? q_offsets : nullptr, p.n_q_tokens, p.n_seqs);
}

Status validate_q_offsets(const AttentionProblem& p, const int32_t* q_offsets) {
  if (!p.ragged_q) return {};
  if (q_offsets == nullptr)
    return invalid_argument("problem.ragged_q is set but tensors.q_offsets is null");
  if (q_offsets[0] != 0)
    return invalid_argument(fmt::format("q_offsets[0] = {} must be 0", q_offsets[0]));
  for (int64_t s = 0; s < p.n_seqs; ++s) {
    const int64_t len = int64_t{q_offsets[s + 1]} - q_offsets[s];
    if (len < 0 || len > p.n_q_tokens)
      return invalid_argument(fmt::format(
          "q_offsets[{}] - q_offsets[{}] = {} (sequence {}'s query count) is outside 0 .. "
          "n_q_tokens = {}",
          s + 1, s, len, s, p.n_q_tokens));
  }
  return {};
}

}  // namespace kvflash
