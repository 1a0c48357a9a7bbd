// What the two halves of the C API (kvflash_c.cpp: values, errors, one-call attention;
// kvflash_c_engine.cpp: plans, CUDA services, the device KV cache) share: the thread-local error
// that every entry point reports through, the guard that keeps exceptions inside, and the
// conversions between the C structs and the C++ value types. Defined in kvflash_c.cpp.
#pragma once

#include <exception>
#include <new>
#include <optional>
#include <string_view>
#include <utility>

#include "kvflash/formats.hpp"
#include "kvflash/kvflash.h"
#include "kvflash/problem.hpp"
#include "kvflash/registry.hpp"
#include "kvflash/status.hpp"

namespace kvflash::capi {

constexpr int kOk = KVFLASH_OK;

// Store the calling thread's last error and return its C status code.
int fail(const kvflash::Error& e) noexcept;
int fail(ErrorCode code, std::string_view message) noexcept;
int fail_invalid(std::string_view message) noexcept;
// Error for an exception caught in `function`; called inside the handler.
int fail_exception(ErrorCode code, const char* function, const char* what) noexcept;

// Runs f (returning an int status); any exception becomes an error code and a message.
template <class F>
int guarded(const char* function, F&& f) noexcept {
  try {
    return std::forward<F>(f)();
  } catch (const std::bad_alloc&) {
    return fail_exception(ErrorCode::out_of_memory, function, "out of memory");
  } catch (const std::exception& e) {
    return fail_exception(ErrorCode::internal, function, e.what());
  } catch (...) {
    return fail_exception(ErrorCode::internal, function, "unexpected exception of unknown type");
  }
}

// C value -> C++ value; a C enum field may hold any int32 (reported, never undefined).
std::optional<KvType> to_cpp(kvflash_type t);
kvflash::Error bad_type(std::string_view field, kvflash_type t);
kvflash::Expected<kvflash::AttentionProblem> to_cpp(const kvflash_problem* c);
kvflash_problem to_c(const kvflash::AttentionProblem& p);
kvflash::KvTensor to_cpp(const kvflash_kv_tensor& c);
kvflash_kv_tensor to_c(const kvflash::KvTensor& t);
kvflash::AttentionTensors to_cpp(const kvflash_tensors& c);
kvflash::Expected<kvflash::PlanOptions> to_cpp(const kvflash_options* c);

}  // namespace kvflash::capi
