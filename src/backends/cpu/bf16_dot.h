#pragma once
// Building blocks for kernels on the CPU's bf16 dot-product instruction
// (AVX512_BF16 vdpbf16ps: 16 f32 lanes each += the products of a pair of bf16
// values). Functions marked STRATA_BF16_DOT are compiled for that instruction
// set only, so callers run them only when has_bf16_dot() says the CPU has it
// and keep a portable path otherwise.
//
// Operands are bf16 pairs along the depth of a product held in uint32_t, the
// lower-addressed value in the low half (as two adjacent bf16 in memory are).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

#define STRATA_BF16_DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

namespace strata::cpu {

inline bool has_bf16_dot() {
  static const bool supported = __builtin_cpu_supports("avx512bf16");
  return supported;
}

// c[4, 16 * kVectors] (+)= a[4, pairs] b[pairs, 16 * kVectors], where row r
// of a is `pairs` pairs starting at a + r * lda and row p of b is
// 16 * kVectors pairs starting at b + p * ldb; held in registers across the
// depth, f32 accumulation.
template <int kVectors>
STRATA_BF16_DOT __attribute__((always_inline)) inline void dot_block(int64_t pairs, const uint32_t* a, int64_t lda,
                                                                     const uint32_t* b, int64_t ldb, float* c,
                                                                     int64_t ldc, bool accumulate) {
  __m512 acc[4][kVectors];
  for (int r = 0; r < 4; ++r) {
    for (int v = 0; v < kVectors; ++v) acc[r][v] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[kVectors];
    for (int v = 0; v < kVectors; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + p * ldb + 16 * v);
    for (int r = 0; r < 4; ++r) {
      auto av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r * lda + p]));
      for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int v = 0; v < kVectors; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
  }
}

// The attention kernels' products (amx_tiles.h states the contract) on these
// instructions, in strips of 4 rows, for CPUs without AMX tiles.
struct DotStrips {
  static constexpr int64_t kRows = 4;
  static constexpr int64_t kDepthPairs = 1;

  // Blocks of at most five vectors (4 x 5 accumulators fill the registers
  // with room for the operands).
  STRATA_BF16_DOT __attribute__((always_inline)) void product(int64_t blocks, int64_t pairs, const uint32_t* a,
                                                              int64_t lda, const uint32_t* b, int64_t ldb, float* c,
                                                              int64_t ldc, bool accumulate) const {
    for (; blocks > 5; blocks -= 4, b += 64, c += 64) dot_block<4>(pairs, a, lda, b, ldb, c, ldc, accumulate);
    switch (blocks) {
      case 5: dot_block<5>(pairs, a, lda, b, ldb, c, ldc, accumulate); break;
      case 4: dot_block<4>(pairs, a, lda, b, ldb, c, ldc, accumulate); break;
      case 3: dot_block<3>(pairs, a, lda, b, ldb, c, ldc, accumulate); break;
      case 2: dot_block<2>(pairs, a, lda, b, ldb, c, ldc, accumulate); break;
      case 1: dot_block<1>(pairs, a, lda, b, ldb, c, ldc, accumulate); break;
      default: break;
    }
  }
};

// e^x, simd.h's exp_approx on 16 lanes (same polynomial and range).
STRATA_BF16_DOT __attribute__((always_inline)) inline __m512 exp16(__m512 x) {
  __m512 c = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  __m512 shifted = _mm512_fmadd_ps(c, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(12582912.0f));
  __m512 n = _mm512_sub_ps(shifted, _mm512_set1_ps(12582912.0f));
  __m512i exponent = _mm512_sub_epi32(_mm512_castps_si512(shifted), _mm512_set1_epi32(0x4B400000));
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), c);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  __m512 power = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(exponent, _mm512_set1_epi32(127)), 23));
  __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), _mm512_mul_ps(p, power));
}

// 16 floats rounded to bf16 (nearest even) and stored as 8 pairs.
STRATA_BF16_DOT __attribute__((always_inline)) inline void store_bf16x16(uint32_t* out, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), (__m256i)_mm512_cvtneps_pbh(x));
}

// Rows a and b (16 columns) rounded to bf16 and interleaved into 16 pairs
// (a[j], b[j]): a tile stored as pairs of rows, the right operand of a
// product over its rows.
STRATA_BF16_DOT __attribute__((always_inline)) inline void store_bf16_pairs(uint32_t* out, __m512 a, __m512 b) {
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                              22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  __m512i both = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // a in the low half
  _mm512_storeu_si512(out, _mm512_permutexvar_epi16(interleave, both));
}

// Mask of the first `count` of 16 lanes (count clamped to 0..16).
inline __mmask16 first_lanes(int64_t count) {
  if (count <= 0) return 0;
  if (count >= 16) return 0xffff;
  return static_cast<__mmask16>((1u << count) - 1u);
}

// Packing one head (rows of `dim` bf16, `stride` apart, `seq` of them) for
// the products, zero-padded to `rows` rows (a multiple of 2); dim is even.

// As `pairs` pairs along each row (dim / 2 of them, then zeros): out[i][p].
STRATA_BF16_DOT inline void pack_rows(const bf16* x, int64_t stride, int64_t seq, int64_t dim, int64_t rows,
                                      int64_t pairs, uint32_t* out) {
  const auto row_bytes = static_cast<size_t>(dim) * sizeof(bf16);
  std::memset(out, 0, static_cast<size_t>(rows * pairs) * sizeof(uint32_t));
  for (int64_t i = 0; i < seq; ++i) std::memcpy(out + i * pairs, x + i * stride, row_bytes);
}

// Transposed, as pairs along each row: out[p][i], `pairs` x rows (zero past
// dim / 2).
STRATA_BF16_DOT inline void pack_rows_transposed(const bf16* x, int64_t stride, int64_t seq, int64_t dim, int64_t rows,
                                                 int64_t pairs, uint32_t* out) {
  std::memset(out, 0, static_cast<size_t>(pairs * rows) * sizeof(uint32_t));
  for (int64_t i = 0; i < seq; ++i) {
    const bf16* row = x + i * stride;
    for (int64_t p = 0; p < dim / 2; ++p) std::memcpy(out + p * rows + i, row + 2 * p, sizeof(uint32_t));
  }
}

// The pair of rows 2i, 2i + 1 at column d (zero past seq and dim).
inline uint32_t row_pair(const bf16* x, int64_t stride, int64_t seq, int64_t dim, int64_t i, int64_t d) {
  if (d >= dim) return 0;
  uint32_t low = i < seq ? x[i * stride + d].bits : 0u;
  uint32_t high = i + 1 < seq ? x[(i + 1) * stride + d].bits : 0u;
  return low | high << 16;
}

// As pairs of rows: out[i / 2][d] = (x[i][d], x[i + 1][d]), rows / 2 x
// padded_dim (a multiple of 16).
STRATA_BF16_DOT inline void pack_row_pairs(const bf16* x, int64_t stride, int64_t seq, int64_t dim, int64_t rows,
                                           int64_t padded_dim, uint32_t* out) {
  for (int64_t i = 0; i < rows; i += 2) {
    for (int64_t d = 0; d < padded_dim; ++d) out[i / 2 * padded_dim + d] = row_pair(x, stride, seq, dim, i, d);
  }
}

// The same transposed: out[d][i / 2], padded_dim x rows / 2.
STRATA_BF16_DOT inline void pack_row_pairs_transposed(const bf16* x, int64_t stride, int64_t seq, int64_t dim,
                                                      int64_t rows, int64_t padded_dim, uint32_t* out) {
  for (int64_t d = 0; d < padded_dim; ++d) {
    for (int64_t i = 0; i < rows; i += 2) out[d * (rows / 2) + i / 2] = row_pair(x, stride, seq, dim, i, d);
  }
}

}  // namespace strata::cpu
