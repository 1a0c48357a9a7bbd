// The CUDA side of the harness: the case's inputs staged in device memory, and device mirrors of
// the guarded output buffers. A mirror has the host GuardedBuffer's exact layout (head guard,
// payload, tail guard), its guards filled on the device with the same sentinel; after the run the
// whole allocation is copied back over the host buffer, so the host checks (sentinels, NaN, NMSE,
// lse) judge the device run unchanged.
#pragma once

#include <cstdint>

#include "guarded_buffer.hpp"
#include "inputs.hpp"
#include "kvflash/device.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/status.hpp"

namespace kvflash::parity {

class DeviceGuardedBuffer {
 public:
  // Allocates the mirror of `host`, fills it entirely with the sentinel on the device, then
  // uploads host's payload. Enqueued on `stream` (nullptr: done when it returns).
  static Expected<DeviceGuardedBuffer> mirror(const GuardedBuffer& host, void* stream);

  void* data() const;  // the device payload, host.data()'s counterpart
  size_t size() const { return payload_bytes_; }

  // Payload only (guards untouched): host -> device.
  Status upload_payload(const GuardedBuffer& host, void* stream) const;
  // The whole allocation, guards included: device -> host. Synchronize `stream` before reading.
  Status download(GuardedBuffer& host, void* stream) const;

 private:
  gpu::DeviceBuffer buf_;
  size_t payload_bytes_ = 0;
};

// The case's inputs in device memory: Q, K and V (guarded mirrors of the host caches, so the
// layout, unused rows and strides are the host's), kv_lens, mask, sinks and ALiBi slopes. kv_lens
// is always a device array, also where the host path passes none (every sequence full): CUDA
// kernels read the lengths on the device (registry.hpp), so that one captured graph serves every
// length. A paged case's table is a device copy too (K and V point at it), and so are a ragged
// case's q_offsets (read on the device like kv_lens).
struct DeviceInputs {
  gpu::DeviceBuffer q, kv_lens, mask, sinks, alibi, page_table, q_offsets;
  DeviceGuardedBuffer k, v;
  // The same tensors as CaseInputs::tensors(), with device pointers; out and lse left null.
  AttentionTensors tensors;
};

// Staged with copies that are complete when it returns.
Expected<DeviceInputs> stage_inputs(const CaseInputs& in);

}  // namespace kvflash::parity
