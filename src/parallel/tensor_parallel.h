#pragma once
// Tensor parallelism (Megatron's intra-layer split) as a graph pass: a model
// family's forward graph, built whole, becomes one rank's part of it. Params
// take their shard shapes from the family's sharding plan
// (model/sharding_plan.h), and the pass inserts the collective ops where
// values change placement:
// - a column-parallel linear reads its replicated input through
//   copy_to_group (identity; its gradient is summed over the group) and makes
//   a split output; the attention core then runs this rank's heads;
// - a row-parallel linear multiplies its split input by its shard of rows,
//   all_reduce sums the partial products, and the (replicated) bias is added
//   after the sum, once;
// - a vocab-parallel embedding looks up the ids its rows hold (zeros for the
//   others) and all_reduce sums the lookups; the tied LM head makes this
//   rank's vocabulary columns of the logits, and cross_entropy combines the
//   shards' log-sum-exps and target logits without gathering the logits.
// With sequence parallelism the regions between them are split along the
// sequence: an all_gather (its gradient a reduce_scatter) replaces
// copy_to_group before each column-parallel linear and the LM head, a
// reduce_scatter replaces all_reduce after each row-parallel linear and the
// embedding, the position embeddings are split_to_group, and the replicated
// parameters those regions read (LayerNorm weights and biases, c_proj's bias)
// enter through copy_to_group, so their gradients are summed over the group.
// Which of these applies is the op's placement rule (ops/placement_rule.h),
// declared with its schema; element-wise ops follow their inputs' split. An op
// whose rule does not place the split it reads is refused, naming the node,
// the op and the parallel.* key. The backward pass derived from the result is
// then the tensor-parallel backward (the collectives' gradient rules are
// Megatron's conjugate pairs), and every replicated parameter's gradient comes
// out the same on every rank of the group.
#include <string>

#include "core/tensor.h"
#include "core/tensor_box.h"
#include "graph/rewrite.h"
#include "model/parameters.h"
#include "model/sharding_plan.h"
#include "model/value_layout.h"
#include "parallel/parameter_placement.h"

namespace strata {

struct TensorParallelRank {
  int degree = 1;
  int rank = 0;
  std::string group = "tp";  // the collective group (ops/collective_group.h) of the ranks
  // Sequence parallelism (Megatron's): the regions between the split layers
  // (LayerNorms, residual adds, the embedding's sum) hold this rank's block of
  // the sequence instead of all of it.
  bool sequence_parallel = false;
};

// The part of a parameter of `full` shape that `tp.rank` holds under `rule`:
// along the split dim, each of the rule's fused parts is cut into `degree`
// contiguous pieces, rank r taking [r·n/degree, (r+1)·n/degree) of each part
// (equal pieces for column and row splits, which fail naming `name` when the
// dim does not divide; vocabulary shards may differ by one row).
class ParameterShard {
 public:
  ParameterShard(const std::string& name, const Shape& full, const ShardRule& rule, const TensorParallelRank& tp);

  const Shape& full_shape() const { return full_; }
  const Shape& shape() const { return shape_; }
  bool split() const { return style_ != ShardStyle::Replicated && degree_ > 1; }
  ShardStyle style() const { return style_; }
  int64_t first_row() const;  // the first vocabulary row held (VocabParallel)
  ValueLayout layout() const;  // how the shard stands to the whole parameter

  // Where the shard lies in the full parameter: one box per fused part (the
  // whole, for a parameter not split), each with its offsets in the shard.
  using Box = ShardBox;
  std::vector<Box> boxes() const;

  // shard = this rank's part of full.
  void slice(const Tensor& full, Tensor& shard) const;

 private:

  std::string name_;
  Shape full_;
  Shape shape_;
  ShardStyle style_;
  int64_t parts_;
  int degree_;
  int rank_;
  std::string group_;
  size_t dim_ = 0;  // the split dim
};

// The shard of every parameter of `specs` (the whole model's, in order).
std::vector<ParameterShard> parameter_shards(const std::vector<ParamSpec>& specs, const ShardingPlan& plan,
                                             const TensorParallelRank& tp);

// The pass. `forward` is a whole model's forward graph (params named as in the
// plan); fails, naming the node, on an op the pass cannot place. The values that
// stand for the whole model's take their names; the layout of each value made is
// recorded (model/value_layout.h), the partial sums a reduction reads being named
// "<value>.partial".
struct TensorParallelForward {
  GraphRewriter::Result rewritten;
  ValueLayouts layouts;
  GradientLabels gradient_labels;  // where an op the pass replaced makes gradients under other labels
};
TensorParallelForward parallelize_tensors(const Graph& forward, const ShardingPlan& plan, const TensorParallelRank& tp);

}  // namespace strata
