// The attention kernel compiled for x86-64-v4 plus AVX512-VNNI (turbo types in 16-bit integers on
// the decode path); selected only when the processor reports those features (see
// cpu_backend.cpp's guards).
#define KVFLASH_ISA_NS avx512vnni
#include "backends/cpu/attend_kernel_impl.inl"

namespace kvflash::cpu {

void attend_avx512vnni(const AttendParams& p) {
  avx512vnni::attend(p);
}

}  // namespace kvflash::cpu
