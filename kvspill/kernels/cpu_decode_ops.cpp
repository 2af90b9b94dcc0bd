// The CPU engine's small per-layer ops, each one call instead of a chain of torch ops: RMSNorm
// with its residual add, RoPE in place, the K/V store into a host pool. A decode token's layer ran
// about forty torch ops for these (each a few microseconds of dispatch over 64-576 values).
// Built at run time by kvspill/kernels/cpu_decode_ops.py (g++ -O3 -march=native -fopenmp
// -ffp-contract=off) and called through ctypes.
//
// Every op rounds as its torch reference does (model/layers.py `rms_norm_ref`, `apply_rotary_ref`;
// kernels/store_kv.py `store_kv_ref`): each torch op on fp16 / bf16 computes in fp32 and rounds
// once to its dtype, so each is an fp32 expression here followed by the same rounding (round to
// nearest even, NaN kept). RoPE and the store equal their references bit for bit; RMSNorm's sum
// of squares is accumulated in double then rounded to fp32, where torch sums in its own fp32
// order, so an output may differ from the reference's in its last bit.
#include <cmath>
#include <cstdint>

#include "cpu_half.h"

namespace {

enum DType : int { F32 = 0, BF16 = 1, F16 = 2 };

using kvspill_half::bf16_to_f32;
using kvspill_half::f16_to_f32;
using kvspill_half::f32_to_bf16;
using kvspill_half::f32_to_f16;

inline float load(const void* p, int64_t i, int dtype) {
  switch (dtype) {
    case F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

inline void store(void* p, int64_t i, float v, int dtype) {
  switch (dtype) {
    case F16: static_cast<uint16_t*>(p)[i] = f32_to_f16(v); break;
    case BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

// v as a tensor of `dtype` holds it (the rounding of one torch op's result).
inline float round_to(float v, int dtype) {
  switch (dtype) {
    case F16: return f16_to_f32(f32_to_f16(v));
    case BF16: return bf16_to_f32(f32_to_bf16(v));
    default: return v;
  }
}

bool known(int dtype) { return dtype == F32 || dtype == BF16 || dtype == F16; }

// One row of `rms_norm_ref(x + residual, weight, eps)`.
void add_rms_norm_row(const void* x, const void* residual, int x_dtype, const void* weight, int w_dtype,
                      void* out, int out_dtype, void* residual_out, int64_t d, float eps, float* h) {
  double squares = 0.0;
  for (int64_t i = 0; i < d; ++i) {
    float v = load(x, i, x_dtype);
    if (residual != nullptr) {
      v = round_to(v + load(residual, i, x_dtype), x_dtype);
      store(residual_out, i, v, x_dtype);
    }
    h[i] = v;
    squares += static_cast<double>(v * v);  // pow(2) rounds each square to fp32
  }
  const float mean = static_cast<float>(squares) / static_cast<float>(d);
  const float rstd = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < d; ++i) {
    const float normed = round_to(h[i] * rstd, x_dtype);  // h.to(input_dtype)
    store(out, i, load(weight, i, w_dtype) * normed, out_dtype);
  }
}

// Rotates head rows in place, neox style, in the rows' dtype: cos and sin rounded to it first.
void rope_rows(void* x, int64_t num_heads, int64_t head_stride, int64_t half, int dtype, const float* cos_sin) {
  for (int64_t h = 0; h < num_heads; ++h) {
    const int64_t base = h * head_stride;
    for (int64_t i = 0; i < half; ++i) {
      const float c = round_to(cos_sin[i], dtype), s = round_to(cos_sin[half + i], dtype);
      const float x1 = load(x, base + i, dtype), x2 = load(x, base + half + i, dtype);
      const float a = round_to(x1 * c, dtype), b = round_to(x2 * s, dtype);
      const float e = round_to(x2 * c, dtype), f = round_to(x1 * s, dtype);
      store(x, base + i, a - b, dtype);
      store(x, base + half + i, e + f, dtype);
    }
  }
}

inline void* at(void* p, int64_t i, int dtype) {
  return static_cast<char*>(p) + i * (dtype == F32 ? 4 : 2);
}

inline const void* at(const void* p, int64_t i, int dtype) {
  return static_cast<const char*>(p) + i * (dtype == F32 ? 4 : 2);
}

}  // namespace

extern "C" {

// out[r] = weight * norm(x[r] (+ residual[r])); residual_out[r] = x[r] + residual[r] when residual
// is given (else unused). Strides in elements; rows in parallel when there are many (prefill).
// `threads`: torch's (an OpenMP team's default is every core, whatever torch was told).
// Returns 0, or 1 for an unknown dtype.
int kvspill_cpu_add_rms_norm(const void* x, const void* residual, int64_t x_stride, int x_dtype,
                             const void* weight, int w_dtype, void* out, int64_t out_stride, int out_dtype,
                             void* residual_out, int64_t residual_out_stride, int64_t rows, int64_t d,
                             float eps, int threads) {
  if (!known(x_dtype) || !known(w_dtype) || !known(out_dtype)) return 1;
#pragma omp parallel num_threads(threads) if (rows >= 16)
  {
    float* h = new float[d];
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      add_rms_norm_row(at(x, r * x_stride, x_dtype), residual ? at(residual, r * x_stride, x_dtype) : nullptr,
                       x_dtype, weight, w_dtype, at(out, r * out_stride, out_dtype), out_dtype,
                       residual ? at(residual_out, r * residual_out_stride, x_dtype) : nullptr, d, eps, h);
    }
    delete[] h;
  }
  return 0;
}

// q [tokens, num_heads, head_dim] and k [tokens, num_kv_heads, head_dim] (rows of contiguous
// head_dim values, any token / head strides, in elements) rotated in place by the cos / sin row
// of each token's position (cos_sin [max_positions, head_dim] fp32, its rows `cs_stride` apart).
// Returns 0, 1 for an unknown dtype, 2 for a position outside the table (nothing written then).
int kvspill_cpu_rope(void* q, int64_t q_tok_stride, int64_t q_head_stride, int64_t num_heads, void* k,
                     int64_t k_tok_stride, int64_t k_head_stride, int64_t num_kv_heads, int64_t head_dim,
                     int dtype, const int64_t* positions, int64_t tokens, const float* cos_sin,
                     int64_t cs_stride, int64_t max_positions, int threads) {
  if (!known(dtype)) return 1;
  for (int64_t t = 0; t < tokens; ++t)
    if (positions[t] < 0 || positions[t] >= max_positions) return 2;
  const int64_t half = head_dim / 2;
#pragma omp parallel for num_threads(threads) schedule(static) if (tokens >= 16)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = cos_sin + positions[t] * cs_stride;
    rope_rows(at(q, t * q_tok_stride, dtype), num_heads, q_head_stride, half, dtype, row);
    rope_rows(at(k, t * k_tok_stride, dtype), num_kv_heads, k_head_stride, half, dtype, row);
  }
  return 0;
}

// k, v [tokens, num_kv_heads, head_dim] (contiguous rows; token / head strides in elements, one
// set for both) into their slots of one layer's pool [num_blocks, 2, block_size, num_kv_heads,
// head_dim] (strides in elements: block, K-or-V, slot, head; rows contiguous), converted to the
// pool's dtype. A negative slot is skipped. Returns 0, 1 for an unknown dtype, 2 for a slot past
// the pool (nothing written then).
int kvspill_cpu_store_kv(const void* k, const void* v, int64_t tok_stride, int64_t head_stride, int src_dtype,
                         int64_t tokens, int64_t num_kv_heads, int64_t head_dim, void* pool, int pool_dtype,
                         int64_t block_stride, int64_t kv_stride, int64_t slot_stride, int64_t pool_head_stride,
                         int64_t block_size, int64_t num_blocks, const int64_t* slots, int threads) {
  if (!known(src_dtype) || !known(pool_dtype)) return 1;
  for (int64_t t = 0; t < tokens; ++t)
    if (slots[t] >= block_size * num_blocks) return 2;
#pragma omp parallel for num_threads(threads) schedule(static) if (tokens >= 64)
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    const int64_t dst = (slots[t] / block_size) * block_stride + (slots[t] % block_size) * slot_stride;
    for (int64_t h = 0; h < num_kv_heads; ++h) {
      const int64_t src = t * tok_stride + h * head_stride, row = dst + h * pool_head_stride;
      for (int64_t i = 0; i < head_dim; ++i) {
        store(pool, row + i, load(k, src + i, src_dtype), pool_dtype);
        store(pool, row + kv_stride + i, load(v, src + i, src_dtype), pool_dtype);
      }
    }
  }
  return 0;
}

}  // extern "C"
