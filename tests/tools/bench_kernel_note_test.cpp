// The note the tools print once when the CPU backend runs a portable kernel for want of a faster
// one (issue 44: measured honestly).
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "common/kernel_note.hpp"

namespace kvflash::tools {
namespace {

TEST(PortableKernelNote, NamesThePortableKernelChosenForWantOfAFasterOne) {
  for (const char* kernel : {"cpu.decode.portable", "cpu.prefill.portable"}) {
    const std::optional<std::string> note = portable_kernel_note(kernel, false);
    ASSERT_TRUE(note.has_value()) << kernel;
    EXPECT_NE(note->find(kernel), std::string::npos) << *note;
    EXPECT_NE(note->find("AVX2"), std::string::npos) << *note;
    EXPECT_NE(note->find("AVX-512"), std::string::npos) << *note;
    EXPECT_NE(note->find("NEON"), std::string::npos) << *note;
    EXPECT_EQ(note->find("to come"), std::string::npos) << *note;
  }
}

TEST(PortableKernelNote, NothingForOtherKernelsOrAPortableKernelAskedFor) {
  for (const char* kernel :
       {"cpu.decode.avx512", "cpu.decode.avx512vnni", "cpu.prefill.avx512", "cpu.decode.avx2",
        "cpu.prefill.avx2", "cpu.decode.neon", "cpu.prefill.neon", "cuda.decode", "cuda.prefill",
        "cpu.reference", "portable", ""})
    EXPECT_FALSE(portable_kernel_note(kernel, false).has_value()) << kernel;
  EXPECT_FALSE(portable_kernel_note("cpu.decode.portable", true).has_value());
}

}  // namespace
}  // namespace kvflash::tools
