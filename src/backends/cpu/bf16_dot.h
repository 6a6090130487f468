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

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

#define STRATA_BF16_DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined_* inside
// unpacks, shuffles, widening) as maybe uninitialised once inlined: GCC bug 105593.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

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
// the products, zero-padded to `rows` rows (a multiple of 32); dim is even.
// The layouts are transposes of 32-bit pairs, done 16 x 16 in registers.

// 16 registers of 16 32-bit lanes transposed: lane i of register j takes lane j of register i.
STRATA_BF16_DOT __attribute__((always_inline)) inline void transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {  // per 128-bit lane: rows i, i + 1 interleaved by 32 bits
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // register i + c, 128-bit lane L: column 4L + c of rows i..i + 3
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // column 4L + c: lane L of registers c, 4 + c, 8 + c, 12 + c
    const __m512i ab_low = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44), ab_high = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xEE);
    const __m512i cd_low = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
    const __m512i cd_high = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xEE);
    t[c] = _mm512_shuffle_i32x4(ab_low, cd_low, 0x88);
    t[4 + c] = _mm512_shuffle_i32x4(ab_low, cd_low, 0xDD);
    t[8 + c] = _mm512_shuffle_i32x4(ab_high, cd_high, 0x88);
    t[12 + c] = _mm512_shuffle_i32x4(ab_high, cd_high, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Pairs p0..p0 + 15 of row i (zero past seq and dim / 2).
STRATA_BF16_DOT __attribute__((always_inline)) inline __m512i row_pairs16(const bf16* x, int64_t stride, int64_t seq,
                                                                          int64_t dim, int64_t i, int64_t p0) {
  if (i >= seq) return _mm512_setzero_si512();
  return _mm512_maskz_loadu_epi32(first_lanes(dim / 2 - p0), x + i * stride + 2 * p0);
}

// Columns d0..d0 + 15 of rows i and i + 1 as pairs (x[i][d], x[i + 1][d]) (zero past seq and dim).
STRATA_BF16_DOT __attribute__((always_inline)) inline __m512i column_pairs16(const bf16* x, int64_t stride,
                                                                             int64_t seq, int64_t dim, int64_t i,
                                                                             int64_t d0) {
  const __mmask16 columns = first_lanes(dim - d0);
  const __m256i low = i < seq ? _mm256_maskz_loadu_epi16(columns, x + i * stride + d0) : _mm256_setzero_si256();
  const __m256i high = i + 1 < seq ? _mm256_maskz_loadu_epi16(columns, x + (i + 1) * stride + d0)
                                   : _mm256_setzero_si256();
  return _mm512_or_si512(_mm512_cvtepu16_epi32(low), _mm512_slli_epi32(_mm512_cvtepu16_epi32(high), 16));
}

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
  __m512i block[16];
  for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
    for (int64_t i0 = 0; i0 < rows; i0 += 16) {
      for (int64_t j = 0; j < 16; ++j) block[j] = row_pairs16(x, stride, seq, dim, i0 + j, p0);
      transpose16x16(block);
      for (int64_t j = 0; j < std::min<int64_t>(16, pairs - p0); ++j) {
        _mm512_storeu_si512(out + (p0 + j) * rows + i0, block[j]);
      }
    }
  }
}

// As pairs of rows: out[i / 2][d] = (x[i][d], x[i + 1][d]), rows / 2 x
// padded_dim (a multiple of 16).
STRATA_BF16_DOT inline void pack_row_pairs(const bf16* x, int64_t stride, int64_t seq, int64_t dim, int64_t rows,
                                           int64_t padded_dim, uint32_t* out) {
  for (int64_t i = 0; i < rows; i += 2) {
    for (int64_t d0 = 0; d0 < padded_dim; d0 += 16) {
      _mm512_storeu_si512(out + i / 2 * padded_dim + d0, column_pairs16(x, stride, seq, dim, i, d0));
    }
  }
}

// The same transposed: out[d][i / 2], padded_dim x rows / 2.
STRATA_BF16_DOT inline void pack_row_pairs_transposed(const bf16* x, int64_t stride, int64_t seq, int64_t dim,
                                                      int64_t rows, int64_t padded_dim, uint32_t* out) {
  __m512i block[16];
  for (int64_t d0 = 0; d0 < padded_dim; d0 += 16) {
    for (int64_t i0 = 0; i0 < rows; i0 += 32) {
      for (int64_t j = 0; j < 16; ++j) block[j] = column_pairs16(x, stride, seq, dim, i0 + 2 * j, d0);
      transpose16x16(block);
      for (int64_t j = 0; j < 16; ++j) _mm512_storeu_si512(out + (d0 + j) * (rows / 2) + i0 / 2, block[j]);
    }
  }
}

}  // namespace strata::cpu

#pragma GCC diagnostic pop
