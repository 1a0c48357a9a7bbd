// Errors are values: every fallible call returns a Status or an Expected<T> whose message names the
// offending field, its value and what is allowed. Nothing in kvflash throws across its API.
#pragma once

#if __cplusplus < 202002L
#error "kvflash's C++ headers (kvflash/*.hpp) need C++20; C and C++17 code use kvflash/kvflash.h"
#endif

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "kvflash/export.h"

namespace kvflash {

enum class ErrorCode {
  invalid_argument,  // a field of the request is outside its documented range
  unsupported,       // valid request, but no built kernel serves it (the message lists why)
  out_of_memory,
  backend_error,  // the backend runtime reported a failure
  internal,
};

KVFLASH_API const char* to_string(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::internal;
  std::string message;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : error_(std::move(e)) {}  // NOLINT(google-explicit-constructor)
  static Status ok_status() { return {}; }

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const {
    assert(error_);
    return *error_;
  }
  const std::string& message() const { return error().message; }

 private:
  std::optional<Error> error_;
};

template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Expected(Error e) : v_(std::move(e)) {}      // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const {
    assert(ok());
    return std::get<0>(v_);
  }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }
  Status status() const { return ok() ? Status{} : Status{error()}; }

 private:
  std::variant<T, Error> v_;
};

inline Error invalid_argument(std::string msg) {
  return {ErrorCode::invalid_argument, std::move(msg)};
}
inline Error unsupported(std::string msg) {
  return {ErrorCode::unsupported, std::move(msg)};
}

}  // namespace kvflash
