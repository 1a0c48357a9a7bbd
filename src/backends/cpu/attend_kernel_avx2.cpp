// The attention kernel compiled for x86-64-v3 (AVX2, FMA, F16C): the 16-lane vectors as pairs of
// 256-bit registers (attend_kernel_impl.inl's V16Pair); selected only when the processor reports
// those features (see cpu_backend.cpp's guards).
#define KVFLASH_ISA_NS avx2
#include "backends/cpu/attend_kernel_impl.inl"

namespace kvflash::cpu {

void attend_avx2(const AttendParams& p) {
  avx2::attend(p);
}

}  // namespace kvflash::cpu
