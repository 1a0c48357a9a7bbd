// A K or V tensor as the CUDA kernels' TMA copies see it, one rule for decode and prefill: the
// tensor viewed as [outer][row][the bytes of all heads' rows], outer the sequence and row the
// token of a contiguous tensor, the pool's page and the token in it of a paged one. Each family
// adds its own box rules (decode_plan.hpp's tma_tile_view, prefill_plan.hpp's prefill_tma_view);
// common/tensor_map.hpp encodes the map. Plain C++ (built without CUDA too), with CPU tests.
#pragma once

#include <cstdint>
#include <optional>

#include "kvflash/problem.hpp"

namespace kvflash::cuda {

struct KvTmaTensor {  // what kv_tma_view reads of a KvTensor (plain values: testable)
  uintptr_t data = 0;
  int64_t stride_token = 0, stride_head = 0, stride_seq = 0, stride_page = 0, n_pages = 0;
};
KvTmaTensor kv_tma_tensor(const KvTensor& kv);

struct KvTmaView {
  int64_t extent = 0;        // dimension 0: the bytes of a token's row the boxes may read
  int64_t rows = 0;          // dimension 1: kv_capacity, or page_size
  int64_t outer = 0;         // dimension 2: n_seqs, or the pool's pages
  int64_t outer_stride = 0;  // bytes from one sequence (page) to the next (any valid one for one)
};

// Nothing where TMA cannot describe the tensor: data, token, sequence or page strides not
// multiples of 16 bytes, a negative head stride, heads (row_bytes each) not inside one token's
// row, a capacity of 2^31 keys or more; paged, pages not a multiple of `page_box` tokens (no box
// crosses a page), a window (its range starts anywhere, not at a box), a pool outside 1 ..
// INT32_MAX pages.
std::optional<KvTmaView> kv_tma_view(const KvTmaTensor& kv, int32_t row_bytes, int32_t page_box,
                                     const AttentionProblem& p);

}  // namespace kvflash::cuda
