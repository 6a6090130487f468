// The experts' GEMM: one op over every expert's weights at once, rows grouped by expert (moe_route's
// dispatch plan), so a backend runs it as one grouped call rather than a GEMM per expert.
#include "ops/moe_ops.h"
#include "ops/schema_checks.h"

namespace strata {

namespace {

using namespace schema_checks;

struct GroupedDims {
  int64_t rows, groups, n, k;
};

// x [R, K], w [E, N, K] (trans_b) or [E, K, N], group_sizes [E] i32.
GroupedDims grouped_dims(const Metas& in, const Attrs& attrs) {
  const std::string op = "grouped_matmul";
  const TensorMeta &x = in[0], &w = in[1];
  expect(is_floating(x.dtype) && x.shape.size() == 2, op, "x", "be floating [rows, K]", x);
  expect(w.dtype == x.dtype && w.shape.size() == 3, op, "w", "be " + std::string(dtype_name(x.dtype)) +
         " [experts, N, K] (trans_b) or [experts, K, N]", w);
  const bool trans_b = attrs.get_bool("trans_b");
  const int64_t k = trans_b ? w.shape[2] : w.shape[1];
  const int64_t n = trans_b ? w.shape[1] : w.shape[2];
  if (k != x.shape[1]) {
    fail("op 'grouped_matmul': inner sizes differ: x is {}, w is {}{}", shape_str(x.shape), shape_str(w.shape),
         trans_b ? " (transposed)" : "");
  }
  expect(in[2].dtype == DType::I32 && in[2].shape == Shape{w.shape[0]}, op, "group_sizes",
         "be i32 [" + std::to_string(w.shape[0]) + "] (rows per expert)", in[2]);
  return {x.shape[0], w.shape[0], n, k};
}

double gemm_flops(const GroupedDims& d) {
  return 2.0 * static_cast<double>(d.rows) * static_cast<double>(d.n) * static_cast<double>(d.k);
}

// a [R, M], b [R, N], group_sizes [E] i32 -> [E, M, N].
Metas weight_grad_infer(const Metas& in, const Attrs&) {
  const std::string op = "grouped_matmul_weight_grad";
  expect(is_floating(in[0].dtype) && in[0].shape.size() == 2, op, "a", "be floating [rows, M]", in[0]);
  expect(in[1].dtype == in[0].dtype && in[1].shape.size() == 2 && in[1].shape[0] == in[0].shape[0], op, "b",
         "be " + std::string(dtype_name(in[0].dtype)) + " [" + std::to_string(in[0].shape[0]) + ", N]", in[1]);
  expect(in[2].dtype == DType::I32 && in[2].shape.size() == 1 && in[2].shape[0] > 0, op, "group_sizes",
         "be i32 [experts]", in[2]);
  return {{{in[2].shape[0], in[0].shape[1], in[1].shape[1]}, in[0].dtype}};
}

}  // namespace

void add_grouped_matmul_ops(OpRegistry& registry) {
  registry.add({
      .name = "grouped_matmul",
      .summary = "y [R, N]: the rows of x [R, K] in consecutive groups, group e's group_sizes[e] rows (i32 [E]) "
                 "times expert e's weight: x_e w[e]^T with w [E, N, K] (attr trans_b = true: nn.Linear's layout, "
                 "as the Hub stores each expert), x_e w[e] with w [E, K, N]; rows past the groups' total are zero. "
                 "Sums in f32 (f64 for f64), each output rounded once",
      .inputs = {"x", "w", "group_sizes"},
      .outputs = {"y"},
      .attrs = {"trans_b"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            GroupedDims d = grouped_dims(in, attrs);
            return {{{d.rows, d.n}, in[0].dtype}};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs& attrs) { return gemm_flops(grouped_dims(in, attrs)); },
      .differentiable = Differentiable::Yes,
      .kind = OpKind::Gemm,
      .placement = PlacementRule::ExpertGroups,
  });
  registry.add({
      .name = "grouped_matmul_weight_grad",
      .summary = "out [E, M, N]: out[e] = a_e^T b_e, a [R, M] and b [R, N] with their rows in the consecutive "
                 "groups of group_sizes (i32 [E]), rows past the groups' total unread (an empty group gives "
                 "zeros); grouped_matmul's weight gradient. Sums in f32 (f64 for f64), rounded once",
      .inputs = {"a", "b", "group_sizes"},
      .outputs = {"out"},
      .infer = weight_grad_infer,
      .flops =
          [](const Metas& in, const Metas&, const Attrs&) {
            return 2.0 * count(in[0]) * static_cast<double>(in[1].shape[1]);
          },
      .differentiable = Differentiable::No,
      .kind = OpKind::Gemm,
      .placement = PlacementRule::None,
  });
}

}  // namespace strata
