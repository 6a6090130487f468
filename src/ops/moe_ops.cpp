// The mixture-of-experts layer as ops, with HuggingFace transformers' semantics (MixtralSparseMoeBlock,
// Qwen2/Qwen3MoeSparseMoeBlock, OlmoeSparseMoeBlock): the router's top-k, the permutation of tokens into
// rows sorted by expert and its inverse (the weighted combine), the grouped GEMM over the experts'
// stacked weights, the shared expert's sigmoid gate, and the load-balancing and z losses. The experts'
// SwiGLU is the existing `swiglu` between grouped GEMMs; the router's linear is `matmul`.
//
// Shapes are static: the permuted buffer always has N*k rows (N tokens, k = top_k). Expert e's kept
// rows are contiguous, in expert order, then in the order of the assignments (token t's j-th choice is
// assignment t*k + j); rows past the kept ones (the dropped assignments' share under a capacity) are
// zero and no kernel reads them.
#include "ops/moe_ops.h"

#include <cmath>

#include "ops/schema_checks.h"
#include "ops/standard_ops.h"

namespace strata {

namespace {

using namespace schema_checks;

Shape with_last(Shape shape, int64_t last) {
  shape.back() = last;
  return shape;
}

void expect_i32_like(const std::string& op, const std::string& input, const TensorMeta& meta, const Shape& shape) {
  expect(meta.dtype == DType::I32 && meta.shape == shape, op, input, "be i32 " + shape_str(shape), meta);
}

void expect_floating_like(const std::string& op, const std::string& input, const TensorMeta& meta, DType dtype,
                          const Shape& shape) {
  expect(meta.dtype == dtype && meta.shape == shape, op, input,
         "be " + std::string(dtype_name(dtype)) + " " + shape_str(shape), meta);
}

// The router's logits [..., E] and the (weights, experts, rows) it makes [..., k].
Metas route_infer(const std::string& op, const TensorMeta& logits, const Attrs& attrs) {
  expect(is_floating(logits.dtype) && !logits.shape.empty() && logits.shape.back() > 0, op, "logits",
         "be floating [..., num_experts]", logits);
  const MoeRouting routing = moe_routing(op, attrs, logits.shape.back());
  const Shape chosen = with_last(logits.shape, routing.top_k);
  const int64_t experts = logits.shape.back();
  return {{chosen, logits.dtype},
          {chosen, DType::I32},
          {chosen, DType::I32},
          {{experts}, DType::I32},
          {{experts}, stats_dtype(logits.dtype)},
          {{experts}, stats_dtype(logits.dtype)}};
}

void add_route(OpRegistry& registry) {
  registry.add({
      .name = "moe_route",
      .summary = "the router's top-k over logits [..., E] (one row per token): scores = softmax over the experts "
                 "(attr scoring = \"softmax\") or sigmoid of each logit (\"sigmoid\"), in f32 (f64 for f64); "
                 "experts [..., k] (i32, k = attr top_k) = the k highest scores, highest first, a tie going to the "
                 "lower expert; weights [..., k] = their scores, divided by their sum when attr norm_topk_prob, "
                 "rounded to the logits' dtype once. The dispatch plan: rows [..., k] (i32) = the row of each "
                 "assignment in the permuted buffer of N*k rows, sorted by expert, then by assignment t*k + j; attr "
                 "capacity_factor f > 0 keeps each expert's first ceil(f N k / E) assignments in that order and drops "
                 "the rest (row -1), 0 keeps all (dropless). group_sizes [E] (i32) = the rows kept per expert; "
                 "routed [E] (f32, f64 for f64) = the assignments per expert before dropping, kept [E] (the same "
                 "type) = group_sizes: routed - kept is what the capacity dropped",
      .inputs = {"logits"},
      .outputs = {"weights", "experts", "rows", "group_sizes", "routed", "kept"},
      .attrs = {"top_k", "scoring", "norm_topk_prob", "capacity_factor"},
      .infer = [](const Metas& in, const Attrs& attrs) { return route_infer("moe_route", in[0], attrs); },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 5.0 * count(in[0]); },
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::WholeSequence,
  });
  registry.add({
      .name = "moe_route_backward",
      .summary = "dlogits [..., E] from dweights [..., k] through moe_route's weights (the scores recomputed from "
                 "logits, experts as the forward chose them): with w_j = s_e(j) / Z (Z = the chosen scores' sum "
                 "under norm_topk_prob, else 1), ds_e(j) = dw_j / Z - sum_i dw_i s_e(i) / Z^2 (the second term "
                 "only under norm_topk_prob), other ds 0; softmax: dlogits = s (ds - sum(s ds)), sigmoid: "
                 "dlogits = ds s (1 - s); in f32 (f64 for f64), rounded once",
      .inputs = {"dweights", "logits", "experts"},
      .outputs = {"dlogits"},
      .attrs = {"top_k", "scoring", "norm_topk_prob", "capacity_factor"},
      .dtype_input = 1,
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            const std::string op = "moe_route_backward";
            Metas forward = route_infer(op, in[1], attrs);
            expect_floating_like(op, "dweights", in[0], in[1].dtype, forward[0].shape);
            expect_i32_like(op, "experts", in[2], forward[1].shape);
            return {in[1]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 8.0 * count(in[1]); },
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

// The loss terms of one layer's router: the per-expert sums of the softmax scores and of the squared
// log-sum-exp, which moe_aux_loss combines over layers as transformers' load_balancing_loss_func (over
// every layer's logits at once) and the ST-MoE router z-loss do.
void add_router_loss_terms(OpRegistry& registry) {
  registry.add({
      .name = "moe_router_loss_terms",
      .summary = "over logits [..., E]: prob_sum [E] = the sum over tokens of softmax(logits) (whatever the "
                 "router's scoring, as transformers' load_balancing_loss_func), z_sum [] = the sum over tokens of "
                 "logsumexp(logits)^2 (the router z-loss's numerator); f32 (f64 for f64), accumulated in f64",
      .inputs = {"logits"},
      .outputs = {"prob_sum", "z_sum"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect(is_floating(in[0].dtype) && !in[0].shape.empty(), "moe_router_loss_terms", "logits",
                   "be floating [..., num_experts]", in[0]);
            DType stats = stats_dtype(in[0].dtype);
            return {{{in[0].shape.back()}, stats}, {{}, stats}};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 5.0 * count(in[0]); },
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::WholeSequence,
  });
  registry.add({
      .name = "moe_router_loss_terms_backward",
      .summary = "dlogits [..., E] of moe_router_loss_terms: with p = softmax(logits) per token and lse its "
                 "log-sum-exp, dlogits = p (dprob_sum - sum(p dprob_sum)) + 2 dz_sum lse p; in f32 (f64 for "
                 "f64), rounded once",
      .inputs = {"dprob_sum", "dz_sum", "logits"},
      .outputs = {"dlogits"},
      .dtype_input = 2,
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            const std::string op = "moe_router_loss_terms_backward";
            expect(is_floating(in[2].dtype) && !in[2].shape.empty(), op, "logits", "be floating [..., num_experts]",
                   in[2]);
            DType stats = stats_dtype(in[2].dtype);
            expect_floating_like(op, "dprob_sum", in[0], stats, {in[2].shape.back()});
            expect_floating_like(op, "dz_sum", in[1], stats, {});
            return {in[2]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 8.0 * count(in[2]); },
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

Metas aux_loss_infer(const std::string& op, const TensorMeta& prob_sum, const TensorMeta& z_sum,
                     const TensorMeta& routed, const Attrs& attrs) {
  expect(is_floating(prob_sum.dtype) && prob_sum.shape.size() == 1, op, "prob_sum", "be floating [num_experts]",
         prob_sum);
  expect_floating_like(op, "z_sum", z_sum, prob_sum.dtype, {});
  expect_floating_like(op, "routed", routed, prob_sum.dtype, prob_sum.shape);
  if (attrs.get_int("tokens") <= 0) fail("op '{}': attr 'tokens' must be positive, got {}", op, attrs.get_int("tokens"));
  attrs.get_float("aux_coef");
  attrs.get_float("z_coef");
  return {{{}, prob_sum.dtype}, {{}, prob_sum.dtype}, {{}, prob_sum.dtype}};
}

void add_aux_loss(OpRegistry& registry) {
  registry.add({
      .name = "moe_aux_loss",
      .summary = "the router losses over T = attr tokens routed tokens (every MoE layer's, summed): balance = E "
                 "sum_e (routed_e / T) (prob_sum_e / T) (transformers' load_balancing_loss_func: the fraction of "
                 "assignments to expert e times its mean router probability, times the number of experts E), "
                 "z = z_sum / T (the router z-loss), loss = aux_coef balance + z_coef z; computed in f64",
      .inputs = {"prob_sum", "z_sum", "routed"},
      .outputs = {"loss", "balance", "z"},
      .attrs = {"tokens", "aux_coef", "z_coef"},
      .infer = [](const Metas& in,
                  const Attrs& attrs) { return aux_loss_infer("moe_aux_loss", in[0], in[1], in[2], attrs); },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 3.0 * count(in[0]); },
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "moe_aux_loss_backward",
      .summary = "gradients of moe_aux_loss's loss: dprob_sum = dloss aux_coef E routed / T^2, dz_sum = dloss z_coef "
                 "/ T (routed is a count: no gradient)",
      .inputs = {"dloss", "routed"},
      .outputs = {"dprob_sum", "dz_sum"},
      .attrs = {"tokens", "aux_coef", "z_coef"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            Metas out = aux_loss_infer("moe_aux_loss_backward", in[1], in[0], in[1], attrs);
            return {in[1], out[0]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 2.0 * count(in[1]); },
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

// x [..., C] and the rows [..., k] that moe_route planned for it; returns N*k.
int64_t permuted_rows(const std::string& op, const TensorMeta& x, const TensorMeta& rows) {
  expect(is_floating(x.dtype) && !x.shape.empty(), op, "x", "be floating [..., channels]", x);
  expect(rows.dtype == DType::I32 && !rows.shape.empty() && drop_last(rows.shape) == drop_last(x.shape), op, "rows",
         "be i32 [..., top_k] with x's leading dims " + shape_str(drop_last(x.shape)), rows);
  return shape_numel(rows.shape);
}

void add_permute(OpRegistry& registry) {
  registry.add({
      .name = "moe_permute",
      .summary = "xs [N*k, C]: xs[rows[t, j]] = x[t] for every kept assignment (rows >= 0) of token t (x [..., C] "
                 "with its leading dims merged into N tokens, rows [..., k] from moe_route), the other rows zero: "
                 "each token copied to its experts, grouped by expert",
      .inputs = {"x", "rows"},
      .outputs = {"xs"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            return {{{permuted_rows("moe_permute", in[0], in[1]), in[0].shape.back()}, in[0].dtype}};
          },
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::WholeSequence,
  });
  registry.add({
      .name = "moe_permute_backward",
      .summary = "dx [..., C] (the leading dims of rows) = for each token t the sum over its kept assignments j, "
                 "in order of j, of dxs[rows[t, j]]; in f32 (f64 for f64), rounded once",
      .inputs = {"dxs", "rows"},
      .outputs = {"dx"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            const std::string op = "moe_permute_backward";
            expect(is_floating(in[0].dtype) && in[0].shape.size() == 2, op, "dxs", "be floating [rows, channels]",
                   in[0]);
            expect(in[1].dtype == DType::I32 && !in[1].shape.empty() && shape_numel(in[1].shape) == in[0].shape[0],
                   op, "rows", "be i32 [..., top_k] with one entry per row of dxs", in[1]);
            return {{with_last(in[1].shape, in[0].shape[1]), in[0].dtype}};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return count(in[0]); },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

// ys [N*k, C], weights [..., k], rows [..., k]; returns y's shape [..., C].
Shape combined_shape(const std::string& op, const TensorMeta& ys, const TensorMeta& weights, const TensorMeta& rows) {
  expect(is_floating(ys.dtype) && ys.shape.size() == 2, op, "ys", "be floating [rows, channels]", ys);
  expect(weights.dtype == ys.dtype && !weights.shape.empty() && shape_numel(weights.shape) == ys.shape[0], op,
         "weights", "be " + std::string(dtype_name(ys.dtype)) + " [..., top_k] with one weight per row of ys",
         weights);
  expect_i32_like(op, "rows", rows, weights.shape);
  return with_last(weights.shape, ys.shape[1]);
}

void add_combine(OpRegistry& registry) {
  registry.add({
      .name = "moe_combine",
      .summary = "y [..., C] = for each token t the sum over its kept assignments j, in order of j, of weights[t, "
                 "j] ys[rows[t, j]] (ys [N*k, C]: the experts' outputs in moe_permute's rows); dropped "
                 "assignments add nothing. In f32 (f64 for f64), rounded once",
      .inputs = {"ys", "weights", "rows"},
      .outputs = {"y"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            return {{combined_shape("moe_combine", in[0], in[1], in[2]), in[0].dtype}};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 2.0 * count(in[0]); },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::ExpertCombine,
  });
  registry.add({
      .name = "moe_combine_backward",
      .summary = "gradients of moe_combine: dys[rows[t, j]] = weights[t, j] dy[t] for kept assignments, other rows "
                 "zero; dweights[t, j] = dy[t] . ys[rows[t, j]] (0 when dropped); in f32 (f64 for f64), rounded "
                 "once",
      .inputs = {"dy", "ys", "weights", "rows"},
      .outputs = {"dys", "dweights"},
      .dtype_input = 1,
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            const std::string op = "moe_combine_backward";
            Shape y = combined_shape(op, in[1], in[2], in[3]);
            expect_floating_like(op, "dy", in[0], in[1].dtype, y);
            return {in[1], in[2]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 3.0 * count(in[1]); },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

void add_sigmoid_gate(OpRegistry& registry) {
  registry.add({
      .name = "sigmoid_gate",
      .summary = "y [..., C] = sigmoid(gate) x, gate [..., 1] broadcast over the channels (Qwen2-MoE's shared "
                 "expert: sigmoid(shared_expert_gate(h)) * shared_expert(h)); sigmoid in f32 (f64 for f64) and, as "
                 "PyTorch does, rounded to x's dtype before the product, which is rounded once",
      .inputs = {"x", "gate"},
      .outputs = {"y"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect(is_floating(in[0].dtype) && !in[0].shape.empty(), "sigmoid_gate", "x", "be floating [..., C]",
                   in[0]);
            expect_floating_like("sigmoid_gate", "gate", in[1], in[0].dtype, with_last(in[0].shape, 1));
            return {in[0]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return count(in[0]) + 4.0 * count(in[1]); },
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "sigmoid_gate_backward",
      .summary = "with s = sigmoid(gate) (rounded as the forward): dx = dy s, dgate = s (1 - s) sum over channels "
                 "of dy x; in f32 (f64 for f64), rounded once",
      .inputs = {"dy", "x", "gate"},
      .outputs = {"dx", "dgate"},
      .dtype_input = 1,
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            const std::string op = "sigmoid_gate_backward";
            expect(is_floating(in[1].dtype) && !in[1].shape.empty(), op, "x", "be floating [..., C]", in[1]);
            expect_floating_like(op, "dy", in[0], in[1].dtype, in[1].shape);
            expect_floating_like(op, "gate", in[2], in[1].dtype, with_last(in[1].shape, 1));
            return {in[1], in[2]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 3.0 * count(in[1]); },
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

}  // namespace

MoeRouting moe_routing(const std::string& op, const Attrs& attrs, int64_t experts) {
  MoeRouting routing;
  routing.top_k = attrs.get_int("top_k");
  if (routing.top_k < 1 || routing.top_k > experts) {
    fail("op '{}': attr 'top_k' must be in [1, {}] (the number of experts), got {}", op, experts, routing.top_k);
  }
  const std::string& scoring = attrs.get_string("scoring");
  if (scoring == "softmax") routing.scoring = MoeScoring::Softmax;
  else if (scoring == "sigmoid") routing.scoring = MoeScoring::Sigmoid;
  else fail("op '{}': attr 'scoring' must be \"softmax\" or \"sigmoid\", got \"{}\"", op, scoring);
  routing.norm_topk_prob = attrs.get_bool("norm_topk_prob");
  routing.capacity_factor = attrs.get_float("capacity_factor");
  if (!(routing.capacity_factor >= 0)) {
    fail("op '{}': attr 'capacity_factor' must be 0 (dropless) or positive, got {}", op, routing.capacity_factor);
  }
  return routing;
}

int64_t MoeRouting::capacity(int64_t tokens, int64_t experts) const {
  if (capacity_factor == 0) return 0;
  const double rows = capacity_factor * static_cast<double>(tokens * top_k) / static_cast<double>(experts);
  return static_cast<int64_t>(std::ceil(rows));
}

void add_moe_ops(OpRegistry& registry) {
  add_route(registry);
  add_router_loss_terms(registry);
  add_aux_loss(registry);
  add_permute(registry);
  add_combine(registry);
  add_sigmoid_gate(registry);
  add_grouped_matmul_ops(registry);
}

}  // namespace strata
