// layernorm and layernorm_backward over the last dim. Rows are independent;
// the backward's dgamma and dbeta are summed per fixed block of rows, then
// over blocks in block order (f64), so they do not depend on the thread count.
#include <cmath>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

namespace {

constexpr int64_t kRowGrain = 16;

STRATA_CPU_CLONES void layernorm_rows(const float* x, const float* gamma, const float* beta, int64_t width,
                                      float eps, int64_t row_begin, int64_t row_end, float* y, float* mean_out,
                                      float* rstd_out) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* row = x + r * width;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < width; ++c) sum += row[c];
    float mean = sum / static_cast<float>(width);
    float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
    for (int64_t c = 0; c < width; ++c) squares += (row[c] - mean) * (row[c] - mean);
    float rstd = 1.0f / std::sqrt(squares / static_cast<float>(width) + eps);
    float* out = y + r * width;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) out[c] = (row[c] - mean) * rstd * gamma[c] + beta[c];
    mean_out[r] = mean;
    rstd_out[r] = rstd;
  }
}

// dx for rows [row_begin, row_end), and that block's sums of dy * xhat and dy
// into partial[0..width) and partial[width..2 width).
STRATA_CPU_CLONES void layernorm_backward_rows(const float* dy, const float* x, const float* gamma, const float* mean,
                                               const float* rstd, int64_t width, int64_t row_begin, int64_t row_end,
                                               float* dx, float* partial) {
  float* dgamma = partial;
  float* dbeta = partial + width;
  for (int64_t c = 0; c < 2 * width; ++c) partial[c] = 0.0f;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* dy_row = dy + r * width;
    const float* x_row = x + r * width;
    float row_mean = mean[r], row_rstd = rstd[r];
    float mean_g = 0.0f, mean_g_xhat = 0.0f;  // of gamma * dy and gamma * dy * xhat
#pragma omp simd reduction(+ : mean_g, mean_g_xhat)
    for (int64_t c = 0; c < width; ++c) {
      float xhat = (x_row[c] - row_mean) * row_rstd;
      float g = gamma[c] * dy_row[c];
      mean_g += g;
      mean_g_xhat += g * xhat;
      dgamma[c] += dy_row[c] * xhat;
      dbeta[c] += dy_row[c];
    }
    mean_g /= static_cast<float>(width);
    mean_g_xhat /= static_cast<float>(width);
    float* dx_row = dx + r * width;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) {
      float xhat = (x_row[c] - row_mean) * row_rstd;
      dx_row[c] = row_rstd * (gamma[c] * dy_row[c] - mean_g - xhat * mean_g_xhat);
    }
  }
}

STRATA_CPU_CLONES void sum_partials(const float* partials, int64_t blocks, int64_t stride, int64_t begin,
                                    int64_t end, float* out) {
  for (int64_t c = begin; c < end; ++c) {
    double total = 0.0;
    for (int64_t block = 0; block < blocks; ++block) total += static_cast<double>(partials[block * stride + c]);
    out[c] = static_cast<float>(total);
  }
}

void layernorm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  int64_t width = in[0].size(-1);
  int64_t rows = leading_rows(in[0]);
  auto eps = static_cast<float>(attrs.get_float("eps"));
  const float* x = in[0].data<float>();
  const float* gamma = in[1].data<float>();
  const float* beta = in[2].data<float>();
  float* y = out[0].data<float>();
  float* mean = out[1].data<float>();
  float* rstd = out[2].data<float>();
  parallel_chunks(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    layernorm_rows(x, gamma, beta, width, eps, begin, end, y, mean, rstd);
  });
}

void layernorm_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  int64_t width = in[0].size(-1);
  int64_t rows = leading_rows(in[0]);
  const float* dy = in[0].data<float>();
  const float* x = in[1].data<float>();
  const float* gamma = in[2].data<float>();
  const float* mean = in[3].data<float>();
  const float* rstd = in[4].data<float>();
  float* dx = out[0].data<float>();
  int64_t blocks = std::max<int64_t>(1, (rows + kRowGrain - 1) / kRowGrain);
  float* partials = call_scratch<float>(0, static_cast<size_t>(blocks * 2 * width));
  parallel_chunks(blocks, 1, [&](int64_t block, int64_t) {
    layernorm_backward_rows(dy, x, gamma, mean, rstd, width, block * kRowGrain, std::min(rows, (block + 1) * kRowGrain),
                            dx, partials + block * 2 * width);
  });
  float* dgamma = out[1].data<float>();
  float* dbeta = out[2].data<float>();
  parallel_chunks(width, 1024, [&](int64_t begin, int64_t end) {
    sum_partials(partials, blocks, 2 * width, begin, end, dgamma);
    sum_partials(partials + width, blocks, 2 * width, begin, end, dbeta);
  });
}

}  // namespace

void register_layernorm(Backend& backend) {
  backend.add_kernel("layernorm", DType::F32, layernorm);
  backend.add_kernel("layernorm_backward", DType::F32, layernorm_backward);
}

}  // namespace strata::cpu
