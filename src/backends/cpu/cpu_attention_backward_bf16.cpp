// Causal attention backward on bf16 with the CPU's bf16 products (AMX tiles,
// amx_tiles.h, where present, else AVX-512 BF16 dot products, bf16_dot.h) for
// every attention op (attention_kernels.h describes the operands), the
// flash-attention walk of cpu_attention_backward.cpp:
// P = exp(S - lse) is recomputed tile by tile (in base 2, as the forward
// computes it: bf16_dot.h's exp2_16), dP = dO V^T,
// delta_i = dO_i . O_i and dS = P * (dP - delta). S and dP multiply the bf16
// inputs exactly in f32; P and dS are rounded to bf16 for dV^T += dO^T P,
// dK^T += Q^T dS and dQ += dS K (f32 accumulation), as FlashAttention does on
// GPUs; dK and dV are accumulated transposed so that P and dS are the right
// operands, in the layout the products read. One task per (batch, kv head)
// packs that kv head once, then for each query head reading it packs the head
// and walks key tiles and inside them the query tiles at or after them (dQ for
// the query head, dK and dV for the kv head, summed over its query heads in
// their order). A task owns every output it touches, so the result is
// deterministic without atomics.
#include <algorithm>

#include "backends/cpu/amx_tiles.h"
#include "backends/cpu/attention_kernels.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"

// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined_* inside
// max, min, shifts, widening) as maybe uninitialised once inlined: GCC bug 105593.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::cpu {

namespace {

constexpr int64_t kTile = 64;
constexpr int64_t kTileVectors = kTile / 16;

// A transposed accumulator in blocks of a key tile, acc[i / kTile][d][i %
// kTile] (padded_dim rows a block), times factor, rounded once into a head's
// rows, 16 x 16 at a time.
STRATA_BF16_DOT void store_head_columns(const float* acc, int64_t padded_dim, int64_t rows, int64_t dim, float factor,
                                        bf16* head, int64_t row_stride) {
  __m512i tile[16];
  for (int64_t i0 = 0; i0 < rows; i0 += 16) {
    const float* block = acc + i0 / kTile * padded_dim * kTile + i0 % kTile;
    for (int64_t d0 = 0; d0 < dim; d0 += 16) {
      for (int64_t j = 0; j < 16; ++j) tile[j] = _mm512_castps_si512(_mm512_loadu_ps(block + (d0 + j) * kTile));
      transpose16x16(tile);
      for (int64_t j = 0; j < std::min<int64_t>(16, rows - i0); ++j) {
        store_bf16_exact(head + (i0 + j) * row_stride + d0,
                         _mm512_mul_ps(_mm512_castsi512_ps(tile[j]), _mm512_set1_ps(factor)), first_lanes(dim - d0));
      }
    }
  }
}

// What a query row of a tile needs for its P and dS: its visible keys, its
// lse in base 2 and its delta = dO_i . O_i.
struct TermRow {
  int64_t visible;
  __m512 lse, delta;
};

// Row r of a query tile at q0 whose keys start `offset` before it (query r
// sees keys j < offset + r + 1, nk of them in the tile; padding rows none),
// with `vectors` vectors of keys computed.
STRATA_BF16_DOT __attribute__((always_inline)) inline TermRow term_row(int64_t r, int64_t nq, int64_t offset, int64_t nk,
                                                                       int64_t vectors, int64_t q0, const float* lse,
                                                                       const float* delta) {
  const bool real = r < nq;
  return {real ? std::min({nk, offset + r + 1, 16 * vectors}) : 0, _mm512_set1_ps(real ? lse[q0 + r] * kLog2e : 0.0f),
          _mm512_set1_ps(delta[q0 + r])};
}

struct ScoreTerms {
  __m512 p, ds;
};

// Keys 16v..16v + 15 of a row: P = 2^(S log2e_scale - lse) and dS = P (dP - delta), 0 past the visible keys.
STRATA_BF16_DOT __attribute__((always_inline)) inline ScoreTerms score_terms(const float* s, const float* dp, int64_t v,
                                                                             const TermRow& row, float log2e_scale) {
  const __mmask16 lanes = first_lanes(row.visible - 16 * v);
  const __m512 p = exp2_16(lanes, _mm512_fmsub_ps(_mm512_loadu_ps(s + 16 * v), _mm512_set1_ps(log2e_scale), row.lse));
  return {p, _mm512_maskz_mul_ps(lanes, p, _mm512_sub_ps(_mm512_loadu_ps(dp + 16 * v), row.delta))};
}

template <typename Products>
STRATA_BF16_DOT void backward_kv_head(const BackwardOperands<bf16>& op, int64_t b, int64_t kv) {
  const Products products;
  constexpr int64_t kRows = Products::kRows;
  // Query rows per tile: whole strips, and whole depth steps of dV^T's and dK^T's products.
  constexpr int64_t kQueryStep = std::max(kRows, 2 * Products::kDepthPairs);
  // Queries per step of dV^T's and dK^T's products on the diagonal: whole 16-key vectors and depth steps.
  constexpr int64_t kDiagonalStep = std::max<int64_t>(16, 2 * Products::kDepthPairs);
  const HeadGroups& g = op.groups;
  const int64_t seq = op.seq, dim = g.head_dim;
  const float scale = g.scale(), log2e_scale = scale * kLog2e;
  const int64_t rows = round_up(seq, kTile);
  const int64_t pairs = round_up(dim / 2, Products::kDepthPairs);
  const int64_t pd = round_up(dim, 16);
  const auto row_area = static_cast<size_t>(rows * pairs);
  const auto pair_area = static_cast<size_t>(rows / 2 * pd);
  // Q's and dO's rows where they lie, else packed [rows][pairs] (left_rows), and their last strips' rows.
  const int64_t spare_area = kRows * std::max(op.q.row_stride, op.dout.row_stride) / 2;
  auto* q_rows = thread_scratch<uint32_t>(0, row_area + spare_area);
  auto* do_rows = thread_scratch<uint32_t>(1, row_area + spare_area);
  auto* k_t = thread_scratch<uint32_t>(2, row_area);      // [rows / kTile][pairs][kTile]
  auto* v_t = thread_scratch<uint32_t>(3, row_area);
  // Q's and dO's [rows / kTile][pd][kTile / 2], then K's [rows / 2][pd].
  auto* q_pairs_t = thread_scratch<uint32_t>(4, 3 * pair_area);
  uint32_t* do_pairs_t = q_pairs_t + pair_area;
  uint32_t* k_pairs = do_pairs_t + pair_area;
  float* dq_acc = thread_scratch<float>(5, static_cast<size_t>(3 * rows * pd));  // [rows][pd]
  float* dk_acc_t = dq_acc + rows * pd;  // [rows / kTile][pd][kTile]
  float* dv_acc_t = dk_acc_t + rows * pd;
  float* small = thread_scratch<float>(6, static_cast<size_t>(rows + 2 * kTile * kTile));
  auto* tiles = thread_scratch<uint32_t>(7, static_cast<size_t>(3 * kTile * kTile / 2));
  float* delta = small;                     // dO_i . O_i
  float* scores = delta + rows;             // S [kTile][kTile]
  float* dprobs = scores + kTile * kTile;   // dP
  uint32_t* p_pairs = tiles;                // [kTile / 2][kTile]
  uint32_t* ds_pairs = p_pairs + kTile * kTile / 2;
  uint32_t* ds_rows = ds_pairs + kTile * kTile / 2;  // [kTile][kTile / 2]

  pack_rows_transposed(op.k.head(b, kv, dim), op.k.row_stride, seq, dim, rows, pairs, kTile, k_t);
  pack_rows_transposed(op.v.head(b, kv, dim), op.v.row_stride, seq, dim, rows, pairs, kTile, v_t);
  pack_row_pairs(op.k.head(b, kv, dim), op.k.row_stride, seq, dim, rows, pd, k_pairs);
  std::fill_n(dk_acc_t, 2 * rows * pd, 0.0f);

  for (int64_t h = kv * g.group(); h < (kv + 1) * g.group(); ++h) {
    const bf16* q = op.q.head(b, h, dim);
    const bf16* dout = op.dout.head(b, h, dim);
    const bf16* out = op.out.head(b, h, dim);
    const float* lse = op.lse + (b * g.heads + h) * seq;
    const LeftRows q_left = left_rows(q, op.q.row_stride, seq, dim, rows, pairs, q_rows);
    const LeftRows do_left = left_rows(dout, op.dout.row_stride, seq, dim, rows, pairs, do_rows);
    pack_row_pairs_transposed(q, op.q.row_stride, seq, dim, rows, pd, kTile / 2, q_pairs_t);
    pack_row_pairs_transposed(dout, op.dout.row_stride, seq, dim, rows, pd, kTile / 2, do_pairs_t);
    std::fill_n(dq_acc, rows * pd, 0.0f);
    for (int64_t i = 0; i < rows; ++i) {
      float dot = 0.0f;
      if (i < seq) {
        const bf16* grad = dout + i * op.dout.row_stride;
        const bf16* o = out + i * op.out.row_stride;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < dim; ++d) dot += to_f32(grad[d]) * to_f32(o[d]);
      }
      delta[i] = dot;
    }

    for (int64_t k0 = 0; k0 < seq; k0 += kTile) {
      const int64_t nk = std::min(kTile, seq - k0);
      const int64_t key_vectors = (nk + 15) / 16;
      for (int64_t q0 = k0; q0 < seq; q0 += kTile) {
        const int64_t nq = std::min(kTile, seq - q0);
        const int64_t query_rows = round_up(nq, kQueryStep);
        // Query r of this tile sees keys j < offset + r + 1: all of them off
        // the diagonal; on it, 16-key vectors all masked for a strip of
        // queries are skipped.
        const int64_t offset = q0 - k0;
        for (int64_t r0 = 0; r0 < query_rows; r0 += kRows) {
          const int64_t vectors = std::min(key_vectors, (offset + r0 + kRows + 15) / 16);
          products.product(vectors, pairs, q_left.strip(q0 + r0, kRows, q_rows + row_area), q_left.stride,
                           k_t + k0 * pairs, kTile, scores + r0 * kTile, kTile, false);
          products.product(vectors, pairs, do_left.strip(q0 + r0, kRows, do_rows + row_area), do_left.stride,
                           v_t + k0 * pairs, kTile, dprobs + r0 * kTile, kTile, false);
          // P and dS for the strip, rows in pairs: bf16 pairs of rows for the products with dO^T and Q^T,
          // dS also as rows for the product with K.
          for (int64_t r = r0; r < r0 + kRows; r += 2) {
            const TermRow first = term_row(r, nq, offset, nk, vectors, q0, lse, delta);
            const TermRow second = term_row(r + 1, nq, offset, nk, vectors, q0, lse, delta);
            for (int64_t v = 0; v < kTileVectors; ++v) {
              const ScoreTerms a = score_terms(scores + r * kTile, dprobs + r * kTile, v, first, log2e_scale);
              const ScoreTerms b = score_terms(scores + (r + 1) * kTile, dprobs + (r + 1) * kTile, v, second,
                                               log2e_scale);
              store_bf16x16(ds_rows + r * kTile / 2 + 8 * v, a.ds);
              store_bf16x16(ds_rows + (r + 1) * kTile / 2 + 8 * v, b.ds);
              store_bf16_pairs(p_pairs + r / 2 * kTile + 16 * v, a.p, b.p);
              store_bf16_pairs(ds_pairs + r / 2 * kTile + 16 * v, a.ds, b.ds);
            }
          }
          // dQ += dS K, up to the last key the strip sees, in whole depth steps.
          const int64_t depth_pairs = round_up((std::min(nk, offset + r0 + kRows) + 1) / 2, Products::kDepthPairs);
          products.product(pd / 16, depth_pairs, ds_rows + r0 * kTile / 2, kTile / 2, k_pairs + k0 / 2 * pd, pd,
                           dq_acc + (q0 + r0) * pd, pd, true);
        }
        // dV^T += dO^T P and dK^T += Q^T dS over the tile's queries; on the
        // diagonal, keys 16v.. have P and dS 0 before query 16v, so each step
        // of queries multiplies only the key vectors up to it.
        const int64_t step = offset > 0 ? query_rows : kDiagonalStep;
        for (int64_t d0 = 0; d0 < pd; d0 += kRows) {
          const int64_t a_offset = q0 / 2 * pd + d0 * kTile / 2, c_offset = k0 * pd + d0 * kTile;
          for (int64_t s0 = 0; s0 < query_rows; s0 += step) {
            const int64_t blocks = offset > 0 ? key_vectors : std::min(key_vectors, (s0 + step) / 16);
            const int64_t depth = std::min(step, query_rows - s0) / 2;
            products.product(blocks, depth, do_pairs_t + a_offset + s0 / 2, kTile / 2, p_pairs + s0 / 2 * kTile, kTile,
                             dv_acc_t + c_offset, kTile, true);
            products.product(blocks, depth, q_pairs_t + a_offset + s0 / 2, kTile / 2, ds_pairs + s0 / 2 * kTile,
                             kTile, dk_acc_t + c_offset, kTile, true);
          }
        }
      }
    }
    bf16* dq = op.dq.head(b, h, dim);
    for (int64_t i = 0; i < seq; ++i) store_scaled_row(dq_acc + i * pd, dim, scale, dq + i * op.dq.row_stride);
  }
  store_head_columns(dk_acc_t, pd, seq, dim, scale, op.dk.head(b, kv, dim), op.dk.row_stride);
  store_head_columns(dv_acc_t, pd, seq, dim, 1.0f, op.dv.head(b, kv, dim), op.dv.row_stride);
}

template <typename Products>
void backward_with(const BackwardOperands<bf16>& op) {
  for_each_kv_head(op.groups, [&](int64_t b, int64_t kv) { backward_kv_head<Products>(op, b, kv); });
}

}  // namespace

void attention_backward_bf16_dot(const BackwardOperands<bf16>& op) {
  if (runs_on_amx_tiles()) return backward_with<AmxTiles>(op);
  backward_with<DotStrips>(op);
}

}  // namespace strata::cpu
