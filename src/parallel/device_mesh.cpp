#include "parallel/device_mesh.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace strata {

namespace {

// A group across several dimensions is named by them, innermost first: "ep+dp".
std::string group_name(const std::vector<std::string>& dimensions) {
  return fmt::format("{}", fmt::join(dimensions, "+"));
}

}  // namespace

MeshShape::MeshShape(const std::map<std::string, int>& degrees) {
  for (const auto& [name, degree] : degrees) parallel_dimension(name);  // fails naming an unknown one
  for (const ParallelDimension& dimension : dimensions_innermost_first()) {
    const auto given = degrees.find(dimension.name);
    extents_.push_back({dimension.name, given == degrees.end() ? 1 : given->second});
  }
}

int MeshShape::size() const {
  int size = 1;
  for (const MeshExtent& extent : extents_) size *= extent.degree;
  return size;
}

int MeshShape::degree(std::string_view dimension) const {
  for (const MeshExtent& extent : extents_) {
    if (extent.dimension == dimension) return extent.degree;
  }
  fail("no parallel dimension '{}'", dimension);
}

std::vector<MeshExtent> MeshShape::named_extents() const {
  std::vector<MeshExtent> named;
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    const int at = degree(dimension.name);
    if (!dimension.named_when_set_only || at != 1) named.push_back({dimension.name, at});
  }
  return named;
}

std::string MeshShape::keys() const {
  const std::vector<MeshExtent> dimensions = named_extents();
  std::string text = dimensions.size() > 1 ? "keys " : "key ";
  for (size_t i = 0; i < dimensions.size(); ++i) {
    text += i == 0 ? "" : i + 1 == dimensions.size() ? " and " : ", ";
    text += fmt::format("'parallel.{}' ({})", dimensions[i].dimension, dimensions[i].degree);
  }
  return text;
}

MeshCoordinates coordinates_of(int rank, const MeshShape& shape) {
  STRATA_CHECK(rank >= 0 && rank < shape.size(), "rank {} outside a mesh of {}", rank, shape.size());
  MeshCoordinates coordinates;
  for (const MeshExtent& extent : shape.extents()) {
    coordinates[extent.dimension] = rank % extent.degree;
    rank /= extent.degree;
  }
  return coordinates;
}

int rank_at(const MeshCoordinates& coordinates, const MeshShape& shape) {
  int rank = 0, stride = 1;
  for (const MeshExtent& extent : shape.extents()) {
    const auto found = coordinates.find(extent.dimension);
    const int coordinate = found == coordinates.end() ? 0 : found->second;
    STRATA_CHECK(coordinate >= 0 && coordinate < extent.degree, "mesh coordinate {} = {} outside its degree {}",
                 extent.dimension, coordinate, extent.degree);
    rank += coordinate * stride;
    stride *= extent.degree;
  }
  return rank;
}

std::vector<int> group_ranks(int rank, const MeshShape& shape, std::string_view dimension) {
  const int degree = shape.degree(dimension);  // fails naming a dimension the mesh does not have
  MeshCoordinates coordinates = coordinates_of(rank, shape);
  std::vector<int> ranks;
  int& moving = coordinates.find(dimension)->second;
  for (moving = 0; moving < degree; ++moving) ranks.push_back(rank_at(coordinates, shape));
  return ranks;
}

DeviceMesh::DeviceMesh(const comm::Communicator& world, MeshShape shape) : world_(world), shape_(std::move(shape)) {
  const bool positive = std::all_of(shape_.extents().begin(), shape_.extents().end(),
                                    [](const MeshExtent& extent) { return extent.degree >= 1; });
  if (!positive || shape_.size() != world.size()) {
    fail("{} multiply to {} but the job has {} ranks", shape_.keys(), shape_.size(), world.size());
  }
  coordinates_ = coordinates_of(world.rank(), shape_);
  // A group is the ranks that differ only along its dimension: its color is the rank with that
  // coordinate zeroed, its order that coordinate.
  // Every rank splits in the same (registration) order.
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    const int first = group_ranks(world.rank(), shape_, dimension.name).front();
    groups_.emplace(dimension.name, world.split(first, coordinates_.at(dimension.name), dimension.name));
  }
  // Every combination of two or more batch-splitting dimensions (split now: every rank must).
  const std::vector<std::string> batch = batch_dimensions();
  for (size_t subset = 1; subset < (size_t{1} << batch.size()); ++subset) {
    std::vector<std::string> dimensions;
    for (size_t d = 0; d < batch.size(); ++d) {
      if (subset & (size_t{1} << d)) dimensions.push_back(batch[d]);
    }
    if (dimensions.size() < 2) continue;
    MeshCoordinates origin = coordinates_;
    int key = 0, stride = 1;
    for (const std::string& dimension : dimensions) {
      key += coordinates_.at(dimension) * stride;
      stride *= shape_.degree(dimension);
      origin[dimension] = 0;
    }
    const std::string name = group_name(dimensions);
    groups_.emplace(name, world.split(rank_at(origin, shape_), key, name));
  }
}

comm::Communicator& DeviceMesh::group_across(const std::vector<std::string>& dimensions) {
  STRATA_CHECK(!dimensions.empty(), "a mesh group across no dimension");
  // Dimensions of one coordinate add no ranks: the group is the others' (the data-parallel group of a
  // job without expert parallelism is the "dp" communicator, whatever names it).
  std::vector<std::string> spanning;
  for (const std::string& dimension : dimensions) {
    if (shape_.degree(dimension) > 1) spanning.push_back(dimension);
  }
  if (spanning.empty()) spanning.push_back(dimensions.back());
  return group(group_name(spanning));
}

comm::Communicator& DeviceMesh::group(std::string_view dimension) {
  const auto found = groups_.find(dimension);
  STRATA_CHECK(found != groups_.end(), "no mesh group '{}'", dimension);
  return found->second;
}

}  // namespace strata
