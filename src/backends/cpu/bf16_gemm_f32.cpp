#include "backends/cpu/bf16_gemm_f32.h"

#include <algorithm>

#include "backends/cpu/convert.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"

namespace strata::cpu {

namespace {

// k a block at a time, so the widened copies stay a fraction of the operands
// (a [m, k] panel and a [k, n] one of at most kBlockK) instead of twice their
// size; fixed, so the bits do not depend on the thread count.
constexpr int64_t kBlockK = 1024;
constexpr int kAPanelSlot = 4, kBPanelSlot = 5;

float* panel(WideningScratch scratch, int slot, int64_t count) {
  return scratch == WideningScratch::Call ? call_scratch<float>(slot, static_cast<size_t>(count))
                                          : thread_scratch<float>(slot, static_cast<size_t>(count));
}

// Widens `rows` runs of `width` values, run r starting at source + r * stride, into a dense [rows, width] block;
// split over the team when not already inside one.
void widen_rows(const bf16* source, int64_t stride, int64_t rows, int64_t width, float* target,
                WideningScratch scratch) {
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) widen_bf16(source + row * stride, target + row * width, width);
  };
  if (scratch == WideningScratch::Thread) return body(0, rows);
  parallel_chunks(rows, std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(width, 1)), body);
}

}  // namespace

void gemm_bf16_through_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a, const bf16* b,
                           float* sums, WideningScratch scratch) {
  const int64_t block = std::min(k, kBlockK);
  float* a_wide = panel(scratch, kAPanelSlot, m * block);
  float* b_wide = panel(scratch, kBPanelSlot, block * n);
  for (int64_t start = 0; start < k; start += kBlockK) {
    const int64_t depth = std::min(kBlockK, k - start);
    // Each block keeps its operand's orientation: a's columns start..start+depth of [m, k], or those rows of [k, m].
    if (trans_a) {
      widen_rows(a + start * m, m, depth, m, a_wide, scratch);
    } else {
      widen_rows(a + start, k, m, depth, a_wide, scratch);
    }
    if (trans_b) {
      widen_rows(b + start, k, n, depth, b_wide, scratch);
    } else {
      widen_rows(b + start * n, n, depth, n, b_wide, scratch);
    }
    sgemm(trans_a, trans_b, m, n, depth, a_wide, b_wide, start == 0 ? 0.0f : 1.0f, sums);
  }
}

}  // namespace strata::cpu
