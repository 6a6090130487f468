#pragma once
// The per-(batch, head) split shared by the cpu attention_backward kernels
// (cpu_attention_backward.cpp and its bf16 dot-product path,
// cpu_attention_backward_bf16.cpp): where each head's rows lie in
// dout [B, T, C], qkv [B, T, 3C], out [B, T, C], lse [B, H, T] and
// dqkv [B, T, 3C], and one task per head.
#include <cmath>
#include <cstdint>

#include "ops/backend.h"

namespace strata::cpu {

template <typename T>
struct BackwardHead {
  const T* q;  // rows of q, k, v and dq, dk, dv are qkv_stride apart
  const T* k;
  const T* v;
  int64_t qkv_stride;
  const T* dout;  // rows of dout and out are out_stride apart
  const T* out;
  int64_t out_stride;
  const float* lse;
  T* dq;
  T* dk;
  T* dv;
  int64_t seq;
  int64_t head_dim;
  float scale;
};

// Calls backward_head(BackwardHead<T>) for every (batch, head), in parallel;
// each call writes only its own head's dq, dk and dv.
template <typename T, typename HeadFn>
void for_each_backward_head(const Tensors& in, const Tensors& out, const Attrs& attrs, HeadFn backward_head) {
  const int64_t batch = in[1].size(0), seq = in[1].size(1), width = in[1].size(2) / 3;
  const int64_t heads = attrs.get_int("n_head");
  const int64_t dim = width / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const T* dout = in[0].data<T>();
  const T* qkv = in[1].data<T>();
  const T* result = in[2].data<T>();
  const float* lse = in[3].data<float>();
  T* dqkv = out[0].data<T>();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < batch * heads; ++item) {
    int64_t b = item / heads, h = item % heads;
    int64_t column = b * seq * 3 * width + h * dim;
    backward_head(BackwardHead<T>{
        .q = qkv + column, .k = qkv + column + width, .v = qkv + column + 2 * width, .qkv_stride = 3 * width,
        .dout = dout + b * seq * width + h * dim, .out = result + b * seq * width + h * dim, .out_stride = width,
        .lse = lse + item * seq,
        .dq = dqkv + column, .dk = dqkv + column + width, .dv = dqkv + column + 2 * width,
        .seq = seq, .head_dim = dim, .scale = scale});
  }
}

}  // namespace strata::cpu
