// Unmasked attention of query rows over KV blocks in a host pool, read in place through a block
// table: each KV byte is read once, converted to fp32 in registers/L1, never gathered.
// Built at run time by kvspill/kernels/cpu_attention.py (g++ -O3 -march=native -fopenmp) and
// called through ctypes; the torch reference is `cold_math.attend_unmasked_ref`.
//
// Pool layout (every tier): [num_blocks, num_layers, 2, block_size, num_kv_heads, row_stride];
// a row holds head_dim values (row_stride = head_dim; int8 blocks hold a plane of head_dim-byte
// value rows, then a plane of their fp32 scales: kernels/kv_quant.py); the caller passes the element offsets of one
// layer's K and V inside a block and the block stride. Work: tasks = (part, split of its
// blocks), each over all kv heads so that a task streams whole contiguous K and V slabs of a
// block (block_size * num_kv_heads * head_dim). Split partials merge by log-sum-exp at the end.
// A part's last block may be partial (`last_tokens`: a decode row's block being filled): only its
// first tokens are read, so the whole of a sequence's keys takes one call.
// Output o, lse in fp32 (natural log).
//
// Speed (bench/results/2026-11-27-cpu-attention-kernel/): the arithmetic is fp32 FMAs on
// values converted in registers (bf16: two integer ops per 32 values), every loop over query
// rows has a constant trip count (accumulators stay in registers), and the next block is
// prefetched a few lines at a time inside the compute loops so that memory and arithmetic
// overlap.
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
                         int last_n, float scale, float* acc, float* m, float* l) {
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
    const int T = b + 1 == n ? last_n : BS;  // tokens of this block (s keeps rows of BS)
    for (int h = 0; h < KV; ++h) {
      for (int t = 0; t < T; ++t) {
        const int64_t th = static_cast<int64_t>(t) * KV + h;
        float ks = per_token ? g.scales[sbase + g.k_scale_off + th * g.scale_row_stride] : g.k_scale;
        load_row(g.pool, g.dtype, base + g.k_off + th * g.row_stride, D, ks, &kf[static_cast<size_t>(t) * D]);
      }
      // scores: folded row i = (token r, head h*group + j)
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t r = i / group, head = static_cast<int64_t>(h) * group + i % group;
        const float* qi = q + ((r0 + r) * H + head) * D;
        for (int t = 0; t < T; ++t) {
          const float* kt = &kf[static_cast<size_t>(t) * D];
          float dot = 0.f;
#pragma omp simd reduction(+ : dot)
          for (int d = 0; d < D; ++d) dot += qi[d] * kt[d];
          s[i * BS + t] = dot * scale;
        }
      }
      for (int t = 0; t < T; ++t) {
        const int64_t th = static_cast<int64_t>(t) * KV + h;
        float vs = per_token ? g.scales[sbase + g.v_scale_off + th * g.scale_row_stride] : g.v_scale;
        load_row(g.pool, g.dtype, base + g.v_off + th * g.row_stride, D, vs, &vf[static_cast<size_t>(t) * D]);
      }
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t r = i / group, head = static_cast<int64_t>(h) * group + i % group;
        const int64_t mi = r * H + head;
        float* si = &s[i * BS];
        float bmax = si[0];
        for (int t = 1; t < T; ++t) bmax = si[t] > bmax ? si[t] : bmax;
        const float m_new = m[mi] > bmax ? m[mi] : bmax;
        const float alpha = std::exp(m[mi] - m_new);  // 0 on the first block (m = -inf)
        float psum = 0.f;
        for (int t = 0; t < T; ++t) {
          si[t] = std::exp(si[t] - m_new);
          psum += si[t];
        }
        l[mi] = l[mi] * alpha + psum;
        m[mi] = m_new;
        float* ai = acc + mi * D;
#pragma omp simd
        for (int d = 0; d < D; ++d) ai[d] *= alpha;
        for (int t = 0; t < T; ++t) {
          const float p = si[t];
          const float* vt = &vf[static_cast<size_t>(t) * D];
#pragma omp simd
          for (int d = 0; d < D; ++d) ai[d] += p * vt[d];
        }
      }
    }
  }
}


#include "cpu_attention_avx512.h"  // the AVX-512 paths (attend_task_avx512)

// One task: rows [r0, r1) of q over blocks ids[0..n), the last one's first last_n tokens;
// writes un-normalized acc [rows, heads, dim], running max m and sum l [rows, heads].
void attend_task(const Geometry& g, const float* q, int64_t r0, int64_t r1, const int64_t* ids, int64_t n,
                 int last_n, float scale, float* acc, float* m, float* l) {
  const int64_t rh = (r1 - r0) * g.num_heads;
  for (int64_t i = 0; i < rh; ++i) {
    m[i] = -std::numeric_limits<float>::infinity();
    l[i] = 0.f;
  }
  std::memset(acc, 0, sizeof(float) * rh * g.head_dim);
  if (!attend_task_avx512(g, q, r0, r1, ids, n, last_n, scale, acc, m, l))
    attend_task_generic(g, q, r0, r1, ids, n, last_n, scale, acc, m, l);
}

}  // namespace

extern "C" {

// q: [num_rows, num_heads, head_dim] fp32 contiguous. Part p owns rows [row_start[p], row_end[p])
// and block ids ids[block_start[p] .. block_start[p+1]). o: [num_rows, num_heads, head_dim],
// lse: [num_rows, num_heads], fp32; only the parts' rows are written (no keys: o 0, lse -inf).
// split_blocks: blocks per task (a part of n blocks runs as ceil(n / split_blocks) tasks).
// last_tokens: null (every block full) or [num_parts], the tokens of each part's last block
// (1 .. block_size).
int kvspill_cpu_attend(const float* q, int64_t num_heads, const void* pool, int dtype, int64_t block_stride,
                       int64_t k_off, int64_t v_off, int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
                       int64_t row_stride, const float* scales, int64_t scale_block_stride, int64_t k_scale_off,
                       int64_t v_scale_off, int64_t scale_row_stride,
                       float k_scale, float v_scale, const int64_t* ids, const int64_t* block_start,
                       const int64_t* row_start, const int64_t* row_end, const int64_t* last_tokens,
                       int64_t num_parts, float scale,
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
    if (nb > 0 && last_tokens && (last_tokens[p] < 1 || last_tokens[p] > block_size)) return 2;
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
    const bool ends_part = t_b0[t] + t_n[t] == block_start[p + 1];  // holds the part's last block
    const int last_n = static_cast<int>(ends_part && last_tokens ? last_tokens[p] : block_size);
    attend_task(g, q, row_start[p], row_end[p], ids + t_b0[t], t_n[t], last_n, scale, acc, acc + rh * head_dim,
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
