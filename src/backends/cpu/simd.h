#pragma once
// Building blocks for the cpu kernels. Strata compiles for generic x86-64, so
// hot loops live in functions marked STRATA_CPU_CLONES: GCC compiles each for
// AVX-512, AVX2+FMA and baseline x86-64 and the loader picks the best the
// machine runs. Loops inside are plain C++ that GCC vectorises (`omp simd`
// where a reduction or possible aliasing would otherwise stop it); clones are
// never inlined, so keep them at row or tile granularity, outside OpenMP
// regions.
#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__clang__)
// clang (the sanitizer/fuzz build, scripts/fuzz.sh) cannot clone templates: the baseline ISA only.
#define STRATA_CPU_CLONES
#else
#define STRATA_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

namespace strata::cpu {

// Sixteen floats, the unit of the register-blocked tile kernels (one AVX-512
// register, two AVX2 registers).
using f32x16 = float __attribute__((vector_size(64)));

// Unaligned loads and stores; passed by pointer, since a 64-byte vector by
// value has a different ABI in the baseline clone.
inline void load16(f32x16* v, const float* p) { std::memcpy(v, p, sizeof(*v)); }
inline void store16(float* p, const f32x16* v) { std::memcpy(p, v, sizeof(*v)); }

// e^c for c in [-87, 88] (Cephes' minimax polynomial after reducing by
// ln 2, 2^n built in the exponent bits), or 0 where x, which c clamps, is
// below -87 (the normal range ends there); vectorises.
inline float exp_of_clamped(float x, float c) {
  // Adding 1.5 * 2^23 rounds to the nearest integer, which lands in the low
  // mantissa bits.
  float shifted = c * 1.44269504088896341f + 12582912.0f;
  float n = shifted - 12582912.0f;
  int32_t exponent = std::bit_cast<int32_t>(shifted) - 0x4B400000;
  float r = c - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  float result = p * std::bit_cast<float>((exponent + 127) << 23);
  return x < -87.0f ? 0.0f : result;
}

// e^x with relative error below 2e-7; 0 below -87, saturates near 88.
inline float exp_approx(float x) {
  float c = x < -87.0f ? -87.0f : x;
  c = c > 88.0f ? 88.0f : c;
  return exp_of_clamped(x, c);
}

// exp_approx's bits for x <= 0 (a logit less its row's maximum), without
// the upper clamp GCC turns into masks around the whole polynomial: the
// loss's sum of exponentials runs 20% faster.
inline float exp_nonpositive(float x) { return exp_of_clamped(x, x < -87.0f ? -87.0f : x); }

// sqrt(x) within 1 ulp for x normal or 0 (subnormal x: absolute error below
// 1e-19). GCC keeps std::sqrt scalar without -fno-math-errno, so loops that
// need a vectorised root use this: a bit-level guess of 1/sqrt(x), two Newton
// steps, and one Newton step on the root itself.
inline float sqrt_approx(float x) {
  float y = std::bit_cast<float>(0x5f375a86 - (std::bit_cast<int32_t>(x) >> 1));
  y = y * (1.5f - 0.5f * x * y * y);
  y = y * (1.5f - 0.5f * x * y * y);
  float root = x * y;
  return root + 0.5f * y * (x - root * root);
}

}  // namespace strata::cpu
