// The pieces of the unfused attention decomposition in f32: head layout
// copies, batched GEMMs on oneDNN's sgemm, and vectorised causal softmax rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

namespace {

constexpr int64_t kRowGrain = 64;

void split_heads(const Tensors& in, const Tensors& out, const Attrs&) {
  const Tensor& result = out[0];
  int64_t batch = result.size(0), heads = result.size(1), seq = result.size(2), head_dim = result.size(3);
  int64_t rows = batch * heads * seq;
  size_t row_bytes = static_cast<size_t>(head_dim) * sizeof(float);
  const float* x = in[0].data<float>();
  float* y = result.data<float>();
  parallel_chunks(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t b = row / (heads * seq), h = row / seq % heads, t = row % seq;
      std::memcpy(y + row * head_dim, x + ((b * seq + t) * heads + h) * head_dim, row_bytes);
    }
  });
}

void merge_heads(const Tensors& in, const Tensors& out, const Attrs&) {
  const Tensor& x = in[0];
  int64_t batch = x.size(0), heads = x.size(1), seq = x.size(2), head_dim = x.size(3);
  int64_t rows = batch * heads * seq;
  size_t row_bytes = static_cast<size_t>(head_dim) * sizeof(float);
  const float* source = x.data<float>();
  float* y = out[0].data<float>();
  parallel_chunks(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t b = row / (heads * seq), h = row / seq % heads, t = row % seq;
      std::memcpy(y + ((b * seq + t) * heads + h) * head_dim, source + row * head_dim, row_bytes);
    }
  });
}

// One sgemm per leading index; sgemm threads each product itself.
void bmm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  bool trans_a = attrs.get_bool("trans_a");
  bool trans_b = attrs.get_bool("trans_b");
  int64_t m = out[0].size(-2), p = out[0].size(-1);
  int64_t k = trans_a ? in[0].size(-2) : in[0].size(-1);
  if (m == 0 || p == 0) return;
  int64_t batch = out[0].numel() / (m * p);
  const float* a = in[0].data<float>();
  const float* b = in[1].data<float>();
  float* c = out[0].data<float>();
  for (int64_t n = 0; n < batch; ++n) {
    if (k == 0) {
      std::memset(c + n * m * p, 0, static_cast<size_t>(m * p) * sizeof(float));
      continue;
    }
    sgemm(trans_a, trans_b, m, p, k, a + n * m * k, b + n * k * p, 0.0f, c + n * m * p);
  }
}

// p[j] = exp(scale s[j] - lse) for j < valid, 0 up to width; returns lse.
STRATA_CPU_CLONES float causal_softmax_row(const float* s, float* p, int64_t valid, int64_t width, float scale) {
  float max_score = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max_score)
  for (int64_t j = 0; j < valid; ++j) max_score = std::max(max_score, scale * s[j]);
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int64_t j = 0; j < valid; ++j) {
    float e = exp_approx(scale * s[j] - max_score);
    p[j] = e;
    total += e;
  }
  float inverse = 1.0f / total;
#pragma omp simd
  for (int64_t j = 0; j < valid; ++j) p[j] *= inverse;
  for (int64_t j = valid; j < width; ++j) p[j] = 0.0f;
  return max_score + std::log(total);
}

// ds[j] = scale p[j] (dp[j] - sum_k dp[k] p[k]) for j < valid, 0 up to width.
STRATA_CPU_CLONES void causal_softmax_backward_row(const float* dp, const float* p, float* ds, int64_t valid,
                                                   int64_t width, float scale) {
  float weighted = 0.0f;
#pragma omp simd reduction(+ : weighted)
  for (int64_t j = 0; j < valid; ++j) weighted += dp[j] * p[j];
#pragma omp simd
  for (int64_t j = 0; j < valid; ++j) ds[j] = scale * p[j] * (dp[j] - weighted);
  for (int64_t j = valid; j < width; ++j) ds[j] = 0.0f;
}

void causal_softmax(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  auto scale = static_cast<float>(attrs.get_float("scale"));
  int64_t seq = in[0].size(-1);
  int64_t rows = leading_rows(in[0]);
  const float* s = in[0].data<float>();
  float* p = out[0].data<float>();
  float* lse = out[1].data<float>();
  parallel_chunks(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      lse[row] = causal_softmax_row(s + row * seq, p + row * seq, row % seq + 1, seq, scale);
    }
  });
}

void causal_softmax_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  auto scale = static_cast<float>(attrs.get_float("scale"));
  int64_t seq = in[0].size(-1);
  int64_t rows = leading_rows(in[0]);
  const float* dp = in[0].data<float>();
  const float* p = in[1].data<float>();
  float* ds = out[0].data<float>();
  parallel_chunks(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      causal_softmax_backward_row(dp + row * seq, p + row * seq, ds + row * seq, row % seq + 1, seq, scale);
    }
  });
}

}  // namespace

void register_attention_parts(Backend& backend) {
  backend.add_kernel("split_heads", DType::F32, split_heads);
  backend.add_kernel("merge_heads", DType::F32, merge_heads);
  backend.add_kernel("bmm", DType::F32, bmm);
  backend.add_kernel("causal_softmax", DType::F32, causal_softmax);
  backend.add_kernel("causal_softmax_backward", DType::F32, causal_softmax_backward);
}

}  // namespace strata::cpu
