#include "common/progress.hpp"

#include <fmt/format.h>

#include <cstdio>

namespace kvflash::tools {

Progress::Progress(int64_t total, bool enabled)
    : total_(total), enabled_(enabled), start_(clock::now()), last_(start_) {}

void Progress::step(const std::string& label) {
  ++done_;
  if (!enabled_) return;
  const auto now = clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < kQuietSeconds || std::chrono::duration<double>(now - last_).count() < 0.25) return;
  last_ = now;
  const double remaining =
      done_ > 0 ? elapsed / static_cast<double>(done_) * static_cast<double>(total_ - done_) : 0;
  fmt::print(stderr, "\r\033[K[{}/{}] {}  {:.0f}s elapsed, ~{:.0f}s left", done_, total_, label,
             elapsed, remaining);
  std::fflush(stderr);
  shown_ = true;
}

void Progress::finish() {
  if (shown_) {
    fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  shown_ = false;
}

}  // namespace kvflash::tools
