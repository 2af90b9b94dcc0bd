// GGUF-quantized weights on the CPU, read in their own blocks: y = x @ W.T for a few tokens (decode)
// and W dequantized to fp32 rows (the prefill's dense matmul). Built at run time by
// kvspill/kernels/cpu_gguf.py (g++ -O3 -march=native -fopenmp -ffp-contract=off) and called through
// ctypes; the torch reference is `gguf_formats.dequantize_ref`.
//
// Exactness: `dequant_block` does gguf's fp32 operations in gguf's order (the file is built with
// -ffp-contract=off, so no multiply-add is fused), so `kvspill_cpu_gguf_dequantize` equals
// dequantize_ref bit for bit; the matmul multiplies those same fp32 weights with x in fp32 (an
// explicit fma a lane), so it differs from dequantize_ref + an fp32 matmul by reduction order only.
//
// Speed: decode reads every weight once a token, so a step costs the quantized bytes (0.56 - 1.06
// bytes a weight against the dense fp16 copy's 2) plus the arithmetic: a block is dequantized once
// into an L1 buffer for up to kMaxTokens tokens, whose dot products run in 16-lane accumulators
// that stay in registers (the token count is a template parameter). Rows go over the threads.
// Measured in bench/results/2026-12-07-cpu-gguf-gemv/.
#include <omp.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu_half.h"

namespace {

// ggml type ids (gguf.constants.GGMLQuantizationType).
enum QType : int { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14 };

constexpr int kLanes = 16;     // fp32 lanes of an accumulator (one AVX-512 register)
constexpr int kMaxTokens = 8;  // tokens a block's dequantized weights serve before the next block

// The fp16 field at p (a block's scale) as float, exact for every input.
inline float f16_to_f32(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return kvspill_half::f16_to_f32(h);
}

int block_size(int qtype) { return qtype >= Q4_K ? 256 : 32; }

int type_size(int qtype) {
  switch (qtype) {
    case Q4_0: return 18;
    case Q4_1: return 20;
    case Q5_0: return 22;
    case Q5_1: return 24;
    case Q8_0: return 34;
    case Q4_K: return 144;
    case Q5_K: return 176;
    case Q6_K: return 210;
    default: return 0;
  }
}

// Legacy blocks (32 weights): low nibbles of qs are elements 0..15, high ones 16..31; Q5 types add
// bit j of the little-endian u32 qh as bit 4 of element j. The loops are written to vectorize
// (constant trip counts, no branches inside).
inline void legacy_quants(const uint8_t* qs, int q[32]) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0x0f;
    q[j + 16] = qs[j] >> 4;
  }
}

inline void add_high_bits(const uint8_t* qh, int q[32]) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  for (int j = 0; j < 32; ++j) q[j] |= static_cast<int>((bits >> j) & 1u) << 4;
}

void dequant_legacy(int qtype, const uint8_t* b, float* w) {
  const float d = f16_to_f32(b);
  if (qtype == Q8_0) {
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
    for (int j = 0; j < 32; ++j) w[j] = static_cast<float>(qs[j]) * d;
    return;
  }
  int q[32];
  switch (qtype) {
    case Q4_0:
      legacy_quants(b + 2, q);
      for (int j = 0; j < 32; ++j) w[j] = d * static_cast<float>(q[j] - 8);
      return;
    case Q5_0:
      legacy_quants(b + 6, q);
      add_high_bits(b + 2, q);
      for (int j = 0; j < 32; ++j) w[j] = d * static_cast<float>(q[j] - 16);
      return;
    case Q5_1:
      legacy_quants(b + 8, q);
      add_high_bits(b + 4, q);
      break;
    default:  // Q4_1
      legacy_quants(b + 4, q);
  }
  const float m = f16_to_f32(b + 2);  // Q4_1, Q5_1: d * q + m
  for (int j = 0; j < 32; ++j) w[j] = d * static_cast<float>(q[j]) + m;
}

// Sub-block s (0..7) of a Q4_K / Q5_K super-block: its 6-bit scale and min (ggml's get_scale_min_k4).
inline void k_scale_min(const uint8_t* scales, int s, int* sc, int* mn) {
  if (s < 4) {
    *sc = scales[s] & 63;
    *mn = scales[s + 4] & 63;
  } else {
    *sc = (scales[s + 4] & 0x0f) | ((scales[s - 4] >> 6) << 4);
    *mn = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
  }
}

// Q4_K, Q5_K: sub-block s takes the (s % 2) nibble of qs[(s / 2) * 32 + l]; Q5_K adds bit s of qh[l].
template <bool kHighBits>
void dequant_q45k(const uint8_t* b, float* w) {
  const float d = f16_to_f32(b), dmin = f16_to_f32(b + 2);
  const uint8_t* qs = b + (kHighBits ? 48 : 16);
  for (int s = 0; s < 8; ++s) {
    int sc, mn;
    k_scale_min(b + 4, s, &sc, &mn);
    const float scale = d * static_cast<float>(sc), offset = dmin * static_cast<float>(mn);
    const uint8_t* q = qs + (s / 2) * 32;
    const int shift = (s % 2) * 4;
    float* ws = w + s * 32;
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> shift) & 0x0f;
      if (kHighBits) v |= ((b[16 + l] >> s) & 1) << 4;
      ws[l] = scale * static_cast<float>(v) - offset;
    }
  }
}

// Q6_K: element h * 128 + k * 32 + l (h < 2, k < 4, l < 32) takes nibble k / 2 of
// ql[h * 64 + (k % 2) * 32 + l] and the 2-bit field k of qh[h * 32 + l]; the int8 scale of its
// 16-element sub-block.
void dequant_q6k(const uint8_t* b, float* w) {
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_to_f32(b + 208);
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      const uint8_t* ql = b + h * 64 + (k % 2) * 32;
      const uint8_t* qh = b + 128 + h * 32;
      const int lo_shift = (k / 2) * 4, hi_shift = 2 * k;
      for (int half = 0; half < 2; ++half) {
        const float scale = d * static_cast<float>(scales[h * 8 + k * 2 + half]);
        float* ws = w + h * 128 + k * 32 + half * 16;
        for (int l = 0; l < 16; ++l) {
          const int i = half * 16 + l;
          const int q = ((ql[i] >> lo_shift) & 0x0f) | (((qh[i] >> hi_shift) & 0x03) << 4);
          ws[l] = scale * static_cast<float>(q - 32);
        }
      }
    }
  }
}

inline void dequant_block(int qtype, const uint8_t* b, float* w) {
  if (qtype == Q6_K) dequant_q6k(b, w);
  else if (qtype == Q4_K) dequant_q45k<false>(b, w);
  else if (qtype == Q5_K) dequant_q45k<true>(b, w);
  else dequant_legacy(qtype, b, w);
}

struct Weight {
  int qtype;
  const uint8_t* data;
  int64_t rows, row_stride, in_features;
};

// Rows [r0, r1) of y = x @ W.T for T tokens: x [T, in_features] rows x_stride apart, y [T, rows]
// rows y_stride apart. Each block is dequantized once for all T tokens.
template <int T>
void matmul_rows(const Weight& wt, const float* x, int64_t x_stride, float* y, int64_t y_stride,
                 int64_t r0, int64_t r1) {
  const int bs = block_size(wt.qtype), ts = type_size(wt.qtype);
  const int64_t nb = wt.in_features / bs;
  alignas(64) float w[256];
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = wt.data + r * wt.row_stride;
    alignas(64) float acc[T][kLanes] = {};
    for (int64_t blk = 0; blk < nb; ++blk) {
      dequant_block(wt.qtype, row + blk * ts, w);
      for (int t = 0; t < T; ++t) {
        const float* xb = x + t * x_stride + blk * bs;
        for (int c = 0; c < bs; c += kLanes) {
#pragma omp simd
          for (int l = 0; l < kLanes; ++l) acc[t][l] = std::fma(w[c + l], xb[c + l], acc[t][l]);
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      float s = 0.0f;
      for (int l = 0; l < kLanes; ++l) s += acc[t][l];
      y[t * y_stride + r] = s;
    }
  }
}

using RowsFn = void (*)(const Weight&, const float*, int64_t, float*, int64_t, int64_t, int64_t);

constexpr RowsFn kPortableRows[kMaxTokens] = {matmul_rows<1>, matmul_rows<2>, matmul_rows<3>, matmul_rows<4>,
                                              matmul_rows<5>, matmul_rows<6>, matmul_rows<7>, matmul_rows<8>};

#include "cpu_gguf_avx512.h"  // the AVX-512 paths (avx512_rows)

RowsFn rows_fn(int qtype, int tokens, bool portable) {
#ifdef KVSPILL_GGUF_AVX512
  if (!portable) return avx512_rows(qtype, tokens);
#endif
  (void)qtype;
  (void)portable;
  return kPortableRows[tokens - 1];
}

void matmul(RowsFn rows_of, const Weight& wt, const float* x, int64_t x_stride, float* y, int64_t y_stride,
            int threads) {
  // Chunks of rows: enough of them to even out the threads, each a few KB of weights or more.
  const int64_t chunk = wt.rows / (8 * threads) > 16 ? wt.rows / (8 * threads) : 16;
  const int64_t chunks = (wt.rows + chunk - 1) / chunk;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r1 = (c + 1) * chunk < wt.rows ? (c + 1) * chunk : wt.rows;
    rows_of(wt, x, x_stride, y, y_stride, c * chunk, r1);
  }
}

bool valid(const Weight& wt) {
  const int ts = type_size(wt.qtype);
  return ts != 0 && wt.in_features % block_size(wt.qtype) == 0 &&
         wt.row_stride >= wt.in_features / block_size(wt.qtype) * ts;
}

}  // namespace

extern "C" {

// y [num_tokens, rows] (rows y_stride apart) = x [num_tokens, in_features] (rows x_stride apart) @ W.T,
// W: `rows` rows of GGUF blocks of type `qtype`, `row_stride` bytes apart. Returns 0, or 1 for an
// unknown type or a row too short for in_features. `portable`: skip the AVX-512 path (tests).
int kvspill_cpu_gguf_matmul(int qtype, const uint8_t* data, int64_t rows, int64_t row_stride,
                            int64_t in_features, const float* x, int64_t x_stride, int64_t num_tokens,
                            float* y, int64_t y_stride, int threads, int portable) {
  const Weight wt{qtype, data, rows, row_stride, in_features};
  if (!valid(wt)) return 1;
  for (int64_t t0 = 0; t0 < num_tokens; t0 += kMaxTokens) {
    const int n = static_cast<int>(num_tokens - t0 < kMaxTokens ? num_tokens - t0 : kMaxTokens);
    matmul(rows_fn(qtype, n, portable != 0), wt, x + t0 * x_stride, x_stride, y + t0 * y_stride, y_stride, threads);
  }
  return 0;
}

// out [rows, in_features] fp32 (rows out_stride apart) = W dequantized, bit for bit dequantize_ref.
// The portable code only: it vectorizes as written and runs at the speed of the stores.
int kvspill_cpu_gguf_dequantize(int qtype, const uint8_t* data, int64_t rows, int64_t row_stride,
                                int64_t in_features, float* out, int64_t out_stride, int threads) {
  const Weight wt{qtype, data, rows, row_stride, in_features};
  if (!valid(wt)) return 1;
  const int bs = block_size(qtype), ts = type_size(qtype);
  const int64_t nb = in_features / bs;
#pragma omp parallel for num_threads(threads) schedule(static) if (rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t blk = 0; blk < nb; ++blk) dequant_block(qtype, data + r * row_stride + blk * ts, out + r * out_stride + blk * bs);
  }
  return 0;
}

}  // extern "C"
