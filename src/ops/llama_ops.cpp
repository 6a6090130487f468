// The ops LLaMA adds to GPT-2's, with HuggingFace transformers'
// LlamaForCausalLM semantics: rms_norm (LlamaRMSNorm), rope (rotary position
// embedding, rotate-half pairing, with "linear" and "llama3" frequency
// scaling) and swiglu (the MLP's silu(gate) * up), and their backwards.
#include "ops/rope_frequencies.h"
#include "ops/schema_checks.h"
#include "ops/standard_ops.h"

namespace strata {

namespace {

using namespace schema_checks;

// `meta` has `like`'s shape and dtype.
void expect_like(const std::string& op, const std::string& input, const TensorMeta& meta, const std::string& other,
                 const TensorMeta& like) {
  expect(meta == like, op, input, "have " + other + "'s dtype and shape " + shape_str(like.shape), meta);
}

void expect_norm_input(const std::string& op, const std::string& input, const TensorMeta& x) {
  expect(is_floating(x.dtype) && !x.shape.empty(), op, input, "be floating with at least 1 dim", x);
}

void expect_norm_weight(const std::string& op, const TensorMeta& weight, const TensorMeta& x) {
  expect(weight.shape == Shape{x.shape.back()} && weight.dtype == x.dtype, op, "weight",
         "be " + std::string(dtype_name(x.dtype)) + " [" + std::to_string(x.shape.back()) + "]", weight);
}

void add_rms_norm(OpRegistry& registry) {
  registry.add({
      .name = "rms_norm",
      .summary = "y = weight * h over the last dim, h = x * rsqrt(mean(x^2) + eps) (HuggingFace LlamaRMSNorm): the "
                 "mean and rsqrt in f32 (f64 for f64 x), h rounded to x's dtype before the product with weight, "
                 "which is rounded to x's dtype once",
      .inputs = {"x", "weight"},
      .outputs = {"y"},
      .attrs = {"eps"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect_norm_input("rms_norm", "x", in[0]);
            expect_norm_weight("rms_norm", in[1], in[0]);
            return {in[0]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 4.0 * count(in[0]); },
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::RowwiseNorm,
  });
  registry.add({
      .name = "rms_norm_backward",
      .summary = "gradients of rms_norm w.r.t. x and weight, its statistic recomputed from x: with r = rsqrt(mean(x^2) "
                 "+ eps), h = x r and g = dy * weight per row, dx = r (g - h mean(g h)); dweight = the sum over rows "
                 "of dy * h rounded to x's dtype (the value the forward multiplies), accumulated in f32 (f64 for "
                 "f64); each output rounded once",
      .inputs = {"dy", "x", "weight"},
      .outputs = {"dx", "dweight"},
      .attrs = {"eps"},
      .dtype_input = 1,
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            const std::string op = "rms_norm_backward";
            expect_norm_input(op, "x", in[1]);
            expect_like(op, "dy", in[0], "x", in[1]);
            expect_norm_weight(op, in[2], in[1]);
            return {in[1], in[2]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 10.0 * count(in[1]); },
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

void add_rope(OpRegistry& registry) {
  registry.add({
      .name = "rope",
      .summary = "rotary position embedding of x [B, T, H*D] (D = attr head_dim) at positions [T] (i32, absolute), "
                 "HuggingFace LLaMA's rotate-half pairing: per head, dim i < D/2 pairs with i + D/2, y1 = x1 cos - "
                 "x2 sin, y2 = x2 cos + x1 sin, angle = float(position) * inv_freq[i] in f32; inv_freq[i] = 1 / "
                 "theta^(2i/D) in f32, scaled per attr scaling: \"none\", \"linear\" (/ factor) or \"llama3\" "
                 "(low_freq_factor, high_freq_factor, original_max_positions as HF's _compute_llama3_parameters). "
                 "cos and sin of the f32 angle are rounded to f32 (from the exact value), then to x's dtype; as "
                 "PyTorch evaluates q*cos + rotate_half(q)*sin in x's dtype, each product and the sum are rounded "
                 "to x's dtype (bf16: each computed in f32 and rounded to bf16). Attr inverse = true rotates by the "
                 "negated angle (sin negated): the transpose, rope's gradient. y may alias x",
      .inputs = {"x", "positions"},
      .outputs = {"y"},
      .attrs = {"head_dim", "theta", "scaling", "factor", "low_freq_factor", "high_freq_factor",
                "original_max_positions", "inverse"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            const std::string op = "rope";
            RopeParams params = rope_params(op, attrs);
            const TensorMeta& x = in[0];
            expect(is_floating(x.dtype) && x.shape.size() == 3 && x.shape[2] % params.head_dim == 0, op, "x",
                   "be floating [B, T, H*D] with D = head_dim = " + std::to_string(params.head_dim), x);
            expect(in[1].dtype == DType::I32 && in[1].shape == Shape{x.shape[1]}, op, "positions",
                   "be i32 [" + std::to_string(x.shape[1]) + "] (one per position of x)", in[1]);
            return {x};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 3.0 * count(in[0]); },
      .may_reuse = {{0, 0}},
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::RotaryByHeads,
  });
}

void add_swiglu(OpRegistry& registry) {
  registry.add({
      .name = "swiglu",
      .summary = "y = silu(gate) * up = gate / (1 + e^-gate) * up (LLaMA's MLP: act_fn(gate_proj(x)) * up_proj(x)), "
                 "computed in f32 (f64 for f64) and rounded to the dtype once; for bf16, PyTorch also rounds "
                 "silu(gate) to bf16 before the product, so results may differ from it by a bf16 rounding. y may "
                 "alias gate or up",
      .inputs = {"gate", "up"},
      .outputs = {"y"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect(is_floating(in[0].dtype), "swiglu", "gate", "be floating", in[0]);
            expect_like("swiglu", "up", in[1], "gate", in[0]);
            return {in[0]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 6.0 * count(in[0]); },
      .may_reuse = {{0, 0}, {0, 1}},
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::Elementwise,
  });
  registry.add({
      .name = "swiglu_backward",
      .summary = "with s = sigmoid(gate): dgate = dy * up * s * (1 + gate (1 - s)), dup = dy * gate * s, computed in "
                 "f32 (f64 for f64) and rounded once; dgate may alias dy or gate, dup may alias up",
      .inputs = {"dy", "gate", "up"},
      .outputs = {"dgate", "dup"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            const std::string op = "swiglu_backward";
            expect(is_floating(in[0].dtype), op, "dy", "be floating", in[0]);
            expect_like(op, "gate", in[1], "dy", in[0]);
            expect_like(op, "up", in[2], "dy", in[0]);
            return {in[0], in[0]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 10.0 * count(in[0]); },
      .may_reuse = {{0, 0}, {0, 1}, {1, 2}},
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

}  // namespace

void add_llama_ops(OpRegistry& registry) {
  add_rms_norm(registry);
  add_rope(registry);
  add_swiglu(registry);
}

}  // namespace strata
