#include "ops/schema_checks.h"
#include "ops/standard_ops.h"

#include <cmath>

#include "core/exact_square_sum.h"
#include "ops/dispatcher.h"
#include "ops/expert_exchange.h"
#include "ops/moe_ops.h"
#include "ops/vocab_shard.h"

namespace strata {

namespace {

using namespace schema_checks;

// ---- validation helpers: every message names the op and the input --------

void expect_rank_at_least(const std::string& op, const std::string& input, const TensorMeta& meta, size_t rank) {
  if (meta.shape.size() < rank) {
    fail("op '{}': input '{}' must have at least {} dims, got {}", op, input, rank, shape_str(meta.shape));
  }
}

void expect_shape(const std::string& op, const std::string& input, const TensorMeta& meta, const Shape& shape) {
  if (meta.shape != shape) {
    fail("op '{}': input '{}' must have shape {}, got {}", op, input, shape_str(shape), shape_str(meta.shape));
  }
}

void expect_dtype(const std::string& op, const std::string& input, const TensorMeta& meta, DType dtype) {
  if (meta.dtype != dtype) {
    fail("op '{}': input '{}' must be {}, got {}", op, input, dtype_name(dtype), dtype_name(meta.dtype));
  }
}

void expect_index(const std::string& op, const std::string& input, const TensorMeta& meta) {
  if (meta.dtype != DType::I32 && meta.dtype != DType::I64) {
    fail("op '{}': input '{}' must be i32 or i64 indices, got {}", op, input, dtype_name(meta.dtype));
  }
}

Shape with_last(Shape shape, int64_t last) {
  shape.back() = last;
  return shape;
}


auto elementwise_flops(double per_element, size_t output = 0) {
  return [per_element, output](const Metas&, const Metas& outputs, const Attrs&) {
    return per_element * count(outputs[output]);
  };
}

auto no_flops() {
  return [](const Metas&, const Metas&, const Attrs&) { return 0.0; };
}

// ---- matmul ---------------------------------------------------------------

struct GemmDims {
  int64_t m, n, k;
};

// See the schema summary: inputs of rank > 2 have their leading dims merged.
GemmDims matmul_dims(const Metas& in, const Attrs& attrs) {
  const std::string op = "matmul";
  bool trans_a = attrs.get_bool("trans_a");
  bool trans_b = attrs.get_bool("trans_b");
  expect_rank_at_least(op, "a", in[0], 1);
  expect_rank_at_least(op, "b", in[1], 1);
  int64_t a_last = in[0].shape.back();
  int64_t a_rows = shape_numel(drop_last(in[0].shape));
  if (!trans_a) {
    if (in[1].shape.size() != 2) fail("op 'matmul': input 'b' must be 2-D, got {}", shape_str(in[1].shape));
    int64_t b_rows = in[1].shape[0], b_cols = in[1].shape[1];
    int64_t k = trans_b ? b_cols : b_rows;
    int64_t n = trans_b ? b_rows : b_cols;
    if (k != a_last) {
      fail("op 'matmul': inner sizes differ: a is {}, b is {}{}", shape_str(in[0].shape), shape_str(in[1].shape),
           trans_b ? " (transposed)" : "");
    }
    return {a_rows, n, k};
  }
  if (trans_b) fail("op 'matmul': trans_a and trans_b together are not supported");
  int64_t b_last = in[1].shape.back();
  if (drop_last(in[1].shape) != drop_last(in[0].shape)) {
    fail("op 'matmul': with trans_a, a {} and b {} must have the same leading dims", shape_str(in[0].shape),
         shape_str(in[1].shape));
  }
  return {a_last, b_last, a_rows};
}

Metas matmul_infer(const Metas& in, const Attrs& attrs) {
  expect_floating("matmul", "a", in[0]);
  expect_dtype("matmul", "b", in[1], in[0].dtype);
  GemmDims dims = matmul_dims(in, attrs);
  if (attrs.get_bool("trans_a")) return {{{dims.m, dims.n}, in[0].dtype}};
  return {{with_last(in[0].shape, dims.n), in[0].dtype}};
}

double matmul_flops(const Metas& in, const Metas&, const Attrs& attrs) {
  GemmDims dims = matmul_dims(in, attrs);
  return 2.0 * static_cast<double>(dims.m) * static_cast<double>(dims.n) * static_cast<double>(dims.k);
}

// ---- attention ------------------------------------------------------------

struct AttentionDims {
  int64_t batch, seq, width, heads;
};

AttentionDims attention_dims(const std::string& op, const TensorMeta& qkv, const Attrs& attrs) {
  if (qkv.shape.size() != 3 || qkv.shape[2] % 3 != 0) {
    fail("op '{}': input 'qkv' must be [batch, seq, 3*width], got {}", op, shape_str(qkv.shape));
  }
  int64_t heads = attrs.get_int("n_head");
  int64_t width = qkv.shape[2] / 3;
  if (heads <= 0 || width % heads != 0) fail("op '{}': n_head {} does not divide width {}", op, heads, width);
  return {qkv.shape[0], qkv.shape[1], width, heads};
}

// Multiply-adds of QK^T and PV over the causal (lower) triangle.
double causal_attention_flops(const AttentionDims& d) {
  double pairs = static_cast<double>(d.seq) * static_cast<double>(d.seq + 1) / 2.0;
  return 2.0 * 2.0 * static_cast<double>(d.batch) * pairs * static_cast<double>(d.width);
}

// ---- registration, one function per op ------------------------------------

void add_embedding(OpRegistry& registry) {
  registry.add({
      .name = "embedding",
      .summary = "out[..., :] = weight[ids[...], :]; ids outside [0, V) are an error. With attrs vocab_start and "
                 "vocab_size, weight holds rows [vocab_start, vocab_start + V) of a vocabulary of vocab_size and "
                 "ids outside them read zeros (vocabulary-parallel; ops/vocab_shard.h)",
      .inputs = {"weight", "ids"},
      .outputs = {"out"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            if (in[0].shape.size() != 2) fail("op 'embedding': input 'weight' must be [V, C], got {}", shape_str(in[0].shape));
            expect_floating("embedding", "weight", in[0]);
            expect_index("embedding", "ids", in[1]);
            vocab_shard("embedding", attrs, in[0].shape[0]);
            Shape out = in[1].shape;
            out.push_back(in[0].shape[1]);
            return {{out, in[0].dtype}};
          },
      .flops = no_flops(),
      .bytes = [](const Metas& in, const Metas& out, const Attrs&) {
        return 2.0 * static_cast<double>(out[0].nbytes()) + static_cast<double>(in[1].nbytes());
      },
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::VocabLookup,
  });
  registry.add({
      .name = "embedding_backward",
      .summary = "dweight[V, C] = sum over positions p with ids[p] = v of dout[p, :]; rows never used are 0. "
                 "With attrs vocab_start and vocab_size, row v stands for id vocab_start + v (as embedding)",
      .inputs = {"dout", "ids"},
      .outputs = {"dweight"},
      .attrs = {"num_embeddings"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            expect_floating("embedding_backward", "dout", in[0]);
            expect_index("embedding_backward", "ids", in[1]);
            expect_rank_at_least("embedding_backward", "dout", in[0], 1);
            if (drop_last(in[0].shape) != in[1].shape) {
              fail("op 'embedding_backward': dout {} does not match ids {}", shape_str(in[0].shape), shape_str(in[1].shape));
            }
            vocab_shard("embedding_backward", attrs, attrs.get_int("num_embeddings"));
            return {{{attrs.get_int("num_embeddings"), in[0].shape.back()}, in[0].dtype}};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return count(in[0]); },
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}


Metas adamw_infer(const char* op, const Metas& in, const Attrs& attrs) {
  if (attrs.get_int("step") < 1) fail("op '{}': attribute 'step' counts from 1, got {}", op, attrs.get_int("step"));
  for (size_t i = 1; i < 4; ++i) {
    const char* names[] = {"param", "grad", "m", "v"};
    expect_shape(op, names[i], in[i], in[0].shape);
  }
  expect_dtype(op, "param", in[0], DType::F32);
  expect_dtype(op, "m", in[2], DType::F32);
  expect_dtype(op, "v", in[3], DType::F32);
  expect_floating(op, "grad", in[1]);
  return {in[0], in[2], in[3]};
}
void add_elementwise(OpRegistry& registry) {
  registry.add({
      .name = "add",
      .summary = "out = a + b, b broadcast over a's leading dims (b's shape is a suffix of a's); out may alias a, "
                 "or b when b has a's shape",
      .inputs = {"a", "b"},
      .outputs = {"out"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect_floating("add", "a", in[0]);
            expect_dtype("add", "b", in[1], in[0].dtype);
            if (!is_suffix(in[1].shape, in[0].shape)) {
              fail("op 'add': b {} does not broadcast to a {}", shape_str(in[1].shape), shape_str(in[0].shape));
            }
            return {in[0]};
          },
      .flops = elementwise_flops(1),
      .may_reuse = {{0, 0}, {0, 1}},
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::Elementwise,
  });
  registry.add({
      .name = "sum_to",
      .summary = "out[shape] = x summed over the leading dims that `shape` (a suffix of x's shape) lacks",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"shape"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            expect_floating("sum_to", "x", in[0]);
            const auto& target = attrs.get_ints("shape");
            if (!is_suffix(target, in[0].shape)) {
              fail("op 'sum_to': {} is not a suffix of x's shape {}", shape_str(target), shape_str(in[0].shape));
            }
            return {{target, in[0].dtype}};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return count(in[0]); },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "scale",
      .summary = "out = x * factor; out may alias x",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"factor"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect_floating("scale", "x", in[0]);
            return {in[0]};
          },
      .flops = elementwise_flops(1),
      .may_reuse = {{0, 0}},
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::Elementwise,
  });
  registry.add({
      .name = "sum_squares",
      .summary = "out[] = sum of x^2 (accumulated in f64), out is f32, or f64 for f64 x",
      .inputs = {"x"},
      .outputs = {"out"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect_floating("sum_squares", "x", in[0]);
            return {{{}, stats_dtype(in[0].dtype)}};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 2.0 * count(in[0]); },
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "square_sum_exact",
      .summary = "bins[] = the sum of x^2 held exactly, as ExactSquareSum's int64 words (f32 or bf16 x): the same "
                 "bits for any split of x, so sharded gradients give the unsharded global norm",
      .inputs = {"x"},
      .outputs = {"bins"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            if (in[0].dtype != DType::F32 && in[0].dtype != DType::BF16) {
              fail("op 'square_sum_exact': input 'x' must be f32 or bf16, got {}", dtype_name(in[0].dtype));
            }
            return {{{static_cast<int64_t>(ExactSquareSum::kWords)}, DType::I64}};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 2.0 * count(in[0]); },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "gelu",
      .summary = "y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (GPT-2's tanh approximation); y may alias x",
      .inputs = {"x"},
      .outputs = {"y"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect_floating("gelu", "x", in[0]);
            return {in[0]};
          },
      .flops = elementwise_flops(10),
      .may_reuse = {{0, 0}},
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::Elementwise,
  });
  registry.add({
      .name = "gelu_backward",
      .summary = "dx = dy * d gelu(x) / dx; dx may alias dy or x",
      .inputs = {"dy", "x"},
      .outputs = {"dx"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect_floating("gelu_backward", "dy", in[0]);
            expect_shape("gelu_backward", "x", in[1], in[0].shape);
            expect_dtype("gelu_backward", "x", in[1], in[0].dtype);
            return {in[0]};
          },
      .flops = elementwise_flops(16),
      .may_reuse = {{0, 0}, {0, 1}},
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "adamw",
      .summary = "AdamW step as in torch.optim.AdamW on g = grad * grad_scale (global-norm clipping's factor, 1 "
                 "for none): p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; "
                 "p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps). Outputs may alias param, m, v",
      .inputs = {"param", "grad", "m", "v"},
      .outputs = {"param_out", "m_out", "v_out"},
      .attrs = {"lr", "beta1", "beta2", "eps", "weight_decay", "step", "grad_scale"},
      .infer = [](const Metas& in, const Attrs& attrs) { return adamw_infer("adamw", in, attrs); },
      .flops = elementwise_flops(12),
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "adamw_with_copy",
      .summary = "adamw, also writing the updated param rounded to copy_dtype (bf16 or f16) to copy_out: the "
                 "compute-dtype weights a mixed-precision graph reads, made while the param is in registers",
      .inputs = {"param", "grad", "m", "v"},
      .outputs = {"param_out", "m_out", "v_out", "copy_out"},
      .attrs = {"lr", "beta1", "beta2", "eps", "weight_decay", "step", "grad_scale", "copy_dtype"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            Metas out = adamw_infer("adamw_with_copy", in, attrs);
            const DType copy = parse_dtype(attrs.get_string("copy_dtype"));
            if (copy != DType::BF16 && copy != DType::F16) {
              fail("op 'adamw_with_copy': attribute 'copy_dtype' must be bf16 or f16, got {}", dtype_name(copy));
            }
            out.push_back({in[0].shape, copy});
            return out;
          },
      .flops = elementwise_flops(12),
      .decompose =
          [](Dispatcher& dispatcher, const Tensors& in, const Tensors& out, const Attrs& attrs) {
            dispatcher.run("adamw", in, {out[0], out[1], out[2]}, attrs);
            dispatcher.run("cast", {out[0]}, {out[3]}, {{"dtype", attrs.get_string("copy_dtype")}});
          },
      .decomposes_into = {"adamw", "cast"},
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

void add_layernorm(OpRegistry& registry) {
  registry.add({
      .name = "layernorm",
      .summary = "y = (x - mean) * rstd * gamma + beta over the last dim, rstd = 1/sqrt(var + eps) (biased var); "
                 "also returns mean and rstd per row",
      .inputs = {"x", "gamma", "beta"},
      .outputs = {"y", "mean", "rstd"},
      .attrs = {"eps"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect_floating("layernorm", "x", in[0]);
            expect_rank_at_least("layernorm", "x", in[0], 1);
            Shape channels{in[0].shape.back()};
            expect_shape("layernorm", "gamma", in[1], channels);
            expect_shape("layernorm", "beta", in[2], channels);
            expect_dtype("layernorm", "gamma", in[1], in[0].dtype);
            expect_dtype("layernorm", "beta", in[2], in[0].dtype);
            TensorMeta stats{drop_last(in[0].shape), stats_dtype(in[0].dtype)};
            return {in[0], stats, stats};
          },
      .flops = elementwise_flops(8),
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::RowwiseNorm,
  });
  registry.add({
      .name = "layernorm_backward",
      .summary = "gradients of layernorm w.r.t. x, gamma and beta, from the forward's mean and rstd",
      .inputs = {"dy", "x", "gamma", "mean", "rstd"},
      .outputs = {"dx", "dgamma", "dbeta"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            const std::string op = "layernorm_backward";
            expect_floating(op, "dy", in[0]);
            expect_rank_at_least(op, "dy", in[0], 1);
            expect_shape(op, "x", in[1], in[0].shape);
            expect_dtype(op, "x", in[1], in[0].dtype);
            Shape channels{in[0].shape.back()};
            expect_shape(op, "gamma", in[2], channels);
            expect_dtype(op, "gamma", in[2], in[0].dtype);
            DType stats = stats_dtype(in[0].dtype);
            expect_shape(op, "mean", in[3], drop_last(in[0].shape));
            expect_dtype(op, "mean", in[3], stats);
            expect_shape(op, "rstd", in[4], drop_last(in[0].shape));
            expect_dtype(op, "rstd", in[4], stats);
            return {in[0], in[2], in[2]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 14.0 * count(in[0]); },
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

void add_matmuls(OpRegistry& registry) {
  registry.add({
      .name = "matmul",
      .summary = "GEMM over merged leading dims. trans_a = false: a [..., K] as [M, K], b [K, N] (or [N, K] with "
                 "trans_b) -> out [..., N]. trans_a = true: a [..., K] and b [..., N] with the same leading dims, "
                 "out [K, N] = a^T b summed over all rows (a weight gradient)",
      .inputs = {"a", "b"},
      .outputs = {"out"},
      .attrs = {"trans_a", "trans_b"},
      .infer = matmul_infer,
      .flops = matmul_flops,
      .differentiable = Differentiable::Yes,
      .kind = OpKind::Gemm,
      .placement = PlacementRule::Matmul,
  });
  registry.add({
      .name = "linear",
      .summary = "y [..., N] = x [..., K] w [K, N] + bias [N] (HuggingFace Conv1D layout)",
      .inputs = {"x", "w", "bias"},
      .outputs = {"y"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            Metas out = matmul_infer({in[0], in[1]}, {{"trans_a", false}, {"trans_b", false}});
            expect_shape("linear", "bias", in[2], {in[1].shape.back()});
            expect_dtype("linear", "bias", in[2], in[0].dtype);
            return out;
          },
      .flops =
          [](const Metas& in, const Metas& out, const Attrs&) {
            return matmul_flops({in[0], in[1]}, out, {{"trans_a", false}, {"trans_b", false}}) + count(out[0]);
          },
      .decompose =
          [](Dispatcher& dispatcher, const Tensors& in, const Tensors& out, const Attrs&) {
            dispatcher.run("matmul", {in[0], in[1]}, {out[0]}, {{"trans_a", false}, {"trans_b", false}});
            dispatcher.run("add", {out[0], in[2]}, {out[0]});
          },
      .decomposes_into = {"matmul", "add"},
      .differentiable = Differentiable::Yes,
      .kind = OpKind::Gemm,
      .placement = PlacementRule::Linear,
  });
}

void add_attention(OpRegistry& registry) {
  registry.add({
      .name = "attention",
      .summary = "causal multi-head self-attention. qkv [B, T, 3C] holds q, k, v side by side (GPT-2's c_attn "
                 "output), head h uses columns h*C/H..(h+1)*C/H of each; scores scaled by 1/sqrt(C/H). "
                 "out [B, T, C] (heads concatenated), lse [B, H, T] the log-sum-exp of each score row",
      .inputs = {"qkv"},
      .outputs = {"out", "lse"},
      .attrs = {"n_head"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            expect_floating("attention", "qkv", in[0]);
            AttentionDims d = attention_dims("attention", in[0], attrs);
            return {{{d.batch, d.seq, d.width}, in[0].dtype}, {{d.batch, d.heads, d.seq}, stats_dtype(in[0].dtype)}};
          },
      .flops =
          [](const Metas& in, const Metas&, const Attrs& attrs) {
            AttentionDims d = attention_dims("attention", in[0], attrs);
            return causal_attention_flops(d);
          },
      .decompose = decompose_attention,
      .decomposes_into = {"split_heads", "bmm", "causal_softmax", "merge_heads"},
      .differentiable = Differentiable::Yes,
      .recomputed_selectively = true,
      .kind = OpKind::Attention,
      .placement = PlacementRule::AttentionByHeads,
  });
  registry.add({
      .name = "attention_backward",
      .summary = "dqkv [B, T, 3C] from dout, the forward's qkv, out and lse (scores are recomputed)",
      .inputs = {"dout", "qkv", "out", "lse"},
      .outputs = {"dqkv"},
      .attrs = {"n_head"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            const std::string op = "attention_backward";
            expect_floating(op, "qkv", in[1]);
            AttentionDims d = attention_dims(op, in[1], attrs);
            expect_shape(op, "dout", in[0], {d.batch, d.seq, d.width});
            expect_dtype(op, "dout", in[0], in[1].dtype);
            expect_shape(op, "out", in[2], {d.batch, d.seq, d.width});
            expect_dtype(op, "out", in[2], in[1].dtype);
            expect_shape(op, "lse", in[3], {d.batch, d.heads, d.seq});
            expect_dtype(op, "lse", in[3], stats_dtype(in[1].dtype));
            return {in[1]};
          },
      .flops =
          [](const Metas& in, const Metas&, const Attrs& attrs) {
            // recompute QK^T, then dV, dP, dQ, dK: five GEMM-sized products vs two forward
            return 2.5 * causal_attention_flops(attention_dims("attention_backward", in[1], attrs));
          },
      .decompose = decompose_attention_backward,
      .decomposes_into = {"split_heads", "bmm", "causal_softmax", "causal_softmax_backward", "merge_heads"},
      .differentiable = Differentiable::No,
      .kind = OpKind::Attention,
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "attention_cached",
      .summary = "decoding with a KV cache: q [B, Tn, C] are the queries at positions position..position+Tn-1; "
                 "k_cache and v_cache [B, L, KV*C/H] hold keys and values for positions 0..position+Tn-1 (at "
                 "least), KV = attr n_kv_head (optional, default H = n_head, which must divide it); query i of "
                 "head h attends to keys 0..position+i of kv head h / (H/KV), as grouped_attention does. "
                 "out [B, Tn, C]",
      .inputs = {"q", "k_cache", "v_cache"},
      .outputs = {"out"},
      .attrs = {"n_head", "position"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            const std::string op = "attention_cached";
            expect_floating(op, "q", in[0]);
            if (in[0].shape.size() != 3) fail("op '{}': q must be [B, Tn, C], got {}", op, shape_str(in[0].shape));
            int64_t heads = attrs.get_int("n_head");
            if (heads <= 0 || in[0].shape[2] % heads != 0) fail("op '{}': n_head {} does not divide width", op, heads);
            int64_t kv_heads = attrs.has("n_kv_head") ? attrs.get_int("n_kv_head") : heads;
            if (kv_heads <= 0 || heads % kv_heads != 0) {
              fail("op '{}': n_kv_head {} does not divide n_head {}", op, kv_heads, heads);
            }
            int64_t kv_width = in[0].shape[2] / heads * kv_heads;
            if (in[1].shape.size() != 3 || in[1].shape[0] != in[0].shape[0] || in[1].shape[2] != kv_width) {
              fail("op '{}': k_cache {} does not match q {} with {} kv heads", op, shape_str(in[1].shape),
                   shape_str(in[0].shape), kv_heads);
            }
            expect_shape(op, "v_cache", in[2], in[1].shape);
            expect_dtype(op, "k_cache", in[1], in[0].dtype);
            expect_dtype(op, "v_cache", in[2], in[0].dtype);
            if (attrs.get_int("position") < 0 || attrs.get_int("position") + in[0].shape[1] > in[1].shape[1]) {
              fail("op '{}': position {} + {} queries exceeds the cache length {}", op, attrs.get_int("position"),
                   in[0].shape[1], in[1].shape[1]);
            }
            return {in[0]};
          },
      .flops =
          [](const Metas& in, const Metas&, const Attrs& attrs) {
            double keys = static_cast<double>(attrs.get_int("position")) + static_cast<double>(in[0].shape[1] + 1) / 2;
            return 4.0 * count(in[0]) * keys;
          },
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

void add_cross_entropy(OpRegistry& registry) {
  registry.add({
      .name = "cross_entropy",
      .summary = "loss[] = mean over positions of (lse - logits[target]) with lse = log sum exp logits over the "
                 "last dim; also returns lse per position. Targets outside [0, V) are an error. With attrs "
                 "vocab_start, vocab_size, group and ranks, logits hold columns [vocab_start, vocab_start + V) of "
                 "a vocabulary of vocab_size, the group's ranks hold the rest, and loss and lse are the whole "
                 "vocabulary's (vocabulary-parallel; ops/vocab_shard.h)",
      .inputs = {"logits", "targets"},
      .outputs = {"loss", "lse"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            expect_floating("cross_entropy", "logits", in[0]);
            expect_index("cross_entropy", "targets", in[1]);
            expect_rank_at_least("cross_entropy", "logits", in[0], 1);
            if (drop_last(in[0].shape) != in[1].shape) {
              fail("op 'cross_entropy': logits {} do not match targets {}", shape_str(in[0].shape), shape_str(in[1].shape));
            }
            if (shape_numel(in[1].shape) == 0) fail("op 'cross_entropy': the mean over zero positions is undefined");
            if (!vocab_shard("cross_entropy", attrs, in[0].shape.back()).whole() &&
                (!attrs.has("group") || !attrs.has("ranks"))) {
              fail("op 'cross_entropy': logits of a vocabulary shard need attrs 'group' and 'ranks'");
            }
            DType stats = stats_dtype(in[0].dtype);
            return {{{}, stats}, {in[1].shape, stats}};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 4.0 * count(in[0]); },
      .precision = PrecisionRole::F32Default,
      .reads_any_float_as_f32 = true,
      .differentiable = Differentiable::Yes,
      // On a vocabulary shard: the target logits summed and the log-sum-exps gathered over the group
      // (combine_vocab_shards), one value per position each.
      .comm = [](const Metas&, const Metas& out, const Attrs& attrs) {
        if (!attrs.has("group") || attrs.get_int("ranks") == 1) return CommCalls{};
        const double per_rank = static_cast<double>(out[1].nbytes());
        return CommCalls{{CommPattern::AllReduce, per_rank},
                         {CommPattern::AllGather, per_rank * static_cast<double>(attrs.get_int("ranks"))}};
      },
      .placement = PlacementRule::VocabLoss,
  });
  registry.add({
      .name = "cross_entropy_backward",
      .summary = "dlogits = dloss * (softmax(logits) - onehot(target)) / positions, with lse the forward's; "
                 "with attrs vocab_start and vocab_size, of a shard of the logits (as cross_entropy); dlogits may "
                 "alias logits",
      .inputs = {"dloss", "logits", "targets", "lse"},
      .outputs = {"dlogits"},
      .dtype_input = 1,
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            const std::string op = "cross_entropy_backward";
            expect_floating(op, "logits", in[1]);
            expect_rank_at_least(op, "logits", in[1], 1);
            expect_index(op, "targets", in[2]);
            if (drop_last(in[1].shape) != in[2].shape) {
              fail("op '{}': logits {} do not match targets {}", op, shape_str(in[1].shape), shape_str(in[2].shape));
            }
            DType stats = stats_dtype(in[1].dtype);
            expect_shape(op, "dloss", in[0], {});
            expect_dtype(op, "dloss", in[0], stats);
            expect_shape(op, "lse", in[3], in[2].shape);
            expect_dtype(op, "lse", in[3], stats);
            vocab_shard(op, attrs, in[1].shape.back());
            return {in[1]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 4.0 * count(in[1]); },
      .may_reuse = {{0, 1}},
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

}  // namespace

void register_standard_ops(OpRegistry& registry) {
  add_embedding(registry);
  add_elementwise(registry);
  add_layernorm(registry);
  add_matmuls(registry);
  add_attention(registry);
  add_cross_entropy(registry);
  add_cast_ops(registry);
  add_attention_parts_ops(registry);
  add_grouped_attention_ops(registry);
  add_llama_ops(registry);
  add_moe_ops(registry);
  add_reshape_op(registry);
  add_fused_ops(registry);
  add_collective_ops(registry);
  add_expert_exchange_ops(registry);
}

}  // namespace strata
