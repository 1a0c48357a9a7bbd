// CPU backend: plan (schedule + workspace layout, one function for both) and run (prepare query
// rows, run the kernel on every task in the thread pool, merge the KV splits with the shared
// state rule, finalize).
#include "backends/cpu/cpu_backend.hpp"

#include <fmt/format.h>
#if defined(KVFLASH_CPU_AVX512) || defined(KVFLASH_CPU_AVX2)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "backends/cpu/attend_kernel.hpp"
#include "backends/cpu/cpu_schedule.hpp"
#include "kvflash/parallel.hpp"
#include "kvflash/reference.hpp"
#include "kvflash/state.hpp"

namespace kvflash::cpu {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t align_up(size_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

// Where everything lives in the workspace. Computed by the same function for plan() (size only)
// and run() (offsets), so the two cannot disagree.
struct Layout {
  CpuSchedule sched;
  int32_t dk_st = 0, dv_st = 0;            // stored values per K / V row (block padding included)
  size_t o_off = 0, m_off = 0, l_off = 0;  // per-task partial states
  // Split KV (n_splits > 1) over turbo K: the query rows of each (sequence, tile), rotated once
  // and read by all of its splits (else every task prepares its own in its thread's area).
  size_t qs_off = 0;
  bool shared_q = false;
  size_t thread_off = 0, thread_bytes = 0;  // per-thread: query tile, kernel scratch, output row
  size_t q_bytes = 0, scratch_bytes = 0;
  size_t total = 0;
};

Layout make_layout(const AttentionProblem& p, int32_t n_threads) {
  Layout L;
  L.sched = cpu_schedule(p, n_threads);
  L.dk_st = static_cast<int32_t>(padded_values(p.k_type, p.head_dim.k));
  L.dv_st = static_cast<int32_t>(padded_values(p.v_type, p.head_dim.v));
  const auto rows = static_cast<size_t>(L.sched.task_rows());
  const auto tasks = static_cast<size_t>(L.sched.n_tasks);
  size_t off = 0;
  L.o_off = off;
  off = align_up(off + tasks * rows * L.dv_st * sizeof(float));
  L.m_off = off;
  off = align_up(off + tasks * rows * sizeof(float));
  L.l_off = off;
  off = align_up(off + tasks * rows * sizeof(float));
  L.shared_q = L.sched.n_splits > 1 && is_rotated(p.k_type);  // worth a pass: the rotation
  L.qs_off = off;
  if (L.shared_q)
    off = align_up(off +
                   tasks / static_cast<size_t>(L.sched.n_splits) * rows * L.dk_st * sizeof(float));
  L.thread_off = off;
  L.q_bytes = align_up(rows * L.dk_st * sizeof(float));  // every KV head's query rows
  L.scratch_bytes = align_up(
      static_cast<size_t>(attend_scratch_floats(
          L.dk_st, L.dv_st, L.sched.tile_rows(), p.n_kv_heads,
          attend_gather_bytes(p.k_type, p.v_type, p.head_dim.k, p.head_dim.v, p.page_size))) *
      sizeof(float));  // tiles of one KV head, int16 queries of all, paged: staging rows
  L.thread_bytes = L.q_bytes + L.scratch_bytes + align_up(L.dv_st * sizeof(float));
  L.total = off + L.thread_bytes * std::max(n_threads, 1) + kAlign;  // + kAlign: base alignment
  return L;
}

const uint8_t* kv_at(const KvTensor& kv, int64_t seq, int64_t head) {
  return static_cast<const uint8_t*>(kv.data) + seq * kv.stride_seq + head * kv.stride_head;
}

using KernelFn = void (*)(const AttendParams&);

// Runs f(task, thread) for task in [0, n_tasks) on the plan's parallel-for (the process-wide pool
// when the caller gave none), thread < plan.n_threads.
template <class F>
void parallel_for(const Plan& plan, int64_t n_tasks, F&& f) {
  using Fn = std::remove_reference_t<F>;
  const ParallelTask task = [](void* ctx, int64_t i, int32_t thread) {
    (*static_cast<Fn*>(ctx))(i, thread);
  };
  void* ctx = &f;
  if (plan.parallel_for)
    plan.parallel_for.run(plan.parallel_for.user, n_tasks, plan.n_threads, task, ctx);
  else
    ThreadPool::process().parallel_for(n_tasks, plan.n_threads, task, ctx, plan.spin_us);
}

Status run_cpu(const Plan& plan, const AttentionTensors& t, void* workspace, KernelFn kernel) {
  const AttentionProblem& p = plan.problem;  // the tensors passed validate(plan, t) in run()
  if (Status s = validate_kv_lens(p, t.kv_lens); !s) return s;
  if (Status s = validate_page_tables(p, t); !s) return s;
  if (Status s = validate_q_offsets(p, t.q_offsets); !s) return s;
  if (workspace == nullptr && plan.workspace_bytes > 0)
    return invalid_argument(
        "workspace=NULL is missing (allowed: a buffer of the plan's workspace_bytes > 0)");

  const Layout L = make_layout(p, plan.n_threads);
  auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(workspace) + kAlign - 1) /
                                          kAlign * kAlign);
  auto* part_o = reinterpret_cast<float*>(base + L.o_off);
  auto* part_m = reinterpret_cast<float*>(base + L.m_off);
  auto* part_l = reinterpret_cast<float*>(base + L.l_off);
  const CpuSchedule& S = L.sched;
  const int32_t G = S.group, rows = S.tile_rows(), dk = p.head_dim.k, dv = p.head_dim.v;
  const int64_t task_rows = S.task_rows();
  const float scale = p.effective_scale();
  const bool rot_k = is_rotated(p.k_type), rot_v = is_rotated(p.v_type);
  auto thread_mem = [&](int32_t thread) { return base + L.thread_off + thread * L.thread_bytes; };

  // Query rows of KV head kvh for (seq, tile): zero-padded to the stored K width, rotated when K
  // is turbo, scaled; into dst (rows x dk_st floats). Head kvh's rows of a group start at
  // kvh * rows * dk_st.
  // Tiles cover n_q_tokens per sequence; a ragged sequence's tiles past its query count are empty.
  auto tile_len = [&](int64_t seq, int64_t tile) {
    const int32_t i0 = static_cast<int32_t>(tile * S.tile_tokens);
    return std::clamp(q_len(t.q_offsets, p.n_q_tokens, seq) - i0, 0, S.tile_tokens);
  };
  auto prepare_q = [&](float* dst, int64_t seq, int64_t tile, int32_t kvh) {
    const int32_t i0 = static_cast<int32_t>(tile * S.tile_tokens);
    const int32_t n_rows = tile_len(seq, tile) * G;
    const int64_t q0 = q_row_base(t.q_offsets, p.n_q_tokens, seq);
    for (int32_t r = 0; r < n_rows; ++r) {
      const int64_t i = i0 + r / G, h = int64_t{kvh} * G + r % G;
      const float* src = t.q + ((q0 + i) * p.n_q_heads + h) * dk;
      float* row = dst + int64_t{r} * L.dk_st;
      std::copy(src, src + dk, row);
      std::fill(row + dk, row + L.dk_st, 0.0f);
      if (rot_k) rotate_forward(row, L.dk_st);
      for (int32_t d = 0; d < L.dk_st; ++d) row[d] *= scale;
    }
  };
  auto* shared_q = reinterpret_cast<float*>(base + L.qs_off);
  if (L.shared_q) {
    // One item per (sequence, tile, KV head): 32 splits no longer rotate the same rows 32 times
    // (turbo at 8K: 14% of the call).
    const int64_t n_items = S.n_tasks / S.n_splits * p.n_kv_heads;
    parallel_for(plan, n_items, [&](int64_t item, int32_t) {
      const auto kvh = static_cast<int32_t>(item % p.n_kv_heads);
      const int64_t g = item / p.n_kv_heads;
      prepare_q(shared_q + (g * task_rows + int64_t{kvh} * rows) * L.dk_st, g / S.n_tiles,
                g % S.n_tiles, kvh);
    });
  }

  // Task index = (seq * n_tiles + tile) * n_splits + split; a task covers every KV head.
  parallel_for(plan, S.n_tasks, [&](int64_t task, int32_t thread) {
    const int64_t split = task % S.n_splits;
    const int64_t tile = task / S.n_splits % S.n_tiles;
    const int64_t seq = task / S.n_splits / S.n_tiles;
    const int64_t len = t.kv_lens ? t.kv_lens[seq] : p.kv_capacity;
    // Splits of whole blocks of keys (kHeadBlockKeys): every block then starts at a multiple of
    // it, so a paged cache's blocks stay inside one page wherever the page size is a multiple.
    const int64_t per = ((len + S.n_splits - 1) / S.n_splits + kHeadBlockKeys - 1) /
                        kHeadBlockKeys * kHeadBlockKeys;
    const int64_t begin = std::min(len, split * per), end = std::min(len, begin + per);
    const int32_t i0 = static_cast<int32_t>(tile * S.tile_tokens);
    const int32_t n_rows = tile_len(seq, tile) * G;

    float* o = part_o + task * task_rows * L.dv_st;
    float* m = part_m + task * task_rows;
    float* l = part_l + task * task_rows;
    std::fill(o, o + task_rows * L.dv_st, 0.0f);
    std::fill(m, m + task_rows, state_empty_m<float>());
    std::fill(l, l + task_rows, 0.0f);
    if (begin >= end || n_rows == 0) return;

    // Query rows of every KV head: shared by the splits, or prepared here.
    float* q;
    if (L.shared_q) {
      q = shared_q + (seq * S.n_tiles + tile) * task_rows * L.dk_st;
    } else {
      q = reinterpret_cast<float*>(thread_mem(thread));
      for (int32_t kvh = 0; kvh < p.n_kv_heads; ++kvh)
        prepare_q(q + int64_t{kvh} * rows * L.dk_st, seq, tile, kvh);
    }
    AttendParams a{};
    a.k_type = p.k_type;
    a.v_type = p.v_type;
    a.dk = L.dk_st;
    a.dv = L.dv_st;
    a.dk_row = dk;
    a.dv_row = dv;
    a.k_stride = t.k.stride_token;
    a.v_stride = t.v.stride_token;
    a.n_rows = n_rows;
    a.head_rows = rows;
    a.group = G;
    a.q_pos0 = len - q_len(t.q_offsets, p.n_q_tokens, seq) + i0;
    a.causal = p.causal;
    a.window = p.window;
    a.softcap = p.softcap;
    a.mask = p.has_mask ? t.mask + (seq * p.n_q_tokens + i0) * t.mask_stride : nullptr;
    a.mask_stride = t.mask_stride;
    a.prefetch_end = end;
    a.scratch = reinterpret_cast<float*>(thread_mem(thread) + L.q_bytes);
    a.kv_begin = begin;
    a.kv_end = end;
    a.block_keys = kHeadBlockKeys;
    a.n_heads = p.n_kv_heads;
    a.k_head_stride = t.k.stride_head;
    a.v_head_stride = t.v.stride_head;
    a.q = q;
    a.alibi = p.has_alibi ? t.alibi_slopes : nullptr;
    a.o = o;
    a.m = m;
    a.l = l;
    if (p.page_size == 0) {
      a.k = kv_at(t.k, seq, 0);
      a.v = kv_at(t.v, seq, 0);
    } else {  // the kernel walks the pages (AttendParams)
      a.k = static_cast<const uint8_t*>(t.k.data);
      a.v = static_cast<const uint8_t*>(t.v.data);
      a.page_size = p.page_size;
      a.k_pages = t.k.page_table + seq * t.k.pages_per_seq;
      a.v_pages = t.v.page_table + seq * t.v.pages_per_seq;
      a.k_page_stride = t.k.stride_page;
      a.v_page_stride = t.v.stride_page;
    }
    kernel(a);
  });

  // Merge the splits of each (sequence, tile) and finalize every row of every KV head.
  const int64_t n_groups = S.n_tasks / S.n_splits;
  parallel_for(plan, n_groups, [&](int64_t g, int32_t thread) {
    const int64_t tile = g % S.n_tiles;
    const int64_t seq = g / S.n_tiles;
    const int32_t i0 = static_cast<int32_t>(tile * S.tile_tokens);
    const int32_t n_rows = tile_len(seq, tile) * G;
    const int64_t q0 = q_row_base(t.q_offsets, p.n_q_tokens, seq);
    auto* merged = reinterpret_cast<float*>(thread_mem(thread));
    auto* row_out = reinterpret_cast<float*>(thread_mem(thread) + L.q_bytes + L.scratch_bytes);
    const int64_t t0 = g * S.n_splits;  // first task of this group
    for (int32_t kvh = 0; kvh < p.n_kv_heads; ++kvh) {
      for (int32_t r = 0; r < n_rows; ++r) {
        const int64_t row = t0 * task_rows + int64_t{kvh} * rows + r;
        float mm = 0, ll = 0;
        merge_states<float>(S.n_splits, part_o + row * L.dv_st, task_rows * L.dv_st, part_m + row,
                            part_l + row, L.dv_st, merged, mm, ll, task_rows);
        const int64_t i = i0 + r / G, h = int64_t{kvh} * G + r % G;
        const int64_t orow = (q0 + i) * p.n_q_heads + h;
        const float sink = p.has_sinks ? t.sinks[h] : 0.0f;
        finalize_state<float>(merged, mm, ll, p.has_sinks, sink, L.dv_st, row_out,
                              t.lse ? t.lse + orow : nullptr);
        if (rot_v) rotate_inverse(row_out, L.dv_st);
        if (p.v_scale != 1.0f)  // fp8 V: the rows hold V / v_scale
          for (int32_t d = 0; d < dv; ++d) row_out[d] *= p.v_scale;
        std::copy(row_out, row_out + dv, t.out + orow * dv);
      }
    }
  });
  return {};
}

void plan_cpu(Plan& plan) {
  const Layout L = make_layout(plan.problem, plan.n_threads);
  plan.n_splits = L.sched.n_splits;
  plan.workspace_bytes = L.total;
}

std::optional<std::string> reject_prefill_sized(const AttentionProblem& p) {
  if (p.n_q_tokens > kDecodeMaxQTokens)
    return fmt::format(
        "n_q_tokens={} is above {} (allowed: 1 .. {}, the decode kernels' query tokens)",
        p.n_q_tokens, kDecodeMaxQTokens, kDecodeMaxQTokens);
  return std::nullopt;
}

#if defined(KVFLASH_CPU_AVX512) || defined(KVFLASH_CPU_AVX2)
// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif
#if defined(KVFLASH_CPU_AVX2)
// x86-64-v3 as the AVX2 kernels use it: AVX2, FMA, F16C.
bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}
std::optional<std::string> reject_no_avx2(const AttentionProblem&) {
  static const bool ok = cpu_has_avx2();
  if (ok) return std::nullopt;
  return std::string("this processor lacks AVX2 with F16C and FMA");
}
#endif
#if defined(KVFLASH_CPU_AVX512)
bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         cpu_has_f16c() && __builtin_cpu_supports("fma");
}
std::optional<std::string> reject_no_avx512(const AttentionProblem&) {
  static const bool ok = cpu_has_avx512();
  if (ok) return std::nullopt;
  return std::string("this processor lacks AVX-512 F/BW/DQ/VL with F16C and FMA");
}
std::optional<std::string> reject_no_vnni(const AttentionProblem&) {
  static const bool ok = cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
  if (ok) return std::nullopt;
  return std::string("this processor lacks AVX512-VNNI (or AVX-512 F/BW/DQ/VL with F16C and FMA)");
}
// The VNNI build differs from the AVX-512 one only for turbo K or V (int16 scores and P.V).
std::optional<std::string> reject_no_turbo(const AttentionProblem& p) {
  if (is_rotated(p.k_type) || is_rotated(p.v_type)) return std::nullopt;
  return fmt::format("K {} and V {}: neither is a turbo type (cpu.decode.avx512 serves these)",
                     to_string(p.k_type), to_string(p.v_type));
}
#endif

// The portable candidates' plan: plan_cpu, after the warning of portable_only_warning (once per
// process, on stderr).
void plan_cpu_portable(Plan& plan) {
  static const bool warned = [] {
  // (a processor with AVX-512 has AVX2, a build with the AVX-512 kernels the AVX2 ones; every
  // AArch64 processor has NEON)
#if defined(KVFLASH_CPU_NEON)
    const std::optional<std::string> w = portable_only_warning(true, true);
#elif defined(KVFLASH_CPU_AVX2)
    const std::optional<std::string> w = portable_only_warning(true, cpu_has_avx2());
#elif defined(KVFLASH_CPU_AVX512)
    const std::optional<std::string> w = portable_only_warning(true, cpu_has_avx512());
#else
    const std::optional<std::string> w = portable_only_warning(false, false);
#endif
    if (w) std::fprintf(stderr, "%s\n", w->c_str());
    return true;
  }();
  (void)warned;
  plan_cpu(plan);
}

using RejectFn = std::optional<std::string> (*)(const AttentionProblem&);

// isa: the guard of the instruction set fn is compiled for (nullptr: any processor).
KernelCandidate make_candidate(std::string name, int priority, KernelFn fn, bool decode_only,
                               RejectFn isa) {
  KernelCandidate c;
  c.name = std::move(name);
  c.backend = Backend::cpu;
  c.priority = priority;
  c.opt_in_only = false;
  if (isa != nullptr) c.guards.push_back({"isa", isa});
  if (decode_only) c.guards.push_back({"decode_q_tokens", reject_prefill_sized});
  c.make_plan = fn == attend_portable ? plan_cpu_portable : plan_cpu;
  c.run = [fn](const Plan& plan, const AttentionTensors& t, void* ws, void*) {
    return run_cpu(plan, t, ws, fn);
  };
  return c;
}

}  // namespace

std::optional<std::string> portable_only_warning(bool built_simd, bool cpu_simd) {
  if (built_simd && cpu_simd) return std::nullopt;
  return fmt::format(
      "kvflash: warning: the CPU kernels run their portable build, {}: expect 15-20x the time of "
      "the AVX2, AVX-512 and NEON kernels",
      built_simd ? "this processor lacks AVX2 with F16C and FMA"
                 : "this library was built without the AVX2, AVX-512 and NEON kernels (neither "
                   "x86-64 nor AArch64)");
}

// Priorities: a decode kernel beats prefill for the problems both accept (its tile holds every
// query token); AVX-512 beats AVX2, AVX2 (or, on AArch64, NEON) beats portable, and the VNNI build
// beats AVX-512 for turbo K or V. The portable pair covers the whole space on any CPU.
void register_kernels(std::vector<KernelCandidate>& out) {
#if defined(KVFLASH_CPU_AVX512)
  {
    KernelCandidate vnni =
        make_candidate("cpu.decode.avx512vnni", 210, attend_avx512vnni, true, reject_no_vnni);
    vnni.guards.insert(vnni.guards.begin() + 1, {"kv_types", reject_no_turbo});
    out.push_back(std::move(vnni));
  }
  out.push_back(make_candidate("cpu.decode.avx512", 200, attend_avx512, true, reject_no_avx512));
  out.push_back(make_candidate("cpu.prefill.avx512", 190, attend_avx512, false, reject_no_avx512));
#endif
#if defined(KVFLASH_CPU_AVX2)
  out.push_back(make_candidate("cpu.decode.avx2", 150, attend_avx2, true, reject_no_avx2));
  out.push_back(make_candidate("cpu.prefill.avx2", 140, attend_avx2, false, reject_no_avx2));
#endif
#if defined(KVFLASH_CPU_NEON)  // NEON is part of every AArch64 processor: no guard
  out.push_back(make_candidate("cpu.decode.neon", 150, attend_neon, true, nullptr));
  out.push_back(make_candidate("cpu.prefill.neon", 140, attend_neon, false, nullptr));
#endif
  out.push_back(make_candidate("cpu.decode.portable", 100, attend_portable, true, nullptr));
  out.push_back(make_candidate("cpu.prefill.portable", 90, attend_portable, false, nullptr));

  KernelCandidate ref;
  ref.name = "cpu.reference";
  ref.backend = Backend::cpu;
  ref.priority = 0;
  ref.opt_in_only = true;
  ref.make_plan = [](Plan& plan) {
    plan.n_splits = 1;
    plan.workspace_bytes = 0;
  };
  ref.run = [](const Plan& plan, const AttentionTensors& t, void*, void*) {
    return reference_attention(plan.problem, t);
  };
  out.push_back(std::move(ref));
}

const BackendEntry& backend_entry() {
  static constexpr BackendEntry entry{
      .id = Backend::cpu,
      .register_kernels = register_kernels,
      .host_threads = [] { return ThreadPool::process().size(); },
      .device = nullptr,
  };
  return entry;
}

}  // namespace kvflash::cpu
