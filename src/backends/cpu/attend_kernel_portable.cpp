// The attention kernel for any processor: vector extensions lowered to what the baseline
// instruction set offers.
#define KVFLASH_ISA_NS portable
#include "backends/cpu/attend_kernel_impl.inl"

namespace kvflash::cpu {

void attend_portable(const AttendParams& p) {
  portable::attend(p);
}

int64_t attend_scratch_floats(int32_t dk, int32_t dv, int32_t n_rows) {
  return int64_t{kKeyChunk} * (dk + dv) + int64_t{n_rows} * kKeyChunk;
}

}  // namespace kvflash::cpu
