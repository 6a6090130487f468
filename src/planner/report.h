#pragma once
// Reports of a search: the ranked plans with their predictions, why each
// runner-up loses to the winner, and why the rejected regions were rejected;
// as text for people and JSON for tools and run directories.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/search.h"
#include "planner/uncertainty.h"

namespace strata {

// The largest differences between `other` and `winner`, in seconds, as
// phrases such as "+0.21 s tensor-parallel collectives".
std::vector<std::string> explain_difference(const Prediction& winner, const Prediction& other);

// "15.260 s", "434.62 ms", "3.1 us".
std::string seconds_text(double seconds);

nlohmann::json plan_json(const ParallelPlan& plan);
nlohmann::json prediction_json(const Prediction& prediction);
nlohmann::json problem_json(const PlanningProblem& problem);

// With `intervals` (of the first `top` ranked plans, planner/uncertainty.h): each plan's step-time interval, and
// which runners-up lie within the winner's interval.
std::string format_report(const CostModel& model, const SearchResult& result, size_t top,
                          const StepIntervals* intervals = nullptr);
nlohmann::json report_json(const CostModel& model, const SearchResult& result, size_t top,
                           const StepIntervals* intervals = nullptr);

}  // namespace strata
