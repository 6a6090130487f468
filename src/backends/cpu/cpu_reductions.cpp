// sum_to and sum_squares. Both sum fixed blocks in f64 in parallel, then add
// the block sums in block order, so results are the same run to run and for
// any thread count. bf16 inputs are widened on load; sum_to rounds its f64
// sums through f32 to bf16 (as ref does), sum_squares returns f32 as the
// schema says.
#include "backends/cpu/block_sums.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

namespace {

constexpr int64_t kColumnChunk = 2048;
constexpr int64_t kBlockElements = 32768;

// partial[c] = sum over rows [row_begin, row_end) of x[row, c] for c in
// [column_begin, column_end); x has `width` columns. Four rows at a time, in
// row order: each column's additions are those of one running sum, with a
// quarter of the loads and stores of the partial sums.
template <typename T>
STRATA_CPU_CLONES void sum_rows(const T* x, int64_t width, int64_t row_begin, int64_t row_end,
                                int64_t column_begin, int64_t column_end, double* partial) {
  for (int64_t c = column_begin; c < column_end; ++c) partial[c] = 0.0;
  int64_t r = row_begin;
  for (; r + 4 <= row_end; r += 4) {
    const T* row0 = x + r * width;
    const T* row1 = row0 + width;
    const T* row2 = row1 + width;
    const T* row3 = row2 + width;
#pragma omp simd
    for (int64_t c = column_begin; c < column_end; ++c) {
      double sum = partial[c] + static_cast<double>(to_f32(row0[c]));
      sum += static_cast<double>(to_f32(row1[c]));
      sum += static_cast<double>(to_f32(row2[c]));
      partial[c] = sum + static_cast<double>(to_f32(row3[c]));
    }
  }
  for (; r < row_end; ++r) {
    const T* row = x + r * width;
#pragma omp simd
    for (int64_t c = column_begin; c < column_end; ++c) partial[c] += static_cast<double>(to_f32(row[c]));
  }
}

template <typename T>
STRATA_CPU_CLONES double sum_squares_range(const T* x, int64_t begin, int64_t end) {
  double total = 0.0;
#pragma omp simd reduction(+ : total)
  for (int64_t i = begin; i < end; ++i) {
    auto value = static_cast<double>(to_f32(x[i]));
    total += value * value;
  }
  return total;
}

template <typename T>
void sum_to(const Tensors& in, const Tensors& out, const Attrs&) {
  const T* x = in[0].data<T>();
  T* result = out[0].data<T>();
  int64_t width = out[0].numel();
  if (width == 0) return;
  int64_t rows = in[0].numel() / width;
  int64_t rows_per_block = std::max<int64_t>(1, kBlockElements / std::min(width, kColumnChunk));
  int64_t blocks = std::max<int64_t>(1, (rows + rows_per_block - 1) / rows_per_block);
  int64_t column_chunks = (width + kColumnChunk - 1) / kColumnChunk;
  double* partials = call_scratch<double>(0, static_cast<size_t>(blocks * width));
  parallel_chunks(blocks * column_chunks, 1, [&](int64_t item, int64_t) {
    int64_t block = item / column_chunks, chunk = item % column_chunks;
    int64_t column_begin = chunk * kColumnChunk;
    sum_rows(x, width, block * rows_per_block, std::min(rows, (block + 1) * rows_per_block), column_begin,
             std::min(width, column_begin + kColumnChunk), partials + block * width);
  });
  parallel_chunks(width, kColumnChunk,
                  [&](int64_t begin, int64_t end) {
                    sum_block_partials<kColumnChunk>(partials, blocks, width, begin, end, result);
                  });
}

template <typename T>
void sum_squares(const Tensors& in, const Tensors& out, const Attrs&) {
  const T* x = in[0].data<T>();
  int64_t count = in[0].numel();
  int64_t blocks = (count + kBlockElements - 1) / kBlockElements;
  double* partials = call_scratch<double>(0, static_cast<size_t>(blocks));
  parallel_chunks(count, kBlockElements, [&](int64_t begin, int64_t end) {
    partials[begin / kBlockElements] = sum_squares_range(x, begin, end);
  });
  double total = 0.0;
  for (int64_t block = 0; block < blocks; ++block) total += partials[block];
  out[0].data<float>()[0] = static_cast<float>(total);
}

}  // namespace

void register_reductions(Backend& backend) {
  backend.add_kernel("sum_to", DType::F32, sum_to<float>);
  backend.add_kernel("sum_squares", DType::F32, sum_squares<float>);
  backend.add_kernel("sum_to", DType::BF16, sum_to<bf16>);
  backend.add_kernel("sum_squares", DType::BF16, sum_squares<bf16>);
}

}  // namespace strata::cpu
