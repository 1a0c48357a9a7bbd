// Console lines and CSV rows for case results.
#pragma once

#include <cstdio>
#include <string>

#include "harness.hpp"

namespace kvflash::parity {

// One line per result (plus an indented line with the message when there is one).
void print_result(std::FILE* f, Mode mode, const CaseResult& r);

// One row per (case, backend) with every case parameter in its own column.
class CsvWriter {
 public:
  explicit CsvWriter(const std::string& path);
  ~CsvWriter();
  CsvWriter(const CsvWriter&) = delete;
  CsvWriter& operator=(const CsvWriter&) = delete;

  bool ok() const { return f_ != nullptr; }
  void write(const CaseResult& r);

 private:
  std::FILE* f_ = nullptr;
};

}  // namespace kvflash::parity
