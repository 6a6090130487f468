// reshape: the same elements under another shape (Qwen3's per-head q/k norms see [B, T, H*D] as
// [B, T, H, D]); a copy, since graph values own their bytes, or none where the memory planner lets
// the output take over the input.
#include "ops/schema_checks.h"
#include "ops/standard_ops.h"

namespace strata {

Shape reshaped(const Shape& shape, const Attrs& attrs) {
  const int64_t keep = attrs.get_int("keep");
  if (keep < 0 || keep > static_cast<int64_t>(shape.size())) {
    fail("op 'reshape': attr 'keep' ({}) must be in [0, {}] (the dims of x)", keep, shape.size());
  }
  Shape out(shape.begin(), shape.begin() + keep);
  for (int64_t dim : attrs.get_ints("tail")) out.push_back(dim);
  if (shape_numel(out) != shape_numel(shape)) {
    fail("op 'reshape': x {} has {} elements, the shape {} {}", shape_str(shape), shape_numel(shape),
         shape_str(out), shape_numel(out));
  }
  return out;
}

void add_reshape_op(OpRegistry& registry) {
  registry.add({
      .name = "reshape",
      .summary = "y = x's elements in order under the shape x.shape[:keep] + tail (attrs keep, tail; the same "
                 "element count); y may alias x",
      .inputs = {"x"},
      .outputs = {"y"},
      .attrs = {"keep", "tail"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            schema_checks::expect_floating("reshape", "x", in[0]);
            return {{reshaped(in[0].shape, attrs), in[0].dtype}};
          },
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      .may_reuse = {{0, 0}},
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::None,
  });
}

}  // namespace strata
