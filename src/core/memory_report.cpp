#include "kvflash/memory_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

namespace kvflash {
namespace {

// 1234567 -> "1,234,567".
std::string with_commas(size_t v) {
  std::string digits = std::to_string(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string format_bytes(size_t bytes) {
  static constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  size_t unit = 0;
  while (v >= 1024.0 && unit + 1 < kUnits.size()) {
    v /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", v, kUnits[unit]);
}

void MemoryReport::add(std::string name, size_t bytes, std::string note) {
  entries.push_back(MemoryEntry{std::move(name), bytes, std::nullopt, std::move(note)});
}

void MemoryReport::add_pool(std::string name, const StackArena& arena, std::string note) {
  entries.push_back(
      MemoryEntry{std::move(name), arena.capacity(), arena.high_water(), std::move(note)});
}

size_t MemoryReport::total_bytes() const {
  size_t total = 0;
  for (const MemoryEntry& e : entries) total += e.bytes;
  return total;
}

std::string MemoryReport::table() const {
  using Row = std::array<std::string, 5>;
  std::vector<Row> rows;
  rows.push_back({"what", "bytes", "size", "high water", "note"});
  auto high_water = [](const MemoryEntry& e) -> std::string {
    if (!e.high_water) return "";
    const double pct =
        e.bytes == 0 ? 0.0
                     : 100.0 * static_cast<double>(*e.high_water) / static_cast<double>(e.bytes);
    return fmt::format("{} ({:.0f}%)", format_bytes(*e.high_water), pct);
  };
  for (const MemoryEntry& e : entries)
    rows.push_back({e.name, with_commas(e.bytes), format_bytes(e.bytes), high_water(e), e.note});
  rows.push_back({"total", with_commas(total_bytes()), format_bytes(total_bytes()), "", ""});

  std::array<size_t, 5> width{};
  for (const Row& r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  // Names and notes left-aligned, numbers right-aligned.
  constexpr std::array<bool, 5> kRight = {false, true, true, true, false};
  auto line = [&](const Row& r) {
    std::string s = "|";
    for (size_t c = 0; c < r.size(); ++c)
      s += kRight[c] ? fmt::format(" {:>{}} |", r[c], width[c])
                     : fmt::format(" {:<{}} |", r[c], width[c]);
    return s + "\n";
  };
  std::string out = device >= 0 ? fmt::format("memory on device {}\n", device) : "";
  out += line(rows[0]);
  out += "|";
  for (size_t c = 0; c < width.size(); ++c)
    out += std::string(width[c] + 1, '-') + (kRight[c] ? ":|" : "-|");
  out += "\n";
  for (size_t i = 1; i < rows.size(); ++i) out += line(rows[i]);
  return out;
}

}  // namespace kvflash
