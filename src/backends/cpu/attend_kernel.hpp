// The CPU attention kernel: the query rows of every KV head of one sequence against one
// contiguous range of keys, folded into running attention states (state.hpp) with the online
// softmax.
// It knows nothing of the registry or threads: raw pointers and one params struct. Compiled once
// per instruction set (attend_kernel_impl.inl), chosen at run time by the registry's guards.
#pragma once

#include <cstdint>

#include "kvflash/formats.hpp"

namespace kvflash::cpu {

// Keys are consumed in chunks of this many tokens: dequantized into a small per-thread tile
// (never a whole-window copy), scored against every row, then folded into the states. 64: the
// per-chunk work (softmax bookkeeping, turbo weight rounding) spread over twice the keys of 32.
inline constexpr int32_t kKeyChunk = 64;
// Every head dim of the supported space (and its turbo padding) is a multiple of this: the
// kernel's vectors are this wide.
inline constexpr int32_t kLanes = 16;
// Paged caches whose pages hold a multiple of this many keys are read in place: a chunk inside
// one page as a contiguous one (pages of a multiple of kKeyChunk), else its rows from the page
// table in groups of this many keys (no group crosses a page); other page sizes are gathered
// into staging rows first (attend_gather_bytes).
inline constexpr int32_t kRowGroup = 16;

// One call covers n_heads KV heads of one sequence over keys [kv_begin, kv_end), walked in blocks
// of block_keys tokens (kKeyChunk; kv_begin a multiple of it), every head within a block.
// Per-head data sits at fixed strides from the head-0 pointers below.
struct AttendParams {
  KvType k_type, v_type;
  int32_t dk;        // stored K values per row: padded_values(k_type, head_dim.k) (whole blocks)
  int32_t dv;        // stored V values per row, likewise
  int32_t dk_row;    // head_dim.k (the logical row length quantize_row saw)
  int32_t dv_row;    // head_dim.v
  const uint8_t* k;  // row of key 0 of KV head 0 of this sequence
  int64_t k_stride;  // bytes between tokens
  int64_t k_head_stride;  // bytes between KV heads
  const uint8_t* v;
  int64_t v_stride;
  int64_t v_head_stride;
  int32_t n_heads;
  int64_t block_keys;
  int64_t kv_begin, kv_end;  // key positions [begin, end)
  int64_t prefetch_end;      // keys up to here may be prefetched

  int32_t n_rows;  // query rows: row r is query token r / group, head (kv_head*group + r % group)
  int32_t group;
  int32_t head_rows;  // rows between one KV head's q / o / m / l and the next's (>= n_rows)
  const float* q;     // (n_heads, n_rows, dk): scaled by the logit scale, rotated when K is turbo
  int64_t q_pos0;     // position of query token 0 (token i at q_pos0 + i)
  bool causal;
  int64_t window;      // 0 = off
  float softcap;       // 0 = off; q already holds the scale, so logits are capped directly
  const float* alibi;  // (n_heads, group) slopes of the query heads, or nullptr
  const float* mask;   // row for query token 0 (token i at mask + i * mask_stride), or nullptr
  int64_t mask_stride;

  float* o;  // (n_heads, n_rows, dv) running unnormalized outputs, in the storage domain of V
  float* m;  // (n_heads, n_rows) running maxima, natural-log units
  float* l;  // (n_heads, n_rows) running sums

  float* scratch;  // attend_scratch_floats(...) floats, 64-byte aligned

  // Paged caches (page_size > 0): k and v are then the pools' data pointers, and key c of this
  // sequence lives in page k_pages[c / page_size] (v_pages for V) at row c % page_size of it,
  // *_page_stride bytes per page; k_stride / v_stride are the token strides inside a page.
  int32_t page_size;
  const int32_t* k_pages;
  const int32_t* v_pages;
  int64_t k_page_stride, v_page_stride;
};

// Bytes of the staging rows of a paged call whose pages are not a multiple of kRowGroup keys
// (1, 7, 100, ...): each head's rows of a chunk are gathered there from their pages, so that the
// chunk is whole; 0 where the pages are read in place (contiguous caches, pages of a multiple of
// kRowGroup keys).
int64_t attend_gather_bytes(KvType k, KvType v, int32_t dk_row, int32_t dv_row, int32_t page_size);

// Floats of scratch one call needs (the staging rows of attend_gather_bytes included).
int64_t attend_scratch_floats(int32_t dk, int32_t dv, int32_t n_rows, int32_t n_heads,
                              int64_t gather_bytes);

void attend_portable(const AttendParams& p);
#if defined(KVFLASH_CPU_AVX2)
void attend_avx2(const AttendParams& p);
#endif
#if defined(KVFLASH_CPU_AVX512)
void attend_avx512(const AttendParams& p);
void attend_avx512vnni(const AttendParams& p);
#endif
#if defined(KVFLASH_CPU_NEON)
void attend_neon(const AttendParams& p);
#endif

}  // namespace kvflash::cpu
