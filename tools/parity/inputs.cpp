#include "inputs.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include "kvflash/formats.hpp"

namespace kvflash::parity {
namespace {

// Byte pattern of the rows no query may read (tokens past a sequence's length, layout padding):
// 0xFF.. is a NaN in f32, f16 and bf16, and a NaN scale or norm in q8_0, q4_0 and turbo blocks.
constexpr uint8_t kUnusedByte = 0xFF;

// Share of mask entries set to -inf, and the spread of the finite ones (logit units).
constexpr float kMaskHiddenShare = 0.15f;
constexpr float kMaskSpread = 0.5f;
// Extra floats at the end of every mask row, NaN, so mask_stride > kv_capacity is exercised.
constexpr int64_t kMaskRowPadding = 16;

// Independent streams per tensor, so adding a tensor never shifts the others' values.
enum Stream : uint64_t { kQ = 1, kK, kV, kMask, kSinks, kPages };

// Paged caches: spare pages in the pool (never in the table, kUnusedByte) per used page.
constexpr int64_t kSparePagesPer = 4;

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char ch : s) h = (h ^ static_cast<uint8_t>(ch)) * 0x100000001b3ull;
  return h;
}

struct Strides {
  int64_t token, head, seq;
  size_t bytes;
};

// The strides of each layout (case.hpp). Padding amounts are multiples of 16 bytes, so rows keep
// the alignment their element type has in the contiguous layout.
Strides layout_strides(KvLayout layout, KvType t, int32_t dim, const AttentionProblem& p) {
  const auto row = static_cast<int64_t>(row_size(t, dim));
  const int64_t heads = p.n_kv_heads;
  const int64_t seqs = p.n_seqs;
  const int64_t cap = p.kv_capacity;
  switch (layout) {
    case KvLayout::token_major:
      break;
    case KvLayout::head_major: {
      const int64_t cap_padded = cap + 5;
      const int64_t head = row * cap_padded;
      return {row, head, head * heads, static_cast<size_t>(head * heads * seqs)};
    }
    case KvLayout::padded: {
      const int64_t head = row + 16;
      const int64_t token = head * heads + 32;
      const int64_t seq = token * (cap + 3) + 256;
      return {token, head, seq, static_cast<size_t>(seq * seqs)};
    }
    case KvLayout::seq_inner: {
      const int64_t seq = row * heads;
      return {seq * seqs, row, seq, static_cast<size_t>(seq * seqs * cap)};
    }
  }
  const KvTensor kt = kv_tensor_contiguous(nullptr, t, dim, p.n_kv_heads, cap);
  return {kt.stride_token, kt.stride_head, kt.stride_seq,
          static_cast<size_t>(kt.stride_seq * seqs)};
}

// The layout of one cache tensor (data left null) and the bytes it spans: the case's strides, or
// with p.page_size > 0 kv_tensor_paged's pages over a pool of pages.size() ... n_pages.
struct CacheLayout {
  KvTensor kv;
  size_t bytes;
};
CacheLayout cache_layout(KvLayout layout, KvType t, int32_t dim, const AttentionProblem& p,
                         const std::vector<int32_t>& pages, int64_t n_pages) {
  if (p.page_size > 0) {
    const KvTensor kv =
        kv_tensor_paged(nullptr, t, dim, p.n_kv_heads, p.page_size, n_pages, pages.data(),
                        static_cast<int32_t>(pages_per_seq(p.kv_capacity, p.page_size)));
    return {kv, static_cast<size_t>(n_pages * kv.stride_page)};
  }
  const Strides st = layout_strides(layout, t, dim, p);
  KvTensor kv;
  kv.stride_token = st.token;
  kv.stride_head = st.head;
  kv.stride_seq = st.seq;
  return {kv, st.bytes};
}

// Fills one cache: random rows for every (seq, token < kv_len, head), quantized in chunks with
// quantize_rows and scattered to the layout; everything else keeps kUnusedByte.
KvTensor make_cache(const CacheLayout& layout, KvType t, int32_t dim, const AttentionProblem& p,
                    const std::vector<int64_t>& lens, Rng rng, GuardedBuffer& storage) {
  storage = GuardedBuffer(layout.bytes);
  storage.fill_bytes(kUnusedByte);
  auto* base = storage.as<std::byte>();

  const size_t row = row_size(t, dim);
  const int64_t heads = p.n_kv_heads;
  // About 1 MiB of floats per chunk: large enough for quantize_rows to amortize, small enough
  // that a 1M-token cache never needs its float copy in memory.
  const int64_t chunk_tokens = std::max<int64_t>(1, (int64_t{1} << 18) / (heads * dim));
  std::vector<float> src(static_cast<size_t>(chunk_tokens * heads * dim));
  std::vector<std::byte> packed(static_cast<size_t>(chunk_tokens * heads) * row);
  for (int64_t s = 0; s < p.n_seqs; ++s) {
    const int64_t len = lens[static_cast<size_t>(s)];
    for (int64_t t0 = 0; t0 < len; t0 += chunk_tokens) {
      const int64_t n_tok = std::min(chunk_tokens, len - t0);
      const int64_t n_rows = n_tok * heads;
      for (int64_t i = 0; i < n_rows * dim; ++i) src[static_cast<size_t>(i)] = rng.gaussish();
      quantize_rows(t, src.data(), n_rows, dim, packed.data());
      for (int64_t tok = 0; tok < n_tok; ++tok)
        for (int64_t h = 0; h < heads; ++h)
          std::memcpy(base + kv_row_offset(layout.kv, p.page_size, s, t0 + tok, h),
                      packed.data() + static_cast<size_t>(tok * heads + h) * row, row);
    }
  }
  KvTensor kt = layout.kv;
  kt.data = base;
  return kt;
}

// A page table: pages_per_seq entries per sequence, drawn without repetition from a pool with
// spare pages, in a random order. Returns the table and the pool's page count.
std::pair<std::vector<int32_t>, int64_t> shuffled_pages(const AttentionProblem& p, Rng rng) {
  const int64_t used = p.n_seqs * pages_per_seq(p.kv_capacity, p.page_size);
  const int64_t n_pages = used + used / kSparePagesPer + 1;
  std::vector<int32_t> pool(static_cast<size_t>(n_pages));
  for (int64_t i = 0; i < n_pages; ++i) pool[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  for (int64_t i = n_pages - 1; i > 0; --i)  // Fisher-Yates with the platform-independent Rng
    std::swap(pool[static_cast<size_t>(i)],
              pool[static_cast<size_t>(rng.next() % static_cast<uint64_t>(i + 1))]);
  pool.resize(static_cast<size_t>(used));
  return {std::move(pool), n_pages};
}

}  // namespace

float Rng::gaussish() {
  const uint64_t x = next();
  float sum = 0.0f;
  for (int i = 0; i < 4; ++i) sum += static_cast<float>((x >> (16 * i)) & 0xFFFF) + 0.5f;
  // Each 16-bit uniform has mean 1/2 and variance 1/12; four of them 2 and 1/3.
  constexpr float kSqrt3 = 1.7320508f;
  return (sum * 0x1p-16f - 2.0f) * kSqrt3;
}

uint64_t case_seed(uint64_t run_seed, std::string_view case_name) {
  Rng mix(run_seed ^ fnv1a(case_name));
  return mix.next();
}

CaseInputs make_inputs(const ParityCase& c, uint64_t seed) {
  CaseInputs in;
  in.problem = to_problem(c);
  in.seed = seed;
  in.kv_lens = kv_lens(c);
  in.pass_kv_lens = c.ragged || c.empty_last || !c.q_kv_lens.empty();
  in.q_offsets = q_offsets(c);
  const AttentionProblem& p = in.problem;
  auto stream = [seed](Stream s) { return Rng(seed + 0x1000193ull * s); };

  Rng q_rng = stream(kQ);
  in.q.resize(static_cast<size_t>(in.q_rows()) * p.n_q_heads * p.head_dim.k);
  for (float& x : in.q) x = q_rng.gaussish();

  int64_t n_pages = 0;
  if (p.page_size > 0) std::tie(in.page_table, n_pages) = shuffled_pages(p, stream(kPages));
  in.k = make_cache(cache_layout(c.layout, p.k_type, p.head_dim.k, p, in.page_table, n_pages),
                    p.k_type, p.head_dim.k, p, in.kv_lens, stream(kK), in.k_data);
  in.v = make_cache(cache_layout(c.layout, p.v_type, p.head_dim.v, p, in.page_table, n_pages),
                    p.v_type, p.head_dim.v, p, in.kv_lens, stream(kV), in.v_data);

  if (c.mask) {
    Rng rng = stream(kMask);
    constexpr float kInf = std::numeric_limits<float>::infinity();
    in.mask_stride = p.kv_capacity + kMaskRowPadding;
    in.mask.assign(static_cast<size_t>(p.n_seqs * p.n_q_tokens * in.mask_stride),
                   std::numeric_limits<float>::quiet_NaN());
    for (int64_t s = 0; s < p.n_seqs; ++s)
      for (int64_t i = 0; i < p.n_q_tokens; ++i) {
        float* m = in.mask.data() + (s * p.n_q_tokens + i) * in.mask_stride;
        // Query 1 of sequence 0 is fully hidden: with no sink it must return zeros, lse -inf.
        const bool hide_row = s == 0 && i == 1;
        for (int64_t k = 0; k < in.kv_lens[static_cast<size_t>(s)]; ++k) {
          const float u = rng.uniform();
          const float g = rng.gaussish();
          m[k] = hide_row || u < kMaskHiddenShare ? -kInf : kMaskSpread * g;
        }
      }
  }
  if (c.sinks) {
    Rng rng = stream(kSinks);
    // Around the typical logit (unit variance), sometimes dominating it.
    for (int32_t h = 0; h < p.n_q_heads; ++h) in.sinks.push_back(1.0f + 1.5f * rng.gaussish());
  }
  if (c.alibi) {
    // The ALiBi paper's geometric slopes 2^(-8 (h + 1) / n_heads).
    for (int32_t h = 0; h < p.n_q_heads; ++h)
      in.alibi.push_back(
          std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(p.n_q_heads)));
  }
  return in;
}

AttentionTensors CaseInputs::tensors() const {
  AttentionTensors t;
  t.q = q.data();
  t.k = k;
  t.v = v;
  t.kv_lens = pass_kv_lens ? kv_lens.data() : nullptr;
  t.mask = mask.empty() ? nullptr : mask.data();
  t.mask_stride = mask_stride;
  t.sinks = sinks.empty() ? nullptr : sinks.data();
  t.alibi_slopes = alibi.empty() ? nullptr : alibi.data();
  t.q_offsets = offsets();
  return t;
}

}  // namespace kvflash::parity
