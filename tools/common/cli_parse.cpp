#include "common/cli_parse.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>

namespace kvflash::tools {
namespace {

Error flag_error(std::string_view flag, std::string_view text, std::string_view allowed) {
  return invalid_argument(fmt::format("{}: '{}' is not valid; {}", flag, text, allowed));
}

bool to_int(std::string_view s, int64_t& out) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (s.empty()) return false;
  int64_t mult = 1;
  const char last = static_cast<char>(std::tolower(static_cast<unsigned char>(s.back())));
  if (last == 'k') mult = 1024;
  if (last == 'm') mult = 1024 * 1024;
  if (mult != 1) s.remove_suffix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || p != s.data() + s.size()) return false;
  out *= mult;
  return true;
}

constexpr std::string_view kListHelp =
    "expected a comma list of positive integers (suffix K = 1024, M = 1024^2) or ranges "
    "FIRST-LAST*FACTOR / FIRST-LAST+STEP, e.g. 4096,32768 or 1024-1048576*2";

}  // namespace

Expected<int64_t> parse_int(std::string_view flag, std::string_view text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < lo || v > hi)
    return invalid_argument(fmt::format("{}: '{}' is not valid; expected one integer from {} to {}",
                                        flag, text, lo, hi));
  return v;
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    std::string item(text.substr(start, end - start));
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

std::vector<std::string> llama_style_args(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    bool llama = false;
    for (std::string_view s : {"-ctk", "-ctv"})
      llama = llama || (a.rfind(s, 0) == 0 && (a.size() == s.size() || a[s.size()] == '='));
    // Built by appending: GCC 12 reports a false -Wrestrict on insert/operator+ here.
    std::string out;
    if (llama) out.push_back('-');
    out.append(a);
    args.push_back(std::move(out));
  }
  return args;
}

Expected<std::vector<int64_t>> parse_int_list(std::string_view flag, std::string_view text) {
  std::vector<int64_t> out;
  for (const std::string& item : split(text, ',')) {
    const size_t dash = item.find('-', 1);
    if (dash == std::string::npos) {
      int64_t v = 0;
      if (!to_int(item, v) || v < 1) return flag_error(flag, item, kListHelp);
      out.push_back(v);
      continue;
    }
    const std::string first_s = item.substr(0, dash);
    std::string rest = item.substr(dash + 1);
    char op = 0;
    int64_t step = 0;
    const size_t op_pos = rest.find_first_of("*+");
    if (op_pos != std::string::npos) {
      op = rest[op_pos];
      if (!to_int(rest.substr(op_pos + 1), step)) return flag_error(flag, item, kListHelp);
      rest = rest.substr(0, op_pos);
    } else {
      op = '*';
      step = 2;
    }
    int64_t first = 0, last = 0;
    if (!to_int(first_s, first) || !to_int(rest, last) || first < 1 || last < first)
      return flag_error(flag, item, kListHelp);
    if ((op == '*' && step < 2) || (op == '+' && step < 1))
      return flag_error(flag, item, "the factor of a range must be >= 2 and its step >= 1");
    for (int64_t v = first; v <= last; v = op == '*' ? v * step : v + step) {
      out.push_back(v);
      if (out.size() > 100000)
        return flag_error(flag, item, "a range may give 100000 values at most");
    }
  }
  if (out.empty()) return flag_error(flag, text, kListHelp);
  return out;
}

Expected<std::vector<std::pair<int32_t, int32_t>>> parse_heads(std::string_view flag,
                                                               std::string_view text) {
  std::vector<std::pair<int32_t, int32_t>> out;
  constexpr std::string_view help =
      "expected QUERY_HEADS/KV_HEADS with KV_HEADS dividing QUERY_HEADS, e.g. 32/8 or 32/8,64/8";
  for (const std::string& item : split(text, ',')) {
    const auto parts = split(item, '/');
    int64_t q = 0, kv = 0;
    if (parts.size() == 1 && to_int(parts[0], q))
      kv = q;
    else if (parts.size() != 2 || !to_int(parts[0], q) || !to_int(parts[1], kv))
      return flag_error(flag, item, help);
    if (q < 1 || kv < 1 || q % kv != 0 || q > SupportedSpace::max_q_heads)
      return flag_error(flag, item, help);
    out.emplace_back(static_cast<int32_t>(q), static_cast<int32_t>(kv));
  }
  if (out.empty()) return flag_error(flag, text, help);
  return out;
}

Expected<std::vector<HeadDims>> parse_head_dims(std::string_view flag, std::string_view text) {
  std::string allowed = "expected one of";
  for (HeadDims hd : SupportedSpace::head_dims)
    allowed += hd.k == hd.v ? fmt::format(" {}", hd.k) : fmt::format(" {}/{}", hd.k, hd.v);
  std::vector<HeadDims> out;
  for (const std::string& item : split(text, ',')) {
    const auto parts = split(item, '/');
    int64_t k = 0, v = 0;
    if (parts.size() == 1 && to_int(parts[0], k))
      v = k;
    else if (parts.size() != 2 || !to_int(parts[0], k) || !to_int(parts[1], v))
      return flag_error(flag, item, allowed);
    const HeadDims hd{static_cast<int32_t>(k), static_cast<int32_t>(v)};
    bool ok = false;
    for (HeadDims s : SupportedSpace::head_dims) ok = ok || s == hd;
    if (!ok) return flag_error(flag, item, allowed);
    out.push_back(hd);
  }
  if (out.empty()) return flag_error(flag, text, allowed);
  return out;
}

Expected<std::vector<KvType>> parse_types(std::string_view flag, std::string_view text) {
  std::vector<KvType> out;
  for (const std::string& item : split(text, ',')) {
    auto t = kv_type_from_name(item);
    if (!t) return flag_error(flag, item, fmt::format("expected one of {}", kv_type_names()));
    out.push_back(*t);
  }
  if (out.empty())
    return flag_error(flag, text, fmt::format("expected one of {}", kv_type_names()));
  return out;
}

Expected<int64_t> parse_bytes(std::string_view flag, std::string_view text) {
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::string unit;
  while (!s.empty() && std::isalpha(static_cast<unsigned char>(s.back()))) {
    unit.insert(unit.begin(),
                static_cast<char>(std::tolower(static_cast<unsigned char>(s.back()))));
    s.pop_back();
  }
  double value = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  constexpr std::string_view help = "expected a size such as 80G, 141GiB, 24GB, 512M or bytes";
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || value <= 0)
    return flag_error(flag, text, help);
  double mult = 1;
  if (unit.empty() || unit == "b")
    mult = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib")
    mult = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib")
    mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    return flag_error(flag, text, help);
  return static_cast<int64_t>(value * mult);
}

}  // namespace kvflash::tools
