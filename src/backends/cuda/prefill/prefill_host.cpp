// The CUDA prefill family on the host: candidate registration, plan (layout, instance, launch
// shape, the parameters that come from the problem) and run (pointers and strides, one launch,
// nothing allocated, nothing synchronized). Plain C++: the kernels are reached through
// prefill_instance() (prefill.cu).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/common/device_info.hpp"
#include "backends/cuda/common/tensor_map.hpp"
#include "backends/cuda/common/tile_copy.hpp"
#include "backends/cuda/common/type_pairs.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/prefill/prefill_instances.hpp"
#include "backends/cuda/prefill/prefill_plan.hpp"

namespace kvflash::cuda::prefill {

namespace {

// The kernel's static shared memory (two centroid tables, the sign words, a flag), at most.
constexpr size_t kStaticSmemBytes = 256;

// Prefill-sized calls (from the measured crossover, common/routing.hpp), and every ragged one
// (whatever its longest sequence: cuda.decode reads no per-sequence query counts).
std::optional<std::string> reject_q_tokens(const AttentionProblem& p) {
  const int32_t min_q = min_prefill_q_tokens(p.k_type, p.v_type, p.page_size);
  if (p.n_q_tokens >= min_q || p.ragged_q) return std::nullopt;
  return fmt::format(
      "n_q_tokens={} is below {} (allowed for {}/{}{}: {} and up, or ragged_q; cuda.decode is the "
      "faster below)",
      p.n_q_tokens, min_q, to_string(p.k_type), to_string(p.v_type),
      p.page_size > 0 ? fmt::format(" in pages of {}", p.page_size) : "", min_q);
}

std::optional<std::string> reject_head_dim(const AttentionProblem& p) {
  const PrefillLayout l = prefill_layout(p);
  const int32_t max_dk = qk_dims(p.k_type, kWideBucket);
  if (l.dkc <= max_dk && l.dvc <= kWideBucket) return std::nullopt;
  return fmt::format(
      "head dims {}/{} compute as {}/{}, above {}/{} (cuda.prefill's widest instance)",
      p.head_dim.k, p.head_dim.v, l.dkc, l.dvc, max_dk, kWideBucket);
}

std::optional<std::string> reject_grid(const AttentionProblem& p) {
  if (p.n_seqs > 65535)
    return fmt::format("n_seqs={} is above 65535 (allowed: 1 .. 65535, one grid dimension)",
                       p.n_seqs);
  if (p.n_kv_heads > 65535)
    return fmt::format("n_kv_heads={} is above 65535 (allowed: 1 .. 65535, one grid dimension)",
                       p.n_kv_heads);
  return std::nullopt;
}

std::optional<std::string> reject_smem(const AttentionProblem& p) {
  const PrefillLayout l = prefill_layout(p);
  const size_t cap = max_smem_optin();
  if (cap == 0 || l.smem_total + kStaticSmemBytes <= cap) return std::nullopt;
  return fmt::format("needs {} bytes of shared memory per CTA, the device offers {}", l.smem_total,
                     cap);
}

struct PrefillPlan final : BackendPlan {
  PrefillLayout layout;
  PrefillInstance instance{};
  dim3 grid;
  PrefillParams params{};
  PrefillMergeLaunch merge = nullptr;  // with more than one split
  dim3 merge_grid;
  size_t merge_smem = 0;
};

const PrefillPlan& prefill_plan_of(const Plan& plan) {
  return static_cast<const PrefillPlan&>(*plan.detail);
}

// The parameters that come from the problem and its layout.
void problem_params(PrefillParams& d, const AttentionProblem& p, const PrefillLayout& l) {
  d.kv_capacity = p.kv_capacity;
  d.window = p.window;
  d.page_size = p.page_size;
  d.n_seqs = p.n_seqs;
  d.n_q_tokens = p.n_q_tokens;
  d.n_q_heads = p.n_q_heads;
  d.n_kv_heads = p.n_kv_heads;
  d.group = p.group();
  d.rows = p.rows_per_kv_head();
  d.n_row_blocks = l.n_row_blocks;
  d.dk = p.head_dim.k;
  d.dv = p.head_dim.v;
  d.dkc = l.dkc;
  d.dvc = l.dvc;
  d.block_rows = l.block_rows;
  d.k_slot = l.k_slot;
  d.v_slot = l.v_slot;
  d.q_off = l.q_off;
  d.k_stage_off = l.k_stage_off;
  d.v_stage_off = l.v_stage_off;
  d.stage_bytes = l.stage_bytes;
  d.k_lead_off = l.k_lead_off;
  d.v_lead_off = l.v_lead_off;
  d.k_dec_off = l.k_dec_off;
  d.dec_stride = l.dec_stride;
  d.v_dec_off = l.v_dec_off;
  d.scratch_off = l.scratch_off;
  d.out_stride = l.out_stride;
  d.n_stages = l.n_stages;
  d.scale = p.effective_scale();
  d.scale_log2 = d.scale * kStateLog2e;
  d.softcap = p.softcap;
  d.v_scale = p.v_scale;
  d.causal = p.causal;
  d.has_mask = p.has_mask;
  d.has_sinks = p.has_sinks;
  d.has_alibi = p.has_alibi;
  d.div_group = fast_div(d.group);
  d.k_div_items = fast_div(l.dkc / 8);
  d.v_div_items = fast_div(l.dvc / 8);
}

void plan_prefill(Plan& plan) {
  const AttentionProblem& p = plan.problem;
  auto pp = std::make_shared<PrefillPlan>();
  const PrefillLayout& l = pp->layout = prefill_layout(p);
  pp->instance = prefill_instance(p.k_type, p.v_type, l.dv_bucket);
  if (pp->instance.prepare != nullptr) (void)pp->instance.prepare(l.smem_total);
  plan.n_threads = 1;
  plan.n_splits = prefill_splits(p, l, sm_count());
  const PrefillParts parts = prefill_parts(p, l, plan.n_splits);
  plan.workspace_bytes =
      plan.n_splits > 1 ? static_cast<size_t>(parts.floats()) * sizeof(float) : 0;
  pp->grid = dim3(static_cast<unsigned>(l.n_row_blocks * plan.n_splits),
                  static_cast<unsigned>(p.n_kv_heads), static_cast<unsigned>(p.n_seqs));
  problem_params(pp->params, p, l);
  pp->params.parts = parts;
  pp->params.n_splits = plan.n_splits;
  pp->params.div_splits = fast_div(plan.n_splits);
  pp->params.div_rows = fast_div(p.rows_per_kv_head());
  pp->params.div_kv_heads = fast_div(p.n_kv_heads);
  if (plan.n_splits > 1) {
    const int64_t rows = int64_t{p.n_seqs} * p.n_kv_heads * p.rows_per_kv_head();
    pp->merge = prefill_merge_launch(is_rotated(p.v_type));
    pp->merge_grid = dim3(static_cast<unsigned>((rows + kWarps - 1) / kWarps));
    pp->merge_smem = size_t(kWarps) * l.dvc * sizeof(float);
  }
  plan.detail = std::move(pp);
}

// The slot a tensor's rows are copied into: the raw slot, or for float rows the row itself
// (copy_mode reads them with 16-byte copies, no lead, into the swizzled operand tile).
int32_t slot_of(const PrefillLayout& l, bool k) {
  if (k) return l.k_mode == TileMode::raw ? l.k_slot : l.k_row_bytes;
  return l.v_mode == TileMode::raw ? l.v_slot : l.v_row_bytes;
}

// cuda.prefill's requirements on the tensors: decode's (check_device_tensors) for its slots.
// (ragged_q without q_offsets is validate(problem, tensors)'s to refuse.)
Status check_prefill_tensors(const Plan& plan, const AttentionTensors& t) {
  const AttentionProblem& p = plan.problem;
  if (dynamic_cast<const PrefillPlan*>(plan.detail.get()) == nullptr)
    return invalid_argument("plan.detail holds no cuda.prefill plan: make the plan with plan()");
  const PrefillLayout& l = prefill_plan_of(plan).layout;
  return check_device_tensors("cuda.prefill", p, t, l.k_row_bytes, slot_of(l, true), l.v_row_bytes,
                              slot_of(l, false));
}

// The map of a tensor's TMA boxes (PrefillTmaView): 128-byte swizzled atoms of a direct tensor,
// raw rows in their slots; false where TMA cannot describe it.
bool encode_prefill_map(TensorMapBytes& map, const KvTensor& kv, TileMode mode, int32_t row_bytes,
                        int32_t slot, const AttentionProblem& p, int32_t& box_rows) {
  const bool direct = mode == TileMode::direct;
  const int32_t box_bytes = direct ? 128 : slot;
  PrefillTmaView v;
  if (!prefill_tma_view(kv_tma_tensor(kv), row_bytes, box_bytes, direct, p, v)) return false;
  box_rows = v.box_rows;
  return encode_kv_tma_map(map, kv.data, v, kv.stride_token, box_bytes, v.box_rows, direct);
}

// No silent slow path: with KVFLASH_LOG_DISPATCH set, the first call of the process whose
// tensors keep a TMA pair off the TMA kernel (about half its speed) says so on stderr.
void log_no_tma(const AttentionProblem& p) {
  static std::atomic<bool> said{false};
  const char* v = std::getenv("KVFLASH_LOG_DISPATCH");
  if (v == nullptr || *v == '\0' || std::string_view(v) == "0" || said.exchange(true)) return;
  std::fprintf(stderr,
               "kvflash: cuda.prefill: K/V layout not described by TMA (needed: data, token, "
               "sequence and page strides multiples of 16 bytes, heads inside one token's row, "
               "pages a multiple of 16 tokens and no window): the kernel with its threads' "
               "copies runs, about half as fast (%s)\n",
               describe(p).c_str());
}

TileCopy tile_copy(const KvTensor& kv, const CopyMode& m, int32_t row_bytes,
                   const AttentionProblem& p) {
  TileCopy c{};
  c.row_bytes = row_bytes;
  c.base = static_cast<const uint8_t*>(kv.data);
  c.st = kv.stride_token;
  c.sh = kv.stride_head;
  c.ss = p.page_size > 0 ? 0 : kv.stride_seq;
  if (p.page_size > 0) {
    c.pages = kv.page_table;
    c.sp = kv.stride_page;
    c.pps = kv.pages_per_seq;
    c.n_pages = static_cast<int32_t>(std::min<int64_t>(kv.n_pages, INT32_MAX));
  }
  c.unit = static_cast<int16_t>(m.unit);
  c.units = m.units;
  c.lead_mask = static_cast<int16_t>(m.lead16 ? 15 : (m.unit == 4 ? 3 : 0));
  c.div_units = fast_div(m.units);
  return c;
}

Status run_prefill(const Plan& plan, const AttentionTensors& t, void* workspace, void* stream_ptr) {
  const AttentionProblem& p = plan.problem;
  const PrefillPlan& pp = prefill_plan_of(plan);
  const PrefillLayout& l = pp.layout;
  if (plan.n_splits > 1 && workspace == nullptr)
    return invalid_argument(
        fmt::format("cuda.prefill needs a {} byte device workspace (plan.workspace_bytes)",
                    plan.workspace_bytes));
  PrefillParams d = pp.params;
  d.part = static_cast<float*>(workspace);
  d.q = t.q;
  d.kv_lens = t.kv_lens;
  d.q_offsets = p.ragged_q ? t.q_offsets : nullptr;
  d.mask = t.mask;
  d.sinks = t.sinks;
  d.alibi = t.alibi_slopes;
  d.out = t.out;
  d.lse = t.lse;
  d.mask_stride = t.mask_stride;
  d.q_vec4 = reinterpret_cast<uintptr_t>(t.q) % 16 == 0;
  d.k = tile_copy(t.k, *copy_mode("k", t.k, p.k_type, l.k_row_bytes, slot_of(l, true), p),
                  l.k_row_bytes, p);
  d.v = tile_copy(t.v, *copy_mode("v", t.v, p.v_type, l.v_row_bytes, slot_of(l, false), p),
                  l.v_row_bytes, p);
  // Pairs whose tensors TMA describes run the TMA kernel (launch_prefill picks it by d.tma;
  // KVFLASH_PREFILL_NO_TMA set: never, for A/B runs).
  static const bool no_tma = std::getenv("KVFLASH_PREFILL_NO_TMA") != nullptr;
  const bool tma_pair = tma_kernel_pair(l.k_mode, l.v_mode, l.dv_bucket) && !no_tma;
  int32_t k_box = 0, v_box = 0;
  d.tma = tma_pair &&
          encode_prefill_map(d.k_map, t.k, l.k_mode, l.k_row_bytes, l.k_slot, p, k_box) &&
          encode_prefill_map(d.v_map, t.v, l.v_mode, l.v_row_bytes, l.v_slot, p, v_box) &&
          k_box == v_box;
  d.tma_box_rows = k_box;
  if (tma_pair && !d.tma) log_no_tma(p);
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  pp.instance.launch(d, pp.grid, l.smem_total, stream);
  if (cudaError_t e = cudaPeekAtLastError(); e != cudaSuccess)
    return cuda_error(e, "cuda.prefill launch");
  if (pp.merge != nullptr) {
    pp.merge(d, pp.merge_grid, pp.merge_smem, stream);
    if (cudaError_t e = cudaPeekAtLastError(); e != cudaSuccess)
      return cuda_error(e, "cuda.prefill merge launch");
  }
  return {};
}

}  // namespace

void register_prefill(std::vector<KernelCandidate>& out) {
  KernelCandidate c;
  c.name = "cuda.prefill";
  c.backend = Backend::cuda;
  c.priority = 310;  // above cuda.decode's: where both pass (9-32 tokens), the faster prefill
  c.opt_in_only = false;
  c.guards = {{"cuda_device", reject_no_device},   {"compute_capability", reject_arch},
              {"kv_types", reject_pair_not_built}, {"prefill_q_tokens", reject_q_tokens},
              {"head_dim", reject_head_dim},       {"grid", reject_grid},
              {"shared_memory", reject_smem}};
  c.make_plan = plan_prefill;
  c.check_tensors = check_prefill_tensors;
  c.run = run_prefill;
  out.push_back(std::move(c));
}

}  // namespace kvflash::cuda::prefill
