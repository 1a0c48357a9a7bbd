#include "guarded_buffer.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace kvflash::parity {

void GuardedBuffer::Free::operator()(std::byte* p) const {
  std::free(p);
}

GuardedBuffer::GuardedBuffer(size_t bytes)
    : bytes_(bytes), total_((2 * kGuardBytes + bytes + kAlignment - 1) / kAlignment * kAlignment) {
  const size_t total = total_;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kAlignment, total));
  if (p == nullptr) throw std::bad_alloc();
  base_.reset(p);
  // Only the guards: the payload is the caller's to fill, and touching it twice costs a second
  // pass over a 1M-token cache.
  std::memset(p, kSentinel, kGuardBytes);
  std::memset(p + kGuardBytes + bytes, kSentinel, total - kGuardBytes - bytes);
}

void GuardedBuffer::fill_bytes(uint8_t value) {
  std::memset(data(), value, bytes_);
}

void GuardedBuffer::fill_f32(float value) {
  float* f = as<float>();
  for (size_t i = 0; i < bytes_ / sizeof(float); ++i) f[i] = value;
}

std::optional<std::string> GuardedBuffer::check_guards() const {
  const auto* head = reinterpret_cast<const uint8_t*>(base_.get());
  return check_guards(head, head + kGuardBytes + bytes_, bytes_);
}

std::optional<std::string> GuardedBuffer::check_guards(const uint8_t* head, const uint8_t* tail,
                                                       size_t payload_bytes) {
  // Report the damaged byte nearest to the payload: that is where an overrun starts.
  for (size_t i = kGuardBytes; i-- > 0;)
    if (head[i] != kSentinel)
      return fmt::format("write {} bytes before the buffer (byte = 0x{:02x})", kGuardBytes - i,
                         head[i]);
  for (size_t i = 0; i < kGuardBytes; ++i)
    if (tail[i] != kSentinel)
      return fmt::format("write {} bytes past the end of the {}-byte buffer (byte = 0x{:02x})",
                         i + 1, payload_bytes, tail[i]);
  return std::nullopt;
}

}  // namespace kvflash::parity
