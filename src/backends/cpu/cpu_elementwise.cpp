// add, scale, gelu and gelu_backward: streaming loops over fixed chunks.
// Outputs may alias inputs element for element (each element is read before
// it is written), which `omp simd` tells the vectoriser.
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

namespace {

constexpr int64_t kGrain = 16384;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// out[e] = a[e] + b[e mod b_count] over [begin, end), one contiguous run of b
// at a time.
STRATA_CPU_CLONES void add_range(const float* a, const float* b, int64_t b_count, float* out, int64_t begin,
                                 int64_t end) {
  int64_t column = begin % b_count;
  for (int64_t e = begin; e < end;) {
    int64_t run = std::min(end - e, b_count - column);
    const float* a_run = a + e;
    const float* b_run = b + column;
    float* out_run = out + e;
#pragma omp simd
    for (int64_t i = 0; i < run; ++i) out_run[i] = a_run[i] + b_run[i];
    e += run;
    column = 0;
  }
}

STRATA_CPU_CLONES void scale_range(const float* x, float factor, float* out, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) out[i] = x[i] * factor;
}

// With u = sqrt(2/pi) (x + 0.044715 x^3), E = e^(-2u) and s = 1 / (1 + E):
// 1 + tanh(u) = 2s and 1 - tanh(u)^2 = 4 s (1 - s) = 4 s E s. Written this
// way nothing cancels in either tail, so the relative error stays a few ulps
// where gelu and its derivative approach 0.
STRATA_CPU_CLONES void gelu_range(const float* x, float* y, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    float v = x[i];
    float e = exp_approx(-2.0f * kGeluScale * (v + kGeluCubic * v * v * v));
    y[i] = v / (1.0f + e);
  }
}

STRATA_CPU_CLONES void gelu_backward_range(const float* dy, const float* x, float* dx, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    float v = x[i];
    float e = exp_approx(-2.0f * kGeluScale * (v + kGeluCubic * v * v * v));
    float s = 1.0f / (1.0f + e);
    float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
    float one_minus_s = e * s;  // in (0, 1]: e saturates below the float range
    dx[i] = dy[i] * s * (1.0f + 2.0f * v * du_dx * one_minus_s);
  }
}

void add(const Tensors& in, const Tensors& out, const Attrs&) {
  const float* a = in[0].data<float>();
  const float* b = in[1].data<float>();
  float* result = out[0].data<float>();
  int64_t b_count = in[1].numel();
  if (b_count == 0) return;  // then a is empty too
  parallel_chunks(in[0].numel(), kGrain,
                  [&](int64_t begin, int64_t end) { add_range(a, b, b_count, result, begin, end); });
}

void scale(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const float* x = in[0].data<float>();
  float* result = out[0].data<float>();
  auto factor = static_cast<float>(attrs.get_float("factor"));
  parallel_chunks(in[0].numel(), kGrain,
                  [&](int64_t begin, int64_t end) { scale_range(x, factor, result, begin, end); });
}

void gelu(const Tensors& in, const Tensors& out, const Attrs&) {
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  parallel_chunks(in[0].numel(), kGrain, [&](int64_t begin, int64_t end) { gelu_range(x, y, begin, end); });
}

void gelu_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  const float* dy = in[0].data<float>();
  const float* x = in[1].data<float>();
  float* dx = out[0].data<float>();
  parallel_chunks(in[0].numel(), kGrain,
                  [&](int64_t begin, int64_t end) { gelu_backward_range(dy, x, dx, begin, end); });
}

}  // namespace

void register_elementwise(Backend& backend) {
  backend.add_kernel("add", DType::F32, add);
  backend.add_kernel("scale", DType::F32, scale);
  backend.add_kernel("gelu", DType::F32, gelu);
  backend.add_kernel("gelu_backward", DType::F32, gelu_backward);
}

}  // namespace strata::cpu
