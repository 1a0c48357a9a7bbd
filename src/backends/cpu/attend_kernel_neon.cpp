// The attention kernel compiled for AArch64 with NEON (Advanced SIMD, part of every ARMv8-A
// processor, with its fp16 conversions): the 16-lane vectors as four 128-bit registers
// (attend_kernel_impl.inl's V16Split), the byte lookups by TBL; built only for AArch64.
#define KVFLASH_ISA_NS neon
#define KVFLASH_NEON_KERNEL 1
#include "backends/cpu/attend_kernel_impl.inl"

namespace kvflash::cpu {

void attend_neon(const AttendParams& p) {
  neon::attend(p);
}

}  // namespace kvflash::cpu
