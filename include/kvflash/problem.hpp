// The attention problem: one value object that describes a call, validated in one place
// (validate()), printable (describe()). Shapes are written (dim0, dim1, ...), row-major, last
// dimension contiguous.
//
// Positions: sequence s holds kv_len[s] tokens at positions 0 .. kv_len[s]-1. Its n_q_tokens
// queries are the last n_q_tokens positions: query i sits at kv_len[s] - n_q_tokens + i (decode
// and speculative decoding append the new tokens to the cache before attention; prefill of a
// fresh prompt has n_q_tokens == kv_len).
//
// The logit of query q (head h, position pq) for key k (position pk), K and V as the rows hold
// them times k_scale and v_scale (fp8 types; 1 for the others):
//   s = scale * dot(q, k)
//   if softcap > 0:   s = softcap * tanh(s / softcap)
//   if alibi:         s += alibi_slope[h] * (pk - pq)
//   if mask:          s += mask[seq, i, pk]
//   if causal:        key hidden when pk > pq
//   if window > 0:    key hidden when pq - pk >= window
//   if mask = -inf:   key hidden (whatever its K row holds)
// out = softmax over the visible keys (and the sink logit sink[h], which has no value) of s,
// times V. A hidden key has no effect at all: whatever its K and V rows hold (NaN and inf
// included), the reference and the CPU kernels never let it reach the output. The CUDA kernels
// multiply P.V on tensor cores, a tile of query rows at once: a key hidden from every row of the
// tile never reaches the output (its V operands are zeroed), which covers every hidden key of a
// one-token decode and the keys an engine leaves unwritten (masked for every query, outside the
// window). A key hidden from some rows of a tile and visible to others (several query tokens: a
// causal future key, a key masked for some queries): cuda.prefill takes its NaN and inf V values
// as 0 in the MMA and adds each to the rows that see the key, dim by dim; in cuda.decode it is
// data that call reads, and a NaN in its V can reach the rows of that tile that do not see it. A
// query that sees no key and has no sink (or a sink of -inf) returns zeros and lse = -inf
// (state.hpp's empty-state rule).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "kvflash/export.h"
#include "kvflash/formats.hpp"
#include "kvflash/state.hpp"  // KVFLASH_HD
#include "kvflash/status.hpp"

namespace kvflash {

struct HeadDims {
  int32_t k;
  int32_t v;
  friend constexpr bool operator==(HeadDims, HeadDims) = default;
};

// The supported space, declared once. validate() rejects everything outside it; every backend's
// kernels together must cover everything inside it (tests/registry sweeps the boundaries).
struct SupportedSpace {
  static constexpr std::array<HeadDims, 9> head_dims = {{{64, 64},
                                                         {80, 80},
                                                         {96, 96},
                                                         {112, 112},
                                                         {128, 128},
                                                         {192, 128},
                                                         {256, 256},
                                                         {512, 512},
                                                         {576, 512}}};
  static constexpr int64_t max_kv_len = int64_t{1} << 32;  // per sequence, 64-bit indexing
  static constexpr int32_t max_q_tokens = 1 << 20;         // per sequence
  static constexpr int32_t max_seqs = 1 << 16;
  static constexpr int32_t max_q_heads = 1024;
};

struct KVFLASH_API AttentionProblem {
  int32_t n_seqs = 1;      // sequences in the batch
  int32_t n_q_tokens = 1;  // query tokens per sequence: 1 decode, 2..8 speculative, more prefill
  int32_t n_q_heads = 32;
  int32_t n_kv_heads = 8;  // n_q_heads must be a multiple (GQA group = n_q_heads / n_kv_heads)
  HeadDims head_dim = {128, 128};
  KvType k_type = KvType::f16;
  KvType v_type = KvType::f16;
  int64_t kv_capacity = 1;  // the largest kv_len of any sequence this problem serves
  float scale = 0.0f;       // logit scale; 0 means 1/sqrt(head_dim.k)
  bool causal = true;
  bool has_mask = false;   // explicit additive f32 mask, see AttentionTensors::mask
  int64_t window = 0;      // sliding window in tokens, 0 = off
  float softcap = 0.0f;    // logit soft cap, 0 = off
  bool has_sinks = false;  // per-head sink logits, see AttentionTensors::sinks
  bool has_alibi = false;  // per-head ALiBi slopes, see AttentionTensors::alibi_slopes
  // Paged K/V (as serving engines keep them): 0 = each sequence's tokens sit at one stride
  // (KvTensor without a page table); > 0 = tokens live in pages of page_size tokens that a page
  // table maps per sequence (KvTensor::page_table, any page size).
  int32_t page_size = 0;
  // Ragged query lengths (as serving engines batch prefill chunks with decode tokens): false =
  // every sequence has n_q_tokens queries; true = sequence s has its own count, 0 .. n_q_tokens,
  // given by AttentionTensors::q_offsets, and q / out / lse are packed (see there).
  bool ragged_q = false;
  // The fp8 types' per-tensor scales (vLLM's k_scale / v_scale): an fp8 K row holds K / k_scale,
  // an fp8 V row V / v_scale. 1 for every other type (their rows hold their own scales).
  float k_scale = 1.0f;
  float v_scale = 1.0f;

  int32_t group() const { return n_q_heads / n_kv_heads; }
  // The logit scale the kernels apply to dot(q, k) of the stored K: scale (or 1/sqrt(head_dim.k))
  // times k_scale.
  float effective_scale() const;
  // Field by field (gpu::GraphRunner's signature is a problem and a key).
  friend bool operator==(const AttentionProblem&, const AttentionProblem&) = default;
  // Rows of the per-(sequence, KV head) query matrix: every query token of every head of a group.
  int32_t rows_per_kv_head() const { return n_q_tokens * group(); }
};

// Names the first offending field (in declaration order), its value and the allowed values, in
// the one message style of the library: "field=value problem (allowed: ...)".
KVFLASH_API Status validate(const AttentionProblem& p);
// One line, e.g. "seqs=1 q=1 heads=32/8 d=128/128 k=q8_0 v=q4_0 kv=32768 causal".
KVFLASH_API std::string describe(const AttentionProblem& p);

// A K or V cache in host or device memory: row (seq, token, head) starts at
//   data + seq * stride_seq + token * stride_token + head * stride_head   (bytes)
// and holds row_size(type, head_dim) bytes. Strides are in bytes and may be any layout
// (token-major as in ggml, head-major, ...) within these rules, which validate(p, t) enforces
// on every dimension of extent > 1 (the strides of the others are never used):
//  - alignment: data and every stride keep rows at multiples of 4 bytes for f32 rows (loaded as
//    floats) and of 2 bytes for every other type (loaded as 16-bit halves and block scales);
//  - strides >= 0, and the last byte of the last row is addressable with int64 offsets;
//  - no two rows overlap. The rule (sufficient, not necessary): sort the dimensions by stride;
//    each stride must be at least the span of the rows of the dimensions before it, starting
//    with one row (e.g. token-major: stride_head >= row, stride_token >= n_kv_heads x row,
//    stride_seq >= kv_capacity x stride_token, any padding allowed).
//
// Paged (problem.page_size = P > 0): token t of sequence s lives in page
//   page_table[s * pages_per_seq + t / P]   (an int32 page number, 0 <= page < n_pages)
// and its row starts at
//   data + page * stride_page + (t % P) * stride_token + head * stride_head   (stride_seq unused).
// The table is in the same memory as the data (device memory for cuda.decode), read when the
// kernel runs, so a captured graph follows later changes to it. K and V may share a table.
// The layout rules above apply to the dimensions (token: page_size, head: n_kv_heads, page:
// n_pages) in place of (token, head, seq): stride_page is usually at least one page's rows, but
// any non-overlapping nesting passes (e.g. pages interleaved between tokens). page_table is int32
// aligned.
// Readers: every kernel (the CPU kernels walk each page's run of keys as one call).
// gpu::KvCache appends to paged caches on the device.
struct KvTensor {
  const void* data = nullptr;
  int64_t stride_token = 0;
  int64_t stride_head = 0;
  int64_t stride_seq = 0;
  // Paged layout only (see above).
  const int32_t* page_table = nullptr;
  int32_t pages_per_seq = 0;
  int64_t n_pages = 0;
  int64_t stride_page = 0;
};

// Byte offset of row (seq, token, head) from data, for either layout (page_size 0: contiguous).
// The page table is read here, so it must be readable by the caller (host or device).
KVFLASH_HD int64_t kv_row_offset(const KvTensor& kv, int32_t page_size, int64_t seq, int64_t token,
                                 int64_t head) {
  if (page_size > 0) {
    const int64_t page = kv.page_table[seq * kv.pages_per_seq + token / page_size];
    return page * kv.stride_page + (token % page_size) * kv.stride_token + head * kv.stride_head;
  }
  return seq * kv.stride_seq + token * kv.stride_token + head * kv.stride_head;
}

// Contiguous (seq, token, head, dim) layout for a cache of `capacity` tokens.
KVFLASH_API KvTensor kv_tensor_contiguous(const void* data, KvType t, int32_t head_dim,
                                          int32_t n_kv_heads, int64_t capacity);
// Pages a sequence of `capacity` tokens spans with pages of `page_size` tokens (0 when
// page_size is 0: contiguous).
constexpr int64_t pages_per_seq(int64_t capacity, int32_t page_size) {
  return page_size > 0 ? (capacity + page_size - 1) / page_size : 0;
}
// Paged layout: n_pages pages of (page_size tokens, n_kv_heads heads) rows, tokens a multiple of
// 4 bytes apart, each page starting at a multiple of 16 bytes; `page_table` holds pages_per_seq
// entries per sequence.
KVFLASH_API KvTensor kv_tensor_paged(const void* data, KvType t, int32_t head_dim,
                                     int32_t n_kv_heads, int32_t page_size, int64_t n_pages,
                                     const int32_t* page_table, int32_t pages_per_seq);

struct AttentionTensors {
  const float* q = nullptr;             // (n_seqs, n_q_tokens, n_q_heads, head_dim.k)
  KvTensor k;                           // head_dim.k values per row, type k_type
  KvTensor v;                           // head_dim.v values per row, type v_type
  const int64_t* kv_lens = nullptr;     // (n_seqs) tokens in each sequence, <= kv_capacity;
                                        // nullptr: every sequence holds kv_capacity tokens.
                                        // Outside 0 .. kv_capacity: the CPU backend returns
                                        // invalid_argument; cuda.decode (lengths on the
                                        // device, unchecked without a sync) reads no key and
                                        // writes NaN to the sequence's out and lse
  const float* mask = nullptr;          // (n_seqs, n_q_tokens, mask_stride), additive; -inf hides
  int64_t mask_stride = 0;              // >= kv_capacity
  const float* sinks = nullptr;         // (n_q_heads) sink logits (natural-log units)
  const float* alibi_slopes = nullptr;  // (n_q_heads)
  float* out = nullptr;                 // (n_seqs, n_q_tokens, n_q_heads, head_dim.v)
  float* lse = nullptr;  // optional (n_seqs, n_q_tokens, n_q_heads): log-sum-exp of the
                         // logits, natural log, sink included; -inf when empty. When
                         // non-null, every kernel writes every entry.
  // problem.ragged_q only: n_seqs + 1 int32 offsets, q_offsets[0] = 0, non-decreasing, each
  // step q_offsets[s + 1] - q_offsets[s] = sequence s's query count q_len(s) in 0 .. n_q_tokens.
  // q, out and lse are then packed: query i of sequence s is row q_offsets[s] + i of
  // q (total, n_q_heads, head_dim.k), out (total, n_q_heads, head_dim.v) and lse (total,
  // n_q_heads), total = q_offsets[n_seqs]; its position is kv_len(s) - q_len(s) + i (the last
  // q_len positions, as without ragged_q). The mask, when present, stays (n_seqs, n_q_tokens,
  // mask_stride): row i of sequence s. In the memory of the other tensors (device memory for a
  // CUDA plan, read on the device like kv_lens). Offsets that break these rules: the CPU backend
  // returns invalid_argument; a CUDA kernel reads and writes nothing for that sequence.
  const int32_t* q_offsets = nullptr;
};

// Checks pointers and strides against the problem (the problem must already be valid), fields in
// declaration order: non-null where required, q / out / lse / mask / sinks / alibi_slopes 4-byte
// aligned (floats), kv_lens 8-byte and q_offsets 4-byte aligned, K and V by KvTensor's rules,
// mask_stride >= kv_capacity with an addressable last element. All arithmetic is overflow
// checked. Reads no tensor memory (a CUDA plan's tensors are on the device).
KVFLASH_API Status validate(const AttentionProblem& p, const AttentionTensors& t);

// Sequence seq's query rows, the one layout formula every reader uses (reference, CPU kernels,
// CUDA kernels, tools): the first packed row of q / out / lse (in query tokens: the row of query
// i of head h is (q_row_base + i) * n_q_heads + h) and the query count. q_offsets is
// AttentionTensors::q_offsets (nullptr unless problem.ragged_q: every sequence then has
// n_q_tokens queries at rows seq * n_q_tokens ...). The offsets are read here, so they must be
// readable by the caller (host or device). Query i sits at position kv_len - q_len + i.
KVFLASH_HD int64_t q_row_base(const int32_t* q_offsets, int32_t n_q_tokens, int64_t seq) {
  return q_offsets != nullptr ? int64_t{q_offsets[seq]} : seq * n_q_tokens;
}
KVFLASH_HD int32_t q_len(const int32_t* q_offsets, int32_t n_q_tokens, int64_t seq) {
  return q_offsets != nullptr ? q_offsets[seq + 1] - q_offsets[seq] : n_q_tokens;
}
// Packed query rows (tokens) of q / out / lse: q_offsets[n_seqs] when ragged, else
// n_seqs * n_q_tokens. Host memory.
KVFLASH_API int64_t q_total_rows(const AttentionProblem& p, const int32_t* q_offsets);

// Host-memory checks of what validate(p, t) does not read: the ragged offsets (q_offsets[0] = 0,
// non-decreasing, each step 0 .. n_q_tokens). Readers of host tensors (the reference, the CPU
// backend, the C API) call it before reading; nothing to check without ragged_q.
KVFLASH_API Status validate_q_offsets(const AttentionProblem& p, const int32_t* q_offsets);
// Host-memory check of the sequence lengths: each kv_lens[s] in 0 .. kv_capacity (nullptr: every
// sequence is full, nothing to check).
KVFLASH_API Status validate_kv_lens(const AttentionProblem& p, const int64_t* kv_lens);
// Host-memory check of the page tables of a paged problem: every entry that a sequence's
// kv_lens[s] tokens reach (nullptr: kv_capacity) names a page of its tensor (0 .. n_pages - 1),
// for K and V. Nothing to check when contiguous. Call after validate_kv_lens.
KVFLASH_API Status validate_page_tables(const AttentionProblem& p, const AttentionTensors& t);

}  // namespace kvflash
