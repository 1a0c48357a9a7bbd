// Every byte kvflash holds on a device, as named entries ("KV storage", "workspace", "pool"),
// and a human-readable table of them. The owner of each allocation adds its entry; the report
// only sums and prints, so what it shows is what was added (a test compares it to what the
// device says is in use).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "kvflash/export.h"
#include "kvflash/stack_arena.hpp"

namespace kvflash {

struct MemoryEntry {
  std::string name;
  size_t bytes = 0;                  // held on the device
  std::optional<size_t> high_water;  // pools: the most ever in use at once (of `bytes`)
  std::string note;
};

struct KVFLASH_API MemoryReport {
  int device = -1;  // -1: not said
  std::vector<MemoryEntry> entries;

  void add(std::string name, size_t bytes, std::string note = {});
  // A pool holds its whole capacity; its high-water mark says how much of it was ever used.
  void add_pool(std::string name, const StackArena& arena, std::string note = {});

  size_t total_bytes() const;
  // One row per entry and a total, e.g. (tests/core/memory_report_test.cpp)
  //   memory on device 0
  //   | what       |         bytes |       size |     high water | note      |
  //   |------------|--------------:|-----------:|---------------:|-----------|
  //   | KV storage | 1,073,741,824 |   1.00 GiB |                | 32 layers |
  //   | pool       |    16,777,216 |  16.00 MiB | 4.00 MiB (25%) |           |
  //   | total      | 1,090,519,040 |   1.02 GiB |                |           |
  std::string table() const;
};

// 1536 -> "1.50 KiB", 3 -> "3 B" (binary units, two decimals).
KVFLASH_API std::string format_bytes(size_t bytes);

}  // namespace kvflash
