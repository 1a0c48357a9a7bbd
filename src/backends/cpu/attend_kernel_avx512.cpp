// The attention kernel compiled for x86-64-v4 (AVX-512 F/BW/DQ/VL, F16C, FMA); selected only
// when the processor reports those features (see cpu_backend.cpp's guards).
#define KVFLASH_ISA_NS avx512
#include "backends/cpu/attend_kernel_impl.inl"

namespace kvflash::cpu {

void attend_avx512(const AttendParams& p) {
  avx512::attend(p);
}

}  // namespace kvflash::cpu
