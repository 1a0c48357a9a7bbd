// The tile copy of the CUDA decode kernel: K and V rows from global memory into a shared-memory
// stage with cp.async, in 16-, 8- or 4-byte units (copy_mode in decode_plan.cpp picks the unit),
// the general path (paged tensors, any unit) and the short path of contiguous tensors in 16-byte
// units. Used by decode_kernel.cuh's issue_tile for the tiles TMA does not copy (float rows,
// paged caches, slots over 256 bytes, strides TMA cannot describe).
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

}  // namespace kvflash::cuda::decode
