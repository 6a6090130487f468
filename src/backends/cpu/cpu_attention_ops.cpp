// The cpu kernels of the attention ops: each says where its tensors' heads lie
// (attention_kernels.h) and runs the one set of fused kernels, on the CPU's
// bf16 dot products where they apply. `attention` reads q, k and v out of the
// packed qkv, every query head its own kv head; `grouped_attention` reads
// separate q, k and v with n_head / n_kv_head query heads per kv head.
#include <type_traits>

#include "backends/cpu/attention_kernels.h"
#include "backends/cpu/cpu_ops.h"

namespace strata::cpu {

namespace {

HeadGroups packed_groups(const Tensor& qkv, const Attrs& attrs) {
  const int64_t heads = attrs.get_int("n_head");
  return {qkv.size(0), heads, heads, qkv.size(2) / 3 / heads};
}

HeadGroups grouped_groups(const Tensor& q, const Attrs& attrs) {
  const int64_t heads = attrs.get_int("n_head");
  return {q.size(0), heads, attrs.get_int("n_kv_head"), q.size(2) / heads};
}

template <typename T>
void run_forward(const ForwardOperands<T, T>& op) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (runs_on_bf16_dot(op.groups)) return attention_forward_bf16_dot(op);
  }
  attention_forward(op);
}

template <typename T>
void run_backward(const BackwardOperands<T>& op) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (runs_on_bf16_dot(op.groups)) return attention_backward_bf16_dot(op);
  }
  attention_backward(op);
}

template <typename T>
void attention_kernel(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const HeadGroups g = packed_groups(in[0], attrs);
  const int64_t seq = in[0].size(1), width = g.heads * g.head_dim;
  const T* qkv = in[0].data<T>();
  run_forward<T>({.groups = g, .queries = seq, .position = 0,
                  .q = head_rows(qkv, seq, 3 * width), .k = head_rows(qkv, seq, 3 * width, width),
                  .v = head_rows(qkv, seq, 3 * width, 2 * width),
                  .out = head_rows(out[0].data<T>(), seq, width), .lse = out[1].data<float>()});
}

template <typename T>
void attention_backward_kernel(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const HeadGroups g = packed_groups(in[1], attrs);
  const int64_t seq = in[1].size(1), width = g.heads * g.head_dim;
  const T* qkv = in[1].data<T>();
  T* dqkv = out[0].data<T>();
  run_backward<T>({.groups = g, .seq = seq,
                   .dout = head_rows<const T>(in[0].data<T>(), seq, width),
                   .q = head_rows(qkv, seq, 3 * width), .k = head_rows(qkv, seq, 3 * width, width),
                   .v = head_rows(qkv, seq, 3 * width, 2 * width),
                   .out = head_rows<const T>(in[2].data<T>(), seq, width), .lse = in[3].data<float>(),
                   .dq = head_rows(dqkv, seq, 3 * width), .dk = head_rows(dqkv, seq, 3 * width, width),
                   .dv = head_rows(dqkv, seq, 3 * width, 2 * width)});
}

template <typename T>
void grouped_attention_kernel(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const HeadGroups g = grouped_groups(in[0], attrs);
  const int64_t seq = in[0].size(1), width = g.heads * g.head_dim, kv_width = g.kv_heads * g.head_dim;
  run_forward<T>({.groups = g, .queries = seq, .position = 0,
                  .q = head_rows<const T>(in[0].data<T>(), seq, width),
                  .k = head_rows<const T>(in[1].data<T>(), seq, kv_width),
                  .v = head_rows<const T>(in[2].data<T>(), seq, kv_width),
                  .out = head_rows(out[0].data<T>(), seq, width), .lse = out[1].data<float>()});
}

template <typename T>
void grouped_attention_backward_kernel(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const HeadGroups g = grouped_groups(in[1], attrs);
  const int64_t seq = in[1].size(1), width = g.heads * g.head_dim, kv_width = g.kv_heads * g.head_dim;
  run_backward<T>({.groups = g, .seq = seq,
                   .dout = head_rows<const T>(in[0].data<T>(), seq, width),
                   .q = head_rows<const T>(in[1].data<T>(), seq, width),
                   .k = head_rows<const T>(in[2].data<T>(), seq, kv_width),
                   .v = head_rows<const T>(in[3].data<T>(), seq, kv_width),
                   .out = head_rows<const T>(in[4].data<T>(), seq, width), .lse = in[5].data<float>(),
                   .dq = head_rows(out[0].data<T>(), seq, width), .dk = head_rows(out[1].data<T>(), seq, kv_width),
                   .dv = head_rows(out[2].data<T>(), seq, kv_width)});
}

// The bf16 dot-product kernel starts at position 0 and writes lse, so the
// cache, which does neither, always takes the f32 tiles (bf16 widened).
template <typename T>
void attention_cached_kernel(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const int64_t heads = attrs.get_int("n_head");
  const int64_t queries = in[0].size(1), width = in[0].size(2);
  const int64_t cache_len = in[1].size(1), kv_width = in[1].size(2);
  const HeadGroups g{in[0].size(0), heads, attrs.has("n_kv_head") ? attrs.get_int("n_kv_head") : heads,
                     width / heads};
  attention_forward(ForwardOperands<T, T>{.groups = g, .queries = queries, .position = attrs.get_int("position"),
                                          .q = head_rows<const T>(in[0].data<T>(), queries, width),
                                          .k = head_rows<const T>(in[1].data<T>(), cache_len, kv_width),
                                          .v = head_rows<const T>(in[2].data<T>(), cache_len, kv_width),
                                          .out = head_rows(out[0].data<T>(), queries, width), .lse = nullptr});
}

template <typename T>
void register_dtype(Backend& backend, DType dtype) {
  backend.add_kernel("attention", dtype, attention_kernel<T>);
  backend.add_kernel("attention_backward", dtype, attention_backward_kernel<T>);
  backend.add_kernel("grouped_attention", dtype, grouped_attention_kernel<T>);
  backend.add_kernel("grouped_attention_backward", dtype, grouped_attention_backward_kernel<T>);
  backend.add_kernel("attention_cached", dtype, attention_cached_kernel<T>);
}

}  // namespace

void register_attention(Backend& backend) {
  register_dtype<float>(backend, DType::F32);
  register_dtype<bf16>(backend, DType::BF16);
}

}  // namespace strata::cpu
