// The tile copy of the CUDA decode kernel: K and V rows from global memory into a shared-memory
// stage with cp.async, in 16-, 8- or 4-byte units (copy_mode in common/tile_copy.cpp picks the
// unit), the general path (any unit) and the short paths of contiguous and paged tensors in
// 16-byte units, and TileIssue, the kernel's copy of one tile (TMA for the tensors the host
// mapped; these paths for float rows, slots over 256 bytes, pages TMA cannot describe, strides
// TMA cannot describe).
#pragma once

#include <cstdint>

#include "backends/cuda/decode/decode_device.cuh"
#include "backends/cuda/decode/decode_params.hpp"

namespace kvflash::cuda::decode {

// One copy unit of a row into its shared-memory slot (`ok` false: zero-filled, nothing read).
// Lead (always for U = 4): the slot holds the row from its start rounded down to U bytes (the
// row's data begins at byte address & (U - 1), see the row offsets in the kernel); the last unit
// reads only the row's bytes (the first may read up to U - 1 bytes before the row, inside the same
// aligned U bytes of its allocation).
template <int U, bool kLead>
__device__ __forceinline__ void copy_unit(uint8_t* dst, const uint8_t* row, int u, int row_bytes,
                                          bool ok) {
  if constexpr (U == 4 || kLead) {
    const uint8_t* a0 =
        reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(row) & ~uintptr_t{U - 1});
    const uint8_t* src = a0 + U * u;
    const int left = static_cast<int>((row + row_bytes) - src);
    const int n = ok ? (left < 0 ? 0 : (left > U ? U : left)) : 0;
    cp_async<U>(dst, n > 0 ? src : a0, n);
  } else {
    cp_async<U>(dst, row + U * u, ok ? U : 0);
  }
}

// Rows 0 .. rows - 1 of `stride` bytes apart from src0 into slots `sstride` apart at dst0, in units
// of U bytes; rows from rows_valid on are zero-filled (their source is row 0, not read). `units`:
// copy units per row (with a lead: enough for the largest lead, see copy_mode on the host; else
// row_bytes / U), `pass` = kThreads / units (both from the host).
template <int U, bool kLead>
__device__ __forceinline__ void copy_rows(const uint8_t* src0, int64_t stride, int rows_valid,
                                          int rows, int row_bytes, const FastDiv& units, int pass,
                                          uint8_t* dst0, int sstride, int tid) {
  const int per_row = units.d;
  if (per_row <= kThreads) {
    const int r0 = fdiv(tid, units);
    const int u = tid - r0 * per_row;
    if (r0 >= pass) return;
    const uint8_t* row = src0 + r0 * stride;
    uint8_t* dst = dst0 + r0 * sstride + U * u;
    const int64_t row_step = pass * stride;
    const int dst_step = pass * sstride;
    if constexpr (kLead && U == 16) {
      // The lead is the same for every row (the host's condition: stride % 16 == 0), so this
      // thread's unit has one source offset and byte count for all its rows: the loop is the
      // copy and two pointer steps. A unit wholly past the row's end (a CTA whose lead is below
      // the largest) is not copied: nothing reads a slot past its row's data.
      const int lead = static_cast<int>(reinterpret_cast<uintptr_t>(src0) & 15);
      const int n = min(16, lead + row_bytes - 16 * u);
      if (n <= 0) return;
      const uint8_t* base0 = src0 - lead;  // 16-byte aligned; source of the zero-filled rows
      const uint8_t* src = base0 + int64_t{r0} * stride + 16 * u;
      if (rows_valid >= rows) {
        for (int r = r0; r < rows; r += pass, src += row_step, dst += dst_step)
          cp_async<16>(dst, src, n);
      } else {
        for (int r = r0; r < rows; r += pass, src += row_step, dst += dst_step) {
          const bool ok = r < rows_valid;
          cp_async<16>(dst, ok ? src : base0, ok ? n : 0);
        }
      }
      return;
    }
    if (rows_valid >= rows) {  // every tile but a range's last: no row is past the end
      for (int r = r0; r < rows; r += pass, row += row_step, dst += dst_step)
        copy_unit<U, kLead>(dst, row, u, row_bytes, true);
    } else {
      for (int r = r0; r < rows; r += pass, row += row_step, dst += dst_step) {
        const bool ok = r < rows_valid;
        copy_unit<U, kLead>(dst, ok ? row : src0, u, row_bytes, ok);
      }
    }
  } else {  // rows longer than kThreads units (wide f32 rows): every thread on every row
#pragma unroll 1
    for (int r = 0; r < rows; ++r) {
      const bool ok = r < rows_valid;
      const uint8_t* row = ok ? src0 + r * stride : src0;
#pragma unroll 1
      for (int u = tid; u < per_row; u += kThreads)
        copy_unit<U, kLead>(dst0 + r * sstride + U * u, row, u, row_bytes, ok);
    }
  }
}

// One thread's share of the tile copy of a contiguous tensor in 16-byte units (aligned rows, or
// rows with one lead per CTA: see copy_rows): unit u of rows r0, r0 + pass, ... of every tile,
// a few instructions to work out (the general path's per-tile setup, page lookup and unit
// dispatch included, was ~145 instructions per warp and tile, ~18% of all executed for q4_0 at
// 1M tokens; kept live across the loop instead it made the kernel spill).
struct TileCopy {
  int64_t src_off;  // from the tile's first row: r0 * stride + 16 * u - lead
  int32_t dst_off;  // from the tile's slot base: r0 * sstride + 16 * u
  int32_t r0;       // first row (>= bk: this thread copies nothing of this tensor)
  int32_t n;        // bytes read per row, 1..16
  int32_t lead;     // the CTA's lead (0 for aligned rows)
};

__device__ __forceinline__ TileCopy tile_copy_plan(const uint8_t* base, int64_t stride,
                                                   int row_bytes, bool lead16, const FastDiv& units,
                                                   int pass, int sstride, int bk, int tid) {
  TileCopy c;
  const int per_row = units.d;
  c.r0 = fdiv(tid, units);
  const int u = tid - c.r0 * per_row;
  c.lead = lead16 ? static_cast<int>(reinterpret_cast<uintptr_t>(base) & 15) : 0;
  c.n = min(16, c.lead + row_bytes - 16 * u);
  if (c.r0 >= pass || c.n <= 0) c.r0 = bk;  // a unit past every row's end: nothing to copy
  c.src_off = int64_t{c.r0} * stride + 16 * u - c.lead;
  c.dst_off = c.r0 * sstride + 16 * u;
  return c;
}

// The tile of rows_valid (>= 1) rows from `row0` (the tile's first row) into `dst0`; rows from
// rows_valid to bk are zero-filled, their source the tile's first row, not read.
__device__ __forceinline__ void copy_tile(const TileCopy& c, const uint8_t* row0, int64_t stride,
                                          int rows_valid, int bk, int pass, uint8_t* dst0,
                                          int sstride) {
  const uint8_t* src = row0 + c.src_off;
  uint8_t* dst = dst0 + c.dst_off;
  const int64_t row_step = pass * stride;
  const int dst_step = pass * sstride;
  if (rows_valid >= bk) {
    for (int r = c.r0; r < bk; r += pass, src += row_step, dst += dst_step)
      cp_async<16>(dst, src, c.n);
  } else {
    const uint8_t* zero_src = row0 - c.lead;  // 16-byte aligned
    for (int r = c.r0; r < bk; r += pass, src += row_step, dst += dst_step) {
      const bool ok = r < rows_valid;
      cp_async<16>(dst, ok ? src : zero_src, ok ? c.n : 0);
    }
  }
}

// One paged tensor as a CTA's tile copies see it: the sequence's page table, the bytes from one
// page to the next, the pages in the pool.
struct PagedRows {
  const int32_t* table;
  int64_t page_bytes;
  uint32_t n_pages;
};

// copy_tile over a paged tensor: the same share of rows and units per thread, each row found
// through the page table (key / page_size by div_page: keys below 2^31), the table entries of four
// rows loaded before their copies are issued, so that their latencies overlap (the general path
// walked the tile page by page, one dependent table load per page run: f16 at page 16 ran 1.33x
// the contiguous time). A page number outside 0 .. n_pages - 1 (an engine's bug in a table on
// the device) reads page 0 instead, never memory outside the pool, and sets *bad_input: the
// epilogue writes NaN for the sequence.
__device__ __forceinline__ void copy_tile_paged(const TileCopy& c, const uint8_t* base,
                                                int64_t stride, const PagedRows& pr,
                                                const FastDiv& div_page, int key0, int rows_valid,
                                                int bk, int pass, uint8_t* dst0, int sstride,
                                                int* bad_input) {
  constexpr int kBatch = 4;
  const int64_t unit_off = c.src_off - int64_t{c.r0} * stride;  // 16 * u - lead
  const uint8_t* zero_src = base - c.lead;  // 16-byte aligned; the zero-filled rows' source
  uint8_t* dst = dst0 + c.dst_off;
  const int dst_step = pass * sstride;
  bool bad = false;
  for (int r = c.r0; r < bk; r += kBatch * pass) {
    int32_t slot[kBatch];
    int in_page[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int rj = r + j * pass, key = key0 + rj;
      const int page = fdiv(key, div_page);
      in_page[j] = key - page * div_page.d;
      slot[j] = rj < rows_valid ? __ldg(pr.table + page) : 0;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int rj = r + j * pass;
      if (rj >= bk) break;
      const bool ok = rj < rows_valid;
      const bool outside = static_cast<uint32_t>(slot[j]) >= pr.n_pages;
      bad |= ok && outside;
      const int64_t page = outside ? 0 : slot[j];
      const uint8_t* src = base + unit_off + page * pr.page_bytes + int64_t{in_page[j]} * stride;
      cp_async<16>(dst, ok ? src : zero_src, ok ? c.n : 0);
      dst += dst_step;
    }
  }
  if (bad) atomicOr(bad_input, 1);
}

// Copies the K and V rows of keys key0 .. key0 + bk - 1 into stage `st`; rows past k_hi are
// zero-filled. Per row of `per_row` copy units, thread tid copies unit tid % per_row of rows
// tid / per_row, + rows_per_pass, ... (the kThreads % per_row threads left over idle), walking
// its source and destination by constant steps: a few instructions per unit. (The previous
// walk over (row, unit) pairs with a carry, a 64-bit multiply and the unit-size dispatch per
// unit took about 50 instructions per copied unit: 40% of all the kernel executed for q4_0.)
// Tensors copied in 16-byte units (the usual case: k_fast / v_fast) take copy_tile (contiguous) or
// copy_tile_paged, this thread's unit and rows worked out from tid in a few instructions per
// tile; 8- or 4-byte units the general path below. Quantized tiles of contiguous caches go by TMA
// instead (p.tma_k / p.tma_v). The members are the CTA's constants, set in the kernel's prologue.
// kTma: the kernel's K or V type can go by TMA (not both float: tma_copyable); else the TMA code
// is compiled out (p.tma_bytes is 0 for such kernels). kPagedRows: copy_tile_paged is compiled in
// (the float kernels for paged caches, decode_kernel's PR).
template <bool kTma, bool kPagedRows>
struct TileIssue {
  uint8_t* stage_base;
  const uint8_t* k_base;
  const uint8_t* v_base;
  uint64_t* tile_bar;  // per stage: the TMA copies' completion
  int* bad_input;      // set when a page table entry is outside 0 .. n_pages - 1
  int64_t k_hi;
  int k_tile_bytes, kvh, seq, tid;
  // 16-byte units, rows of at most kThreads units, and contiguous, or paged with keys below 2^31
  // in a kPagedRows kernel: copy_tile / copy_tile_paged; else the general path below.
  bool k_fast, v_fast;

  // One TMA tensor's copies of the tile at key into ks: a whole tile as one box of bk rows, a
  // range's last partial tile as n_box step boxes of tma_box rows.
  __device__ __forceinline__ void tma_tile(const DecodeParams& p, const TensorMapBytes* tile_map,
                                           const TensorMapBytes* step_map, uint8_t* ks, int sstride,
                                           int64_t head_stride, int key, int n_box,
                                           uint64_t* bar) const {
    const int x = (kvh * static_cast<int>(head_stride)) & ~15;
    if (n_box == 0) {
      tma_load_3d(ks, tile_map, x, key, seq, bar);
      return;
    }
    for (int b = 0; b < n_box; ++b)
      tma_load_3d(ks + b * p.tma_box * sstride, step_map, x, key + b * p.tma_box, seq, bar);
  }

  // One lane's box of a paged tensor (kWhich 0: K, 1: V; see tma_paged_tile).
  template <int kWhich>
  __device__ __forceinline__ void tma_paged_boxes(const DecodeParams& p, uint8_t* ks, int key0,
                                                  int n_box, uint64_t* bar) const {
    const int b = tid & 15;  // n_box <= 16: bk <= kMaxTileKeys (decode_plan.cpp)
    if (b >= n_box) return;
    const int32_t* table =
        kWhich == 0 ? p.k_pages + int64_t{seq} * p.k_pps : p.v_pages + int64_t{seq} * p.v_pps;
    const int key = key0 + b * kPagedTmaBox;
    const int page = fdiv(key, p.div_page);
    int32_t slot = __ldg(table + page);
    if (static_cast<uint32_t>(slot) >= static_cast<uint32_t>(kWhich == 0 ? p.k_np : p.v_np)) {
      atomicOr(bad_input, 1);
      slot = 0;
    }
    const int sstride = kWhich == 0 ? p.sk_stride : p.sv_stride;
    const int x = (kvh * static_cast<int>(kWhich == 0 ? p.k_sh : p.v_sh)) & ~15;
    fence_proxy_async();  // this thread's copy after the stage's reads (see operator())
    tma_load_3d(ks + (kWhich == 0 ? 0 : k_tile_bytes) + b * kPagedTmaBox * sstride,
                kWhich == 0 ? &p.k_map : &p.v_map, x, key - page * p.page_size, slot, bar);
  }

  // A paged tensor's tile by TMA: one kPagedTmaBox-row box per 16-key step that holds a key of
  // the range (no box crosses a page, tma_tile_view), its page found in the sequence's table by
  // the lane that issues it: lanes 0-15 of warp 0 K's boxes, 16-31 V's, so that the table loads
  // overlap. (A loop over more boxes per lane, or one body for both tensors with their
  // parameters selected by lane, made two-n-tile kernels spill.) Lane 0 sets the transaction
  // count of all of them (a copy may complete before: the count may go below zero until then,
  // and the phase completes only after that arrival). A page number outside 0 .. n_pages - 1
  // reads page 0 and sets *bad_input (the epilogue writes NaN).
  __device__ __forceinline__ void tma_paged_tile(const DecodeParams& p, uint8_t* ks, int key0,
                                                 int rows_valid, uint64_t* bar) const {
    const int n_box = (rows_valid + kPagedTmaBox - 1) / kPagedTmaBox;
    if (tid == 0) mbar_arrive_expect_tx(bar, static_cast<uint32_t>(n_box * p.tma_step_bytes));
    if (tid < 16) {
      if (p.tma_k) tma_paged_boxes<0>(p, ks, key0, n_box, bar);
    } else if (p.tma_v) {
      tma_paged_boxes<1>(p, ks, key0, n_box, bar);
    }
  }

  __device__ __forceinline__ void operator()(const DecodeParams& p, int64_t key0, int st) const {
    uint8_t* ks = stage_base + st * p.smem_kv_bytes;
    const int rows_valid = static_cast<int>(min(int64_t{p.bk}, k_hi - key0));  // >= 1
    if (kTma && p.tma_bytes > 0 && p.page_size > 0) {
      if (tid < 32) tma_paged_tile(p, ks, static_cast<int>(key0), rows_valid, &tile_bar[st]);
    } else if (kTma && p.tma_bytes > 0 && tid == 0) {
      // Per TMA tensor, one copy of a whole tile, or for the last tile of a range that ends
      // inside it with at most tma_step_rows keys the step boxes its keys are in (a 4K call's
      // 64-key splits copy 64 rows, not a 128-256-key tile). Rows past k_hi in the last box are
      // other keys' (the kernel zeroes those of its last 16-key step after the copy, see the tile
      // loop; past the tensor's capacity TMA fills zeros). The fence puts the stage's earlier
      // generic accesses (the last tile's reads, Q, zeroed rows; ordered before this thread by the
      // loop's barrier) before the copies' writes. (Leaving it out of refills, which follow reads
      // only, changed nothing measurable: bench/results/2026-12-03-h200-tile-sync-ab at b16e572.)
      fence_proxy_async();
      int n_box = 0;  // 0: the whole tile in one box
      if (rows_valid <= p.tma_step_rows)
        for (int r = 0; r < rows_valid; r += p.tma_box) ++n_box;
      mbar_arrive_expect_tx(
          &tile_bar[st],
          static_cast<uint32_t>(n_box == 0 ? p.tma_bytes : n_box * p.tma_step_bytes));
      // Boxes start at 16-byte aligned bytes (TMA's condition): the row follows its lead, as
      // with the 16-byte cp.async copies of unaligned rows. (Step boxes start 128-byte aligned
      // in shared memory: tma_box * stride is a multiple of 128, pinned by the layout test.)
      const int key = static_cast<int>(key0);
      if (p.tma_k)
        tma_tile(p, &p.k_map, &p.k_step_map, ks, p.sk_stride, p.k_sh, key, n_box, &tile_bar[st]);
      if (p.tma_v)
        tma_tile(p, &p.v_map, &p.v_step_map, ks + k_tile_bytes, p.sv_stride, p.v_sh, key, n_box,
                 &tile_bar[st]);
    }
    // Unrolled: rolled, the loop keeps both tensors' parameters live as selects and the kernel
    // spills (it runs at its 128-register bound).
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      if (kTma && (which == 0 ? p.tma_k : p.tma_v)) continue;
      const uint8_t* base = which == 0 ? k_base : v_base;
      const int64_t stride = which == 0 ? p.k_st : p.v_st;
      const int row_bytes = which == 0 ? p.k_row_bytes : p.v_row_bytes;
      const int unit = which == 0 ? p.k_unit : p.v_unit;
      const int sstride = which == 0 ? p.sk_stride : p.sv_stride;
      uint8_t* dst0 = which == 0 ? ks : ks + k_tile_bytes;
      if (which == 0 ? k_fast : v_fast) {
        const int pass = which == 0 ? p.k_pass : p.v_pass;
        const TileCopy c =
            tile_copy_plan(base, stride, row_bytes, which == 0 ? p.k_lead16 : p.v_lead16,
                           which == 0 ? p.div_k_units : p.div_v_units, pass, sstride, p.bk, tid);
        if (!kPagedRows || p.page_size == 0) {  // (k_fast: contiguous unless kPagedRows)
          copy_tile(c, base + key0 * stride, stride, rows_valid, p.bk, pass, dst0, sstride);
        } else {
          const PagedRows pr{which == 0 ? p.k_pages + int64_t{blockIdx.z} * p.k_pps
                                        : p.v_pages + int64_t{blockIdx.z} * p.v_pps,
                             which == 0 ? p.k_sp : p.v_sp,
                             static_cast<uint32_t>(which == 0 ? p.k_np : p.v_np)};
          copy_tile_paged(c, base, stride, pr, p.div_page, static_cast<int>(key0), rows_valid, p.bk,
                          pass, dst0, sstride, bad_input);
        }
        continue;
      }
      // Contiguous: the whole tile is one run of rows `stride` apart. Paged: one run per page
      // the tile touches (its rows are `stride` apart inside the page), the page found in the
      // sequence's table; one division per tile (keys < 2^32: 32 bits), later pages start at
      // their first token.
      const auto ups = static_cast<uint32_t>(p.page_size);
      uint32_t page = 0, in_page = 0;
      const int32_t* table = nullptr;
      if (p.page_size > 0) {
        const auto key = static_cast<uint32_t>(key0);
        page = key / ups;
        in_page = key - page * ups;
        table = which == 0 ? p.k_pages + int64_t{blockIdx.z} * p.k_pps
                           : p.v_pages + int64_t{blockIdx.z} * p.v_pps;
      }
      int seg = 0;
      do {
        const uint8_t* src0;
        int seg_rows;
        if (p.page_size > 0) {
          // Rows past the end (zero-filled) need no page. A page number outside 0 .. n_pages - 1
          // (an engine's bug in a table on the device) reads page 0 instead, never memory
          // outside the pool, and the epilogue writes NaN for the sequence. (Every thread reads
          // the same entry; thread 0 alone flags it, so no two threads write the flag.)
          int32_t slot = seg < rows_valid ? table[page] : 0;
          if (static_cast<uint32_t>(slot) >= static_cast<uint32_t>(which == 0 ? p.k_np : p.v_np)) {
            if (tid == 0) *bad_input = 1;
            slot = 0;
          }
          src0 = base + int64_t{slot} * (which == 0 ? p.k_sp : p.v_sp) + int64_t{in_page} * stride;
          seg_rows = min(p.bk - seg, static_cast<int>(ups - in_page));
          ++page;
          in_page = 0;
        } else {
          src0 = base + key0 * stride;
          seg_rows = p.bk;
        }
        uint8_t* dst = dst0 + seg * sstride;
        const int valid = max(0, rows_valid - seg);
        const FastDiv& units = which == 0 ? p.div_k_units : p.div_v_units;
        const int pass = which == 0 ? p.k_pass : p.v_pass;
        const bool lead16 = which == 0 ? p.k_lead16 : p.v_lead16;
        if (unit == 16 && lead16) {
          copy_rows<16, true>(src0, stride, valid, seg_rows, row_bytes, units, pass, dst, sstride,
                              tid);
        } else if (unit == 16) {
          copy_rows<16, false>(src0, stride, valid, seg_rows, row_bytes, units, pass, dst, sstride,
                               tid);
        } else if (unit == 8) {
          copy_rows<8, false>(src0, stride, valid, seg_rows, row_bytes, units, pass, dst, sstride,
                              tid);
        } else {
          copy_rows<4, true>(src0, stride, valid, seg_rows, row_bytes, units, pass, dst, sstride,
                             tid);
        }
        seg += seg_rows;
      } while (seg < p.bk);
    }
  }
};

}  // namespace kvflash::cuda::decode
