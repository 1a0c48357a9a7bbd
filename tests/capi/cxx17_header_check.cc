// kvflash.h from a C++17 translation unit (an engine that is not on C++20): compiled with
// -std=c++17 -Wall -Wextra -Wpedantic -Werror by tests/CMakeLists.txt; never run.
#include "kvflash/kvflash.h"

#if __cplusplus != 201703L
#error "this check must be compiled as C++17"
#endif

namespace {
[[maybe_unused]] int plan_and_run(const kvflash_problem& p, const kvflash_tensors& t) {
  kvflash_plan* plan = nullptr;
  if (int s = kvflash_plan_create(&p, nullptr, &plan); s != KVFLASH_OK) return s;
  const int s = kvflash_run(plan, &t, nullptr, nullptr);
  kvflash_plan_destroy(plan);
  return s;
}
}  // namespace
