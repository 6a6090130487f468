#include "parallel/parallel_dimension.h"

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/pipeline_parallel.h"
#include "parallel/tensor_parallel_dimension.h"

namespace strata {

namespace {

// Each built-in dimension's facts live with it; this list is where they join the mesh.
std::vector<ParallelDimension> builtin_dimensions() {
  return {data_parallel_dimension(), tensor_parallel_dimension(), pipeline_parallel_dimension(),
          expert_parallel_dimension()};
}

std::vector<ParallelDimension>& registry() {
  static std::vector<ParallelDimension> dimensions = builtin_dimensions();
  return dimensions;
}

}  // namespace

const std::vector<ParallelDimension>& parallel_dimensions() { return registry(); }

std::vector<ParallelDimension> dimensions_innermost_first() {
  std::vector<ParallelDimension> dimensions = registry();
  std::stable_sort(dimensions.begin(), dimensions.end(),
                   [](const ParallelDimension& a, const ParallelDimension& b) { return a.nesting < b.nesting; });
  return dimensions;
}

void register_parallel_dimension(ParallelDimension dimension) {
  for (const ParallelDimension& existing : registry()) {
    STRATA_CHECK(existing.name != dimension.name, "parallel dimension '{}' registered twice", dimension.name);
  }
  registry().push_back(std::move(dimension));
}

void unregister_parallel_dimension(std::string_view name) {
  std::vector<ParallelDimension>& dimensions = registry();
  const auto builtins = static_cast<std::ptrdiff_t>(builtin_dimensions().size());
  const auto found = std::find_if(dimensions.begin() + builtins, dimensions.end(),
                                  [&](const ParallelDimension& dimension) { return dimension.name == name; });
  STRATA_CHECK(found != dimensions.end(), "parallel dimension '{}' is not a registered one", name);
  dimensions.erase(found);
}

std::vector<std::string> batch_dimensions() {
  std::vector<std::string> names;
  for (const ParallelDimension& dimension : dimensions_innermost_first()) {
    if (dimension.splits_batch) names.push_back(dimension.name);
  }
  return names;
}

const ParallelDimension& parallel_dimension(std::string_view name) {
  for (const ParallelDimension& dimension : registry()) {
    if (dimension.name == name) return dimension;
  }
  fail("no parallel dimension '{}'", name);
}

}  // namespace strata
