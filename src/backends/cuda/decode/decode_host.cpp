// The CUDA decode family on the host: candidate registration, plan (layout, split count,
// workspace), and run (parameters, two launches at most, nothing allocated, nothing synchronized).
// Plain C++: the kernels are reached through decode_instance() and merge_launch() (decode.cu).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/common/device_info.hpp"
#include "backends/cuda/common/type_pairs.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/decode/decode_instances.hpp"
#include "backends/cuda/decode/decode_plan.hpp"
#include "backends/cuda/decode/decode_rules.hpp"

namespace kvflash::cuda::decode {

namespace {

// The tensor map of a TMA tile copy with boxes of box_rows keys (see DecodeParams and
// tma_tile_view): false where TMA cannot describe the tensor (then every tile is copied with
// cp.async).
bool encode_tile_map(TensorMapBytes& map, const KvTensor& kv, KvType type, int32_t row_bytes,
                     int32_t slot, int32_t box_rows, const AttentionProblem& p) {
  const std::optional<TmaTileView> view = tma_tile_view(kv, type, row_bytes, slot, p);
  return view && encode_kv_tma_map(map, kv.data, *view, kv.stride_token, slot, box_rows, false);
}

#ifdef KVFLASH_TIMELINE
// Diagnostics build (KVFLASH_TL in decode_device.cuh): one device buffer of phase timestamps,
// rewritten by every call (run() stays free of allocation after the first); at exit the last
// call's phases go to stderr, µs after the first decode CTA started, min / p10 / median / p90 /
// max over the CTAs.
struct Timeline {
  unsigned long long* buf = nullptr;
  int64_t n_decode = 0, n_merge = 0;
  static constexpr int64_t kSlots = int64_t{1} << 20;
  static void dump() {
    Timeline& t = get();
    if (t.buf == nullptr || t.n_decode == 0) return;
    std::vector<unsigned long long> h(size_t(t.n_decode + t.n_merge) * 8);
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(h.data(), t.buf, h.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess)
      return;
    unsigned long long t0 = ~0ull;
    for (int64_t c = 0; c < t.n_decode; ++c) t0 = std::min(t0, h[size_t(c) * 8]);
    const auto row = [&](const char* name, int64_t c0, int64_t n, int k) {
      std::vector<double> v;
      for (int64_t c = c0; c < c0 + n; ++c) {
        const unsigned long long x = h[size_t(c) * 8 + k];
        if (x >= t0 && x != 0) v.push_back(double(x - t0) * 1e-3);
      }
      if (v.empty()) return;
      std::sort(v.begin(), v.end());
      fprintf(stderr,
              "timeline %-22s n %5zu  min %7.2f  p10 %7.2f  med %7.2f  p90 %7.2f  max %7.2f us\n",
              name, v.size(), v.front(), v[v.size() / 10], v[v.size() / 2], v[v.size() * 9 / 10],
              v.back());
    };
    const char* dn[7] = {"decode entry",        "decode after wait", "decode tile0 issued",
                         "decode tile0 landed", "decode loop end",   "decode epilogue done",
                         "decode exit"};
    for (int k = 0; k < 7; ++k) row(dn[k], 0, t.n_decode, k);
    const char* mn[3] = {"merge entry", "merge after wait", "merge done"};
    for (int k = 0; k < 3; ++k) row(mn[k], t.n_decode, t.n_merge, k);
  }
  static Timeline& get() {
    static Timeline t = [] {
      Timeline x;
      if (cudaMalloc(&x.buf, size_t(kSlots) * 8 * 8) != cudaSuccess) x.buf = nullptr;
      std::atexit(dump);
      return x;
    }();
    return t;
  }
};
#endif

std::optional<std::string> reject_q_tokens(const AttentionProblem& p) {
  if (p.n_q_tokens <= kMaxDecodeQTokens) return std::nullopt;
  return fmt::format(
      "n_q_tokens={} is above {} (allowed: 1 .. {}: decode, speculative steps and short chunks; "
      "cuda.prefill serves more)",
      p.n_q_tokens, kMaxDecodeQTokens, kMaxDecodeQTokens);
}

std::optional<std::string> reject_ragged(const AttentionProblem& p) {
  if (!p.ragged_q) return std::nullopt;
  return std::string("ragged query lengths (problem.ragged_q) are served by cuda.prefill");
}

std::optional<std::string> reject_grid(const AttentionProblem& p) {
  if (p.n_seqs > 65535)
    return fmt::format("n_seqs={} is above 65535 (allowed: 1 .. 65535, one grid dimension)",
                       p.n_seqs);
  return std::nullopt;
}

std::optional<std::string> reject_smem(const AttentionProblem& p) {
  const DecodeLayout l = decode_layout(p);
  const size_t cap = max_smem_optin();
  if (cap == 0 || l.smem_total <= cap) return std::nullopt;
  return fmt::format("needs {} bytes of shared memory per CTA, the device offers {}", l.smem_total,
                     cap);
}

// Everything run() needs that does not depend on the tensors, decided once by plan_decode: the
// layout, the kernel instance, the launch shapes and the parameters (DecodeParams) that come from
// the problem alone. run_decode copies `params` and fills in pointers, strides, copy modes and
// tensor maps.
struct DecodePlan final : BackendPlan {
  DecodeLayout layout;
  DecodeInstance instance{};
  MergeLaunch merge = nullptr;  // with more than one split
  dim3 grid, merge_grid;
  int merge_threads = 0;
  size_t merge_smem = 0;
  DecodeParams params{};
};

const DecodePlan& decode_plan_of(const Plan& plan) {
  return static_cast<const DecodePlan&>(*plan.detail);
}

// The parameters that come from the problem, its layout and the split count.
void problem_params(DecodeParams& d, const AttentionProblem& p, const DecodeLayout& l,
                    int32_t n_splits) {
  d.kv_capacity = p.kv_capacity;
  d.page_size = p.page_size;
  if (p.page_size > 0) d.div_page = fast_div(p.page_size);
  d.window = p.window;
  d.scale = p.effective_scale();
  d.softcap = p.softcap;
  d.v_scale = p.v_scale;
  d.n_seqs = p.n_seqs;
  d.n_q_tokens = p.n_q_tokens;
  d.n_q_heads = p.n_q_heads;
  d.n_kv_heads = p.n_kv_heads;
  d.group = p.group();
  d.rows = p.rows_per_kv_head();
  d.dk = p.head_dim.k;
  d.dv = p.head_dim.v;
  d.dkc = l.dkc;
  d.dvc = l.dvc;
  d.k_row_bytes = l.k_row_bytes;
  d.v_row_bytes = l.v_row_bytes;
  d.sk_stride = l.sk_stride;
  d.sv_stride = l.sv_stride;
  d.bk = l.bk;
  d.row_block = l.row_block;
  d.n_row_blocks = l.n_row_blocks;
  d.n_mtiles = l.n_mtiles;
  d.n_dslices = l.n_dslices;
  d.k_share = l.k_share;
  d.n_kgroups = l.n_kgroups;
  d.slice_w = l.slice_w;
  d.n_splits = n_splits;
  d.smem_q_bytes = l.smem_q_bytes;
  d.smem_kv_bytes = l.smem_kv_bytes;
  d.n_stages = l.n_stages;
  d.div_row_blocks = fast_div(l.n_row_blocks);
  d.div_splits = fast_div(n_splits);
  d.div_group = fast_div(d.group);
  d.div_bk = fast_div(l.bk);
  d.div_q4 = fast_div(l.dkc / 4);
  d.div_chunks = fast_div(l.dkc / 16);
  d.div_dvc = fast_div(l.dvc);
  d.div_slice_w = fast_div(l.slice_w);
  d.div_nt = fast_div(l.slice_w / 8);
  d.div_rows = fast_div(d.rows);
  d.div_kv_heads = fast_div(p.n_kv_heads);
  d.div_stages = fast_div(l.n_stages);
  d.causal = p.causal;
  d.has_mask = p.has_mask;
  d.has_sinks = p.has_sinks;
  d.has_alibi = p.has_alibi;
  // Float K rows shorter than the computed dims (head dim not a multiple of 32) read padding.
  d.zero_stages = traits(p.k_type).block_values == 1 && l.dkc != p.head_dim.k;
  // TMA tiles (where run() finds the tensors allow them): whole tiles as one box of bk rows, a
  // range's last partial tile as the step boxes its keys are in where that at least halves its
  // bytes (tile_box, tile_step_rows).
  d.tma_box = p.page_size > 0 ? kPagedTmaBox : tile_box(l);
  d.tma_step_rows = tile_step_rows(l);
}

void plan_decode(Plan& plan) {
  const AttentionProblem& p = plan.problem;
  auto dp = std::make_shared<DecodePlan>();
  const DecodeLayout& l = dp->layout = decode_layout(p);
  const DecodeInstance& inst = decode_instance(p.k_type, p.v_type, l.n_qtiles, l.k_split);
  // Paged caches of float rows in pages shorter than a tile: the kernel twin that reads them
  // (DecodeInstance::launch_paged). Pages of a tile or more take the contiguous kernel's general
  // path, one run of rows per page (the twin's copy of them measured 0.93-0.96x at 4K-32K: f16,
  // pages 64 and 256, 64-key tiles).
  dp->instance = p.page_size > 0 && p.page_size < l.bk && inst.launch_paged != nullptr
                     ? DecodeInstance{inst.prepare_paged, inst.launch_paged, nullptr, nullptr}
                     : inst;
  int ctas = 1;
  if (dp->instance.prepare(l.smem_total, &ctas) != cudaSuccess || ctas < 1) ctas = 1;
  plan.n_threads = 1;
  plan.n_splits = decode_splits(p, l, sm_count(), ctas);
  plan.workspace_bytes = decode_workspace_bytes(p, l, plan.n_splits);
  dp->grid = dim3(static_cast<unsigned>(p.n_kv_heads * l.n_row_blocks),
                  static_cast<unsigned>(plan.n_splits), static_cast<unsigned>(p.n_seqs));
  if (plan.n_splits > 1) {
    const int64_t rows = int64_t{p.n_seqs} * p.n_kv_heads * p.rows_per_kv_head();  // CTAs
    const int warps = merge_warps(plan.n_splits);
    dp->merge = merge_launch(p.v_type);
    dp->merge_grid = dim3(static_cast<unsigned>(rows));
    dp->merge_threads = 32 * warps;
    dp->merge_smem = size_t(warps) * l.dvc * sizeof(float);
  }
  problem_params(dp->params, p, l, plan.n_splits);
  plan.detail = std::move(dp);
}

// cuda.decode's requirements on the tensors (KernelCandidate::check_tensors): lengths on the
// device, and K / V layouts its tile copies can read (copy_mode).
Status check_decode_tensors(const Plan& plan, const AttentionTensors& t) {
  const AttentionProblem& p = plan.problem;
  if (dynamic_cast<const DecodePlan*>(plan.detail.get()) == nullptr)
    return invalid_argument("plan.detail holds no cuda.decode plan: make the plan with plan()");
  const DecodeLayout& l = decode_plan_of(plan).layout;
  return check_device_tensors("cuda.decode", p, t, l.k_row_bytes, l.sk_stride, l.v_row_bytes,
                              l.sv_stride);
}

// The tensors passed check_decode_tensors (run() validates first): pointers, strides, copy modes
// and tensor maps into the plan's parameters, then at most two launches.
Status run_decode(const Plan& plan, const AttentionTensors& t, void* workspace, void* stream_ptr) {
  const AttentionProblem& p = plan.problem;
  const DecodePlan& dp = decode_plan_of(plan);
  const DecodeLayout& l = dp.layout;
  if (plan.n_splits > 1 && workspace == nullptr)
    return invalid_argument(
        fmt::format("cuda.decode needs a {} byte device workspace (plan.workspace_bytes)",
                    plan.workspace_bytes));
  const CopyMode ku = *copy_mode("k", t.k, p.k_type, l.k_row_bytes, l.sk_stride, p);
  const CopyMode vu = *copy_mode("v", t.v, p.v_type, l.v_row_bytes, l.sv_stride, p);

  DecodeParams d = dp.params;
  d.q = t.q;
  d.k = static_cast<const uint8_t*>(t.k.data);
  d.v = static_cast<const uint8_t*>(t.v.data);
  d.kv_lens = t.kv_lens;
  d.mask = t.mask;
  d.sinks = t.sinks;
  d.alibi = t.alibi_slopes;
  d.out = t.out;
  d.lse = t.lse;
  d.part = static_cast<float*>(workspace);
  d.k_st = t.k.stride_token;
  d.k_sh = t.k.stride_head;
  d.k_ss = t.k.stride_seq;
  d.v_st = t.v.stride_token;
  d.v_sh = t.v.stride_head;
  d.v_ss = t.v.stride_seq;
  if (p.page_size > 0) {
    d.k_ss = d.v_ss = 0;
    d.k_pages = t.k.page_table;
    d.v_pages = t.v.page_table;
    d.k_sp = t.k.stride_page;
    d.v_sp = t.v.stride_page;
    d.k_pps = t.k.pages_per_seq;
    d.v_pps = t.v.pages_per_seq;
    d.k_np = static_cast<int32_t>(std::min<int64_t>(t.k.n_pages, INT32_MAX));
    d.v_np = static_cast<int32_t>(std::min<int64_t>(t.v.n_pages, INT32_MAX));
  }
  d.mask_stride = t.mask_stride;
  d.q_vec4 = reinterpret_cast<uintptr_t>(t.q) % 16 == 0 && p.head_dim.k % 4 == 0;
  d.k_unit = ku.unit;
  d.v_unit = vu.unit;
  d.k_lead16 = ku.lead16;
  d.v_lead16 = vu.lead16;
  d.div_k_units = fast_div(ku.units);
  d.div_v_units = fast_div(vu.units);
  d.k_pass = kThreads / d.div_k_units.d;
  d.v_pass = kThreads / d.div_v_units.d;
  // TMA tile copies where they apply: one instruction per tile instead of ~25 per thread and
  // tile (the cp.async loop and its setup were ~20% of the instructions executed for q4_0).
  // Their rows start after a lead (see DecodeParams), as with 16-byte copies of unaligned rows.
  // Paged tensors: one map, of kPagedTmaBox-row boxes over the pool (k_map / v_map).
  const bool paged = p.page_size > 0;
  const int32_t tile_rows = paged ? kPagedTmaBox : l.bk;
  d.tma_k = encode_tile_map(d.k_map, t.k, p.k_type, l.k_row_bytes, l.sk_stride, tile_rows, p) &&
            (paged || encode_tile_map(d.k_step_map, t.k, p.k_type, l.k_row_bytes, l.sk_stride,
                                      d.tma_box, p));
  d.tma_v = encode_tile_map(d.v_map, t.v, p.v_type, l.v_row_bytes, l.sv_stride, tile_rows, p) &&
            (paged || encode_tile_map(d.v_step_map, t.v, p.v_type, l.v_row_bytes, l.sv_stride,
                                      d.tma_box, p));
  if (d.tma_k) d.k_unit = 16, d.k_lead16 = 1;
  if (d.tma_v) d.v_unit = 16, d.v_lead16 = 1;
  d.tma_bytes = (d.tma_k ? l.bk * l.sk_stride : 0) + (d.tma_v ? l.bk * l.sv_stride : 0);
  d.tma_step_bytes =
      (d.tma_k ? d.tma_box * l.sk_stride : 0) + (d.tma_v ? d.tma_box * l.sv_stride : 0);

#ifdef KVFLASH_TIMELINE
  {
    Timeline& tl = Timeline::get();
    d.tl = tl.buf;
    tl.n_decode = int64_t{p.n_kv_heads} * l.n_row_blocks * plan.n_splits * p.n_seqs;
    tl.n_merge = plan.n_splits > 1 ? int64_t{p.n_seqs} * p.n_kv_heads * d.rows : 0;
    d.tl_merge0 = tl.n_decode;
    if (tl.n_decode + tl.n_merge > Timeline::kSlots) d.tl = nullptr;
  }
#endif
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  dp.instance.launch(d, dp.grid, l.smem_total, stream);
  if (cudaError_t e = cudaPeekAtLastError(); e != cudaSuccess)
    return cuda_error(e, "cuda.decode launch");
  if (dp.merge != nullptr) {
    dp.merge(d, dp.merge_grid, dp.merge_threads, dp.merge_smem, stream);
    if (cudaError_t e = cudaPeekAtLastError(); e != cudaSuccess)
      return cuda_error(e, "cuda.decode merge launch");
  }
  return {};
}

}  // namespace

void register_decode(std::vector<KernelCandidate>& out) {
  KernelCandidate c;
  c.name = "cuda.decode";
  c.backend = Backend::cuda;
  c.priority = 300;
  c.opt_in_only = false;
  c.guards = {{"cuda_device", reject_no_device},   {"compute_capability", reject_arch},
              {"kv_types", reject_pair_not_built}, {"decode_q_tokens", reject_q_tokens},
              {"ragged_q", reject_ragged},         {"grid", reject_grid},
              {"shared_memory", reject_smem}};
  c.make_plan = plan_decode;
  c.check_tensors = check_decode_tensors;
  c.run = run_decode;
  out.push_back(std::move(c));
}

}  // namespace kvflash::cuda::decode
