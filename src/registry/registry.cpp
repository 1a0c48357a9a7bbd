// The registry: the candidate list, the one selection function, plan/run, and the environment
// controls (KVFLASH_LOG_DISPATCH, KVFLASH_FORCE_KERNEL, KVFLASH_EXCLUDE_KERNELS).
#include "kvflash/registry.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <thread>

#include "core/backend.hpp"

namespace kvflash {

const char* to_string(Backend b) {
  switch (b) {
    case Backend::cpu:
      return "cpu";
    case Backend::cuda:
      return "cuda";
  }
  return "unknown";
}

std::optional<Backend> backend_from_name(std::string_view name) {
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  return std::nullopt;
}

const std::vector<KernelCandidate>& kernel_candidates() {
  static const std::vector<KernelCandidate> list = [] {
    std::vector<KernelCandidate> v;
    for (const BackendEntry* b : built_backends()) b->register_kernels(v);
    // Highest priority first; ties keep registration order.
    std::stable_sort(v.begin(), v.end(), [](const KernelCandidate& a, const KernelCandidate& b) {
      return a.priority > b.priority;
    });
    return v;
  }();
  return list;
}

namespace {

std::string env_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

bool log_dispatch() {
  const std::string v = env_string("KVFLASH_LOG_DISPATCH");
  return !v.empty() && v != "0";
}

// The first guard that rejects the problem, as "guard: reason", or nullopt.
std::optional<std::string> first_rejection(const KernelCandidate& c, const AttentionProblem& p) {
  for (const Guard& g : c.guards)
    if (auto why = g.reject(p)) return fmt::format("{}: {}", g.name, *why);
  return std::nullopt;
}

// The host threads a kernel of backend `b` can run on: 1 for a backend that runs none.
int32_t host_threads(Backend b) {
  for (const BackendEntry* e : built_backends())
    if (e->id == b && e->host_threads != nullptr) return e->host_threads();
  return 1;
}

std::string candidate_names() {
  std::string s;
  for (const KernelCandidate& c : kernel_candidates())
    s += fmt::format("{}{}", s.empty() ? "" : ", ", c.name);
  return s;
}

Expected<const KernelCandidate*> select_impl(const AttentionProblem& p, const SelectOptions& opt) {
  if (Status s = validate(p); !s) return s.error();

  std::string force = opt.force;
  std::vector<std::string> exclude = opt.exclude;
  if (opt.read_environment) {
    if (force.empty()) force = env_string("KVFLASH_FORCE_KERNEL");
    for (std::string& e : split_list(env_string("KVFLASH_EXCLUDE_KERNELS"))) exclude.push_back(e);
  }
  auto excluded = [&](const std::string& name) {
    return std::find(exclude.begin(), exclude.end(), name) != exclude.end();
  };
  const std::vector<KernelCandidate>& all = kernel_candidates();

  if (!force.empty()) {
    auto it = std::find_if(all.begin(), all.end(),
                           [&](const KernelCandidate& c) { return c.name == force; });
    if (it == all.end())
      return unsupported(fmt::format("forced kernel '{}' does not exist; candidates: {}", force,
                                     candidate_names()));
    if (opt.backend && it->backend != *opt.backend)
      return unsupported(fmt::format("forced kernel '{}' is a {} kernel, but backend {} was asked",
                                     force, to_string(it->backend), to_string(*opt.backend)));
    if (excluded(force))
      return unsupported(fmt::format("forced kernel '{}' is also excluded", force));
    if (auto why = first_rejection(*it, p))
      return unsupported(
          fmt::format("forced kernel '{}' rejects {}: {}", force, describe(p), *why));
    return &*it;
  }

  std::string reasons;
  for (const KernelCandidate& c : all) {
    std::string why;
    if (opt.backend && c.backend != *opt.backend)
      why =
          fmt::format("backend is {}, {} was asked", to_string(c.backend), to_string(*opt.backend));
    else if (excluded(c.name))
      why = "excluded by name";
    else if (c.opt_in_only)
      why = "opt-in only (force it by name)";
    else if (auto r = first_rejection(c, p))
      why = *r;
    else
      return &c;
    reasons += fmt::format("\n  {} (priority {}): {}", c.name, c.priority, why);
  }
  std::string backend_note;
  if (opt.backend && std::none_of(all.begin(), all.end(), [&](const KernelCandidate& c) {
        return c.backend == *opt.backend;
      }))
    backend_note = fmt::format(" (this build has no {} kernels)", to_string(*opt.backend));
  return unsupported(
      fmt::format("no kernel supports {}{}; candidates:{}", describe(p), backend_note, reasons));
}

}  // namespace

Expected<const KernelCandidate*> select_kernel(const AttentionProblem& p,
                                               const SelectOptions& opt) {
  Expected<const KernelCandidate*> r = select_impl(p, opt);
  if (log_dispatch()) {
    if (r)
      std::fprintf(stderr, "kvflash dispatch: %s -> %s\n", describe(p).c_str(), (*r)->name.c_str());
    else
      std::fprintf(stderr, "kvflash dispatch: %s -> error: %s\n", describe(p).c_str(),
                   r.error().message.c_str());
  }
  return r;
}

Expected<Plan> plan(const AttentionProblem& p, const PlanOptions& opt) {
  Expected<const KernelCandidate*> k = select_kernel(p, opt.select);
  if (!k) return k.error();
  Plan pl;
  pl.problem = p;
  pl.kernel = *k;
  if (opt.n_threads < 0)
    return invalid_argument(
        fmt::format("n_threads={} is negative (allowed: 0 for every thread the parallel-for "
                    "offers, or a count)",
                    opt.n_threads));
  if (opt.spin_us < 0)
    return invalid_argument(fmt::format(
        "spin_us={} is negative (allowed: 0 for no spin, or microseconds)", opt.spin_us));
  if (opt.parallel_for && opt.parallel_for.max_threads < 1)
    return invalid_argument(fmt::format(
        "parallel_for.max_threads={} with parallel_for.run set (allowed: the thread slots it "
        "offers, >= 1)",
        opt.parallel_for.max_threads));
  const int32_t hw = opt.parallel_for && pl.kernel->backend == Backend::cpu
                         ? opt.parallel_for.max_threads
                         : host_threads(pl.kernel->backend);
  pl.n_threads = opt.n_threads > 0 ? std::min(opt.n_threads, hw) : hw;
  pl.parallel_for = opt.parallel_for;
  pl.spin_us = opt.spin_us;
  pl.kernel->make_plan(pl);
  return pl;
}

Status validate(const Plan& plan, const AttentionTensors& t) {
  if (plan.kernel == nullptr)
    return invalid_argument("plan.kernel=NULL is missing (allowed: a plan made by plan())");
  if (Status s = validate(plan.problem, t); !s) return s;
  return plan.kernel->check_tensors ? plan.kernel->check_tensors(plan, t) : Status{};
}

Status run(const Plan& plan, const AttentionTensors& t, void* workspace, void* stream) {
  if (Status s = validate(plan, t); !s) return s;
  return plan.kernel->run(plan, t, workspace, stream);
}

Status attention(const AttentionProblem& p, const AttentionTensors& t, const PlanOptions& opt) {
  // Host buffers: only CPU kernels read them, so an unspecified backend means the CPU one (a
  // machine with a GPU must not route host pointers to a device kernel).
  PlanOptions host = opt;
  if (!host.select.backend) host.select.backend = Backend::cpu;
  Expected<Plan> pl = plan(p, host);
  if (!pl) return pl.error();
  if (pl->kernel->backend != Backend::cpu)
    return unsupported(fmt::format(
        "attention() runs host buffers; kernel '{}' is a {} kernel: use plan()/run() with device "
        "buffers",
        pl->kernel->name, to_string(pl->kernel->backend)));
  std::unique_ptr<uint8_t[]> ws;
  if (pl->workspace_bytes > 0) {
    ws.reset(new (std::nothrow) uint8_t[pl->workspace_bytes]);
    if (!ws)
      return Error{ErrorCode::out_of_memory,
                   fmt::format("cannot allocate a {} byte host workspace", pl->workspace_bytes)};
  }
  return run(*pl, t, ws.get());
}

}  // namespace kvflash
