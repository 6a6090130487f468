#include "planner/plan.h"

#include <fmt/format.h>

#include "core/error.h"
#include "planner/plan_dimension.h"

namespace strata {

double TimeBreakdown::total() const {
  // Term by term in this order, each dimension's innermost first: a sum's bits depend on its order.
  const InnermostFirst dimensions;
  double sum = compute + recompute;
  for (size_t position : dimensions) sum += comm.at(position);
  sum += zero_comm;
  sum += grad_accumulation;
  sum += bubble;
  for (size_t position : dimensions) sum += reduction.at(position);
  return sum + overlap_slowdown + fsdp_copies + param_gather + optimizer;
}

std::string ParallelPlan::describe() const {
  const std::vector<PlannerDimension> parts = planner_dimensions();
  // The dimensions' options, as each describes them, after the degrees or after the rest.
  auto options = [&](bool last) {
    std::string text;
    for (const PlannerDimension& part : parts) {
      if (!part.describe_options || part.options_described_last != last) continue;
      const std::string described = part.describe_options(*this);
      if (!described.empty()) text += " " + described;
    }
    return text;
  };
  return fmt::format("{}{} mb={}x{} zero={} recompute={}{}", degrees.describe(), options(false), micro_batch,
                     micro_batches, zero, recompute_mode_name(recompute), options(true));
}

}  // namespace strata
