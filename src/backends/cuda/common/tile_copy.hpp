// How the CUDA kernels' tile copies read a K or V tensor (decode and prefill alike): the copy
// unit and lead rule, and the device-tensor checks every family's validate() runs. Plain host
// C++ (no CUDA header): CPU tests check it without a GPU.
#pragma once

#include <cstdint>

#include "kvflash/problem.hpp"
#include "kvflash/status.hpp"

namespace kvflash::cuda {

// How the tile copy reads a tensor's rows: 16 or 8 bytes when every row start is so aligned;
// else 16-byte units from each row's start rounded down to 16 (a "lead" of address & 15 bytes
// before the row's data in its slot) when the token stride is a multiple of 16, so that the lead
// is the same for every row of a CTA, and the widest lead still fits the shared-memory slot; else
// 4-byte units with a per-row lead of address & 3 (rows 2-byte aligned, data pointer 4-byte
// aligned). The 16-byte lead halves the copies of q4_0 and q8_0 rows (72 and 136 bytes: 8-byte
// units before) and cuts those of turbo rows (34/50/66 bytes, 2-byte aligned: 4-byte units) by 3x.
// Paged tensors also need pages that start at multiples of 16 bytes and, for 4-byte copies,
// page_size * stride_token a multiple of 4 (the kernel finds a row's alignment from its token
// index alone).
struct CopyMode {
  int32_t unit = 16;
  bool lead16 = false;
  int32_t units = 0;  // copy units per row
};
Expected<CopyMode> copy_mode(const char* which, const KvTensor& kv, KvType type, int32_t row_bytes,
                             int32_t slot_bytes, const AttentionProblem& p);

// The bytes of copy unit u (`unit` bytes each, the first starting `lead` bytes before the row)
// that hold the row's data: the rest of the unit is zero-filled, never read, as the last unit
// of the tensor's last row would reach past its end.
KVFLASH_HD constexpr int32_t unit_bytes_in_row(int32_t lead, int32_t row_bytes, int32_t unit,
                                               int32_t u) {
  const int32_t left = lead + row_bytes - u * unit;
  return left < 0 ? 0 : (left > unit ? unit : left);
}

// What every CUDA kernel family asks of the tensors (its KernelCandidate::check_tensors, after
// the family's plan check): lengths on the device, and K / V layouts that the tile copies can
// read (copy_mode) into slots of k_slot / v_slot bytes. `family` names the kernel in the message.
Status check_device_tensors(const char* family, const AttentionProblem& p,
                            const AttentionTensors& t, int32_t k_row_bytes, int32_t k_slot,
                            int32_t v_row_bytes, int32_t v_slot);

// The largest lead (row address & 15) of any (sequence, head) of a tensor: the address & 15
// repeats every 16 of each index. Paged tensors: the sequences share the pages (no stride).
int64_t widest_lead16(const KvTensor& kv, const AttentionProblem& p);

}  // namespace kvflash::cuda
