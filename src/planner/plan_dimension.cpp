#include "planner/plan_dimension.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "parallel/parallel_dimension.h"

namespace strata {

namespace {

// In the order the search nests them; registered parts go before data parallelism's.
std::vector<PlannerDimension> builtin_planner_dimensions() {
  return {expert_parallel_planning(), tensor_parallel_planning(), pipeline_planning(), context_parallel_planning(),
          data_parallel_planning()};
}

std::vector<PlannerDimension>& registered() {
  static std::vector<PlannerDimension> dimensions;
  return dimensions;
}

}  // namespace

std::vector<PlannerDimension> planner_dimensions() {
  std::vector<PlannerDimension> dimensions = builtin_planner_dimensions();
  const auto remaining = std::find_if(dimensions.begin(), dimensions.end(), [](const PlannerDimension& dimension) {
    return dimension.takes_remaining_devices;
  });
  std::vector<PlannerDimension> nested;
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    const auto named = [&](const PlannerDimension& part) { return part.name == dimension.name; };
    if (std::any_of(dimensions.begin(), dimensions.end(), named)) continue;
    const auto part = std::find_if(registered().begin(), registered().end(), named);
    // Without a part of its own, a dimension is planned at degree 1.
    nested.push_back(part != registered().end() ? *part
                                                : PlannerDimension{.name = dimension.name, .parallelism = dimension.name});
  }
  dimensions.insert(remaining, nested.begin(), nested.end());
  return dimensions;
}

void register_planner_dimension(PlannerDimension dimension) {
  parallel_dimension(dimension.name);  // fails naming an unregistered one
  std::vector<PlannerDimension> existing = builtin_planner_dimensions();
  existing.insert(existing.end(), registered().begin(), registered().end());
  for (const PlannerDimension& part : existing) {
    STRATA_CHECK(part.name != dimension.name, "planner dimension '{}' registered twice", dimension.name);
  }
  STRATA_CHECK(!dimension.takes_remaining_devices, "planner dimension '{}': data parallelism takes the devices left",
               dimension.name);
  registered().push_back(std::move(dimension));
}

void unregister_planner_dimension(std::string_view name) {
  std::vector<PlannerDimension>& dimensions = registered();
  const auto found = std::find_if(dimensions.begin(), dimensions.end(),
                                  [&](const PlannerDimension& dimension) { return dimension.name == name; });
  STRATA_CHECK(found != dimensions.end(), "planner dimension '{}' is not a registered one", name);
  dimensions.erase(found);
}

std::optional<std::string> not_run_by_strata(const ParallelPlan& plan) {
  std::string priced;
  for (const PlannerDimension& part : planner_dimensions()) {
    if (part.runtime_executes || plan.degree(part.name) == 1) continue;
    priced += fmt::format("{}{} parallelism ({}={})", priced.empty() ? "" : ", ", part.parallelism, part.name,
                          plan.degree(part.name));
  }
  if (priced.empty()) return std::nullopt;
  return priced + " is priced as other runtimes run it; Strata's runtime does not execute it";
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> result;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i != 0) continue;
    result.push_back(i);
    if (i != n / i) result.push_back(n / i);
  }
  std::sort(result.begin(), result.end());
  return result;
}

std::vector<int> divisors_of_devices(const PlanningProblem&, int devices) {
  std::vector<int> degrees;
  for (int64_t degree : divisors(devices)) degrees.push_back(static_cast<int>(degree));
  return degrees;
}

}  // namespace strata
