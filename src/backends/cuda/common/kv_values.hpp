// How the CUDA kernels read one row of each KV type, value by value, written once for the host and
// the device so that a CPU test can check every index and bit against dequantize_row_rotated.
//
// K rows feed the B operand of mma.m16n8k16 (the query rows are A). The reduction over head dims
// may visit the dims in any order as long as Q uses the same order, so each type picks the order
// that makes a thread's eight values contiguous bytes: for 32-dim block b and thread t (lane % 4),
// k_values() returns the eight values whose dims are k_dim(type, b, t, j), j = 0..7, and the
// fragment slots are j = 0,1 -> chunk 2b k 2t,2t+1; j = 2,3 -> chunk 2b k 2t+8,2t+9; j = 4..7 the
// same for chunk 2b+1. Turbo types are read in the rotated domain (norm * centroid).
//
// V rows feed the B operand of the P.V product, one value per (key, dim): v_value().
#pragma once

#include <cstdint>
#include <limits>

#include "kvflash/formats.hpp"
#include "kvflash/state.hpp"  // KVFLASH_HD

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif
#if defined(__CUDA_ARCH__)
#define KVFLASH_UNROLL _Pragma("unroll")
#else
#define KVFLASH_UNROLL
#endif

namespace kvflash::cuda {

KVFLASH_HD uint16_t load_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

KVFLASH_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    const float f = static_cast<float>(mant) * 5.9604644775390625e-8f;  // 2^-24
    uint32_t fb;
    __builtin_memcpy(&fb, &f, 4);
    bits = sign | fb;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float out;
  __builtin_memcpy(&out, &bits, 4);
  return out;
#endif
}

KVFLASH_HD float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t{h} << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float out;
  __builtin_memcpy(&out, &bits, 4);
  return out;
#endif
}

// One fp8 code as a float (formats.hpp: E4M3 "fn", whose one NaN code per sign has no fp16
// twin, and E5M2, the top byte of an fp16); exact for every code.
template <KvType T>
KVFLASH_HD float fp8_to_float(uint32_t x) {
  static_assert(is_fp8(T));
  if constexpr (T == KvType::fp8_e5m2) {
    return half_to_float(static_cast<uint16_t>((x & 0xffu) << 8));
  } else {
    // The fp16 with E4M3's bits shifted into place is the value over 2^8 (bias 15, not 7).
    if ((x & 0x7fu) == 0x7fu) {
#if defined(__CUDA_ARCH__)
      return __int_as_float(0x7fc00000);
#else
      return std::numeric_limits<float>::quiet_NaN();
#endif
    }
    return half_to_float(static_cast<uint16_t>(((x & 0x80u) << 8) | ((x & 0x7fu) << 7))) * 256.0f;
  }
}

// Bytes of one turbo group (norm + planes).
template <KvType T>
constexpr int turbo_group_bytes() {
  return traits(T).block_bytes;
}

// The dim (index into the padded, rotated-for-turbo row) of value j of thread t in 32-dim block b.
KVFLASH_HD int k_dim(KvType type, int b, int t, int j) {
  switch (type) {
    case KvType::q4_0: {
      // Byte i holds dims i (low nibble) and i + 16 (high). Thread t reads bytes 4t..4t+3 as
      // one word w; the kernel's fragment pairs are the nibbles that one mask of w selects
      // (bytes 0 and 2, then 1 and 3; low nibbles, then high), hence the order 0, 2, 1, 3.
      constexpr int order[4] = {0, 2, 1, 3};
      return 32 * b + (j < 4 ? 0 : 16) + 4 * t + order[j & 3];
    }
    case KvType::turbo4: {
      // Byte i of the group holds codes i (low) and i + 64 (high); thread t reads bytes
      // 16bb + 4t .. +3, in the same 0, 2, 1, 3 order as q4_0.
      constexpr int order[4] = {0, 2, 1, 3};
      const int g = b >> 2, bb = b & 3;
      return 128 * g + (j < 4 ? 0 : 64) + 16 * bb + 4 * t + order[j & 3];
    }
    case KvType::turbo2:
    case KvType::turbo3: {
      // Plane byte i holds codes i, i + 32, i + 64, i + 96 (2 bits each); thread t reads bytes
      // x = 0, 1 at i0 = 8bb + 2t. A 0x3333 mask of those 16 bits selects planes y = 0 and 2 of
      // both bytes, the next shift planes 1 and 3: value j is byte (j >> 1) & 1, plane
      // 2 (j & 1) + (j >> 2).
      const int g = b >> 2, bb = b & 3;
      const int x = (j >> 1) & 1, y = 2 * (j & 1) + (j >> 2);
      return 128 * g + 8 * bb + 2 * t + x + 32 * y;
    }
    default:
      return 32 * b + 8 * t + j;
  }
}

// The eight K values of thread t in 32-dim block b, see k_dim. `lut` holds the type's centroids
// (turbo only). Float types read 32 bytes-aligned vectors; quantized types read 2-byte words.
template <KvType T>
KVFLASH_HD void k_values(const uint8_t* row, int b, int t, const float* lut, float (&x)[8]) {
  if constexpr (T == KvType::f32) {
    const float* p = reinterpret_cast<const float*>(row) + 32 * b + 8 * t;
    KVFLASH_UNROLL
    for (int j = 0; j < 8; ++j) x[j] = p[j];
  } else if constexpr (T == KvType::f16 || T == KvType::bf16) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + 32 * b + 8 * t;
#if defined(__CUDA_ARCH__)
    // Float rows sit 16-byte aligned in shared memory: one 16-byte load.
    const uint4 w = *reinterpret_cast<const uint4*>(p);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
    KVFLASH_UNROLL
    for (int j = 0; j < 8; ++j) {
      const auto h = static_cast<uint16_t>(words[j >> 1] >> (16 * (j & 1)));
      x[j] = T == KvType::f16 ? half_to_float(h) : bf16_to_float(h);
    }
#else
    for (int j = 0; j < 8; ++j) x[j] = T == KvType::f16 ? half_to_float(p[j]) : bf16_to_float(p[j]);
#endif
  } else if constexpr (is_fp8(T)) {
    const uint8_t* p = row + 32 * b + 8 * t;
    KVFLASH_UNROLL
    for (int j = 0; j < 8; ++j) x[j] = fp8_to_float<T>(p[j]);
  } else if constexpr (T == KvType::q8_0) {
    const uint8_t* blk = row + 34 * b;
    const float d = half_to_float(load_u16(blk));
    KVFLASH_UNROLL
    for (int w = 0; w < 4; ++w) {
      const uint16_t q = load_u16(blk + 2 + 8 * t + 2 * w);
      x[2 * w] = d * static_cast<float>(static_cast<int8_t>(q & 0xff));
      x[2 * w + 1] = d * static_cast<float>(static_cast<int8_t>(q >> 8));
    }
  } else if constexpr (T == KvType::q4_0) {
    const uint8_t* blk = row + 18 * b;
    const float d = half_to_float(load_u16(blk));
    const uint32_t q =
        uint32_t{load_u16(blk + 2 + 4 * t)} | (uint32_t{load_u16(blk + 4 + 4 * t)} << 16);
    constexpr int order[4] = {0, 2, 1, 3};  // see k_dim
    KVFLASH_UNROLL
    for (int j = 0; j < 4; ++j) {
      x[j] = d * static_cast<float>(static_cast<int>((q >> (8 * order[j])) & 15u) - 8);
      x[4 + j] = d * static_cast<float>(static_cast<int>((q >> (8 * order[j] + 4)) & 15u) - 8);
    }
  } else if constexpr (T == KvType::turbo4) {
    const uint8_t* grp = row + 66 * (b >> 2);
    const float n = half_to_float(load_u16(grp));
    const int off = 2 + 16 * (b & 3) + 4 * t;
    const uint32_t q = uint32_t{load_u16(grp + off)} | (uint32_t{load_u16(grp + off + 2)} << 16);
    constexpr int order[4] = {0, 2, 1, 3};  // see k_dim
    KVFLASH_UNROLL
    for (int j = 0; j < 4; ++j) {
      x[j] = n * lut[(q >> (8 * order[j])) & 15u];
      x[4 + j] = n * lut[(q >> (8 * order[j] + 4)) & 15u];
    }
  } else if constexpr (T == KvType::turbo2 || T == KvType::turbo3) {
    constexpr int gb = turbo_group_bytes<T>();
    const uint8_t* grp = row + gb * (b >> 2);
    const float n = half_to_float(load_u16(grp));
    const int i0 = 8 * (b & 3) + 2 * t;  // plane byte of codes i0, i0 + 32, ... (and i0 + 1)
    const uint32_t q = load_u16(grp + 2 + i0);
    uint32_t h = 0;
    if constexpr (T == KvType::turbo3) h = load_u16(grp + 34 + (i0 & 15));
    const int hs = i0 >> 4;  // code c's high bit is bit c / 16 of qh[c % 16]
    KVFLASH_UNROLL
    for (int j = 0; j < 8; ++j) {
      const int byte = (j >> 1) & 1, m = 2 * (j & 1) + (j >> 2);  // see k_dim
      uint32_t code = (q >> (8 * byte + 2 * m)) & 3u;
      if constexpr (T == KvType::turbo3) code |= ((h >> (8 * byte + hs + 2 * m)) & 1u) << 2;
      x[j] = n * lut[code];
    }
  }
}

// Value d of a V row (padded, rotated-for-turbo domain).
template <KvType T>
KVFLASH_HD float v_value(const uint8_t* row, int d, const float* lut) {
  if constexpr (T == KvType::f32) {
    return reinterpret_cast<const float*>(row)[d];
  } else if constexpr (T == KvType::f16) {
    return half_to_float(reinterpret_cast<const uint16_t*>(row)[d]);
  } else if constexpr (T == KvType::bf16) {
    return bf16_to_float(reinterpret_cast<const uint16_t*>(row)[d]);
  } else if constexpr (is_fp8(T)) {
    return fp8_to_float<T>(row[d]);
  } else if constexpr (T == KvType::q8_0) {
    const uint8_t* blk = row + 34 * (d >> 5);
    return half_to_float(load_u16(blk)) *
           static_cast<float>(static_cast<int8_t>(blk[2 + (d & 31)]));
  } else if constexpr (T == KvType::q4_0) {
    const uint8_t* blk = row + 18 * (d >> 5);
    const int j = d & 31;
    const int q = (blk[2 + (j & 15)] >> (4 * (j >> 4))) & 15;
    return half_to_float(load_u16(blk)) * static_cast<float>(q - 8);
  } else {
    constexpr int gb = turbo_group_bytes<T>();
    const uint8_t* grp = row + gb * (d >> 7);
    const int i = d & 127;
    uint32_t code;
    if constexpr (T == KvType::turbo4) {
      code = (grp[2 + (i & 63)] >> (4 * (i >> 6))) & 15u;
    } else {
      code = (grp[2 + (i & 31)] >> (2 * (i >> 5))) & 3u;
      if constexpr (T == KvType::turbo3) code |= ((grp[34 + (i & 15)] >> (i >> 4)) & 1u) << 2;
    }
    return half_to_float(load_u16(grp)) * lut[code];
  }
}

// The V dims of the P.V B operands where a warp's slice is 128 dims (16 tiles of 8): lane n
// (n = lane / 4, 0..7) holds dim v_dim16(type, n, i) of the slice in tile i (0..15), the output
// rows are put back in dim order by v_tile16. The order makes a lane's 16 dims the fewest bytes of
// a row, each read whole: q4_0, 8 bytes of one block (both nibbles: dims j and j + 16); turbo2 /
// turbo3, 4 plane bytes (all four 2-bit codes: dims b + 32y; turbo3's high bits of those dims sit
// in 4 bytes); turbo4, 8 bytes (both nibbles: dims b and b + 64). Other types: 16 consecutive dims.
KVFLASH_HD int v_dim16(KvType type, int n, int i) {
  switch (type) {
    case KvType::q4_0:  // u16 word w = i >> 2 of the lane's 8 bytes, byte e, nibble h
      return 32 * (n >> 1) + 8 * (n & 1) + 2 * (i >> 2) + (i & 1) + 16 * ((i >> 1) & 1);
    case KvType::turbo2:
    case KvType::turbo3:  // u16 word w = (i >> 1) & 1, byte e = i & 1, plane y = i >> 2
      return 4 * n + 2 * ((i >> 1) & 1) + (i & 1) + 32 * (i >> 2);
    case KvType::turbo4:  // u16 word w = i >> 2, byte e = i & 1, nibble h = (i >> 1) & 1
      return 8 * n + 2 * (i >> 2) + (i & 1) + 64 * ((i >> 1) & 1);
    default:
      return 16 * n + i;
  }
}
// The inverse: dim d (0..127) of the slice is tile i of lane n.
KVFLASH_HD void v_tile16(KvType type, int d, int& n, int& i) {
  switch (type) {
    case KvType::q4_0: {
      const int r = d & 31, m = r & 15;
      n = 2 * (d >> 5) + (m >> 3);
      i = 4 * ((m & 7) >> 1) + 2 * (r >> 4) + (m & 1);
      return;
    }
    case KvType::turbo2:
    case KvType::turbo3: {
      const int b = d & 31;
      n = b >> 2;
      i = 4 * (d >> 5) + (b & 3);
      return;
    }
    case KvType::turbo4: {
      const int b = d & 63;
      n = b >> 3;
      i = 4 * ((b & 7) >> 1) + 2 * (d >> 6) + (b & 1);
      return;
    }
    default:
      n = d >> 4;
      i = d & 15;
      return;
  }
}

// Dims the kernels compute over: K padded to the type's block and to whole 32-dim blocks (the
// k_values granularity), V padded to the type's block.
constexpr int32_t computed_dim_k(KvType t, int32_t d) {
  const int64_t p = padded_values(t, d);
  return static_cast<int32_t>((p + 31) / 32 * 32);
}
constexpr int32_t computed_dim_v(KvType t, int32_t d) {
  return static_cast<int32_t>(padded_values(t, d));
}

}  // namespace kvflash::cuda
