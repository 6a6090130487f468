// attention_backward on bf16 with the CPU's bf16 dot products (bf16_dot.h),
// the flash-attention walk of cpu_attention_backward.cpp: P = exp(S - lse) is
// recomputed tile by tile, dP = dO V^T, delta_i = dO_i . O_i and
// dS = P * (dP - delta). S and dP multiply the bf16 inputs exactly in f32;
// P and dS are rounded to bf16 for dV += P^T dO, dK += dS^T Q and dQ += dS K
// (f32 accumulation), as FlashAttention does on GPUs. One task per (batch,
// head) packs that head once into the layouts dot_block reads, then walks key
// tiles (dK, dV in small buffers) and inside them the query tiles at or after
// them (dQ for the whole head). A task owns every output it touches, so the
// result is deterministic without atomics.
#include <algorithm>

#include "backends/cpu/attention_backward_heads.h"
#include "backends/cpu/attention_bf16.h"
#include "backends/cpu/bf16_dot.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/scratch.h"

// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined_* inside
// max, min, shifts, widening) as maybe uninitialised once inlined: GCC bug 105593.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::cpu {

namespace {

constexpr int64_t kTile = 64;

STRATA_BF16_DOT void attention_backward_head_dot(const BackwardHead<bf16>& h) {
  const int64_t seq = h.seq, dim = h.head_dim, pairs = dim / 2;
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
  float* dq_acc = thread_scratch<float>(5, static_cast<size_t>(rows * pd));
  float* small = thread_scratch<float>(6, static_cast<size_t>(rows + 2 * kTile * kTile + 2 * kTile * pd));
  auto* tiles = thread_scratch<uint32_t>(7, static_cast<size_t>(3 * kTile * kTile / 2));
  float* delta = small;                     // dO_i . O_i
  float* probs = delta + rows;              // S, then P [kTile][kTile]
  float* dscores = probs + kTile * kTile;   // dP, then dS
  float* dk_acc = dscores + kTile * kTile;  // [kTile][pd]
  float* dv_acc = dk_acc + kTile * pd;
  uint32_t* p_pairs = tiles;                // [kTile / 2][kTile]
  uint32_t* ds_pairs = p_pairs + kTile * kTile / 2;
  uint32_t* ds_rows = ds_pairs + kTile * kTile / 2;  // [kTile][kTile / 2]

  pack_rows(h.q, h.qkv_stride, seq, dim, rows, q_rows);
  pack_rows(h.dout, h.out_stride, seq, dim, rows, do_rows);
  pack_rows_transposed(h.k, h.qkv_stride, seq, dim, rows, k_t);
  pack_rows_transposed(h.v, h.qkv_stride, seq, dim, rows, v_t);
  pack_row_pairs(h.q, h.qkv_stride, seq, dim, rows, pd, q_pairs);
  pack_row_pairs(h.dout, h.out_stride, seq, dim, rows, pd, do_pairs);
  pack_row_pairs(h.k, h.qkv_stride, seq, dim, rows, pd, k_pairs);
  std::fill_n(dq_acc, rows * pd, 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    float dot = 0.0f;
    if (i < seq) {
      const bf16* g = h.dout + i * h.out_stride;
      const bf16* o = h.out + i * h.out_stride;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < dim; ++d) dot += to_f32(g[d]) * to_f32(o[d]);
    }
    delta[i] = dot;
  }

  for (int64_t k0 = 0; k0 < seq; k0 += kTile) {
    const int64_t nk = std::min(kTile, seq - k0);
    const int64_t key_vectors = (nk + 15) / 16;
    const int64_t key_rows4 = (nk + 3) / 4 * 4;
    std::fill_n(dk_acc, 2 * kTile * pd, 0.0f);
    for (int64_t q0 = k0; q0 < seq; q0 += kTile) {
      const int64_t nq = std::min(kTile, seq - q0);
      const int64_t count4 = (nq + 3) / 4 * 4;
      // Query r of this tile sees keys j < offset + r + 1: all of them off
      // the diagonal; on it, 16-key vectors all masked for a block of 4
      // queries are skipped (and blocks of 4 keys before their first query).
      const int64_t offset = q0 - k0;
      for (int64_t r0 = 0; r0 < count4; r0 += 4) {
        const int64_t vectors = std::min(key_vectors, (offset + r0 + 4 + 15) / 16);
        dot_strip(vectors, pairs, PairsA{q_rows + (q0 + r0) * pairs, pairs, 1}, k_t + k0, rows, probs + r0 * kTile,
                  kTile, false);
        dot_strip(vectors, pairs, PairsA{do_rows + (q0 + r0) * pairs, pairs, 1}, v_t + k0, rows,
                  dscores + r0 * kTile, kTile, false);
        // P = exp(scale S - lse) and dS = P * (dP - delta), 0 where masked.
        for (int64_t r = r0; r < r0 + 4; ++r) {
          const int64_t visible = r < nq ? std::min(nk, offset + r + 1) : 0;
          const __m512 row_lse = _mm512_set1_ps(r < nq ? h.lse[q0 + r] : 0.0f);
          const __m512 row_delta = _mm512_set1_ps(delta[q0 + r]);
          float* p_row = probs + r * kTile;
          float* ds_row = dscores + r * kTile;
          for (int64_t v = 0; v < key_vectors; ++v) {
            __mmask16 mask = v < vectors ? first_lanes(visible - 16 * v) : 0;
            __m512 shifted = _mm512_fmsub_ps(_mm512_loadu_ps(p_row + 16 * v), _mm512_set1_ps(h.scale), row_lse);
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
                  do_pairs + (q0 / 2 + first_pair) * pd, pd, dv_acc + j0 * pd, pd, true);
        dot_strip(pd / 16, depth, PairsA{ds_pairs + first_pair * kTile + j0, 1, kTile},
                  q_pairs + (q0 / 2 + first_pair) * pd, pd, dk_acc + j0 * pd, pd, true);
      }
    }
    for (int64_t j = 0; j < nk; ++j) {
      bf16* dk_row = h.dk + (k0 + j) * h.qkv_stride;
      bf16* dv_row = h.dv + (k0 + j) * h.qkv_stride;
      for (int64_t d = 0; d < dim; ++d) {
        dk_row[d] = from_f32<bf16>(dk_acc[j * pd + d] * h.scale);
        dv_row[d] = from_f32<bf16>(dv_acc[j * pd + d]);
      }
    }
  }
  for (int64_t i = 0; i < seq; ++i) {
    bf16* dq_row = h.dq + i * h.qkv_stride;
    for (int64_t d = 0; d < dim; ++d) dq_row[d] = from_f32<bf16>(dq_acc[i * pd + d] * h.scale);
  }
}

}  // namespace

void attention_backward_bf16_dot(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  for_each_backward_head<bf16>(in, out, attrs,
                               [](const BackwardHead<bf16>& head) { attention_backward_head_dot(head); });
}

}  // namespace strata::cpu
