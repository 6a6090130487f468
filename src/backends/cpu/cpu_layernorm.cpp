// layernorm and layernorm_backward over the last dim, on the row routines of
// layernorm_rows.h: rows are independent, and the backward's dgamma and dbeta
// do not depend on the thread count.
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/layernorm_rows.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

namespace {

STRATA_CPU_CLONES void layernorm_rows(const float* x, const float* gamma, const float* beta, int64_t width,
                                      float eps, int64_t row_begin, int64_t row_end, float* y, float* mean_out,
                                      float* rstd_out) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* row = x + r * width;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < width; ++c) sum += row[c];
    normalize_row(row, sum, gamma, beta, width, eps, y + r * width, mean_out + r, rstd_out + r);
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
  parallel_chunks(rows, kLayernormRowGrain, [&](int64_t begin, int64_t end) {
    layernorm_rows(x, gamma, beta, width, eps, begin, end, y, mean, rstd);
  });
}

void layernorm_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  layernorm_backward_blocks<float, float, /*kAddResidual=*/false>(
      in[0].data<float>(), in[1].data<float>(), in[2].data<float>(), in[3].data<float>(), in[4].data<float>(),
      /*dres=*/nullptr, leading_rows(in[0]), in[0].size(-1), out[0].data<float>(), out[1].data<float>(),
      out[2].data<float>());
}

}  // namespace

void register_layernorm(Backend& backend) {
  backend.add_kernel("layernorm", DType::F32, layernorm);
  backend.add_kernel("layernorm_backward", DType::F32, layernorm_backward);
}

}  // namespace strata::cpu
