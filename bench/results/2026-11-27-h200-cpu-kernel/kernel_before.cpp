// Unmasked attention of query rows over KV blocks in a host pool, read in place through a block
// table: each KV byte is read once, converted to fp32 in registers/L1, never gathered.
// Built at run time by kvspill/kernels/cpu_attention.py (g++ -O3 -march=native -fopenmp) and
// called through ctypes; the torch reference is `cold_math.attend_unmasked_ref`.
//
// Pool layout (every tier): [num_blocks, num_layers, 2, block_size, num_kv_heads, row_stride];
// a row holds head_dim values (row_stride = head_dim, or head_dim + 4 bytes for int8, whose rows
// end with their fp32 scale: kernels/kv_quant.py); the caller passes the element offsets of one
// layer's K and V inside a block and the block stride. Work: tasks = (part, split of its blocks), each over all kv heads so that a task
// streams whole contiguous K and V slabs of a block (block_size * num_kv_heads * head_dim).
// Split partials merge by log-sum-exp at the end. Output o, lse in fp32 (natural log).
#include <omp.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

enum DType : int { F32 = 0, BF16 = 1, F16 = 2, FP8_E4M3 = 3, FP8_E5M2 = 4, INT8 = 5 };

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Exponent-rebias by a multiply: exact for normals and subnormals of the narrow format (no inf/nan in KV).
inline float f16_to_f32(uint16_t h) {
  float mag = bits_to_float(static_cast<uint32_t>(h & 0x7fff) << 13) * 5.192296858534828e33f;  // 2^112
  return (h & 0x8000) ? -mag : mag;
}
inline float e4m3_to_f32(uint8_t x) {
  float mag = bits_to_float(static_cast<uint32_t>(x & 0x7f) << 20) * 1.329227995784916e36f;  // 2^120
  return (x & 0x80) ? -mag : mag;
}
inline float e5m2_to_f32(uint8_t x) { return f16_to_f32(static_cast<uint16_t>(x) << 8); }

// n values at src (element index `off` of a pool of `dtype`) to fp32, times `scale` (fp8) or the
// per-token-per-head scale of int8 (passed in `scale`).
inline void load_row(const void* pool, int dtype, int64_t off, int n, float scale, float* dst) {
  switch (dtype) {
    case F32: {
      const float* s = static_cast<const float*>(pool) + off;
#pragma omp simd
      for (int d = 0; d < n; ++d) dst[d] = s[d];
      break;
    }
    case BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(pool) + off;
#pragma omp simd
      for (int d = 0; d < n; ++d) dst[d] = bits_to_float(static_cast<uint32_t>(s[d]) << 16);
      break;
    }
    case F16: {
      const uint16_t* s = static_cast<const uint16_t*>(pool) + off;
#pragma omp simd
      for (int d = 0; d < n; ++d) dst[d] = f16_to_f32(s[d]);
      break;
    }
    case FP8_E4M3: {
      const uint8_t* s = static_cast<const uint8_t*>(pool) + off;
#pragma omp simd
      for (int d = 0; d < n; ++d) dst[d] = e4m3_to_f32(s[d]) * scale;
      break;
    }
    case FP8_E5M2: {
      const uint8_t* s = static_cast<const uint8_t*>(pool) + off;
#pragma omp simd
      for (int d = 0; d < n; ++d) dst[d] = e5m2_to_f32(s[d]) * scale;
      break;
    }
    default: {  // INT8
      const int8_t* s = static_cast<const int8_t*>(pool) + off;
#pragma omp simd
      for (int d = 0; d < n; ++d) dst[d] = static_cast<float>(s[d]) * scale;
      break;
    }
  }
}

struct Geometry {
  const void* pool;
  int dtype;
  int64_t block_stride, k_off, v_off;  // elements
  int block_size, num_kv_heads, head_dim, num_heads;
  int64_t row_stride;  // pool elements from one (token, kv head) row to the next
  // int8: per-token-per-head fp32 scales (in the pool's own rows: the caller passes the pool as
  // floats), with their own block stride, K/V offsets and row stride; fp8: one scale for K and V.
  const float* scales;
  int64_t scale_block_stride, k_scale_off, v_scale_off, scale_row_stride;
  float k_scale, v_scale;
};

// Portable path (any head_dim, no AVX-512): per kv head, K and V rows to fp32 buffers first.
void attend_task_generic(const Geometry& g, const float* q, int64_t r0, int64_t r1, const int64_t* ids, int64_t n,
                 float scale, float* acc, float* m, float* l) {
  const int D = g.head_dim, H = g.num_heads, KV = g.num_kv_heads, BS = g.block_size;
  const int group = H / KV;
  const int64_t rows = r1 - r0;
  const int64_t nr = rows * group;  // folded rows per kv head
  std::vector<float> kf(static_cast<size_t>(BS) * D), vf(static_cast<size_t>(BS) * D);
  std::vector<float> s(static_cast<size_t>(nr) * BS);
  const bool per_token = g.dtype == INT8;
  for (int64_t b = 0; b < n; ++b) {
    const int64_t base = ids[b] * g.block_stride;
    const int64_t sbase = per_token ? ids[b] * g.scale_block_stride : 0;
    for (int h = 0; h < KV; ++h) {
      for (int t = 0; t < BS; ++t) {
        const int64_t th = static_cast<int64_t>(t) * KV + h;
        float ks = per_token ? g.scales[sbase + g.k_scale_off + th * g.scale_row_stride] : g.k_scale;
        load_row(g.pool, g.dtype, base + g.k_off + th * g.row_stride, D, ks, &kf[static_cast<size_t>(t) * D]);
      }
      // scores: folded row i = (token r, head h*group + j)
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t r = i / group, head = static_cast<int64_t>(h) * group + i % group;
        const float* qi = q + ((r0 + r) * H + head) * D;
        for (int t = 0; t < BS; ++t) {
          const float* kt = &kf[static_cast<size_t>(t) * D];
          float dot = 0.f;
#pragma omp simd reduction(+ : dot)
          for (int d = 0; d < D; ++d) dot += qi[d] * kt[d];
          s[i * BS + t] = dot * scale;
        }
      }
      for (int t = 0; t < BS; ++t) {
        const int64_t th = static_cast<int64_t>(t) * KV + h;
        float vs = per_token ? g.scales[sbase + g.v_scale_off + th * g.scale_row_stride] : g.v_scale;
        load_row(g.pool, g.dtype, base + g.v_off + th * g.row_stride, D, vs, &vf[static_cast<size_t>(t) * D]);
      }
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t r = i / group, head = static_cast<int64_t>(h) * group + i % group;
        const int64_t mi = r * H + head;
        float* si = &s[i * BS];
        float bmax = si[0];
        for (int t = 1; t < BS; ++t) bmax = si[t] > bmax ? si[t] : bmax;
        const float m_new = m[mi] > bmax ? m[mi] : bmax;
        const float alpha = std::exp(m[mi] - m_new);  // 0 on the first block (m = -inf)
        float psum = 0.f;
        for (int t = 0; t < BS; ++t) {
          si[t] = std::exp(si[t] - m_new);
          psum += si[t];
        }
        l[mi] = l[mi] * alpha + psum;
        m[mi] = m_new;
        float* ai = acc + mi * D;
#pragma omp simd
        for (int d = 0; d < D; ++d) ai[d] *= alpha;
        for (int t = 0; t < BS; ++t) {
          const float p = si[t];
          const float* vt = &vf[static_cast<size_t>(t) * D];
#pragma omp simd
          for (int d = 0; d < D; ++d) ai[d] += p * vt[d];
        }
      }
    }
  }
}


#if defined(__AVX512F__)

// 16 values of a pool of type DT at element `off`, to fp32 (times `scale` for fp8/int8).
template <int DT>
inline __m512 load16(const void* pool, int64_t off, __m512 scale) {
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
      return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), scale);
    } else if constexpr (DT == FP8_E5M2) {  // the top byte of an fp16
      __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8);
      return _mm512_mul_ps(_mm512_cvtph_ps(h), scale);
    } else {  // FP8_E4M3: rebias the exponent by a multiply (exact for normals and subnormals)
      __m512i x = _mm512_cvtepu8_epi32(b);
      __m512i mag = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x7f)), 20);
      __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24);
      __m512 f = _mm512_mul_ps(_mm512_castsi512_ps(mag), _mm512_set1_ps(1.329227995784916e36f));
      f = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(f), sign));
      return _mm512_mul_ps(f, scale);
    }
  }
}

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

// One kv head of one block, AVX-512 (head_dim % 16 == 0). Folded row i is (token i / group, q
// head h * group + i % group), `rows[i]` its row * num_heads + head. K and V are converted 16
// values at a time straight from the pool, once per kRowTile rows; V is accumulated in
// registers across the block's tokens. s: [nr, BS] scratch.
#if defined(__AVX512BF16__)
// bf16 pools: q . k with the bf16 dot instruction, 32 products a step, no conversion of K.
// q is rounded to bf16 once (qb, same indexing as q from row r0): the GPU kernels' precision.
void scores_bf16(const Geometry& g, const uint16_t* qb, int64_t nr, int64_t base, int h, float scale,
                 const int64_t* rows, float* s) {
  const int D = g.head_dim, KV = g.num_kv_heads, BS = g.block_size, C = D / 32;
  const uint16_t* pool = static_cast<const uint16_t*>(g.pool);
  for (int64_t i0 = 0; i0 < nr; i0 += kRowTile) {
    const int nt = static_cast<int>(nr - i0 < kRowTile ? nr - i0 : kRowTile);
    const uint16_t* qr[kRowTile];
    for (int j = 0; j < kRowTile; ++j) qr[j] = qb + rows[i0 + (j < nt ? j : 0)] * D;
    for (int t = 0; t < BS; ++t) {
      const uint16_t* src = pool + base + g.k_off + (static_cast<int64_t>(t) * KV + h) * g.row_stride;
      __m512 a[kRowTile];
      for (int j = 0; j < kRowTile; ++j) a[j] = _mm512_setzero_ps();
      for (int c = 0; c < C; ++c) {
        const __m512bh kc = (__m512bh)_mm512_loadu_si512(src + c * 32);
        for (int j = 0; j < kRowTile; ++j)
          a[j] = _mm512_dpbf16_ps(a[j], (__m512bh)_mm512_loadu_si512(qr[j] + c * 32), kc);
      }
      alignas(16) float dots[4];
      _mm_store_ps(dots, _mm_mul_ps(reduce4(a[0], a[1], a[2], a[3]), _mm_set1_ps(scale)));
      for (int j = 0; j < nt; ++j) s[(i0 + j) * BS + t] = dots[j];
    }
  }
}
#endif

template <int DT>
void block_head_avx512(const Geometry& g, const float* q, const uint16_t* qb, int64_t r0, int64_t nr, int64_t base,
                       int64_t sbase, int h, float scale, const int64_t* rows, float* s, float* acc, float* m,
                       float* l) {
  const int D = g.head_dim, H = g.num_heads, KV = g.num_kv_heads, BS = g.block_size, C = D / 16;
#if defined(__AVX512BF16__)
  if (DT == BF16 && qb != nullptr) scores_bf16(g, qb, nr, base, h, scale, rows, s);
#endif
  for (int64_t i0 = 0; i0 < nr && qb == nullptr; i0 += kRowTile) {
    const int nt = static_cast<int>(nr - i0 < kRowTile ? nr - i0 : kRowTile);
    const float* qr[kRowTile];
    for (int j = 0; j < kRowTile; ++j) qr[j] = q + (r0 * H + rows[i0 + (j < nt ? j : 0)]) * D;
    for (int t = 0; t < BS; ++t) {
      const int64_t th = static_cast<int64_t>(t) * KV + h;
      const __m512 ks =
          _mm512_set1_ps(DT == INT8 ? g.scales[sbase + g.k_scale_off + th * g.scale_row_stride] : g.k_scale);
      __m512 a[kRowTile];
      for (int j = 0; j < kRowTile; ++j) a[j] = _mm512_setzero_ps();
      for (int c = 0; c < C; ++c) {
        const __m512 kc = load16<DT>(g.pool, base + g.k_off + th * g.row_stride + c * 16, ks);
        for (int j = 0; j < kRowTile; ++j) a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(qr[j] + c * 16), kc, a[j]);
      }
      alignas(16) float dots[4];
      _mm_store_ps(dots, _mm_mul_ps(reduce4(a[0], a[1], a[2], a[3]), _mm_set1_ps(scale)));
      for (int j = 0; j < nt; ++j) s[(i0 + j) * BS + t] = dots[j];
    }
  }
  for (int64_t i = 0; i < nr; ++i) {  // online softmax: s becomes p, acc rows rescaled
    const int64_t mi = rows[i];
    float* si = s + i * BS;
    float bmax = si[0];
    for (int t = 1; t < BS; ++t) bmax = si[t] > bmax ? si[t] : bmax;
    const float m_new = m[mi] > bmax ? m[mi] : bmax;
    const __m512 mv = _mm512_set1_ps(m_new);
    __m512 psum = _mm512_setzero_ps();
    for (int t = 0; t < BS; t += 16) {
      const __mmask16 k = BS - t >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (BS - t)) - 1);
      const __m512 p = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, si + t), mv)));
      _mm512_mask_storeu_ps(si + t, k, p);
      psum = _mm512_add_ps(psum, p);
    }
    const float alpha = std::exp(m[mi] - m_new);  // 0 on the first block (m = -inf)
    l[mi] = l[mi] * alpha + _mm512_reduce_add_ps(psum);
    m[mi] = m_new;
    float* ai = acc + mi * D;
    const __m512 av = _mm512_set1_ps(alpha);
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(ai + c * 16, _mm512_mul_ps(_mm512_loadu_ps(ai + c * 16), av));
  }
  for (int64_t i0 = 0; i0 < nr; i0 += kRowTile) {
    const int nt = static_cast<int>(nr - i0 < kRowTile ? nr - i0 : kRowTile);
    for (int c = 0; c < C; ++c) {
      __m512 a[kRowTile];
      for (int j = 0; j < nt; ++j) a[j] = _mm512_loadu_ps(acc + rows[i0 + j] * D + c * 16);
      for (int t = 0; t < BS; ++t) {
        const int64_t th = static_cast<int64_t>(t) * KV + h;
        const __m512 vs =
            _mm512_set1_ps(DT == INT8 ? g.scales[sbase + g.v_scale_off + th * g.scale_row_stride] : g.v_scale);
        const __m512 vc = load16<DT>(g.pool, base + g.v_off + th * g.row_stride + c * 16, vs);
        for (int j = 0; j < nt; ++j) a[j] = _mm512_fmadd_ps(_mm512_set1_ps(s[(i0 + j) * BS + t]), vc, a[j]);
      }
      for (int j = 0; j < nt; ++j) _mm512_storeu_ps(acc + rows[i0 + j] * D + c * 16, a[j]);
    }
  }
}

template <int DT>
void task_avx512(const Geometry& g, const float* q, int64_t r0, int64_t r1, const int64_t* ids, int64_t n,
                 float scale, float* acc, float* m, float* l) {
  const int group = g.num_heads / g.num_kv_heads;
  const int64_t nr = (r1 - r0) * group;
  std::vector<float> s(static_cast<size_t>(g.num_kv_heads * nr) * (g.block_size + 1));
  std::vector<int64_t> rows(static_cast<size_t>(g.num_kv_heads * nr));  // (head, folded row) -> row * H + head
  for (int h = 0; h < g.num_kv_heads; ++h)
    for (int64_t i = 0; i < nr; ++i) rows[h * nr + i] = (i / group) * g.num_heads + static_cast<int64_t>(h) * group + i % group;
  const int64_t elem = DT == F32 ? 4 : (DT == BF16 || DT == F16) ? 2 : 1;
  const int64_t slab_bytes = static_cast<int64_t>(g.block_size) * g.num_kv_heads * g.row_stride * elem;
  const char* pool = static_cast<const char*>(g.pool);
  std::vector<uint16_t> qb;  // bf16 pools: q rows r0..r1 rounded to bf16 for the dot instruction
#if defined(__AVX512BF16__)
  if (DT == BF16 && g.head_dim % 32 == 0) {
    const int64_t count = (r1 - r0) * g.num_heads * g.head_dim;  // a multiple of 32
    qb.resize(static_cast<size_t>(count));
    const float* q0 = q + r0 * g.num_heads * g.head_dim;
    for (int64_t i = 0; i < count; i += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&qb[i]), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(q0 + i)));
  }
#endif
  const uint16_t* qb_ptr = qb.empty() ? nullptr : qb.data();
  for (int64_t b = 0; b < n; ++b) {
    const int64_t base = ids[b] * g.block_stride;
    const int64_t sbase = DT == INT8 ? ids[b] * g.scale_block_stride : 0;
    if (b + 1 < n) {  // the heads walk a block with a stride: have the next block's slabs fetched to L2
      const int64_t next = ids[b + 1] * g.block_stride;
      for (int64_t off = 0; off < slab_bytes; off += 64) {
        _mm_prefetch(pool + (next + g.k_off) * elem + off, _MM_HINT_T1);
        _mm_prefetch(pool + (next + g.v_off) * elem + off, _MM_HINT_T1);
      }
    }
    for (int h = 0; h < g.num_kv_heads; ++h)
      block_head_avx512<DT>(g, q, qb_ptr, r0, nr, base, sbase, h, scale, rows.data() + h * nr, s.data(), acc, m, l);
  }
}

// true when the AVX-512 path ran
bool attend_task_avx512(const Geometry& g, const float* q, int64_t r0, int64_t r1, const int64_t* ids, int64_t n,
                        float scale, float* acc, float* m, float* l) {
  if (g.head_dim % 16 != 0) return false;
  switch (g.dtype) {
    case F32: task_avx512<F32>(g, q, r0, r1, ids, n, scale, acc, m, l); return true;
    case BF16: task_avx512<BF16>(g, q, r0, r1, ids, n, scale, acc, m, l); return true;
    case F16: task_avx512<F16>(g, q, r0, r1, ids, n, scale, acc, m, l); return true;
    case FP8_E4M3: task_avx512<FP8_E4M3>(g, q, r0, r1, ids, n, scale, acc, m, l); return true;
    case FP8_E5M2: task_avx512<FP8_E5M2>(g, q, r0, r1, ids, n, scale, acc, m, l); return true;
    case INT8: task_avx512<INT8>(g, q, r0, r1, ids, n, scale, acc, m, l); return true;
    default: return false;
  }
}
#else
bool attend_task_avx512(const Geometry&, const float*, int64_t, int64_t, const int64_t*, int64_t, float, float*,
                        float*, float*) {
  return false;
}
#endif

// One task: rows [r0, r1) of q over blocks ids[0..n); writes un-normalized acc [rows, heads, dim],
// running max m and sum l [rows, heads].
void attend_task(const Geometry& g, const float* q, int64_t r0, int64_t r1, const int64_t* ids, int64_t n,
                 float scale, float* acc, float* m, float* l) {
  const int64_t rh = (r1 - r0) * g.num_heads;
  for (int64_t i = 0; i < rh; ++i) {
    m[i] = -std::numeric_limits<float>::infinity();
    l[i] = 0.f;
  }
  std::memset(acc, 0, sizeof(float) * rh * g.head_dim);
  if (!attend_task_avx512(g, q, r0, r1, ids, n, scale, acc, m, l))
    attend_task_generic(g, q, r0, r1, ids, n, scale, acc, m, l);
}

}  // namespace

extern "C" {

// q: [num_rows, num_heads, head_dim] fp32 contiguous. Part p owns rows [row_start[p], row_end[p])
// and block ids ids[block_start[p] .. block_start[p+1]). o: [num_rows, num_heads, head_dim],
// lse: [num_rows, num_heads], fp32; only the parts' rows are written (no keys: o 0, lse -inf).
// split_blocks: blocks per task (a part of n blocks runs as ceil(n / split_blocks) tasks).
int kvspill_cpu_attend(const float* q, int64_t num_heads, const void* pool, int dtype, int64_t block_stride,
                       int64_t k_off, int64_t v_off, int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
                       int64_t row_stride, const float* scales, int64_t scale_block_stride, int64_t k_scale_off,
                       int64_t v_scale_off, int64_t scale_row_stride,
                       float k_scale, float v_scale, const int64_t* ids, const int64_t* block_start,
                       const int64_t* row_start, const int64_t* row_end, int64_t num_parts, float scale,
                       int64_t split_blocks, int num_threads, float* o, float* lse) {
  if (num_heads % num_kv_heads != 0 || split_blocks < 1) return 1;
  Geometry g{pool,
             dtype,
             block_stride,
             k_off,
             v_off,
             static_cast<int>(block_size),
             static_cast<int>(num_kv_heads),
             static_cast<int>(head_dim),
             static_cast<int>(num_heads),
             row_stride,
             scales,
             scale_block_stride,
             k_scale_off,
             v_scale_off,
             scale_row_stride,
             k_scale,
             v_scale};
  // Task list: (part, first block, num blocks); each task's partial has its own scratch.
  std::vector<int64_t> t_part, t_b0, t_n, t_off;
  int64_t scratch = 0;
  for (int64_t p = 0; p < num_parts; ++p) {
    const int64_t nb = block_start[p + 1] - block_start[p];
    const int64_t rows = row_end[p] - row_start[p];
    for (int64_t b0 = 0; b0 < nb; b0 += split_blocks) {
      t_part.push_back(p);
      t_b0.push_back(block_start[p] + b0);
      t_n.push_back(nb - b0 < split_blocks ? nb - b0 : split_blocks);
      t_off.push_back(scratch);
      scratch += rows * num_heads * (head_dim + 2);
    }
  }
  const int64_t num_tasks = static_cast<int64_t>(t_part.size());
  std::vector<float> buf(static_cast<size_t>(scratch));
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads)
  for (int64_t t = 0; t < num_tasks; ++t) {
    const int64_t p = t_part[t];
    const int64_t rh = (row_end[p] - row_start[p]) * num_heads;
    float* acc = &buf[t_off[t]];
    attend_task(g, q, row_start[p], row_end[p], ids + t_b0[t], t_n[t], scale, acc, acc + rh * head_dim,
                acc + rh * (head_dim + 1));
  }
  // Merge each part's task partials: o = sum_t e^(m_t - M) acc_t / sum_t e^(m_t - M) l_t.
  int64_t t = 0;
  for (int64_t p = 0; p < num_parts; ++p) {
    const int64_t rh = (row_end[p] - row_start[p]) * num_heads;
    int64_t t_end = t;
    while (t_end < num_tasks && t_part[t_end] == p) ++t_end;
    float* o_p = o + row_start[p] * num_heads * head_dim;
    float* lse_p = lse + row_start[p] * num_heads;
    for (int64_t i = 0; i < rh; ++i) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t k = t; k < t_end; ++k) {
        const float mk = buf[t_off[k] + rh * head_dim + i];
        mx = mk > mx ? mk : mx;
      }
      float* oi = o_p + i * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) oi[d] = 0.f;
      if (t == t_end || mx == -std::numeric_limits<float>::infinity()) {
        lse_p[i] = -std::numeric_limits<float>::infinity();
        continue;
      }
      float denom = 0.f;
      for (int64_t k = t; k < t_end; ++k) {
        const float* base = &buf[t_off[k]];
        const float w = std::exp(base[rh * head_dim + i] - mx);
        denom += w * base[rh * (head_dim + 1) + i];
        const float* ai = base + i * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) oi[d] += w * ai[d];
      }
      for (int64_t d = 0; d < head_dim; ++d) oi[d] /= denom;
      lse_p[i] = mx + std::log(denom);
    }
    t = t_end;
  }
  return 0;
}

}  // extern "C"
