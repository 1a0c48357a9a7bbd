#include "device_buffers.hpp"

#include <cstddef>
#include <vector>

namespace kvflash::parity {
namespace {

// A device copy of a host vector; empty: no allocation, and the tensor pointer stays null.
template <class T>
Status upload(const std::vector<T>& host, gpu::DeviceBuffer& dev) {
  if (host.empty()) return {};
  Expected<gpu::DeviceBuffer> b = gpu::DeviceBuffer::allocate(host.size() * sizeof(T));
  if (!b) return b.error();
  dev = std::move(*b);
  return gpu::copy(dev.data(), host.data(), dev.size());
}

template <class T>
const T* ptr_or_null(const gpu::DeviceBuffer& b) {
  return static_cast<const T*>(b.data());
}

// The device counterpart of a host cache tensor: same strides, data at the same payload offset.
KvTensor rebase(const KvTensor& host_t, const GuardedBuffer& host, const DeviceGuardedBuffer& dev) {
  KvTensor t = host_t;
  const std::ptrdiff_t offset =
      static_cast<const std::byte*>(host_t.data) - static_cast<const std::byte*>(host.data());
  t.data = static_cast<const std::byte*>(dev.data()) + offset;
  return t;
}

}  // namespace

Expected<DeviceGuardedBuffer> DeviceGuardedBuffer::mirror(const GuardedBuffer& host, void* stream) {
  DeviceGuardedBuffer d;
  Expected<gpu::DeviceBuffer> b = gpu::DeviceBuffer::allocate(host.allocation_size());
  if (!b) return b.error();
  d.buf_ = std::move(*b);
  d.payload_bytes_ = host.size();
  if (Status s = gpu::fill(d.buf_.data(), GuardedBuffer::kSentinel, d.buf_.size(), stream); !s)
    return s.error();
  if (Status s = d.upload_payload(host, stream); !s) return s.error();
  return d;
}

void* DeviceGuardedBuffer::data() const {
  return static_cast<std::byte*>(buf_.data()) + GuardedBuffer::kGuardBytes;
}

Status DeviceGuardedBuffer::upload_payload(const GuardedBuffer& host, void* stream) const {
  return gpu::copy(data(), host.data(), payload_bytes_, stream);
}

Status DeviceGuardedBuffer::download(GuardedBuffer& host, void* stream) const {
  return gpu::copy(host.allocation(), buf_.data(), buf_.size(), stream);
}

Expected<DeviceInputs> stage_inputs(const CaseInputs& in) {
  DeviceInputs d;
  if (Status s = upload(in.q, d.q); !s) return s.error();
  if (Status s = upload(in.kv_lens, d.kv_lens); !s) return s.error();
  if (Status s = upload(in.mask, d.mask); !s) return s.error();
  if (Status s = upload(in.sinks, d.sinks); !s) return s.error();
  if (Status s = upload(in.alibi, d.alibi); !s) return s.error();
  if (Status s = upload(in.page_table, d.page_table); !s) return s.error();
  if (Status s = upload(in.q_offsets, d.q_offsets); !s) return s.error();
  Expected<DeviceGuardedBuffer> k = DeviceGuardedBuffer::mirror(in.k_data, nullptr);
  if (!k) return k.error();
  d.k = std::move(*k);
  Expected<DeviceGuardedBuffer> v = DeviceGuardedBuffer::mirror(in.v_data, nullptr);
  if (!v) return v.error();
  d.v = std::move(*v);

  const AttentionTensors host = in.tensors();
  AttentionTensors& t = d.tensors;
  t.q = ptr_or_null<float>(d.q);
  t.k = rebase(host.k, in.k_data, d.k);
  t.v = rebase(host.v, in.v_data, d.v);
  if (!in.page_table.empty()) t.k.page_table = t.v.page_table = ptr_or_null<int32_t>(d.page_table);
  t.kv_lens = ptr_or_null<int64_t>(d.kv_lens);
  t.mask = ptr_or_null<float>(d.mask);
  t.mask_stride = host.mask_stride;
  t.sinks = ptr_or_null<float>(d.sinks);
  t.alibi_slopes = ptr_or_null<float>(d.alibi);
  t.q_offsets = ptr_or_null<int32_t>(d.q_offsets);
  return d;
}

}  // namespace kvflash::parity
