#include "backends/cuda/common/kv_tma_view.hpp"

#include <climits>

namespace kvflash::cuda {

KvTmaTensor kv_tma_tensor(const KvTensor& kv) {
  KvTmaTensor t;
  t.data = reinterpret_cast<uintptr_t>(kv.data);
  t.stride_token = kv.stride_token;
  t.stride_head = kv.stride_head;
  t.stride_seq = kv.stride_seq;
  t.stride_page = kv.stride_page;
  t.n_pages = kv.n_pages;
  return t;
}

std::optional<KvTmaView> kv_tma_view(const KvTmaTensor& kv, int32_t row_bytes, int32_t page_box,
                                     const AttentionProblem& p) {
  const auto m16 = [](int64_t x) { return x % 16 == 0; };
  if (kv.data % 16 != 0 || kv.stride_token <= 0 || !m16(kv.stride_token) || kv.stride_head < 0 ||
      p.kv_capacity >= (int64_t{1} << 31))
    return std::nullopt;
  KvTmaView v;
  v.extent = int64_t{p.n_kv_heads - 1} * kv.stride_head + row_bytes;
  if (v.extent > kv.stride_token || v.extent > (int64_t{1} << 31)) return std::nullopt;
  if (p.page_size > 0) {
    if (page_box <= 0 || p.page_size % page_box != 0 || p.window > 0 || kv.n_pages < 1 ||
        kv.n_pages > INT32_MAX)
      return std::nullopt;
    v.rows = p.page_size;
    v.outer = kv.n_pages;
    v.outer_stride = kv.stride_page;
  } else {
    v.rows = p.kv_capacity;
    v.outer = p.n_seqs;
    // One sequence: the sequence dimension is never stepped; any valid stride does.
    v.outer_stride = p.n_seqs > 1 ? kv.stride_seq : kv.stride_token * p.kv_capacity;
  }
  if (v.outer_stride <= 0 || !m16(v.outer_stride) || v.outer_stride >= (int64_t{1} << 40))
    return std::nullopt;
  return v;
}

}  // namespace kvflash::cuda
