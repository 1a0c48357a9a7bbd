// The attention kernel for any processor: vector extensions lowered to what the baseline
// instruction set offers.
#define KVFLASH_ISA_NS portable
#include "backends/cpu/attend_kernel_impl.inl"

namespace kvflash::cpu {

void attend_portable(const AttendParams& p) {
  portable::attend(p);
}

int64_t attend_scratch_floats(int32_t dk, int32_t dv, int32_t n_rows, int32_t n_heads) {
  // K and V tiles, probabilities, then per KV head: int16 query rows (half a float each) and one
  // 16-lane scale vector (attend_kernel_impl.inl's VNNI path).
  return int64_t{kKeyChunk} * (dk + dv) + int64_t{n_rows} * kKeyChunk +
         int64_t{n_heads} * ((int64_t{n_rows} * dk + 1) / 2 + kLanes);
}

}  // namespace kvflash::cpu
