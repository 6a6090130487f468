#include "ckpt/shard_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

std::vector<ShardPiece> checkpoint_pieces(const std::vector<ParamSpec>& specs, const MeshShape& mesh,
                                          const MeshPlacements& placements) {
  std::vector<MeshCoordinates> coordinates;
  for (int rank = 0; rank < mesh.size(); ++rank) coordinates.push_back(coordinates_of(rank, mesh));
  for (const auto& [dimension, placed] : placements) {
    STRATA_CHECK(placed.size() == specs.size(), "'{}' places {} parameters of {}", dimension, placed.size(),
                 specs.size());
  }
  std::vector<ShardPiece> pieces;
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string* split_by = splitting_dimension(specs[i].name, i, placements);
    const int shards = split_by ? static_cast<int>(placements.find(*split_by)->second[i].shards.size()) : 1;
    for (int t = 0; t < shards; ++t) {
      // The ranks holding this shard whole (replicas along every other dimension), in world order.
      std::vector<int> holders;
      for (int rank = 0; rank < mesh.size(); ++rank) {
        const MeshCoordinates& at = coordinates[static_cast<size_t>(rank)];
        bool holds = true;
        for (const auto& [dimension, placed] : placements) {
          const int coordinate = at.find(dimension)->second;
          holds = holds && placed[i].held_by(coordinate) && (!placed[i].split() || coordinate == t);
        }
        if (holds) holders.push_back(rank);
      }
      STRATA_CHECK(!holders.empty(), "parameter '{}' is held by no rank", specs[i].name);
      const int writer = holders[(i + static_cast<size_t>(t)) % holders.size()];
      if (!split_by) {
        pieces.push_back({i, "", 0, whole_box(specs[i].shape), std::vector<int64_t>(specs[i].shape.size(), 0), writer,
                          specs[i].name});
        continue;
      }
      const std::vector<ShardBox>& boxes = placements.find(*split_by)->second[i].shards[static_cast<size_t>(t)];
      for (size_t b = 0; b < boxes.size(); ++b) {
        pieces.push_back({i, *split_by, t, boxes[b].full, boxes[b].shard_offsets, writer,
                          fmt::format("{}#{}{}.{}", specs[i].name, *split_by, t, b)});
      }
    }
  }
  return pieces;
}

std::string rank_file(int world_rank) { return fmt::format("rank_{:05d}.safetensors", world_rank); }

}  // namespace strata
