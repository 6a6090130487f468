#include "ckpt/shard_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "parallel/tensor_parallel.h"

namespace strata {

std::vector<ShardPiece> checkpoint_pieces(const std::vector<ParamSpec>& specs, const ShardingPlan& plan,
                                          const MeshShape& mesh, const std::vector<std::vector<int>>& stage_holders) {
  STRATA_CHECK(stage_holders.size() == specs.size(), "stage holders of {} parameters for {}", stage_holders.size(),
               specs.size());
  std::vector<ShardPiece> pieces;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ShardRule rule = plan.rule_for(specs[i].name);
    const bool split = ParameterShard(specs[i].name, specs[i].shape, rule, {mesh.tp, 0}).split();
    for (int t = 0; t < (split ? mesh.tp : 1); ++t) {
      // The ranks holding this shard whole, in world order.
      std::vector<int> holders;
      for (int stage : stage_holders[i]) {
        for (int d = 0; d < mesh.dp; ++d) {
          for (int other = 0; other < mesh.tp; ++other) {
            if (!split || other == t) holders.push_back(rank_at({d, other, stage}, mesh));
          }
        }
      }
      STRATA_CHECK(!holders.empty(), "parameter '{}' is on no pipeline stage", specs[i].name);
      std::sort(holders.begin(), holders.end());
      const int writer = holders[(i + static_cast<size_t>(t)) % holders.size()];
      const std::vector<ParameterShard::Box> boxes = ParameterShard(specs[i].name, specs[i].shape, rule, {mesh.tp, t}).boxes();
      for (size_t b = 0; b < boxes.size(); ++b) {
        std::string key = split ? fmt::format("{}#tp{}.{}", specs[i].name, t, b) : specs[i].name;
        pieces.push_back({i, t, boxes[b].full, boxes[b].shard_offsets, writer, std::move(key)});
      }
    }
  }
  return pieces;
}

std::string rank_file(int world_rank) { return fmt::format("rank_{:05d}.safetensors", world_rank); }

}  // namespace strata
