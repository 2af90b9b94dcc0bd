// IEEE half and bfloat16 to and from float, exact and rounding as torch does (nearest even; NaN
// kept), for the CPU kernels that read or write 16-bit values one at a time (cpu_gguf.cpp's block
// scales, cpu_decode_ops.cpp's rows). cpu_attention.cpp keeps its own, faster loads (no inf / NaN
// in KV).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kvspill_half {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// IEEE half -> float, exact for every input (subnormals by a multiply, inf / nan by their bits).
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  if ((h & 0x7c00) == 0x7c00) return bits_to_float(sign | 0x7f800000u | (static_cast<uint32_t>(h & 0x3ff) << 13));
  float mag = bits_to_float(static_cast<uint32_t>(h & 0x7fff) << 13) * 5.192296858534828e33f;  // 2^112
  return sign ? -mag : mag;
}

// float -> IEEE half, round to nearest even; overflow to inf, NaN stays NaN (quiet).
inline uint16_t f32_to_f16(float f) {
  const uint32_t u = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00 | static_cast<uint16_t>((abs >> 13) & 0x3ff);  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00;  // rounds to inf (>= 65520)
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): a subnormal or zero
    // The float's value plus 0.5 puts the half's subnormal steps (2^-24) in the last mantissa
    // bits, where the float add rounds to nearest even.
    const float shifted = bits_to_float(abs) + 0.5f;
    return sign | static_cast<uint16_t>(float_to_bits(shifted) - float_to_bits(0.5f));
  }
  const uint32_t odd = (abs >> 13) & 1;
  return sign | static_cast<uint16_t>((abs + 0xc8000fffu + odd) >> 13);  // rebias by -112 << 23
}

inline float bf16_to_f32(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

// float -> bfloat16 as c10::BFloat16 rounds: nearest even, NaN to the quiet NaN 0x7fc0.
inline uint16_t f32_to_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t u = float_to_bits(f);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

}  // namespace kvspill_half
