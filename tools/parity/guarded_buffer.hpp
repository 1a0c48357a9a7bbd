// Host memory with a fixed sentinel pattern directly before and after the payload, so that a
// kernel writing even one byte outside what it was given is caught (the payload end is not
// rounded up: the tail sentinel starts at data() + size()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace kvflash::parity {

class GuardedBuffer {
 public:
  static constexpr size_t kGuardBytes = 4096;
  static constexpr uint8_t kSentinel = 0xA5;
  // 64: a cache line, and enough for any vector load a kernel may do on an aligned buffer.
  static constexpr size_t kAlignment = 64;

  // The payload is left uninitialized: fill it before use.
  explicit GuardedBuffer(size_t bytes = 0);

  void* data() { return base_.get() + kGuardBytes; }
  const void* data() const { return base_.get() + kGuardBytes; }
  template <class T>
  T* as() {
    return static_cast<T*>(data());
  }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(data());
  }
  size_t size() const { return bytes_; }

  void fill_bytes(uint8_t value);
  void fill_f32(float value);  // the payload as floats (size() / 4 of them)

  // std::nullopt when both guards hold the sentinel, else which guard was hit and where.
  std::optional<std::string> check_guards() const;
  // The same judgement of guards copied from elsewhere (a device mirror): `head` and `tail` hold
  // the kGuardBytes before and after a payload of payload_bytes.
  static std::optional<std::string> check_guards(const uint8_t* head, const uint8_t* tail,
                                                 size_t payload_bytes);

  // The whole allocation: head guard (kGuardBytes), payload (size()), tail guard (at least
  // kGuardBytes, rounded up to kAlignment). A device mirror (device_buffers.hpp) has the same
  // layout, so copying it back over this allocation lets check_guards() judge the device run.
  std::byte* allocation() { return base_.get(); }
  const std::byte* allocation() const { return base_.get(); }
  size_t allocation_size() const { return total_; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  size_t bytes_ = 0;
  size_t total_ = 0;
  std::unique_ptr<std::byte[], Free> base_;
};

}  // namespace kvflash::parity
