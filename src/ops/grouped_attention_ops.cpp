// Grouped-query causal attention (HuggingFace LlamaForCausalLM's attention
// core) and its backward: q, k and v come as separate tensors, and the
// n_head query heads share n_kv_head key/value heads.
#include "ops/schema_checks.h"
#include "ops/standard_ops.h"

namespace strata {

namespace {

using namespace schema_checks;

void expect_meta(const std::string& op, const std::string& input, const TensorMeta& meta, const Shape& shape,
                 DType dtype) {
  if (meta.shape != shape || meta.dtype != dtype) {
    fail("op '{}': input '{}' must be {} {}, got {} {}", op, input, shape_str(shape), dtype_name(dtype),
         shape_str(meta.shape), dtype_name(meta.dtype));
  }
}

struct GroupedDims {
  int64_t batch, seq, heads, kv_heads, head_dim;
  Shape q_shape() const { return {batch, seq, heads * head_dim}; }
  Shape kv_shape() const { return {batch, seq, kv_heads * head_dim}; }
};

// Validates q [B, T, H*D], k and v [B, T, KV*D] with H = n_head and
// KV = n_kv_head dividing it.
GroupedDims grouped_dims(const std::string& op, const TensorMeta& q, const TensorMeta& k, const TensorMeta& v,
                         const Attrs& attrs) {
  if (!is_floating(q.dtype)) fail("op '{}': input 'q' must be floating point, got {}", op, dtype_name(q.dtype));
  if (q.shape.size() != 3) fail("op '{}': input 'q' must be [B, T, n_head*D], got {}", op, shape_str(q.shape));
  int64_t heads = attrs.get_int("n_head");
  int64_t kv_heads = attrs.get_int("n_kv_head");
  if (heads <= 0 || q.shape[2] % heads != 0) {
    fail("op '{}': n_head {} does not divide the width {} of input 'q'", op, heads, q.shape[2]);
  }
  if (kv_heads <= 0 || heads % kv_heads != 0) {
    fail("op '{}': n_kv_head {} does not divide n_head {}", op, kv_heads, heads);
  }
  GroupedDims d{q.shape[0], q.shape[1], heads, kv_heads, q.shape[2] / heads};
  expect_meta(op, "k", k, d.kv_shape(), q.dtype);
  expect_meta(op, "v", v, d.kv_shape(), q.dtype);
  return d;
}

// Multiply-adds of Q K^T and P V over the causal (lower) triangle, per query head.
double grouped_attention_flops(const GroupedDims& d) {
  double pairs = static_cast<double>(d.seq) * static_cast<double>(d.seq + 1) / 2.0;
  return 2.0 * 2.0 * static_cast<double>(d.batch) * pairs * static_cast<double>(d.heads * d.head_dim);
}

}  // namespace

// Bytes are the default, each input read once and each output written once:
// what the fused kernels move, since they read every kv head once for all
// the query heads that share it.
void add_grouped_attention_ops(OpRegistry& registry) {
  registry.add({
      .name = "grouped_attention",
      .summary = "grouped-query causal self-attention, as HF LlamaForCausalLM computes it (eager, or SDPA with "
                 "is_causal). q [B, T, H*D], k and v [B, T, KV*D] with H = n_head, KV = n_kv_head, H % KV == 0; "
                 "query head h (columns h*D..(h+1)*D of q) reads kv head g = h / (H/KV) (columns g*D..(g+1)*D of "
                 "k and v): out[b, t, h] = sum over s <= t of p_s v[b, s, g], p = softmax over s <= t of "
                 "q[b, t, h] . k[b, s, g] / sqrt(D) in f32 or wider (bf16 kernels may round p to bf16 for the "
                 "product with v, as HF's eager attention does). out [B, T, H*D] (heads side by side, as o_proj "
                 "reads them), lse [B, H, T] the log-sum-exp of each scaled score row (f32, or f64 for f64 q)",
      .inputs = {"q", "k", "v"},
      .outputs = {"out", "lse"},
      .attrs = {"n_head", "n_kv_head"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            GroupedDims d = grouped_dims("grouped_attention", in[0], in[1], in[2], attrs);
            return {{d.q_shape(), in[0].dtype}, {{d.batch, d.heads, d.seq}, stats_dtype(in[0].dtype)}};
          },
      .flops =
          [](const Metas& in, const Metas&, const Attrs& attrs) {
            return grouped_attention_flops(grouped_dims("grouped_attention", in[0], in[1], in[2], attrs));
          },
      .decompose = decompose_grouped_attention,
      .decomposes_into = {"split_heads", "bmm", "causal_softmax", "merge_heads"},
      .differentiable = Differentiable::Yes,
      .recomputed_selectively = true,
      .kind = OpKind::Attention,
      .placement = PlacementRule::AttentionByHeads,
  });
  registry.add({
      .name = "grouped_attention_backward",
      .summary = "dq [B, T, H*D], dk and dv [B, T, KV*D] of grouped_attention from dout [B, T, H*D] and the "
                 "forward's q, k, v, out and lse (scores are recomputed); dk and dv of a kv head sum the "
                 "gradients of the H/KV query heads that read it",
      .inputs = {"dout", "q", "k", "v", "out", "lse"},
      .outputs = {"dq", "dk", "dv"},
      .attrs = {"n_head", "n_kv_head"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            const std::string op = "grouped_attention_backward";
            GroupedDims d = grouped_dims(op, in[1], in[2], in[3], attrs);
            expect_meta(op, "dout", in[0], d.q_shape(), in[1].dtype);
            expect_meta(op, "out", in[4], d.q_shape(), in[1].dtype);
            expect_meta(op, "lse", in[5], {d.batch, d.heads, d.seq}, stats_dtype(in[1].dtype));
            return {in[1], in[2], in[3]};
          },
      .flops =
          [](const Metas& in, const Metas&, const Attrs& attrs) {
            // recompute QK^T, then dV, dP, dQ, dK: five GEMM-sized products vs two forward
            const std::string op = "grouped_attention_backward";
            return 2.5 * grouped_attention_flops(grouped_dims(op, in[1], in[2], in[3], attrs));
          },
      .decompose = decompose_grouped_attention_backward,
      .decomposes_into = {"split_heads", "bmm", "causal_softmax", "causal_softmax_backward", "merge_heads"},
      .differentiable = Differentiable::No,
      .kind = OpKind::Attention,
      .placement = PlacementRule::None,
  });
}

}  // namespace strata
