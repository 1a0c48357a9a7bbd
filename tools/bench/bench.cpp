#include "bench/bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "bench/machine.hpp"
#include "bench/metrics.hpp"
#include "bench/options.hpp"
#include "bench/report.hpp"
#include "common/progress.hpp"
#include "kvflash/device.hpp"

#ifndef KVFLASH_VERSION
#define KVFLASH_VERSION "dev"
#endif

namespace kvflash::bench {
namespace {

constexpr int64_t kMaxInputBytes = int64_t{8} << 30;  // one point's inputs, rotation included
constexpr int64_t kMinBandwidthBytes = int64_t{256} << 20;

std::string mib(double bytes) {
  return fmt::format("{:.0f} MiB", bytes / double(1 << 20));
}

bool has_kernels(Backend b) {
  return std::any_of(kernel_candidates().begin(), kernel_candidates().end(),
                     [&](const KernelCandidate& c) { return c.backend == b; });
}

// Said before anything runs: asking for CUDA where no CUDA kernel exists is an error, never a
// silent fallback to the CPU.
std::string no_cuda_message() {
#if defined(KVFLASH_BENCH_CUDA_BUILT)
  const char* why = "the CUDA backend is built but registers no kernel yet";
#else
  const char* why =
      "this build has no CUDA backend (configure with -DKVFLASH_CUDA=ON on a machine with nvcc)";
#endif
  return fmt::format(
      "kvflash-bench: --backend cuda: no CUDA kernel is available: {}. Use --backend cpu or "
      "auto.\n",
      why);
}

// The machine, probed once per run: cache, memory, and the read bandwidth rows are compared to.
struct Machine {
  std::string cpu;
  int hw_threads = 1;
  int64_t llc = 0;
  int64_t budget = 0;  // bytes one point's inputs may take
  HugeBuffer scratch;  // > LLC: bandwidth measurement, then cache eviction before each point
  ReadBandwidth cpu_bw;
  bool cpu_bw_given = false;
  std::optional<double> gpu_bw;
};

Machine probe(const BenchOptions& o) {
  Machine m;
  m.cpu = cpu_name();
  m.hw_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  m.llc = o.llc_bytes > 0 ? o.llc_bytes : last_level_cache_bytes();
  const int64_t avail = mem_available_bytes().value_or(kMaxInputBytes);
  // Reading twice the LLC evicts it; measuring bandwidth wants at least 256 MiB to amortize the
  // thread start. Never more than a quarter of the free memory.
  int64_t scratch = 2 * m.llc;
  if (o.mem_bw_gbps <= 0) scratch = std::max(scratch, kMinBandwidthBytes);
  scratch = std::max<int64_t>(std::min(scratch, avail / 4), 1 << 20);
  m.scratch = HugeBuffer(static_cast<size_t>(scratch));
  if (m.scratch) std::memset(m.scratch.data(), 1, m.scratch.size());  // pages exist before timing
  m.budget = std::max<int64_t>(0, std::min(kMaxInputBytes, avail * 7 / 10 - scratch));
  if (o.mem_bw_gbps > 0) {
    m.cpu_bw = {o.mem_bw_gbps, 0, 0, 0};
    m.cpu_bw_given = true;
  } else if (m.scratch) {
    m.cpu_bw = measure_cpu_read_bandwidth(m.scratch, m.hw_threads);
  }
  m.gpu_bw = measure_gpu_read_bandwidth();
  return m;
}

std::string header(const BenchOptions& o, const Machine& m) {
  std::string h = fmt::format("kvflash-bench {} · {} · {} hardware threads · seed {}\n",
                              KVFLASH_VERSION, m.cpu, m.hw_threads, o.seed);
  const std::string cpu_bw =
      m.cpu_bw_given ? fmt::format("CPU {:.1f} GB/s (given with --mem-bw)", m.cpu_bw.gbps)
      : m.cpu_bw.gbps > 0
          ? fmt::format("CPU {:.1f} GB/s ({} threads, {}, best of {})", m.cpu_bw.gbps,
                        m.cpu_bw.threads, mib(double(m.cpu_bw.bytes)), m.cpu_bw.passes)
          : std::string("CPU n/a (no memory for the measurement)");
  const std::string gpu_bw = m.gpu_bw
                                 ? fmt::format("GPU {:.0f} GB/s", *m.gpu_bw)
                                 : "GPU n/a (no CUDA device, or the CUDA backend is not built)";
  h += fmt::format("memory read bandwidth: {} · {}\n", cpu_bw, gpu_bw);
  h += fmt::format(
      "inputs rotated past the {} last-level cache; {} warm-up + {} timed calls per row, median "
      "(min-max)\n",
      mib(double(m.llc)), o.warmup, o.reps);
  return h;
}

}  // namespace

int run_bench(int argc, char** argv, std::ostream& out, std::ostream& err) {
  const ParseResult parsed = parse_options(argc, argv, out, err);
  if (!parsed.options) return parsed.exit_code;
  const BenchOptions& o = *parsed.options;
  if (o.backend == BackendChoice::cuda && !has_kernels(Backend::cuda)) {
    err << no_cuda_message();
    return kExitFailure;
  }
  if (o.backend == BackendChoice::cuda && cuda_device_count() == 0) {
    err << "kvflash-bench: --backend cuda: no CUDA device is visible. Use --backend cpu or auto.\n";
    return kExitFailure;
  }

  Machine m = probe(o);
  std::ostream& info = o.format == tools::OutputFormat::md ? out : err;
  info << header(o, m) << (o.format == tools::OutputFormat::md ? "\n" : "") << std::flush;

  RunConfig cfg;
  if (o.backend == BackendChoice::cpu) cfg.backend = Backend::cpu;
  if (o.backend == BackendChoice::cuda) cfg.backend = Backend::cuda;
  cfg.reps = o.reps;
  cfg.warmup = o.warmup;
  cfg.seed = o.seed;
  cfg.llc_bytes = m.llc;
  cfg.memory_budget = m.budget;
  cfg.evict = m.scratch ? &m.scratch : nullptr;
  cfg.evict_threads = m.hw_threads;

  const std::vector<int32_t> threads = o.threads.empty() ? std::vector<int32_t>{0} : o.threads;
  // A ragged batch is one point of its own: the -n / -d / -b sweep collapses to it.
  AttentionProblem ragged_shape;
  if (!o.ragged.empty()) apply_ragged(ragged_shape, o.ragged);
  const std::vector<int32_t> batches =
      o.ragged.empty() ? o.batch : std::vector{ragged_shape.n_seqs};
  const std::vector<int32_t> n_qs = o.ragged.empty() ? o.n_q : std::vector{ragged_shape.n_q_tokens};
  const std::vector<int64_t> depths =
      o.ragged.empty() ? o.depths : std::vector{ragged_shape.kv_capacity};
  const int64_t total =
      static_cast<int64_t>(o.heads.size() * o.head_dims.size() * batches.size() * n_qs.size() *
                           threads.size() * o.page_sizes.size() * o.pairs.size() * depths.size());
  tools::Progress progress(total, o.progress);
  std::vector<Row> rows;
  std::vector<std::string> failures;
  std::set<std::pair<int32_t, int64_t>> skipped;
  // Depth innermost: a K/V pair's points are consecutive, as its line in the plot.
  for (auto [qh, kvh] : o.heads)
    for (HeadDims hd : o.head_dims)
      for (int32_t b : batches)
        for (int32_t nq : n_qs)
          for (int32_t t : threads)
            for (int32_t ps : o.page_sizes)
              for (KvPair kv : o.pairs)
                for (int64_t d : depths) {
                  AttentionProblem p;
                  p.page_size = ps;
                  p.n_seqs = b;
                  p.n_q_tokens = nq;
                  p.n_q_heads = qh;
                  p.n_kv_heads = kvh;
                  p.head_dim = hd;
                  p.k_type = kv.k;
                  p.v_type = kv.v;
                  p.kv_capacity = d;
                  if (!o.ragged.empty()) apply_ragged(p, o.ragged);
                  const std::string label =
                      fmt::format("{}/{} {} D {} depth {} {}", to_string(kv.k), to_string(kv.v),
                                  heads_name(p), dims_name(p), d, test_name(p, o.ragged));
                  if (nq > d) {  // the queries are the last n_q of the depth's tokens
                    skipped.insert({nq, d});
                    progress.step(label);
                    continue;
                  }
                  cfg.threads = t;
                  Expected<Timing> tm = time_point(p, cfg, o.ragged);
                  if (!tm) {
                    failures.push_back(fmt::format("{}: {}", describe(p), tm.error().message));
                  } else {
                    const double bw =
                        tm->backend == Backend::cpu ? m.cpu_bw.gbps : m.gpu_bw.value_or(0.0);
                    rows.push_back(make_row(p, o.ragged, std::move(*tm), bw));
                  }
                  progress.step(label);
                }
  progress.finish();

  for (auto [nq, d] : skipped)
    err << fmt::format(
        "kvflash-bench: skipped depth {} with -n {}: the {} query tokens are the "
        "last of the depth's tokens, so the depth must be at least {}\n",
        d, nq, nq, nq);
  if (!rows.empty()) {
    if (o.format == tools::OutputFormat::md) {
      out << people_table(rows, !o.threads.empty()).markdown();
      out << "\nKV GB/s = KV bytes read / median time; % mem BW = that against the read bandwidth "
             "above; TFLOP/s counts the visible (query, key) pairs.\n";
    } else {
      out << machine_table(rows, m.cpu, o.seed).render(o.format);
    }
    out << std::flush;
  }
  if (!o.plot_path.empty() && !rows.empty()) {
    if (Status s = write_plot(o.plot_path, make_charts(rows)); !s) {
      err << "kvflash-bench: " << s.message() << "\n";
      return kExitFailure;
    }
    err << "kvflash-bench: plot written to " << o.plot_path << "\n";
  }
  if (!failures.empty()) {
    err << fmt::format("kvflash-bench: {} of {} rows failed:\n", failures.size(),
                       failures.size() + rows.size());
    for (const std::string& f : failures) err << "  " << f << "\n";
    return kExitFailure;
  }
  if (rows.empty()) {
    err << "kvflash-bench: nothing ran: every depth was smaller than -n\n";
    return kExitFailure;
  }
  return 0;
}

}  // namespace kvflash::bench
