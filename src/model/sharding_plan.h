#pragma once
// How a model family's parameters split under tensor parallelism, declared by
// the family and executed by the parallel runtime's graph pass
// (parallel/tensor_parallel.h), in the manner of torchtitan's per-model
// parallelize plans and Megatron-core's parallel layers:
// - ColumnParallel: split along the output features; a linear with such a
//   weight reads a replicated input and makes a split output. `fused_parts`
//   equal parts side by side (GPT-2's c_attn: q, k, v) are each split, so a
//   rank holds the same heads of each part.
// - RowParallel: split along the input features; the linear reads a split
//   input and its partial outputs are summed over the ranks.
//   Which dim holds the output features is the weight's layout: GPT-2's Conv1D
//   stores [in, out] (output last), nn.Linear (LLaMA) [out, in] (output first).
// - VocabParallel: an embedding table split by vocabulary rows, uneven shards
//   allowed (no padding: the model is the same at every degree).
// - Replicated: every rank holds all of it.
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

enum class ShardStyle { Replicated, ColumnParallel, RowParallel, VocabParallel };
enum class WeightLayout { InOut, OutIn };
std::string_view shard_style_name(ShardStyle style);

struct ShardRule {
  std::string pattern;  // a parameter name; each '*' matches any run of characters
  ShardStyle style = ShardStyle::Replicated;
  int64_t fused_parts = 1;
  WeightLayout layout = WeightLayout::InOut;
};

struct ShardingPlan {
  std::vector<ShardRule> rules;  // the first matching rule applies; no match: replicated
  // Parameters stacked over the experts along dim 0 (patterns as rules'): expert parallelism splits
  // them by whole experts; tensor parallelism leaves them whole.
  std::vector<std::string> expert_stacked;

  ShardRule rule_for(const std::string& parameter) const;
  bool stacked_over_experts(const std::string& parameter) const;
};

}  // namespace strata
