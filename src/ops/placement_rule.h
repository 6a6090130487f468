#pragma once
// How tensor parallelism (parallel/tensor_parallel.cpp) and expert parallelism
// (parallel/expert_parallel.cpp) place an op that reads a value split across the
// group: a fact of the op, declared with its schema
// (OpSchema::placement), as DTensor registers a sharding strategy per op. The
// pass picks its transform by the rule, not by the op's name; an op whose rule
// does not place the split it reads is refused, naming the op and the
// parallel.* key of that split.
#include <string_view>

namespace strata {

enum class PlacementRule {
  Unstated,  // every op must say (a registry-wide test checks)
  None,      // refused on any split input: ops made after the pass, inference-only ops, collectives
  // Each output element reads the same element of each input: outputs are split as the inputs are. One
  // input may be split any way; several must all be split by features (the last axis of each: the one
  // split that lies on the same axis of every value they combine). A sequence split passes through.
  Elementwise,
  // Normalises each position over its features: a sequence split passes through, a split of the
  // features is refused.
  RowwiseNorm,
  // x W^T + b: W split by output features makes a split output; by input features, partial products
  // summed over the group, b added once after the sum.
  Linear,
  // a b: b split by columns or rows as Linear's weight, or a vocabulary-split table as the tied LM head
  // (a b^T), which makes the logits' vocabulary columns.
  Matmul,
  // Heads independent of each other: inputs split by whole heads make the output split by the same heads.
  AttentionByHeads,
  // Rotates each head on its own: x split by whole heads, the positions whole.
  RotaryByHeads,
  // A lookup in a vocabulary-split table: each rank's rows (zeros for the other ids), summed over the group.
  VocabLookup,
  // A loss over vocabulary-split logits: the shards' log-sum-exps and target logits combined.
  VocabLoss,
  // Expert parallelism (parallel/expert_parallel.cpp): the op multiplies rows grouped by expert with a
  // weight stacked over the experts; split by whole experts, it reads the rows of its rank's experts.
  ExpertGroups,
  // Reads the experts' outputs in the order its rows were sent to them (the weighted combine).
  ExpertCombine,
  // Reads every position of the micro-batch at once (a router's choices and their sums over the tokens):
  // under a sequence split its split inputs are gathered whole (gather_to_group) and every rank runs it
  // alike, as the ops after it that read only whole values.
  WholeSequence,
};

std::string_view placement_rule_name(PlacementRule rule);

// Whether the op runs on a rank's block of the sequence under sequence
// parallelism: each position's outputs read that position's inputs only.
bool passes_sequence_split(PlacementRule rule);

}  // namespace strata
