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

const std::vector<ParallelDimension>& priced() {
  static const std::vector<ParallelDimension>& dimensions = priced_only_dimensions();
  return dimensions;
}

// The first position of the priced-only dimensions (the top of the capacity).
size_t priced_base() { return DimensionDegrees::kCapacity - priced().size(); }

// The runtime's dimensions a value is held for (a registration past the capacity fails when named).
size_t held_registered() { return std::min(registry().size(), priced_base()); }

// Every held dimension with its position: the runtime's, then the priced-only ones.
template <class Visit>
void visit_held(Visit visit) {
  const std::vector<ParallelDimension>& registered = registry();
  for (size_t position = 0, held = held_registered(); position < held; ++position) visit(position, registered[position]);
  const std::vector<ParallelDimension>& extra = priced();
  for (size_t i = 0; i < extra.size(); ++i) visit(priced_base() + i, extra[i]);
}

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
  visit_held([&](size_t position, const ParallelDimension&) { product *= values_[position]; });
  return product;
}

int DimensionDegrees::least() const {
  int least = values_[0];
  visit_held([&](size_t position, const ParallelDimension&) { least = std::min(least, values_[position]); });
  return least;
}

int DimensionDegrees::batch_replicas() const {
  int replicas = 1;
  visit_held([&](size_t position, const ParallelDimension& dimension) {
    if (dimension.splits_batch) replicas *= values_[position];
  });
  return replicas;
}

std::string DimensionDegrees::describe() const {
  std::string text;
  visit_held([&](size_t position, const ParallelDimension& dimension) {
    if (dimension.named_when_set_only && values_[position] == 1) return;
    text += fmt::format("{}{}={}", text.empty() ? "" : " ", dimension.name, values_[position]);
  });
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
  std::array<int, DimensionDegrees::kCapacity> nesting{};
  // Insertion by nesting, stable: dimensions of equal nesting keep their order (the runtime's registration order,
  // as the mesh's; a priced-only dimension after the registered one it nests beside).
  visit_held([&](size_t position, const ParallelDimension& dimension) {
    nesting[position] = dimension.nesting;
    size_t at = count_++;
    for (; at > 0 && nesting[positions_[at - 1]] > dimension.nesting; --at) positions_[at] = positions_[at - 1];
    positions_[at] = position;
  });
}

std::vector<PlannedDimension> planned_dimensions() {
  std::vector<PlannedDimension> dimensions;
  visit_held([&](size_t position, const ParallelDimension& dimension) { dimensions.push_back({position, &dimension}); });
  return dimensions;
}

const ParallelDimension& planned_dimension_at(size_t position) {
  if (position >= priced_base()) return priced().at(position - priced_base());
  return registry().at(position);
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
    STRATA_CHECK(position < priced_base(), "the planner holds {} parallel dimensions; '{}' is one more",
                 DimensionDegrees::kCapacity, dimension);
    return position;
  }
  const std::vector<ParallelDimension>& extra = priced();
  for (size_t i = 0; i < extra.size(); ++i) {
    if (same_name(extra[i].name, dimension)) return priced_base() + i;
  }
  fail("no parallel dimension '{}'", dimension);
}

}  // namespace strata
