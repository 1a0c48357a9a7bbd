// Case selection by name: std::regex patterns searched (not matched whole) in the case name.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace kvflash::parity {

class NameFilter {
 public:
  // Throws std::regex_error on a malformed pattern.
  explicit NameFilter(const std::vector<std::string>& patterns);
  ~NameFilter();
  NameFilter(const NameFilter&) = delete;
  NameFilter& operator=(const NameFilter&) = delete;

  // True when every pattern is found in the name (no pattern: everything matches), so repeated
  // filters narrow; alternatives go in one pattern with '|'.
  bool matches(const std::string& name) const;

 private:
  struct Patterns;
  std::unique_ptr<Patterns> patterns_;
};

}  // namespace kvflash::parity
