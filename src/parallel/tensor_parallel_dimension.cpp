#include "parallel/tensor_parallel_dimension.h"

#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/key_checks.h"
#include "model/family.h"
#include "parallel/parallel_settings.h"
#include "parallel/parallelize.h"

namespace strata {

namespace {

std::optional<ParallelForward> split_layers(const Graph& forward, const DimensionPassInput& input) {
  std::optional<ParallelForward> split;
  if (input.layout.tp.degree <= 1) return split;
  TensorParallelForward part = parallelize_tensors(forward, input.plan, input.layout.tp);
  split = ParallelForward{.rewritten = std::move(part.rewritten),
                          .layouts = std::move(part.layouts),
                          .gradient_labels = std::move(part.gradient_labels)};
  return split;
}

// Each parameter the family's plan splits: rank t holds shard t; the others are replicated.
std::vector<ParameterPlacement> place_shards(const PlacementInput& input) {
  if (input.degree > 1 && input.model.n_head % input.degree != 0) {
    fail("parallel.tp = {} does not divide the model's {} heads (model.n_head)", input.degree, input.model.n_head);
  }
  const ShardingPlan plan = model_family(input.model).sharding_plan();
  std::vector<ParameterPlacement> placements(input.specs.size());
  for (size_t i = 0; i < input.specs.size(); ++i) {
    const ParamSpec& spec = input.specs[i];
    const ShardRule rule = plan.rule_for(spec.name);
    if (!ParameterShard(spec.name, spec.shape, rule, {input.degree, 0}).split()) continue;
    for (int t = 0; t < input.degree; ++t) {
      placements[i].shards.push_back(ParameterShard(spec.name, spec.shape, rule, {input.degree, t}).boxes());
    }
  }
  return placements;
}

void locate(RankLayout& layout, const RankPosition& position) {
  layout.tp = {.degree = position.degree,
               .rank = position.coordinate,
               .group = tensor_parallel_dimension().name,
               .sequence_parallel = position.options.settings.sp};
}

void check_settings(const ParallelSettings& settings, const ModelConfig& model) {
  const int64_t tp = settings.tp;
  check_positive("parallel.tp", tp);
  if (model.n_head % tp != 0) {
    fail("key 'parallel.tp' ({}) must divide model.n_head ({}): each tensor-parallel rank computes whole heads", tp,
         model.n_head);
  }
  if (model.kv_heads() % tp != 0) {
    fail("key 'parallel.tp' ({}) must divide the key/value heads (model.n_kv_head = {}): each tensor-parallel rank "
         "holds whole heads",
         tp, model.kv_heads());
  }
  if (settings.sp && tp == 1) {
    fail("key 'parallel.sp' needs parallel.tp > 1: the sequence is split over the tensor-parallel ranks");
  }
  if (settings.sp && model.block_size % tp != 0) {
    fail("key 'parallel.sp': model.block_size ({}) must be a multiple of parallel.tp ({}) to split the sequence",
         model.block_size, tp);
  }
  if (model.vocab_size < tp) {
    fail("key 'parallel.tp' ({}) exceeds model.vocab_size ({}): every rank needs vocabulary rows", tp,
         model.vocab_size);
  }
}

// Rows of the largest vocabulary-parallel shard of the token table (ceil(V / tp); no padding).
int64_t largest_vocab_shard(const ModelConfig& model, int tp) { return (model.vocab_size + tp - 1) / tp; }

std::string summarize(const DimensionSummaryInput& input) {
  const ModelConfig& model = input.model;
  return fmt::format("tensor parallel: {} ranks per layer (Megatron's split: QKV and MLP input projections by "
                     "columns, {} heads each; output projections by rows; the embedding and the loss by vocabulary "
                     "shards of up to {} rows){}; {:.2f}M parameters per rank\n",
                     input.degree, model.n_head / input.degree, largest_vocab_shard(model, input.degree),
                     input.options.settings.sp
                         ? fmt::format("; sequence parallel: norms and residuals on {} positions per rank",
                                       model.block_size / input.degree)
                         : "",
                     input.parameters_per_rank / 1e6);
}

}  // namespace

ParallelDimension tensor_parallel_dimension() {
  return {.name = "tp",
          .nesting = 0,
          .pass = split_layers,
          .place = place_shards,
          .locate = locate,
          .summarize = summarize,
          .keys = {settings_key<&TensorParallelSettings::tp>("tp"),
                   settings_key<&TensorParallelSettings::sp>("sp")},
          .check = check_settings};
}

}  // namespace strata
