#include "case.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

namespace kvflash::parity {

std::string_view to_string(KvLayout l) {
  switch (l) {
    case KvLayout::token_major:
      return "token_major";
    case KvLayout::head_major:
      return "hmajor";
    case KvLayout::padded:
      return "padded";
    case KvLayout::seq_inner:
      return "seqinner";
  }
  return "invalid";
}

std::string case_name(const ParityCase& c) {
  std::string s;
  if (c.n_seqs > 1) s += fmt::format("s{}_", c.n_seqs);
  s += fmt::format("q{}_h{}x{}_d{}", c.n_q_tokens, c.n_q_heads, c.n_kv_heads, c.head_dim.k);
  if (c.head_dim.v != c.head_dim.k) s += fmt::format("x{}", c.head_dim.v);
  s += fmt::format("_k-{}_v-{}_kv{}", to_string(c.k_type), to_string(c.v_type), c.kv_len);
  if (c.ragged) s += "_ragged";
  if (c.empty_last) s += "_emptylast";
  if (c.causal) s += "_causal";
  if (c.mask) s += "_mask";
  if (c.window > 0) s += fmt::format("_win{}", c.window);
  if (c.softcap > 0.0f) s += fmt::format("_cap{:g}", c.softcap);
  if (c.sinks) s += "_sinks";
  if (c.alibi) s += "_alibi";
  if (c.scale != 0.0f) s += fmt::format("_scale{:g}", c.scale);
  if (c.k_scale != 1.0f || c.v_scale != 1.0f)
    s += fmt::format("_kvscale{:g}x{:g}", c.k_scale, c.v_scale);
  if (c.layout != KvLayout::token_major) s += fmt::format("_{}", to_string(c.layout));
  if (c.page_size > 0) s += fmt::format("_paged{}", c.page_size);
  if (!c.q_lens.empty())
    s += fmt::format("_qlens-{}_kvlens-{}", fmt::join(c.q_lens, "-"), fmt::join(c.q_kv_lens, "-"));
  if (c.nmse_bound != ParityCase::kDefaultNmseBound) s += fmt::format("_nmse{:g}", c.nmse_bound);
  return s;
}

AttentionProblem to_problem(const ParityCase& c) {
  AttentionProblem p;
  p.n_seqs = c.n_seqs;
  p.n_q_tokens = c.n_q_tokens;
  p.n_q_heads = c.n_q_heads;
  p.n_kv_heads = c.n_kv_heads;
  p.head_dim = c.head_dim;
  p.k_type = c.k_type;
  p.v_type = c.v_type;
  p.kv_capacity = c.kv_len;
  p.scale = c.scale;
  p.k_scale = c.k_scale;
  p.v_scale = c.v_scale;
  p.causal = c.causal;
  p.has_mask = c.mask;
  p.window = c.window;
  p.softcap = c.softcap;
  p.has_sinks = c.sinks;
  p.has_alibi = c.alibi;
  p.page_size = c.page_size;
  p.ragged_q = !c.q_lens.empty();
  return p;
}

ParityCase ragged_q_case(ParityCase base, std::vector<int32_t> q_lens,
                         std::vector<int64_t> kv_lens) {
  base.n_seqs = static_cast<int32_t>(q_lens.size());
  base.n_q_tokens = std::max(1, *std::max_element(q_lens.begin(), q_lens.end()));
  base.kv_len = std::max<int64_t>(1, *std::max_element(kv_lens.begin(), kv_lens.end()));
  base.q_lens = std::move(q_lens);
  base.q_kv_lens = std::move(kv_lens);
  return base;
}

std::vector<int32_t> q_offsets(const ParityCase& c) {
  if (c.q_lens.empty()) return {};
  std::vector<int32_t> offsets(c.q_lens.size() + 1, 0);
  std::partial_sum(c.q_lens.begin(), c.q_lens.end(), offsets.begin() + 1);
  return offsets;
}

std::vector<int64_t> kv_lens(const ParityCase& c) {
  if (!c.q_kv_lens.empty()) return c.q_kv_lens;
  std::vector<int64_t> lens(static_cast<size_t>(c.n_seqs), c.kv_len);
  if (c.empty_last && c.n_seqs >= 2) lens.back() = 0;
  if (!c.ragged || c.n_seqs < 2) return lens;
  const int64_t n = c.n_seqs;
  // Middle sequences: a fraction of kv_len minus a few tokens, so lengths land off block
  // boundaries and differ from one another.
  for (int64_t s = 1; s + 1 < n; ++s)
    lens[static_cast<size_t>(s)] = std::max<int64_t>(1, c.kv_len * (n - s) / n - 3 * s);
  lens.back() = c.empty_last ? 0 : std::min<int64_t>(c.kv_len, std::max(1, c.n_q_tokens / 2));
  return lens;
}

int64_t kv_bytes_visible(const ParityCase& c) {
  const auto row_bytes =
      static_cast<int64_t>(row_size(c.k_type, c.head_dim.k) + row_size(c.v_type, c.head_dim.v));
  int64_t tokens = 0;
  const std::vector<int64_t> lens = kv_lens(c);
  const std::vector<int32_t> offsets = q_offsets(c);
  const int32_t* off = offsets.empty() ? nullptr : offsets.data();
  for (int64_t s = 0; s < c.n_seqs; ++s) {
    const int64_t len = lens[static_cast<size_t>(s)];
    const int32_t nq = q_len(off, c.n_q_tokens, s);
    if (nq == 0) continue;
    // Queries sit at positions len - nq .. len - 1 (problem.hpp). The last one sees up
    // to len - 1 whether or not the mask is causal; the window cuts keys below the first query.
    const int64_t first_q = len - nq;
    const int64_t lo = c.window > 0 ? std::max<int64_t>(0, first_q - c.window + 1) : 0;
    tokens += std::max<int64_t>(0, len - lo);
  }
  return tokens * c.n_kv_heads * row_bytes;
}

}  // namespace kvflash::parity
