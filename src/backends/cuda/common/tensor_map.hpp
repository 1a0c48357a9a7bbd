// TMA tensor maps for the CUDA kernels: the opaque bytes a kernel parameter carries, and their
// encoding on the host (tensor_map.cpp: cuTensorMapEncodeTiled through the runtime, no libcuda
// link). Plain C++: no CUDA headers here.
#pragma once

#include <cstdint>

#include "backends/cuda/common/kv_tma_view.hpp"

namespace kvflash::cuda {

// A CUDA tensor map (CUtensorMap: 128 opaque bytes, 64-byte aligned), encoded on the host by
// cuTensorMapEncodeTiled; kept opaque here so that this header needs no CUDA headers.
struct alignas(64) TensorMapBytes {
  uint64_t w[16];
};

// A map of a 3-D uint8 tensor (dims[0] innermost, in bytes; strides in bytes of dims 1 and 2)
// copied in boxes of box[0] x box[1] x box[2], L2 promotion of 256 bytes, zeros out of bounds;
// rows land as they are, or with swizzle128 in the 128-byte swizzle of the warpgroup MMA's
// operand tiles (box[0] then 128 bytes: one 64-column atom of 16-bit values; the destination
// 1024-byte aligned). False where the driver offers no encoder or rejects the description.
bool encode_tensor_map_u8_3d(TensorMapBytes& map, const void* data, const uint64_t (&dims)[3],
                             const uint64_t (&strides)[2], const uint32_t (&box)[3],
                             bool swizzle128 = false);

// The map of a K or V tensor's boxes (kv_tma_view): box_bytes x box_rows from a row's start,
// for every outer index.
bool encode_kv_tma_map(TensorMapBytes& map, const void* data, const KvTmaView& view,
                       int64_t stride_token, int32_t box_bytes, int32_t box_rows, bool swizzle128);

}  // namespace kvflash::cuda
