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

// 2^x on the lanes in `lanes` (0 elsewhere): x = n + f with n an integer and
// |f| <= 1/2, 2^f by a degree-5 polynomial with constant term 1, so that
// whole powers are exact (fitted to 2^f on [-1/2, 1/2]: relative error
// 9.2e-8, 1.7e-7 once evaluated in f32), times 2^n by
// vscalefps, which flushes to 0 (or inf) outside the f32 range with no
// clamping. The attention kernels work in base 2, the score scale times
// log2(e) folded into the one FMA that forms x.
STRATA_BF16_DOT __attribute__((always_inline)) inline __m512 exp2_16(__mmask16 lanes, __m512 x) {
  // The masked form: GCC 12 warns of the plain one's undefined source (bug 105593).
  const __m512 n = _mm512_mask_roundscale_ps(x, 0xffff, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.3264727313e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6715129912e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5507335812e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022242427e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314700365e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(lanes, p, n);
}

// log2(e) and ln(2): the kernels' base-2 exponents and the natural-log lse they store.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2 = 0.693147180559945309f;

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

// 16 floats rounded to bf16 as core/dtype.h rounds them (nearest even, NaN
// kept and made quiet, subnormals kept where vcvtneps2bf16 flushes them), the
// lanes in `lanes` stored at out: a kernel's outputs, bit for bit those of
// convert.h's from_f32.
STRATA_BF16_DOT __attribute__((always_inline)) inline void store_bf16_exact(bf16* out, __m512 x, __mmask16 lanes) {
  const __m512i word = _mm512_castps_si512(x);
  const __m512i high = _mm512_srli_epi32(word, 16);
  const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(high, _mm512_set1_epi32(1)));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(word, bias), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(word, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i result = _mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(0x40));
  _mm256_mask_storeu_epi16(out, lanes, _mm512_cvtepi32_epi16(result));
}

// `dim` floats of acc (readable to dim rounded up to 16) times factor, rounded into out.
STRATA_BF16_DOT inline void store_scaled_row(const float* acc, int64_t dim, float factor, bf16* out) {
  for (int64_t d = 0; d < dim; d += 16) {
    store_bf16_exact(out + d, _mm512_mul_ps(_mm512_loadu_ps(acc + d), _mm512_set1_ps(factor)), first_lanes(dim - d));
  }
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
  const auto pad_bytes = static_cast<size_t>(pairs - dim / 2) * sizeof(uint32_t);
  for (int64_t i = 0; i < seq; ++i) {
    std::memcpy(out + i * pairs, x + i * stride, row_bytes);
    std::memset(out + i * pairs + dim / 2, 0, pad_bytes);
  }
  std::memset(out + seq * pairs, 0, static_cast<size_t>((rows - seq) * pairs) * sizeof(uint32_t));
}

// A head's rows as the left operand of the products: `pairs` pairs along
// each row, rows `stride` pairs apart, rows from `available` on zero. Read
// where they lie when a row holds whole depth steps (see left_rows), so a
// strip that reaches past `available` is read from a zero-padded copy of its
// rows in `spare` (count x stride pairs).
struct LeftRows {
  const uint32_t* data;
  int64_t stride, available, pairs;

  STRATA_BF16_DOT const uint32_t* strip(int64_t first, int64_t count, uint32_t* spare) const {
    if (first + count <= available) return data + first * stride;
    for (int64_t i = 0; i < count; ++i) {
      const auto bytes = static_cast<size_t>(pairs) * sizeof(uint32_t);
      if (first + i < available) {
        std::memcpy(spare + i * stride, data + (first + i) * stride, bytes);
      } else {
        std::memset(spare + i * stride, 0, bytes);
      }
    }
    return spare;
  }
};

// The rows of one head (as pack_rows takes them) as a left operand: in place
// when dim / 2 is whole depth steps (`pairs`), saving a copy; else packed into
// `packed` (rows x pairs). A head's rows start 4-byte aligned at an even
// stride, since dim is even.
STRATA_BF16_DOT inline LeftRows left_rows(const bf16* x, int64_t stride, int64_t seq, int64_t dim, int64_t rows,
                                          int64_t pairs, uint32_t* packed) {
  if (pairs == dim / 2) return {reinterpret_cast<const uint32_t*>(x), stride / 2, seq, pairs};
  pack_rows(x, stride, seq, dim, rows, pairs, packed);
  return {packed, pairs, rows, pairs};
}

// Transposed, as pairs along each row, in blocks of `block` rows (a
// multiple of 16 dividing rows): block b is out[b][p][i - b * block],
// `pairs` x block (zero past dim / 2). Blocks of a tile's rows keep the tile
// contiguous, where rows of a long sequence at a power-of-two stride would
// fall into the same few cache sets.
STRATA_BF16_DOT inline void pack_rows_transposed(const bf16* x, int64_t stride, int64_t seq, int64_t dim, int64_t rows,
                                                 int64_t pairs, int64_t block, uint32_t* out) {
  __m512i tile[16];
  for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
    for (int64_t i0 = 0; i0 < rows; i0 += 16) {
      for (int64_t j = 0; j < 16; ++j) tile[j] = row_pairs16(x, stride, seq, dim, i0 + j, p0);
      transpose16x16(tile);
      uint32_t* block_start = out + i0 / block * pairs * block + i0 % block;
      for (int64_t j = 0; j < std::min<int64_t>(16, pairs - p0); ++j) {
        _mm512_storeu_si512(block_start + (p0 + j) * block, tile[j]);
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

// The same transposed, in blocks of `block` pairs of rows (a multiple of 16
// dividing rows / 2): block b is out[b][d][i / 2 - b * block], padded_dim x
// block.
STRATA_BF16_DOT inline void pack_row_pairs_transposed(const bf16* x, int64_t stride, int64_t seq, int64_t dim,
                                                      int64_t rows, int64_t padded_dim, int64_t block, uint32_t* out) {
  __m512i tile[16];
  for (int64_t d0 = 0; d0 < padded_dim; d0 += 16) {
    for (int64_t i0 = 0; i0 < rows; i0 += 32) {
      for (int64_t j = 0; j < 16; ++j) tile[j] = column_pairs16(x, stride, seq, dim, i0 + 2 * j, d0);
      transpose16x16(tile);
      uint32_t* block_start = out + i0 / 2 / block * padded_dim * block + i0 / 2 % block;
      for (int64_t j = 0; j < 16; ++j) _mm512_storeu_si512(block_start + (d0 + j) * block, tile[j]);
    }
  }
}

}  // namespace strata::cpu

#pragma GCC diagnostic pop
