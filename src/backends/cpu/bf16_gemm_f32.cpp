#include "backends/cpu/bf16_gemm_f32.h"

#include <algorithm>

#include "backends/cpu/convert.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

namespace {

// k a block at a time, so the widened copies stay a fraction of the operands
// (a [m, k] panel and a [k, n] one of at most kBlockK) instead of twice their
// size; fixed, so the bits do not depend on the thread count.
constexpr int64_t kBlockK = 1024;
// The output a block of rows and columns at a time where all of it would need more f32 sums, or B's widened
// panel more room, than this (32 MiB each): a wide product (an LM head's logits, its weight gradient) otherwise
// held sums and panels as large as its f32 result, so bf16 training took more memory than f32 on CPUs without bf16
// GEMMs (SmolLM-135M: 4935 MiB against 4434). Blocks keep at least kMinBlock rows and columns, where sgemm would
// lose speed.
constexpr int64_t kBudget = int64_t{8} << 20;
constexpr int64_t kMinBlock = 256;
constexpr int kAPanelSlot = 4, kBPanelSlot = 5, kSumsSlot = 6;

float* panel(WideningScratch scratch, int slot, int64_t count) {
  return scratch == WideningScratch::Call ? call_scratch<float>(slot, static_cast<size_t>(count))
                                          : thread_scratch<float>(slot, static_cast<size_t>(count));
}

// body(begin, end) over rows [0, rows): split over the team in chunks of `grain` rows, or all on this thread where
// the product already runs as one task of a team (thread scratch).
template <typename Body>
void over_rows(WideningScratch scratch, int64_t rows, int64_t grain, const Body& body) {
  if (scratch == WideningScratch::Thread) return body(0, rows);
  parallel_chunks(rows, grain, body);
}

// Widens `rows` runs of `width` values, run r starting at source + r * stride, into a dense [rows, width] block.
void widen_rows(const bf16* source, int64_t stride, int64_t rows, int64_t width, float* target,
                WideningScratch scratch) {
  over_rows(scratch, rows, std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(width, 1)),
            [&](int64_t begin, int64_t end) {
              for (int64_t row = begin; row < end; ++row) {
                widen_bf16(source + row * stride, target + row * width, width);
              }
            });
}

// Indices [first, first + count) of an operand's outer dimension (m for A, n for B) and [start, start + depth) of
// k, widened keeping the stored orientation: [count, depth] from [outer, k] (k_inner), else [depth, count] from
// [k, outer].
void widen_block(const bf16* x, bool k_inner, int64_t outer, int64_t k, int64_t first, int64_t count, int64_t start,
                 int64_t depth, float* target, WideningScratch scratch) {
  if (k_inner) {
    widen_rows(x + first * k + start, k, count, depth, target, scratch);
  } else {
    widen_rows(x + start * outer + first, outer, depth, count, target, scratch);
  }
}

// A block size: all of `extent` when `extent * other` fits the budget, else what fits, but not under kMinBlock.
int64_t block_within_budget(int64_t extent, int64_t other) {
  if (extent * other <= kBudget) return extent;
  return std::min(extent, std::max(kMinBlock, kBudget / other));
}

}  // namespace

STRATA_CPU_CLONES void round_row(const float* sums, const bf16* bias, bf16* c, int64_t n) {
  if (bias == nullptr) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) c[j] = from_f32<bf16>(sums[j]);
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) c[j] = from_f32<bf16>(sums[j] + to_f32(bias[j]));
  }
}

void round_rows(const float* sums, const bf16* bias, bf16* c, int64_t m, int64_t n) {
  parallel_chunks(m, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) round_row(sums + row * n, bias, c + row * n, n);
  });
}

void gemm_bf16_through_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a, const bf16* b,
                           const bf16* bias, bf16* c, WideningScratch scratch) {
  const int64_t block_k = std::min(k, kBlockK);
  // Columns such that B's panel and the sums of the fewest rows fit; then rows such that the sums and A's panel do.
  const int64_t block_cols = block_within_budget(n, std::max(block_k, kMinBlock));
  const int64_t block_rows = block_within_budget(m, std::max(block_cols, block_k));
  float* a_wide = panel(scratch, kAPanelSlot, block_rows * block_k);
  float* b_wide = panel(scratch, kBPanelSlot, block_k * block_cols);
  float* sums = panel(scratch, kSumsSlot, block_rows * block_cols);
  // With one block of k, B's panel serves every block of rows; with several, it is widened again for each.
  const bool one_k_block = k <= kBlockK;
  for (int64_t col = 0; col < n; col += block_cols) {
    const int64_t cols = std::min(block_cols, n - col);
    if (one_k_block) widen_block(b, trans_b, n, k, col, cols, 0, k, b_wide, scratch);
    for (int64_t row = 0; row < m; row += block_rows) {
      const int64_t rows = std::min(block_rows, m - row);
      for (int64_t start = 0; start < k; start += kBlockK) {
        const int64_t depth = std::min(kBlockK, k - start);
        widen_block(a, !trans_a, m, k, row, rows, start, depth, a_wide, scratch);
        if (!one_k_block) widen_block(b, trans_b, n, k, col, cols, start, depth, b_wide, scratch);
        sgemm(trans_a, trans_b, rows, cols, depth, a_wide, b_wide, start == 0 ? 0.0f : 1.0f, sums);
      }
      bf16* out = c + row * n + col;
      const bf16* bias_part = bias == nullptr ? nullptr : bias + col;
      over_rows(scratch, rows, 16, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) round_row(sums + r * cols, bias_part, out + r * n, cols);
      });
    }
  }
}

}  // namespace strata::cpu
