// Part of attend_kernel_impl.inl (included there, inside its ISA namespace): the fused decode
// path, for calls of 1, 2 or 4 query rows per KV head with whole 32-value units. K and V are
// decoded straight into registers and used by every row at once (no tile stored and
// reloaded); turbo rows group by group with the norm folded into the centroid table.

// Each K and V value is used by every row right after it is decoded, so it never goes through
// memory: at GQA 4 the tile store and reload cost about as much as the arithmetic.

// Values [32u, 32u + 32) of one stored row of type T, as two 16-lane vectors. table: the
// CentroidTable of a turbo type.
template <KvType T>
[[gnu::always_inline]] inline void unit(const uint8_t* row, int32_t u, const float* table, v16& a,
                                        v16& b) {
  if constexpr (T == KvType::f32) {
    a = load(reinterpret_cast<const float*>(row) + 32 * u);
    b = load(reinterpret_cast<const float*>(row) + 32 * u + 16);
  } else if constexpr (T == KvType::f16) {
    a = half_to_float(reinterpret_cast<const uint16_t*>(row) + 32 * u);
    b = half_to_float(reinterpret_cast<const uint16_t*>(row) + 32 * u + 16);
  } else if constexpr (T == KvType::bf16) {
    float tmp[32];
    deq_bf16(row + 64 * u, 32, tmp, kLanes, nullptr);
    a = load(tmp);
    b = load(tmp + 16);
  } else if constexpr (T == KvType::q8_0) {
    const uint8_t* blk = row + u * sizeof(BlockQ8_0);
    const v16 d = splat(half_to_float1(read_u16(blk)));
    a = to_float(widen_s8(blk + 2)) * d;
    b = to_float(widen_s8(blk + 2 + kLanes)) * d;
  } else if constexpr (T == KvType::q4_0) {
    const uint8_t* blk = row + u * sizeof(BlockQ4_0);
#if KVFLASH_V16_SPLIT
    q4_0_values(blk, a, b);
#else
    const v16 lut = q4_0_table(blk);
    const v16i q = widen_u8(blk + 2);
    a = lookup(q, lut);
    b = lookup(q >> 4, lut);
#endif
  } else if constexpr (is_fp8(T)) {
    a = fp8_to_float<T>(row + 32 * u);
    b = fp8_to_float<T>(row + 32 * u + 16);
  } else {
    constexpr int Bits = T == KvType::turbo2 ? 2 : T == KvType::turbo3 ? 3 : 4;
    using Block = std::conditional_t<Bits == 2, BlockTurbo2,
                                     std::conditional_t<Bits == 3, BlockTurbo3, BlockTurbo4>>;
    const uint8_t* blk = row + (u / 4) * sizeof(Block);
    const v16 scaled = load(table) * half_to_float1(read_u16(blk));
    const int c = 2 * (u % 4);  // first of the two 16-value slices of the group
    if constexpr (Bits == 4) {
      const v16i p0 = widen_u8(blk + 2 + (c % 4) * kLanes);
      const v16i p1 = widen_u8(blk + 2 + (c % 4 + 1) * kLanes);
      a = lookup_turbo<Bits>(p0 >> (4 * (c / 4)), scaled);
      b = lookup_turbo<Bits>(p1 >> (4 * (c / 4)), scaled);
    } else {
      const v16i lo0 = widen_u8(blk + 2) >> c, lo1 = widen_u8(blk + 2 + kLanes) >> c;
      if constexpr (Bits == 2) {
        a = lookup_turbo<Bits>(lo0, scaled);
        b = lookup_turbo<Bits>(lo1, scaled);
      } else {
        // Bit s of the 1-bit plane moved to bit 2 for slice s (see turbo_codes).
        const v16i qh = widen_u8(blk + 2 + 32);
        const v16i h0 = c >= 2 ? qh >> (c - 2) : qh << (2 - c);
        const v16i h1 = qh >> (c - 1);
        a = lookup_turbo<Bits>((lo0 & 3) | (h0 & ~3), scaled);
        b = lookup_turbo<Bits>((lo1 & 3) | (h1 & ~3), scaled);
      }
    }
  }
}

// Raw scores of R rows (q rows dk apart) against keys 0 .. n-1 of the chunk's rows k,
// J = 16 / R keys at a time; keys n .. kKeyChunk-1 repeat key n-1 (hidden later). Row r's scores
// land at out[r * kKeyChunk + key].
// The next chunk's rows are prefetched along the way, J of each per step (see Prefetch).
template <KvType T, int R, class Rows>
void score_fused(const float* q, int32_t dk, Rows k, int32_t n, const float* table, float* out,
                 const Prefetch<Rows>& pf) {
  constexpr int J = kAccLanes / R;
  const int32_t n_units = dk / 32;
  for (int32_t k0 = 0; k0 < kKeyChunk; k0 += J) {
    const uint8_t* rows[J];
#pragma GCC unroll 16
    for (int j = 0; j < J; ++j) rows[j] = k.row(std::min(k0 + j, n - 1));
    vacc acc[kAccLanes] = {};
    for (int32_t u = 0; u < n_units; ++u) {
      // This step's J prefetches spread over its units, a burst fills the miss queue.
      for (int32_t j = k0 + u; j < std::min(k0 + J, pf.n); j += n_units) {
        prefetch_lines(pf.k.row(j), pf.k_bytes);
        prefetch_lines(pf.v.row(j), pf.v_bytes);
      }
      v16 qa[R], qb[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        qa[r] = load(q + static_cast<int64_t>(r) * dk + 32 * u);
        qb[r] = load(q + static_cast<int64_t>(r) * dk + 32 * u + 16);
      }
#pragma GCC unroll 16
      for (int j = 0; j < J; ++j) {
        v16 a, b;
        unit<T>(rows[j], u, table, a, b);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {  // two FMAs (qa * a + qb * b would be a mul, FMA, add)
          fma_acc(acc[r * J + j], qa[r], a);
          fma_acc(acc[r * J + j], qb[r], b);
        }
      }
    }
    const vacc sums = reduce_acc(acc);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      std::memcpy(out + r * kKeyChunk + k0, reinterpret_cast<const float*>(&sums) + r * J, J * 4);
  }
}

// o[r] += sum_j w[r][j] * V[j] for R rows (w rows kKeyChunk apart, o rows dv apart) over keys
// 0 .. n-1 of the chunk's rows v, dv in blocks of 2 * U2 vectors whose R * 2 * U2
// accumulators stay in registers across the keys.
template <KvType T, int R, class Rows>
void pv_fused(const float* w, Rows v, int32_t n, int32_t dv, const float* table, float* o) {
#if KVFLASH_V16_SPLIT
  constexpr int U2 = R == 1 ? 2 : 1;  // AVX2's 16 registers (NEON's 32 hold as many bytes)
#else
  constexpr int U2 = R == 4 ? 2 : 4;  // 32-value units per block
#endif
  int32_t u0 = 0;
  for (; u0 < dv / 32; u0 += U2) {
    const int nu = std::min<int32_t>(U2, dv / 32 - u0);
    if (nu != U2) break;
    v16 acc[R][2 * U2];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int x = 0; x < 2 * U2; ++x)
        acc[r][x] = load(o + static_cast<int64_t>(r) * dv + 32 * u0 + x * kLanes);
    for (int32_t j0 = 0, j1; j0 < n; j0 = j1) {
      j1 = v.run_end(j0, n);
      const uint8_t* row = v.row(j0);
      for (int32_t j = j0; j < j1; ++j, row += v.stride) {
        v16 wj[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) wj[r] = splat(w[r * kKeyChunk + j]);
#pragma GCC unroll 4
        for (int x = 0; x < U2; ++x) {
          v16 a, b;
          unit<T>(row, u0 + x, table, a, b);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            acc[r][2 * x] += wj[r] * a;
            acc[r][2 * x + 1] += wj[r] * b;
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int x = 0; x < 2 * U2; ++x)
        store(o + static_cast<int64_t>(r) * dv + 32 * u0 + x * kLanes, acc[r][x]);
  }
  // What is left of dv, one unit at a time.
  for (; u0 < dv / 32; ++u0) {
    v16 acc[R][2];
    for (int r = 0; r < R; ++r) {
      acc[r][0] = load(o + static_cast<int64_t>(r) * dv + 32 * u0);
      acc[r][1] = load(o + static_cast<int64_t>(r) * dv + 32 * u0 + kLanes);
    }
    for (int32_t j0 = 0, j1; j0 < n; j0 = j1) {
      j1 = v.run_end(j0, n);
      const uint8_t* row = v.row(j0);
      for (int32_t j = j0; j < j1; ++j, row += v.stride) {
        v16 a, b;
        unit<T>(row, u0, table, a, b);
        for (int r = 0; r < R; ++r) {
          const v16 wj = splat(w[r * kKeyChunk + j]);
          acc[r][0] += wj * a;
          acc[r][1] += wj * b;
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      store(o + static_cast<int64_t>(r) * dv + 32 * u0, acc[r][0]);
      store(o + static_cast<int64_t>(r) * dv + 32 * u0 + kLanes, acc[r][1]);
    }
  }
}

// turbo rows, group by group: the bit planes of a 128-value group are widened once for 4 of its
// 16-value slices (half = 0: slices 0-3, 1: slices 4-7) and the centroids read from a table that
// holds the group's norm (one multiply per group and key, not per value).
template <int Bits>
using TurboBlock = std::conditional_t<Bits == 2, BlockTurbo2,
                                      std::conditional_t<Bits == 3, BlockTurbo3, BlockTurbo4>>;

template <int Bits>
[[gnu::always_inline]] inline void turbo_half(const uint8_t* blk, int half, const v16& table,
                                              v16 (&out)[4]) {
  if constexpr (Bits == 4) {
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
      out[i] = lookup_turbo<Bits>(widen_u8(blk + 2 + i * kLanes) >> (4 * half), table);
  } else {
    const v16i p0 = widen_u8(blk + 2), p1 = widen_u8(blk + 2 + kLanes);
    const v16i qh = Bits == 3 ? widen_u8(blk + 2 + 32) : v16i{};
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const int c = 4 * half + i;
      const v16i lo = (i % 2 == 0 ? p0 : p1) >> (2 * (c / 2));
      if constexpr (Bits == 2) {
        out[i] = lookup_turbo<Bits>(lo, table);
      } else {
        // Bit c of the 1-bit plane moved to bit 2 (see turbo_codes).
        const v16i hi = c >= 2 ? qh >> (c - 2) : qh << (2 - c);
        out[i] = lookup_turbo<Bits>((lo & 3) | (hi & ~3), table);
      }
    }
  }
}

template <int Bits, int R, class Rows>
void score_turbo(const float* q, int32_t dk, Rows k, int32_t n, const float* table, float* out,
                 const Prefetch<Rows>& pf) {
  using Block = TurboBlock<Bits>;
  constexpr int J = kAccLanes / R;
  const v16 tab = load(table);
  for (int32_t k0 = 0; k0 < kKeyChunk; k0 += J) {
    for (int32_t j = k0; j < std::min(k0 + J, pf.n); ++j) {
      prefetch_lines(pf.k.row(j), pf.k_bytes);
      prefetch_lines(pf.v.row(j), pf.v_bytes);
    }
    const uint8_t* rows[J];
#pragma GCC unroll 16
    for (int j = 0; j < J; ++j) rows[j] = k.row(std::min(k0 + j, n - 1));
    vacc acc[kAccLanes] = {};
    for (int32_t g = 0; g < dk / kTurboValues; ++g) {
#pragma GCC unroll 16
      for (int j = 0; j < J; ++j) {
        const uint8_t* blk = rows[j] + g * sizeof(Block);
        const v16 scaled = tab * half_to_float1(read_u16(blk));
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          v16 kv[4];
          turbo_half<Bits>(blk, h, scaled, kv);
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r)
              fma_acc(
                  acc[r * J + j],
                  load(q + static_cast<int64_t>(r) * dk + g * kTurboValues + (4 * h + i) * kLanes),
                  kv[i]);
        }
      }
    }
    const vacc sums = reduce_acc(acc);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      std::memcpy(out + r * kKeyChunk + k0, reinterpret_cast<const float*>(&sums) + r * J, J * 4);
  }
}

template <int Bits, int R, class Rows>
void pv_turbo(const float* w, Rows v, int32_t n, int32_t dv, const float* table, float* o) {
  using Block = TurboBlock<Bits>;
  const v16 tab = load(table);
  // Blocks of half a group (4 vectors): R * 4 accumulators (8 for R = 1 with both halves).
  for (int32_t g = 0; g < dv / kTurboValues; ++g) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      float* ob = o + g * kTurboValues + h * 4 * kLanes;
      v16 acc[R][4];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i)
          acc[r][i] = load(ob + static_cast<int64_t>(r) * dv + i * kLanes);
      for (int32_t j0 = 0, j1; j0 < n; j0 = j1) {
        j1 = v.run_end(j0, n);
        const uint8_t* row = v.row(j0);
        for (int32_t j = j0; j < j1; ++j, row += v.stride) {
          const uint8_t* blk = row + g * sizeof(Block);
          v16 vv[4];
          turbo_half<Bits>(blk, h, tab * half_to_float1(read_u16(blk)), vv);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            const v16 wj = splat(w[r * kKeyChunk + j]);
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) acc[r][i] += wj * vv[i];
          }
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i)
          store(ob + static_cast<int64_t>(r) * dv + i * kLanes, acc[r][i]);
    }
  }
}

template <class Rows>
using ScoreFused = void (*)(const float*, int32_t, Rows, int32_t, const float*, float*,
                            const Prefetch<Rows>&);
template <class Rows>
using PvFused = void (*)(const float*, Rows, int32_t, int32_t, const float*, float*);

template <int R, class Rows>
ScoreFused<Rows> pick_score_fused(KvType t) {
  switch (t) {
    case KvType::f32:
      return score_fused<KvType::f32, R, Rows>;
    case KvType::f16:
      return score_fused<KvType::f16, R, Rows>;
    case KvType::bf16:
      return score_fused<KvType::bf16, R, Rows>;
    case KvType::q8_0:
      return score_fused<KvType::q8_0, R, Rows>;
    case KvType::q4_0:
      return score_fused<KvType::q4_0, R, Rows>;
    case KvType::turbo2:
      return score_turbo<2, R, Rows>;
    case KvType::turbo3:
      return score_turbo<3, R, Rows>;
    case KvType::turbo4:
      return score_turbo<4, R, Rows>;
    case KvType::fp8_e4m3:
      return score_fused<KvType::fp8_e4m3, R, Rows>;
    case KvType::fp8_e5m2:
      return score_fused<KvType::fp8_e5m2, R, Rows>;
  }
  return nullptr;
}
template <int R, class Rows>
PvFused<Rows> pick_pv_fused(KvType t) {
  switch (t) {
    case KvType::f32:
      return pv_fused<KvType::f32, R, Rows>;
    case KvType::f16:
      return pv_fused<KvType::f16, R, Rows>;
    case KvType::bf16:
      return pv_fused<KvType::bf16, R, Rows>;
    case KvType::q8_0:
      return pv_fused<KvType::q8_0, R, Rows>;
    case KvType::q4_0:
      return pv_fused<KvType::q4_0, R, Rows>;
    case KvType::turbo2:
      return pv_turbo<2, R, Rows>;
    case KvType::turbo3:
      return pv_turbo<3, R, Rows>;
    case KvType::turbo4:
      return pv_turbo<4, R, Rows>;
    case KvType::fp8_e4m3:
      return pv_fused<KvType::fp8_e4m3, R, Rows>;
    case KvType::fp8_e5m2:
      return pv_fused<KvType::fp8_e5m2, R, Rows>;
  }
  return nullptr;
}
