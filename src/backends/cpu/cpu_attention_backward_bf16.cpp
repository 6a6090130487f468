// Causal attention backward on bf16 with the CPU's bf16 dot products
// (bf16_dot.h) for every attention op (attention_kernels.h describes the
// operands), the flash-attention walk of cpu_attention_backward.cpp:
// P = exp(S - lse) is recomputed tile by tile, dP = dO V^T,
// delta_i = dO_i . O_i and dS = P * (dP - delta). S and dP multiply the bf16
// inputs exactly in f32; P and dS are rounded to bf16 for dV += P^T dO,
// dK += dS^T Q and dQ += dS K (f32 accumulation), as FlashAttention does on
// GPUs. One task per (batch,
// kv head) packs that kv head once into the layouts dot_block reads, then for
// each query head reading it packs the head and walks key tiles and inside
// them the query tiles at or after them (dQ for the query head, dK and dV for
// the kv head, summed over its query heads in their order). A task owns every
// output it touches, so the result is deterministic without atomics.
#include <algorithm>

#include "backends/cpu/attention_kernels.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/scratch.h"

// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined_* inside
// max, min, shifts, widening) as maybe uninitialised once inlined: GCC bug 105593.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::cpu {

namespace {

constexpr int64_t kTile = 64;

STRATA_BF16_DOT void attention_backward_kv_head_dot(const BackwardOperands<bf16>& op, int64_t b, int64_t kv) {
  const HeadGroups& g = op.groups;
  const int64_t seq = op.seq, dim = g.head_dim, pairs = dim / 2;
  const float scale = g.scale();
  const int64_t rows = (seq + kTile - 1) / kTile * kTile;
  const int64_t pd = (dim + 15) / 16 * 16;
  const auto row_area = static_cast<size_t>(rows * pairs);
  const auto pair_area = static_cast<size_t>(rows / 2 * pd);
  auto* q_rows = thread_scratch<uint32_t>(0, row_area);   // [rows][pairs]
  auto* do_rows = thread_scratch<uint32_t>(1, row_area);
  auto* k_t = thread_scratch<uint32_t>(2, row_area);      // [pairs][rows]
  auto* v_t = thread_scratch<uint32_t>(3, row_area);
  auto* q_pairs = thread_scratch<uint32_t>(4, 3 * pair_area);  // [rows / 2][pd], then dO's and K's
  uint32_t* do_pairs = q_pairs + pair_area;
  uint32_t* k_pairs = do_pairs + pair_area;
  float* dq_acc = thread_scratch<float>(5, static_cast<size_t>(3 * rows * pd));  // then dK and dV of the kv head
  float* dk_acc = dq_acc + rows * pd;
  float* dv_acc = dk_acc + rows * pd;
  float* small = thread_scratch<float>(6, static_cast<size_t>(rows + 2 * kTile * kTile));
  auto* tiles = thread_scratch<uint32_t>(7, static_cast<size_t>(3 * kTile * kTile / 2));
  float* delta = small;                     // dO_i . O_i
  float* probs = delta + rows;              // S, then P [kTile][kTile]
  float* dscores = probs + kTile * kTile;   // dP, then dS
  uint32_t* p_pairs = tiles;                // [kTile / 2][kTile]
  uint32_t* ds_pairs = p_pairs + kTile * kTile / 2;
  uint32_t* ds_rows = ds_pairs + kTile * kTile / 2;  // [kTile][kTile / 2]

  pack_rows_transposed(op.k.head(b, kv, dim), op.k.row_stride, seq, dim, rows, k_t);
  pack_rows_transposed(op.v.head(b, kv, dim), op.v.row_stride, seq, dim, rows, v_t);
  pack_row_pairs(op.k.head(b, kv, dim), op.k.row_stride, seq, dim, rows, pd, k_pairs);
  std::fill_n(dk_acc, 2 * rows * pd, 0.0f);

  for (int64_t h = kv * g.group(); h < (kv + 1) * g.group(); ++h) {
    const bf16* q = op.q.head(b, h, dim);
    const bf16* dout = op.dout.head(b, h, dim);
    const bf16* out = op.out.head(b, h, dim);
    const float* lse = op.lse + (b * g.heads + h) * seq;
    pack_rows(q, op.q.row_stride, seq, dim, rows, q_rows);
    pack_rows(dout, op.dout.row_stride, seq, dim, rows, do_rows);
    pack_row_pairs(q, op.q.row_stride, seq, dim, rows, pd, q_pairs);
    pack_row_pairs(dout, op.dout.row_stride, seq, dim, rows, pd, do_pairs);
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
      const int64_t key_rows4 = (nk + 3) / 4 * 4;
      float* dk_tile = dk_acc + k0 * pd;
      float* dv_tile = dv_acc + k0 * pd;
      for (int64_t q0 = k0; q0 < seq; q0 += kTile) {
        const int64_t nq = std::min(kTile, seq - q0);
        const int64_t count4 = (nq + 3) / 4 * 4;
        // Query r of this tile sees keys j < offset + r + 1: all of them off
        // the diagonal; on it, 16-key vectors all masked for a block of 4
        // queries are skipped (and blocks of 4 keys before their first query).
        const int64_t offset = q0 - k0;
        for (int64_t r0 = 0; r0 < count4; r0 += 4) {
          const int64_t vectors = std::min(key_vectors, (offset + r0 + 4 + 15) / 16);
          dot_strip(vectors, pairs, PairsA{q_rows + (q0 + r0) * pairs, pairs, 1}, k_t + k0, rows,
                    probs + r0 * kTile, kTile, false);
          dot_strip(vectors, pairs, PairsA{do_rows + (q0 + r0) * pairs, pairs, 1}, v_t + k0, rows,
                    dscores + r0 * kTile, kTile, false);
          // P = exp(scale S - lse) and dS = P * (dP - delta), 0 where masked.
          for (int64_t r = r0; r < r0 + 4; ++r) {
            const int64_t visible = r < nq ? std::min(nk, offset + r + 1) : 0;
            const __m512 row_lse = _mm512_set1_ps(r < nq ? lse[q0 + r] : 0.0f);
            const __m512 row_delta = _mm512_set1_ps(delta[q0 + r]);
            float* p_row = probs + r * kTile;
            float* ds_row = dscores + r * kTile;
            for (int64_t v = 0; v < key_vectors; ++v) {
              __mmask16 mask = v < vectors ? first_lanes(visible - 16 * v) : 0;
              __m512 shifted = _mm512_fmsub_ps(_mm512_loadu_ps(p_row + 16 * v), _mm512_set1_ps(scale), row_lse);
              __m512 p = _mm512_maskz_mov_ps(mask, exp16(shifted));
              __m512 ds = _mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(ds_row + 16 * v), row_delta));
              _mm512_storeu_ps(p_row + 16 * v, p);
              _mm512_storeu_ps(ds_row + 16 * v, _mm512_maskz_mov_ps(mask, ds));
              store_bf16x16(ds_rows + r * kTile / 2 + 8 * v, _mm512_maskz_mov_ps(mask, ds));
            }
          }
          for (int64_t r = r0; r < r0 + 4; r += 2) {
            for (int64_t v = 0; v < key_vectors; ++v) {
              store_bf16_pairs(p_pairs + r / 2 * kTile + 16 * v, _mm512_loadu_ps(probs + r * kTile + 16 * v),
                               _mm512_loadu_ps(probs + (r + 1) * kTile + 16 * v));
              store_bf16_pairs(ds_pairs + r / 2 * kTile + 16 * v, _mm512_loadu_ps(dscores + r * kTile + 16 * v),
                               _mm512_loadu_ps(dscores + (r + 1) * kTile + 16 * v));
            }
          }
          // dQ += dS K, up to the last key the block sees.
          const int64_t depth = std::min(nk, offset + r0 + 4);
          dot_strip(pd / 16, (depth + 1) / 2, PairsA{ds_rows + r0 * kTile / 2, kTile / 2, 1}, k_pairs + k0 / 2 * pd,
                    pd, dq_acc + (q0 + r0) * pd, pd, true);
        }
        // dV += P^T dO and dK += dS^T Q, 4 keys at a time, from the pair of
        // queries holding the first one that sees them.
        for (int64_t j0 = 0; j0 < key_rows4; j0 += 4) {
          const int64_t first_pair = std::clamp<int64_t>(j0 - offset, 0, nq) / 2;
          const int64_t depth = (count4 - 2 * first_pair) / 2;
          dot_strip(pd / 16, depth, PairsA{p_pairs + first_pair * kTile + j0, 1, kTile},
                    do_pairs + (q0 / 2 + first_pair) * pd, pd, dv_tile + j0 * pd, pd, true);
          dot_strip(pd / 16, depth, PairsA{ds_pairs + first_pair * kTile + j0, 1, kTile},
                    q_pairs + (q0 / 2 + first_pair) * pd, pd, dk_tile + j0 * pd, pd, true);
        }
      }
    }
    store_head_rows(dq_acc, pd, seq, dim, scale, op.dq.head(b, h, dim), op.dq.row_stride);
  }
  store_head_rows(dk_acc, pd, seq, dim, scale, op.dk.head(b, kv, dim), op.dk.row_stride);
  store_head_rows(dv_acc, pd, seq, dim, 1.0f, op.dv.head(b, kv, dim), op.dv.row_stride);
}

}  // namespace

void attention_backward_bf16_dot(const BackwardOperands<bf16>& op) {
  for_each_kv_head(op.groups, [&](int64_t b, int64_t kv) { attention_backward_kv_head_dot(op, b, kv); });
}

}  // namespace strata::cpu
