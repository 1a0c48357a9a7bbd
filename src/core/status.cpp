#include "kvflash/status.hpp"

namespace kvflash {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument:
      return "invalid argument";
    case ErrorCode::unsupported:
      return "unsupported";
    case ErrorCode::out_of_memory:
      return "out of memory";
    case ErrorCode::backend_error:
      return "backend error";
    case ErrorCode::internal:
      return "internal error";
  }
  return "unknown error";
}

}  // namespace kvflash
