// Helpers shared by the C API tests.
#pragma once

#include <string>

#include "kvflash/formats.hpp"
#include "kvflash/kvflash.h"

namespace kvflash::capi_test {

// The C enum value of a C++ type (the values are equal by construction; kvflash_c.cpp asserts it).
inline kvflash_type c_type(KvType t) {
  return static_cast<kvflash_type>(static_cast<int>(t));
}
inline std::string last_error() {
  return kvflash_last_error();
}

}  // namespace kvflash::capi_test
