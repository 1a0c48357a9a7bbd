#include "common/table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kvflash::tools {

Expected<OutputFormat> parse_output_format(std::string_view flag, std::string_view text) {
  if (text == "md") return OutputFormat::md;
  if (text == "csv") return OutputFormat::csv;
  if (text == "json") return OutputFormat::json;
  return invalid_argument(
      fmt::format("{}: '{}' is not valid; expected md, csv or json", flag, text));
}

std::string Table::text(const Cell& c, const Column& col) const {
  if (std::holds_alternative<std::string>(c)) return std::get<std::string>(c);
  if (std::holds_alternative<int64_t>(c)) return std::to_string(std::get<int64_t>(c));
  if (std::holds_alternative<double>(c))
    return fmt::format("{:.{}f}", std::get<double>(c), col.precision);
  return "";
}

std::string Table::markdown() const {
  std::vector<size_t> width(columns_.size());
  for (size_t i = 0; i < columns_.size(); ++i)
    width[i] = std::max<size_t>(3, columns_[i].name.size());
  for (const auto& row : rows_)
    for (size_t i = 0; i < columns_.size() && i < row.size(); ++i)
      width[i] = std::max(width[i], text(row[i], columns_[i]).size());
  std::string out = "|";
  for (size_t i = 0; i < columns_.size(); ++i)
    out += fmt::format(" {:<{}} |", columns_[i].name, width[i]);
  out += "\n|";
  for (size_t i = 0; i < columns_.size(); ++i)
    out += columns_[i].right ? fmt::format(" {}: |", std::string(width[i] - 1, '-'))
                             : fmt::format(" {} |", std::string(width[i], '-'));
  out += "\n";
  for (const auto& row : rows_) {
    out += "|";
    for (size_t i = 0; i < columns_.size(); ++i) {
      const std::string t = i < row.size() ? text(row[i], columns_[i]) : "";
      out += columns_[i].right ? fmt::format(" {:>{}} |", t, width[i])
                               : fmt::format(" {:<{}} |", t, width[i]);
    }
    out += "\n";
  }
  return out;
}

namespace {
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  q += '"';
  return q;
}
}  // namespace

std::string Table::csv() const {
  std::string out;
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (i) out += ',';
    out += csv_field(columns_[i].name);
  }
  out += "\n";
  for (const auto& row : rows_) {
    for (size_t i = 0; i < columns_.size(); ++i) {
      const Cell& c = i < row.size() ? row[i] : Cell{};
      // Full precision in CSV: programs read it.
      std::string t = std::holds_alternative<double>(c) ? fmt::format("{}", std::get<double>(c))
                                                        : text(c, columns_[i]);
      if (i) out += ',';
      out += csv_field(t);
    }
    out += "\n";
  }
  return out;
}

std::string Table::json() const {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const auto& row : rows_) {
    nlohmann::ordered_json obj = nlohmann::ordered_json::object();
    for (size_t i = 0; i < columns_.size(); ++i) {
      const Cell& c = i < row.size() ? row[i] : Cell{};
      if (std::holds_alternative<std::string>(c))
        obj[columns_[i].name] = std::get<std::string>(c);
      else if (std::holds_alternative<int64_t>(c))
        obj[columns_[i].name] = std::get<int64_t>(c);
      else if (std::holds_alternative<double>(c))
        obj[columns_[i].name] = std::get<double>(c);
      else
        obj[columns_[i].name] = nullptr;
    }
    arr.push_back(std::move(obj));
  }
  return arr.dump(2) + "\n";
}

std::string Table::render(OutputFormat f) const {
  switch (f) {
    case OutputFormat::md:
      return markdown();
    case OutputFormat::csv:
      return csv();
    case OutputFormat::json:
      return json();
  }
  return markdown();
}

}  // namespace kvflash::tools
