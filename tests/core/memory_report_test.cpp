#include "kvflash/memory_report.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "kvflash/stack_arena.hpp"

namespace kvflash {
namespace {

using ::testing::HasSubstr;

TEST(MemoryReport, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(size_t{16} << 20), "16.00 MiB");
  EXPECT_EQ(format_bytes(size_t{3} << 30), "3.00 GiB");
}

TEST(MemoryReport, SumsEveryEntryAndThePoolHoldsItsCapacity) {
  StackArena pool(reinterpret_cast<void*>(uintptr_t{0x10000}), size_t{16} << 20);
  void* a = *pool.allocate(size_t{3} << 20);
  void* b = *pool.allocate(size_t{1} << 20);
  ASSERT_TRUE(pool.release(b).ok());
  ASSERT_TRUE(pool.release(a).ok());

  MemoryReport r;
  r.device = 0;
  r.add("KV storage", size_t{1} << 30, "32 layers, q8_0/turbo4");
  r.add("workspace", 123456);
  r.add_pool("pool", pool);
  ASSERT_EQ(r.entries.size(), 3u);
  EXPECT_EQ(r.entries[2].bytes, size_t{16} << 20);  // held: the capacity, used or not
  ASSERT_TRUE(r.entries[2].high_water.has_value());
  EXPECT_EQ(*r.entries[2].high_water, size_t{4} << 20);
  EXPECT_FALSE(r.entries[0].high_water.has_value());
  EXPECT_EQ(r.total_bytes(), (size_t{1} << 30) + 123456 + (size_t{16} << 20));

  EXPECT_EQ(
      r.table(),
      "memory on device 0\n"
      "| what       |         bytes |       size |     high water | note                   |\n"
      "|------------|--------------:|-----------:|---------------:|------------------------|\n"
      "| KV storage | 1,073,741,824 |   1.00 GiB |                | 32 layers, q8_0/turbo4 |\n"
      "| workspace  |       123,456 | 120.56 KiB |                |                        |\n"
      "| pool       |    16,777,216 |  16.00 MiB | 4.00 MiB (25%) |                        |\n"
      "| total      | 1,090,642,496 |   1.02 GiB |                |                        |\n");
}

TEST(MemoryReport, EmptyReportHasATotalOfZero) {
  MemoryReport r;
  EXPECT_EQ(r.total_bytes(), 0u);
  const std::string t = r.table();
  EXPECT_THAT(t, HasSubstr("| total |     0 |  0 B |"));
  EXPECT_THAT(t, ::testing::Not(HasSubstr("device")));
}

}  // namespace
}  // namespace kvflash
