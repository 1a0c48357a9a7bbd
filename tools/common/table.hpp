// A result table rendered as markdown (for people), CSV or JSON (for programs). Cells keep their
// type, so JSON has numbers as numbers and CSV/markdown print them with the column's precision.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvflash/status.hpp"

namespace kvflash::tools {

enum class OutputFormat { md, csv, json };
Expected<OutputFormat> parse_output_format(std::string_view flag, std::string_view text);

using Cell = std::variant<std::monostate, std::string, int64_t, double>;

struct Column {
  std::string name;   // header (markdown) and key (CSV / JSON)
  int precision = 2;  // digits after the point for doubles
  bool right = true;  // markdown alignment
};

class Table {
 public:
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  // One cell per column, in column order (std::monostate prints as empty / null).
  void add_row(std::vector<Cell> cells) { rows_.push_back(std::move(cells)); }
  const std::vector<Column>& columns() const { return columns_; }
  const std::vector<std::vector<Cell>>& rows() const { return rows_; }
  std::string render(OutputFormat f) const;
  std::string markdown() const;
  std::string csv() const;
  std::string json() const;

 private:
  std::string text(const Cell& c, const Column& col) const;
  std::vector<Column> columns_;
  std::vector<std::vector<Cell>> rows_;
};

}  // namespace kvflash::tools
