// Collectives as ops, in Megatron's conjugate pairs: all_reduce sums over a
// group in the forward pass and passes the gradient through; copy_to_group
// passes the value through and sums the gradient (tensor parallelism);
// all_gather concatenates along a dimension and reduce_scatter sums and keeps
// this rank's block of it, each the other's gradient (sequence parallelism);
// split_to_group keeps this rank's block of a value every rank holds, its
// gradient all_gather (Megatron's scatter to the sequence-parallel region);
// gather_to_group is its converse, an all_gather into ops every rank runs alike,
// whose gradient keeps this rank's block.
// all_to_all exchanges blocks along a dimension (expert parallelism's token
// dispatch and combine); the exchange is its own adjoint, so it is its gradient.
// send_to_stage and receive_from_stage are a pipeline's stage boundary, each
// the other's gradient: the value leaving one stage's part of the model and
// entering the next one's (attr `flow` keeps activations going forward apart
// from gradients going back, each arriving in the order it was sent).
// The kernels run on the group the `group` attr names (ops/collective_group.h);
// `ranks` is the group size the graph was built for, which the kernel checks
// and shape inference and the byte counts read.
#include <algorithm>

#include "ops/collective_group.h"
#include "ops/standard_ops.h"

namespace strata {

namespace {

Metas same_as_input(const std::string& op, const Metas& in, const Attrs& attrs) {
  if (!is_floating(in[0].dtype)) fail("op '{}': input 'x' must be floating point, got {}", op, dtype_name(in[0].dtype));
  if (attrs.get_string("group").empty()) fail("op '{}': attr 'group' must name a group", op);
  if (attrs.get_int("ranks") < 1) fail("op '{}': attr 'ranks' must be at least 1, got {}", op, attrs.get_int("ranks"));
  return {in[0]};
}

// all_gather (ranks times longer along `dim`) or reduce_scatter (ranks times shorter).
Metas resized_along_dim(const std::string& op, const Metas& in, const Attrs& attrs, bool gather) {
  same_as_input(op, in, attrs);
  const int64_t dim = attrs.get_int("dim"), ranks = attrs.get_int("ranks");
  Shape shape = in[0].shape;
  if (dim < 0 || dim >= static_cast<int64_t>(shape.size())) {
    fail("op '{}': attr 'dim' {} is not an axis of x {}", op, dim, shape_str(shape));
  }
  int64_t& extent = shape[static_cast<size_t>(dim)];
  if (!gather && extent % ranks != 0) {
    fail("op '{}': x {} has {} along dim {}, not a multiple of the {} ranks", op, shape_str(in[0].shape), extent, dim,
         ranks);
  }
  extent = gather ? extent * ranks : extent / ranks;
  return {{shape, in[0].dtype}};
}

// A stage boundary's transfer with the peer stage attr `peer` on attr `flow`.
Metas stage_transfer(const std::string& op, const Metas& in, const Attrs& attrs) {
  same_as_input(op, in, attrs);
  const int64_t peer = attrs.get_int("peer");
  if (peer < 0 || peer >= attrs.get_int("ranks")) {
    fail("op '{}': attr 'peer' {} is not a rank of the {} in group '{}'", op, peer, attrs.get_int("ranks"),
         attrs.get_string("group"));
  }
  parse_stage_flow(op, attrs);
  return {in[0]};
}

// One call of `pattern` on the larger of x and out.
std::function<CommCalls(const Metas&, const Metas&, const Attrs&)> one_call(CommPattern pattern) {
  return [pattern](const Metas& in, const Metas& out, const Attrs&) {
    return CommCalls{{pattern, static_cast<double>(std::max(in[0].nbytes(), out[0].nbytes()))}};
  };
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
      .comm = one_call(CommPattern::AllReduce),
      .placement = PlacementRule::None,
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
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "all_gather",
      .summary = "out = the ranks' x (the group named by attr `group`, attr `ranks` of them) concatenated in rank "
                 "order along axis attr `dim`; its gradient is reduce_scatter",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"group", "ranks", "dim"},
      .infer = [](const Metas& in, const Attrs& attrs) { return resized_along_dim("all_gather", in, attrs, true); },
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      // A ring all-gather receives the other ranks' (p - 1) blocks, besides reading x and writing out.
      .bytes = [](const Metas& in, const Metas& out, const Attrs& attrs) {
        const double p = static_cast<double>(attrs.get_int("ranks"));
        return static_cast<double>(in[0].nbytes() + out[0].nbytes()) + 2.0 * (p - 1.0) * in[0].nbytes();
      },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .comm = one_call(CommPattern::AllGather),
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "split_to_group",
      .summary = "out = this rank's block, along axis attr `dim`, of x, which every rank of the group named by "
                 "attr `group` (attr `ranks` of them) holds whole (block r for rank r); no communication; its "
                 "gradient is all_gather",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"group", "ranks", "dim"},
      .infer = [](const Metas& in, const Attrs& attrs) { return resized_along_dim("split_to_group", in, attrs, false); },
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "gather_to_group",
      .summary = "out = x of every rank of the group named by attr `group` (attr `ranks` of them) side by side "
                 "along axis attr `dim`, as all_gather, for ops every rank then runs alike on the whole value: "
                 "each rank's gradient of out is already the whole one, so its gradient keeps this rank's block "
                 "(split_to_group; Megatron's gather from the sequence-parallel region without a tensor-parallel "
                 "output gradient)",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"group", "ranks", "dim"},
      .infer = [](const Metas& in, const Attrs& attrs) { return resized_along_dim("gather_to_group", in, attrs, true); },
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .comm = one_call(CommPattern::AllGather),
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "all_to_all",
      .summary = "out = x with its blocks along axis attr `dim` exchanged over the group named by attr `group` "
                 "(attr `ranks` of them): block j goes to rank j, and the block from rank i lands at i; its "
                 "gradient is all_to_all",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"group", "ranks", "dim"},
      .infer = [](const Metas& in, const Attrs& attrs) {
        resized_along_dim("all_to_all", in, attrs, false);  // the blocks must divide evenly
        return Metas{in[0]};
      },
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      // Regrouped into rank order and back, besides the (p - 1) / p of x sent and received.
      .bytes = [](const Metas& in, const Metas& out, const Attrs& attrs) {
        const double p = static_cast<double>(attrs.get_int("ranks"));
        return static_cast<double>(2 * in[0].nbytes() + 2 * out[0].nbytes()) + 2.0 * (p - 1.0) / p * in[0].nbytes();
      },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .comm = one_call(CommPattern::AllToAll),
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "reduce_scatter",
      .summary = "out = this rank's block, along axis attr `dim`, of the sum of x over the ranks of the group named "
                 "by attr `group` (attr `ranks` of them; block r for rank r); its gradient is all_gather",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"group", "ranks", "dim"},
      .infer = [](const Metas& in, const Attrs& attrs) { return resized_along_dim("reduce_scatter", in, attrs, false); },
      .flops = [](const Metas& in, const Metas&, const Attrs& attrs) {
        const double p = static_cast<double>(attrs.get_int("ranks"));
        return static_cast<double>(shape_numel(in[0].shape)) * (p - 1.0) / p;
      },
      // A ring reduce-scatter sends and receives (p - 1) / p of x, besides reading x and writing out.
      .bytes = [](const Metas& in, const Metas& out, const Attrs& attrs) {
        const double p = static_cast<double>(attrs.get_int("ranks"));
        return static_cast<double>(in[0].nbytes() + out[0].nbytes()) + 2.0 * (p - 1.0) / p * in[0].nbytes();
      },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .comm = one_call(CommPattern::ReduceScatter),
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "send_to_stage",
      .summary = "out = x, which leaves for pipeline stage attr `peer` (a rank of the group named by attr `group`, "
                 "attr `ranks` of them) on attr `flow` (\"activations\" or \"gradients\"); it does not wait for "
                 "the transfer; its gradient is receive_from_stage from that stage on the other flow",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"group", "ranks", "peer", "flow"},
      .infer = [](const Metas& in, const Attrs& attrs) { return stage_transfer("send_to_stage", in, attrs); },
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      // Reads x twice (out, and the copy the transfer leaves from) and sends it.
      .bytes = [](const Metas& in, const Metas& out, const Attrs&) {
        return static_cast<double>(3 * in[0].nbytes() + out[0].nbytes());
      },
      .may_reuse = {{0, 0}},
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .comm = one_call(CommPattern::PointToPoint),
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "receive_from_stage",
      .summary = "out = the value pipeline stage attr `peer` (a rank of the group named by attr `group`, attr "
                 "`ranks` of them) sent on attr `flow` (\"activations\" or \"gradients\"); x stands for that "
                 "value in this rank's graph (its shape and dtype; its data is not read); its gradient is "
                 "send_to_stage to that stage on the other flow",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"group", "ranks", "peer", "flow"},
      .infer = [](const Metas& in, const Attrs& attrs) { return stage_transfer("receive_from_stage", in, attrs); },
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      // Receives out and writes it.
      .bytes = [](const Metas&, const Metas& out, const Attrs&) { return static_cast<double>(2 * out[0].nbytes()); },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .comm = one_call(CommPattern::PointToPoint),
      .placement = PlacementRule::None,
  });
}

}  // namespace strata
