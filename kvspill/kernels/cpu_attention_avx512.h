// The AVX-512 paths of cpu_attention.cpp (head_dim % 16 == 0), included by it once, inside its
// anonymous namespace after `Geometry` and `DType`: conversions (load16, split_bf16), the online
// softmax, the next block's prefetch, one kv head of one block (block_head_avx512 for every
// format, block_head_bf16 for bf16 pools) and one task over its blocks (task_avx512).
// attend_task_avx512 returns false where AVX-512 is not compiled in (the portable path runs).

#if defined(__AVX512F__)

// 16 values of a pool of type DT at element `off`, to fp32, before their scale: int8 values
// as integers, e4m3 values times 2^-8 (`kRawScale` undoes that), e5m2 exactly. The scales are
// applied to whole dot products and probabilities instead (block_head_avx512).
template <int DT>
inline __m512 load16(const void* pool, int64_t off) {
  if constexpr (DT == F32) {
    return _mm512_loadu_ps(static_cast<const float*>(pool) + off);
  } else if constexpr (DT == BF16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(pool) + off));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else if constexpr (DT == F16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(pool) + off));
    return _mm512_cvtph_ps(h);
  } else {
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(pool) + off));
    if constexpr (DT == INT8) {
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    } else if constexpr (DT == FP8_E5M2) {  // the top byte of an fp16
      return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
    } else {
      // FP8_E4M3 as the fp16 s0eeeemmm0000000 (value * 2^-8; e4m3 subnormals become fp16
      // subnormals, which the conversion handles at full speed; an fp32 rebias by a multiply
      // would make them fp32 denormals, which cost a microcode assist each): sign-extend,
      // shift the sign to bit 15 and clear bit 14.
      const __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7);
      return _mm512_cvtph_ps(_mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0xbfff))));
    }
  }
}
template <int DT>
constexpr float kRawScale = DT == FP8_E4M3 ? 256.0f : 1.0f;

// e^x for x <= 0 (scores minus their running max): 2^n * 2^f, f in [-0.5, 0.5], degree-7 Taylor
// (relative error about 1e-8); x below -87 gives 0's neighbourhood (< 1e-37), as e^x does in fp32.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.4426950408889634f));
  __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.525273380405984e-05f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530393381609e-04f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618129107628477e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550410866482158e-02f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402265069591007e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931471805599453e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

constexpr int kRowTile = 4;  // query rows sharing one conversion of a K or V vector

// Sums of 4 vectors' lanes: {sum a0, sum a1, sum a2, sum a3} (one transpose-add tree for all 4).
inline __m128 reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 x01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 x23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  // per 128-bit lane: [a0 a1 a0 a1], [a2 a3 a2 a3] partials -> [a0 a1 a2 a3]
  const __m512 y = _mm512_add_ps(_mm512_shuffle_ps(x01, x23, 0x44), _mm512_shuffle_ps(x01, x23, 0xEE));
  const __m256 z = _mm256_add_ps(_mm512_castps512_ps256(y), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(y), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(z), _mm256_extractf128_ps(z, 1));
}

// Lanes [t, min(t + 16, n)) of a row of n values.
inline __mmask16 tail_mask(int n, int t) {
  return n - t >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - t)) - 1);
}

// The online-softmax step of one kv head's folded rows: scores s [nr, BS] (the first T of each
// row are the block's) become p, each row's running max m and sum l are updated and its acc row
// is scaled by e^(m_old - m_new).
inline void online_softmax(int64_t nr, int T, int BS, int D, const int64_t* rows, float* s, float* acc, float* m,
                           float* l) {
  for (int64_t i = 0; i < nr; ++i) {
    const int64_t mi = rows[i];
    float* si = s + i * BS;
    __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int t = 0; t < T; t += 16) {
      const __mmask16 k = tail_mask(T, t);
      vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(vmax, k, si + t));
    }
    const float bmax = _mm512_reduce_max_ps(vmax);
    const float m_new = m[mi] > bmax ? m[mi] : bmax;
    const __m512 mv = _mm512_set1_ps(m_new);
    __m512 psum = _mm512_setzero_ps();
    for (int t = 0; t < T; t += 16) {
      const __mmask16 k = tail_mask(T, t);
      const __m512 p = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, si + t), mv)));
      _mm512_mask_storeu_ps(si + t, k, p);
      psum = _mm512_add_ps(psum, p);
    }
    const float alpha = std::exp(m[mi] - m_new);  // 0 on the first block (m = -inf)
    l[mi] = l[mi] * alpha + _mm512_reduce_add_ps(psum);
    m[mi] = m_new;
    float* ai = acc + mi * D;
    const __m512 av = _mm512_set1_ps(alpha);
    for (int c = 0; c < D; c += 16) _mm512_storeu_ps(ai + c, _mm512_mul_ps(_mm512_loadu_ps(ai + c), av));
  }
}

// Lines of the next block to have fetched into L2 while this one computes, spread over the
// compute loops (a burst of prefetches stalls the core once its miss buffers fill, leaving
// memory idle during the arithmetic that follows). k, v: the next block's K and V slabs of
// this head's share, n lines each (null: none).
struct Prefetch {
  const char* k = nullptr;
  const char* v = nullptr;
  int64_t n = 0;
  int64_t done_k = 0, done_v = 0;
  inline void k_lines(int64_t count) {
    for (int64_t e = done_k + count < n ? done_k + count : n; done_k < e; ++done_k) _mm_prefetch(k + done_k * 64, _MM_HINT_T1);
  }
  inline void v_lines(int64_t count) {
    for (int64_t e = done_v + count < n ? done_v + count : n; done_v < e; ++done_v) _mm_prefetch(v + done_v * 64, _MM_HINT_T1);
  }
  inline void rest() {
    k_lines(n);
    v_lines(n);
  }
};

// One kv head of one block, AVX-512 (head_dim % 16 == 0). Folded row i is (token i / group, q
// head h * group + i % group), `rows[i]` its row * num_heads + head (rows relative to the
// task's first). kRowTile rows share each conversion of a K or V vector; a short last tile runs
// padded (its extra rows are computed from row i0's data and never stored) so that every loop
// over rows has a constant trip count and the accumulators stay in registers. s: [nr, BS]; the
// block's first T tokens are read (a partial last block: T < BS).
template <int DT>
void block_head_avx512(const Geometry& g, const float* q, int64_t nr, int64_t base, int64_t sbase, int h, int T,
                       float scale, const int64_t* rows, float* s, float* acc, float* m, float* l, Prefetch& pf) {
  const int D = g.head_dim, KV = g.num_kv_heads, BS = g.block_size, C = D / 16;
  const int64_t k_per_token = (pf.n + BS - 1) / BS, v_per_step = (pf.n + BS * C - 1) / (BS * C);
  for (int64_t i0 = 0; i0 < nr; i0 += kRowTile) {
    const int nt = static_cast<int>(nr - i0 < kRowTile ? nr - i0 : kRowTile);
    const float* qr[kRowTile];
    for (int j = 0; j < kRowTile; ++j) qr[j] = q + rows[i0 + (j < nt ? j : 0)] * D;
    for (int t = 0; t < T; ++t) {
      pf.k_lines(k_per_token);
      const int64_t th = static_cast<int64_t>(t) * KV + h;
      const float ks = (DT == INT8 ? g.scales[sbase + g.k_scale_off + th * g.scale_row_stride] : g.k_scale) * kRawScale<DT>;
      __m512 a[kRowTile];
      for (int j = 0; j < kRowTile; ++j) a[j] = _mm512_setzero_ps();
      for (int c = 0; c < C; ++c) {
        const __m512 kc = load16<DT>(g.pool, base + g.k_off + th * g.row_stride + c * 16);
        for (int j = 0; j < kRowTile; ++j) a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(qr[j] + c * 16), kc, a[j]);
      }
      alignas(16) float dots[4];
      _mm_store_ps(dots, _mm_mul_ps(reduce4(a[0], a[1], a[2], a[3]), _mm_set1_ps(scale * ks)));
      for (int j = 0; j < nt; ++j) s[(i0 + j) * BS + t] = dots[j];
    }
  }
  online_softmax(nr, T, BS, D, rows, s, acc, m, l);
  if constexpr (DT != F32 && DT != BF16 && DT != F16) {  // each token's V scale weights its p
    for (int t = 0; t < T; ++t) {
      const int64_t th = static_cast<int64_t>(t) * KV + h;
      const float vs = (DT == INT8 ? g.scales[sbase + g.v_scale_off + th * g.scale_row_stride] : g.v_scale) * kRawScale<DT>;
      for (int64_t i = 0; i < nr; ++i) s[i * BS + t] *= vs;
    }
  }
  for (int64_t i0 = 0; i0 < nr; i0 += kRowTile) {
    const int nt = static_cast<int>(nr - i0 < kRowTile ? nr - i0 : kRowTile);
    int64_t ri[kRowTile];
    for (int j = 0; j < kRowTile; ++j) ri[j] = i0 + (j < nt ? j : 0);
    for (int c = 0; c < C; ++c) {
      __m512 a[kRowTile];
      for (int j = 0; j < kRowTile; ++j) a[j] = _mm512_loadu_ps(acc + rows[ri[j]] * D + c * 16);
      for (int t = 0; t < T; ++t) {
        pf.v_lines(v_per_step);
        const int64_t th = static_cast<int64_t>(t) * KV + h;
        const __m512 vc = load16<DT>(g.pool, base + g.v_off + th * g.row_stride + c * 16);
        for (int j = 0; j < kRowTile; ++j) a[j] = _mm512_fmadd_ps(_mm512_set1_ps(s[ri[j] * BS + t]), vc, a[j]);
      }
      for (int j = 0; j < nt; ++j) _mm512_storeu_ps(acc + rows[i0 + j] * D + c * 16, a[j]);
    }
  }
  pf.rest();
}

// bf16 pools (head_dim % 32 == 0), 32 values a step: the low bf16 of each 32-bit word is an
// fp32 once shifted up 16 bits, the high one once its low 16 bits are cleared, so two integer
// ops convert 32 values and both halves feed fp32 FMAs. (The AVX512-BF16 dot instruction does
// half the multiply-adds per cycle of two FMAs on the hosts measured.) Lane i of a chunk's even
// half is dim 32c + 2i, of its odd half dim 32c + 2i + 1: q comes split the same way (`qs`,
// once per task), acc keeps that order for the whole task and `unpair` restores it at the end.
inline void split_bf16(const uint16_t* src, __m512& even, __m512& odd) {
  const __m512i w = _mm512_loadu_si512(src);
  even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

template <int kC>  // chunks of 32 values per row: a constant (2: head_dim 64, 4: 128) unrolls; 0: D / 32
void block_head_bf16(const Geometry& g, const float* qs, int64_t nr, int64_t base, int h, int T, float scale,
                     const int64_t* rows, float* s, float* acc, float* m, float* l, Prefetch& pf) {
  const int D = g.head_dim, KV = g.num_kv_heads, BS = g.block_size, C = kC ? kC : D / 32;
  const int64_t k_per_token = (pf.n + BS - 1) / BS, v_per_step = (pf.n + BS * C - 1) / (BS * C);
  const uint16_t* pool = static_cast<const uint16_t*>(g.pool);
  for (int64_t i0 = 0; i0 < nr; i0 += kRowTile) {
    const int nt = static_cast<int>(nr - i0 < kRowTile ? nr - i0 : kRowTile);
    const float* qr[kRowTile];
    for (int j = 0; j < kRowTile; ++j) qr[j] = qs + rows[i0 + (j < nt ? j : 0)] * D;
    for (int t = 0; t < T; ++t) {
      pf.k_lines(k_per_token);
      const uint16_t* src = pool + base + g.k_off + (static_cast<int64_t>(t) * KV + h) * g.row_stride;
      __m512 a[kRowTile], b[kRowTile];  // even and odd dims: two chains per row
      for (int j = 0; j < kRowTile; ++j) a[j] = b[j] = _mm512_setzero_ps();
      for (int c = 0; c < C; ++c) {
        __m512 ke, ko;
        split_bf16(src + c * 32, ke, ko);
        for (int j = 0; j < kRowTile; ++j) {
          a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(qr[j] + c * 32), ke, a[j]);
          b[j] = _mm512_fmadd_ps(_mm512_loadu_ps(qr[j] + c * 32 + 16), ko, b[j]);
        }
      }
      alignas(16) float dots[4];
      const __m128 sums = reduce4(_mm512_add_ps(a[0], b[0]), _mm512_add_ps(a[1], b[1]), _mm512_add_ps(a[2], b[2]),
                                  _mm512_add_ps(a[3], b[3]));
      _mm_store_ps(dots, _mm_mul_ps(sums, _mm_set1_ps(scale)));
      for (int j = 0; j < kRowTile; ++j) s[(i0 + j) * BS + t] = dots[j];  // s has whole tiles of rows
    }
  }
  online_softmax(nr, T, BS, D, rows, s, acc, m, l);
  for (int64_t i0 = 0; i0 < nr; i0 += kRowTile) {
    const int nt = static_cast<int>(nr - i0 < kRowTile ? nr - i0 : kRowTile);
    int64_t ri[kRowTile];
    for (int j = 0; j < kRowTile; ++j) ri[j] = i0 + (j < nt ? j : 0);
    for (int c = 0; c < C; ++c) {
      __m512 a[kRowTile], b[kRowTile];
      for (int j = 0; j < kRowTile; ++j) {
        a[j] = _mm512_loadu_ps(acc + rows[ri[j]] * D + c * 32);
        b[j] = _mm512_loadu_ps(acc + rows[ri[j]] * D + c * 32 + 16);
      }
      for (int t = 0; t < T; ++t) {
        pf.v_lines(v_per_step);
        __m512 ve, vo;
        split_bf16(pool + base + g.v_off + (static_cast<int64_t>(t) * KV + h) * g.row_stride + c * 32, ve, vo);
        for (int j = 0; j < kRowTile; ++j) {
          const __m512 p = _mm512_set1_ps(s[ri[j] * BS + t]);
          a[j] = _mm512_fmadd_ps(p, ve, a[j]);
          b[j] = _mm512_fmadd_ps(p, vo, b[j]);
        }
      }
      for (int j = 0; j < nt; ++j) {
        _mm512_storeu_ps(acc + rows[i0 + j] * D + c * 32, a[j]);
        _mm512_storeu_ps(acc + rows[i0 + j] * D + c * 32 + 16, b[j]);
      }
    }
  }
  pf.rest();
}

// n rows of D values: each 32-value chunk from bf16 order (16 even dims, then 16 odd) to dim
// order (forward: the reverse).
void pair_order(float* x, int64_t n, int D, bool forward) {
  alignas(64) float tmp[32];
  for (int64_t r = 0; r < n; ++r)
    for (int c = 0; c < D; c += 32) {
      float* y = x + r * D + c;
      for (int i = 0; i < 16; ++i) {
        if (forward) {
          tmp[i] = y[2 * i];
          tmp[16 + i] = y[2 * i + 1];
        } else {
          tmp[2 * i] = y[i];
          tmp[2 * i + 1] = y[16 + i];
        }
      }
      std::memcpy(y, tmp, sizeof(tmp));
    }
}

template <int DT>
void task_avx512(const Geometry& g, const float* q, int64_t r0, int64_t r1, const int64_t* ids, int64_t n,
                 int last_n, float scale, float* acc, float* m, float* l) {
  const int group = g.num_heads / g.num_kv_heads;
  const int64_t nr = (r1 - r0) * group;
  std::vector<float> s(static_cast<size_t>((nr + kRowTile - 1) / kRowTile * kRowTile) * g.block_size);
  std::vector<int64_t> rows(static_cast<size_t>(g.num_kv_heads * nr));  // (head, folded row) -> row * H + head
  for (int h = 0; h < g.num_kv_heads; ++h)
    for (int64_t i = 0; i < nr; ++i) rows[h * nr + i] = (i / group) * g.num_heads + static_cast<int64_t>(h) * group + i % group;
  const int64_t elem = DT == F32 ? 4 : (DT == BF16 || DT == F16) ? 2 : 1;
  const int64_t slab_lines = static_cast<int64_t>(g.block_size) * g.num_kv_heads * g.row_stride * elem / 64;
  const char* pool = static_cast<const char*>(g.pool);
  const int64_t rh = (r1 - r0) * g.num_heads;
  const bool paired = DT == BF16 && g.head_dim % 32 == 0;
  std::vector<float> qs;  // bf16 pools: the task's q rows in the pair order of block_head_bf16
  if (paired) {
    qs.assign(q + r0 * g.num_heads * g.head_dim, q + r1 * g.num_heads * g.head_dim);
    pair_order(qs.data(), rh, g.head_dim, true);
  }
  const float* qt = q + r0 * g.num_heads * g.head_dim;
  for (int64_t b = 0; b < n; ++b) {
    const int64_t base = ids[b] * g.block_stride;
    const int64_t sbase = DT == INT8 ? ids[b] * g.scale_block_stride : 0;
    const int64_t next = b + 1 < n ? ids[b + 1] * g.block_stride : -1;
    const int T = b + 1 == n ? last_n : g.block_size;
    for (int h = 0; h < g.num_kv_heads; ++h) {
      // the next block, fetched to L2 a share per head (the heads walk a block with a stride)
      const int64_t lo = slab_lines * h / g.num_kv_heads, hi = slab_lines * (h + 1) / g.num_kv_heads;
      Prefetch pf;
      if (next >= 0) {
        pf.k = pool + (next + g.k_off) * elem + lo * 64;
        pf.v = pool + (next + g.v_off) * elem + lo * 64;
        pf.n = hi - lo;
      }
      if (paired && g.head_dim == 128)
        block_head_bf16<4>(g, qs.data(), nr, base, h, T, scale, rows.data() + h * nr, s.data(), acc, m, l, pf);
      else if (paired && g.head_dim == 64)
        block_head_bf16<2>(g, qs.data(), nr, base, h, T, scale, rows.data() + h * nr, s.data(), acc, m, l, pf);
      else if (paired)
        block_head_bf16<0>(g, qs.data(), nr, base, h, T, scale, rows.data() + h * nr, s.data(), acc, m, l, pf);
      else
        block_head_avx512<DT>(g, qt, nr, base, sbase, h, T, scale, rows.data() + h * nr, s.data(), acc, m, l, pf);
    }
  }
  if (paired) pair_order(acc, rh, g.head_dim, false);
}

// true when the AVX-512 path ran
bool attend_task_avx512(const Geometry& g, const float* q, int64_t r0, int64_t r1, const int64_t* ids, int64_t n,
                        int last_n, float scale, float* acc, float* m, float* l) {
  if (g.head_dim % 16 != 0) return false;
  switch (g.dtype) {
    case F32: task_avx512<F32>(g, q, r0, r1, ids, n, last_n, scale, acc, m, l); return true;
    case BF16: task_avx512<BF16>(g, q, r0, r1, ids, n, last_n, scale, acc, m, l); return true;
    case F16: task_avx512<F16>(g, q, r0, r1, ids, n, last_n, scale, acc, m, l); return true;
    case FP8_E4M3: task_avx512<FP8_E4M3>(g, q, r0, r1, ids, n, last_n, scale, acc, m, l); return true;
    case FP8_E5M2: task_avx512<FP8_E5M2>(g, q, r0, r1, ids, n, last_n, scale, acc, m, l); return true;
    case INT8: task_avx512<INT8>(g, q, r0, r1, ids, n, last_n, scale, acc, m, l); return true;
    default: return false;
  }
}
#else
bool attend_task_avx512(const Geometry&, const float*, int64_t, int64_t, const int64_t*, int64_t, int, float,
                        float*, float*, float*) {
  return false;
}
#endif
