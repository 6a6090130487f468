// Fused causal attention in f32 on the device: `attention` (q, k, v side by side in a packed qkv,
// every query head its own kv head), `grouped_attention` (separate q, k, v; query head h reads kv
// head h / (H/KV)), their backwards and `attention_cached`. Each op only describes where its
// heads lie (a row stride and a first column per tensor, gradients laid out as their inputs) and
// runs one set of kernels. The T x T scores are never stored: the forward keeps an online softmax
// per query row, the backward recomputes P from q, k and the saved lse. Every output element has
// one owning work-item (dq per query row, dk and dv per key row summed over the kv head's query
// heads), so nothing is summed by atomics and every run gives the same bits.
#include <cmath>

#include "backends/opencl/launch.h"
#include "backends/opencl/opencl_ops.h"

namespace strata::opencl {

namespace {

// BLOCK in kAttentionSource: the work-items of one row's work-group, which take that many keys
// (or, for dk and dv, queries) per step.
constexpr size_t kBlock = 32;

// Field for field the OpenCL C struct Geometry (twelve 8-byte integers, then the float: the
// same layout on both sides). q and dq share q's layout, k, v, dk and dv share kv_stride, and
// out and dout share out_stride; a tensor of `rows` rows per batch entry holds row t of head h
// at (b * rows + t) * stride + column + h * head_dim.
struct Geometry {
  cl_ulong heads, group, head_dim, queries, position, key_rows;
  cl_ulong q_stride, q_col, kv_stride, k_col, v_col, out_stride;
  cl_float scale;
};

const std::string kAttentionSource = R"CLC(
#define BLOCK 32

typedef struct {
  ulong heads, group, head_dim, queries, position, key_rows;
  ulong q_stride, q_col, kv_stride, k_col, v_col, out_stride;
  float scale;
} Geometry;

ulong at(ulong b, ulong rows, ulong stride, ulong column, ulong head, ulong head_dim, ulong t) {
  return (b * rows + t) * stride + column + head * head_dim;
}

float dot_rows(__global const float* x, __global const float* y, ulong n) {
  float sum = 0.0f;
  for (ulong e = 0; e < n; ++e) sum += x[e] * y[e];
  return sum;
}

// The work-group of query row i of head h of batch entry b, group id (b * heads + h) * queries + i
// (also its lse index); query i sees keys 0..position + i. Keys come BLOCK at a time: each
// work-item scores one, then updates its own columns d = lid, lid + BLOCK, ... of the out row,
// which holds the running sum of the weighted values until the final division.
void attend(Geometry g, __global const float* q, __global const float* k, __global const float* v,
            __global float* out, __global float* lse, __local float* scores, __local float* probs) {
  ulong row = get_group_id(0), lid = get_local_id(0), dim = g.head_dim;
  ulong i = row % g.queries, h = row / g.queries % g.heads, b = row / (g.queries * g.heads), kv = h / g.group;
  __global const float* q_i = q + at(b, g.queries, g.q_stride, g.q_col, h, dim, i);
  __global const float* keys = k + at(b, g.key_rows, g.kv_stride, g.k_col, kv, dim, 0);
  __global const float* values = v + at(b, g.key_rows, g.kv_stride, g.v_col, kv, dim, 0);
  __global float* out_i = out + at(b, g.queries, g.out_stride, 0, h, dim, i);
  ulong count = g.position + i + 1;
  for (ulong d = lid; d < dim; d += BLOCK) out_i[d] = 0.0f;
  float running_max = -INFINITY, total = 0.0f;
  for (ulong j0 = 0; j0 < count; j0 += BLOCK) {
    ulong n = min((ulong)BLOCK, count - j0);
    float score = lid < n ? g.scale * dot_rows(q_i, keys + (j0 + lid) * g.kv_stride, dim) : -INFINITY;
    scores[lid] = score;
    barrier(CLK_LOCAL_MEM_FENCE);
    float new_max = running_max;
    for (ulong jj = 0; jj < n; ++jj) new_max = fmax(new_max, scores[jj]);
    float rescale = exp(running_max - new_max);
    probs[lid] = lid < n ? exp(score - new_max) : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    float block_total = 0.0f;
    for (ulong jj = 0; jj < n; ++jj) block_total += probs[jj];
    total = total * rescale + block_total;
    running_max = new_max;
    for (ulong d = lid; d < dim; d += BLOCK) {
      float sum = out_i[d] * rescale;
      for (ulong jj = 0; jj < n; ++jj) sum += probs[jj] * values[(j0 + jj) * g.kv_stride + d];
      out_i[d] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the next block overwrites scores and probs
  }
  for (ulong d = lid; d < dim; d += BLOCK) out_i[d] /= total;
  if (lse != 0 && lid == 0) lse[row] = running_max + log(total);
}

__kernel void attention_forward(__global const float* q, ulong q_off, __global const float* k, ulong k_off,
                                __global const float* v, ulong v_off, __global float* out, ulong out_off,
                                __global float* lse, ulong lse_off, Geometry g) {
  __local float scores[BLOCK], probs[BLOCK];
  attend(g, q + q_off, k + k_off, v + v_off, out + out_off, lse + lse_off, scores, probs);
}

__kernel void attention_cached(__global const float* q, ulong q_off, __global const float* k, ulong k_off,
                               __global const float* v, ulong v_off, __global float* out, ulong out_off, Geometry g) {
  __local float scores[BLOCK], probs[BLOCK];
  attend(g, q + q_off, k + k_off, v + v_off, out + out_off, 0, scores, probs);
}

// Backward, with p_ij = exp(scale q_i . k_j - lse_i), dS_ij = p_ij (dout_i . v_j - delta_i) and
// delta_i = dout_i . out_i: dq_i = scale sum_j dS_ij k_j. One work-group per query row (ids as
// attend's), keys BLOCK at a time; it also stores delta_i for the dk and dv kernel.
__kernel void attention_backward_dq(__global const float* dout, ulong dout_off, __global const float* q, ulong q_off,
                                    __global const float* k, ulong k_off, __global const float* v, ulong v_off,
                                    __global const float* out, ulong out_off, __global const float* lse,
                                    ulong lse_off, __global float* dq, ulong dq_off, __global float* delta,
                                    ulong delta_off, Geometry g) {
  __local float dscores[BLOCK];
  ulong row = get_group_id(0), lid = get_local_id(0), dim = g.head_dim, seq = g.queries;
  ulong i = row % seq, h = row / seq % g.heads, b = row / (seq * g.heads), kv = h / g.group;
  __global const float* dout_i = dout + dout_off + at(b, seq, g.out_stride, 0, h, dim, i);
  __global const float* out_i = out + out_off + at(b, seq, g.out_stride, 0, h, dim, i);
  __global const float* q_i = q + q_off + at(b, seq, g.q_stride, g.q_col, h, dim, i);
  __global const float* keys = k + k_off + at(b, seq, g.kv_stride, g.k_col, kv, dim, 0);
  __global const float* values = v + v_off + at(b, seq, g.kv_stride, g.v_col, kv, dim, 0);
  __global float* dq_i = dq + dq_off + at(b, seq, g.q_stride, g.q_col, h, dim, i);
  float row_delta = dot_rows(dout_i, out_i, dim);
  float row_lse = lse[lse_off + row];
  if (lid == 0) delta[delta_off + row] = row_delta;
  for (ulong d = lid; d < dim; d += BLOCK) dq_i[d] = 0.0f;
  for (ulong j0 = 0; j0 <= i; j0 += BLOCK) {
    ulong n = min((ulong)BLOCK, i + 1 - j0);
    float dscore = 0.0f;
    if (lid < n) {
      ulong j = j0 + lid;
      float p = exp(g.scale * dot_rows(q_i, keys + j * g.kv_stride, dim) - row_lse);
      dscore = p * (dot_rows(dout_i, values + j * g.kv_stride, dim) - row_delta);
    }
    dscores[lid] = dscore;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (ulong d = lid; d < dim; d += BLOCK) {
      float sum = dq_i[d];
      for (ulong jj = 0; jj < n; ++jj) sum += dscores[jj] * keys[(j0 + jj) * g.kv_stride + d];
      dq_i[d] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (ulong d = lid; d < dim; d += BLOCK) dq_i[d] *= g.scale;
}

// dk_j = scale sum_i dS_ij q_i and dv_j = sum_i p_ij dout_i over i >= j and over the query heads
// of kv head kv: one work-group per key row, group id (b * kv_heads + kv) * seq + j, queries
// BLOCK at a time.
__kernel void attention_backward_dkdv(__global const float* dout, ulong dout_off, __global const float* q,
                                      ulong q_off, __global const float* k, ulong k_off, __global const float* v,
                                      ulong v_off, __global const float* lse, ulong lse_off,
                                      __global const float* delta, ulong delta_off, __global float* dk, ulong dk_off,
                                      __global float* dv, ulong dv_off, Geometry g) {
  __local float probs[BLOCK], dscores[BLOCK];
  ulong row = get_group_id(0), lid = get_local_id(0), dim = g.head_dim, seq = g.queries;
  ulong kv_heads = g.heads / g.group;
  ulong j = row % seq, kv = row / seq % kv_heads, b = row / (seq * kv_heads);
  ulong k_at = at(b, seq, g.kv_stride, g.k_col, kv, dim, j), v_at = at(b, seq, g.kv_stride, g.v_col, kv, dim, j);
  __global const float* k_j = k + k_off + k_at;
  __global const float* v_j = v + v_off + v_at;
  __global float* dk_j = dk + dk_off + k_at;
  __global float* dv_j = dv + dv_off + v_at;
  for (ulong d = lid; d < dim; d += BLOCK) {
    dk_j[d] = 0.0f;
    dv_j[d] = 0.0f;
  }
  for (ulong h = kv * g.group; h < (kv + 1) * g.group; ++h) {
    __global const float* queries = q + q_off + at(b, seq, g.q_stride, g.q_col, h, dim, 0);
    __global const float* douts = dout + dout_off + at(b, seq, g.out_stride, 0, h, dim, 0);
    __global const float* lse_h = lse + lse_off + (b * g.heads + h) * seq;
    __global const float* delta_h = delta + delta_off + (b * g.heads + h) * seq;
    for (ulong i0 = j; i0 < seq; i0 += BLOCK) {
      ulong n = min((ulong)BLOCK, seq - i0);
      float p = 0.0f, dscore = 0.0f;
      if (lid < n) {
        ulong i = i0 + lid;
        p = exp(g.scale * dot_rows(queries + i * g.q_stride, k_j, dim) - lse_h[i]);
        dscore = p * (dot_rows(douts + i * g.out_stride, v_j, dim) - delta_h[i]);
      }
      probs[lid] = p;
      dscores[lid] = dscore;
      barrier(CLK_LOCAL_MEM_FENCE);
      for (ulong d = lid; d < dim; d += BLOCK) {
        float dk_sum = dk_j[d], dv_sum = dv_j[d];
        for (ulong ii = 0; ii < n; ++ii) {
          dk_sum += dscores[ii] * queries[(i0 + ii) * g.q_stride + d];
          dv_sum += probs[ii] * douts[(i0 + ii) * g.out_stride + d];
        }
        dk_j[d] = dk_sum;
        dv_j[d] = dv_sum;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
  }
  for (ulong d = lid; d < dim; d += BLOCK) dk_j[d] *= g.scale;
}
)CLC";

float scale_for(int64_t head_dim) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))); }

// attention: qkv [B, T, 3C], q, k and v its thirds, every query head its own kv head.
Geometry packed_geometry(const Tensor& qkv, const Attrs& attrs) {
  const int64_t heads = attrs.get_int("n_head"), seq = qkv.size(1), width = qkv.size(2) / 3;
  const int64_t head_dim = width / heads;
  return {.heads = static_cast<cl_ulong>(heads), .group = 1, .head_dim = static_cast<cl_ulong>(head_dim),
          .queries = static_cast<cl_ulong>(seq), .position = 0, .key_rows = static_cast<cl_ulong>(seq),
          .q_stride = static_cast<cl_ulong>(3 * width), .q_col = 0, .kv_stride = static_cast<cl_ulong>(3 * width),
          .k_col = static_cast<cl_ulong>(width), .v_col = static_cast<cl_ulong>(2 * width),
          .out_stride = static_cast<cl_ulong>(width), .scale = scale_for(head_dim)};
}

// q [B, Tq, H*D] at positions position..position+Tq-1, k and v [B, key_rows, KV*D].
Geometry separate_geometry(const Tensor& q, const Tensor& k, int64_t heads, int64_t kv_heads, int64_t position) {
  const int64_t width = q.size(2), head_dim = width / heads;
  return {.heads = static_cast<cl_ulong>(heads), .group = static_cast<cl_ulong>(heads / kv_heads),
          .head_dim = static_cast<cl_ulong>(head_dim), .queries = static_cast<cl_ulong>(q.size(1)),
          .position = static_cast<cl_ulong>(position), .key_rows = static_cast<cl_ulong>(k.size(1)),
          .q_stride = static_cast<cl_ulong>(width), .q_col = 0, .kv_stride = static_cast<cl_ulong>(k.size(2)),
          .k_col = 0, .v_col = 0, .out_stride = static_cast<cl_ulong>(width), .scale = scale_for(head_dim)};
}

Geometry grouped_geometry(const Tensor& q, const Tensor& k, const Attrs& attrs) {
  return separate_geometry(q, k, attrs.get_int("n_head"), attrs.get_int("n_kv_head"), 0);
}

size_t query_rows(const Geometry& g, int64_t batch) { return static_cast<size_t>(batch) * g.heads * g.queries; }

void forward(const Geometry& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
             const Tensor& lse) {
  Launch(out, kAttentionSource, "attention_forward")
      .tensor(q)
      .tensor(k)
      .tensor(v)
      .tensor(out)
      .tensor(lse)
      .value(g)
      .run(query_rows(g, q.size(0)) * kBlock, kBlock);
}

struct Gradients {
  const Tensor& dq;
  const Tensor& dk;
  const Tensor& dv;
};

// dout and out [B, T, H*D], lse [B, H, T]; the gradients have their inputs' layouts.
void backward(const Geometry& g, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& out, const Tensor& lse, const Gradients& grads) {
  const int64_t batch = dout.size(0);
  Tensor delta = Tensor::empty({static_cast<int64_t>(query_rows(g, batch))}, DType::F32, grads.dq.device());
  Launch(grads.dq, kAttentionSource, "attention_backward_dq")
      .tensor(dout)
      .tensor(q)
      .tensor(k)
      .tensor(v)
      .tensor(out)
      .tensor(lse)
      .tensor(grads.dq)
      .tensor(delta)
      .value(g)
      .run(query_rows(g, batch) * kBlock, kBlock);
  const size_t key_rows = static_cast<size_t>(batch) * (g.heads / g.group) * g.queries;
  Launch(grads.dk, kAttentionSource, "attention_backward_dkdv")
      .tensor(dout)
      .tensor(q)
      .tensor(k)
      .tensor(v)
      .tensor(lse)
      .tensor(delta)
      .tensor(grads.dk)
      .tensor(grads.dv)
      .value(g)
      .run(key_rows * kBlock, kBlock);
}

void attention(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  forward(packed_geometry(in[0], attrs), in[0], in[0], in[0], out[0], out[1]);
}

// dq, dk and dv are the thirds of dqkv, as q, k and v are of qkv.
void attention_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  backward(packed_geometry(in[1], attrs), in[0], in[1], in[1], in[1], in[2], in[3], {out[0], out[0], out[0]});
}

void grouped_attention(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  forward(grouped_geometry(in[0], in[1], attrs), in[0], in[1], in[2], out[0], out[1]);
}

void grouped_attention_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  backward(grouped_geometry(in[1], in[2], attrs), in[0], in[1], in[2], in[3], in[4], in[5], {out[0], out[1], out[2]});
}

void attention_cached(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const int64_t heads = attrs.get_int("n_head");
  const Geometry g = separate_geometry(in[0], in[1], heads, attrs.has("n_kv_head") ? attrs.get_int("n_kv_head") : heads,
                                       attrs.get_int("position"));
  Launch(out[0], kAttentionSource, "attention_cached")
      .tensor(in[0])
      .tensor(in[1])
      .tensor(in[2])
      .tensor(out[0])
      .value(g)
      .run(query_rows(g, in[0].size(0)) * kBlock, kBlock);
}

}  // namespace

void register_attention(Backend& backend) {
  backend.add_kernel("attention", DType::F32, attention);
  backend.add_kernel("attention_backward", DType::F32, attention_backward);
  backend.add_kernel("grouped_attention", DType::F32, grouped_attention);
  backend.add_kernel("grouped_attention_backward", DType::F32, grouped_attention_backward);
  backend.add_kernel("attention_cached", DType::F32, attention_cached);
}

}  // namespace strata::opencl
