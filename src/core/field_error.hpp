// The one message style of every validation error of the library (the C header's promise):
// "field=value problem (allowed: ...)". Used by problem validation and the device KV cache.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "kvflash/status.hpp"

namespace kvflash {

inline Error field_error(std::string_view field, const std::string& value, std::string_view problem,
                         std::string_view allowed) {
  return invalid_argument(fmt::format("{}={} {} (allowed: {})", field, value, problem, allowed));
}

inline Error range_error(std::string_view field, const std::string& value,
                         std::string_view allowed) {
  return field_error(field, value, "is out of range", allowed);
}

}  // namespace kvflash
