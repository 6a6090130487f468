#include "ckpt/shard_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "parallel/pipeline_parallel.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tensor_parallel_group.h"

namespace strata {

std::vector<ShardPiece> checkpoint_pieces(const std::vector<ParamSpec>& specs, const ShardingPlan& plan,
                                          const MeshShape& mesh, const std::vector<std::vector<int>>& stage_holders) {
  STRATA_CHECK(stage_holders.size() == specs.size(), "stage holders of {} parameters for {}", stage_holders.size(),
               specs.size());
  const std::string& split_by = tensor_parallel_dimension().name;
  const std::string& staged_by = pipeline_parallel_dimension().name;
  const int degree = mesh.degree(split_by);
  std::vector<MeshCoordinates> coordinates;
  for (int rank = 0; rank < mesh.size(); ++rank) coordinates.push_back(coordinates_of(rank, mesh));
  std::vector<ShardPiece> pieces;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ShardRule rule = plan.rule_for(specs[i].name);
    const bool split = ParameterShard(specs[i].name, specs[i].shape, rule, {degree, 0}).split();
    const std::vector<int>& stages = stage_holders[i];
    for (int t = 0; t < (split ? degree : 1); ++t) {
      // The ranks holding this shard whole (replicas along every other dimension), in world order.
      std::vector<int> holders;
      for (int rank = 0; rank < mesh.size(); ++rank) {
        const MeshCoordinates& at = coordinates[static_cast<size_t>(rank)];
        const bool on_stage = std::find(stages.begin(), stages.end(), at.at(staged_by)) != stages.end();
        if (on_stage && (!split || at.at(split_by) == t)) holders.push_back(rank);
      }
      STRATA_CHECK(!holders.empty(), "parameter '{}' is on no pipeline stage", specs[i].name);
      const int writer = holders[(i + static_cast<size_t>(t)) % holders.size()];
      const std::vector<ParameterShard::Box> boxes =
          ParameterShard(specs[i].name, specs[i].shape, rule, {degree, t}).boxes();
      for (size_t b = 0; b < boxes.size(); ++b) {
        std::string key = split ? fmt::format("{}#{}{}.{}", specs[i].name, split_by, t, b) : specs[i].name;
        pieces.push_back({i, t, boxes[b].full, boxes[b].shard_offsets, writer, std::move(key)});
      }
    }
  }
  return pieces;
}

std::string rank_file(int world_rank) { return fmt::format("rank_{:05d}.safetensors", world_rank); }

}  // namespace strata
