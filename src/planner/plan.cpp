#include "planner/plan.h"

#include <fmt/format.h>

#include "core/error.h"

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
  std::string text = fmt::format("{}{} mb={}x{} zero={} recompute={}", degrees.describe(), sp ? " sp" : "",
                                 micro_batch, micro_batches, zero, recompute_mode_name(recompute));
  // The pipeline's schedule, which has no effect on one stage.
  if (degree("pp") > 1) {
    text += fmt::format(" {}", schedule_name(schedule));
    if (schedule == PipelineSchedule::Interleaved) text += fmt::format(" v={}", virtual_stages);
  }
  return text;
}

}  // namespace strata
