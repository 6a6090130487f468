// The pieces of the unfused attention decomposition in f32 on the device: head layout copies
// and causal softmax rows (bmm is opencl_matmul.cpp's). One work-item per copied element or per
// score row: every output has one owner, so the results do not depend on scheduling.
#include "backends/opencl/launch.h"
#include "backends/opencl/opencl_ops.h"

namespace strata::opencl {

namespace {

constexpr size_t kGroupSize = 64;

const std::string kPartsSource = R"CLC(
// Element e of the split layout [B, H, T, D] and where it sits in the packed [B, T, H*D].
ulong packed_index(ulong e, ulong heads, ulong seq, ulong head_dim) {
  ulong d = e % head_dim, t = e / head_dim % seq, h = e / (head_dim * seq) % heads, b = e / (head_dim * seq * heads);
  return ((b * seq + t) * heads + h) * head_dim + d;
}

__kernel void split_heads(__global const float* x, ulong x_off, __global float* out, ulong out_off, ulong heads,
                          ulong seq, ulong head_dim, ulong total) {
  ulong e = get_global_id(0);
  if (e >= total) return;
  out[out_off + e] = x[x_off + packed_index(e, heads, seq, head_dim)];
}

__kernel void merge_heads(__global const float* x, ulong x_off, __global float* out, ulong out_off, ulong heads,
                          ulong seq, ulong head_dim, ulong total) {
  ulong e = get_global_id(0);
  if (e >= total) return;
  out[out_off + packed_index(e, heads, seq, head_dim)] = x[x_off + e];
}

// Row r of s [..., T, T] is query r % T, which sees keys 0..r % T.
__kernel void causal_softmax(__global const float* s, ulong s_off, __global float* p, ulong p_off,
                             __global float* lse, ulong lse_off, ulong seq, ulong rows, float scale) {
  ulong row = get_global_id(0);
  if (row >= rows) return;
  __global const float* s_row = s + s_off + row * seq;
  __global float* p_row = p + p_off + row * seq;
  ulong valid = row % seq + 1;
  float max_score = -INFINITY;
  for (ulong j = 0; j < valid; ++j) max_score = fmax(max_score, scale * s_row[j]);
  float total = 0.0f;
  for (ulong j = 0; j < valid; ++j) total += exp(scale * s_row[j] - max_score);
  for (ulong j = 0; j < valid; ++j) p_row[j] = exp(scale * s_row[j] - max_score) / total;
  for (ulong j = valid; j < seq; ++j) p_row[j] = 0.0f;
  lse[lse_off + row] = max_score + log(total);
}

__kernel void causal_softmax_backward(__global const float* dp, ulong dp_off, __global const float* p, ulong p_off,
                                      __global float* ds, ulong ds_off, ulong seq, ulong rows, float scale) {
  ulong row = get_global_id(0);
  if (row >= rows) return;
  __global const float* dp_row = dp + dp_off + row * seq;
  __global const float* p_row = p + p_off + row * seq;
  __global float* ds_row = ds + ds_off + row * seq;
  ulong valid = row % seq + 1;
  float weighted = 0.0f;
  for (ulong j = 0; j < valid; ++j) weighted += dp_row[j] * p_row[j];
  for (ulong j = 0; j < valid; ++j) ds_row[j] = scale * p_row[j] * (dp_row[j] - weighted);
  for (ulong j = valid; j < seq; ++j) ds_row[j] = 0.0f;
}
)CLC";

// `split` is [B, H, T, D] (split_heads' output, merge_heads' input); the other is packed.
void move_heads(const char* kernel, const Tensor& x, const Tensor& out, const Tensor& split) {
  const auto total = static_cast<size_t>(split.numel());
  Launch(out, kPartsSource, kernel)
      .tensor(x)
      .tensor(out)
      .value<cl_ulong>(split.size(1))
      .value<cl_ulong>(split.size(2))
      .value<cl_ulong>(split.size(3))
      .value<cl_ulong>(total)
      .run(total, kGroupSize);
}

void split_heads(const Tensors& in, const Tensors& out, const Attrs&) {
  move_heads("split_heads", in[0], out[0], out[0]);
}

void merge_heads(const Tensors& in, const Tensors& out, const Attrs&) {
  move_heads("merge_heads", in[0], out[0], in[0]);
}

void causal_softmax(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const auto rows = static_cast<size_t>(leading_rows(in[0]));
  Launch(out[0], kPartsSource, "causal_softmax")
      .tensor(in[0])
      .tensor(out[0])
      .tensor(out[1])
      .value<cl_ulong>(in[0].size(-1))
      .value<cl_ulong>(rows)
      .value<float>(static_cast<float>(attrs.get_float("scale")))
      .run(rows, kGroupSize);
}

void causal_softmax_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const auto rows = static_cast<size_t>(leading_rows(in[0]));
  Launch(out[0], kPartsSource, "causal_softmax_backward")
      .tensor(in[0])
      .tensor(in[1])
      .tensor(out[0])
      .value<cl_ulong>(in[0].size(-1))
      .value<cl_ulong>(rows)
      .value<float>(static_cast<float>(attrs.get_float("scale")))
      .run(rows, kGroupSize);
}

}  // namespace

void register_attention_parts(Backend& backend) {
  backend.add_kernel("split_heads", DType::F32, split_heads);
  backend.add_kernel("merge_heads", DType::F32, merge_heads);
  backend.add_kernel("causal_softmax", DType::F32, causal_softmax);
  backend.add_kernel("causal_softmax_backward", DType::F32, causal_softmax_backward);
}

}  // namespace strata::opencl
