#include "backends/cuda/common/tile_copy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "kvflash/formats.hpp"

namespace kvflash::cuda {

int64_t widest_lead16(const KvTensor& kv, const AttentionProblem& p) {
  const auto addr = static_cast<int64_t>(reinterpret_cast<uintptr_t>(kv.data) & 15);
  const int64_t seq_stride = p.page_size > 0 ? 0 : kv.stride_seq;
  int64_t lead = 0;
  for (int64_t s = 0; s < std::min<int64_t>(p.n_seqs, 16); ++s)
    for (int64_t h = 0; h < std::min<int64_t>(p.n_kv_heads, 16); ++h)
      lead = std::max<int64_t>(lead, (addr + s * seq_stride + h * kv.stride_head) & 15);
  return lead;
}

Expected<CopyMode> copy_mode(const char* which, const KvTensor& kv, KvType type, int32_t row_bytes,
                             int32_t slot_bytes, const AttentionProblem& p) {
  const auto addr = reinterpret_cast<uintptr_t>(kv.data);
  const int64_t seq_stride = p.page_size > 0 ? 0 : kv.stride_seq;
  if (p.page_size > 0 && kv.stride_page % 16 != 0)
    return Error{
        ErrorCode::unsupported,
        fmt::format("the CUDA kernels read paged tensors whose pages start at multiples of 16 "
                    "bytes: tensors.{}.stride_page = {}",
                    which, kv.stride_page)};
  const auto aligned = [&](int64_t a) {
    return addr % a == 0 && kv.stride_token % a == 0 && kv.stride_head % a == 0 &&
           seq_stride % a == 0 && row_bytes % a == 0;
  };
  if (aligned(16)) return CopyMode{16, false, row_bytes / 16};
  const bool is_float = traits(type).block_values == 1;
  if (is_float)
    return Error{
        ErrorCode::unsupported,
        fmt::format("the CUDA kernels read {} rows of type {} with 16-byte copies: the data "
                    "pointer and every stride must be multiples of 16 bytes",
                    which, to_string(type))};
  const bool even = addr % 2 == 0 && kv.stride_head % 2 == 0 && seq_stride % 2 == 0;
  if (even && kv.stride_token % 16 == 0) {
    const int64_t units = (widest_lead16(kv, p) + row_bytes + 15) / 16;
    if (units * 16 <= slot_bytes) return CopyMode{16, true, static_cast<int32_t>(units)};
  }
  if (aligned(8)) return CopyMode{8, false, row_bytes / 8};
  if (p.page_size > 0 && (int64_t{p.page_size} * kv.stride_token) % 4 != 0)
    return Error{
        ErrorCode::unsupported,
        fmt::format("the CUDA kernels read paged tensors of 2-byte aligned rows when page_size "
                    "* stride_token is a multiple of 4: tensors.{}: {} * {}",
                    which, p.page_size, kv.stride_token)};
  if (addr % 4 == 0 && kv.stride_token % 2 == 0 && kv.stride_head % 2 == 0 && seq_stride % 2 == 0)
    return CopyMode{4, false, (row_bytes + 2 + 3) / 4};  // the row may start 2 bytes into a word
  return Error{
      ErrorCode::unsupported,
      fmt::format("the CUDA kernels need tensors.{}.data 4-byte aligned and its strides even "
                  "(data {:#x}, strides {}/{}/{})",
                  which, addr, kv.stride_token, kv.stride_head, kv.stride_seq)};
}

Status check_device_tensors(const char* family, const AttentionProblem& p,
                            const AttentionTensors& t, int32_t k_row_bytes, int32_t k_slot,
                            int32_t v_row_bytes, int32_t v_slot) {
  if (t.kv_lens == nullptr)
    return invalid_argument(fmt::format(
        "{} reads the lengths on the device: tensors.kv_lens must be a device array of n_seqs "
        "int64 values",
        family));
  Expected<CopyMode> ku = copy_mode("k", t.k, p.k_type, k_row_bytes, k_slot, p);
  if (!ku) return invalid_argument(ku.error().message);
  Expected<CopyMode> vu = copy_mode("v", t.v, p.v_type, v_row_bytes, v_slot, p);
  if (!vu) return invalid_argument(vu.error().message);
  return {};
}

}  // namespace kvflash::cuda
