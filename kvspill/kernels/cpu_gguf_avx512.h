// AVX-512 path of cpu_gguf.cpp (included there inside its namespace, after the portable code):
// each 16 weights of a block are dequantized in a register, with the portable code's fp32
// operations in the same order (mul, then add / sub: never fused), and multiplied into the
// tokens' accumulators at once, so a block is never written out.
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define KVSPILL_GGUF_AVX512 1

// The fp16 field at p as float: F16C's conversion (every AVX-512 CPU has it), exact like f16_to_f32.
inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m512i bytes16(const uint8_t* p) {  // 16 bytes -> 16 int32 lanes (zero-extended)
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m512 to_ps(__m512i v) { return _mm512_cvtepi32_ps(v); }

inline __m512 iota_ps(int from) {  // from, from + 1, ..., from + 15
  return _mm512_add_ps(_mm512_set1_ps(static_cast<float>(from)),
                       _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

// The 16 (Q4) or 32 (Q5) values a block's quants can take, for the permutes below: entry j is
// computed with the reference's operations on quant j, so a looked-up weight equals the computed one.
struct Table {
  __m512 lo, hi;  // quants 0..15, 16..31
};

// scale * (j + bias) + add (legacy types; add is 0 for Q4_0 / Q5_0, whose (q - bias) is an integer).
inline Table legacy_table(float scale, int bias, const float* add) {
  const __m512 d = _mm512_set1_ps(scale);
  Table t{_mm512_mul_ps(d, iota_ps(bias)), _mm512_mul_ps(d, iota_ps(bias + 16))};
  if (add != nullptr) {
    t.lo = _mm512_add_ps(t.lo, _mm512_set1_ps(*add));
    t.hi = _mm512_add_ps(t.hi, _mm512_set1_ps(*add));
  }
  return t;
}

// scale * j - offset (K types' sub-blocks); the high half only for Q5_K.
template <bool kFive>
inline Table k_table(float scale, float offset) {
  const __m512 sc = _mm512_set1_ps(scale), off = _mm512_set1_ps(offset);
  Table t{_mm512_sub_ps(_mm512_mul_ps(sc, iota_ps(0)), off), _mm512_setzero_ps()};
  if constexpr (kFive) t.hi = _mm512_sub_ps(_mm512_mul_ps(sc, iota_ps(16)), off);
  return t;
}

template <bool kFive>
inline __m512 look_up(const Table& t, __m512i q) {
  if constexpr (kFive) return _mm512_permutex2var_ps(t.lo, q, t.hi);
  return _mm512_permutexvar_ps(q, t.lo);
}

// Calls f(i, w) for the i-th 16 weights w of one block of type QT (i < block_size / 16), in any order.
template <int QT, class F>
inline void block_vectors(const uint8_t* b, F&& f) {
  const __m512i low4 = _mm512_set1_epi32(0x0f), sixteen = _mm512_set1_epi32(16);
  if constexpr (QT == Q8_0) {
    const __m512 d = _mm512_set1_ps(half_at(b));
    for (int i = 0; i < 2; ++i) {
      const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * i)));
      f(i, _mm512_mul_ps(to_ps(q), d));
    }
  } else if constexpr (QT == Q4_0 || QT == Q4_1 || QT == Q5_0 || QT == Q5_1) {
    constexpr bool kFive = QT == Q5_0 || QT == Q5_1;
    constexpr int qs_at = QT == Q4_0 ? 2 : QT == Q4_1 ? 4 : QT == Q5_0 ? 6 : 8;
    const float m = (QT == Q4_1 || QT == Q5_1) ? half_at(b + 2) : 0.0f;
    const Table t = legacy_table(half_at(b), QT == Q4_0 ? -8 : QT == Q5_0 ? -16 : 0,
                                 (QT == Q4_1 || QT == Q5_1) ? &m : nullptr);
    const __m512i bytes = bytes16(b + qs_at);
    __m512i q[2] = {_mm512_and_si512(bytes, low4), _mm512_srli_epi32(bytes, 4)};
    if constexpr (kFive) {
      uint32_t bits;
      std::memcpy(&bits, b + qs_at - 4, 4);
      q[0] = _mm512_mask_or_epi32(q[0], static_cast<__mmask16>(bits & 0xffff), q[0], sixteen);
      q[1] = _mm512_mask_or_epi32(q[1], static_cast<__mmask16>(bits >> 16), q[1], sixteen);
    }
    for (int i = 0; i < 2; ++i) f(i, look_up<kFive>(t, q[i]));
  } else if constexpr (QT == Q4_K || QT == Q5_K) {
    constexpr bool kFive = QT == Q5_K;
    const float d = half_at(b), dmin = half_at(b + 2);
    const uint8_t* qs = b + (kFive ? 48 : 16);
    __m512i qh[2];
    if constexpr (kFive) qh[0] = bytes16(b + 16), qh[1] = bytes16(b + 32);
    for (int s = 0; s < 8; ++s) {  // sub-blocks 2j and 2j + 1 share the bytes qs[32 j ..]
      int sc, mn;
      k_scale_min(b + 4, s, &sc, &mn);
      const Table t = k_table<kFive>(d * static_cast<float>(sc), dmin * static_cast<float>(mn));
      for (int half = 0; half < 2; ++half) {
        const __m512i bytes = bytes16(qs + (s / 2) * 32 + half * 16);
        __m512i q = s % 2 ? _mm512_srli_epi32(bytes, 4) : _mm512_and_si512(bytes, low4);
        if constexpr (kFive)
          q = _mm512_mask_or_epi32(q, _mm512_test_epi32_mask(qh[half], _mm512_set1_epi32(1 << s)), q, sixteen);
        f(s * 2 + half, look_up<kFive>(t, q));
      }
    }
  } else {  // Q6_K: the portable dequant_q6k's indexing; one load of ql / qh serves 2 / 4 of the k
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
    const float d = half_at(b + 208);
    const __m512i thirty_two = _mm512_set1_epi32(32), bits45 = _mm512_set1_epi32(0x30);
    for (int h = 0; h < 2; ++h) {
      for (int half = 0; half < 2; ++half) {
        const __m512i ql[2] = {bytes16(b + h * 64 + half * 16), bytes16(b + h * 64 + 32 + half * 16)};
        const __m512i qh = bytes16(b + 128 + h * 32 + half * 16);
        for (int k = 0; k < 4; ++k) {
          const __m512i lo = k < 2 ? _mm512_and_si512(ql[k % 2], low4) : _mm512_srli_epi32(ql[k % 2], 4);
          const __m512i hi = k < 3 ? _mm512_sll_epi32(qh, _mm_cvtsi32_si128(4 - 2 * k)) : _mm512_srli_epi32(qh, 2);
          const __m512i q = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_and_si512(hi, bits45)), thirty_two);
          const __m512 scale = _mm512_set1_ps(d * static_cast<float>(scales[h * 8 + k * 2 + half]));
          f(h * 8 + k * 2 + half, _mm512_mul_ps(scale, to_ps(q)));
        }
      }
    }
  }
}

template <int QT>
constexpr int kBlockSize = QT >= Q4_K ? 256 : 32;

// Rows [r0, r1) of y = x @ W.T for T tokens (the portable matmul_rows' contract). One row at a
// time: four rows' chains at once measured no faster (bench/results/2026-12-07-cpu-gguf-gemv/).
template <int QT, int T>
void matmul_rows_avx512(const Weight& wt, const float* x, int64_t x_stride, float* y, int64_t y_stride,
                        int64_t r0, int64_t r1) {
  constexpr int bs = kBlockSize<QT>;
  const int ts = type_size(QT);
  const int64_t nb = wt.in_features / bs;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = wt.data + r * wt.row_stride;
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t blk = 0; blk < nb; ++blk) {
      const float* xb = x + blk * bs;
      block_vectors<QT>(row + blk * ts, [&](int i, __m512 w) {
        for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(w, _mm512_loadu_ps(xb + t * x_stride + 16 * i), acc[t]);
      });
    }
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = _mm512_reduce_add_ps(acc[t]);
  }
}

using RowsFn = void (*)(const Weight&, const float*, int64_t, float*, int64_t, int64_t, int64_t);

template <int QT>
RowsFn rows_for_tokens(int tokens) {
  constexpr RowsFn fns[kMaxTokens] = {
      matmul_rows_avx512<QT, 1>, matmul_rows_avx512<QT, 2>, matmul_rows_avx512<QT, 3>, matmul_rows_avx512<QT, 4>,
      matmul_rows_avx512<QT, 5>, matmul_rows_avx512<QT, 6>, matmul_rows_avx512<QT, 7>, matmul_rows_avx512<QT, 8>};
  return fns[tokens - 1];
}

// The row function for a type and 1..kMaxTokens tokens, or nullptr for an unknown type.
RowsFn avx512_rows(int qtype, int tokens) {
  switch (qtype) {
    case Q4_0: return rows_for_tokens<Q4_0>(tokens);
    case Q4_1: return rows_for_tokens<Q4_1>(tokens);
    case Q5_0: return rows_for_tokens<Q5_0>(tokens);
    case Q5_1: return rows_for_tokens<Q5_1>(tokens);
    case Q8_0: return rows_for_tokens<Q8_0>(tokens);
    case Q4_K: return rows_for_tokens<Q4_K>(tokens);
    case Q5_K: return rows_for_tokens<Q5_K>(tokens);
    case Q6_K: return rows_for_tokens<Q6_K>(tokens);
    default: return nullptr;
  }
}

#endif  // __AVX512F__ && __AVX512BW__
