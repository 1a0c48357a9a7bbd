// The case lists. Each generator is a small cartesian product of a few axes around a base case;
// the sets are concatenations of generators, deduplicated by name.
#include <functional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "case.hpp"

namespace kvflash::parity {
namespace {

using enum KvType;

// One axis of a product: each entry sets some fields of a case.
using Axis = std::vector<std::function<void(ParityCase&)>>;

std::vector<ParityCase> product(const ParityCase& base, const std::vector<Axis>& axes) {
  std::vector<ParityCase> out = {base};
  for (const Axis& axis : axes) {
    std::vector<ParityCase> next;
    for (const ParityCase& c : out)
      for (const auto& set : axis) {
        ParityCase d = c;
        set(d);
        next.push_back(d);
      }
    out = std::move(next);
  }
  return out;
}

template <class T>
Axis values(T ParityCase::*field, std::vector<T> vs) {
  Axis a;
  for (T v : vs) a.push_back([field, v](ParityCase& c) { c.*field = v; });
  return a;
}

Axis types(std::vector<std::pair<KvType, KvType>> pairs) {
  Axis a;
  for (auto [k, v] : pairs)
    a.push_back([k = k, v = v](ParityCase& c) {
      c.k_type = k;
      c.v_type = v;
    });
  return a;
}

Axis heads(std::vector<std::pair<int32_t, int32_t>> q_kv) {
  Axis a;
  for (auto [q, kv] : q_kv)
    a.push_back([q = q, kv = kv](ParityCase& c) {
      c.n_q_heads = q;
      c.n_kv_heads = kv;
    });
  return a;
}

Axis q_tokens(std::vector<int32_t> ns) {
  return values(&ParityCase::n_q_tokens, std::move(ns));
}
Axis kv(std::vector<int64_t> ns) {
  return values(&ParityCase::kv_len, std::move(ns));
}

void append(std::vector<ParityCase>& to, const std::vector<ParityCase>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// Every type with itself, decode and a 9-token speculative step; then the mixed pairs engines use
// (8-bit K with a smaller V is the robust choice for quantized caches).
std::vector<ParityCase> type_cases() {
  std::vector<std::pair<KvType, KvType>> diagonal;
  for (KvType t : kAllKvTypes) diagonal.emplace_back(t, t);
  std::vector<ParityCase> out = product({}, {types(diagonal), q_tokens({1, 9})});
  append(out, product({}, {types({{q8_0, turbo4},
                                  {f16, q4_0},
                                  {turbo3, q8_0},
                                  {q4_0, f16},
                                  {bf16, turbo2},
                                  {q8_0, turbo3},
                                  {f32, q8_0}}),
                           q_tokens({1, 8})}));
  // fp8 with vLLM's per-tensor scales (the rows hold K / k_scale, V / v_scale), mixed with the
  // other 8-bit type.
  for (auto [k, v, ks, vs] : {std::tuple{fp8_e4m3, fp8_e4m3, 0.0625f, 3.0f},
                              {fp8_e5m2, fp8_e5m2, 2.0f, 0.25f},
                              {fp8_e4m3, q8_0, 0.5f, 1.0f},
                              {q8_0, fp8_e5m2, 1.0f, 0.125f}})
    for (int32_t q : {1, 9}) {
      ParityCase c;
      c.k_type = k;
      c.v_type = v;
      c.k_scale = ks;
      c.v_scale = vs;
      c.n_q_tokens = q;
      out.push_back(c);
    }
  return out;
}

// Every supported head-dim pair, with plain, block-quantized and rotated types (turbo rows of
// 80 or 96 values are padded to one 128-value group), q8_0 K with turbo V (int8 Q.K^T on the
// GPU) and turbo2 V (bit planes on the GPU).
std::vector<ParityCase> head_dim_cases() {
  Axis dims;
  for (HeadDims hd : SupportedSpace::head_dims)
    dims.push_back([hd](ParityCase& c) { c.head_dim = hd; });
  ParityCase base;
  base.kv_len = 300;
  std::vector<ParityCase> out = product(
      base,
      {dims,
       types({{f16, f16}, {q8_0, q4_0}, {turbo4, turbo3}, {q8_0, turbo3}, {turbo3, turbo2}})});
  base.n_q_tokens = 9;
  append(out, product(base, {dims, types({{bf16, q8_0}})}));
  return out;
}

// GQA group sizes 1, 3, 4, 7 and 8 (3 and 7 are the odd ones).
std::vector<ParityCase> gqa_cases() {
  return product({}, {heads({{8, 8}, {12, 4}, {16, 4}, {14, 2}, {32, 4}}), q_tokens({1, 9}),
                      types({{f16, f16}, {q4_0, q4_0}})});
}

// Decode, speculative steps around 8 and prefill, both as a fresh prompt (kv == queries) and as
// a chunk appended to a 1000-token cache.
std::vector<ParityCase> query_token_cases() {
  Axis fresh_or_chunk = {[](ParityCase& c) { c.kv_len = c.n_q_tokens; },
                         [](ParityCase& c) { c.kv_len = 1000; }};
  return product(
      {}, {q_tokens({1, 2, 8, 9, 33, 128}), fresh_or_chunk, types({{f16, f16}, {q8_0, turbo4}})});
}

// KV lengths on both sides of the block sizes kernels use (32, 64, 128) and of split boundaries.
std::vector<ParityCase> kv_length_cases() {
  return product({}, {kv({1, 31, 63, 64, 65, 128, 129, 1000, 2049, 4864}), q_tokens({1, 8}),
                      types({{f16, f16}, {q4_0, q4_0}, {turbo3, turbo3}})});
}

// Each feature on its own, then all together, then non-causal attention.
std::vector<ParityCase> feature_cases() {
  Axis features = {[](ParityCase& c) { c.mask = true; },    [](ParityCase& c) { c.window = 256; },
                   [](ParityCase& c) { c.softcap = 5.0f; }, [](ParityCase& c) { c.sinks = true; },
                   [](ParityCase& c) { c.alibi = true; },   [](ParityCase& c) { c.scale = 0.25f; }};
  const Axis feature_types = types({{f16, f16}, {q8_0, q4_0}, {turbo4, turbo2}});
  std::vector<ParityCase> out = product({}, {features, q_tokens({1, 9}), feature_types});
  // The same with a speculative step of 8 tokens (GQA 4: 32 query rows per KV head, the CUDA
  // kernel's two-M-tile layout).
  append(out, product({}, {features, q_tokens({8}), types({{q4_0, q4_0}, {turbo3, turbo3}})}));

  // A window of 1 leaves each query only itself; a window across a long cache skips most blocks.
  append(out, product({}, {values(&ParityCase::window, std::vector<int64_t>{1, 256}), kv({4864}),
                           q_tokens({1, 33}), types({{f16, f16}, {q4_0, q4_0}})}));

  ParityCase all;
  all.mask = true;
  all.window = 300;
  all.softcap = 5.0f;
  all.sinks = true;
  all.alibi = true;
  append(out, product(all, {q_tokens({1, 33}), types({{f16, f16}, {turbo3, q8_0}})}));
  append(out, product(all, {q_tokens({5, 8}), types({{q8_0, q8_0}, {turbo4, turbo4}})}));

  // Non-causal, also with fewer keys than queries (queries at negative positions still see all).
  ParityCase nc;
  nc.causal = false;
  append(out, product(nc, {q_tokens({9, 33}), kv({20, 1000}), types({{f16, f16}, {q4_0, q4_0}})}));
  nc.window = 64;
  append(out, product(nc, {q_tokens({9}), types({{f16, f16}})}));
  return out;
}

// Batches of 3 sequences of different lengths; the last is shorter than the queries.
std::vector<ParityCase> ragged_cases() {
  ParityCase base;
  base.n_seqs = 3;
  base.ragged = true;
  std::vector<ParityCase> out = product(
      base, {q_tokens({1, 8, 33}), values(&ParityCase::causal, std::vector<bool>{true, false}),
             types({{f16, f16}, {q4_0, turbo4}})});
  base.mask = true;
  base.sinks = true;
  append(out, product(base, {q_tokens({8}), types({{f16, f16}, {q8_0, q8_0}})}));
  // A free slot in the batch: a sequence of 0 tokens returns zeros (lse -inf, or the sink's).
  ParityCase empty;
  empty.n_seqs = 3;
  empty.ragged = true;
  empty.empty_last = true;
  append(out, product(empty, {q_tokens({1, 8}), types({{f16, f16}, {q4_0, turbo4}})}));
  empty.sinks = true;
  append(out, product(empty, {q_tokens({1}), types({{q8_0, q8_0}})}));
  return out;
}

// Ragged query counts (problem.ragged_q: packed q / out / lse), as engines batch prefill chunks
// with decode tokens: a free slot (0 queries, 0 keys), decode, short and long chunks, a fresh
// prompt; decode-sized batches (up to 8 queries); more queries than keys under causal (the first
// ones before position 0) and not; every feature; paged caches (CUDA only).
std::vector<ParityCase> ragged_q_cases() {
  const ParityCase base;
  std::vector<ParityCase> out;
  const Axis pairs = types({{f16, f16}, {q8_0, turbo4}, {q4_0, q4_0}});
  const ParityCase mixed = ragged_q_case(base, {0, 1, 7, 33, 300}, {0, 8000, 7, 1000, 300});
  const ParityCase decode = ragged_q_case(base, {1, 0, 8, 3}, {4000, 0, 100, 3});
  const ParityCase before_zero = ragged_q_case(base, {33, 1, 9}, {10, 500, 9});
  for (const ParityCase& c : {mixed, decode, before_zero}) append(out, product(c, {pairs}));
  ParityCase not_causal = before_zero;
  not_causal.causal = false;
  append(out, product(not_causal, {types({{f16, f16}})}));
  for (ParityCase c : {mixed, decode, before_zero}) {
    c.mask = c.sinks = c.alibi = true;
    c.window = 200;
    c.softcap = 5.0f;
    append(out, product(c, {types({{q8_0, turbo4}, {turbo3, turbo3}})}));
  }
  ParityCase paged = mixed;
  paged.page_size = 16;
  append(out, product(paged, {types({{f16, f16}, {q8_0, q4_0}})}));
  return out;
}

// Non-contiguous caches: every layout with a ragged pair of sequences, so that sequence, token
// and head strides all matter.
std::vector<ParityCase> layout_cases() {
  ParityCase base;
  base.n_seqs = 2;
  base.ragged = true;
  return product(
      base,
      {values(&ParityCase::layout,
              std::vector<KvLayout>{KvLayout::head_major, KvLayout::padded, KvLayout::seq_inner}),
       types({{f16, f16}, {q4_0, q4_0}, {turbo3, turbo3}, {f32, q8_0}}), q_tokens({1, 9})});
}

// One KV head at 1M tokens: 64-bit indexing and long-context accumulation from day one.
std::vector<ParityCase> million_token_cases() {
  ParityCase base;
  base.n_q_heads = 4;
  base.n_kv_heads = 1;
  base.kv_len = int64_t{1} << 20;
  return product(base, {types({{f16, f16}, {q4_0, q4_0}})});
}

// The long set: more of the deep-context space, minutes rather than seconds.
std::vector<ParityCase> long_cases() {
  ParityCase base;
  base.n_q_heads = 4;
  base.n_kv_heads = 1;
  base.kv_len = int64_t{1} << 20;
  std::vector<ParityCase> out =
      product(base, {types({{turbo3, turbo3}, {q8_0, turbo4}, {bf16, bf16}, {turbo2, turbo4}})});
  append(out, product(base, {q_tokens({8}), types({{q4_0, q4_0}, {f16, f16}})}));

  ParityCase features = base;
  features.sinks = true;
  features.alibi = true;
  features.softcap = 5.0f;
  append(out, product(features, {types({{q4_0, q4_0}})}));
  ParityCase window = base;
  window.window = 4096;
  append(out, product(window, {q_tokens({1, 9}), types({{f16, f16}})}));

  ParityCase ragged = base;
  ragged.n_seqs = 2;
  ragged.ragged = true;
  append(out, product(ragged, {types({{q4_0, q4_0}})}));

  ParityCase gqa = base;
  gqa.n_q_heads = 16;
  gqa.n_kv_heads = 2;
  append(out, product(gqa, {types({{q8_0, q4_0}})}));

  // Around 2^18, a split-size boundary of many decode kernels.
  ParityCase quarter;
  quarter.n_kv_heads = 1;
  append(out, product(quarter, {kv({262144, 262145}), types({{q4_0, q4_0}, {turbo4, turbo4}})}));

  // The longest context the decode kernels promise, 4,194,304 tokens, in caches of more than
  // 2^31 bytes per tensor (64-bit offsets everywhere): f16 rows (4.3 GB per tensor; the GPU copies
  // them with cp.async) and q8_0 K (2.3 GB; by TMA on the GPU, int8 Q.K^T) with turbo3 V.
  ParityCase huge;
  huge.n_q_heads = 8;
  huge.n_kv_heads = 4;
  huge.kv_len = int64_t{1} << 22;
  append(out, product(huge, {types({{f16, f16}, {q8_0, turbo3}})}));
  return out;
}

// Prefill for the GPU: chunks of queries deep in the context (128K, and a small chunk onto 1M
// tokens, one KV head of GQA 2 so that the float64 reference stays seconds on one core), head
// dims 512 and 576/512, paged
// caches under a ragged batch, every feature alone and together, ragged batches (the last
// sequence holds fewer tokens than the queries: under the causal mask its first queries see
// nothing), ragged query counts (packed queries, chunks of 0 to 1000).
std::vector<ParityCase> prefill_cases() {
  ParityCase deep;
  deep.n_q_heads = 2;
  deep.n_kv_heads = 1;
  deep.n_q_tokens = 64;
  deep.kv_len = 131072;
  std::vector<ParityCase> out =
      product(deep, {types({{f16, f16}, {q8_0, turbo4}, {q4_0, q4_0}, {turbo3, turbo3}})});
  deep.n_q_tokens = 16;
  deep.kv_len = int64_t{1} << 20;
  append(out, product(deep, {types({{f16, f16}, {q4_0, q4_0}})}));
  deep.n_q_tokens = 512;
  deep.kv_len = 16384;
  append(out, product(deep, {types({{bf16, bf16}, {q8_0, q8_0}})}));

  // The wide head dims (512, and 576/512: DeepSeek's MLA shape, its 128 query heads cut to 16):
  // a chunk onto 3000 keys, then every feature together in pages of 16 under a ragged batch.
  Axis wide_dims = {[](ParityCase& c) {
                      c.head_dim = {512, 512};
                    },
                    [](ParityCase& c) {
                      c.head_dim = {576, 512};
                    }};
  ParityCase wide;
  wide.n_q_heads = 16;
  wide.n_kv_heads = 1;
  wide.n_q_tokens = 100;
  wide.kv_len = 3000;
  append(out, product(wide, {wide_dims,
                             types({{f16, f16}, {q8_0, q8_0}, {turbo3, turbo3}, {q4_0, turbo4}})}));
  wide.n_seqs = 2;
  wide.ragged = true;
  wide.page_size = 16;
  wide.mask = wide.sinks = wide.alibi = true;
  wide.window = 1000;
  wide.softcap = 5.0f;
  append(out, product(wide, {wide_dims, types({{q8_0, turbo4}, {bf16, bf16}})}));

  ParityCase paged;
  paged.n_seqs = 3;
  paged.ragged = true;
  paged.n_q_tokens = 100;
  paged.kv_len = 3000;
  append(out, product(paged, {values(&ParityCase::page_size, std::vector<int32_t>{16, 64}),
                              types({{f16, f16}, {q8_0, q4_0}, {turbo3, turbo3}})}));
  paged.mask = paged.sinks = paged.alibi = true;
  paged.window = 500;
  paged.softcap = 5.0f;
  paged.page_size = 16;
  append(out, product(paged, {types({{q8_0, turbo4}})}));

  Axis features = {[](ParityCase& c) { c.mask = true; },  [](ParityCase& c) { c.window = 64; },
                   [](ParityCase& c) { c.window = 700; }, [](ParityCase& c) { c.softcap = 5.0f; },
                   [](ParityCase& c) { c.sinks = true; }, [](ParityCase& c) { c.alibi = true; },
                   [](ParityCase& c) { c.scale = 0.25f; }};
  ParityCase chunk;
  chunk.n_q_tokens = 100;
  chunk.kv_len = 2000;
  append(out, product(chunk, {features, values(&ParityCase::causal, std::vector<bool>{true, false}),
                              types({{f16, f16}, {q8_0, turbo4}})}));
  ParityCase all = chunk;
  all.n_q_tokens = 257;
  all.kv_len = 4096;
  all.mask = all.sinks = all.alibi = true;
  all.window = 1000;
  all.softcap = 5.0f;
  append(out, product(all, {values(&ParityCase::causal, std::vector<bool>{true, false}),
                            types({{f16, f16}, {q8_0, turbo4}, {turbo2, turbo2}})}));

  ParityCase ragged;
  ragged.n_seqs = 3;
  ragged.ragged = true;
  ragged.n_q_tokens = 128;
  ragged.kv_len = 8192;
  append(out, product(ragged, {values(&ParityCase::causal, std::vector<bool>{true, false}),
                               types({{f16, f16}, {q4_0, turbo4}})}));

  // Ragged query counts deep in the context: chunks of 300 and 1000 queries beside decode tokens
  // and a free slot, more queries than keys (causal), every feature, paged.
  const ParityCase deep_ragged = ragged_q_case({}, {0, 1, 7, 300, 33}, {0, 8000, 5000, 8000, 40});
  const ParityCase wide_ragged = ragged_q_case({}, {1000, 1, 65, 0}, {1000, 2, 6000, 12});
  const ParityCase short_cache = ragged_q_case({}, {200, 1, 64}, {50, 100, 64});
  for (const ParityCase& c : {deep_ragged, wide_ragged, short_cache})
    append(out, product(c, {types({{f16, f16}, {q8_0, turbo4}, {q4_0, q4_0}})}));
  ParityCase every = deep_ragged;
  every.mask = every.sinks = every.alibi = true;
  every.window = 700;
  every.softcap = 5.0f;
  append(out, product(every, {values(&ParityCase::causal, std::vector<bool>{true, false}),
                              types({{q8_0, turbo4}, {turbo3, turbo3}})}));
  append(out, product(every, {values(&ParityCase::page_size, std::vector<int32_t>{16, 64}),
                              types({{f16, f16}, {q8_0, q4_0}})}));
  return out;
}

std::vector<ParityCase> unique_by_name(const std::vector<ParityCase>& cases) {
  std::set<std::string> seen;
  std::vector<ParityCase> out;
  for (const ParityCase& c : cases)
    if (seen.insert(case_name(c)).second) out.push_back(c);
  return out;
}

}  // namespace

std::vector<ParityCase> build_case_set(CaseSet set) {
  std::vector<ParityCase> out;
  if (set == CaseSet::test || set == CaseSet::all) {
    for (const auto& gen :
         {type_cases, head_dim_cases, gqa_cases, query_token_cases, kv_length_cases, feature_cases,
          ragged_cases, ragged_q_cases, layout_cases, million_token_cases})
      append(out, gen());
  }
  if (set == CaseSet::long_context || set == CaseSet::all) append(out, long_cases());
  if (set == CaseSet::prefill || set == CaseSet::all) append(out, prefill_cases());
  return unique_by_name(out);
}

}  // namespace kvflash::parity
