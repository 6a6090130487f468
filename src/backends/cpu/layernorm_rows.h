#pragma once
// The row routines of layernorm and its backward, shared by cpu_layernorm.cpp
// and the fused add_layernorm / layernorm_backward_add of cpu_fused.cpp so the
// fused kernels compute and sum exactly as the unfused ones. Values are f32
// in registers, rounded to the storage type X once on store (bf16 a chunk at a
// time: convert.h's chunk_output). The backward runs
// fixed blocks of kLayernormRowGrain rows; dgamma and dbeta are summed per
// block, then over blocks in block order (f64), so results do not depend on
// the thread count.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backends/cpu/block_sums.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

inline constexpr int64_t kLayernormRowGrain = 16;

// Internal linkage: each including file gets its own clones and resolvers
// rather than target_clones symbols merged across translation units.
namespace {

// Normalises one row of f32 `values` whose sum is `sum` into y_row, with its
// mean and rstd. Inlined into the calling clone so it vectorises for its ISA.
template <typename X>
__attribute__((always_inline)) inline void normalize_row(const float* values, float sum, const X* gamma,
                                                         const X* beta, int64_t width, float eps, X* y_row,
                                                         float* mean_out, float* rstd_out) {
  float mean = sum / static_cast<float>(width);
  float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
  for (int64_t c = 0; c < width; ++c) squares += (values[c] - mean) * (values[c] - mean);
  float rstd = 1.0f / std::sqrt(squares / static_cast<float>(width) + eps);
  alignas(64) float buffer[kOutputChunk];
  for (int64_t chunk = 0; chunk < width; chunk += kOutputChunk) {  // convert.h's chunk_output
    const int64_t count = std::min(kOutputChunk, width - chunk);
    float* out = chunk_output(y_row + chunk, buffer);
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) {
      const int64_t c = chunk + j;
      out[j] = (values[c] - mean) * rstd * to_f32(gamma[c]) + to_f32(beta[c]);
    }
    store_chunk(buffer, y_row + chunk, count);
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

// dx for rows [row_begin, row_end) (plus dres when kAddResidual), and that
// block's sums of dy * xhat and dy into partial[0..width) and
// partial[width..2 width). f32 dy is read in place; other dtypes are widened
// once per row into `dy_scratch` (width floats; convert.h's f32_row).
template <typename DY, typename X, bool kAddResidual>
STRATA_CPU_CLONES void layernorm_backward_rows(const DY* dy, const X* x, const X* gamma, const float* mean,
                                               const float* rstd, const X* dres, int64_t width, int64_t row_begin,
                                               int64_t row_end, X* dx, float* partial, float* dy_scratch) {
  float* dgamma = partial;
  float* dbeta = partial + width;
  alignas(64) float buffer[kOutputChunk];
  for (int64_t c = 0; c < 2 * width; ++c) partial[c] = 0.0f;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* dy_row = f32_row(dy + r * width, width, dy_scratch);
    const X* x_row = x + r * width;
    float row_mean = mean[r], row_rstd = rstd[r];
    float mean_g = 0.0f, mean_g_xhat = 0.0f;  // of gamma * dy and gamma * dy * xhat
#pragma omp simd reduction(+ : mean_g, mean_g_xhat)
    for (int64_t c = 0; c < width; ++c) {
      float xhat = (to_f32(x_row[c]) - row_mean) * row_rstd;
      float g = to_f32(gamma[c]) * dy_row[c];
      mean_g += g;
      mean_g_xhat += g * xhat;
      dgamma[c] += dy_row[c] * xhat;
      dbeta[c] += dy_row[c];
    }
    mean_g /= static_cast<float>(width);
    mean_g_xhat /= static_cast<float>(width);
    X* dx_row = dx + r * width;
    for (int64_t chunk = 0; chunk < width; chunk += kOutputChunk) {  // convert.h's chunk_output
      const int64_t count = std::min(kOutputChunk, width - chunk);
      float* out = chunk_output(dx_row + chunk, buffer);
#pragma omp simd
      for (int64_t j = 0; j < count; ++j) {
        const int64_t c = chunk + j;
        float xhat = (to_f32(x_row[c]) - row_mean) * row_rstd;
        float local = row_rstd * (to_f32(gamma[c]) * dy_row[c] - mean_g - xhat * mean_g_xhat);
        if constexpr (kAddResidual) {
          out[j] = to_f32(dres[r * width + c]) + local;
        } else {
          out[j] = local;
        }
      }
      store_chunk(buffer, dx_row + chunk, count);
    }
  }
}

// The whole backward over `rows` rows: dx (plus dres when kAddResidual),
// dgamma and dbeta.
template <typename DY, typename X, bool kAddResidual>
void layernorm_backward_blocks(const DY* dy, const X* x, const X* gamma, const float* mean, const float* rstd,
                               const X* dres, int64_t rows, int64_t width, X* dx, X* dgamma, X* dbeta) {
  int64_t blocks = std::max<int64_t>(1, (rows + kLayernormRowGrain - 1) / kLayernormRowGrain);
  float* partials = call_scratch<float>(0, static_cast<size_t>(blocks * 2 * width));
  parallel_chunks(blocks, 1, [&](int64_t block, int64_t) {
    float* dy_scratch = std::is_same_v<DY, float> ? nullptr : thread_scratch<float>(0, static_cast<size_t>(width));
    layernorm_backward_rows<DY, X, kAddResidual>(dy, x, gamma, mean, rstd, dres, width, block * kLayernormRowGrain,
                                                 std::min(rows, (block + 1) * kLayernormRowGrain), dx,
                                                 partials + block * 2 * width, dy_scratch);
  });
  parallel_chunks(width, kPartialColumns, [&](int64_t begin, int64_t end) {
    sum_block_partials(partials, blocks, 2 * width, begin, end, dgamma);
    sum_block_partials(partials + width, blocks, 2 * width, begin, end, dbeta);
  });
}

}  // namespace

}  // namespace strata::cpu
