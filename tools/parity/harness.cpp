#include "harness.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <optional>

#include "baseline.hpp"
#include "compare.hpp"
#include "device_buffers.hpp"
#include "guarded_buffer.hpp"
#include "inputs.hpp"
#include "kvflash/device.hpp"
#include "kvflash/reference.hpp"

namespace kvflash::parity {
namespace {

// Outputs are poisoned with this quiet NaN before every run, so an element the kernel never
// writes reads as NaN, and an untouched lse buffer is recognisable bit for bit.
constexpr uint32_t kPoisonBits = 0x7FC5A5A5u;
const float kPoison = std::bit_cast<float>(kPoisonBits);
// Workspace is filled with 0xFF (NaN as f32) so a kernel that reads workspace it never wrote,
// or assumes it zeroed, produces NaN.
constexpr uint8_t kWorkspaceFill = 0xFF;

// Rows of out and lse: (query row, head) pairs, packed for ragged queries.
int64_t out_rows(const CaseInputs& in) {
  return in.q_rows() * in.problem.n_q_heads;
}

double elapsed_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

SelectOptions select_options(const RunOptions& opt, std::optional<Backend> b) {
  SelectOptions s;
  s.backend = b;
  s.force = opt.force;
  s.exclude = opt.exclude;
  return s;
}

// The first line of a registry message (the rest lists every candidate's guard).
std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

// Why backend b's candidates reject a case: the lines of select_kernel's message about them (it
// lists every candidate as "\n  <name> (priority <n>): <guard>: <reason>", and names start with
// "<backend>."), e.g. a pair this build has no CUDA kernels for; else its first line.
std::string backend_reasons(const std::string& message, Backend b) {
  const std::string prefix = fmt::format("\n  {}.", to_string(b));
  std::string out;
  for (size_t at = message.find(prefix); at != std::string::npos;
       at = message.find(prefix, at + 1)) {
    const size_t from = at + 3, to = message.find('\n', from);  // to - from: all when npos
    out += (out.empty() ? "" : "; ") + message.substr(from, to - from);
  }
  return out.empty() ? first_line(message) : out;
}

struct Reference {
  std::string error;  // non-empty: the oracle itself failed, every backend fails with this
  std::vector<double> out;
  std::vector<float> lse;
  double baseline_nmse = 0.0;
};

Reference compute_reference(const ParityCase& c, const CaseInputs& in) {
  Reference ref;
  const AttentionProblem& p = in.problem;
  const int64_t rows = out_rows(in);
  const int32_t* off = in.offsets();
  const auto n_out = static_cast<size_t>(rows * p.head_dim.v);
  GuardedBuffer out(n_out * sizeof(float));
  GuardedBuffer lse(static_cast<size_t>(rows) * sizeof(float));
  out.fill_f32(kPoison);
  lse.fill_f32(kPoison);
  ref.out.assign(n_out, std::numeric_limits<double>::quiet_NaN());
  AttentionTensors t = in.tensors();
  t.out = out.as<float>();
  t.lse = lse.as<float>();
  if (Status st = reference_attention(p, t, ref.out.data()); !st) {
    ref.error = fmt::format("reference_attention failed: {}", st.message());
    return ref;
  }
  for (const GuardedBuffer* b : {&out, &lse})
    if (auto hit = b->check_guards()) ref.error = fmt::format("reference_attention: {}", *hit);
  const auto bad_out =
      std::find_if(ref.out.begin(), ref.out.end(), [](double x) { return !std::isfinite(x); });
  if (bad_out != ref.out.end())
    ref.error =
        fmt::format("reference_attention: out[{}] = {}",
                    row_label(p, off, (bad_out - ref.out.begin()) / p.head_dim.v), *bad_out);
  ref.lse.assign(lse.as<float>(), lse.as<float>() + rows);
  for (int64_t r = 0; r < rows && ref.error.empty(); ++r)
    if (const float x = ref.lse[static_cast<size_t>(r)]; std::isnan(x) || x == INFINITY)
      ref.error = fmt::format("reference_attention: lse[{}] = {}", row_label(p, off, r), x);
  if (!ref.error.empty()) return ref;

  // The float32 baseline: the margin of the error bound, and an independent check of the oracle.
  std::vector<float> base_out(n_out);
  std::vector<float> base_lse(static_cast<size_t>(rows));
  baseline_attention_f32(p, t, in.kv_lens, base_out.data(), base_lse.data());
  const Comparison bc = compare_output(p, off, base_out.data(), ref.out.data());
  ref.baseline_nmse = bc.nmse;
  if (bc.non_finite > 0 || bc.zero_rows_not_zero > 0 || !(bc.nmse <= c.nmse_bound))
    ref.error = fmt::format(
        "the float64 reference and the float32 baseline disagree (one of the two oracles is "
        "wrong): baseline NMSE {:.3g}, worst row {} ({:.3g}), {} non-finite, {} empty rows not "
        "zero",
        bc.nmse, bc.worst_row, bc.worst_row_nmse, bc.non_finite, bc.zero_rows_not_zero);
  return ref;
}

// Lazily built inputs and reference, shared by every backend of a case (and the inputs' device
// copy, shared by every CUDA kernel of it).
struct CaseData {
  const ParityCase& c;
  uint64_t seed;
  std::optional<CaseInputs> inputs;
  std::optional<Reference> reference;
  std::optional<Expected<DeviceInputs>> device_inputs;

  const CaseInputs& get_inputs() {
    if (!inputs) inputs = make_inputs(c, seed);
    return *inputs;
  }
  const Reference& get_reference() {
    if (!reference) reference = compute_reference(c, get_inputs());
    return *reference;
  }
  const Expected<DeviceInputs>& get_device_inputs() {
    if (!device_inputs) device_inputs.emplace(stage_inputs(get_inputs()));
    return *device_inputs;
  }
};

// Output buffers for one run: out and lse poisoned, workspace filled, all guarded.
struct RunBuffers {
  GuardedBuffer out, lse, workspace;
  RunBuffers(const CaseInputs& in, size_t workspace_bytes)
      : out(static_cast<size_t>(out_rows(in) * in.problem.head_dim.v) * sizeof(float)),
        lse(static_cast<size_t>(out_rows(in)) * sizeof(float)),
        workspace(workspace_bytes) {
    reset();
  }
  void reset() {
    out.fill_f32(kPoison);
    lse.fill_f32(kPoison);
    workspace.fill_bytes(kWorkspaceFill);
  }
  void add_guard_failures(std::vector<std::string>& failures) const {
    if (auto hit = out.check_guards()) failures.push_back("out: " + *hit);
    if (auto hit = lse.check_guards()) failures.push_back("lse: " + *hit);
    if (auto hit = workspace.check_guards()) failures.push_back("workspace: " + *hit);
  }
  bool lse_untouched() const {
    const auto* bits = lse.as<uint32_t>();
    return std::all_of(bits, bits + lse.size() / sizeof(float),
                       [](uint32_t b) { return b == kPoisonBits; });
  }
};

void inject_fault(Fault fault, RunBuffers& buf) {
  auto* out = buf.out.as<float>();
  const size_t n = buf.out.size() / sizeof(float);
  switch (fault) {
    case Fault::none:
      break;
    case Fault::nan:  // one element left unwritten
      out[n / 2] = kPoison;
      break;
    case Fault::overrun:
      buf.out.as<uint8_t>()[buf.out.size()] = 0;
      break;
    case Fault::underrun:
      buf.out.as<uint8_t>()[-1] = 0;
      break;
    case Fault::perturb:  // 1% relative everywhere: NMSE 1e-4
      for (size_t i = 0; i < n; ++i) out[i] *= 1.01f;
      break;
    case Fault::row: {  // the last row replaced by the first
      const size_t dv = n / (buf.lse.size() / sizeof(float));
      std::copy(out, out + dv, out + n - dv);
      break;
    }
    case Fault::lse:
      buf.lse.as<float>()[0] += 0.5f;
      break;
    case Fault::workspace:
      buf.workspace.as<uint8_t>()[buf.workspace.size()] = 0;
      break;
  }
}

void check_against_reference(const ParityCase& c, const CaseInputs& in, const Reference& ref,
                             const RunBuffers& buf, CaseResult& r,
                             std::vector<std::string>& failures, std::vector<std::string>& notes) {
  const AttentionProblem& p = in.problem;
  const int32_t* off = in.offsets();
  Comparison cmp = compare_output(p, off, buf.out.as<float>(), ref.out.data());
  r.nmse = cmp.nmse;
  r.baseline_nmse = ref.baseline_nmse;
  r.nmse_bound = c.nmse_bound + kBaselineFactor * ref.baseline_nmse;
  r.max_abs_err = cmp.max_abs_err;
  r.worst_row_nmse = cmp.worst_row_nmse;
  r.empty_rows = cmp.zero_rows;
  if (cmp.non_finite > 0)
    failures.push_back(
        fmt::format("{} non-finite outputs, first {}", cmp.non_finite, cmp.first_non_finite));
  if (cmp.zero_rows_not_zero > 0)
    failures.push_back(fmt::format("{} rows that see no key are not zero, first [{}]",
                                   cmp.zero_rows_not_zero, cmp.first_zero_row_not_zero));
  if (cmp.sum_ref2 == 0.0) {
    if (cmp.max_abs_err > kZeroReferenceMaxAbs)
      failures.push_back(fmt::format("reference is all zero, max abs error {:.3g} > {:g}",
                                     cmp.max_abs_err, kZeroReferenceMaxAbs));
  } else if (!(cmp.nmse <= r.nmse_bound)) {
    failures.push_back(fmt::format("NMSE {:.3g} > bound {:.3g} (worst row [{}] {:.3g})", cmp.nmse,
                                   r.nmse_bound, cmp.worst_row, cmp.worst_row_nmse));
  }
  if (cmp.worst_row_nmse > kRowBoundFactor * r.nmse_bound)
    failures.push_back(fmt::format("row [{}] NMSE {:.3g} > {:g} x bound", cmp.worst_row,
                                   cmp.worst_row_nmse, kRowBoundFactor));

  if (buf.lse_untouched()) {
    notes.push_back("lse requested but not written");
    return;
  }
  // An NMSE bound e allows relative errors of about sqrt(e) in the weights, which is an absolute
  // error of sqrt(e) in their log; 1e-4 keeps a floor for very tight bounds.
  const double lse_tol = std::max(1e-4, std::sqrt(c.nmse_bound));
  compare_lse(p, off, buf.lse.as<float>(), ref.lse.data(), lse_tol, cmp);
  r.lse_max_err = cmp.lse_max_err;
  if (cmp.lse_bad > 0)
    failures.push_back(fmt::format("{} bad lse values, first {}", cmp.lse_bad, cmp.first_lse_bad));
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& part : parts) {
    if (!s.empty()) s += "; ";
    s += part;
  }
  return s;
}

// The calls of one case on one backend: `warmup` untimed, then `reps` timed (µs each).
struct Calls {
  int32_t warmup = 0;
  int32_t reps = 1;
  bool want_lse = true;
};

// Host kernels: the tensors point at the host inputs and at `buf`. Returns "" or the error.
std::string execute_host(const Plan& pl, const CaseInputs& in, const Calls& calls, RunBuffers& buf,
                         std::vector<double>& times) {
  AttentionTensors t = in.tensors();
  t.out = buf.out.as<float>();
  t.lse = calls.want_lse ? buf.lse.as<float>() : nullptr;
  if (Status st = validate(in.problem, t); !st)
    return "the harness built tensors that validate() rejects: " + st.message();
  for (int32_t i = 0; i < calls.warmup + calls.reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = run(pl, t, buf.workspace.data());
    const double us = elapsed_us(t0);
    if (!st) return "run() failed: " + st.message();
    if (i >= calls.warmup) times.push_back(us);
  }
  return {};
}

// Device kernels: the inputs staged in device memory, out / lse / workspace mirrored from `buf`
// (guards filled with the sentinel on the device, payloads poisoned like the host ones), every
// call on one stream, timed with events; then everything is copied back over `buf`, whose
// contents the host checks then judge exactly as for a host kernel. Returns "" or the error.
std::string execute_cuda(const Plan& pl, CaseData& data, const Calls& calls, RunBuffers& buf,
                         std::vector<double>& times) {
  const Expected<DeviceInputs>& in = data.get_device_inputs();
  if (!in) return "staging the inputs in device memory failed: " + in.error().message;
  Expected<gpu::Stream> stream_or = gpu::Stream::create();
  if (!stream_or) return "gpu::Stream::create: " + stream_or.error().message;
  const gpu::Stream& stream = *stream_or;
  void* const s = stream.handle();
  // buf's payloads are poisoned (RunBuffers::reset): the mirrors start with the same bytes.
  Expected<DeviceGuardedBuffer> out = DeviceGuardedBuffer::mirror(buf.out, s);
  if (!out) return "device out buffer: " + out.error().message;
  Expected<DeviceGuardedBuffer> lse = DeviceGuardedBuffer::mirror(buf.lse, s);
  if (!lse) return "device lse buffer: " + lse.error().message;
  Expected<DeviceGuardedBuffer> ws = DeviceGuardedBuffer::mirror(buf.workspace, s);
  if (!ws) return "device workspace: " + ws.error().message;

  AttentionTensors t = in->tensors;
  t.out = static_cast<float*>(out->data());
  t.lse = calls.want_lse ? static_cast<float*>(lse->data()) : nullptr;
  if (Status st = validate(data.get_inputs().problem, t); !st)
    return "the harness built tensors that validate() rejects: " + st.message();
  void* const workspace = ws->data();
  for (int32_t i = 0; i < calls.warmup + calls.reps; ++i) {
    auto enqueue = [&] { return run(pl, t, workspace, s); };
    if (i < calls.warmup) {
      if (Status st = enqueue(); !st) return "run() failed: " + st.message();
      continue;
    }
    const Expected<double> ms = gpu::time_ms(s, enqueue);
    if (!ms) return "run() failed: " + ms.error().message;
    times.push_back(*ms * 1e3);
  }
  if (Status st = stream.synchronize(); !st) return "after run(): " + st.message();
  if (Status st = gpu::last_error(); !st) return "after run(): " + st.message();
  for (auto [dev, host] :
       {std::pair{&*out, &buf.out}, std::pair{&*lse, &buf.lse}, std::pair{&*ws, &buf.workspace}})
    if (Status st = dev->download(*host, s); !st) return "copying back: " + st.message();
  if (Status st = stream.synchronize(); !st) return "copying back: " + st.message();
  return {};
}

// Plans the case and runs it on one backend (test or perf mode).
void run_backend(CaseData& data, const Plan& pl, const RunOptions& opt, CaseResult& r) {
  if (r.backend == Backend::cuda && cuda_device_count() == 0) {
    r.outcome = Outcome::skip;
    r.message = "no CUDA device is visible";
    return;
  }
  const CaseInputs& in = data.get_inputs();
  const Reference* ref = opt.mode == Mode::test ? &data.get_reference() : nullptr;
  if (ref && !ref->error.empty()) {
    r.message = ref->error;
    return;
  }
  RunBuffers buf(in, pl.workspace_bytes);
  Calls calls;
  calls.warmup = opt.mode == Mode::perf ? opt.warmup : 0;
  calls.reps = opt.mode == Mode::perf ? std::max(1, opt.reps) : 1;
  // Test mode asks for lse in every case; perf mode measures the plain call engines make.
  calls.want_lse = opt.mode == Mode::test;
  std::vector<double> times;
  const std::string error = r.backend == Backend::cuda ? execute_cuda(pl, data, calls, buf, times)
                                                       : execute_host(pl, in, calls, buf, times);
  if (!error.empty()) {
    r.message = error;
    return;
  }
  std::sort(times.begin(), times.end());
  r.time_us = times[times.size() / 2];

  std::vector<std::string> failures;
  std::vector<std::string> notes;
  if (opt.mode == Mode::test) {
    inject_fault(opt.inject, buf);
    buf.add_guard_failures(failures);
    check_against_reference(data.c, in, *ref, buf, r, failures, notes);
  } else {
    buf.add_guard_failures(failures);
    // No reference in perf mode, but a NaN or inf still fails the case.
    const float* o = buf.out.as<float>();
    const auto n = static_cast<int64_t>(buf.out.size() / sizeof(float));
    const int64_t bad = std::count_if(o, o + n, [](float x) { return !std::isfinite(x); });
    if (bad > 0) failures.push_back(fmt::format("{} non-finite outputs", bad));
    r.gbps = static_cast<double>(kv_bytes_visible(data.c)) / (r.time_us * 1e-6) / 1e9;
  }
  r.outcome = failures.empty() ? Outcome::pass : Outcome::fail;
  r.message = join(failures.empty() ? notes : failures);
}

void run_one(CaseData& data, const RunOptions& opt, CaseResult& r) {
  const AttentionProblem p = to_problem(data.c);
  const Expected<const KernelCandidate*> sel = select_kernel(p, select_options(opt, r.backend));
  if (!sel) {
    if (sel.error().code != ErrorCode::unsupported) {
      r.message =
          fmt::format("select_kernel: {}: {}", to_string(sel.error().code), sel.error().message);
      return;
    }
    // Unsupported here: a skip when another backend serves the case, a coverage gap otherwise
    // (every backend together must cover the supported space, problem.hpp; paged caches
    // included: the CPU kernels read them too).
    const Expected<const KernelCandidate*> any = select_kernel(p, select_options(opt, {}));
    r.outcome = any ? Outcome::skip : Outcome::fail;
    r.message = any ? fmt::format("unsupported on {} (served by {}): {}", to_string(r.backend),
                                  (*any)->name, backend_reasons(sel.error().message, r.backend))
                    : "no backend serves this case: " + sel.error().message;
    return;
  }
  r.kernel = (*sel)->name;

  PlanOptions popt;
  popt.select = select_options(opt, r.backend);
  popt.n_threads = opt.n_threads;
  const Expected<Plan> pl = plan(p, popt);
  if (!pl) {
    r.message = "select_kernel accepts the case but plan() fails: " + pl.error().message;
    return;
  }
  if (pl->kernel != *sel) {
    r.message = fmt::format("select_kernel chose {} but plan() chose {}", r.kernel,
                            pl->kernel ? pl->kernel->name : "nothing");
    return;
  }
  r.n_splits = pl->n_splits;
  r.workspace_bytes = pl->workspace_bytes;
  if (opt.mode == Mode::support) {
    r.outcome = Outcome::pass;
    return;
  }
  run_backend(data, *pl, opt, r);
}

}  // namespace

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::pass:
      return "PASS";
    case Outcome::fail:
      return "FAIL";
    case Outcome::skip:
      return "SKIP";
  }
  return "?";
}

std::vector<CaseResult> run_case(const ParityCase& c, const RunOptions& opt) {
  const std::string name = case_name(c);
  CaseData data{c, case_seed(opt.seed, name), std::nullopt, std::nullopt};
  std::vector<CaseResult> results;
  auto run_with = [&](Backend b, const RunOptions& o) {
    CaseResult r;
    r.c = c;
    r.name = name;
    r.backend = b;
    r.seed = data.seed;
    try {
      run_one(data, o, r);
    } catch (const std::exception& e) {
      r.outcome = Outcome::fail;
      r.message = fmt::format("exception: {}", e.what());
    }
    results.push_back(std::move(r));
  };
  for (Backend b : opt.backends) {
    std::vector<std::string> accepting;
    if (opt.all_kernels && opt.force.empty())
      for (const KernelCandidate& k : kernel_candidates()) {
        if (k.backend != b || k.opt_in_only) continue;
        SelectOptions s = select_options(opt, b);
        s.force = k.name;
        if (select_kernel(to_problem(c), s)) accepting.push_back(k.name);
      }
    // No candidate accepting (or one kernel per backend asked): the selector's own choice, which
    // also classifies an unsupported case as a skip or a coverage gap.
    if (accepting.empty()) run_with(b, opt);
    for (const std::string& k : accepting) {
      RunOptions forced = opt;
      forced.force = k;
      run_with(b, forced);
    }
  }
  return results;
}

}  // namespace kvflash::parity
