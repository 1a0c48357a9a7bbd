#include <cuda.h>  // CUtensorMap and its enums; the encoder is reached through the runtime
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "backends/cuda/common/tensor_map.hpp"

namespace kvflash::cuda {
namespace {

// cuTensorMapEncodeTiled of the driver, reached through the runtime (no libcuda link); null where
// the driver does not offer it (then every tile is copied with cp.async).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

bool encode_tensor_map_u8_3d(TensorMapBytes& map, const void* data, const uint64_t (&dims)[3],
                             const uint64_t (&strides)[2], const uint32_t (&box)[3],
                             bool swizzle128) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t d[3] = {dims[0], dims[1], dims[2]};
  const cuuint64_t st[2] = {strides[0], strides[1]};
  const cuuint32_t b[3] = {box[0], box[1], box[2]};
  const cuuint32_t steps[3] = {1, 1, 1};
  static_assert(sizeof(TensorMapBytes) == sizeof(CUtensorMap));
  return encode(reinterpret_cast<CUtensorMap*>(&map), CU_TENSOR_MAP_DATA_TYPE_UINT8, 3,
                const_cast<void*>(data), d, st, b, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool encode_kv_tma_map(TensorMapBytes& map, const void* data, const KvTmaView& view,
                       int64_t stride_token, int32_t box_bytes, int32_t box_rows, bool swizzle128) {
  const uint64_t dims[3] = {static_cast<uint64_t>(view.extent), static_cast<uint64_t>(view.rows),
                            static_cast<uint64_t>(view.outer)};
  const uint64_t strides[2] = {static_cast<uint64_t>(stride_token),
                               static_cast<uint64_t>(view.outer_stride)};
  const uint32_t box[3] = {static_cast<uint32_t>(box_bytes), static_cast<uint32_t>(box_rows), 1};
  return encode_tensor_map_u8_3d(map, data, dims, strides, box, swizzle128);
}

}  // namespace kvflash::cuda
