// Precision conversion, the op mixed-precision graphs are built from.
#include "ops/standard_ops.h"

namespace strata {

void add_cast_ops(OpRegistry& registry) {
  registry.add({
      .name = "cast",
      .summary = "out = x converted to the floating dtype named by attr `dtype` (f64, f32, bf16, f16), rounding "
                 "to nearest even",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"dtype"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            if (!is_floating(in[0].dtype)) {
              fail("op 'cast': x must be floating, got {}", dtype_name(in[0].dtype));
            }
            DType target = parse_dtype(attrs.get_string("dtype"));
            if (!is_floating(target)) fail("op 'cast': attr dtype must be floating, got {}", dtype_name(target));
            return {{in[0].shape, target}};
          },
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::Elementwise,
  });
}

}  // namespace strata
