#include "report.hpp"

#include <fmt/format.h>

#include <cmath>
#include <string_view>

namespace kvflash::parity {
namespace {

std::string num(double x, std::string_view spec = "{:.3g}") {
  return std::isnan(x) ? std::string("-") : fmt::format(fmt::runtime(spec), x);
}

// CSV field: empty for "no value", quoted when it holds a separator, a quote or a newline.
std::string csv_num(double x) {
  return std::isnan(x) ? std::string() : fmt::format("{:.6g}", x);
}
std::string csv_text(std::string_view s) {
  if (s.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(s);
  std::string q = "\"";
  for (char ch : s) {
    if (ch == '"') q += '"';
    q += ch;
  }
  q += '"';
  return q;
}

std::string indent(const std::string& message) {
  constexpr std::string_view kIndent = "      ";
  std::string s(kIndent);
  for (char ch : message) {
    s += ch;
    if (ch == '\n') s += kIndent;
  }
  return s;
}

}  // namespace

void print_result(std::FILE* f, Mode mode, const CaseResult& r) {
  const std::string kernel = r.kernel.empty() ? "-" : r.kernel;
  std::string line;
  switch (mode) {
    case Mode::test:
      line =
          fmt::format("{} {:<5} {:<22} nmse {:>9} {:>11} us  {}", to_string(r.outcome),
                      to_string(r.backend), kernel, num(r.nmse), num(r.time_us, "{:.1f}"), r.name);
      break;
    case Mode::perf:
      line = fmt::format("{} {:<5} {:<22} {:>11} us {:>8} GB/s  {}", to_string(r.outcome),
                         to_string(r.backend), kernel, num(r.time_us, "{:.1f}"),
                         num(r.gbps, "{:.2f}"), r.name);
      break;
    case Mode::support: {
      const char* what = r.outcome == Outcome::pass   ? "supported  "
                         : r.outcome == Outcome::skip ? "unsupported"
                                                      : "FAIL       ";
      line = fmt::format("{} {:<5} {:<22} {}", what, to_string(r.backend), kernel, r.name);
      break;
    }
  }
  fmt::print(f, "{}\n", line);
  if (!r.message.empty()) fmt::print(f, "{}\n", indent(r.message));
  std::fflush(f);
}

CsvWriter::CsvWriter(const std::string& path) : f_(std::fopen(path.c_str(), "w")) {
  if (!f_) return;
  fmt::print(
      f_,
      "case,backend,n_seqs,n_q_tokens,n_q_heads,n_kv_heads,head_dim_k,head_dim_v,k_type,"
      "v_type,kv_len,kv_lens,ragged,empty_last,causal,mask,window,softcap,sinks,alibi,scale,layout,"
      "case_nmse_bound,seed,status,kernel,n_splits,workspace_bytes,empty_rows,nmse,nmse_bound,"
      "baseline_nmse,max_abs_err,worst_row_nmse,lse_max_err,time_us,gbps,message\n");
}

CsvWriter::~CsvWriter() {
  if (f_) std::fclose(f_);
}

void CsvWriter::write(const CaseResult& r) {
  if (!f_) return;
  const ParityCase& c = r.c;
  std::string lens;
  for (int64_t len : kv_lens(c)) {
    if (!lens.empty()) lens += ';';
    lens += std::to_string(len);
  }
  fmt::print(f_, "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:g},{},{},{:g},{},{:g},{},",
             csv_text(r.name), to_string(r.backend), c.n_seqs, c.n_q_tokens, c.n_q_heads,
             c.n_kv_heads, c.head_dim.k, c.head_dim.v, to_string(c.k_type), to_string(c.v_type),
             c.kv_len, lens, int{c.ragged}, int{c.empty_last}, int{c.causal}, int{c.mask}, c.window,
             c.softcap, int{c.sinks}, int{c.alibi}, c.scale, to_string(c.layout), c.nmse_bound,
             r.seed);
  fmt::print(f_, "{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", to_string(r.outcome),
             csv_text(r.kernel), r.n_splits, r.workspace_bytes,
             r.empty_rows < 0 ? std::string() : std::to_string(r.empty_rows), csv_num(r.nmse),
             csv_num(r.nmse_bound), csv_num(r.baseline_nmse), csv_num(r.max_abs_err),
             csv_num(r.worst_row_nmse), csv_num(r.lse_max_err), csv_num(r.time_us), csv_num(r.gbps),
             csv_text(r.message));
  std::fflush(f_);
}

}  // namespace kvflash::parity
