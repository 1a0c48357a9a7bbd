// The attention kernel for any processor: vector extensions lowered to what the baseline
// instruction set offers.
#define KVFLASH_ISA_NS portable
#include "backends/cpu/attend_kernel_impl.inl"

namespace kvflash::cpu {

void attend_portable(const AttendParams& p) {
  portable::attend(p);
}

int64_t attend_gather_bytes(KvType k, KvType v, int32_t dk_row, int32_t dv_row, int32_t page_size) {
  if (page_size <= 0 || page_size % kRowGroup == 0) return 0;
  return int64_t{kKeyChunk} * static_cast<int64_t>(row_size(k, dk_row) + row_size(v, dv_row));
}

int64_t attend_scratch_floats(int32_t dk, int32_t dv, int32_t n_rows, int32_t n_heads,
                              int64_t gather_bytes) {
  // K and V tiles, probabilities, then per KV head: int16 query rows (half a float each) and one
  // 16-lane scale vector (attend_kernel_impl.inl's VNNI path); then the staging rows from a
  // 64-byte boundary.
  const int64_t floats = int64_t{kKeyChunk} * (dk + dv) + int64_t{n_rows} * kKeyChunk +
                         int64_t{n_heads} * ((int64_t{n_rows} * dk + 1) / 2 + kLanes);
  return gather_bytes > 0 ? floats + kLanes + (gather_bytes + 3) / 4 : floats;
}

}  // namespace kvflash::cpu
