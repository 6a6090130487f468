#pragma once
// The unified operator interface: an op is a schema (what it computes, how its
// output shapes follow from its inputs, what it costs); backends supply
// kernels for it per dtype.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/attrs.h"
#include "ops/placement_rule.h"

namespace strata {

struct TensorMeta {
  Shape shape;
  DType dtype = DType::F32;
  size_t nbytes() const { return static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype); }
  bool operator==(const TensorMeta& other) const { return shape == other.shape && dtype == other.dtype; }
};

using Metas = std::vector<TensorMeta>;
using Tensors = std::vector<Tensor>;

// Kernels write into outputs the caller allocated with the inferred shapes.
// All tensors handed to kernels are contiguous.
using KernelFn = std::function<void(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs)>;

class Dispatcher;
// Computes an op with other ops, for backends that lack its kernel.
using DecomposeFn =
    std::function<void(Dispatcher& dispatcher, const Tensors& inputs, const Tensors& outputs, const Attrs& attrs)>;

// Facts about an op that the graph passes and the planner read. They live on
// the schema so that adding an op means writing them once, here.

// How the mixed-precision policy (graph/autocast) picks the dtype an op computes in.
enum class PrecisionRole {
  Low,          // the policy's low dtype (bf16/fp16), unless listed in precision.fp32_ops
  F32Default,   // in the default precision.fp32_ops: norms, softmax, losses, lookups, the optimizer
  FollowsInputs,  // glue (moves, combines or converts values): the widest floating dtype among its inputs
};

// Whether reverse-mode autodiff differentiates through the op, in which case
// the graph layer has a gradient rule for it. Every op must say; ops that only
// autodiff, the optimizer or fusion create, and inference-only ops, say No.
enum class Differentiable { Unstated, Yes, No };

// How the planner prices an op's arithmetic: GEMMs and attention at the
// efficiency their size reaches, anything else by its measured efficiency.
enum class OpKind { Gemm, Attention, Other };

// Communication an op does over the group its attrs name (attr `group`, attr
// `ranks` of them), as the planner prices it: a pattern on a buffer of
// `bytes` (the whole tensor the group combines, gathers or scatters, or the
// one a stage sends), by comm's algorithm choice for that size and group.
enum class CommPattern { AllReduce, AllGather, ReduceScatter, AllToAll, PointToPoint };
struct CommCall {
  CommPattern pattern = CommPattern::AllReduce;
  double bytes = 0;
};
using CommCalls = std::vector<CommCall>;

struct OpSchema {
  std::string name;
  std::string summary;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<std::string> attrs;  // required attribute names
  size_t dtype_input = 0;          // the input whose dtype selects the kernel
  // Validates inputs and attributes (throwing an Error naming the op and the
  // offending input) and returns the output metadata.
  std::function<Metas(const Metas& inputs, const Attrs& attrs)> infer;
  // Floating-point operations of one call (a multiply-add counts as 2).
  std::function<double(const Metas& inputs, const Metas& outputs, const Attrs& attrs)> flops;
  // Bytes moved to and from memory by an ideal kernel; unset means every input
  // read once and every output written once.
  std::function<double(const Metas& inputs, const Metas& outputs, const Attrs& attrs)> bytes;
  DecomposeFn decompose;  // unset: no decomposition, fall back to `ref`
  // The ops `decompose` runs (same dtype as this op), for coverage reports.
  std::vector<std::string> decomposes_into;
  // In-place permission: (output, input) pairs whose output may take over the
  // input's buffer when no later node reads that input (the memory planner
  // does this only for equal sizes). Every kernel and decomposition of the op,
  // on every backend, must then be correct with the two aliased: element i of
  // the input is read before element i of the output is written, and no other
  // element of the input is read after that write.
  std::vector<std::pair<size_t, size_t>> may_reuse;
  PrecisionRole precision = PrecisionRole::Low;
  // Kernels widen every floating input to f32 as they read it: computing in
  // f32 needs no cast of the inputs (for cross-entropy, no f32 copy of the logits).
  bool reads_any_float_as_f32 = false;
  Differentiable differentiable = Differentiable::Unstated;
  // Re-run in the backward pass under train.recompute = "selective", inside
  // each recomputation segment (a transformer layer), and priced so by the
  // planner: the attention core, as in Megatron's selective recomputation.
  bool recomputed_selectively = false;
  OpKind kind = OpKind::Other;
  // The calls one run of the op makes over its group; unset: none.
  std::function<CommCalls(const Metas& inputs, const Metas& outputs, const Attrs& attrs)> comm;
  PlacementRule placement = PlacementRule::Unstated;  // every op must say
};

struct OpCost {
  double flops = 0;
  double bytes = 0;
  CommCalls comm;  // over the group attr `group` names (attr `ranks` of them)
};

class OpRegistry {
 public:
  // The process-wide registry, holding every standard op.
  static const OpRegistry& global();

  void add(OpSchema schema);
  const OpSchema& get(const std::string& name) const;  // throws naming the op
  bool contains(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  // Sorted names of the ops whose schema satisfies `has`.
  std::vector<std::string> names_where(const std::function<bool(const OpSchema&)>& has) const;

  Metas infer(const std::string& name, const Metas& inputs, const Attrs& attrs) const;
  OpCost cost(const std::string& name, const Metas& inputs, const Attrs& attrs) const;

 private:
  std::vector<OpSchema> schemas_;
};

Metas metas_of(const Tensors& tensors);

}  // namespace strata
