// Causal attention forward on bf16 with the CPU's bf16 products (AMX tiles,
// amx_tiles.h, where present, else AVX-512 BF16 dot products, bf16_dot.h),
// for `attention` and `grouped_attention` (attention_kernels.h describes the
// operands), the flash-attention walk of cpu_attention.cpp:
// one task per (batch, head, tile of queries) walks the keys a tile at a time
// with an online softmax, so the T x T scores never exist. Q K^T multiplies the bf16
// inputs as they are, exactly, in f32; the softmax runs in f32, in base 2
// (the score scale times log2 e folded into one FMA), and a row's offset
// follows its running maximum lazily: only when a tile's scores exceed it by
// more than a factor 2^kSlack, so most tiles skip the maximum's reduction
// and the rescaling of the row (out and lse do not depend on the offset). The
// probabilities are rounded to bf16 for P V, as FlashAttention does on GPUs
// (f32 accumulation). The row sum that normalises the output adds the rounded
// probabilities, so out is an exact weighted mean of the rows of V; lse adds
// the unrounded ones, so the backward recomputes exactly the softmax here.
// A parallel pass first packs every kv head (once, however many query heads
// read it) into the layouts the products read; queries are read where they
// lie (packed only where a row is not whole depth steps of the products).
// Each task writes only its own rows: results do not depend on scheduling.
#include <algorithm>
#include <cmath>

#include "backends/cpu/amx_tiles.h"
#include "backends/cpu/attention_kernels.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"

// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined_* inside
// max, min, shifts, widening, reductions) as maybe (or even surely)
// uninitialised once inlined: GCC bug 105593.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace strata::cpu {

namespace {

constexpr int64_t kTile = 64;  // queries per task and keys per step
// A row's offset before its first key tile; 2^(kNoScore - anything finite) is 0.
constexpr float kNoScore = -1e30f;
// A row keeps its offset (its running maximum, base 2, when last raised) while
// a tile's exponents stay within kSlack above it: most key tiles then neither
// reduce a maximum nor rescale the row, and probabilities stay below 2^kSlack,
// far inside the range of f32 and bf16 (whose rounding is relative).
constexpr float kSlack = 8.0f;

// One head's operands: q as pairs along rows (bf16_dot.h's LeftRows), and
// its kv head packed, k transposed in blocks of a tile's keys [rows /
// kTile][pairs][kTile], v as pairs of rows [rows / 2][padded_dim]; rows is
// the sequence rounded up to whole tiles, pairs dim / 2 rounded up to the
// products' depth step, padding zero.
struct PackedHead {
  LeftRows q;
  uint32_t* k_t;
  uint32_t* v;
};

struct Geometry {
  int64_t seq, rows, dim, pairs, padded_dim;
  float scale;
};

// The online softmax of one query row: its offset, and the sums of its
// probabilities as computed (for lse) and rounded to bf16 (for out), 16
// lanes each, added across lanes once at the end.
struct RowSoftmax {
  float* offset;
  float* sum;
  float* rounded_sum;
};

// The probabilities of keys 16v..16v + 15 of a row (0 outside `lanes`),
// stored in bf16 at p_row and added to `sum`; `over` gathers the lanes whose
// exponent exceeds kSlack. Returns them rounded.
STRATA_BF16_DOT __attribute__((always_inline)) inline __m256bh probabilities16(const float* s, int64_t v,
                                                                               __mmask16 lanes, __m512 scale,
                                                                               __m512 offset, uint32_t* p_row,
                                                                               __m512& sum, __mmask16& over) {
  const __m512 x = _mm512_fmsub_ps(_mm512_loadu_ps(s + 16 * v), scale, offset);
  over |= _mm512_mask_cmp_ps_mask(lanes, x, _mm512_set1_ps(kSlack), _CMP_GT_OQ);
  const __m512 p = exp2_16(lanes, x);
  const __m256bh narrow = _mm512_cvtneps_pbh(p);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p_row + 8 * v), (__m256i)narrow);
  sum = _mm512_add_ps(sum, p);
  return narrow;
}

// A row's probabilities for one key tile, p = 2^(s * log2e_scale - offset) on
// its `visible` keys and 0 after them up to `vectors` vectors of 16, stored in
// bf16 at p_row and added to the row's sums (the rounded ones as a product
// with ones, one instruction per 32). Returns false, sums untouched, when an
// exponent exceeds kSlack: the caller raises the offset and calls again.
STRATA_BF16_DOT __attribute__((always_inline)) inline bool add_probabilities(const float* s, int64_t visible,
                                                                             int64_t vectors, float log2e_scale,
                                                                             const RowSoftmax& row, uint32_t* p_row) {
  const __m512 scale = _mm512_set1_ps(log2e_scale), offset = _mm512_set1_ps(*row.offset);
  const auto ones = (__m512bh)_mm512_set1_epi16(0x3f80);
  __m512 sum = _mm512_loadu_ps(row.sum), rounded_sum = _mm512_loadu_ps(row.rounded_sum);
  __mmask16 over = 0;
  for (int64_t v = 0; v < vectors; v += 2) {
    const __m256bh low = probabilities16(s, v, first_lanes(visible - 16 * v), scale, offset, p_row, sum, over);
    const __m256bh high = v + 1 < vectors ? probabilities16(s, v + 1, first_lanes(visible - 16 * v - 16), scale,
                                                            offset, p_row, sum, over)
                                          : (__m256bh)_mm256_setzero_si256();
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512((__m256i)low), (__m256i)high, 1);
    rounded_sum = _mm512_dpbf16_ps(rounded_sum, (__m512bh)both, ones);
  }
  if (over != 0) return false;
  _mm512_storeu_ps(row.sum, sum);
  _mm512_storeu_ps(row.rounded_sum, rounded_sum);
  return true;
}

// Raises a row's offset to the largest of its `visible` exponents in this
// tile and rescales what it has accumulated (its sums and its output row acc,
// `width` floats) to the new offset.
STRATA_BF16_DOT void raise_offset(const float* s, int64_t visible, float log2e_scale, const RowSoftmax& row,
                                  float* acc, int64_t width) {
  __m512 top = _mm512_set1_ps(*row.offset);
  for (int64_t v = 0; 16 * v < visible; ++v) {
    const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * v), _mm512_set1_ps(log2e_scale));
    top = _mm512_mask_max_ps(top, first_lanes(visible - 16 * v), top, x);
  }
  const float raised = _mm512_reduce_max_ps(top);
  if (*row.offset != kNoScore) {  // else nothing is accumulated yet
    const __m512 alpha = exp2_16(0xffff, _mm512_set1_ps(*row.offset - raised));
    _mm512_storeu_ps(row.sum, _mm512_mul_ps(_mm512_loadu_ps(row.sum), alpha));
    _mm512_storeu_ps(row.rounded_sum, _mm512_mul_ps(_mm512_loadu_ps(row.rounded_sum), alpha));
    for (int64_t d = 0; d < width; d += 16) _mm512_storeu_ps(acc + d, _mm512_mul_ps(_mm512_loadu_ps(acc + d), alpha));
  }
  *row.offset = raised;
}

// Queries [first, first + count) of one head, count <= kTile, in strips of
// Products::kRows; writes out rows (stride out_stride) and lse.
template <typename Products>
STRATA_BF16_DOT void attend_tile(const PackedHead& h, const Geometry& g, int64_t first, int64_t count, bf16* out,
                                 int64_t out_stride, float* lse) {
  const Products products;
  constexpr int64_t kRows = Products::kRows;
  const int64_t pd = g.padded_dim;
  const int64_t strip_rows = round_up(count, kRows);
  const float log2e_scale = g.scale * kLog2e;
  float* scores = thread_scratch<float>(0, static_cast<size_t>(kTile * kTile));
  auto* probs = thread_scratch<uint32_t>(1, static_cast<size_t>(kTile * kTile / 2));  // bf16 [kTile][kTile]
  float* acc = thread_scratch<float>(2, static_cast<size_t>(kTile * pd));
  float* stats = thread_scratch<float>(3, static_cast<size_t>(33 * kTile));
  auto* spare = thread_scratch<uint32_t>(4, static_cast<size_t>(kRows * h.q.stride));  // a last strip's rows
  float* offsets = stats;
  float* sums = stats + kTile;               // [kTile][16]
  float* rounded_sums = sums + 16 * kTile;   // [kTile][16]
  std::fill_n(acc, strip_rows * pd, 0.0f);
  std::fill_n(offsets, kTile, kNoScore);
  std::fill_n(sums, 32 * kTile, 0.0f);

  const int64_t keys = first + count;  // query first + r sees keys 0..first + r
  for (int64_t k0 = 0; k0 < keys; k0 += kTile) {
    const int64_t nk = std::min(kTile, keys - k0);
    const int64_t key_vectors = (nk + 15) / 16;
    for (int64_t r0 = 0; r0 < strip_rows; r0 += kRows) {
      // The strip's last query sees keys up to first + r0 + kRows - 1: later
      // 16-key vectors are all masked and skipped.
      const int64_t vectors = std::min(key_vectors, (first + r0 + kRows - k0 + 15) / 16);
      products.product(vectors, g.pairs, h.q.strip(first + r0, kRows, spare), h.q.stride, h.k_t + k0 * g.pairs, kTile,
                       scores + r0 * kTile, kTile, false);
      // P V's depth: the keys the strip sees, in whole depth steps; P is 0
      // past each row's last key, up to the end of the depth.
      const int64_t depth_pairs = round_up((std::min(nk, first + r0 + kRows - k0) + 1) / 2, Products::kDepthPairs);
      const int64_t p_vectors = (2 * depth_pairs + 15) / 16;
      for (int64_t r = r0; r < r0 + kRows; ++r) {
        // Every query row sees a key of every tile it walks; padding rows see none.
        const int64_t visible = r < count ? std::min(nk, first + r + 1 - k0) : 0;
        const float* s = scores + r * kTile;
        uint32_t* p_row = probs + r * kTile / 2;
        const RowSoftmax row{offsets + r, sums + 16 * r, rounded_sums + 16 * r};
        if (*row.offset != kNoScore && add_probabilities(s, visible, p_vectors, log2e_scale, row, p_row)) continue;
        if (visible > 0) raise_offset(s, visible, log2e_scale, row, acc + r * pd, pd);
        add_probabilities(s, visible, p_vectors, log2e_scale, row, p_row);  // padding rows: P = 0
      }
      products.product(pd / 16, depth_pairs, probs + r0 * kTile / 2, kTile / 2, h.v + k0 / 2 * pd, pd, acc + r0 * pd,
                       pd, true);
    }
  }

  for (int64_t r = 0; r < count; ++r) {
    const float inverse = 1.0f / _mm512_reduce_add_ps(_mm512_loadu_ps(rounded_sums + 16 * r));
    bf16* out_row = out + (first + r) * out_stride;
    const float* acc_row = acc + r * pd;
    store_scaled_row(acc_row, g.dim, inverse, out_row);
    lse[first + r] = offsets[r] * kLn2 + std::log(_mm512_reduce_add_ps(_mm512_loadu_ps(sums + 16 * r)));
  }
}

// Query head h of batch entry b (in place, or packed into q_packed), and its
// kv head when h is the first query head that reads it (so each kv head is
// packed once).
STRATA_BF16_DOT void pack_head(const ForwardOperands<bf16, bf16>& op, const Geometry& g, int64_t b, int64_t h,
                               uint32_t* q_packed, PackedHead& packed) {
  const HeadGroups& hg = op.groups;
  packed.q = left_rows(op.q.head(b, h, g.dim), op.q.row_stride, g.seq, g.dim, g.rows, g.pairs, q_packed);
  if (h % hg.group() != 0) return;
  const int64_t kv = hg.kv_head(h);
  pack_rows_transposed(op.k.head(b, kv, g.dim), op.k.row_stride, g.seq, g.dim, g.rows, g.pairs, kTile, packed.k_t);
  pack_row_pairs(op.v.head(b, kv, g.dim), op.v.row_stride, g.seq, g.dim, g.rows, g.padded_dim, packed.v);
}

template <typename Products>
void forward_with(const ForwardOperands<bf16, bf16>& op) {
  const HeadGroups& hg = op.groups;
  const int64_t seq = op.queries, dim = hg.head_dim;
  const Geometry g{.seq = seq,
                   .rows = round_up(seq, kTile),
                   .dim = dim,
                   .pairs = round_up(dim / 2, Products::kDepthPairs),
                   .padded_dim = round_up(dim, 16),
                   .scale = hg.scale()};
  const int64_t heads_total = hg.batch * hg.heads;
  const int64_t q_size = g.rows * g.pairs, v_size = g.rows / 2 * g.padded_dim;
  const int64_t kv_size = q_size + v_size;  // k_t, then v
  const int64_t kv_total = hg.batch * hg.kv_heads;
  auto* packed = call_scratch<uint32_t>(0, static_cast<size_t>(heads_total * q_size + kv_total * kv_size));
  uint32_t* packed_kv = packed + heads_total * q_size;
  auto* heads = call_scratch<PackedHead>(1, static_cast<size_t>(heads_total));
  const int64_t tiles = g.rows / kTile;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t head = 0; head < heads_total; ++head) {
      uint32_t* k_t = packed_kv + (head / hg.heads * hg.kv_heads + hg.kv_head(head % hg.heads)) * kv_size;
      heads[head] = PackedHead{.q = {}, .k_t = k_t, .v = k_t + q_size};
      pack_head(op, g, head / hg.heads, head % hg.heads, packed + head * q_size, heads[head]);
    }
    // The query heads that share a kv head one after another, so its packed
    // keys and values stay in the cache; inside them the tiles with the most
    // keys first, so the dynamic schedule ends evenly.
    const int64_t group = hg.group();
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < heads_total * tiles; ++item) {
      const int64_t in_group = item % (tiles * group);
      const int64_t tile = tiles - 1 - in_group / group;
      const int64_t head = item / (tiles * group) * group + in_group % group;
      const int64_t b = head / hg.heads, h = head % hg.heads, first = tile * kTile;
      attend_tile<Products>(heads[head], g, first, std::min(kTile, seq - first), op.out.head(b, h, dim),
                            op.out.row_stride, op.lse + head * seq);
    }
  }
}

}  // namespace

void attention_forward_bf16_dot(const ForwardOperands<bf16, bf16>& op) {
  if (runs_on_amx_tiles()) return forward_with<AmxTiles>(op);
  forward_with<DotStrips>(op);
}

}  // namespace strata::cpu
