// Part of attend_kernel_impl.inl (included there, inside its ISA namespace): turbo K and V in
// 16-bit integers on the fused path, compiled where the translation unit enables AVX512-VNNI
// (attend_kernel_avx512vnni.cpp).

#if defined(__AVX512VNNI__)
// ---- turbo in 16-bit integers (AVX512-VNNI) --------------------------------------------------
// A turbo value is norm * c[code]: the codes of 32 values become 32 int16 centroids with one
// vpermw (half the lookups of a float table), and vpdpwssd multiplies 32 int16 pairs into int32
// (twice the FMA's products per instruction). Scores use Q rounded to int16 per row; P.V uses the
// weights of each key chunk (kKeyChunk = 64) rounded to int16 per (row, group), with the group's
// norm folded in. Ranges are chosen so that no int32 sum can overflow (the static_asserts below):
// scores: |Q| and |c| <= kQ16 (14 bits each against their maxima), one group per int32 lane
// (8 products), converted to float before the 16 lanes are summed;
// P.V: weights <= kW16 (13 bits) and |c| <= kCV16 (12 bits), one key chunk per int32 lane (64-key
// chunks: half the per-chunk work of 32 (weight rounding, accumulator conversion, the softmax
// bookkeeping) per key, turbo3/turbo4 6-11% faster; 128 gained nothing more).
// Accuracy against float64 on the same quantized data: output NMSE at most 1.1e-7 in the CPU
// parity cases (bound 1e-5; f16 arithmetic keeps 11 bits).
inline constexpr int32_t kQ16 = 16383;
inline constexpr int32_t kW16 = 8191;
inline constexpr int32_t kCV16 = 4095;
static_assert(int64_t{kQ16} * kQ16 * 8 <= INT32_MAX);
static_assert(int64_t{kW16} * kCV16 * kKeyChunk <= INT32_MAX);

// The centroids of a turbo type as int16 of magnitude <= max_int, repeated to 32 entries so
// that vpermw (5 index bits) reads a centroid whatever the bits above the code hold.
struct TurboInt {
  alignas(64) int16_t c[32] = {};
  float scale = 0.0f;  // centroid = c * scale
  TurboInt(KvType t, int32_t max_int) {
    if (!is_rotated(t)) return;
    const int n = 1 << turbo_bits(t);
    const float* cf = turbo_centroids(t);
    float mx = 0.0f;
    for (int i = 0; i < n; ++i) mx = std::max(mx, std::abs(cf[i]));
    scale = mx / static_cast<float>(max_int);
    for (int i = 0; i < 32; ++i) c[i] = static_cast<int16_t>(std::lrint(cf[i % n] / scale));
  }
};

// The code planes of one turbo group widened to 16-bit lanes: idx(t) holds the codes of values
// 32t .. 32t+31 in bits 0.. of its 32 word lanes, in order (bits above: other codes, which the
// repeated table ignores).
template <int Bits>
struct TurboWords {
  __m512i lo0, lo1, hi;
  explicit TurboWords(const uint8_t* blk) {
    // 2-bit plane: byte j holds values j, j+32, j+64, j+96; 4-bit plane: j and j+64.
    lo0 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
    if constexpr (Bits == 4)
      lo1 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 34)));
    if constexpr (Bits == 3) {
      // 1-bit plane: byte j holds bit s for value j + 16s. Lane j < 16 takes value 32t + j from
      // bit 2t of byte j, lane 16 + j value 32t + 16 + j from bit 2t+1: the upper half is the
      // plane shifted right by one.
      const __m256i h =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 34)));
      hi = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 1), 1);
    }
  }
  [[gnu::always_inline]] __m512i idx(int t) const {
    if constexpr (Bits == 4) {
      const __m512i w = t % 2 == 0 ? lo0 : lo1;
      return t >= 2 ? _mm512_srli_epi16(w, 4) : w;
    } else if constexpr (Bits == 2) {
      return _mm512_srli_epi16(lo0, 2 * t);
    } else {
      // bits 0-1 from the 2-bit plane, bit 2 (the table repeats every 8) from bit 2t of hi.
      const __m512i h = t == 0   ? _mm512_slli_epi16(hi, 2)
                        : t == 1 ? hi
                                 : _mm512_srli_epi16(hi, 2 * t - 2);
      return _mm512_ternarylogic_epi32(_mm512_set1_epi16(3), _mm512_srli_epi16(lo0, 2 * t), h,
                                       0xCA);  // mask ? lo : hi
    }
  }
};

// Lane r * J + j = the fp16 norm at blks[j] (J = 4, 8 or 16 keys).
template <int J>
[[gnu::always_inline]] inline v16 norm_lanes(const uint8_t* const* blks) {
  uint64_t w[J / 4];
#pragma GCC unroll 4
  for (int i = 0; i < J / 4; ++i)
    w[i] = uint64_t{read_u16(blks[4 * i])} | uint64_t{read_u16(blks[4 * i + 1])} << 16 |
           uint64_t{read_u16(blks[4 * i + 2])} << 32 | uint64_t{read_u16(blks[4 * i + 3])} << 48;
  if constexpr (J == 4) {
    return (v16)_mm512_broadcast_f32x4(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(w[0]))));
  } else if constexpr (J == 8) {
    return (v16)_mm512_broadcast_f32x8(
        _mm256_cvtph_ps(_mm_set_epi64x(static_cast<int64_t>(w[1]), static_cast<int64_t>(w[0]))));
  } else {
    return (v16)_mm512_cvtph_ps(
        _mm256_set_epi64x(static_cast<int64_t>(w[3]), static_cast<int64_t>(w[2]),
                          static_cast<int64_t>(w[1]), static_cast<int64_t>(w[0])));
  }
}

// Q of R rows (dk apart) rounded to int16 per row: qi = round(q / s_r), s_r = max|q_r| / kQ16.
// Returns the vector whose lane r * J + j is s_r * (centroid scale), J = 16 / R.
template <int R>
v16 quantize_q16(const float* q, int32_t dk, int16_t* qi, float cscale) {
  constexpr int J = kLanes / R;
  float s[R];
  for (int r = 0; r < R; ++r) {
    const float* qr = q + static_cast<int64_t>(r) * dk;
    v16 mx = {};
    for (int32_t d = 0; d < dk; d += kLanes) {
      const v16 x = load(qr + d);
      const v16 a = x < 0 ? -x : x;
      mx = mx > a ? mx : a;
    }
    const float m = hmax(mx);
    s[r] = m / kQ16;
    const v16 inv = splat(m > 0 ? kQ16 / m : 0.0f);
    for (int32_t d = 0; d < dk; d += kLanes)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qi + static_cast<int64_t>(r) * dk + d),
                          _mm512_cvtepi32_epi16(_mm512_cvtps_epi32((__m512)(load(qr + d) * inv))));
  }
  v16 lanes;
  for (int i = 0; i < kLanes; ++i) lanes[i] = s[i / J] * cscale;
  return lanes;
}

// Raw scores as score_fused, from int16 Q (R rows, dk apart) and turbo K rows.
template <int Bits, int R, class Rows>
void score_turbo_vnni(const int16_t* qi, v16 row_scale, int32_t dk, Rows k, int32_t n,
                      const TurboInt& ti, float* out, const Prefetch<Rows>& pf) {
  using Block = TurboBlock<Bits>;
  constexpr int J = kLanes / R;
  const __m512i table = _mm512_load_si512(ti.c);
  for (int32_t k0 = 0; k0 < kKeyChunk; k0 += J) {
    for (int32_t j = k0; j < std::min(k0 + J, pf.n); ++j) {
      prefetch_lines(pf.k.row(j), pf.k_bytes);
      prefetch_lines(pf.v.row(j), pf.v_bytes);
    }
    const uint8_t* blks[J];
#pragma GCC unroll 16
    for (int j = 0; j < J; ++j) blks[j] = k.row(std::min(k0 + j, n - 1));
    v16 total = {};
    for (int32_t g = 0; g < dk / kTurboValues; ++g) {
      v16i acc[kLanes] = {};
#pragma GCC unroll 16
      for (int j = 0; j < J; ++j) {
        const TurboWords<Bits> w(blks[j]);
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
          const __m512i kw = _mm512_permutexvar_epi16(w.idx(t), table);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r)
            acc[r * J + j] = (v16i)_mm512_dpwssd_epi32(
                (__m512i)acc[r * J + j], kw,
                _mm512_loadu_si512(qi + static_cast<int64_t>(r) * dk + g * kTurboValues + 32 * t));
        }
      }
      v16 accf[kLanes];  // to float before the lanes are summed (an int32 sum could overflow)
#pragma GCC unroll 16
      for (int i = 0; i < kLanes; ++i) accf[i] = __builtin_convertvector(acc[i], v16);
      total += reduce16(accf) * norm_lanes<J>(blks);
#pragma GCC unroll 16
      for (int j = 0; j < J; ++j) blks[j] += sizeof(Block);
    }
    const v16 sums = total * row_scale;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      std::memcpy(out + r * kKeyChunk + k0, reinterpret_cast<const float*>(&sums) + r * J, J * 4);
  }
}

// o[r] += sum_j w[r][j] V[j] for turbo V rows as pv_turbo, in int16 (see above). wq: scratch
// for kKeyChunk int16 weights per row.
template <int Bits, int R, class Rows>
void pv_turbo_vnni(const float* w, Rows v, int32_t n, int32_t dv, const TurboInt& ti, float* o,
                   int16_t* wq) {
  using Block = TurboBlock<Bits>;
  const __m512i table = _mm512_load_si512(ti.c);
  // acc lanes of one 32-value block after unpacking key pairs: lo = values 0-3, 8-11, 16-19,
  // 24-27 and hi = 4-7, 12-15, 20-23, 28-31; these put them back in order.
  const __m512i back_a = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
  const __m512i back_b =
      _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8);
  for (int32_t g = 0; g < dv / kTurboValues; ++g) {
    // Weights of this group: w * norm, rounded per row against the row's largest.
    v16 nv[kChunkVecs];
    {
      const uint8_t* blks[kKeyChunk];
      for (int32_t j = 0; j < kKeyChunk; ++j)
        blks[j] = v.row(std::min(j, n - 1)) + g * sizeof(Block);
      for (int c = 0; c < kChunkVecs; ++c) nv[c] = norm_lanes<16>(blks + c * kLanes);
    }
    float wscale[R];
    for (int r = 0; r < R; ++r) {
      v16 x[kChunkVecs], mx = {};
      for (int c = 0; c < kChunkVecs; ++c) {
        // A key of weight 0 stays 0 whatever its norm (a hidden key's NaN or inf norm would
        // make 0 * norm = NaN).
        const v16 wc = load(w + r * kKeyChunk + c * kLanes);
        x[c] = wc == 0.0f ? splat(0.0f) : wc * nv[c];
        mx = mx > x[c] ? mx : x[c];
      }
      const float m = hmax(mx);
      wscale[r] = m / kW16 * ti.scale;
      const v16 inv = splat(m > 0 ? kW16 / m : 0.0f);
      for (int c = 0; c < kChunkVecs; ++c)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(wq + r * kKeyChunk + c * kLanes),
                            _mm512_cvtepi32_epi16(_mm512_cvtps_epi32((__m512)(x[c] * inv))));
      if (n % 2) wq[r * kKeyChunk + n] = 0;  // the pair partner of the last key
    }
    // Half a group (two 32-value blocks) per pass: R x 2 x 2 int32 accumulators.
#pragma GCC unroll 1
    for (int h = 0; h < 2; ++h) {
      v16i acc[R][4] = {};
      // Key pairs (j, j + 1) along the runs of rows (even runs from key 0: no pair crosses one).
      for (int32_t j0 = 0, j1; j0 < n; j0 = j1) {
        j1 = v.run_end(j0, n);
        const uint8_t* b0 = v.row(j0) + g * sizeof(Block);
        for (int32_t j = j0; j < j1; j += 2, b0 += 2 * v.stride) {
          const uint8_t* b1 = j + 1 < n ? b0 + v.stride : b0;
          const TurboWords<Bits> w0(b0), w1(b1);
#pragma GCC unroll 2
          for (int x = 0; x < 2; ++x) {
            const int t = 2 * h + x;
            const __m512i v0 = _mm512_permutexvar_epi16(w0.idx(t), table);
            const __m512i v1 = _mm512_permutexvar_epi16(w1.idx(t), table);
            const __m512i plo = _mm512_unpacklo_epi16(v0, v1), phi = _mm512_unpackhi_epi16(v0, v1);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
              int32_t pair;
              std::memcpy(&pair, wq + r * kKeyChunk + j, 4);
              const __m512i wp = _mm512_set1_epi32(pair);
              acc[r][2 * x] = (v16i)_mm512_dpwssd_epi32((__m512i)acc[r][2 * x], plo, wp);
              acc[r][2 * x + 1] = (v16i)_mm512_dpwssd_epi32((__m512i)acc[r][2 * x + 1], phi, wp);
            }
          }
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const v16 sc = splat(wscale[r]);
#pragma GCC unroll 2
        for (int x = 0; x < 2; ++x) {
          const __m512 lo = _mm512_cvtepi32_ps((__m512i)acc[r][2 * x]);
          const __m512 hi = _mm512_cvtepi32_ps((__m512i)acc[r][2 * x + 1]);
          float* ob = o + static_cast<int64_t>(r) * dv + g * kTurboValues + (2 * h + x) * 32;
          store(ob, load(ob) + (v16)_mm512_permutex2var_ps(lo, back_a, hi) * sc);
          store(ob + kLanes, load(ob + kLanes) + (v16)_mm512_permutex2var_ps(lo, back_b, hi) * sc);
        }
      }
    }
  }
}

template <class Rows>
using ScoreVnni = void (*)(const int16_t*, v16, int32_t, Rows, int32_t, const TurboInt&, float*,
                           const Prefetch<Rows>&);
template <class Rows>
using PvVnni = void (*)(const float*, Rows, int32_t, int32_t, const TurboInt&, float*, int16_t*);
template <int R, class Rows>
ScoreVnni<Rows> pick_score_vnni(KvType t) {
  switch (t) {
    case KvType::turbo2:
      return score_turbo_vnni<2, R, Rows>;
    case KvType::turbo3:
      return score_turbo_vnni<3, R, Rows>;
    case KvType::turbo4:
      return score_turbo_vnni<4, R, Rows>;
    default:
      return nullptr;
  }
}
template <int R, class Rows>
PvVnni<Rows> pick_pv_vnni(KvType t) {
  switch (t) {
    case KvType::turbo2:
      return pv_turbo_vnni<2, R, Rows>;
    case KvType::turbo3:
      return pv_turbo_vnni<3, R, Rows>;
    case KvType::turbo4:
      return pv_turbo_vnni<4, R, Rows>;
    default:
      return nullptr;
  }
}
#endif  // __AVX512VNNI__
