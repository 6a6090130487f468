// Collectives as ops: Megatron's conjugate pair for tensor parallelism.
// all_reduce sums over a group in the forward pass and passes the gradient
// through; copy_to_group passes the value through and sums the gradient. The
// kernels run on the group the `group` attr names (ops/collective_group.h);
// `ranks` is the group size the graph was built for, which the kernel checks
// and the byte count reads.
#include "ops/standard_ops.h"

namespace strata {

namespace {

Metas same_as_input(const std::string& op, const Metas& in, const Attrs& attrs) {
  if (!is_floating(in[0].dtype)) fail("op '{}': input 'x' must be floating point, got {}", op, dtype_name(in[0].dtype));
  if (attrs.get_string("group").empty()) fail("op '{}': attr 'group' must name a group", op);
  if (attrs.get_int("ranks") < 1) fail("op '{}': attr 'ranks' must be at least 1, got {}", op, attrs.get_int("ranks"));
  return {in[0]};
}

}  // namespace

void add_collective_ops(OpRegistry& registry) {
  registry.add({
      .name = "all_reduce",
      .summary = "out = the sum of x over the ranks of the group named by attr `group` (attr `ranks` of them), "
                 "the same bits on every rank; the gradient passes through (Megatron's g); out may alias x",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"group", "ranks"},
      .infer = [](const Metas& in, const Attrs& attrs) { return same_as_input("all_reduce", in, attrs); },
      .flops = [](const Metas& in, const Metas&, const Attrs& attrs) {
        return static_cast<double>(shape_numel(in[0].shape)) * static_cast<double>(attrs.get_int("ranks") - 1);
      },
      // A ring all-reduce sends and receives 2 (p - 1) / p of the buffer, besides reading and writing it.
      .bytes = [](const Metas& in, const Metas&, const Attrs& attrs) {
        const double p = static_cast<double>(attrs.get_int("ranks"));
        return static_cast<double>(in[0].nbytes()) * (2.0 + 2.0 * 2.0 * (p - 1.0) / p);
      },
      .may_reuse = {{0, 0}},
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
  });
  registry.add({
      .name = "copy_to_group",
      .summary = "out = x, entering a region whose ranks (the group named by attr `group`, attr `ranks` of them) "
                 "each compute part of what follows; its gradient is summed over them (Megatron's f)",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"group", "ranks"},
      .infer = [](const Metas& in, const Attrs& attrs) { return same_as_input("copy_to_group", in, attrs); },
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      .may_reuse = {{0, 0}},
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
  });
}

}  // namespace strata
