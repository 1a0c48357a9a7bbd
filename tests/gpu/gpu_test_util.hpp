// Shared pieces of the GPU tests: random inputs on the host, their device copies, guarded device
// outputs, the float64 reference and the comparison. Every test of this folder skips without a
// CUDA device (KVFLASH_REQUIRE_GPU) and, where a problem has no CUDA kernel, says so in its skip.
//
// KVFLASH_GPU_TEST_QUICK=1 shortens the long cases for compute-sanitizer runs: quick() is true and
// kv lengths are capped by quick_len(). On an H200 the whole executable took 7 s plain, 6 s under
// memcheck and 20 s under racecheck; 4 s and 14 s quick (most of it the float64 reference).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvflash/device.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/registry.hpp"
#include "kvflash/status.hpp"
#include "parity/guarded_buffer.hpp"

#define KVFLASH_REQUIRE_GPU()                                                  \
  do {                                                                         \
    if (::kvflash::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// A build without KVFLASH_CUDA_ALL_PAIRS compiles the decode kernels of the default (K, V) pairs
// only (common/type_pairs.hpp): a test of another pair skips there, saying so and naming the
// option.
#define KVFLASH_REQUIRE_PAIR(k, v)                                                   \
  do {                                                                               \
    if (auto why_ = ::kvflash::gputest::pair_not_built(k, v)) GTEST_SKIP() << *why_; \
  } while (0)

#define KVFLASH_CONCAT_INNER(a, b) a##b
#define KVFLASH_CONCAT(a, b) KVFLASH_CONCAT_INNER(a, b)
// lhs = *expr, or a fatal failure with the error's message (only in void functions and tests).
#define KVFLASH_ASSIGN_OR_FAIL(lhs, expr)                                      \
  auto KVFLASH_CONCAT(expected_, __LINE__) = (expr);                           \
  ASSERT_TRUE(KVFLASH_CONCAT(expected_, __LINE__).ok())                        \
      << #expr << ": " << KVFLASH_CONCAT(expected_, __LINE__).error().message; \
  lhs = std::move(*KVFLASH_CONCAT(expected_, __LINE__))
#define KVFLASH_ASSERT_OK(expr)                            \
  do {                                                     \
    const ::kvflash::Status s_ = (expr);                   \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.message(); \
  } while (0)

namespace kvflash::gputest {

// Why this build has no CUDA decode kernels for (k, v), or nullopt (KVFLASH_REQUIRE_PAIR).
std::optional<std::string> pair_not_built(KvType k, KvType v);

// KVFLASH_GPU_TEST_QUICK set to anything but "" or "0".
bool quick();
// `len`, or at most kQuickMaxLen in quick mode.
inline constexpr int64_t kQuickMaxLen = 4097;
int64_t quick_len(int64_t len);

// Host inputs in the contiguous (seq, token, head) layout for kv_capacity tokens. Rows of tokens
// at or past filled[s] hold 0xFF bytes (NaN in every format), so a kernel reading past a
// sequence's length produces NaN. The problem's features get their tensors: a random additive
// mask (some -inf, query 1 of sequence 0 fully hidden; NaN past filled[s] and in the padding of
// each row, so a kernel that uses mask entries of keys it must not see produces NaN), per-head
// sinks around the typical logit, and the ALiBi paper's slopes.
struct HostInputs {
  AttentionProblem p;
  std::vector<float> q;
  std::vector<uint8_t> k, v;
  std::vector<int64_t> kv_lens;  // what the kernel is told (always passed, as a device array)
  std::vector<float> mask;       // (n_seqs, n_q_tokens, mask_stride) when p.has_mask
  int64_t mask_stride = 0;
  std::vector<float> sinks;  // (n_q_heads) when p.has_sinks
  std::vector<float> alibi;  // (n_q_heads) when p.has_alibi

  // Host tensors (the reference's); out and lse left null.
  AttentionTensors tensors() const;
};
HostInputs make_inputs(const AttentionProblem& p, const std::vector<int64_t>& filled,
                       uint64_t seed);

struct Reference {
  std::vector<double> out;
  std::vector<float> lse;
};
// The float64 reference at in.kv_lens.
Expected<Reference> reference(const HostInputs& in);
// The same, bit for bit, on every hardware thread: one sub-problem per sequence, and for a causal
// sequence that holds at least its queries, one per chunk of queries with the keys cut after the
// chunk's last query (keys the causal mask hides add nothing to a row, and every position, mask
// row and slope stays the same). What prefill tests use, whose references run for seconds.
Expected<Reference> parallel_reference(const HostInputs& in);

// Device memory with kGuardBytes of sentinel (0xA5, filled on the device) before and after the
// payload, so a kernel that writes outside what it was given is caught.
class GuardedDevice {
 public:
  // The parity harness's guard layout and sentinel, judged by its check_guards.
  static constexpr size_t kGuardBytes = parity::GuardedBuffer::kGuardBytes;
  static constexpr uint8_t kSentinel = parity::GuardedBuffer::kSentinel;
  static constexpr uint8_t kPoison = 0xFF;  // NaN as f32

  GuardedDevice() = default;
  static Expected<GuardedDevice> allocate(size_t bytes, void* stream);
  void* data() const;
  size_t size() const { return bytes_; }
  // Payload := kPoison bytes, on `stream`.
  Status poison(void* stream) const;
  // "" when both guards hold the sentinel, else where the first damaged byte is (synchronizes).
  Expected<std::string> check_guards(const gpu::Stream& stream) const;

 private:
  gpu::DeviceBuffer buf_;
  size_t bytes_ = 0;
};

// Device copies of a HostInputs; kv_lens is a device array.
struct DeviceInputs {
  gpu::DeviceBuffer q, k, v, kv_lens, mask, sinks, alibi;
  AttentionTensors tensors;  // device pointers; out and lse left null
};
Expected<DeviceInputs> stage(const HostInputs& in, void* stream);

// The K and V of a HostInputs in a paged pool on the device (kv_tensor_paged's layout, pages of
// page_size tokens): every sequence's pages spread over the pool in a shuffled order, as a
// serving engine's table ends up, and spare pages of 0xFF bytes (NaN) in between. One table
// serves K and V; `table` is its host copy.
struct PagedKv {
  gpu::DeviceBuffer k, v, table;
  std::vector<int32_t> host_table;
  KvTensor k_tensor, v_tensor;  // device pointers
};
Expected<PagedKv> stage_paged(const HostInputs& in, int32_t page_size, uint64_t seed, void* stream);

// out, lse and workspace of one plan, guarded, with the tensors that point at them.
struct DeviceOutputs {
  GuardedDevice out, lse, workspace;
  Status poison(void* stream) const;
  // Guard damage of all three, "" when none (synchronizes).
  Expected<std::string> check_guards(const gpu::Stream& stream) const;
};
Expected<DeviceOutputs> allocate_outputs(const Plan& pl, void* stream);
AttentionTensors with_outputs(AttentionTensors t, const DeviceOutputs& o);

// The outputs read back as floats (synchronizes the stream).
struct HostOutputs {
  std::vector<float> out, lse;
};
Expected<HostOutputs> read_outputs(const DeviceOutputs& o, const gpu::Stream& stream);
// "" when a and b hold the same bits in out and lse, else the first element that differs.
std::string bitwise_difference(const HostOutputs& a, const HostOutputs& b);

// A kernel's outputs against the reference.
struct Comparison {
  double nmse = 0.0;                // over all rows, sum((out - ref)^2) / sum(ref^2)
  int64_t non_finite = 0;           // NaN / inf in out
  int64_t empty_rows_not_zero = 0;  // rows the reference leaves zero (nothing visible) not zero
  int64_t lse_bad = 0;              // lse off by more than tol * max(1, |ref|), or not -inf where
                                    // the reference is -inf
  std::string first_problem;        // the first of the above, located
  std::string summary() const;
};
Comparison compare(const AttentionProblem& p, const HostOutputs& got, const Reference& ref);

// A plan on the CUDA backend, or the reason there is none (unsupported: the test skips).
Expected<Plan> plan_cuda(const AttentionProblem& p, const std::string& force = {});

}  // namespace kvflash::gputest
