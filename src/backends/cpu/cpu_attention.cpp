// Causal attention forward, flash-attention style, for every attention op
// (attention_kernels.h describes the operands): one task per (batch, head,
// tile of queries) walks the keys a tile at a time with an online softmax, so
// the T x T score matrix never exists. Scores are computed transposed,
// S^T = K Q^T, which reads keys and values straight from the input rows and
// lets the softmax run along contiguous query columns. Each task writes only
// its own rows, so results do not depend on scheduling.
//
// bf16 `attention` and `grouped_attention` run on the CPU's bf16 dot products
// where it has them (cpu_attention_bf16.cpp). Elsewhere, and for
// attention_cached, bf16 operands are widened to f32 in one vectorised pass
// over the rows the call reads, into scratch; the tiles then run as for f32
// and write out rounded once to bf16, lse stays f32. Widening inside the
// tiles instead packs each key tile again for every query tile after it:
// measured 60% slower than f32 that way, within 5% this way.
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

constexpr int64_t kTile = 64;  // queries per task and keys per step
// The running maximum starts finite so that fully masked (padding) queries
// never compute inf - inf.
constexpr float kNoScore = -1e30f;

// One (batch, head): row i of q, k, v and out starts at pointer + i * stride;
// out is f32 or bf16.
template <typename T>
struct HeadSlices {
  const float* q;
  int64_t q_stride;
  const float* k;
  int64_t k_stride;
  const float* v;
  int64_t v_stride;
  T* out;
  int64_t out_stride;
  float* lse;        // one per query, or nullptr
  int64_t position;  // query i sees keys 0..position + i
  int64_t head_dim;
  float scale;
};

// q_t[d * kTile + i] = q[i * stride + d] * scale for the tile's rows i, 0 for
// its padding columns up to cols (a multiple of 16): 16 x 16 blocks
// transposed in registers where dim is whole blocks, element by element
// otherwise.
__attribute__((always_inline)) inline void transpose_scaled_queries(const float* q, int64_t stride, int64_t rows,
                                                                    int64_t cols, int64_t dim, float scale,
                                                                    float* q_t) {
  if (dim % 16 != 0) {
    for (int64_t d = 0; d < dim; ++d) {
      for (int64_t i = 0; i < cols; ++i) q_t[d * kTile + i] = i < rows ? q[i * stride + d] * scale : 0.0f;
    }
    return;
  }
  for (int64_t i0 = 0; i0 < cols; i0 += 16) {
    for (int64_t d0 = 0; d0 < dim; d0 += 16) {
      f32x16 block[16];
      for (int64_t r = 0; r < 16; ++r) {
        block[r] = f32x16{};
        if (i0 + r < rows) load16(&block[r], q + (i0 + r) * stride + d0);
        block[r] *= scale;
      }
      transpose16(block);
      for (int64_t c = 0; c < 16; ++c) store16(q_t + (d0 + c) * kTile + i0, &block[c]);
    }
  }
}

// The online softmax of one key tile's scores S^T [nk][kTile] (query columns,
// `cols` of them): each column's maximum over the tile and its running
// maximum (tile_max), the factor alpha that rescales what the column has
// accumulated, and P^T over S^T, masked scores 0. kMasked: column i (of
// `rows` real ones) sees key j when j <= i + lag, lag being the first query's
// position less the tile's first key; a tile every column sees whole (off the
// diagonal, no padding columns) runs without the mask. 32-bit lanes: masks of 16.
template <bool kMasked>
__attribute__((always_inline)) inline void online_softmax(float* scores, int64_t nk, int64_t cols, int32_t rows,
                                                          int32_t lag, float* row_max, float* row_sum,
                                                          float* tile_max, float* alpha) {
  const auto columns = static_cast<int32_t>(cols), keys = static_cast<int32_t>(nk);
  auto visible = [&](int32_t i, int32_t j) { return !kMasked || (i < rows && j <= lag + i); };
  for (int32_t i = 0; i < columns; ++i) tile_max[i] = row_max[i];
  for (int32_t j = 0; j < keys; ++j) {
    const float* column = scores + j * kTile;
#pragma omp simd
    for (int32_t i = 0; i < columns; ++i) {
      tile_max[i] = visible(i, j) && column[i] > tile_max[i] ? column[i] : tile_max[i];
    }
  }
  // Every exponent is at most 0: a score less a maximum at least as large.
#pragma omp simd
  for (int32_t i = 0; i < columns; ++i) {
    alpha[i] = exp_nonpositive(row_max[i] - tile_max[i]);
    row_sum[i] *= alpha[i];
    row_max[i] = tile_max[i];
  }
  for (int32_t j = 0; j < keys; ++j) {
    float* column = scores + j * kTile;
#pragma omp simd
    for (int32_t i = 0; i < columns; ++i) {
      const float p = visible(i, j) ? exp_nonpositive(column[i] - tile_max[i]) : 0.0f;
      column[i] = p;
      row_sum[i] += p;
    }
  }
}

// Queries [first, first + rows) of one head, rows <= kTile.
template <typename T>
STRATA_CPU_CLONES void attend_tile(const HeadSlices<T>& s, int64_t first, int64_t rows) {
  const int64_t dim = s.head_dim;
  const int64_t padded_dim = round_up(dim, 16);
  const int64_t rows4 = round_up(rows, 4);
  const int64_t cols = round_up(rows, 16);  // query columns of S^T, padding masked
  float* q_t = thread_scratch<float>(0, static_cast<size_t>(dim * kTile));           // Q^T, scaled [dim][kTile]
  float* scores = thread_scratch<float>(1, static_cast<size_t>(kTile * kTile));     // S^T, then P^T
  float* acc = thread_scratch<float>(2, static_cast<size_t>(kTile * padded_dim));   // unnormalised out
  float* stats = thread_scratch<float>(3, static_cast<size_t>(4 * kTile));
  float* k_tail = thread_scratch<float>(4, static_cast<size_t>(kTile * dim));
  float* v_pack = thread_scratch<float>(5, static_cast<size_t>(kTile * padded_dim));
  float* row_max = stats;
  float* row_sum = stats + kTile;
  float* tile_max = stats + 2 * kTile;
  float* alpha = stats + 3 * kTile;

  transpose_scaled_queries(s.q + first * s.q_stride, s.q_stride, rows, cols, dim, s.scale, q_t);
  for (int64_t i = 0; i < rows4 * padded_dim; ++i) acc[i] = 0.0f;
  for (int64_t i = 0; i < cols; ++i) {
    row_max[i] = kNoScore;
    row_sum[i] = 0.0f;
  }
  // Query i of this tile sees keys j <= limit + i.
  const int64_t limit = s.position + first;
  const int64_t keys = limit + rows;
  const bool direct_v = dim % 16 == 0;
  for (int64_t k0 = 0; k0 < keys; k0 += kTile) {
    const int64_t nk = std::min(kTile, keys - k0);
    const int64_t key_rows4 = round_up(nk, 4);
    TileA k_rows{s.k + k0 * s.k_stride, s.k_stride, 1};
    if (key_rows4 != nk) {  // a partial tile: pad to whole blocks of 4 keys
      for (int64_t j = 0; j < key_rows4; ++j) {
        for (int64_t d = 0; d < dim; ++d) k_tail[j * dim + d] = j < nk ? s.k[(k0 + j) * s.k_stride + d] : 0.0f;
      }
      k_rows = {k_tail, dim, 1};
    }
    // Blocks of 4 keys skip the 16-column groups of queries that see none of
    // them (on the diagonal), leaving zeros there for the masked softmax.
    for (int64_t j0 = 0; j0 < key_rows4; j0 += 4) {
      int64_t first_col = std::clamp<int64_t>(k0 + j0 - limit, 0, cols) / 16 * 16;
      for (int64_t r = 0; r < 4; ++r) std::fill_n(scores + (j0 + r) * kTile, first_col, 0.0f);
      tile_strip(cols - first_col, dim, TileA{k_rows.data + j0 * k_rows.row_stride, k_rows.row_stride, 1},
                 q_t + first_col, kTile, scores + j0 * kTile + first_col, kTile, false);
    }

    // Online softmax down each query column; masked scores become 0.
    const auto real = static_cast<int32_t>(rows), lag = static_cast<int32_t>(limit - k0);
    if (k0 + nk - 1 <= limit && rows == cols) {
      online_softmax<false>(scores, nk, cols, real, lag, row_max, row_sum, tile_max, alpha);
    } else {
      online_softmax<true>(scores, nk, cols, real, lag, row_max, row_sum, tile_max, alpha);
    }
    for (int64_t i = 0; i < rows4; ++i) {
      if (alpha[i] == 1.0f) continue;
      float* acc_row = acc + i * padded_dim;
#pragma omp simd
      for (int64_t d = 0; d < padded_dim; ++d) acc_row[d] *= alpha[i];
    }

    // out += P V, with P read transposed out of P^T.
    const float* v_rows = s.v + k0 * s.v_stride;
    int64_t v_ld = s.v_stride;
    if (!direct_v) {
      for (int64_t j = 0; j < nk; ++j) {
        for (int64_t d = 0; d < padded_dim; ++d) {
          v_pack[j * padded_dim + d] = d < dim ? v_rows[j * s.v_stride + d] : 0.0f;
        }
      }
      v_rows = v_pack;
      v_ld = padded_dim;
    }
    // Blocks of 4 queries stop at the last key they see.
    for (int64_t i0 = 0; i0 < rows4; i0 += 4) {
      int64_t depth = std::clamp<int64_t>(limit + i0 + 4 - k0, 0, nk);
      tile_strip(padded_dim, depth, TileA{scores + i0, 1, kTile}, v_rows, v_ld, acc + i0 * padded_dim, padded_dim,
                 true);
    }
  }

  for (int64_t i = 0; i < rows; ++i) {
    float inverse = 1.0f / row_sum[i];
    T* out_row = s.out + (first + i) * s.out_stride;
    const float* acc_row = acc + i * padded_dim;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) out_row[d] = from_f32<T>(acc_row[d] * inverse);
    if (s.lse != nullptr) s.lse[first + i] = row_max[i] + std::log(row_sum[i]);
  }
}

// Runs every (batch, head, query tile), the tiles with the most keys first
// so the dynamic schedule ends evenly.
template <typename Out>
void attend_all(const ForwardOperands<float, Out>& op) {
  const HeadGroups& g = op.groups;
  const int64_t tiles = (op.queries + kTile - 1) / kTile;
  const int64_t heads_total = g.batch * g.heads;
  const float scale = g.scale();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < heads_total * tiles; ++item) {
    int64_t tile = tiles - 1 - item / heads_total;
    int64_t head = item % heads_total;
    int64_t b = head / g.heads, h = head % g.heads, kv = g.kv_head(h);
    int64_t first = tile * kTile;
    HeadSlices<Out> slices{.q = op.q.head(b, h, g.head_dim), .q_stride = op.q.row_stride,
                           .k = op.k.head(b, kv, g.head_dim), .k_stride = op.k.row_stride,
                           .v = op.v.head(b, kv, g.head_dim), .v_stride = op.v.row_stride,
                           .out = op.out.head(b, h, g.head_dim), .out_stride = op.out.row_stride,
                           .lse = op.lse == nullptr ? nullptr : op.lse + head * op.queries,
                           .position = op.position, .head_dim = g.head_dim, .scale = scale};
    attend_tile(slices, first, std::min(kTile, op.queries - first));
  }
}

// Rows [0, rows) of `heads` heads of each batch entry as f32, packed
// [batch][rows][heads * head_dim] in call scratch `slot` (the kernels read no
// other rows).
HeadRows<const float> widen_rows(const HeadRows<const bf16>& x, const HeadGroups& g, int64_t heads, int64_t rows,
                                 int slot) {
  const int64_t width = heads * g.head_dim;
  float* wide = call_scratch<float>(slot, static_cast<size_t>(g.batch * rows * width));
  parallel_chunks(g.batch * rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      int64_t b = item / rows, i = item % rows;
      widen_bf16(x.head(b, 0, g.head_dim) + i * x.row_stride, wide + item * width, width);
    }
  });
  return head_rows<const float>(wide, rows, width);
}

}  // namespace

void attention_forward(const ForwardOperands<float, float>& op) { attend_all(op); }

void attention_forward(const ForwardOperands<bf16, bf16>& op) {
  const HeadGroups& g = op.groups;
  const int64_t keys = op.position + op.queries;
  attend_all(ForwardOperands<float, bf16>{.groups = g, .queries = op.queries, .position = op.position,
                                          .q = widen_rows(op.q, g, g.heads, op.queries, 0),
                                          .k = widen_rows(op.k, g, g.kv_heads, keys, 1),
                                          .v = widen_rows(op.v, g, g.kv_heads, keys, 2),
                                          .out = op.out, .lse = op.lse});
}

}  // namespace strata::cpu
