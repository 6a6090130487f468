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

std::vector<HeldPiece> held_pieces(const std::vector<ParamSpec>& specs, const MeshPlacements& placements,
                                   const std::map<std::string, int, std::less<>>& at) {
  std::vector<HeldPiece> pieces;
  for (size_t i = 0; i < specs.size(); ++i) {
    HeldPiece piece{specs[i].shape, {{whole_box(specs[i].shape), std::vector<int64_t>(specs[i].shape.size(), 0)}}};
    bool split = false;
    for (const auto& [dimension, placed] : placements) {
      if (!placed[i].split()) continue;
      STRATA_CHECK(!split, "parameter '{}' is split along two dimensions", specs[i].name);
      split = true;
      piece.boxes = placed[i].shards.at(static_cast<size_t>(at.find(dimension)->second));
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
