#pragma once
// Building blocks for the cpu kernels. Strata compiles for generic x86-64, so
// hot loops live in functions marked STRATA_CPU_CLONES: GCC compiles each for
// AVX-512, AVX2+FMA and baseline x86-64 and the loader picks the best the
// machine runs. Loops inside are plain C++ that GCC vectorises (`omp simd`
// where a reduction or possible aliasing would otherwise stop it); clones are
// never inlined, so keep them at row or tile granularity, outside OpenMP
// regions. Loops holding a select vectorise for AVX2 only because the
// backends compile with -fno-trapping-math (src/backends/CMakeLists.txt), and
// 64-byte vector types lower to scalar code there: use 32-byte ones, or pick
// by has_avx512() as tile_gemm.h does.
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
// register, two AVX2 registers), and eight (one AVX2 register).
using f32x16 = float __attribute__((vector_size(64)));
using f32x8 = float __attribute__((vector_size(32)));

// Whether this CPU runs AVX-512 (asked once): kernels whose register blocking fits only AVX-512's 32 registers
// choose a narrower one otherwise.
inline bool has_avx512() {
  static const bool supported = __builtin_cpu_supports("avx512f");
  return supported;
}

// Unaligned loads and stores; passed by pointer, since a 64-byte vector by
// value has a different ABI in the baseline clone.
inline void load16(f32x16* v, const float* p) { std::memcpy(v, p, sizeof(*v)); }
inline void store16(float* p, const f32x16* v) { std::memcpy(p, v, sizeof(*v)); }

// Sixteen rows of sixteen floats transposed in registers: v[r][c] becomes
// v[c][r]. Four stages, each exchanging the halves of blocks of 2s elements
// between rows s apart (s = 8, 4, 2, 1); two-source shuffles, one
// instruction each on AVX-512.
using i32x16 = int32_t __attribute__((vector_size(64)));

template <int kStep>
__attribute__((always_inline)) inline void transpose16_stage(f32x16* v, const i32x16& low, const i32x16& high) {
  for (int r = 0; r < 16; ++r) {
    if ((r & kStep) != 0) continue;
    const f32x16 a = v[r], b = v[r + kStep];
    v[r] = __builtin_shuffle(a, b, low);
    v[r + kStep] = __builtin_shuffle(a, b, high);
  }
}

__attribute__((always_inline)) inline void transpose16(f32x16* v) {
  transpose16_stage<8>(v, i32x16{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
                       i32x16{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31});
  transpose16_stage<4>(v, i32x16{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
                       i32x16{4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31});
  transpose16_stage<2>(v, i32x16{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
                       i32x16{2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31});
  transpose16_stage<1>(v, i32x16{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
                       i32x16{1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31});
}

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
