// attention_backward, flash-attention style: probabilities are recomputed
// tile by tile from the forward's lse (p = exp(s - lse)), and with
// dP = dO V^T and delta_i = dO_i . O_i, dS = P * (dP - delta). One task per
// (batch, head) packs that head once, then walks key tiles (accumulating
// their dK and dV in small buffers) and, inside, the query tiles at or after
// them (accumulating dQ for the whole head). A task owns every output it
// touches, so the result is deterministic without atomics. bf16 runs on the
// CPU's bf16 dot products where it has them (cpu_attention_backward_bf16.cpp);
// elsewhere bf16 heads are widened to f32 while packing and computed as f32
// ones, dqkv rounded to bf16 once; lse is f32.
#include <algorithm>

#include "backends/cpu/attention_backward_heads.h"
#include "backends/cpu/attention_bf16.h"
#include "backends/cpu/bf16_dot.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/tile_gemm.h"

namespace strata::cpu {

namespace {

constexpr int64_t kTile = 64;

template <typename T>
STRATA_CPU_CLONES void attention_backward_head(const BackwardHead<T>& h) {
  const int64_t seq = h.seq, dim = h.head_dim;
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
  float* dq_acc = thread_scratch<float>(5, area);
  float* small = thread_scratch<float>(6, static_cast<size_t>(padded_seq + 2 * kTile * kTile + 2 * kTile * pd));
  float* delta = small;                          // dO_i . O_i
  float* probs = delta + padded_seq;             // P tile [kTile][kTile]
  float* dscores = probs + kTile * kTile;        // dP, then dS
  float* dk_acc = dscores + kTile * kTile;       // [kTile][pd]
  float* dv_acc = dk_acc + kTile * pd;           // [kTile][pd]

  for (int64_t i = 0; i < padded_seq; ++i) {
    bool row = i < seq;
    float dot = 0.0f;
    for (int64_t d = 0; d < pd; ++d) {
      bool in = row && d < dim;
      float q = in ? to_f32(h.q[i * h.qkv_stride + d]) : 0.0f;
      float k = in ? to_f32(h.k[i * h.qkv_stride + d]) : 0.0f;
      float v = in ? to_f32(h.v[i * h.qkv_stride + d]) : 0.0f;
      float g = in ? to_f32(h.dout[i * h.out_stride + d]) : 0.0f;
      if (in) dot += g * to_f32(h.out[i * h.out_stride + d]);
      q_pack[i * pd + d] = q * h.scale;
      k_pack[i * pd + d] = k;
      k_t[d * padded_seq + i] = k;
      v_t[d * padded_seq + i] = v;
      do_pack[i * pd + d] = g;
      dq_acc[i * pd + d] = 0.0f;
    }
    delta[i] = dot;
  }

  for (int64_t k0 = 0; k0 < seq; k0 += kTile) {
    const int64_t nk = std::min(kTile, seq - k0);
    const int64_t cols = round_up(nk, 16);
    const int64_t key_rows4 = round_up(nk, 4);
    for (int64_t i = 0; i < 2 * kTile * pd; ++i) dk_acc[i] = 0.0f;
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
        tile_strip(block_cols, pd, TileA{q_pack + (q0 + r0) * pd, pd, 1}, k_t + k0, padded_seq, probs + r0 * kTile,
                   kTile, false);
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
        float row_lse = r < nq ? h.lse[q0 + r] : 0.0f;
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
        tile_strip(pd, nq - r_start, TileA{probs + r_start * kTile + j0, 1, kTile}, do_pack + (q0 + r_start) * pd, pd,
                   dv_acc + j0 * pd, pd, true);
        tile_strip(pd, nq - r_start, TileA{dscores + r_start * kTile + j0, 1, kTile}, q_pack + (q0 + r_start) * pd,
                   pd, dk_acc + j0 * pd, pd, true);
      }
      // dQ += dS K (scaled at the end), 4 queries at a time, up to their last key.
      for (int64_t r0 = 0; r0 < rows4; r0 += 4) {
        int64_t depth = std::min(nk, offset + r0 + 4);
        tile_strip(pd, depth, TileA{dscores + r0 * kTile, kTile, 1}, k_pack + k0 * pd, pd, dq_acc + (q0 + r0) * pd, pd,
                   true);
      }
    }
    for (int64_t j = 0; j < nk; ++j) {
      T* dk_row = h.dk + (k0 + j) * h.qkv_stride;
      T* dv_row = h.dv + (k0 + j) * h.qkv_stride;
      for (int64_t d = 0; d < dim; ++d) {
        dk_row[d] = from_f32<T>(dk_acc[j * pd + d]);
        dv_row[d] = from_f32<T>(dv_acc[j * pd + d]);
      }
    }
  }
  for (int64_t i = 0; i < seq; ++i) {
    T* dq_row = h.dq + i * h.qkv_stride;
    for (int64_t d = 0; d < dim; ++d) dq_row[d] = from_f32<T>(dq_acc[i * pd + d] * h.scale);
  }
}

template <typename T>
void attention_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  for_each_backward_head<T>(in, out, attrs, [](const BackwardHead<T>& head) { attention_backward_head(head); });
}

void attention_backward_bf16(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  int64_t head_dim = in[1].size(2) / 3 / attrs.get_int("n_head");
  if (has_bf16_dot() && head_dim % 2 == 0) {
    attention_backward_bf16_dot(in, out, attrs);
  } else {
    attention_backward<bf16>(in, out, attrs);
  }
}

}  // namespace

void register_attention_backward(Backend& backend) {
  backend.add_kernel("attention_backward", DType::F32, attention_backward<float>);
  backend.add_kernel("attention_backward", DType::BF16, attention_backward_bf16);
}

}  // namespace strata::cpu
