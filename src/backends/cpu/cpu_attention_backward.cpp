// Causal attention backward for every attention op (attention_kernels.h
// describes the operands), flash-attention style: probabilities are
// recomputed tile by tile from the forward's lse (p = exp(s - lse)), and with
// dP = dO V^T and delta_i = dO_i . O_i, dS = P * (dP - delta). One task per
// (batch, kv head) packs that kv head once, then for each query head reading
// it packs the head and walks key tiles and, inside, the query tiles at or
// after them, accumulating dQ for the query head and dK, dV for the kv head
// (summed over the query heads, in their order). A task owns every output it
// touches, so the result is deterministic without atomics. bf16 runs on the
// CPU's bf16 dot products where it can (cpu_attention_backward_bf16.cpp);
// elsewhere bf16 heads are widened to f32 while packing and computed as f32
// ones, dq, dk and dv rounded to bf16 once; lse is f32.
#include <algorithm>
#include <cmath>

#include "backends/cpu/attention_kernels.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/tile_gemm.h"

namespace strata::cpu {

namespace {

constexpr int64_t kTile = 64;

// Rows [0, seq) of x (`stride` apart) times `factor` as f32 rows of `pd` into
// out [padded_seq][pd], zero-padded. Plain row copies, so they vectorise:
// packing element by element, transposes included, took a quarter of the
// backward's time (measured, T = 256, D = 64).
template <typename T>
STRATA_CPU_CLONES void pack_rows(const T* x, int64_t stride, int64_t seq, int64_t dim, int64_t padded_seq,
                                 int64_t pd, float factor, float* out) {
  for (int64_t i = 0; i < seq; ++i) {
    const T* row = x + i * stride;
    float* out_row = out + i * pd;
    for (int64_t d = 0; d < dim; ++d) out_row[d] = to_f32(row[d]) * factor;
    std::fill(out_row + dim, out_row + pd, 0.0f);
  }
  std::fill(out + seq * pd, out + padded_seq * pd, 0.0f);
}

// out [cols][rows] = in [rows][cols] transposed, 16 rows at a time so that
// each store fills whole cache lines; rows is a multiple of 16.
STRATA_CPU_CLONES void transpose_rows(const float* in, int64_t rows, int64_t cols, float* out) {
  for (int64_t i0 = 0; i0 < rows; i0 += 16) {
    for (int64_t d = 0; d < cols; ++d) {
      for (int64_t i = 0; i < 16; ++i) out[d * rows + i0 + i] = in[(i0 + i) * cols + d];
    }
  }
}

// delta[i] = dO_i . O_i by fused multiply-adds in order, as tile_strip forms
// dP = dO V^T: a query whose only key is itself (out = v) then gets dS = 0
// exactly. Four rows at a time, so that four independent chains hide the
// multiply-add's latency (one chain alone took a twentieth of the backward).
template <typename T>
__attribute__((always_inline)) inline void delta_rows(const float* do_pack, int64_t pd, const T* out,
                                                      int64_t out_stride, int64_t seq, int64_t dim, float* delta) {
  constexpr int64_t kChains = 4;
  int64_t i = 0;
  for (; i + kChains <= seq; i += kChains) {
    float dots[kChains] = {};
    for (int64_t d = 0; d < dim; ++d) {
      for (int64_t r = 0; r < kChains; ++r) {
        dots[r] = std::fma(do_pack[(i + r) * pd + d], to_f32(out[(i + r) * out_stride + d]), dots[r]);
      }
    }
    std::copy(dots, dots + kChains, delta + i);
  }
  for (; i < seq; ++i) {
    float dot = 0.0f;
    for (int64_t d = 0; d < dim; ++d) dot = std::fma(do_pack[i * pd + d], to_f32(out[i * out_stride + d]), dot);
    delta[i] = dot;
  }
}

template <typename T>
STRATA_CPU_CLONES void attention_backward_kv_head(const BackwardOperands<T>& op, int64_t b, int64_t kv) {
  const HeadGroups& g = op.groups;
  const int64_t seq = op.seq, dim = g.head_dim;
  const float scale = g.scale();
  const int64_t padded_seq = round_up(seq, kTile);
  const int64_t pd = round_up(dim, 16);  // padded head dim, the row length of packed tiles
  const auto area = static_cast<size_t>(padded_seq * pd);
  // Packed copies, zero-padded to padded_seq rows and pd columns (or the
  // transpose, [pd][padded_seq]).
  float* q_pack = thread_scratch<float>(0, area);   // q * scale
  float* k_pack = thread_scratch<float>(1, area);
  float* k_t = thread_scratch<float>(2, area);      // transposed
  float* v_t = thread_scratch<float>(3, area);      // transposed
  float* do_pack = thread_scratch<float>(4, area);
  float* dq_acc = thread_scratch<float>(5, 3 * area);  // then dK and dV of the whole kv head
  float* dk_acc = dq_acc + area;
  float* dv_acc = dk_acc + area;
  float* small = thread_scratch<float>(6, static_cast<size_t>(padded_seq + 2 * kTile * kTile));
  float* delta = small;                          // dO_i . O_i
  float* probs = delta + padded_seq;             // P tile [kTile][kTile]
  float* dscores = probs + kTile * kTile;        // dP, then dS

  // The kv head once for the whole group; v passes through q_pack, which the
  // query heads fill afterwards.
  pack_rows(op.k.head(b, kv, dim), op.k.row_stride, seq, dim, padded_seq, pd, 1.0f, k_pack);
  transpose_rows(k_pack, padded_seq, pd, k_t);
  pack_rows(op.v.head(b, kv, dim), op.v.row_stride, seq, dim, padded_seq, pd, 1.0f, q_pack);
  transpose_rows(q_pack, padded_seq, pd, v_t);
  std::fill_n(dk_acc, 2 * area, 0.0f);

  for (int64_t h = kv * g.group(); h < (kv + 1) * g.group(); ++h) {
    const T* dout = op.dout.head(b, h, dim);
    const T* out = op.out.head(b, h, dim);
    const float* lse = op.lse + (b * g.heads + h) * seq;
    pack_rows(op.q.head(b, h, dim), op.q.row_stride, seq, dim, padded_seq, pd, scale, q_pack);
    pack_rows(dout, op.dout.row_stride, seq, dim, padded_seq, pd, 1.0f, do_pack);
    std::fill_n(dq_acc, area, 0.0f);
    delta_rows(do_pack, pd, out, op.out.row_stride, seq, dim, delta);
    std::fill(delta + seq, delta + padded_seq, 0.0f);

    for (int64_t k0 = 0; k0 < seq; k0 += kTile) {
      const int64_t nk = std::min(kTile, seq - k0);
      const int64_t cols = round_up(nk, 16);
      const int64_t key_rows4 = round_up(nk, 4);
      float* dk_tile = dk_acc + k0 * pd;
      float* dv_tile = dv_acc + k0 * pd;
      for (int64_t q0 = k0; q0 < seq; q0 += kTile) {
        const int64_t nq = std::min(kTile, seq - q0);
        const int64_t rows4 = round_up(nq, 4);
        // Query r of this tile sees keys j < offset + r + 1: all of them off
        // the diagonal; on it, blocks of the triangle that is all masked are
        // skipped in every product below.
        const int64_t offset = q0 - k0;
        // S = (Q * scale) K^T and dP = dO V^T, 4 query rows at a time, up to the
        // last 16-column group a row of the block sees (zeros after it).
        for (int64_t r0 = 0; r0 < rows4; r0 += 4) {
          int64_t block_cols = std::min(cols, round_up(offset + r0 + 4, 16));
          tile_strip(block_cols, pd, TileA{q_pack + (q0 + r0) * pd, pd, 1}, k_t + k0, padded_seq,
                     probs + r0 * kTile, kTile, false);
          tile_strip(block_cols, pd, TileA{do_pack + (q0 + r0) * pd, pd, 1}, v_t + k0, padded_seq,
                     dscores + r0 * kTile, kTile, false);
          for (int64_t r = r0; r < r0 + 4; ++r) {
            std::fill(probs + r * kTile + block_cols, probs + r * kTile + cols, 0.0f);
            std::fill(dscores + r * kTile + block_cols, dscores + r * kTile + cols, 0.0f);
          }
        }
        // P = exp(S - lse) and dS = P * (dP - delta), 0 where masked.
        for (int64_t r = 0; r < rows4; ++r) {
          float* p_row = probs + r * kTile;
          float* ds_row = dscores + r * kTile;
          int64_t visible = r < nq ? std::min(nk, offset + r + 1) : 0;
          float row_lse = r < nq ? lse[q0 + r] : 0.0f;
          float row_delta = delta[q0 + r];
#pragma omp simd
          for (int64_t j = 0; j < cols; ++j) {
            float p = j < visible ? exp_approx(p_row[j] - row_lse) : 0.0f;
            ds_row[j] = j < visible ? p * (ds_row[j] - row_delta) : 0.0f;
            p_row[j] = p;
          }
        }
        // dV += P^T dO and dK += dS^T (Q * scale), 4 keys at a time, from the
        // first query that sees them.
        for (int64_t j0 = 0; j0 < key_rows4; j0 += 4) {
          int64_t r_start = std::clamp<int64_t>(j0 - offset, 0, nq);
          tile_strip(pd, nq - r_start, TileA{probs + r_start * kTile + j0, 1, kTile}, do_pack + (q0 + r_start) * pd,
                     pd, dv_tile + j0 * pd, pd, true);
          tile_strip(pd, nq - r_start, TileA{dscores + r_start * kTile + j0, 1, kTile},
                     q_pack + (q0 + r_start) * pd, pd, dk_tile + j0 * pd, pd, true);
        }
        // dQ += dS K (scaled at the end), 4 queries at a time, up to their last key.
        for (int64_t r0 = 0; r0 < rows4; r0 += 4) {
          int64_t depth = std::min(nk, offset + r0 + 4);
          tile_strip(pd, depth, TileA{dscores + r0 * kTile, kTile, 1}, k_pack + k0 * pd, pd,
                     dq_acc + (q0 + r0) * pd, pd, true);
        }
      }
    }
    store_head_rows(dq_acc, pd, seq, dim, scale, op.dq.head(b, h, dim), op.dq.row_stride);
  }
  store_head_rows(dk_acc, pd, seq, dim, 1.0f, op.dk.head(b, kv, dim), op.dk.row_stride);
  store_head_rows(dv_acc, pd, seq, dim, 1.0f, op.dv.head(b, kv, dim), op.dv.row_stride);
}

template <typename T>
void backward_all(const BackwardOperands<T>& op) {
  for_each_kv_head(op.groups, [&](int64_t b, int64_t kv) { attention_backward_kv_head(op, b, kv); });
}

}  // namespace

void attention_backward(const BackwardOperands<float>& op) { backward_all(op); }
void attention_backward(const BackwardOperands<bf16>& op) { backward_all(op); }

}  // namespace strata::cpu
