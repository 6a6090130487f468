#pragma once
// The fused causal attention kernels (cpu_attention*.cpp) and where they find
// their operands. One description serves every attention op: `attention`
// (q, k and v side by side in one packed qkv [B, T, 3C]), `grouped_attention`
// (q [B, T, H*D], k and v [B, T, KV*D]) and `attention_cached` (keys and
// values in caches [B, L, KV*D]). Each operand is heads along rows at a
// stride, and query head h reads kv head h / (H / KV): grouped keys and values
// are read where they lie, never repeated per query head. The op kernels that
// build these descriptions from tensors are in cpu_attention_ops.cpp.
#include <cmath>
#include <cstdint>

#include "backends/cpu/bf16_dot.h"
#include "backends/cpu/convert.h"
#include "core/dtype.h"

namespace strata::cpu {

// Row i of head h of batch entry b starts at
// data + b * batch_stride + i * row_stride + h * head_dim.
template <typename T>
struct HeadRows {
  T* data;
  int64_t batch_stride;
  int64_t row_stride;
  T* head(int64_t b, int64_t h, int64_t head_dim) const { return data + b * batch_stride + h * head_dim; }
};

// The heads of a contiguous [B, rows, width] tensor whose first head starts
// at column `column`.
template <typename T>
HeadRows<T> head_rows(T* data, int64_t rows, int64_t width, int64_t column = 0) {
  return {data + column, rows * width, width};
}

struct HeadGroups {
  int64_t batch, heads, kv_heads, head_dim;
  int64_t group() const { return heads / kv_heads; }  // query heads per kv head
  int64_t kv_head(int64_t head) const { return head / group(); }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }
};

// Query i (of `queries` per batch entry) sees keys 0..position + i.
template <typename In, typename Out>
struct ForwardOperands {
  HeadGroups groups;
  int64_t queries;
  int64_t position;
  HeadRows<const In> q, k, v;
  HeadRows<Out> out;
  float* lse;  // [batch, heads, queries], or nullptr
};

// Gradients of position-0 causal attention over `seq` positions; dk and dv
// sum over the query heads that read each kv head.
template <typename T>
struct BackwardOperands {
  HeadGroups groups;
  int64_t seq;
  HeadRows<const T> dout, q, k, v, out;
  const float* lse;  // [batch, heads, seq]
  HeadRows<T> dq, dk, dv;
};

// The bf16 dot-product kernels need the instruction and bf16 pairs along the
// head dimension; elsewhere bf16 runs the widening f32 kernels.
inline bool runs_on_bf16_dot(const HeadGroups& groups) { return has_bf16_dot() && groups.head_dim % 2 == 0; }

// cpu_attention.cpp: f32 tiles; bf16 operands are widened to f32 first.
void attention_forward(const ForwardOperands<float, float>& op);
void attention_forward(const ForwardOperands<bf16, bf16>& op);
// cpu_attention_bf16.cpp: position 0, lse set, where runs_on_bf16_dot.
void attention_forward_bf16_dot(const ForwardOperands<bf16, bf16>& op);
// cpu_attention_backward.cpp: f32 tiles; bf16 heads are widened while packing.
void attention_backward(const BackwardOperands<float>& op);
void attention_backward(const BackwardOperands<bf16>& op);
// cpu_attention_backward_bf16.cpp: where runs_on_bf16_dot.
void attention_backward_bf16_dot(const BackwardOperands<bf16>& op);

// A backward kernel's result: `rows` rows of an f32 accumulator (row stride `acc_stride`) times
// `factor`, rounded once into a head's rows at `row_stride`.
template <typename T>
void store_head_rows(const float* acc, int64_t acc_stride, int64_t rows, int64_t dim, float factor, T* head,
                     int64_t row_stride) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t d = 0; d < dim; ++d) head[i * row_stride + d] = from_f32<T>(acc[i * acc_stride + d] * factor);
  }
}

// Calls task(b, kv) for every (batch entry, kv head), in parallel: the
// backward kernels' unit of work, which owns the dq of the query heads in
// the group and the dk and dv of the kv head, so no two tasks write the same
// output and no atomics are needed.
template <typename Task>
void for_each_kv_head(const HeadGroups& groups, Task task) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < groups.batch * groups.kv_heads; ++item) {
    task(item / groups.kv_heads, item % groups.kv_heads);
  }
}

}  // namespace strata::cpu
