// The C API (include/kvflash/kvflash.h), its value half: errors, formats, the problem and tensors,
// one-call attention and the registry query. The engine half (plans, CUDA services, the device KV
// cache) is kvflash_c_engine.cpp; both convert through capi.hpp.
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "capi/capi.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/kvflash.h"
#include "kvflash/problem.hpp"
#include "kvflash/registry.hpp"
#include "kvflash/status.hpp"

namespace kvflash::capi {

using kvflash::ErrorCode;
using kvflash::KvType;

// ---- The C enums mirror the C++ ones ----------------------------------------------------------

static_assert(KVFLASH_TYPE_F32 == static_cast<int>(KvType::f32));
static_assert(KVFLASH_TYPE_F16 == static_cast<int>(KvType::f16));
static_assert(KVFLASH_TYPE_BF16 == static_cast<int>(KvType::bf16));
static_assert(KVFLASH_TYPE_Q8_0 == static_cast<int>(KvType::q8_0));
static_assert(KVFLASH_TYPE_Q4_0 == static_cast<int>(KvType::q4_0));
static_assert(KVFLASH_TYPE_TURBO2 == static_cast<int>(KvType::turbo2));
static_assert(KVFLASH_TYPE_TURBO3 == static_cast<int>(KvType::turbo3));
static_assert(KVFLASH_TYPE_TURBO4 == static_cast<int>(KvType::turbo4));
static_assert(KVFLASH_TYPE_FP8_E4M3 == static_cast<int>(KvType::fp8_e4m3));
static_assert(KVFLASH_TYPE_FP8_E5M2 == static_cast<int>(KvType::fp8_e5m2));
static_assert(KVFLASH_TYPE_COUNT == kvflash::kAllKvTypes.size());

constexpr int to_c(ErrorCode c) {
  return static_cast<int>(c) + 1;
}
static_assert(to_c(ErrorCode::invalid_argument) == KVFLASH_ERROR_INVALID_ARGUMENT);
static_assert(to_c(ErrorCode::unsupported) == KVFLASH_ERROR_UNSUPPORTED);
static_assert(to_c(ErrorCode::out_of_memory) == KVFLASH_ERROR_OUT_OF_MEMORY);
static_assert(to_c(ErrorCode::backend_error) == KVFLASH_ERROR_BACKEND);
static_assert(to_c(ErrorCode::internal) == KVFLASH_ERROR_INTERNAL);

static_assert(sizeof(kvflash_type) == 4 && sizeof(kvflash_backend) == 4 &&
              sizeof(kvflash_status) == 4);
// A C parallel-for is a kvflash::ParallelFor as it stands (same signature, task type included).
static_assert(std::is_same_v<kvflash_task_fn, kvflash::ParallelTask>);
static_assert(std::is_same_v<kvflash_parallel_for_fn, decltype(kvflash::ParallelFor::run)>);

// The int32 stored in a C enum field, read as bytes: a C caller may store any value there.
template <class E>
int32_t raw(const E& e) {
  static_assert(sizeof(E) == sizeof(int32_t));
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// Rows longer than this are rejected, so that no size computation can overflow.
constexpr int64_t kMaxRowValues = int64_t{1} << 56;

// ---- Thread-local last error ------------------------------------------------------------------

thread_local std::string t_last_error;
// Set instead of t_last_error when storing the message itself ran out of memory.
thread_local const char* t_last_error_static = nullptr;

void set_last_error(std::string_view message) noexcept {
  try {
    t_last_error.assign(message);
    t_last_error_static = nullptr;
  } catch (...) {
    t_last_error.clear();
    t_last_error_static = "out of memory while storing the error message";
  }
}

int fail(const kvflash::Error& e) noexcept {
  set_last_error(e.message);
  return to_c(e.code);
}
int fail(ErrorCode code, std::string_view message) noexcept {
  set_last_error(message);
  return to_c(code);
}
int fail_invalid(std::string_view message) noexcept {
  return fail(ErrorCode::invalid_argument, message);
}

// Error for an exception caught in `function`; called inside the handler, while the exception
// (and its what()) is alive.
int fail_exception(ErrorCode code, const char* function, const char* what) noexcept {
  try {
    return fail(code, fmt::format("{}: {}", function, what));
  } catch (...) {
    return fail(code, what);
  }
}

// ---- Conversions ------------------------------------------------------------------------------

bool is_c_type(kvflash_type t) {
  const int32_t v = raw(t);
  return v >= 0 && v < KVFLASH_TYPE_COUNT;
}

std::optional<KvType> to_cpp(kvflash_type t) {
  if (!is_c_type(t)) return std::nullopt;
  return static_cast<KvType>(static_cast<uint8_t>(raw(t)));
}

kvflash::Error bad_type(std::string_view field, kvflash_type t) {
  return kvflash::invalid_argument(
      fmt::format("{}={} is not a kvflash_type (allowed: 0 .. {}, i.e. {})", field, raw(t),
                  KVFLASH_TYPE_COUNT - 1, kvflash::kv_type_names()));
}

// A type that is not a kvflash_type cannot be held by the C++ problem, so it is reported here;
// the fields declared before k_type are checked first, so that the error names the first
// offending field, as validate() promises.
kvflash::Expected<kvflash::AttentionProblem> to_cpp(const kvflash_problem* c) {
  if (c == nullptr)
    return kvflash::invalid_argument("problem=NULL is missing (allowed: a pointer)");
  kvflash::AttentionProblem p;
  p.n_seqs = c->n_seqs;
  p.n_q_tokens = c->n_q_tokens;
  p.n_q_heads = c->n_q_heads;
  p.n_kv_heads = c->n_kv_heads;
  p.head_dim = {c->head_dim.k, c->head_dim.v};
  const auto k = to_cpp(c->k_type);
  const auto v = to_cpp(c->v_type);
  if (!k || !v) {
    if (const kvflash::Status s = kvflash::validate(p); !s) return s.error();
    return !k ? bad_type("k_type", c->k_type) : bad_type("v_type", c->v_type);
  }
  p.k_type = *k;
  p.v_type = *v;
  p.kv_capacity = c->kv_capacity;
  p.scale = c->scale;
  p.causal = c->causal != 0;
  p.has_mask = c->has_mask != 0;
  p.window = c->window;
  p.softcap = c->softcap;
  p.has_sinks = c->has_sinks != 0;
  p.has_alibi = c->has_alibi != 0;
  p.page_size = c->page_size;
  p.ragged_q = c->ragged_q != 0;
  // 0 (a problem zeroed instead of kvflash_problem_default()'s) means 1.
  p.k_scale = c->k_scale == 0.0f ? 1.0f : c->k_scale;
  p.v_scale = c->v_scale == 0.0f ? 1.0f : c->v_scale;
  return p;
}

kvflash_problem to_c(const kvflash::AttentionProblem& p) {
  kvflash_problem c{};
  c.n_seqs = p.n_seqs;
  c.n_q_tokens = p.n_q_tokens;
  c.n_q_heads = p.n_q_heads;
  c.n_kv_heads = p.n_kv_heads;
  c.head_dim = {p.head_dim.k, p.head_dim.v};
  c.k_type = static_cast<kvflash_type>(static_cast<int>(p.k_type));
  c.v_type = static_cast<kvflash_type>(static_cast<int>(p.v_type));
  c.kv_capacity = p.kv_capacity;
  c.scale = p.scale;
  c.causal = p.causal ? 1 : 0;
  c.has_mask = p.has_mask ? 1 : 0;
  c.window = p.window;
  c.softcap = p.softcap;
  c.has_sinks = p.has_sinks ? 1 : 0;
  c.has_alibi = p.has_alibi ? 1 : 0;
  c.page_size = p.page_size;
  c.ragged_q = p.ragged_q ? 1 : 0;
  c.k_scale = p.k_scale;
  c.v_scale = p.v_scale;
  return c;
}

kvflash::KvTensor to_cpp(const kvflash_kv_tensor& c) {
  kvflash::KvTensor t;
  t.data = c.data;
  t.stride_token = c.stride_token;
  t.stride_head = c.stride_head;
  t.stride_seq = c.stride_seq;
  t.page_table = c.page_table;
  t.pages_per_seq = c.pages_per_seq;
  t.n_pages = c.n_pages;
  t.stride_page = c.stride_page;
  return t;
}

kvflash_kv_tensor to_c(const kvflash::KvTensor& t) {
  return {t.data,       t.stride_token,  t.stride_head, t.stride_seq,
          t.page_table, t.pages_per_seq, t.n_pages,     t.stride_page};
}

kvflash::AttentionTensors to_cpp(const kvflash_tensors& c) {
  kvflash::AttentionTensors t;
  t.q = c.q;
  t.k = to_cpp(c.k);
  t.v = to_cpp(c.v);
  t.kv_lens = c.kv_lens;
  t.mask = c.mask;
  t.mask_stride = c.mask_stride;
  t.sinks = c.sinks;
  t.alibi_slopes = c.alibi_slopes;
  t.out = c.out;
  t.lse = c.lse;
  t.q_offsets = c.q_offsets;
  return t;
}

// "a, b,,c " -> {"a", "b", "c"}.
std::vector<std::string> split_names(const char* list) {
  std::vector<std::string> names;
  if (list == nullptr) return names;
  std::string_view rest(list);
  constexpr std::string_view kBlank = " \t\r\n";
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    const size_t first = item.find_first_not_of(kBlank);
    if (first != std::string_view::npos) {
      item = item.substr(first, item.find_last_not_of(kBlank) - first + 1);
      names.emplace_back(item);
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return names;
}

kvflash::Expected<kvflash::PlanOptions> to_cpp(const kvflash_options* c) {
  kvflash::PlanOptions o;
  if (c == nullptr) return o;
  switch (raw(c->backend)) {
    case KVFLASH_BACKEND_AUTO:
      break;
    case KVFLASH_BACKEND_CPU:
      o.select.backend = kvflash::Backend::cpu;
      break;
    case KVFLASH_BACKEND_CUDA:
      o.select.backend = kvflash::Backend::cuda;
      break;
    default:
      return kvflash::invalid_argument(fmt::format(
          "options.backend={} is not a kvflash_backend (allowed: 0 auto, 1 cpu, 2 cuda)",
          raw(c->backend)));
  }
  if (c->n_threads < 0) {
    return kvflash::invalid_argument(fmt::format(
        "options.n_threads={} is negative (allowed: 0 for all hardware threads, or a count)",
        c->n_threads));
  }
  o.n_threads = c->n_threads;
  if (c->parallel_for != nullptr) {
    if (c->parallel_for_threads < 1) {
      return kvflash::invalid_argument(fmt::format(
          "options.parallel_for_threads={} with options.parallel_for set (allowed: the thread "
          "slots the parallel-for offers, >= 1)",
          c->parallel_for_threads));
    }
    o.parallel_for = {c->parallel_for, c->parallel_for_user, c->parallel_for_threads};
  }
  if (c->spin_us < 0) {
    return kvflash::invalid_argument(fmt::format(
        "options.spin_us={} is negative (allowed: 0 for no spin, or microseconds)", c->spin_us));
  }
  o.spin_us = c->spin_us;
  if (c->force_kernel != nullptr) o.select.force = c->force_kernel;
  o.select.exclude = split_names(c->exclude_kernels);
  o.select.read_environment = c->ignore_environment == 0;
  return o;
}

// Copies s and a NUL into buf (capacity bytes); on failure writes "" when it can.
int copy_out(std::string_view s, char* buf, size_t capacity, std::string_view buf_name,
             std::string_view capacity_name) {
  if (buf == nullptr) {
    return fail_invalid(fmt::format("{}=NULL is missing ({}={}) (allowed: a buffer)", buf_name,
                                    capacity_name, capacity));
  }
  if (capacity < s.size() + 1) {
    if (capacity > 0) buf[0] = '\0';
    return fail_invalid(fmt::format("{}={} is too small for \"{}\" (allowed: >= {} bytes)",
                                    capacity_name, capacity, s, s.size() + 1));
  }
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  return kOk;
}

bool aligned(const void* p, uintptr_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// Checks type, n_values and the two pointers of kvflash_quantize / kvflash_dequantize: floats at
// 4-byte, quantized rows at 2-byte aligned addresses.
std::optional<kvflash::Error> check_row(kvflash_type type, const void* src, uintptr_t src_align,
                                        int64_t n_values, const void* dst, uintptr_t dst_align) {
  if (!is_c_type(type)) return bad_type("type", type);
  if (n_values <= 0 || n_values > kMaxRowValues) {
    return kvflash::invalid_argument(
        fmt::format("n_values={} is out of range (allowed: 1 .. 2^56)", n_values));
  }
  if (src == nullptr) return kvflash::invalid_argument("src=NULL is missing (allowed: a pointer)");
  if (dst == nullptr) return kvflash::invalid_argument("dst=NULL is missing (allowed: a pointer)");
  if (!aligned(src, src_align)) {
    return kvflash::invalid_argument(fmt::format(
        "src={} is misaligned (allowed: a multiple of {} bytes)", fmt::ptr(src), src_align));
  }
  if (!aligned(dst, dst_align)) {
    return kvflash::invalid_argument(fmt::format(
        "dst={} is misaligned (allowed: a multiple of {} bytes)", fmt::ptr(dst), dst_align));
  }
  return std::nullopt;
}

}  // namespace kvflash::capi

using namespace kvflash::capi;

// ---- Entry points ---------------------------------------------------------------------------

extern "C" {

const char* kvflash_last_error(void) {
  return t_last_error_static != nullptr ? t_last_error_static : t_last_error.c_str();
}

const char* kvflash_status_string(int status) {
  try {
    if (status == KVFLASH_OK) return "ok";
    if (status >= KVFLASH_ERROR_INVALID_ARGUMENT && status <= KVFLASH_ERROR_INTERNAL) {
      const char* s = kvflash::to_string(static_cast<ErrorCode>(status - 1));
      if (s != nullptr) return s;
    }
  } catch (...) {
  }
  return "unknown";
}

// project(kvflash VERSION ...) in CMakeLists.txt, through the generated kvflash/version.h.
const char* kvflash_version(void) {
  return KVFLASH_VERSION_STRING;
}

kvflash_type kvflash_type_from_name(const char* name) {
  kvflash_type result = KVFLASH_TYPE_INVALID;
  guarded("kvflash_type_from_name", [&] {
    if (name == nullptr) return fail_invalid("name=NULL is missing (allowed: a type name)");
    const auto t = kvflash::kv_type_from_name(name);
    if (!t) {
      return fail_invalid(fmt::format("name=\"{}\" is not a type name (allowed: {})", name,
                                      kvflash::kv_type_names()));
    }
    result = static_cast<kvflash_type>(static_cast<int>(*t));
    return kOk;
  });
  return result;
}

const char* kvflash_type_name(kvflash_type type) {
  const auto t = to_cpp(type);
  // Names are string literals (NUL-terminated) behind the string_view.
  return t ? kvflash::to_string(*t).data() : "invalid";
}

size_t kvflash_row_size(kvflash_type type, int64_t n_values) {
  size_t result = 0;
  guarded("kvflash_row_size", [&] {
    const auto t = to_cpp(type);
    if (!t) return fail(bad_type("type", type));
    if (n_values <= 0 || n_values > kMaxRowValues) {
      return fail_invalid(
          fmt::format("n_values={} is out of range (allowed: 1 .. 2^56)", n_values));
    }
    result = kvflash::row_size(*t, n_values);
    return kOk;
  });
  return result;
}

int kvflash_quantize(kvflash_type type, const float* src, int64_t n_values, void* dst) {
  return guarded("kvflash_quantize", [&] {
    if (auto e = check_row(type, src, alignof(float), n_values, dst, 2)) return fail(*e);
    kvflash::quantize_row(*to_cpp(type), src, n_values, dst);
    return kOk;
  });
}

int kvflash_dequantize(kvflash_type type, const void* src, int64_t n_values, float* dst) {
  return guarded("kvflash_dequantize", [&] {
    if (auto e = check_row(type, src, 2, n_values, dst, alignof(float))) return fail(*e);
    kvflash::dequantize_row(*to_cpp(type), src, n_values, dst);
    return kOk;
  });
}

kvflash_problem kvflash_problem_default(void) {
  kvflash_problem result{};
  guarded("kvflash_problem_default", [&] {
    result = to_c(kvflash::AttentionProblem{});
    return kOk;
  });
  return result;
}

int kvflash_validate_problem(const kvflash_problem* problem) {
  return guarded("kvflash_validate_problem", [&] {
    const auto p = to_cpp(problem);
    if (!p) return fail(p.error());
    const kvflash::Status s = kvflash::validate(*p);
    return s ? kOk : fail(s.error());
  });
}

int kvflash_problem_describe(const kvflash_problem* problem, char* text, size_t text_capacity) {
  return guarded("kvflash_problem_describe", [&] {
    const auto p = to_cpp(problem);
    if (!p) return fail(p.error());
    return copy_out(kvflash::describe(*p), text, text_capacity, "text", "text_capacity");
  });
}

int kvflash_kv_tensor_contiguous(const void* data, kvflash_type type, int32_t head_dim,
                                 int32_t n_kv_heads, int64_t capacity, kvflash_kv_tensor* tensor) {
  return guarded("kvflash_kv_tensor_contiguous", [&] {
    if (tensor == nullptr) return fail_invalid("tensor=NULL is missing (allowed: a pointer)");
    const auto t = to_cpp(type);
    if (!t) return fail(bad_type("type", type));
    if (head_dim <= 0)
      return fail_invalid(fmt::format("head_dim={} is out of range (allowed: >= 1)", head_dim));
    if (n_kv_heads <= 0) {
      return fail_invalid(fmt::format("n_kv_heads={} is out of range (allowed: >= 1)", n_kv_heads));
    }
    if (capacity <= 0)
      return fail_invalid(fmt::format("capacity={} is out of range (allowed: >= 1)", capacity));
    // The whole cache of one sequence must be addressable with int64 byte strides.
    int64_t bytes = static_cast<int64_t>(kvflash::row_size(*t, head_dim));
    if (__builtin_mul_overflow(bytes, int64_t{n_kv_heads}, &bytes) ||
        __builtin_mul_overflow(bytes, capacity, &bytes)) {
      return fail_invalid(
          fmt::format("capacity={} x n_kv_heads={} rows of {} bytes overflow a 64-bit byte offset "
                      "(allowed: < 2^63 bytes)",
                      capacity, n_kv_heads, kvflash::row_size(*t, head_dim)));
    }
    const kvflash::KvTensor k =
        kvflash::kv_tensor_contiguous(data, *t, head_dim, n_kv_heads, capacity);
    tensor->data = k.data;
    tensor->stride_token = k.stride_token;
    tensor->stride_head = k.stride_head;
    tensor->stride_seq = k.stride_seq;
    tensor->page_table = nullptr;
    tensor->pages_per_seq = 0;
    tensor->n_pages = 0;
    tensor->stride_page = 0;
    return kOk;
  });
}

int kvflash_validate_tensors(const kvflash_problem* problem, const kvflash_tensors* tensors) {
  return guarded("kvflash_validate_tensors", [&] {
    const auto p = to_cpp(problem);
    if (!p) return fail(p.error());
    if (tensors == nullptr) return fail_invalid("tensors=NULL is missing (allowed: a pointer)");
    if (const kvflash::Status s = kvflash::validate(*p); !s) return fail(s.error());
    const kvflash::AttentionTensors t = to_cpp(*tensors);
    if (const kvflash::Status s = kvflash::validate(*p, t); !s) return fail(s.error());
    // C tensors are host memory: the lengths and offsets can be read here.
    if (const kvflash::Status s = kvflash::validate_kv_lens(*p, t.kv_lens); !s)
      return fail(s.error());
    const kvflash::Status s = kvflash::validate_q_offsets(*p, t.q_offsets);
    return s ? kOk : fail(s.error());
  });
}

kvflash_options kvflash_options_default(void) {
  kvflash_options o{};
  return o;
}

int kvflash_attention(const kvflash_problem* problem, const kvflash_tensors* tensors,
                      const kvflash_options* options) {
  return guarded("kvflash_attention", [&] {
    const auto p = to_cpp(problem);
    if (!p) return fail(p.error());
    if (tensors == nullptr) return fail_invalid("tensors=NULL is missing (allowed: a pointer)");
    auto o = to_cpp(options);
    if (!o) return fail(o.error());
    if (o->select.backend == kvflash::Backend::cuda) {
      return fail(ErrorCode::unsupported,
                  "options.backend=cuda: kvflash_attention runs on host buffers, which only the "
                  "cpu backend reads (use the C++ plan()/run() with device buffers for cuda)");
    }
    o->select.backend = kvflash::Backend::cpu;
    if (const kvflash::Status s = kvflash::validate(*p); !s) return fail(s.error());
    const kvflash::AttentionTensors t = to_cpp(*tensors);
    if (const kvflash::Status s = kvflash::validate(*p, t); !s) return fail(s.error());
    const kvflash::Status s = kvflash::attention(*p, t, *o);
    return s ? kOk : fail(s.error());
  });
}

int kvflash_select_kernel(const kvflash_problem* problem, const kvflash_options* options,
                          char* name, size_t name_capacity) {
  return guarded("kvflash_select_kernel", [&] {
    if (name != nullptr && name_capacity > 0) name[0] = '\0';
    const auto p = to_cpp(problem);
    if (!p) return fail(p.error());
    const auto o = to_cpp(options);
    if (!o) return fail(o.error());
    const auto k = kvflash::select_kernel(*p, o->select);
    if (!k) return fail(k.error());
    if (name == nullptr && name_capacity == 0) return kOk;
    return copy_out((*k)->name, name, name_capacity, "name", "name_capacity");
  });
}

int32_t kvflash_kernel_count(void) {
  int32_t result = 0;
  guarded("kvflash_kernel_count", [&] {
    result = static_cast<int32_t>(kvflash::kernel_candidates().size());
    return kOk;
  });
  return result;
}

const char* kvflash_kernel_name(int32_t index) {
  const char* result = nullptr;
  guarded("kvflash_kernel_name", [&] {
    const auto& all = kvflash::kernel_candidates();
    if (index < 0 || static_cast<size_t>(index) >= all.size()) {
      return fail_invalid(fmt::format(
          "index={} is out of range (allowed: 0 .. count - 1, count={})", index, all.size()));
    }
    result = all[static_cast<size_t>(index)].name.c_str();
    return kOk;
  });
  return result;
}

}  // extern "C"
