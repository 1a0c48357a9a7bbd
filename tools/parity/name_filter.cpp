// GCC 12 reports a false -Wmaybe-uninitialized inside std::regex's compiler when building with
// -fsanitize=address (GCC bug 105616); this file holds the only std::regex, so the warning is
// silenced here alone and -Werror stays on everywhere else.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "name_filter.hpp"

#include <algorithm>
#include <regex>

namespace kvflash::parity {

struct NameFilter::Patterns {
  std::vector<std::regex> all;
};

NameFilter::NameFilter(const std::vector<std::string>& patterns)
    : patterns_(std::make_unique<Patterns>()) {
  for (const std::string& p : patterns) patterns_->all.emplace_back(p);
}

NameFilter::~NameFilter() = default;

bool NameFilter::matches(const std::string& name) const {
  return std::all_of(patterns_->all.begin(), patterns_->all.end(),
                     [&](const std::regex& re) { return std::regex_search(name, re); });
}

}  // namespace kvflash::parity
