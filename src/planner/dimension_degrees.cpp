#include "planner/dimension_degrees.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "parallel/device_mesh.h"
#include "parallel/parallel_dimension.h"

namespace strata {

DimensionDegrees::DimensionDegrees(int unset) { values_.fill(unset); }

int DimensionDegrees::operator[](std::string_view dimension) const { return values_[dimension_position(dimension)]; }

void DimensionDegrees::set(std::string_view dimension, int value) { values_[dimension_position(dimension)] = value; }

namespace {

// The registry itself (the same vector for the life of the program, dimensions added and removed in
// place), reached without a call per lookup: a plan's degrees are read many times a candidate.
const std::vector<ParallelDimension>& registry() {
  static const std::vector<ParallelDimension>& dimensions = parallel_dimensions();
  return dimensions;
}

// The dimensions a value is held for (a registration past the capacity fails when named).
size_t held_dimensions() { return std::min(registry().size(), DimensionDegrees::kCapacity); }

// Names are a few characters, compared here rather than by a library call each.
bool same_name(const std::string& name, std::string_view other) {
  if (name.size() != other.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] != other[i]) return false;
  }
  return true;
}

}  // namespace

int DimensionDegrees::product() const {
  int product = 1;
  for (size_t position = 0, held = held_dimensions(); position < held; ++position) product *= values_[position];
  return product;
}

int DimensionDegrees::least() const {
  return *std::min_element(values_.begin(), values_.begin() + static_cast<std::ptrdiff_t>(held_dimensions()));
}

int DimensionDegrees::batch_replicas() const {
  int replicas = 1;
  const std::vector<ParallelDimension>& dimensions = registry();
  for (size_t position = 0, held = held_dimensions(); position < held; ++position) {
    if (dimensions[position].splits_batch) replicas *= values_[position];
  }
  return replicas;
}

std::string DimensionDegrees::describe() const {
  std::string text;
  const std::vector<ParallelDimension>& dimensions = registry();
  for (size_t position = 0, held = held_dimensions(); position < held; ++position) {
    if (dimensions[position].named_when_set_only && values_[position] == 1) continue;
    text += fmt::format("{}{}={}", text.empty() ? "" : " ", dimensions[position].name, values_[position]);
  }
  return text;
}

double DimensionSeconds::operator[](std::string_view dimension) const {
  return values_[dimension_position(dimension)];
}

double& DimensionSeconds::operator[](std::string_view dimension) { return values_[dimension_position(dimension)]; }

void DimensionOptionValues::copy_dimension(size_t position, const DimensionOptionValues& other) {
  for (size_t option = 0; option < kPerDimension; ++option) set_at(position, option, other.at(position, option));
}

InnermostFirst::InnermostFirst() {
  const std::vector<ParallelDimension>& dimensions = registry();
  // Insertion by nesting, stable: dimensions of equal nesting keep their registration order, as the mesh's.
  for (size_t position = 0, held = held_dimensions(); position < held; ++position) {
    size_t at = count_++;
    for (; at > 0 && dimensions[positions_[at - 1]].nesting > dimensions[position].nesting; --at) {
      positions_[at] = positions_[at - 1];
    }
    positions_[at] = position;
  }
}

DimensionDegrees degrees_of(const MeshShape& mesh) {
  DimensionDegrees degrees;
  for (const MeshExtent& extent : mesh.extents()) degrees.set(extent.dimension, extent.degree);
  return degrees;
}

std::string degrees_product_name() {
  std::string text;
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    text += (text.empty() ? "" : " x ") + dimension.name;
  }
  return text;
}

size_t dimension_position(std::string_view dimension) {
  const std::vector<ParallelDimension>& dimensions = registry();
  for (size_t position = 0; position < dimensions.size(); ++position) {
    if (!same_name(dimensions[position].name, dimension)) continue;
    STRATA_CHECK(position < DimensionDegrees::kCapacity, "the planner holds {} parallel dimensions; '{}' is one more",
                 DimensionDegrees::kCapacity, dimension);
    return position;
  }
  fail("no parallel dimension '{}'", dimension);
}

}  // namespace strata
