#include "parallel/parameter_placement.h"

#include <algorithm>

#include "parallel/device_mesh.h"

namespace strata {

bool ParameterPlacement::held_by(int coordinate) const {
  return holders.empty() || std::binary_search(holders.begin(), holders.end(), coordinate);
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
