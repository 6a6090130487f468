#include "parallel/parameter_placement.h"

#include <algorithm>

#include "core/error.h"

#include "parallel/device_mesh.h"

namespace strata {

bool ParameterPlacement::held_by(int coordinate) const {
  return holders.empty() || std::binary_search(holders.begin(), holders.end(), coordinate);
}

void HeldPiece::slice(const Tensor& whole, Tensor& piece) const {
  for (const ShardBox& box : boxes) copy_box(whole, box.full.offsets, piece, box.shard_offsets, box.full.lengths);
}

const std::string* splitting_dimension(const std::string& name, size_t index, const MeshPlacements& placements) {
  const std::string* split_by = nullptr;
  for (const auto& [dimension, placed] : placements) {
    if (!placed[index].split()) continue;
    if (split_by) fail("parameter '{}' is split along both '{}' and '{}': not supported yet", name, *split_by, dimension);
    split_by = &dimension;
  }
  return split_by;
}

std::vector<HeldPiece> held_pieces(const std::vector<ParamSpec>& specs, const MeshPlacements& placements,
                                   const std::map<std::string, int, std::less<>>& at) {
  std::vector<HeldPiece> pieces;
  for (size_t i = 0; i < specs.size(); ++i) {
    HeldPiece piece{specs[i].shape, {{whole_box(specs[i].shape), std::vector<int64_t>(specs[i].shape.size(), 0)}}};
    if (const std::string* split_by = splitting_dimension(specs[i].name, i, placements)) {
      piece.boxes = placements.find(*split_by)->second[i].shards.at(static_cast<size_t>(at.find(*split_by)->second));
      // The shard's extent: where its last box ends, along every dim.
      for (size_t d = 0; d < piece.shape.size(); ++d) {
        piece.shape[d] = 0;
        for (const ShardBox& box : piece.boxes) {
          piece.shape[d] = std::max(piece.shape[d], box.shard_offsets[d] + box.full.lengths[d]);
        }
      }
    }
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

MeshPlacements place_parameters(const MeshShape& mesh, const PlacementInput& input) {
  MeshPlacements placements;
  for (const MeshExtent& extent : mesh.extents()) {
    const ParallelDimension& dimension = parallel_dimension(extent.dimension);
    if (!dimension.place) {  // replicas: every coordinate holds every parameter whole
      placements[extent.dimension].assign(input.specs.size(), ParameterPlacement{});
      continue;
    }
    PlacementInput along = input;
    along.degree = extent.degree;
    placements[extent.dimension] = dimension.place(along);
  }
  return placements;
}

}  // namespace strata
